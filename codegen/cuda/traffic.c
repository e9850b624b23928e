/* traffic.c: bytes, FLOPs and roofline time of every launch of the CUDA
 * step (traffic.h). */
#include "traffic.h"

#include <string.h>

#include "emit.h"

/* HBM bandwidth, f32 FMA peak, SMs, L2 and memory: the vendor's
 * datasheets.  The bf16 peak of the H100 and H200 is what dense cuBLAS
 * GEMMs reach, not the sheets' 989 TFLOP/s dense: about 80% of it (an
 * 8192^3 bf16 product through PyTorch measured 769 to 798 TFLOP/s on an
 * H200); the A100's is its sheet's 312. */
static const tg_gpu_spec gpus[] = {
    {"h100", "H100 SXM", 3.35e12, 790e12, 67e12, 132, 50e6, 80e9, "H100"},
    {"h200", "H200 SXM", 4.8e12, 790e12, 67e12, 132, 50e6, 141e9, "H200"},
    {"a100", "A100 SXM 80GB", 2.04e12, 312e12, 19.5e12, 108, 40e6, 80e9, "A100"},
};

const tg_gpu_spec *tg_gpu_find(const char *name) {
  for (size_t i = 0; i < sizeof gpus / sizeof *gpus; i++)
    if (!strcmp(gpus[i].name, name)) return &gpus[i];
  return NULL;
}

static bool is_word_char(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

bool tg_gpu_name_has(const char *driver_name, const char *key) {
  size_t n = strlen(key);
  for (const char *p = strstr(driver_name, key); p; p = strstr(p + 1, key))
    if ((p == driver_name || !is_word_char(p[-1])) && !is_word_char(p[n])) return true;
  return false;
}

const tg_gpu_spec *tg_gpu_for_device(const char *driver_name) {
  for (size_t i = 0; i < sizeof gpus / sizeof *gpus; i++)
    if (tg_gpu_name_has(driver_name, gpus[i].driver_key)) return &gpus[i];
  return NULL;
}

const char *tg_gpu_names(void) { return "h100, h200, a100"; }

static const char *const category_names[TG_TRAFFIC_NCATEGORIES] = {
    "matmul", "epilogue", "attention", "row", "elementwise", "reduce", "embedding", "optimizer"};

const char *tg_traffic_category_name(tg_traffic_category c) { return category_names[c]; }

/* Launches that touch this much must spread over at least 4 blocks per SM;
 * no thread may walk a longer dependent chain. */
enum { BIG_LAUNCH_BYTES = 16 << 20, MAX_CHAIN = 1024, BLOCKS_PER_SM = 4 };

static tg_traffic_category nest_category(const tg_kernel *K, const tg_step *st) {
  if (st->kind == TG_STEP_SCATTER) return TG_TRAFFIC_EMBEDDING;
  switch (K->kind) {
  case TG_KERNEL_MATMUL: return TG_TRAFFIC_EPILOGUE;
  case TG_KERNEL_ROW: return TG_TRAFFIC_ROW;
  case TG_KERNEL_REDUCE: return TG_TRAFFIC_REDUCE;
  case TG_KERNEL_MULTI: return TG_TRAFFIC_OPTIMIZER;
  default: return TG_TRAFFIC_ELEMENTWISE;
  }
}

/* One FLOP per element of each op a step computes (a reduction: per input
 * element); views and leaves compute nothing. */
static double nest_flops(const tg_program *p, const tg_lkernel *lk, int s) {
  const tg_graph *g = p->g;
  const tg_kernel *K = &g->kernels[lk->kernel];
  double f = 0;
  for (int i = 0; i < K->n_nodes; i++) {
    const tg_node *n = g->nodes[K->nodes[i]];
    if (p->step_of[n->id] != s || tg_is_view(n) || tg_ops[n->op].kind == TG_KIND_LEAF) continue;
    const tg_type *t = (n->op == TG_OP_sum || n->op == TG_OP_max) ? &n->in[0]->type : &n->type;
    f += (double)tg_type_numel(t);
  }
  return f;
}

/* The dependent chain one thread of a step's launch walks: a reduction
 * nest's threads stride over the inner points, adding as they go; a
 * scatter's walk every source row in order; an elementwise thread computes
 * its lanes. */
static int64_t nest_chain(const tg_step *st) {
  const tg_nest *N = &st->nest;
  if (st->kind == TG_STEP_SCATTER) {
    /* a thread adds, per column it owns, every source row hitting its
     * block's rows: on average (indices spread over the table) the source
     * rows times rows / table rows; and it walks the indices 256 at a time */
    int64_t rows = tg_cuda_scatter_rows(st), cols = (N->outer_count + TG_CUDA_BLOCK - 1) / TG_CUDA_BLOCK;
    int64_t hits = (N->inner_count * rows + st->table_rows - 1) / st->table_rows * cols;
    int64_t walk = (N->inner_count + TG_CUDA_BLOCK - 1) / TG_CUDA_BLOCK;
    return hits > walk ? hits : walk;
  }
  if (tg_cuda_column_nest(st)) return (N->inner_count + TG_COLUMN_TILE - 1) / TG_COLUMN_TILE;
  /* a row group: a thread's column sums add one point of each of its rows */
  if (tg_cuda_is_reduction_nest(st) && N->group > 1)
    return (N->inner_count + TG_CUDA_BLOCK - 1) / TG_CUDA_BLOCK * N->group;
  if (tg_cuda_is_reduction_nest(st)) return (N->inner_count + TG_CUDA_BLOCK - 1) / TG_CUDA_BLOCK;
  return tg_nest_vec_width(st, TG_DIALECT_CUDA);
}

static void wave(const tg_cuda_plan *plan, const tg_cuda_op *op, tg_launch_traffic *L) {
  const tg_program *p = plan->p;
  const tg_lkernel *lk = &p->kernels[op->lkernel];
  const tg_kernel *K = &p->g->kernels[lk->kernel];
  bool first = true;
  for (int s = 0; s < lk->n_steps; s++) {
    const tg_step *st = &lk->steps[s];
    if (st->wave != op->wave || !tg_cuda_step_launched(st)) continue;
    if (plan->step_bytes) { /* counted as the kernels were made */
      L->bytes_read += plan->step_bytes[op->lkernel][s].read;
      L->bytes_written += plan->step_bytes[op->lkernel][s].written;
    } else {
      tg_nest_code c;
      tg_emit_nest(p, lk, s, TG_DIALECT_CUDA, &c);
      for (int a = 0; a < c.n_access; a++) {
        if (c.access[a].write) L->bytes_written += c.access[a].bytes;
        else L->bytes_read += c.access[a].bytes;
      }
      tg_nest_code_free(&c);
    }
    L->flops += nest_flops(p, lk, s);
    int64_t chain = nest_chain(st);
    if (chain > L->chain) L->chain = chain;
    if (first) L->category = nest_category(K, st);
    first = false;
  }
  /* a multi-tensor launch's tables (cuda_plan.h: tg_cuda_table), once from
   * memory: every block reads its entry and a few firsts of the binary
   * search, which after the first blocks come from the caches (a plan
   * whose kernels were not made has none: the steps' own code counts) */
  for (int t = 0; t < op->launch.n_tables; t++) L->bytes_read += (int64_t)tg_cuda_table_bytes(&op->launch.tables[t]);
}

static int64_t operand_bytes(int64_t rows, int64_t cols, tg_dtype t, int batch, int64_t batch_stride) {
  return rows * cols * tg_dtype_size(t) * (batch_stride ? batch : 1);
}

static void matmul(const tg_cuda_op *op, tg_launch_traffic *L) {
  const tg_cuda_matmul *M = &op->matmul;
  int batch = M->batch_count > 1 ? M->batch_count : 1;
  L->category = TG_TRAFFIC_MATMUL;
  L->bytes_read = operand_bytes(M->a_rows, M->a_cols, M->a_type, batch, M->a_batch_stride) +
                  operand_bytes(M->b_rows, M->b_cols, M->b_type, batch, M->b_batch_stride);
  int64_t c = M->m * M->n * tg_dtype_size(M->c_type) * batch;
  L->bytes_written = c;
  if (M->bias_written) /* BGRADA/BGRADB: a sum per row of cuBLASLt's D (A's) or per column (B's) */
    L->bytes_written += (strcmp(M->epilogue, "CUBLASLT_EPILOGUE_BGRADB") ? M->m : M->n) * tg_dtype_size(M->c_type);
  else if (M->bias_node >= 0) L->bytes_read += M->m * tg_dtype_size(M->c_type); /* the bias vector, once */
  if (M->aux_node >= 0 && M->aux_read) L->bytes_read += c;                  /* DGELU: the GELU's input */
  else if (M->aux_node >= 0) L->bytes_written += c;                          /* GELU_AUX_BIAS: the GELU's input */
  if (M->beta != 0) L->bytes_read += c;
  L->flops = 2.0 * (double)M->m * (double)M->n * (double)M->k * batch;
  L->tensor_cores = M->a_type == TG_BF16 || M->a_type == TG_F16;
}

/* A flash launch reads and writes whole operands (each tile of K, V or Q,
 * dO it streams again comes from L2, not HBM), each as its dtype: the
 * forward reads q, k, v and writes o, lse; both backward launches read q,
 * k, v, o, lse and do (o for Di), dkdv writes dk and dv, dq writes dq.  Its
 * FLOPs are the causal half of its products: the forward 2 (S = QKᵀ, PV),
 * the backward's dk/dv launch 4 (S, dP, dV, dK) and dq launch 3 (S, dP,
 * dQ), each T²D per head. */
static int64_t flash_bytes(const tg_flash_operand *o, int64_t n) { return n * (o->bf16 ? 2 : 4); }

static void flash(const tg_cuda_plan *plan, const tg_cuda_op *op, tg_launch_traffic *L) {
  const tg_program *p = plan->p;
  const tg_step *st = &p->kernels[op->lkernel].steps[op->step];
  const tg_flash_shape *f = &st->flash;
  const tg_cuda_launch *l = &op->launch;
  L->category = TG_TRAFFIC_ATTENTION;
  int64_t heads = f->nb * f->nh, rows = heads * f->T, elems = rows * f->D;
  const char *name = l->function;
  size_t nlen = strlen(name);
  bool dkdv = nlen >= 5 && !strcmp(name + nlen - 5, "_dkdv"), dq = nlen >= 3 && !strcmp(name + nlen - 3, "_dq");
  L->bytes_read = flash_bytes(&f->q, elems) + flash_bytes(&f->k, elems) + flash_bytes(&f->v, elems);
  if (dkdv || dq) {
    L->bytes_read += flash_bytes(&f->o, elems) + flash_bytes(&f->lse, rows) + flash_bytes(&f->dout, elems);
    L->bytes_written = dq ? flash_bytes(&f->dq, elems) : flash_bytes(&f->dk, elems) + flash_bytes(&f->dv, elems);
  } else {
    L->bytes_written = flash_bytes(&f->o, elems) + flash_bytes(&f->lse, rows);
  }
  double products = dkdv ? 4 : dq ? 3 : 2;
  L->flops = products * (double)heads * (double)f->T * (double)f->T * (double)f->D;
  L->tensor_cores = f->q.bf16;
  L->chain = f->T;
}

tg_traffic *tg_traffic_count(tg_arena *a, const tg_cuda_plan *plan, const tg_gpu_spec *gpu) {
  tg_traffic *t = tg_alloc(a, sizeof *t);
  t->plan = plan;
  t->gpu = gpu;
  t->launch = tg_alloc(a, sizeof *t->launch * (size_t)(plan->n_ops + 1));
  for (int i = 0; i < plan->n_ops; i++) {
    const tg_cuda_op *op = &plan->ops[i];
    if (op->kind == TG_CUDA_COLLECTIVE) continue; /* the network's bytes: --report schedule */
    tg_launch_traffic *L = &t->launch[t->n++];
    L->op = i;
    if (op->kind == TG_CUDA_MATMUL) {
      matmul(op, L);
    } else {
      L->blocks = (long long)op->launch.grid[0] * op->launch.grid[1] * op->launch.grid[2];
      L->threads = (int)(op->launch.block[0] * op->launch.block[1] * op->launch.block[2]);
      if (op->step >= 0) flash(plan, op, L);
      else wave(plan, op, L);
    }
    double rate = L->tensor_cores ? gpu->bf16_flops_per_s : gpu->f32_flops_per_s;
    double tb = (double)(L->bytes_read + L->bytes_written) / gpu->hbm_bytes_per_s, tf = L->flops / rate;
    L->seconds = tb > tf ? tb : tf;
    L->compute_bound = tf > tb;
    if (op->kind == TG_CUDA_LAUNCH) {
      int64_t bytes = L->bytes_read + L->bytes_written;
      if (bytes > BIG_LAUNCH_BYTES && L->blocks < (long long)BLOCKS_PER_SM * gpu->sms)
        L->flag = tg_sprintf(a, "%lld blocks for %.0f MB (want >= %d)", L->blocks, (double)bytes / 1e6,
                             BLOCKS_PER_SM * gpu->sms);
      else if (L->chain > MAX_CHAIN)
        L->flag = tg_sprintf(a, "a thread walks %lld dependent elements (want <= %d)", (long long)L->chain, MAX_CHAIN);
    }
    t->n_flagged += L->flag != NULL;
    t->bytes_read += L->bytes_read;
    t->bytes_written += L->bytes_written;
    t->flops += L->flops;
    t->seconds += L->seconds;
    t->by_category[L->category].launches++;
    t->by_category[L->category].bytes += L->bytes_read + L->bytes_written;
    t->by_category[L->category].flops += L->flops;
    t->by_category[L->category].seconds += L->seconds;
  }
  return t;
}

void tg_traffic_print(FILE *out, const tg_traffic *t, int64_t tokens_per_step) {
  const tg_gpu_spec *gpu = t->gpu;
  const tg_cuda_plan *plan = t->plan;
  fprintf(out,
          "traffic: every launch of the step in run order, bytes as the lowered code accesses them; roofline on %s "
          "(%.2f TB/s, %.0f TFLOP/s bf16, %.0f TFLOP/s f32, %d SMs)\n",
          gpu->description, gpu->hbm_bytes_per_s / 1e12, gpu->bf16_flops_per_s / 1e12, gpu->f32_flops_per_s / 1e12,
          gpu->sms);
  fprintf(out, "traffic: %4s  %-22s %-11s %9s %5s %10s %10s %9s %9s  %-7s %s\n", "#", "launch", "category", "blocks",
          "thr", "read MB", "write MB", "GFLOP", "est us", "bound", "where");
  for (int i = 0; i < t->n; i++) {
    const tg_launch_traffic *L = &t->launch[i];
    const tg_cuda_op *op = &plan->ops[L->op];
    const char *name = op->kind == TG_CUDA_MATMUL ? "cublasLtMatmul" : op->launch.function;
    char blocks[32] = "-", threads[16] = "-";
    if (op->kind == TG_CUDA_LAUNCH) {
      snprintf(blocks, sizeof blocks, "%lld", L->blocks);
      snprintf(threads, sizeof threads, "%d", L->threads);
    }
    fprintf(out, "traffic: %4d  %-22s %-11s %9s %5s %10.1f %10.1f %9.2f %9.1f  %-7s %s%s%s\n", i, name,
            category_names[L->category], blocks, threads, (double)L->bytes_read / 1e6, (double)L->bytes_written / 1e6,
            L->flops / 1e9, L->seconds * 1e6, L->compute_bound ? "compute" : "memory", plan->where[op->lkernel],
            L->flag ? "  FLAG: " : "", L->flag ? L->flag : "");
  }
  fprintf(out, "traffic: by category:\n");
  for (int c = 0; c < TG_TRAFFIC_NCATEGORIES; c++) {
    if (!t->by_category[c].launches) continue;
    fprintf(out, "traffic:   %-11s %4d launches %9.2f GB %9.2f TFLOP %9.2f ms (%4.1f%%)\n", category_names[c],
            t->by_category[c].launches, (double)t->by_category[c].bytes / 1e9, t->by_category[c].flops / 1e12,
            t->by_category[c].seconds * 1e3, t->seconds > 0 ? 100 * t->by_category[c].seconds / t->seconds : 0.0);
  }
  fprintf(out,
          "traffic: total: %d launches (%d flagged), %.2f GB read + %.2f GB written = %.2f GB, %.2f TFLOP; roofline "
          "%.2f ms a step on %s",
          t->n, t->n_flagged, (double)t->bytes_read / 1e9, (double)t->bytes_written / 1e9,
          (double)(t->bytes_read + t->bytes_written) / 1e9, t->flops / 1e12, t->seconds * 1e3, gpu->description);
  if (tokens_per_step > 0 && t->seconds > 0)
    fprintf(out, ", %.0fK tokens/s (%lld tokens a step)", (double)tokens_per_step / t->seconds / 1e3,
            (long long)tokens_per_step);
  fprintf(out, "\n");
  /* the IR's collectives (ZeRO stage 3's gathers, say): the network's
   * bytes, not the GPU memory's, so not in the roofline */
  int n_coll = 0;
  int64_t coll_bytes = 0;
  const tg_program *p = t->plan->p;
  for (int i = 0; i < t->plan->n_ops; i++) {
    const tg_cuda_op *op = &t->plan->ops[i];
    if (op->kind != TG_CUDA_COLLECTIVE || op->node < 0) continue;
    const tg_node *n = p->g->nodes[op->node];
    n_coll++;
    coll_bytes += tg_type_numel(&n->type) * tg_dtype_size(n->type.dtype);
  }
  if (n_coll)
    fprintf(out, "traffic: collectives: %d of the IR (their bytes on the network: --report schedule), %.2f GB of "
                 "results, not in the roofline\n", n_coll, (double)coll_bytes / 1e9);
}
