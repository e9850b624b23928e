/* test_codegen.c: the generated CUDA and C for models/gpt2.tg.
 *
 * - Every kernel of GPT-2's training step (the full 124M configuration, as
 *   tgc --emit cuda prints it) compiles with NVRTC for sm_80 and for sm_90
 *   with an empty log: no errors and no warnings.
 * - The output is deterministic: rendering twice gives the same bytes.
 * - Every kernel is headed by the comment listing its ops and .tg lines,
 *   the file includes no header, and bf16 / mma appear where they must.
 * - The C for a 2-layer model builds with the system compiler (the CPU
 *   backend's flags) with no diagnostics.
 * Running the code against the reference interpreter is tests/cli/
 * run_cpu_backend.sh (CPU) and, on a GPU machine, docs/performance.md. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccjit.h"
#include "backends.h"
#include "init.h"
#include "lower.h"
#include "cuda_kernels.h"
#include "nvrtc.h"
#include "passes.h"
#include "render_c.h"
#include "render_cuda.h"

static char cache_dir[64];

/* OpenBLAS's bf16 GEMM, which Debian's OpenBLAS lacks: defined here (and
 * exported, CMakeLists.txt) so that the generated C's weak reference finds
 * it and its bf16 matmuls take that branch; a naive row-major product that
 * accumulates in f32, counting its calls. */
static int sbgemm_calls;
void cblas_sbgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const unsigned short *a, int lda,
                  const unsigned short *b, int ldb, float beta, float *c, int ldc);
void cblas_sbgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const unsigned short *a, int lda,
                  const unsigned short *b, int ldb, float beta, float *c, int ldc) {
  if (order != 101) abort(); /* (called from OpenMP threads: no ck_assert here) */
  __atomic_fetch_add(&sbgemm_calls, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      float acc = 0;
      for (int p = 0; p < k; p++) {
        unsigned ua = ta == 111 ? a[(long)i * lda + p] : a[(long)p * lda + i];
        unsigned ub = tb == 111 ? b[(long)p * ldb + j] : b[(long)j * ldb + p];
        float fa, fb;
        ua <<= 16, ub <<= 16;
        memcpy(&fa, &ua, 4), memcpy(&fb, &ub, 4);
        acc += fa * fb;
      }
      c[(long)i * ldc + j] = alpha * acc + (beta != 0 ? beta * c[(long)i * ldc + j] : 0);
    }
}

static void setup(void) {
  strcpy(cache_dir, "/tmp/tg_codegen_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(cache_dir));
  setenv("TG_CACHE", cache_dir, 1);
}

static void teardown(void) {
  tu_remove_tree(cache_dir);
}

/* The training step of gpt2.tg with the given -D overrides, lowered (for
 * CUDA when cuda_remat: epilogue intermediates recomputed by readers). */
static bool cuda_remat;
static tg_program *step_program(tg_ctx *ctx, int n_defs, const char *const *defs) {
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), n_defs, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("lowering failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.grad = true, .step = true, .adamw = tg_adamw_defaults, .pad_multiple = 64};
  tg_run_pipeline(ctx, g, &po);
  tg_program *p = tg_lower_ex(ctx, g, cuda_remat ? TG_REMAT_ALL : TG_REMAT_NONE);
  ctx->bail = NULL;
  return p;
}

static char *render(const tg_program *p, bool cuda) {
  char *s = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&s, &n);
  ck_assert_ptr_nonnull(f);
  if (cuda) tg_render_cuda(f, p);
  else tg_render_c(f, p);
  fclose(f);
  return s;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

START_TEST(gpt2_cuda_compiles_for_sm80_and_sm90) {
  tg_ctx *ctx = tu_ctx();
  cuda_remat = true;
  tg_program *p = step_program(ctx, 0, NULL);
  cuda_remat = false;
  char *src = render(p, true);
  ck_assert_ptr_null(strstr(src, "#include"));
  ck_assert_int_gt(count(src, "mma.sync.aligned.m16n8k16"), 0);
  /* every launched function of every kernel is listed as a place of the
   * unit that runs it; kernels that are only a matmul have none */
  for (int k = 0; k < p->n_kernels; k++) {
    const tg_lkernel *lk = &p->kernels[k];
    for (int s = 0; s < lk->n_steps; s++) {
      char mark[64];
      tg_step_kind kind = lk->steps[s].kind;
      if (kind == TG_STEP_NEST || kind == TG_STEP_SCATTER)
        snprintf(mark, sizeof mark, " *   k%d_w%d: ", k, lk->steps[s].wave);
      else if (kind == TG_STEP_FLASH_FWD || kind == TG_STEP_FLASH_BWD)
        snprintf(mark, sizeof mark, " *   %s: ", lk->steps[s].fn);
      else continue;
      ck_assert_msg(strstr(src, mark), "no '%s' in the CUDA", mark);
    }
  }
  /* each distinct function once: GPT-2's twelve layers share their
   * kernels, so far fewer units than launched functions, every launch's
   * function is defined exactly once, and each unit is named by the
   * marker NVRTC's error messages use */
  tg_arena *a = tg_arena_new();
  tg_cuda_plan *plan = tg_cuda_plan_make(a, p);
  const tg_cuda_kernels *ks = tg_cuda_kernels_make(a, p, plan);
  int launched = 0, twelve = 0;
  for (int i = 0; i < plan->n_ops; i++) {
    if (plan->ops[i].kind != TG_CUDA_LAUNCH) continue;
    launched++;
    char def[160];
    snprintf(def, sizeof def, ") %s(", plan->ops[i].launch.function);
    ck_assert_msg(count(src, def) == 1, "%s is defined %d times", plan->ops[i].launch.function, count(src, def));
  }
  for (int u = 0; u < ks->n_units; u++) {
    char mark[64];
    snprintf(mark, sizeof mark, "// tg kernel: %s\n", ks->units[u].name);
    ck_assert_msg(strstr(src, mark), "no '%s' in the CUDA", mark);
    twelve += ks->units[u].n_places >= 12; /* (layernorm's backward runs 25 times: 2 a layer and the last) */
  }
  printf("GPT-2's step: %d launches of %d distinct functions, %d of them once per layer or more\n", launched,
         ks->n_units, twelve);
  ck_assert_int_lt(ks->n_units * 4, launched);
  /* the layer's kernels of its own (its other work is in cuBLASLt's
   * epilogues): layernorm forward and backward, flash attention's forward
   * and backward */
  ck_assert_int_ge(twelve, 4);
  /* the whole file (what the emulated device compiles) and each unit alone
   * (what a GPU runs: one NVRTC program a unit, in parallel), for both
   * architectures, with nothing in the logs */
  const char *arch[2] = {"sm_80", "sm_90"};
  int n = ks->n_units;
  tg_nvrtc_job *jobs = calloc((size_t)n, sizeof *jobs);
  char **srcs = calloc((size_t)n, sizeof *srcs);
  for (int u = 0; u < n; u++) {
    srcs[u] = tg_cuda_unit_source(ks, u);
    jobs[u].src = srcs[u];
    jobs[u].name = ks->units[u].name;
  }
  for (int x = 0; x < 2; x++) {
    char err[8192];
    ck_assert_msg(tg_nvrtc_compile_all(jobs, n, arch[x], NULL, 0, 0, err, sizeof err), "%s: %s", arch[x], err);
    for (int u = 0; u < n; u++) {
      ck_assert_msg(jobs[u].out.log == NULL || jobs[u].out.log[0] == 0, "%s %s: NVRTC printed: %.2000s", arch[x],
                    jobs[u].name, jobs[u].out.log);
      ck_assert_uint_gt(jobs[u].out.size, 1000);
      ck_assert(!jobs[u].out.from_cache);
      tg_cubin_free(&jobs[u].out);
    }
  }
  /* again: every unit from the cache; with one unit changed, only it is
   * compiled again */
  char err[8192];
  ck_assert_msg(tg_nvrtc_compile_all(jobs, n, "sm_90", NULL, 0, 0, err, sizeof err), "%s", err);
  for (int u = 0; u < n; u++) {
    ck_assert_msg(jobs[u].out.from_cache, "%s was compiled again", jobs[u].name);
    tg_cubin_free(&jobs[u].out);
  }
  char *changed = tg_sprintf(a, "%s// changed\n", srcs[n / 2]);
  jobs[n / 2].src = changed;
  ck_assert_msg(tg_nvrtc_compile_all(jobs, n, "sm_90", NULL, 0, 0, err, sizeof err), "%s", err);
  for (int u = 0; u < n; u++) {
    ck_assert_msg(jobs[u].out.from_cache == (u != n / 2), "%s: from the cache %d", jobs[u].name, jobs[u].out.from_cache);
    tg_cubin_free(&jobs[u].out);
    free(srcs[u]);
  }
  free(jobs);
  free(srcs);
  tg_arena_free(a);
  tg_cubin whole = {0};
  ck_assert_msg(tg_nvrtc_compile(src, "gpt2.cu", "sm_90", NULL, 0, &whole, err, sizeof err), "%s", err);
  ck_assert_msg(whole.log == NULL || whole.log[0] == 0, "NVRTC printed: %.2000s", whole.log);
  tg_cubin_free(&whole);
  free(src);
  tu_ctx_free(ctx);
}
END_TEST

/* GPT-2's optimizer update (B=16, n_layer layers): its launch, the number
 * of branches on blockIdx.x in its function, and checks that every
 * parameter is written by exactly one of its steps (a table's entry or a
 * step of its own), every step is one of them, and the manifest lists
 * every table and entry. */
static int optimizer_branches(const char *n_layer, int *entries) {
  tg_ctx *ctx = tu_ctx();
  const char *defs[] = {"B=16", n_layer};
  cuda_remat = true;
  tg_program *p = step_program(ctx, 2, defs);
  cuda_remat = false;
  const tg_graph *g = p->g;
  tg_arena *a = tg_arena_new();
  tg_cuda_plan *plan = tg_cuda_plan_make(a, p);
  const tg_cuda_kernels *ks = tg_cuda_kernels_make(a, p, plan);
  int *writes = calloc((size_t)g->n_nodes, sizeof *writes);
  const tg_cuda_op *opt = NULL;
  int tables = 0, all_entries = 0;
  for (int i = 0; i < plan->n_ops; i++) {
    const tg_cuda_op *op = &plan->ops[i];
    if (op->kind != TG_CUDA_LAUNCH) continue;
    for (int t = 0; t < op->launch.n_tables; t++) tables++, all_entries += op->launch.tables[t].n_entries;
    if (g->kernels[op->kernel].kind != TG_KERNEL_MULTI) continue;
    bool params = false;
    for (int t = 0; t < op->launch.n_tables; t++)
      for (int e = 0; e < op->launch.tables[t].n_entries; e++)
        for (int b = 0; b < op->launch.tables[t].n_bufs; b++)
          params |= g->nodes[op->launch.tables[t].entries[e].bufs[b]]->op == TG_OP_param;
    if (params) opt = op;
  }
  ck_assert_msg(opt, "no multi-tensor launch updates the parameters through a table");
  const tg_cuda_launch *L = &opt->launch;
  int launched = 0, own = 0;
  for (int s = 0; s < p->kernels[opt->lkernel].n_steps; s++) {
    const tg_step *st = &p->kernels[opt->lkernel].steps[s];
    launched += st->wave == opt->wave && tg_cuda_step_launched(st);
  }
  *entries = 0;
  for (int t = 0; t < L->n_tables; t++) {
    const tg_cuda_table *T = &L->tables[t];
    ck_assert_int_gt(T->n_entries, 1);
    *entries += T->n_entries;
    for (int e = 0; e < T->n_entries; e++) {
      if (e) ck_assert_int_gt(T->entries[e].first, T->entries[e - 1].first); /* block order: binary search */
      for (int b = 0; b < T->n_bufs; b++) writes[T->entries[e].bufs[b]] += T->buf_written[b];
    }
  }
  for (int x = 0; x < L->n_args; x++) writes[L->args[x].node] += L->args[x].written;
  int params = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i]->op != TG_OP_param) continue;
    params++;
    ck_assert_msg(writes[i] == 1, "parameter %s is written %d times by the optimizer", g->nodes[i]->name, writes[i]);
  }
  const tg_cuda_unit *U = NULL;
  for (int u = 0; u < ks->n_units; u++)
    if (!strcmp(ks->units[u].name, L->function)) U = &ks->units[u];
  ck_assert_ptr_nonnull(U);
  int branches = count(U->body, "blockIdx.x <");
  own = branches - L->n_tables;
  ck_assert_int_eq(*entries + own, launched);
  printf("GPT-2 (%s) optimizer %s: %d parameters, %d steps: %d in %d tables, %d of their own; %d branches; "
         "%d buffer parameters\n",
         n_layer, L->function, params, launched, *entries, L->n_tables, own, branches, L->n_args);
  /* the manifest describes every table and entry */
  char *m = NULL;
  size_t mn = 0;
  FILE *f = open_memstream(&m, &mn);
  tg_render_cuda_manifest(f, p, "gpt2.cu");
  fclose(f);
  ck_assert_int_eq(count(m, "\"param\": \"tg_table"), tables);
  ck_assert_int_eq(count(m, "{\"step\": "), all_entries);
  free(m);
  free(writes);
  tg_arena_free(a);
  tu_ctx_free(ctx);
  return branches;
}

START_TEST(multi_tensor_kernels_read_tables) {
  int small, big;
  int b2 = optimizer_branches("n_layer=2", &small), b12 = optimizer_branches("n_layer=12", &big);
  /* ten more layers, 120 more parameters: more entries, not more branches */
  ck_assert_int_gt(big, small);
  ck_assert_int_eq(b12, b2);
  ck_assert_int_le(b12, 8);
}
END_TEST

START_TEST(output_is_deterministic) {
  const char *defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab=65", "block_size=32", "B=2", "T=32"};
  char *first[2];
  for (int round = 0; round < 2; round++) {
    tg_ctx *ctx = tu_ctx();
    tg_program *p = step_program(ctx, 7, defs);
    for (int cuda = 0; cuda < 2; cuda++) {
      char *s = render(p, cuda);
      if (round == 0) first[cuda] = s;
      else {
        ck_assert_msg(!strcmp(first[cuda], s), "the %s output differs between two runs", cuda ? "CUDA" : "C");
        free(s);
        free(first[cuda]);
      }
    }
    tu_ctx_free(ctx);
  }
}
END_TEST

START_TEST(every_kernel_has_its_ops_comment) {
  const char *defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab=65", "block_size=32", "B=2", "T=32"};
  tg_ctx *ctx = tu_ctx();
  tg_program *p = step_program(ctx, 7, defs);
  char *c = render(p, false);
  for (int k = 0; k < p->n_kernels; k++) {
    char head[64];
    snprintf(head, sizeof head, "/* k%d %s \"", k, tg_kernel_kind_name(p->g->kernels[k].kind));
    ck_assert_msg(strstr(c, head), "no comment for kernel k%d", k);
  }
  ck_assert_ptr_nonnull(strstr(c, " *   std.tg:15: sum%"));   /* layernorm's mean, with its line */
  ck_assert_ptr_nonnull(strstr(c, " *   gpt2.tg:64: matmul%")); /* the MLP */
  free(c);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(c_builds_cleanly) {
  const char *defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab=65", "block_size=32", "B=2", "T=32"};
  tg_ctx *ctx = tu_ctx();
  tg_program *p = step_program(ctx, 7, defs);
  char *c = render(p, false);
  const char *flags[] = {"-O1", "-fopenmp", "-Wall", "-Wno-unused-variable", "-Wno-unused-parameter",
                         "-Wno-unused-function", "-Wno-unknown-pragmas"};
  tg_so so = {0};
  char err[8192];
  bool ok = tg_ccjit_build(c, flags, 7, NULL, 0, &so, err, sizeof err);
  ck_assert_msg(ok, "%s", err);
  ck_assert_msg(!so.log || !so.log[0], "the compiler printed: %.2000s", so.log);
  tg_so_free(&so);
  free(c);
  tu_ctx_free(ctx);
}
END_TEST

/* The GPU's lowering (recomputing matmul epilogue intermediates in their
 * readers, bias and GELU in the GEMM) must not change what is computed:
 * run both programs on the CPU backend and compare every gradient.
 * Tolerance in f32, 1e-5 of each tensor's scale: the two differ only by
 * float32 rounding in the recomputed tanh and products (the vectorised
 * polynomials vs the same polynomials, reassociated by the compiler), as
 * in tests/cli/run_cpu_backend.sh.  In bf16, the GEMM rounds product +
 * bias (and its GELU) once where the graph rounds the product, the sum and
 * the GELU's steps: values differ by a bf16 ulp (2^-8) here and there,
 * and the gradients by up to 2.1e-2 of their scale (measured; the qkv
 * bias's, a sum of 64 rows that mostly cancel, the most); allowed 3e-2,
 * what run_cuda_backend.sh allows the emulated device against the CPU in
 * bf16 for the same reason. */
/* The grad graph of a 2-layer GPT on the CPU backend (through the backend
 * interface), lowered with or without recomputation; its leaves filled
 * deterministically.  *n_remat counts the recomputed values. */
static tg_exec *grad_backend(tg_ctx *ctx, tg_device *dev, tg_precision_policy prec, bool remat, int *n_remat) {
  const char *defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab=65", "block_size=32", "B=2", "T=32"};
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), 7, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_pipeline_opts po = {.precision = prec, .grad = true, .pad_multiple = 64};
  tg_run_pipeline(ctx, g, &po);
  tg_program *p = tg_lower_ex(ctx, g, remat ? TG_REMAT_ALL : TG_REMAT_NONE);
  *n_remat = 0;
  for (int i = 0; i < g->n_nodes; i++) *n_remat += p->remat[i];
  tg_exec_opts eo = {.name = "grad", .remat = remat};
  tg_exec *e = tg_exec_compile(dev, ctx, g, &eo);
  ctx->bail = NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    int64_t numel = tg_type_numel(&n->type);
    if (n->op == TG_OP_param) {
      float *v = malloc(sizeof(float) * (size_t)numel);
      tg_param_init(n, 7, v);
      tg_tensor_write(tg_exec_leaf(e, n), v, TG_HOST_F32);
      const tg_node *copy = tg_param_copy_of(g, n); /* bf16: its weight copy */
      if (copy) tg_tensor_write(tg_exec_leaf(e, copy), v, TG_HOST_F32);
      free(v);
    }
    if (n->op == TG_OP_input) {
      int32_t *ids = malloc(sizeof(int32_t) * (size_t)numel);
      for (int64_t k = 0; k < numel; k++) ids[k] = (int32_t)((k * 37 + (n->name[0] == 't')) % 65);
      tg_tensor_write(tg_exec_leaf(e, n), ids, TG_HOST_I32);
      free(ids);
    }
  }
  return e;
}

/* Without recomputation (the CPU), each MLP's pre-activation x is stored
 * as gelu_grad(x), and its backward loads it instead of computing the
 * derivative: in f32 only (bf16 stores round), and never with
 * recomputation (the GPU's DGELU GEMM reads x).  That the values agree is
 * recomputing_changes_nothing's (the remat lowering does not do it) and
 * run_cpu_backend.sh's (the interpreter). */
START_TEST(gelu_grad_stored_by_the_forward) {
  const char *defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab=65", "block_size=32", "B=2", "T=32"};
  tg_ctx *ctx = tu_ctx();
  cuda_remat = false;
  tg_program *p = step_program(ctx, 7, defs);
  ck_assert_ptr_nonnull(p->holds_gelu_grad);
  int held = 0;
  for (int i = 0; i < p->g->n_nodes; i++) {
    if (!p->holds_gelu_grad[i]) continue;
    held++;
    /* read elsewhere only by gelu_grad, and fed to a gelu where it is made */
    const tg_node *x = p->g->nodes[i];
    bool gelu = false;
    for (int j = 0; j < p->g->n_nodes; j++) {
      const tg_node *r = p->g->nodes[j];
      for (int k = 0; k < r->nin; k++) {
        if (r->in[k] != x) continue;
        if (r->kernel != x->kernel) ck_assert_int_eq(r->op, TG_OP_gelu_grad);
        gelu |= r->op == TG_OP_gelu;
      }
    }
    ck_assert(gelu);
  }
  ck_assert_int_eq(held, 2);
  char *c = render(p, false);
  /* the layers' epilogues are one function: one store of the derivative,
   * and no other call of it but its definition */
  ck_assert_int_eq(count(c, "as its GELU's derivative"), 1);
  ck_assert_int_eq(count(c, "tg_gelu_grad("), 1 + 1);
  free(c);
  tg_ctx *bf = tu_ctx();
  tg_graph *g = tu_compile(bf, "models/gpt2.tg", tu_read("models/gpt2.tg"), 7, defs);
  tg_pipeline_opts po = {.precision = TG_PRECISION_BF16, .grad = true, .step = true, .adamw = tg_adamw_defaults,
                         .pad_multiple = 64};
  tg_run_pipeline(bf, g, &po);
  ck_assert_ptr_null(tg_lower_ex(bf, g, TG_REMAT_NONE)->holds_gelu_grad);
  tu_ctx_free(bf);
  tg_ctx *gpu = tu_ctx();
  cuda_remat = true;
  ck_assert_ptr_null(step_program(gpu, 7, defs)->holds_gelu_grad);
  cuda_remat = false;
  tu_ctx_free(gpu);
  tu_ctx_free(ctx);
}
END_TEST

/* The CPU's choice, TG_REMAT_CHEAP: it recomputes some values (layernorm's
 * normalised x), none through an exp, tanh, GELU, square root or
 * division, still stores the GELU's derivative for the backward, and
 * needs a smaller arena than storing everything.  That the numbers are
 * the same is every CPU test's against the interpreter (it is the CPU
 * backend's default). */
START_TEST(cpu_recomputes_only_cheap_ops) {
  const char *defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab=65", "block_size=32", "B=2", "T=32"};
  tg_program *p[2];
  tg_ctx *ctx[2] = {tu_ctx(), tu_ctx()};
  for (int r = 0; r < 2; r++) {
    tg_graph *g = tu_compile(ctx[r], "models/gpt2.tg", tu_read("models/gpt2.tg"), 7, defs);
    tg_pipeline_opts po = {.grad = true, .step = true, .adamw = tg_adamw_defaults, .pad_multiple = 64};
    tg_run_pipeline(ctx[r], g, &po);
    p[r] = tg_lower_ex(ctx[r], g, r ? TG_REMAT_CHEAP : TG_REMAT_NONE);
  }
  int recomputed = 0, held = 0;
  for (int i = 0; i < p[1]->g->n_nodes; i++) {
    held += p[1]->holds_gelu_grad && p[1]->holds_gelu_grad[i];
    if (!p[1]->remat[i]) continue;
    recomputed++;
    tg_op op = p[1]->g->nodes[i]->op;
    ck_assert_msg(op == TG_OP_add || op == TG_OP_sub || op == TG_OP_mul || op == TG_OP_neg || op == TG_OP_cast ||
                      op == TG_OP_where || op == TG_OP_maximum || (op >= TG_OP_lt && op <= TG_OP_ne),
                  "%s recomputed", tg_ops[op].name);
  }
  /* per layer: layernorm 1's and 2's normalised x, at least */
  ck_assert_int_ge(recomputed, 2 * 2);
  ck_assert_int_eq(held, 2);
  ck_assert_int_lt(p[1]->arena_bytes, p[0]->arena_bytes);
  for (int r = 0; r < 2; r++) tu_ctx_free(ctx[r]);
}
END_TEST

START_TEST(recomputing_changes_nothing) {
  tg_precision_policy prec = _i ? TG_PRECISION_BF16 : TG_PRECISION_F32;
  tg_ctx *ctx[2] = {tu_ctx(), tu_ctx()};
  tg_device *dev = tg_device_open(ctx[0], tg_backend_find("cpu"), NULL);
  int n_remat[2];
  tg_exec *c[2] = {grad_backend(ctx[0], dev, prec, false, &n_remat[0]),
                   grad_backend(ctx[1], dev, prec, true, &n_remat[1])};
  ck_assert_int_eq(n_remat[0], 0);
  /* the epilogues of the 2 MLPs: 0.5x, 0.044715x, x^3 terms, tanh, 1 + tanh */
  ck_assert_int_ge(n_remat[1], 2 * 5);
  const tg_graph *g[2] = {tg_exec_graph(c[0]), tg_exec_graph(c[1])};
  for (int r = 0; r < 2; r++) tg_exec_run(ctx[r], c[r]);
  ck_assert_int_eq(g[0]->n_outputs, g[1]->n_outputs);
  for (int o = 0; o < g[0]->n_outputs; o++) {
    int64_t n = tg_type_numel(&g[0]->outputs[o].node->type);
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    ck_assert(tg_exec_read(c[0], g[0]->outputs[o].node, a, TG_HOST_F32));
    ck_assert(tg_exec_read(c[1], g[1]->outputs[o].node, b, TG_HOST_F32));
    float scale = 1e-3f, diff = 0;
    for (int64_t e = 0; e < n; e++) {
      if (fabsf(a[e]) > scale) scale = fabsf(a[e]);
      if (fabsf(a[e] - b[e]) > diff) diff = fabsf(a[e] - b[e]);
    }
    float tol = prec == TG_PRECISION_BF16 ? 3e-2f : 1e-5f;
    ck_assert_msg(diff <= tol * scale, "%s differs by %g of %g (allowed %g of it)", g[0]->outputs[o].name, diff, scale,
                  (double)tol);
    free(a);
    free(b);
  }
  for (int r = 0; r < 2; r++) tg_exec_free(c[r]);
  tg_device_close(dev);
  for (int r = 0; r < 2; r++) tu_ctx_free(ctx[r]);
}
END_TEST

/* A matmul operand computed by the matmul's own kernel (x cast to bf16
 * for x @ w): the step that makes it runs before the product, and nothing
 * computes it again after; the CPU backend agrees with the interpreter,
 * its bf16 matmul through cblas_sbgemm (defined above).  (bf16 rounds x,
 * w and the product: 2^-9 each, so 1e-2 relative.) */
/* y of the model on the named backend. */
static void run_lin(const char *text, const char *backend, float *y) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tu_compile(ctx, "t.tg", text, 0, NULL);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_pipeline_opts po = {.precision = TG_PRECISION_BF16, .kernels = true};
  tg_run_pipeline(ctx, g, &po);
  tg_device *dev = tg_device_open(ctx, tg_backend_find(backend), NULL);
  tg_exec_opts eo = {.name = "t", .remat = -1};
  tg_exec *e = tg_exec_compile(dev, ctx, g, &eo);
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    int64_t numel = tg_type_numel(&n->type);
    float *v = malloc(sizeof(float) * (size_t)numel);
    for (int64_t k = 0; k < numel; k++) v[k] = (float)((k * 7919) % 97) / 97.0f - 0.5f;
    if (n->op == TG_OP_input || n->op == TG_OP_param) tg_tensor_write(tg_exec_leaf(e, n), v, TG_HOST_F32);
    if (n->op == TG_OP_param && tg_param_copy_of(g, n))
      tg_tensor_write(tg_exec_leaf(e, tg_param_copy_of(g, n)), v, TG_HOST_F32);
    free(v);
  }
  tg_exec_run(ctx, e);
  ck_assert(tg_exec_read(e, tg_graph_output(g, "y"), y, TG_HOST_F32));
  ctx->bail = NULL;
  tg_exec_free(e);
  tg_device_close(dev);
  tu_ctx_free(ctx);
}

START_TEST(computed_matmul_operand) {
  const char *text = "config {\n  N = 64\n  C = 32\n  K = 16\n}\n"
                     "input x: f32[N, C]\n"
                     "param w: [C, K] = normal(0.5)\n"
                     "param b: [K] = ones\n"
                     "output y = sum(x @ w + b, -1)\n";
  float ref[64], cpu[64];
  run_lin(text, "ref", ref);
  int calls = sbgemm_calls;
  run_lin(text, "cpu", cpu);
  ck_assert_int_gt(sbgemm_calls, calls);
  for (int i = 0; i < 64; i++)
    ck_assert_msg(fabsf(ref[i] - cpu[i]) <= 1e-2f * (1 + fabsf(ref[i])), "y[%d]: ref %g, cpu %g", i, (double)ref[i],
                  (double)cpu[i]);
}
END_TEST

/* A collective gets a kernel of its own from fusion, which lowers to one
 * step with no code (the backend's, at the step's collective point: the C
 * calls `collective(k, ctx)` there); a sum of bf16 is refused with a
 * message (the backends sum f32 only). */
static tg_program *lower_text(tg_ctx *ctx, const char *text) {
  const tg_source *src = tg_source_add(ctx, "t.tgir", text, strlen(text));
  tg_graph *g = tg_read_ir(ctx, src);
  tg_fuse(ctx, g, NULL);
  tg_memplan(ctx, g, NULL);
  ck_assert(tg_verify(ctx, g));
  return tg_lower(ctx, g);
}

START_TEST(collectives_lower_to_collective_points) {
  static const char text[] = "# tg IR 1\n"
                             "%0 = input : f32[8] \"x\"\n"
                             "%1 = exp %0 : f32[8]\n"
                             "%2 = all_gather %1 {ranks=2} : f32[16]\n"
                             "%3 = exp %2 : f32[16]\n"
                             "output \"y\" = %3\n";
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_program *p = lower_text(ctx, text);
  const tg_node *ag = p->g->nodes[2];
  ck_assert_int_ge(ag->kernel, 0);
  ck_assert_int_eq(p->g->kernels[ag->kernel].kind, TG_KERNEL_SPECIAL);
  ck_assert_int_eq(p->g->kernels[ag->kernel].n_nodes, 1);
  ck_assert_int_ne(p->g->nodes[3]->kernel, ag->kernel);
  ck_assert_ptr_eq(tg_kernel_collective(p, ag->kernel), ag);
  ck_assert_ptr_null(tg_kernel_collective(p, p->g->nodes[3]->kernel));
  tg_collective_operands c = tg_collective_operands_of(p, ag);
  ck_assert_int_eq(c.in.base, 1);
  ck_assert_int_eq(c.out.base, 2);
  ck_assert_int_eq(c.in_numel, 8);
  ck_assert_int_eq(c.out_numel, 16);
  ck_assert_int_eq(p->store[1].place, TG_PLACE_ARENA);
  char *src = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&src, &len);
  tg_render_c(f, p);
  fclose(f);
  char want[64];
  snprintf(want, sizeof want, "collective(%d, ctx);", ag->kernel);
  ck_assert_msg(strstr(src, want), "the step does not call %s", want);
  free(src);

  static const char bf16[] = "# tg IR 1\n"
                             "%0 = input : f32[16] \"x\"\n"
                             "%1 = cast %0 : bf16[16]\n"
                             "%2 = reduce_scatter %1 {ranks=2} : bf16[8]\n"
                             "output \"y\" = %2\n";
  if (setjmp(bail)) {
    ctx->bail = NULL;
    ck_assert_msg(strstr(tu_errors(ctx), "cannot lower reduce_scatter of bf16: the backends sum in f32 only"), "%s",
                  tu_errors(ctx));
    tu_ctx_free(ctx);
    return;
  }
  lower_text(ctx, bf16);
  ck_abort_msg("lowering accepted a reduce_scatter of bf16");
}
END_TEST

/* bf16 values are rounded after every op, as the interpreter rounds them,
 * except where the op cannot leave bf16 (emit.c: holds_bf16): a select,
 * negation or maximum of bf16 values and bf16-exact constants (-inf, 0,
 * 0.5); those are stored by their top half (tg_bf16_bits).  An add, a
 * constant bf16 cannot hold (0.1) and what was rounded into f32 from
 * something else still round.  The C backend's values, with inf, -0 and
 * halfway cases among the inputs, must equal the interpreter's bit for
 * bit, since the rounding left out changes no bit. */
/* Roundings of a first lane: "t<digits> = tg_bf16_round(" (a vectorised
 * CUDA nest repeats each for its other lanes, as t<digits>_1 ...). */
static int first_lane_roundings(const char *src) {
  int n = 0;
  for (const char *p = src; (p = strstr(p, " = tg_bf16_round(")); p++) {
    const char *q = p;
    while (q > src && q[-1] >= '0' && q[-1] <= '9') q--;
    n += q < p && q > src && q[-1] == 't';
  }
  return n;
}

START_TEST(bf16_rounds_only_what_can_leave_bf16) {
  static const char text[] = "# tg IR 1\n"
                             "%0 = input : f32[8] \"x\"\n"
                             "%1 = cast %0 : bf16[8]\n"
                             "%2 = const {value=0} : bf16[]\n"
                             "%3 = gt %1, %2 : bool[8]\n"
                             "%4 = const {value=-inf} : bf16[]\n"
                             "%5 = where %3, %1, %4 : bf16[8]\n"
                             "%6 = neg %5 : bf16[8]\n"
                             "%7 = const {value=0.5} : bf16[]\n"
                             "%8 = maximum %6, %7 : bf16[8]\n"
                             "%9 = add %8, %1 : bf16[8]\n"
                             "%10 = const {value=0.1} : f32[]\n"
                             "%11 = cast %1 : f32[8]\n"
                             "%12 = where %3, %11, %10 : f32[8]\n"
                             "%13 = cast %12 : bf16[8]\n"
                             "output \"y\" = %8\n"
                             "output \"z\" = %9\n"
                             "output \"w\" = %13\n";
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_program *p = lower_text(ctx, text);
  ctx->bail = NULL;
  char *c = render(p, false), *cu = render(p, true);
  for (int k = 0; k < 2; k++) {
    const char *src = k ? cu : c;
    /* the one cast from f32 (%1), the add (%9), the cast of a select with 0.1 (%13) */
    if (first_lane_roundings(src) != 3) fputs(src, stderr);
    ck_assert_msg(first_lane_roundings(src) == 3, "%s: %d roundings, want 3 (the source is on stderr)",
                  k ? "CUDA" : "C", first_lane_roundings(src));
    ck_assert_msg(count(src, "= tg_bf16_bits(") >= 1, "%s: no bf16 value stored by its top half", k ? "CUDA" : "C");
  }
  free(c), free(cu);
  tu_ctx_free(ctx);
  /* numerics: the C backend against the interpreter, bit for bit */
  const float x[8] = {1.0f, -0.0f, INFINITY, -INFINITY, 1.00390625f, 3.0f / 7.0f, -2.5f, 0.0f};
  float got[2][3][8];
  const char *backends[2] = {"ref", "cpu"};
  for (volatile int b = 0; b < 2; b++) {
    tg_ctx *cx = tu_ctx();
    cx->bail = &bail;
    if (setjmp(bail)) ck_abort_msg("%s: %s", backends[b], tu_errors(cx));
    const tg_source *sr = tg_source_add(cx, "t.tgir", text, strlen(text));
    tg_graph *g = tg_read_ir(cx, sr);
    tg_pipeline_opts po = {.kernels = true};
    tg_run_pipeline(cx, g, &po);
    tg_device *dev = tg_device_open(cx, tg_backend_find(backends[b]), NULL);
    tg_exec_opts eo = {.name = "t", .remat = -1};
    tg_exec *e = tg_exec_compile(dev, cx, g, &eo);
    tg_tensor_write(tg_exec_leaf(e, tg_graph_leaf(g, TG_OP_input, "x")), x, TG_HOST_F32);
    tg_exec_run(cx, e);
    const char *outs[3] = {"y", "z", "w"};
    for (int o = 0; o < 3; o++) ck_assert(tg_exec_read(e, tg_graph_output(g, outs[o]), got[b][o], TG_HOST_F32));
    cx->bail = NULL;
    tg_exec_free(e);
    tg_device_close(dev);
    tu_ctx_free(cx);
  }
  for (int o = 0; o < 3; o++)
    for (int i = 0; i < 8; i++)
      ck_assert_msg(memcmp(&got[0][o][i], &got[1][o][i], sizeof(float)) == 0, "output %d [%d]: ref %a, cpu %a", o, i,
                    (double)got[0][o][i], (double)got[1][o][i]);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("codegen");
  TCase *t = tcase_create("codegen");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 600);
  tcase_add_test(t, gpt2_cuda_compiles_for_sm80_and_sm90);
  tcase_add_test(t, multi_tensor_kernels_read_tables);
  tcase_add_test(t, output_is_deterministic);
  tcase_add_test(t, every_kernel_has_its_ops_comment);
  tcase_add_test(t, c_builds_cleanly);
  tcase_add_test(t, gelu_grad_stored_by_the_forward);
  tcase_add_test(t, cpu_recomputes_only_cheap_ops);
  tcase_add_loop_test(t, recomputing_changes_nothing, 0, 2); /* f32, bf16 */
  tcase_add_test(t, computed_matmul_operand);
  tcase_add_test(t, collectives_lower_to_collective_points);
  tcase_add_test(t, bf16_rounds_only_what_can_leave_bf16);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(suite()); }
