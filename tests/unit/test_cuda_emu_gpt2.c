/* test_cuda_emu_gpt2.c: GPT-2's generated CUDA on the emulated device.
 *
 * - Every kernel of the small model's training step (2 layers, n_embd 64,
 *   T 32, B 2: the .cu tgc --emit cuda writes) compiles for the emulated
 *   device and loads, and every kernel the manifest launches is in it.
 * - The whole step then runs, launch by launch as the manifest lists them
 *   (the matmuls through the emulated cuBLASLt), each argument described
 *   with its extent so that any access outside its own buffer (inside the
 *   arena) fails, and every shared-memory access checked for races.  This
 *   is a stand-in for the CUDA backend, kept to the manifest's order and
 *   arguments, to run the generated kernels before the backend exists.
 * - Its loss, gradient norm and updated parameters agree with the CPU
 *   backend's on the same step (tolerances below), and the gradients of
 *   the grad-only graph agree one by one.
 * - It prints how long the step takes on the emulator.
 *
 * Tolerances.  The CUDA step differs from the CPU's by the flash attention
 * (bf16 tensor cores: q, k, v, P and dS rounded to 8 significant bits,
 * errors near 2e-3 of each output's scale: test_cuda_emu_flash.c) and by
 * f32 rounding elsewhere (1e-6).  The attention's error reaches the loss
 * through two layers' projections and residuals, diluted: measured 2e-6
 * relative; allowed 1e-3.  Gradients carry it back through the attention
 * backward: allowed 2e-2 of each gradient's largest magnitude (measured
 * under 8e-3, in the c_attn biases), as the flash test allows 1e-2 for one
 * attention.  AdamW's
 * first step moves each parameter by about lr times the sign of its
 * gradient (m / sqrt(v) with m = g, v = g^2), so a gradient element near
 * zero whose sign differs moves its parameter up to 2 lr the other way (and
 * never more: |m / (sqrt(v) + eps)| < 1): the parameters are allowed
 * 2 lr + 1e-6 (measured 1.99e-3 with lr 1e-3), the gradient norm 2e-2.
 *
 * The first run of this test found two bugs, one in the generated block
 * reductions (only warp 0 got the sum) and one in the emulator (a load in
 * `c ? p[i] : 0` became an int); TG_EMU_TEST_TRACE=1 prints, before each
 * launch, the inputs holding NaNs (2: every input's range; 3: also each
 * output's range after it), which is how they were found. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_backend.h"
#include "cuda_api.h"
#include "emit.h"
#include "init.h"
#include "lower.h"
#include "passes.h"
#include "render.h"

static tg_cuda_api api;
static CUcontext ctx;
static cublasLtHandle_t lt;
static const char *const defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab=65", "block_size=32", "B=2", "T=32"};
static const float LR = 1e-3f;

#define CK(call)                                                                                                    \
  do {                                                                                                              \
    CUresult r_ = (call);                                                                                           \
    ck_assert_msg(r_ == CUDA_SUCCESS, "%s: %d: %s", #call, r_, api.emu_last_error());                               \
  } while (0)
#define LT(call)                                                                                                    \
  do {                                                                                                              \
    cublasStatus_t s_ = (call);                                                                                     \
    ck_assert_msg(s_ == CUBLAS_STATUS_SUCCESS, "%s: %d: %s", #call, s_, api.emu_last_error());                      \
  } while (0)

static void setup(void) {
  tg_cuda_api_emulated(&api);
  CK(api.cuInit(0));
  CK(api.cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(api.cuCtxSetCurrent(ctx));
  LT(api.cublasLtCreate(&lt));
}

static void teardown(void) {
  api.cublasLtDestroy(lt);
  api.cuDevicePrimaryCtxRelease(0);
}

/* The small GPT-2 lowered for CUDA (remat) or for the CPU; with the AdamW
 * step or only the gradients. */
static tg_program *program(tg_ctx *ctx, bool cuda, bool step) {
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), 7, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("lowering failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.grad = true, .step = step, .adamw = tg_adamw_defaults, .pad_multiple = 64};
  tg_run_pipeline(ctx, g, &po);
  tg_program *p = tg_lower_ex(ctx, g, cuda);
  ctx->bail = NULL;
  return p;
}

static char *render(const tg_program *p) {
  char *s = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&s, &n);
  ck_assert_ptr_nonnull(f);
  tg_render_cuda(f, p);
  fclose(f);
  return s;
}

/* A leaf's initial value, the same for both backends. */
static void init_leaf(const tg_node *n, void *mem) {
  int64_t numel = tg_type_numel(&n->type);
  if (n->op == TG_OP_param) {
    tg_param_init(n, 7, mem);
  } else if (n->type.dtype == TG_I32) {
    int32_t *ids = mem;
    for (int64_t e = 0; e < numel; e++) ids[e] = (int32_t)((e * 37 + (n->name[0] == 't')) % 65);
  } else {
    float *f = mem;
    float v = !strcmp(n->name, "lr") ? LR : !strcmp(n->name, "step") ? 1.0f : 0.0f; /* adam state: zeros */
    for (int64_t e = 0; e < numel; e++) f[e] = v;
  }
}

static size_t value_bytes(const tg_node *n) { return (size_t)tg_type_numel(&n->type) * (size_t)tg_dtype_size(n->type.dtype); }

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the step on the emulator ------------------------------------------------------------- */

typedef struct emu {
  const tg_program *p;
  CUmodule m;
  CUdeviceptr *leaf, arena, scratch;
  int launches, matmuls;
} emu;

static CUdeviceptr place(const emu *e, int node) {
  const tg_storage *s = &e->p->store[node];
  if (s->place == TG_PLACE_LEAF) return e->leaf[s->leaf];
  return (s->place == TG_PLACE_ARENA ? e->arena : e->scratch) + (CUdeviceptr)s->offset;
}

static void setup_emu(emu *e, const tg_program *p) {
  memset(e, 0, sizeof *e);
  e->p = p;
  char *src = render(p);
  void *image;
  size_t size;
  bool hit;
  char *err = malloc(1 << 16);
  bool ok = api.compile(src, "gpt2.cu", "sm_90", &image, &size, &hit, err, 1 << 16);
  if (!ok) fprintf(stderr, "%s\n", err);
  ck_assert_msg(ok, "%.1000s", err);
  free(err);
  free(src);
  CK(api.cuModuleLoadData(&e->m, image));
  free(image);
  e->leaf = calloc((size_t)p->n_leaves, sizeof *e->leaf);
  for (int i = 0; i < p->n_leaves; i++) {
    const tg_node *n = p->g->nodes[p->leaves[i]];
    void *h = malloc(value_bytes(n));
    init_leaf(n, h);
    CK(api.cuMemAlloc(&e->leaf[i], value_bytes(n)));
    CK(api.cuMemcpyHtoD(e->leaf[i], h, value_bytes(n)));
    free(h);
  }
  CK(api.cuMemAlloc(&e->arena, (size_t)p->arena_bytes + 1));
  CK(api.cuMemAlloc(&e->scratch, (size_t)p->scratch_bytes + 1));
}

static void free_emu(emu *e) {
  for (int i = 0; i < e->p->n_leaves; i++) CK(api.cuMemFree(e->leaf[i]));
  CK(api.cuMemFree(e->arena));
  CK(api.cuMemFree(e->scratch));
  CK(api.cuModuleUnload(e->m));
  free(e->leaf);
}

/* Launches function fn with the values at nodes args[0..n) as arguments,
 * each described as its buffer. */
static void launch(emu *e, const char *fn, const int *args, const bool *written, int n, const unsigned grid[3],
                   const unsigned block[3], unsigned shared) {
  CUfunction f;
  CK(api.cuModuleGetFunction(&f, e->m, fn));
  CUdeviceptr *ptrs = calloc((size_t)n + 1, sizeof *ptrs);
  void **argv = calloc((size_t)n + 1, sizeof *argv);
  char (*names)[128] = calloc((size_t)n + 1, sizeof *names);
  const char **np = calloc((size_t)n + 1, sizeof *np);
  size_t *bytes = calloc((size_t)n + 1, sizeof *bytes);
  for (int i = 0; i < n; i++) {
    const tg_node *nd = e->p->g->nodes[args[i]];
    ptrs[i] = place(e, args[i]);
    argv[i] = &ptrs[i];
    snprintf(names[i], sizeof names[i], "b%d (%s)", args[i], nd->name ? nd->name : tg_ops[nd->op].name);
    np[i] = names[i];
    bytes[i] = value_bytes(nd);
  }
  if (getenv("TG_EMU_TEST_TRACE")) /* debugging: which launch first reads a NaN */
    for (int i = 0; i < n; i++) {
      const tg_node *nd = e->p->g->nodes[args[i]];
      if (nd->type.dtype != TG_F32 || written[i]) continue;
      float *h = malloc(bytes[i]);
      CK(api.cuMemcpyDtoH(h, ptrs[i], bytes[i]));
      int64_t nan = 0, inf = 0;
      float lo = INFINITY, hi = -INFINITY;
      for (size_t x = 0; x < bytes[i] / 4; x++) {
        nan += isnan(h[x]), inf += isinf(h[x]);
        if (!isinf(h[x]) && !isnan(h[x])) lo = fminf(lo, h[x]), hi = fmaxf(hi, h[x]);
      }
      if (nan || getenv("TG_EMU_TEST_TRACE")[0] == '2')
        printf("before %s: input %s has %lld NaNs, %lld infinities of %zu, finite ones in [%g, %g]\n", fn, names[i],
               (long long)nan, (long long)inf, bytes[i] / 4, (double)lo, (double)hi);
      free(h);
    }
  api.emu_describe_launch(fn, NULL, n, np, bytes);
  double t0 = seconds();
  CUresult r = api.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, NULL, argv, NULL);
  ck_assert_msg(r == CUDA_SUCCESS, "%s: %s", fn, api.emu_last_error());
  if (getenv("TG_EMU_TEST_PROFILE")) /* each launch's time, to see where the step's goes */
    printf("launch %-18s grid %5u x %4u threads: %7.2f ms\n", fn, grid[0] * grid[1] * grid[2],
           block[0] * block[1] * block[2], 1e3 * (seconds() - t0));
  e->launches++;
  if (getenv("TG_EMU_TEST_TRACE") && getenv("TG_EMU_TEST_TRACE")[0] == '3')
    for (int i = 0; i < n; i++) {
      const tg_node *nd = e->p->g->nodes[args[i]];
      if (nd->type.dtype != TG_F32 || !written[i]) continue;
      float *h = malloc(bytes[i]);
      CK(api.cuMemcpyDtoH(h, ptrs[i], bytes[i]));
      float lo = INFINITY, hi = -INFINITY;
      int64_t zeros = 0;
      for (size_t x = 0; x < bytes[i] / 4; x++) lo = fminf(lo, h[x]), hi = fmaxf(hi, h[x]), zeros += h[x] == 0;
      printf("after %s: %s in [%g, %g], %lld zeros of %zu\n", fn, names[i], (double)lo, (double)hi, (long long)zeros,
             bytes[i] / 4);
      free(h);
    }
  free(ptrs), free(argv), free(names), free(np), free(bytes);
}

/* One matmul as cuBLASLt calls: row-major, one call per product. */
static void gemm(emu *e, const tg_gemm *G) {
  cublasLtMatmulDesc_t op;
  LT(api.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int32_t ta = G->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = G->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, row = CUBLASLT_ORDER_ROW;
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4));
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4));
  cublasLtMatrixLayout_t la, lb, lc;
  LT(api.cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, G->trans_a ? G->k : G->m, G->trans_a ? G->m : G->k, G->lda));
  LT(api.cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, G->trans_b ? G->n : G->k, G->trans_b ? G->k : G->n, G->ldb));
  LT(api.cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, G->m, G->n, G->ldc));
  cublasLtMatrixLayout_t ls[3] = {la, lb, lc};
  for (int i = 0; i < 3; i++) LT(api.cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_ORDER, &row, 4));
  const float alpha = 1, beta = 0;
  for (int64_t bi = 0; bi < G->batch; bi++) {
    int64_t ao = G->a_off, bo = G->b_off, co = 0, r = bi;
    for (int j = G->batch_rank - 1; j >= 0; j--) {
      int64_t c = r % G->batch_dims[j];
      r /= G->batch_dims[j];
      ao += c * G->a_bstride[j], bo += c * G->b_bstride[j], co += c * G->c_bstride[j];
    }
    void *A = (void *)(uintptr_t)(place(e, G->a.base) + (CUdeviceptr)ao * 4);
    void *B = (void *)(uintptr_t)(place(e, G->b.base) + (CUdeviceptr)bo * 4);
    void *C = (void *)(uintptr_t)(place(e, G->node) + (CUdeviceptr)co * 4);
    LT(api.cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, NULL, NULL, 0, NULL));
    e->matmuls++;
  }
  for (int i = 0; i < 3; i++) LT(api.cublasLtMatrixLayoutDestroy(ls[i]));
  LT(api.cublasLtMatmulDescDestroy(op));
}

static bool is_reduction(const tg_step *st) {
  for (int s = 0; st->kind == TG_STEP_NEST && s < st->nest.n_sweeps; s++)
    if (st->nest.sweeps[s].n_reduce) return true;
  return false;
}

/* Blocks a launched step takes in its wave's launch (as render_cuda.c gives them). */
static long long blocks_of(const tg_step *st) {
  const tg_nest *N = &st->nest;
  if (st->kind == TG_STEP_SCATTER) return (N->outer_count + TG_CUDA_BLOCK - 1) / TG_CUDA_BLOCK;
  if (is_reduction(st)) return N->outer_count;
  long long points = N->outer_count * N->inner_count / tg_nest_vec_width(st, TG_DIALECT_CUDA);
  return (points + TG_CUDA_BLOCK - 1) / TG_CUDA_BLOCK;
}

/* The whole step, in the manifest's order: each kernel's waves, a wave's
 * matmuls and flash launches, then its nests' launch. */
static void run_step(emu *e) {
  const tg_program *p = e->p;
  for (int k = 0; k < p->n_kernels; k++) {
    const tg_lkernel *lk = &p->kernels[k];
    for (int w = 0; w < lk->n_waves; w++) {
      long long blocks = 0;
      for (int s = 0; s < lk->n_steps; s++) {
        const tg_step *st = &lk->steps[s];
        if (st->wave != w) continue;
        if (st->kind == TG_STEP_GEMM) {
          gemm(e, &st->gemm);
        } else if (st->kind == TG_STEP_NEST || st->kind == TG_STEP_SCATTER) {
          blocks += blocks_of(st);
        } else {
          tg_flash_launch fl[TG_FLASH_MAX_LAUNCHES];
          bool bwd = st->kind == TG_STEP_FLASH_BWD;
          int n = tg_flash_cuda_launches(&st->flash, st->fn, bwd, fl);
          ck_assert_int_gt(n, 0);
          static const bool fwd_written[5] = {false, false, false, true, true};
          static const bool bwd_written[9] = {false, false, false, false, false, false, true, true, true};
          for (int i = 0; i < n; i++)
            launch(e, fl[i].name, st->flash_args, bwd ? bwd_written : fwd_written, bwd ? 9 : 5, fl[i].grid,
                   fl[i].block, (unsigned)fl[i].shmem);
        }
      }
      if (blocks) {
        char fn[32];
        snprintf(fn, sizeof fn, "k%d_w%d", k, w);
        const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {TG_CUDA_BLOCK, 1, 1};
        launch(e, fn, lk->args, lk->arg_written, lk->n_args, grid, block, 0);
      }
    }
  }
}

/* Value n after the step (as tg_cpu_read does): through its view. */
static float *emu_read(const emu *e, const tg_node *n) {
  tg_layout lay;
  ck_assert(tg_layout_of(e->p, n, &lay));
  const tg_node *b = e->p->g->nodes[lay.base];
  ck_assert_int_eq(b->type.dtype, TG_F32);
  float *all = malloc(value_bytes(b)), *out = malloc(sizeof(float) * (size_t)tg_type_numel(&n->type));
  CK(api.cuMemcpyDtoH(all, place(e, lay.base), value_bytes(b)));
  const tg_type *t = &n->type;
  int64_t coord[TG_MAX_RANK] = {0};
  for (int64_t x = 0; x < tg_type_numel(t); x++) {
    int64_t off = lay.offset;
    for (int d = 0; d < t->rank; d++) off += coord[d] * lay.stride[d];
    out[x] = all[off];
    for (int d = t->rank - 1; d >= 0; d--) {
      if (++coord[d] < t->dim[d].size) break;
      coord[d] = 0;
    }
  }
  free(all);
  return out;
}

static tg_cpu *cpu_backend(tg_ctx *ctx, bool step) {
  tg_program *p = program(ctx, false, step);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_cpu *c = tg_cpu_new_program(ctx, p, NULL);
  ctx->bail = NULL;
  const tg_graph *g = tg_cpu_graph(c);
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (tg_ops[n->op].kind == TG_KIND_LEAF && tg_cpu_leaf(c, n)) init_leaf(n, tg_cpu_leaf(c, n));
  }
  return c;
}

/* max |a - b| / max(|a|, floor) over n values; infinity where one is NaN
 * and the other not */
static double rel_diff(const float *a, const float *b, int64_t n, double floor) {
  double d = 0, m = floor;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(a[i]) != isnan(b[i])) return INFINITY;
    if (!isnan(a[i])) d = fmax(d, fabs((double)a[i] - b[i]));
    m = fmax(m, fabs((double)a[i]));
  }
  return d / m;
}

START_TEST(test_every_kernel_compiles_and_loads) {
  tg_ctx *c = tu_ctx();
  tg_program *p = program(c, true, true);
  emu e;
  setup_emu(&e, p);
  int n = 0;
  for (int k = 0; k < p->n_kernels; k++) {
    const tg_lkernel *lk = &p->kernels[k];
    for (int s = 0; s < lk->n_steps; s++) {
      const tg_step *st = &lk->steps[s];
      CUfunction f;
      if (st->kind == TG_STEP_NEST || st->kind == TG_STEP_SCATTER) {
        char name[32];
        snprintf(name, sizeof name, "k%d_w%d", k, st->wave);
        CK(api.cuModuleGetFunction(&f, e.m, name));
        n++;
      }
      if (st->kind == TG_STEP_FLASH_FWD || st->kind == TG_STEP_FLASH_BWD) {
        tg_flash_launch fl[TG_FLASH_MAX_LAUNCHES];
        int m = tg_flash_cuda_launches(&st->flash, st->fn, st->kind == TG_STEP_FLASH_BWD, fl);
        for (int i = 0; i < m; i++, n++) CK(api.cuModuleGetFunction(&f, e.m, fl[i].name));
      }
    }
  }
  ck_assert_int_gt(n, 50);
  free_emu(&e);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_step_runs_and_agrees_with_the_cpu) {
  tg_ctx *c = tu_ctx();
  tg_program *p = program(c, true, true);
  emu e;
  setup_emu(&e, p);
  /* twice: the second is timed (the first also faults in the fiber stacks) */
  run_step(&e);
  int launches = e.launches, matmuls = e.matmuls;
  for (int i = 0; i < p->n_leaves; i++) { /* the first step updated the weights: start again */
    const tg_node *n = p->g->nodes[p->leaves[i]];
    void *h = malloc(value_bytes(n));
    init_leaf(n, h);
    CK(api.cuMemcpyHtoD(e.leaf[i], h, value_bytes(n)));
    free(h);
  }
  double t0 = seconds();
  run_step(&e);
  double t = seconds() - t0;
  printf("GPT-2 (2 layers, n_embd 64, B 2, T 32) training step on the emulated device: %.3f s "
         "(%d kernel launches, %d cuBLASLt matmuls)\n",
         t, launches, matmuls);

  tg_ctx *cc = tu_ctx();
  tg_cpu *cpu = cpu_backend(cc, true);
  tg_cpu_run(cpu);
  const tg_graph *g = p->g, *cg = tg_cpu_graph(cpu);
  ck_assert_int_eq(g->n_outputs, cg->n_outputs);
  for (int o = 0; o < g->n_outputs; o++) {
    const tg_node *n = g->outputs[o].node;
    int64_t numel = tg_type_numel(&n->type);
    float *got = emu_read(&e, n), *want = malloc(sizeof(float) * (size_t)numel);
    ck_assert(tg_cpu_read(cpu, cg->outputs[o].node, want));
    double d = rel_diff(want, got, numel, 1e-6);
    printf("  %s: emulated %.7g, CPU %.7g (relative difference %.2e)\n", g->outputs[o].name, (double)got[0],
           (double)want[0], d);
    double tol = !strcmp(g->outputs[o].name, "loss") ? 1e-3 : 2e-2;
    ck_assert_msg(d <= tol, "%s differs by %.3g (allowed %g)", g->outputs[o].name, d, tol);
    free(got), free(want);
  }
  /* the parameters after AdamW's step */
  double worst = 0;
  for (int i = 0; i < p->n_leaves; i++) {
    const tg_node *n = g->nodes[p->leaves[i]];
    if (n->op != TG_OP_param) continue;
    const tg_node *cn = NULL;
    for (int j = 0; j < cg->n_nodes && !cn; j++)
      if (cg->nodes[j]->op == TG_OP_param && !strcmp(cg->nodes[j]->name, n->name)) cn = cg->nodes[j];
    ck_assert_ptr_nonnull(cn);
    int64_t numel = tg_type_numel(&n->type);
    float *got = emu_read(&e, n), *want = tg_cpu_leaf(cpu, cn);
    for (int64_t x = 0; x < numel; x++) worst = fmax(worst, fabs((double)got[x] - want[x]));
    free(got);
  }
  printf("  parameters after the step: largest difference %.3g (lr %g)\n", worst, (double)LR);
  ck_assert_msg(worst <= 2 * LR + 1e-6, "a parameter differs by %g", worst);
  /* the step is deterministic: a third run gives the same loss bits */
  float *l1 = emu_read(&e, g->outputs[0].node);
  for (int i = 0; i < p->n_leaves; i++) {
    const tg_node *n = p->g->nodes[p->leaves[i]];
    void *h = malloc(value_bytes(n));
    init_leaf(n, h);
    CK(api.cuMemcpyHtoD(e.leaf[i], h, value_bytes(n)));
    free(h);
  }
  run_step(&e);
  float *l2 = emu_read(&e, g->outputs[0].node);
  ck_assert(!memcmp(l1, l2, sizeof(float)));
  free(l1), free(l2);
  tg_cpu_free(cpu);
  free_emu(&e);
  tu_ctx_free(cc);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_gradients_agree_with_the_cpu) {
  tg_ctx *c = tu_ctx();
  tg_program *p = program(c, true, false);
  emu e;
  setup_emu(&e, p);
  run_step(&e);
  tg_ctx *cc = tu_ctx();
  tg_cpu *cpu = cpu_backend(cc, false);
  tg_cpu_run(cpu);
  const tg_graph *g = p->g, *cg = tg_cpu_graph(cpu);
  ck_assert_int_eq(g->n_outputs, cg->n_outputs);
  double worst = 0;
  const char *worst_name = "";
  for (int o = 0; o < g->n_outputs; o++) {
    const tg_node *n = g->outputs[o].node;
    int64_t numel = tg_type_numel(&n->type);
    float *got = emu_read(&e, n), *want = malloc(sizeof(float) * (size_t)numel);
    ck_assert(tg_cpu_read(cpu, cg->outputs[o].node, want));
    double d = rel_diff(want, got, numel, 1e-3);
    if (getenv("TG_EMU_TEST_VERBOSE"))
      printf("  %s: %.3g (first values %g %g %g, CPU %g %g %g)\n", g->outputs[o].name, d, (double)got[0],
             (double)got[1], (double)got[numel - 1], (double)want[0], (double)want[1], (double)want[numel - 1]);
    if (d > worst) worst = d, worst_name = g->outputs[o].name;
    if (!getenv("TG_EMU_TEST_VERBOSE"))
      ck_assert_msg(d <= 2e-2, "%s differs by %.3g of its scale (allowed 2e-2)", g->outputs[o].name, d);
    free(got), free(want);
  }
  printf("%d outputs of the gradient graph agree with the CPU's: the largest difference %.2e of scale (%s)\n",
         g->n_outputs, worst, worst_name);
  tg_cpu_free(cpu);
  free_emu(&e);
  tu_ctx_free(cc);
  tu_ctx_free(c);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_emu_gpt2");
  TCase *t = tcase_create("gpt2");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 1500);
  tcase_add_test(t, test_every_kernel_compiles_and_loads);
  tcase_add_test(t, test_step_runs_and_agrees_with_the_cpu);
  tcase_add_test(t, test_gradients_agree_with_the_cpu);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  char dir[] = "/tmp/tg_cuda_emu_gpt2_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("TG_CACHE", dir, 1);
  int rc = tu_run(suite());
  tu_remove_tree(dir);
  return rc;
}
