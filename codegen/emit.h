/* emit.h: the statements of a nest, shared by the C and CUDA renderers.
 *
 * The loop-nest form (lower.h) says which values a nest computes, stores
 * and reduces; this turns it into C statements that are valid in both C11
 * and CUDA C++ (temporaries, loads with strided offsets, stores), cut into
 * segments at the sweeps' loops.  A renderer prints the segments inside
 * its own loops: OpenMP loops on the CPU, threads and blocks on the GPU.
 *
 * Names the statements use, which the renderer must define:
 *   i0..i7          the domain coordinates (tg_idx), outer ones before the
 *                   segments, inner ones at the top of each loop body
 *                   (tg_nest_coords prints them)
 *   bN              the pointer to base value %N (a kernel argument)
 *   tg_inf()        +infinity as float
 *   tg_exp(x), tg_tanh(x)  e^x and tanh x in float (the C prelude's
 *                   versions vectorise; libm's do not)
 *   tg_bf16_load(x) tg_bf16_store(f), tg_f16_load(x), tg_f16_store(f)
 * and every value is a `const` local named tN (value %N) or uK (an
 * unnamed temporary). */
#ifndef TG_EMIT_H
#define TG_EMIT_H

#include <stdio.h>

#include "lower.h"
#include "sbuf.h"


typedef struct tg_reduction {
  int node;            /* the sum or max */
  bool is_max;
  const char *value;   /* the expression to fold in (0 or -inf where guarded off) */
  const char *ctype;   /* the accumulator's type */
  const char *round;   /* the function rounding the result to a narrow
                        * float dtype ("tg_bf16_round"), or "" */
} tg_reduction;

typedef struct tg_segment {
  bool loop;           /* false: statements at the outer level */
  char *text;          /* statements (outer level), or the loop body */
  tg_reduction *red;   /* loop: reductions folded in each iteration; after
                        * the loop the renderer defines tN (N = node) as the
                        * reduced value */
  int n_red;
  bool ordered;        /* loop: iterations must run in order (a scatter) */
  tg_reduction *col;   /* loop: column sums of a row-group nest (lower.h)
                        * folded in each iteration: the renderer adds value
                        * to col<node>[j], its running sum over the
                        * group's rows */
  int n_col;
} tg_segment;

/* A base value in memory that the statements read or write, for the
 * traffic report (traffic.h): what the code really touches. */
typedef struct tg_access {
  int base;            /* graph position of the base value */
  int64_t offset;      /* element offset of the view (a slice of it) */
  int64_t elements;    /* distinct elements of the view: the product of the
                        * dims it does not broadcast */
  int64_t bytes;       /* elements x the base's dtype size */
  int sweep;           /* 0: once per outer point (or once); k: inside the
                        * k-th sweep of the inner axes, so a row read in
                        * two sweeps is two accesses */
  bool write;
} tg_access;

typedef struct tg_nest_code {
  char *uniform;       /* before everything: values that vary along no axis */
  char *outer_coords;  /* defines the outer coordinates from `o` */
  char *inner_coords;  /* defines the inner coordinates from `j` */
  char *lead_coords;   /* the outer coordinates but the last, from `lead`
                        * (their flat index), and ... */
  char *last_coord;    /* ... the last outer one from `c`: a column loop's
                        * coordinates without a division per element */
  tg_segment *seg;
  int n_seg;
  char *post_only;     /* stores once per outer point (one thread does them) */
  char *col_store;     /* a row-group nest's column sums stored, after its
                        * rows: the body of a loop over the inner points j,
                        * with tg_g the group's index */
  int vec;             /* points of the inner axis one loop body computes
                        * (4 in CUDA elementwise nests: float4 loads) */
  tg_access *access;   /* every load and store of the statements, once per
                        * base, view and sweep */
  int n_access;
  /* The row cache (CUDA reduction nests of several sweeps): a value a
   * later sweep needs is kept from the sweep that computed it instead of
   * being loaded and computed again.  ROW_CACHE_REGS: in a per-thread
   * register array r<N>[u], the sweeps walking the row in `row_regs`
   * unrolled steps of the block (j = threadIdx.x + u * 256); ROW_CACHE_SHARED:
   * rows too long for registers, in dynamic shared memory indexed by j
   * (each thread reads back only what it wrote: no barrier needed). */
  enum { TG_ROW_CACHE_NONE, TG_ROW_CACHE_REGS, TG_ROW_CACHE_SHARED } row_cache;
  int row_regs;        /* REGS: unrolled steps of a sweep (inner points / 256, rounded up) */
  char *cache_decl;    /* declarations to print before the segments */
  int64_t shared_bytes; /* SHARED: dynamic shared memory the launch needs */
  /* CUDA scatters (tg_cuda_scatter_rows): the statements defining the
   * index of source row j (after the inner coordinates) and its value */
  char *index_code, *index_value;
  /* ... and the initial table's element (v, the outer point) that a
   * scatter onto a copy of it starts from; NULL: zeros, or in place */
  char *init_value;
  /* ... and whether the block sums its rows in shared memory, the float
   * array tg_scatter_acc (rows x columns, row v0 first); then the
   * statements only compute the value of source row j at column o,
   * scatter_value, and its element of tg_scatter_acc, scatter_offset, and
   * cuda_kernels.c adds (to load several rows before adding any); else the
   * statements add to the table in global memory */
  bool scatter_shared;
  char *scatter_value, *scatter_offset;
} tg_nest_code;


typedef enum tg_dialect { TG_DIALECT_C, TG_DIALECT_CUDA } tg_dialect;

/* The lanes tg_emit_nest gives step st in dialect d: 4 for a CUDA
 * elementwise nest whose single inner axis has a multiple of 4 points (its
 * body then covers inner points j .. j+3, j a multiple of 4), else 1. */
int tg_nest_vec_width(const tg_step *st, tg_dialect d);

/* Limits of the row cache: registers while a sweep takes at most 8 steps
 * of the block and the cached values take at most 64 registers; shared
 * memory up to 110 KiB a block, so that two blocks fit on an SM of an
 * H100 (228 KiB) and a launch keeps 16 warps resident. */
enum { TG_ROW_CACHE_MAX_STEPS = 8, TG_ROW_CACHE_MAX_REGS = 64, TG_ROW_CACHE_MAX_SHARED = 110 * 1024 };

/* A CUDA reduction nest whose domain's last (contiguous) axis is an outer
 * axis: a column reduction (a bias gradient, layernorm's dgamma).  Its
 * blocks take TG_COLUMN_TILE consecutive outer points (columns) and split
 * the inner points among TG_COLUMN_TILE row groups, so that a warp's loads
 * are two runs of 16 consecutive elements, not 32 rows.  Needs the outer
 * points to be a multiple of the tile (else: a block per outer point). */
enum { TG_COLUMN_TILE = 16 };
bool tg_cuda_column_nest(const tg_step *st);

/* A CUDA scatter_add (the embedding's gradient) without atomics and in a
 * fixed order: each block owns this many consecutive rows of the table and
 * every column of them; it zeroes its rows, then walks the indices 256 at
 * a time, gathers (warp votes, in order) the source rows whose index falls
 * in its rows, and adds them column by column in index order.  The rows a
 * block owns: as many as keep at least 4 x 132 blocks, at most 64, and, if
 * a row has at most TG_SCATTER_SHARED_FLOATS columns, at most as many as
 * fit in that many floats: an f32 table's block then sums its rows in
 * shared memory (32 KiB), not with a read and a write of global memory per
 * source row.  That matters because the indices are words: a block whose
 * rows hold a common word ("," or a newline: a tenth of a batch) adds
 * thousands of source rows one after another while the others are done. */
enum { TG_SCATTER_SHARED_FLOATS = 8192 };
int64_t tg_cuda_scatter_rows(const tg_step *st);

/* The statements of step s (a nest or a scatter) of kernel lk. */
void tg_emit_nest(const tg_program *p, const tg_lkernel *lk, int s, tg_dialect d, tg_nest_code *out);
void tg_nest_code_free(tg_nest_code *c);

/* The parameter list of kernel lk's functions: "TG_ARG(float) b12, ..." in
 * CUDA (flash_cuda.h: tg_cuda_emit_memory_macros), "float *restrict b12, ..." in
 * C (pointers to every base value it touches; inputs const). */
void tg_emit_params(tg_sbuf *b, const tg_program *p, const tg_lkernel *lk, tg_dialect d);
/* What tg_emit_param_decl needs: the kernel whose parameters it declares,
 * the dialect, and the arena the declarations live in. */
typedef struct tg_param_ctx {
  tg_arena *a;
  const tg_program *p;
  const tg_lkernel *lk;
  tg_dialect d;
} tg_param_ctx;
/* The type buffer b<node> has as one of lk's parameters, without its name
 * ("TG_ARG(const float)" in CUDA, "const float *restrict" in C), or NULL
 * when b<node> is not one: a tg_buf_decl (canon.h) whose ctx is a
 * tg_param_ctx. */
const char *tg_emit_param_decl(void *ctx, long node);
/* A comment naming the kernel, its kind and the ops it fuses with their
 * .tg lines. */
void tg_emit_kernel_comment(tg_sbuf *b, const tg_program *p, const tg_lkernel *lk);
/* Each line of text (statements from tg_nest_code) printed with indent
 * before it; NULL prints nothing. */
void tg_emit_lines(FILE *out, const char *text, const char *indent);
/* A float literal that reads back exactly ("0.5f", "-tg_inf()"). */
void tg_emit_float(tg_sbuf *b, double v);

#endif
