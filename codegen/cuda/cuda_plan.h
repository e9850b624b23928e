/* cuda_plan.h: what runs on the GPU, in order, for a lowered program: every
 * kernel launch, every cuBLASLt matmul and every all-reduce point
 * (cuda_plan.c).
 *
 * One description serves two readers: the manifest that `tgc --emit cuda`
 * writes for a person (render_cuda.h) and the CUDA backend that executes it
 * (runtime/backend/cuda), so that what the manifest says is what runs.  The
 * plan is made from the program alone (lower.h) and is deterministic. */
#ifndef TG_CUDA_PLAN_H
#define TG_CUDA_PLAN_H

#include "lower.h"

typedef enum tg_cuda_op_kind {
  TG_CUDA_LAUNCH,    /* a __global__ function of the generated .cu */
  TG_CUDA_MATMUL,    /* one cublasLtMatmul (maybe a strided batch of products) */
  TG_CUDA_COLLECTIVE, /* a collective point (codegen/c/step_abi.h): an IR collective
                       * (node), or a bucket of gradients complete (bucket) */
} tg_cuda_op_kind;

/* One pointer argument: a base value (graph position) and how the kernel
 * touches it. */
typedef struct tg_cuda_arg {
  int node;
  bool read, written;
} tg_cuda_arg;

/* A multi-tensor wave's table (cuda_kernels.c): its steps of one shape run
 * one body, which finds its step's entry from blockIdx.x (the entries are
 * in block order) instead of one branch per step.  Its contents depend on
 * where buffers are, so the runtime writes it into device memory
 * (tg_cuda_table_fill) before the first run and after every rebinding;
 * the kernel takes its address as a parameter, so a captured CUDA graph
 * stays valid when it is rewritten.  An entry is 8-byte fields, exactly as
 * the kernel's struct TGSELF_e<shape> declares them:
 *
 *   uint64 first            the step's first block in the launch
 *   uint64 addr, bytes      per buffer of the shape's function (b0, b1, ..):
 *                           where it is, and its extent (the emulated device
 *                           checks accesses against it; a GPU never reads it)
 *   int64  n                per literal that differs between the steps (n0,
 *                           n1, ..: sizes, strides, the first block) */
typedef struct tg_cuda_table_entry {
  int step;              /* its step (index into the kernel's steps) */
  long long first;       /* its first block */
  const int *bufs;       /* n_bufs base values, the shape function's b0, b1, .. */
  const int64_t *lits;   /* n_lits values, its n0, n1, .. */
} tg_cuda_table_entry;

typedef struct tg_cuda_table {
  const char *param;     /* the kernel's parameter, "tg_table0" */
  const char *shape;     /* the function it runs, "f_0123456789_s0" (named with the unit) */
  int n_bufs, n_lits;
  const bool *buf_read, *buf_written; /* per buffer, by how the kernel uses it */
  tg_cuda_table_entry *entries;       /* in block order */
  int n_entries;
} tg_cuda_table;

/* The launch shape of a wave's __global__ function: TG_CUDA_BLOCK threads,
 * but see tg_cuda_wave_threads. */
enum { TG_CUDA_BLOCK = 256 };

/* An H100's SM: the shared memory its blocks can have in all (228 KiB)
 * and its resident threads; the most threads a block can have. */
enum { TG_CUDA_SM_SHARED = 228 * 1024, TG_CUDA_SM_THREADS = 2048, TG_CUDA_MAX_BLOCK = 1024 };

/* The threads of a block of wave w of lk: TG_CUDA_BLOCK, unless every
 * step the wave launches is a block-per-row reduction keeping its row in
 * shared memory (emit.h: TG_ROW_CACHE_SHARED, a row of the cross-entropy's
 * logits: 100 KB at GPT-2's vocabulary).  Such a block's shared memory
 * lets only a few blocks onto an SM (two, at 100 KB), and with 256
 * threads each the SM would keep 16 warps resident, too few loads in
 * flight to stream the row from memory: the block then gets as many
 * threads (a power of two, at most 1024) as fill the SM's 2048 with the
 * blocks that fit.  The walks over the row stride by blockDim.x and the
 * block reductions take up to 32 warps, so the code is the same. */
int tg_cuda_wave_threads(const tg_program *p, const tg_lkernel *lk, int w);

enum { TG_CUDA_TABLE_ALIGN = 16 };   /* each table's offset in the runtime's allocation */

/* An entry's bytes; a table's. */
size_t tg_cuda_table_entry_bytes(const tg_cuda_table *t);
size_t tg_cuda_table_bytes(const tg_cuda_table *t);
/* Writes table t as the kernel reads it into out (tg_cuda_table_bytes(t)
 * bytes, 8-aligned), asking where(ctx, node, &bytes) for each buffer's
 * address and extent. */
void tg_cuda_table_fill(const tg_cuda_table *t, uint64_t *out, uint64_t (*where)(void *ctx, int node, uint64_t *bytes),
                        void *ctx);

typedef struct tg_cuda_launch {
  const char *function;  /* the extern "C" __global__ function */
  unsigned grid[3], block[3];
  size_t shared_bytes;   /* dynamic shared memory */
  tg_cuda_arg *args;     /* in parameter order */
  int n_args;
  tg_cuda_table *tables; /* parameters after args: each table's address */
  int n_tables;
} tg_cuda_launch;

/* A row-major product C = op(A) op(B) (lower.h's tg_gemm) as cuBLASLt
 * takes it: column-major, so the call computes Cᵀ = op(B)ᵀ op(A)ᵀ, and
 * cuBLASLt's A is tg's B.  Every field the call needs is here. */
typedef struct tg_cuda_matmul {
  int node;                 /* the base value C (and D) lives in: the matmul's,
                             * or its bias add's when the GEMM adds the bias */
  int a_node, b_node;       /* cuBLASLt's operands A and B (tg's b and a) */
  tg_dtype a_type, b_type, c_type;
  const char *compute;      /* "CUBLAS_COMPUTE_32F": fp32 accumulation */
  const char *scale_type;   /* "CUDA_R_32F" */
  bool trans_a, trans_b;    /* cuBLASLt's: CUBLAS_OP_T for a transposed operand */
  int64_t m, n, k;          /* cuBLASLt's: D is m x n (tg's n x m), inner k */
  int64_t a_rows, a_cols, lda; /* layouts, column-major, as stored */
  int64_t b_rows, b_cols, ldb;
  int64_t ldc;              /* C and D: m x n */
  int64_t a_offset, b_offset, c_offset; /* elements from each base value */
  int batch_count;          /* products in one call (1: none) */
  int64_t a_batch_stride, b_batch_stride, c_batch_stride; /* elements */
  double alpha, beta;       /* D = alpha op(A) op(B) + beta C; C is D */
  const char *epilogue;     /* "CUBLASLT_EPILOGUE_DEFAULT", "..._BIAS", "..._GELU_AUX_BIAS",
                             * "..._DGELU", "..._BGRADA" or "..._BGRADB" */
  int bias_node;            /* BIAS: the vector added to each column of tg's
                             * C (each row of cuBLASLt's D), D's type;
                             * BGRADA/BGRADB: where the sums of op(A)'s rows
                             * (m of them) or op(B)'s columns (n) over k are
                             * written, D's type; else -1 */
  bool bias_written;        /* BGRADA/BGRADB: bias_node is written, not read */
  int aux_node;             /* GELU_AUX_BIAS: where the GELU's input (product +
                             * bias) is stored, D's type, leading dim aux_ld;
                             * DGELU: where it is read from; else -1 */
  bool aux_read;            /* DGELU: the aux is read (GELU's input), not written */
  int64_t aux_ld;
  int64_t workspace_bytes;  /* the workspace the call may use */
} tg_cuda_matmul;

typedef struct tg_cuda_op {
  tg_cuda_op_kind kind;
  int kernel;               /* the fused kernel it belongs to (g->kernels) */
  int lkernel;              /* ... as lowered: index into p->kernels */
  int wave;                 /* the wave of that kernel it runs in */
  int step;                 /* a matmul's or flash attention's step; -1 for a
                             * wave's function (every launched step of the wave) */
  tg_cuda_launch launch;    /* TG_CUDA_LAUNCH */
  tg_cuda_matmul matmul;    /* TG_CUDA_MATMUL */
  int bucket;               /* TG_CUDA_COLLECTIVE: index into g->allreduce, or -1 */
  int node;                 /* TG_CUDA_COLLECTIVE: the IR collective (graph position), or -1 */
  int ready_at;             /* TG_CUDA_COLLECTIVE with a node: the first op that reads
                             * its output (n_ops: none in the step), where the
                             * compute stream must wait for it */
} tg_cuda_op;

/* The bytes a launched step's statements load and store (emit.h's access
 * list of its nest). */
typedef struct tg_step_bytes {
  int64_t read, written;
} tg_step_bytes;

typedef struct tg_cuda_plan {
  const tg_program *p;
  tg_cuda_op *ops;          /* in run order */
  int n_ops;
  const char **where;       /* per fused kernel: its .tg lines, "gpt2.tg:27, std.tg:15-17" */
  tg_step_bytes **step_bytes; /* per lowered kernel, per step: what its launched steps
                             * access, kept by tg_cuda_kernels_make as it renders
                             * each (so that traffic.c need not emit them again);
                             * NULL until the kernels are made */
} tg_cuda_plan;

/* How render_cuda.c maps steps to launches: whether a step is part of its
 * wave's __global__ function (nests and scatters; gemms and flash
 * attention are not), whether a nest reduces (a block per outer point),
 * and how many blocks a step takes in its wave's launch. */
bool tg_cuda_step_launched(const tg_step *st);
bool tg_cuda_is_reduction_nest(const tg_step *st);
long long tg_cuda_step_blocks(const tg_step *st);

/* The workspace every matmul may use (cuBLASLt's advice for Hopper). */
enum { TG_CUBLASLT_WORKSPACE = 32 << 20 };

/* The plan of p, allocated in a (freed with it). */
tg_cuda_plan *tg_cuda_plan_make(tg_arena *a, const tg_program *p);

#endif
