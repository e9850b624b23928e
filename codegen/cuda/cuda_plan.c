/* cuda_plan.c: the run order of a lowered program on the GPU (cuda_plan.h).
 *
 * Per fused kernel, wave by wave: a wave's matmuls and flash-attention
 * launches in step order, then one launch of the wave's __global__
 * function holding all its nests (the blocks divided among the steps, as
 * render_cuda.c writes the function); a collective of the IR is one op
 * of its own (the backend runs it on the communication stream); after a
 * kernel, the collective point of every bucket whose last gradient it
 * produced.  Steps of a wave are
 * independent (lower.h), so the order within a wave is free; this one is
 * the manifest's. */
#include "cuda_plan.h"

#include <string.h>

#include <stdlib.h>

#include "emit.h"
#include "flash_cuda.h"

bool tg_cuda_step_launched(const tg_step *st) { return st->kind == TG_STEP_NEST || st->kind == TG_STEP_SCATTER; }

bool tg_cuda_is_reduction_nest(const tg_step *st) {
  if (st->kind != TG_STEP_NEST) return false;
  for (int s = 0; s < st->nest.n_sweeps; s++)
    if (st->nest.sweeps[s].n_reduce) return true;
  return false;
}

long long tg_cuda_step_blocks(const tg_step *st) {
  const tg_nest *N = &st->nest;
  if (st->kind == TG_STEP_SCATTER) {
    int64_t rows = tg_cuda_scatter_rows(st);
    return (st->table_rows + rows - 1) / rows;
  }
  if (tg_cuda_column_nest(st)) return N->outer_count / TG_COLUMN_TILE;
  if (tg_cuda_is_reduction_nest(st)) return N->group > 1 ? N->outer_count / N->group : N->outer_count;
  long long points = N->outer_count * N->inner_count / tg_nest_vec_width(st, TG_DIALECT_CUDA);
  return (points + TG_CUDA_BLOCK - 1) / TG_CUDA_BLOCK;
}

/* ---- tables ------------------------------------------------------------------------ */

_Static_assert(sizeof(uint64_t) == 8 && sizeof(int64_t) == 8, "a table's fields are 8 bytes");

size_t tg_cuda_table_entry_bytes(const tg_cuda_table *t) { return 8 * (size_t)(1 + 2 * t->n_bufs + t->n_lits); }

size_t tg_cuda_table_bytes(const tg_cuda_table *t) { return tg_cuda_table_entry_bytes(t) * (size_t)t->n_entries; }

void tg_cuda_table_fill(const tg_cuda_table *t, uint64_t *out, uint64_t (*where)(void *ctx, int node, uint64_t *bytes),
                        void *ctx) {
  for (int e = 0; e < t->n_entries; e++) {
    const tg_cuda_table_entry *E = &t->entries[e];
    *out++ = (uint64_t)E->first;
    for (int b = 0; b < t->n_bufs; b++) {
      uint64_t bytes = 0;
      out[0] = where(ctx, E->bufs[b], &bytes);
      out[1] = bytes;
      out += 2;
    }
    for (int l = 0; l < t->n_lits; l++) memcpy(out++, &E->lits[l], 8); /* int64 as the kernel reads it */
  }
}

/* ---- building the list --------------------------------------------------------- */

typedef struct builder {
  tg_arena *a;
  const tg_program *p;
  tg_cuda_op *ops;
  int n, cap;
} builder;

static tg_cuda_op *push(builder *b, tg_cuda_op_kind kind, int kernel) {
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 64;
    tg_cuda_op *ops = tg_alloc(b->a, sizeof *ops * (size_t)cap);
    if (b->n) memcpy(ops, b->ops, sizeof *ops * (size_t)b->n);
    b->ops = ops, b->cap = cap;
  }
  tg_cuda_op *op = &b->ops[b->n++];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  op->kernel = kernel;
  return op;
}

/* The dynamic shared memory of step s: its row cache (emit.h); *cached
 * says whether the row is cached in shared memory. */
static size_t step_shared_bytes(const tg_program *p, const tg_lkernel *lk, int s, bool *cached) {
  const tg_step *st = &lk->steps[s];
  *cached = false;
  if (!tg_cuda_is_reduction_nest(st) || st->nest.n_sweeps < 2) return 0;
  tg_nest_code c;
  tg_emit_nest(p, lk, s, TG_DIALECT_CUDA, &c);
  size_t bytes = (size_t)c.shared_bytes;
  *cached = c.row_cache == TG_ROW_CACHE_SHARED;
  tg_nest_code_free(&c);
  return bytes;
}

/* Wave w's dynamic shared memory (the most any of its steps needs) and
 * its threads a block (tg_cuda_wave_threads), each step's nest emitted once. */
static int wave_shape(const tg_program *p, const tg_lkernel *lk, int w, size_t *shared) {
  size_t most = 0;
  bool all_cached = true; /* every step a block-per-row walk with its row in shared memory */
  for (int s = 0; s < lk->n_steps; s++) {
    const tg_step *st = &lk->steps[s];
    if (st->wave != w || !tg_cuda_step_launched(st)) continue;
    bool cached;
    size_t sh = step_shared_bytes(p, lk, s, &cached);
    if (sh > most) most = sh;
    all_cached &= cached && !tg_cuda_column_nest(st) && st->nest.group <= 1;
  }
  if (shared) *shared = most;
  if (!all_cached || !most) return TG_CUDA_BLOCK;
  long per_sm = (long)(TG_CUDA_SM_SHARED / (most + 1024)); /* 1 KB: what the driver reserves a block */
  if (per_sm < 1) per_sm = 1;
  int threads = TG_CUDA_BLOCK;
  while (threads < TG_CUDA_MAX_BLOCK && (long)threads * 2 * per_sm <= TG_CUDA_SM_THREADS) threads *= 2;
  return threads;
}

int tg_cuda_wave_threads(const tg_program *p, const tg_lkernel *lk, int w) { return wave_shape(p, lk, w, NULL); }

/* The wave's function: every argument of the kernel, as the renderer
 * declares them (emit.c, tg_emit_params); its dynamic shared memory is
 * the most any of its steps needs. */
static void wave_launch(builder *b, const tg_lkernel *lk, int w, long long blocks) {
  tg_cuda_op *op = push(b, TG_CUDA_LAUNCH, lk->kernel);
  tg_cuda_launch *L = &op->launch;
  L->block[0] = (unsigned)wave_shape(b->p, lk, w, &L->shared_bytes), L->block[1] = L->block[2] = 1;
  L->function = tg_sprintf(b->a, "k%d_w%d", lk->kernel, w);
  L->grid[0] = (unsigned)blocks, L->grid[1] = L->grid[2] = 1;
  L->n_args = lk->n_args;
  L->args = tg_alloc(b->a, sizeof *L->args * (size_t)(lk->n_args + 1));
  for (int i = 0; i < lk->n_args; i++) L->args[i] = (tg_cuda_arg){lk->args[i], lk->arg_read[i], lk->arg_written[i]};
}

/* The flash kernels' parameters: q k v o lse (forward), then do dq dk dv
 * (backward); the forward writes o and lse, the backward dq dk dv. */
static void flash_launches(builder *b, const tg_lkernel *lk, const tg_step *st) {
  bool bwd = st->kind == TG_STEP_FLASH_BWD;
  tg_flash_launch fl[TG_FLASH_MAX_LAUNCHES];
  int n = tg_flash_cuda_launches(&st->flash, st->fn, bwd, fl);
  int na = bwd ? 9 : 5;
  for (int i = 0; i < n; i++) {
    tg_cuda_op *op = push(b, TG_CUDA_LAUNCH, lk->kernel);
    tg_cuda_launch *L = &op->launch;
    L->function = tg_strdup(b->a, fl[i].name);
    memcpy(L->grid, fl[i].grid, sizeof L->grid);
    memcpy(L->block, fl[i].block, sizeof L->block);
    L->shared_bytes = fl[i].shmem;
    L->n_args = na;
    L->args = tg_alloc(b->a, sizeof *L->args * (size_t)na);
    for (int a = 0; a < na; a++) {
      bool out = bwd ? a >= 6 : a >= 3;
      L->args[a] = (tg_cuda_arg){st->flash_args[a], !out, out};
    }
  }
}

/* Whether the batch dims [0, rank) fold into one stride for every operand:
 * stride[j] = stride[j + 1] * dims[j + 1]. */
static bool batch_folds(const tg_gemm *G) {
  for (int j = 0; j + 1 < G->batch_rank; j++) {
    int64_t d = G->batch_dims[j + 1];
    if (G->a_bstride[j] != G->a_bstride[j + 1] * d || G->b_bstride[j] != G->b_bstride[j + 1] * d ||
        G->c_bstride[j] != G->c_bstride[j + 1] * d)
      return false;
  }
  return true;
}

/* One call computing `count` products from the given element offsets. */
static void matmul(builder *b, int kernel, const tg_gemm *G, int64_t ao, int64_t bo, int64_t co, int64_t count,
                   int64_t as, int64_t bs, int64_t cs) {
  const tg_graph *g = b->p->g;
  tg_cuda_op *op = push(b, TG_CUDA_MATMUL, kernel);
  tg_cuda_matmul *M = &op->matmul;
  M->node = G->out;
  /* row-major C[m,n] = op(A)[m,k] op(B)[k,n] is column-major
   * Cᵀ[n,m] = op(B)ᵀ[n,k] op(A)ᵀ[k,m]: row-major data read column-major is
   * the transpose, so tg's B (not transposed) is cuBLASLt's A as stored */
  M->a_node = G->b.base, M->b_node = G->a.base;
  M->a_type = g->nodes[G->b.base]->type.dtype;
  M->b_type = g->nodes[G->a.base]->type.dtype;
  M->c_type = g->nodes[G->node]->type.dtype;
  M->compute = "CUBLAS_COMPUTE_32F";
  M->scale_type = "CUDA_R_32F";
  M->trans_a = G->trans_b, M->trans_b = G->trans_a;
  M->m = G->n, M->n = G->m, M->k = G->k;
  M->a_rows = G->trans_b ? G->k : G->n, M->a_cols = G->trans_b ? G->n : G->k, M->lda = G->ldb;
  M->b_rows = G->trans_a ? G->m : G->k, M->b_cols = G->trans_a ? G->k : G->m, M->ldb = G->lda;
  M->ldc = G->ldc;
  M->a_offset = bo, M->b_offset = ao, M->c_offset = co;
  M->batch_count = (int)count;
  M->a_batch_stride = bs, M->b_batch_stride = as, M->c_batch_stride = cs;
  M->alpha = 1, M->beta = 0;
  /* a bias gradient summed from tg's a is summed from cuBLASLt's B (one
   * per column of its D: tg's rows), from tg's b from cuBLASLt's A */
  M->epilogue = G->gelu           ? "CUBLASLT_EPILOGUE_GELU_AUX_BIAS"
                : G->dgelu        ? "CUBLASLT_EPILOGUE_DGELU"
                : G->bias >= 0    ? "CUBLASLT_EPILOGUE_BIAS"
                : G->bgrad < 0    ? "CUBLASLT_EPILOGUE_DEFAULT"
                : G->bgrad_of_a   ? "CUBLASLT_EPILOGUE_BGRADB"
                                  : "CUBLASLT_EPILOGUE_BGRADA";
  M->bias_node = G->bgrad >= 0 ? G->bgrad : G->bias;
  M->bias_written = G->bgrad >= 0;
  M->aux_node = G->gelu || G->dgelu ? G->aux : -1;
  M->aux_read = G->dgelu;
  M->aux_ld = G->gelu || G->dgelu ? G->ldc : 0;
  M->workspace_bytes = TG_CUBLASLT_WORKSPACE;
}

/* A matmul's products: one strided-batch call when the batch dims fold into
 * one stride, else one call per index of the outer dims (a strided batch
 * of the innermost each). */
static void matmuls(builder *b, int kernel, const tg_gemm *G) {
  if (G->batch <= 1 || G->batch_rank == 0) {
    matmul(b, kernel, G, G->a_off, G->b_off, 0, 1, 0, 0, 0);
    return;
  }
  int last = G->batch_rank - 1;
  if (batch_folds(G)) {
    matmul(b, kernel, G, G->a_off, G->b_off, 0, G->batch, G->a_bstride[last], G->b_bstride[last], G->c_bstride[last]);
    return;
  }
  int64_t outer = G->batch / G->batch_dims[last];
  for (int64_t o = 0; o < outer; o++) {
    int64_t ao = G->a_off, bo = G->b_off, co = 0, r = o;
    for (int j = last - 1; j >= 0; j--) {
      int64_t c = r % G->batch_dims[j];
      r /= G->batch_dims[j];
      ao += c * G->a_bstride[j], bo += c * G->b_bstride[j], co += c * G->c_bstride[j];
    }
    matmul(b, kernel, G, ao, bo, co, G->batch_dims[last], G->a_bstride[last], G->b_bstride[last], G->c_bstride[last]);
  }
}

/* "gpt2.tg:27, std.tg:15-17": the .tg lines of a kernel's ops, by file in
 * first-seen order, runs of lines joined. */
static const char *where(tg_arena *a, const tg_graph *g, const tg_kernel *K) {
  tg_sbuf out = {0};
  bool *done = tg_xcalloc((size_t)K->n_nodes + 1, 1);
  for (int i = 0; i < K->n_nodes; i++) {
    if (done[i]) continue;
    const char *file = g->nodes[K->nodes[i]]->loc.file;
    if (!file) {
      done[i] = true;
      continue;
    }
    /* the lines of this file, sorted, without repeats */
    int lines[256], n = 0;
    for (int j = i; j < K->n_nodes; j++) {
      const tg_loc *l = &g->nodes[K->nodes[j]]->loc;
      if (done[j] || !l->file || strcmp(l->file, file)) continue;
      done[j] = true;
      bool dup = false;
      for (int x = 0; x < n && !dup; x++) dup = lines[x] == l->line;
      if (!dup && n < 256) lines[n++] = l->line;
    }
    for (int x = 1; x < n; x++)
      for (int y = x; y > 0 && lines[y] < lines[y - 1]; y--) {
        int t = lines[y];
        lines[y] = lines[y - 1];
        lines[y - 1] = t;
      }
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    tg_sb_printf(&out, "%s%s:", out.n ? ", " : "", base);
    for (int x = 0; x < n;) {
      int y = x;
      while (y + 1 < n && lines[y + 1] == lines[y] + 1) y++;
      if (y > x) tg_sb_printf(&out, "%s%d-%d", x ? "," : "", lines[x], lines[y]);
      else tg_sb_printf(&out, "%s%d", x ? "," : "", lines[x]);
      x = y + 1;
    }
  }
  free(done);
  char *s = tg_strdup(a, tg_sb_text(&out));
  tg_sb_free(&out);
  return s;
}

tg_cuda_plan *tg_cuda_plan_make(tg_arena *a, const tg_program *p) {
  const tg_graph *g = p->g;
  builder b = {a, p, NULL, 0, 0};
  tg_cuda_plan *plan = tg_alloc(a, sizeof *plan);
  plan->p = p;
  plan->where = tg_alloc(a, sizeof *plan->where * (size_t)(p->n_kernels + 1));
  for (int k = 0; k < p->n_kernels; k++) {
    const tg_lkernel *lk = &p->kernels[k];
    plan->where[k] = where(a, g, &g->kernels[lk->kernel]);
    for (int w = 0; w < lk->n_waves; w++) {
      long long blocks = 0;
      for (int s = 0; s < lk->n_steps; s++) {
        const tg_step *st = &lk->steps[s];
        if (st->wave != w) continue;
        int first = b.n;
        if (st->kind == TG_STEP_GEMM) matmuls(&b, lk->kernel, &st->gemm);
        else if (tg_cuda_step_launched(st)) blocks += tg_cuda_step_blocks(st);
        else flash_launches(&b, lk, st);
        for (int o = first; o < b.n; o++) b.ops[o].lkernel = k, b.ops[o].wave = w, b.ops[o].step = s;
      }
      if (blocks) {
        wave_launch(&b, lk, w, blocks);
        b.ops[b.n - 1].lkernel = k, b.ops[b.n - 1].wave = w, b.ops[b.n - 1].step = -1;
      }
    }
    const tg_node *c = tg_kernel_collective(p, k);
    if (c) {
      tg_cuda_op *op = push(&b, TG_CUDA_COLLECTIVE, lk->kernel);
      op->bucket = -1, op->node = c->id, op->lkernel = k, op->step = -1;
    }
    const tg_allreduce_plan *ar = g->allreduce;
    for (int x = 0; ar && x < ar->n_buckets; x++)
      if (ar->buckets[x].after_kernel == lk->kernel) {
        tg_cuda_op *op = push(&b, TG_CUDA_COLLECTIVE, lk->kernel);
        op->bucket = x, op->node = -1, op->lkernel = k, op->step = -1;
      }
  }
  /* where each IR collective's output is first read: until then the
   * compute stream need not wait for it */
  for (int i = 0; i < b.n; i++) {
    tg_cuda_op *op = &b.ops[i];
    if (op->kind != TG_CUDA_COLLECTIVE || op->node < 0) continue;
    op->ready_at = b.n;
    for (int j = i + 1; j < b.n && op->ready_at == b.n; j++) {
      const tg_cuda_op *r = &b.ops[j];
      bool reads = false;
      if (r->kind == TG_CUDA_COLLECTIVE && r->node >= 0)
        reads = tg_kernel_base(g->nodes[r->node]->in[0])->id == op->node;
      else if (r->kind != TG_CUDA_COLLECTIVE) {
        int a = tg_lkernel_arg(&p->kernels[r->lkernel], op->node);
        reads = a >= 0 && p->kernels[r->lkernel].arg_read[a];
      }
      if (reads) op->ready_at = j;
    }
  }
  plan->ops = b.ops;
  plan->n_ops = b.n;
  return plan;
}
