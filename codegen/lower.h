/* lower.h: the loop-nest form that both renderers (CUDA C and plain C) share.
 *
 * Lowering turns a fused, planned graph (after the fuse and memplan passes)
 * into a program: for each kernel, the steps that compute it, and for every
 * value that lives in memory, where it lives.  Everything a renderer needs
 * to decide is decided here, once, so the two renderers differ only in how
 * they spell loops, threads and library calls (docs/codegen.md):
 *
 *   nest      a loop nest over an iteration domain (a shape).  Its axes are
 *             split into outer axes, each point of which is independent (a
 *             thread or a block on the GPU, an OpenMP iteration on the CPU),
 *             and inner axes walked in one or more sweeps: in a row kernel
 *             (layernorm, softmax) the inner axis is the row, and each sweep
 *             finishes reductions that the next sweep reads (the mean before
 *             the variance).  An elementwise nest has one sweep over its
 *             last axis.  Which node is computed at which loop depth follows
 *             from its shape: a value that does not vary along the inner
 *             axes is computed once per outer point, one that varies along
 *             nothing once per nest.
 *   gemm      a matmul, as a BLAS/cuBLASLt call with strides; its epilogue
 *             is a nest that follows it.
 *   flash     the flash attention forward or backward (codegen/flash.h).
 *   scatter   scatter_add: zero the table (or copy the initial table into
 *             it, or update the initial table's buffer in place), add rows
 *             in a fixed order.
 *
 * Steps of one kernel carry a wave number: steps of a wave are independent
 * of each other (one CUDA launch holds them all: the multi-tensor optimizer),
 * and a wave reads what earlier waves wrote. */
#ifndef TG_LOWER_H
#define TG_LOWER_H

#include "flash.h"
#include "ir.h"

/* Where a materialised value lives. */
typedef enum tg_place {
  TG_PLACE_NONE,    /* not in memory: computed where it is read */
  TG_PLACE_LEAF,    /* a param, input or state: the runtime owns it */
  TG_PLACE_ARENA,   /* an intermediate planned by memplan */
  TG_PLACE_SCRATCH, /* an intermediate only its own kernel reads (a matmul
                     * product before its epilogue, a per-tensor sum) */
} tg_place;

typedef struct tg_storage {
  tg_place place;
  int leaf;       /* TG_PLACE_LEAF: index into tg_program.leaves */
  int64_t offset; /* TG_PLACE_ARENA / SCRATCH: bytes from the start */
} tg_storage;

/* A view of a value in memory as strides: element (c0, c1, ...) of the
 * view is at offset + sum(ci * stride[i]) elements of the base value. */
typedef struct tg_layout {
  int base;                  /* graph position of the materialised value */
  int64_t offset;
  int64_t stride[TG_MAX_RANK];
} tg_layout;

typedef struct tg_sweep {
  int *reduce, n_reduce; /* sum/max nodes finished by this sweep */
  int *store, n_store;   /* values stored from inside it (vary along inner axes) */
} tg_sweep;

typedef struct tg_nest {
  tg_type dom;            /* iteration domain */
  uint32_t inner;         /* bit set of the inner axes */
  int outer_axes[TG_MAX_RANK], n_outer;
  int inner_axes[TG_MAX_RANK], n_inner;
  int64_t outer_count;    /* points of the outer axes (1 when none) */
  int64_t inner_count;    /* points of the inner axes (1 when none) */
  tg_sweep *sweeps;
  int n_sweeps;
  int *post, n_post;      /* stores once per outer point, after the sweeps */
  /* Row groups (a row kernel that also sums columns over its rows: the
   * fuse pass's row-group kernels, layernorm's backward with dγ and dβ):
   * the outer points are walked `group` consecutive ones at a time, by one
   * CUDA block or one OpenMP iteration, and each column sum colsum[i] (a
   * sum over axis 1 of a [outer/group, group, inner] reshape of a value of
   * the domain) is accumulated per inner point over the group's rows, in
   * row order, inside sweep colsum_sweep[i] (from 1), and stored once per
   * group at [group index, inner point].  group is 0 in other nests. */
  int64_t group;
  int *colsum, *colsum_sweep, n_colsum;
} tg_nest;

typedef struct tg_gemm {
  int node;               /* the matmul */
  int out;                /* the value D is written to: the matmul, or the
                           * bias add folded into it (bias >= 0) */
  int bias;               /* a bias vector over the output's columns that the
                           * GEMM adds (cuBLASLt's BIAS epilogue), or -1 */
  int aux;                /* with gelu: where product + bias is stored (the
                           * GELU's input, for the backward); with dgelu, where
                           * it is read from; else -1 */
  bool gelu;              /* out = GELU(product + bias), tanh form (GELU_AUX_BIAS) */
  bool dgelu;             /* out = product * gelu_grad(aux), GELU's backward (DGELU);
                           * aux is read, the output's shape and leading dim */
  int bgrad;              /* where the GEMM also writes the sums over k of one
                           * operand's columns (a bias's gradient: cuBLASLt's
                           * BGRADA or BGRADB; lower.c, fold_bgrad), or -1 */
  bool bgrad_of_a;        /* that operand is a (summed over its columns k, one
                           * sum per row of the product); else b (one sum per
                           * column) */
  int after;              /* the last step copying an operand to scratch, or -1 */
  int64_t m, n, k;        /* per product */
  int64_t batch;          /* products (1 when the batch folds into m) */
  bool trans_a, trans_b;  /* operand stored transposed (column-major) */
  int64_t lda, ldb, ldc;  /* leading dims of the row-major view */
  tg_layout a, b;         /* operand views; element (i, k) at offset + i*s0 + k*s1 */
  int64_t a_off, b_off;   /* element offsets of product 0 */
  /* product p's operands start at a_off + sum_j bcoord_j * a_bstride[j], etc;
   * bcoord is p unravelled over batch_dims */
  int batch_rank;
  int64_t batch_dims[TG_MAX_RANK];
  int64_t a_bstride[TG_MAX_RANK], b_bstride[TG_MAX_RANK], c_bstride[TG_MAX_RANK];
} tg_gemm;

/* tg_program.step_of of a value an earlier kernel's GEMM writes. */
enum { TG_STEP_ELSEWHERE = -2 };

/* COLLECTIVE: an all_reduce, all_gather or reduce_scatter (node), which no
 * generated code computes: the step's entry point hands it to the backend
 * at its collective point (codegen/c/step_abi.h; the CUDA plan's
 * TG_CUDA_OP_COLLECTIVE), which moves the input's memory to the output's
 * between the ranks (tg_collective_operands). */
typedef enum tg_step_kind {
  TG_STEP_NEST, TG_STEP_GEMM, TG_STEP_FLASH_FWD, TG_STEP_FLASH_BWD, TG_STEP_SCATTER, TG_STEP_COLLECTIVE
} tg_step_kind;

typedef struct tg_step {
  tg_step_kind kind;
  int wave;
  tg_nest nest;           /* NEST; SCATTER: outer = the table's row axes, inner = idx's axes */
  tg_gemm gemm;           /* GEMM */
  tg_flash_shape flash;   /* FLASH_*: strides relative to each operand's base */
  int flash_args[9];      /* FLASH_*: base values of q k v o lse do dq dk dv (-1: unused) */
  int node;               /* SCATTER: the scatter_add; COLLECTIVE: the collective;
                           * FLASH_*: an op of it; a NEST
                           * that copies a view for a matmul: the view; else -1 */
  const char *fn;         /* the generated function's name */
  int64_t table_rows;     /* SCATTER: the table's rows (dim 0) */
  bool in_place;          /* SCATTER with an initial table: the table is that
                           * table's buffer, updated in place (lower.c:
                           * find_in_place_scatters); else it is zeroed, or
                           * the initial table copied into it */
} tg_step;

typedef struct tg_lkernel {
  int kernel;             /* index into g->kernels */
  tg_step *steps;
  int n_steps, n_waves;
  int *args, n_args;      /* every base value the kernel reads or writes, in order */
  bool *arg_read;         /* per arg: the kernel reads it */
  bool *arg_written;      /* per arg: the kernel writes it */
  int folded_into;        /* -1, or the kernel whose GEMM computes what this
                           * one's ops did (a bias gradient's sum: lower.c,
                           * fold_bgrad); this one then has no steps */
} tg_lkernel;

typedef struct tg_program {
  const tg_graph *g;
  tg_storage *store;      /* per graph position */
  bool *remat;            /* per graph position: a kernel output its readers
                           * recompute from values still in memory instead of
                           * loading it, so it is never stored (lower.c) */
  const int **order;      /* per graph position: NULL (row-major), or the
                           * order its axes are laid out in memory, outermost
                           * first (flash attention's output: [B, T, H, D]
                           * for a [B, H, T, D] value, so that the heads side
                           * by side are a plain [B·T, C] matrix) */
  bool *holds_gelu_grad;  /* per graph position: a value its kernel stores as
                           * gelu_grad of itself, for the backward's gelu_grad
                           * nodes, its only readers elsewhere, to load
                           * (lower.c: store_gelu_grads; without recomputation
                           * only); NULL: none */
  int *step_of;           /* per graph position: the step computing it in its
                           * kernel, or -1 (leaves, views, inlined values), or
                           * TG_STEP_ELSEWHERE: in memory, written by an
                           * earlier kernel's GEMM (tg_gemm.bgrad) */
  tg_lkernel *kernels;
  int n_kernels;
  int *leaves, n_leaves;  /* graph positions of the input/param/state leaves
                           * something reads (lower.c: a leaf nothing reads
                           * has no memory) */
  int *leaf_index;        /* per graph position: its index in leaves, or -1 */
  int64_t arena_bytes, scratch_bytes;
} tg_program;

/* Lowers a graph after fuse and memplan.  What cannot be lowered (a layout
 * BLAS cannot take, an in-place update that a later read would see) is
 * reported through ctx and bails. */
tg_program *tg_lower(tg_ctx *ctx, const tg_graph *g);
/* What the lowering recomputes in readers instead of storing (lower.c,
 * "recomputing"). */
typedef enum {
  TG_REMAT_NONE,      /* store every value another kernel reads */
  TG_REMAT_ALL,       /* recompute epilogue and layernorm intermediates, and
                       * fold bias, GELU and bias gradients into the GEMMs'
                       * epilogues: worth it on a GPU, where the step is
                       * memory-bound */
  TG_REMAT_CHEAP,     /* recompute only what adds and multiplies remake: on
                       * a CPU recomputing a tanh, exp or division costs more
                       * than the stores it saves */
} tg_remat;

/* The same, choosing what is recomputed. */
tg_program *tg_lower_ex(tg_ctx *ctx, const tg_graph *g, tg_remat remat);

/* The view `n` (a chain of views over a materialised value) as strides;
 * false when a reshape breaks the strided form. */
bool tg_layout_of(const tg_program *p, const tg_node *n, tg_layout *out);

/* The index of base value `node` in lk->args (kept in ascending order, so
 * a binary search: the optimizer's kernel has four arguments per
 * parameter, looked up for each of its steps), or -1. */
int tg_lkernel_arg(const tg_lkernel *lk, long node);

/* The kernel k's collective (a kernel of one TG_STEP_COLLECTIVE step), or
 * NULL: a collective kernel is the backend's to run, at its point. */
const tg_node *tg_kernel_collective(const tg_program *p, int k);
/* Where a collective's input and output are: element offsets into their
 * base values' memory (each contiguous, lower.c checks), and the count of
 * elements each holds. */
typedef struct tg_collective_operands {
  tg_layout in, out;
  int64_t in_numel, out_numel;
} tg_collective_operands;
tg_collective_operands tg_collective_operands_of(const tg_program *p, const tg_node *n);

/* Does the value vary along domain axis `axis` (its shape broadcast into dom)? */
bool tg_varies(const tg_type *t, const tg_type *dom, int axis);

/* The C element type a dtype is stored as ("float", "unsigned short", ...). */
const char *tg_storage_ctype(tg_dtype t);
/* The C type values of a dtype are computed in (bf16/f16 in float). */
const char *tg_compute_ctype(tg_dtype t);

#endif
