/* test_collectives.c: the IR's collectives (all_reduce, all_gather,
 * reduce_scatter) run by the reference interpreter over MPI, and their
 * derivative rules checked numerically.
 *
 * Started alone (as ctest starts it) the test runs itself again under
 * `mpirun -np 2`, as test_cuda_zero does; where there is no mpirun or no MPI
 * in this build, or TG_COLLECTIVES_TEST_ONE_RANK is set (the sanitizer build:
 * LeakSanitizer reads Open MPI's allocations as leaks), it runs on one rank,
 * where {ranks=1} is the identity.  The graphs are built for N = the number
 * of ranks; every rank's inputs are a formula of its rank, so each rank
 * computes the others' values by hand and checks:
 * - forward: all_gather's [N*S] holds rank q's x at [q*S, q*S+S);
 *   reduce_scatter gives this rank's block of the sum over ranks; all_reduce
 *   the sum over ranks;
 * - backward, for L = sum(w * all_gather(x)) + sum(u * reduce_scatter(v))
 *   + sum(c * all_reduce(a)), the objective summed over ranks as under ZeRO:
 *   grad x = reduce_scatter(w) (sum over ranks of their w's block for this
 *   rank), grad v = all_gather(u), grad a = c (c the same on every rank:
 *   the all_reduce's derivative is the identity);
 * - the same graph, fused and planned, compiled by the ref, cpu and cuda-emu
 * backends (the collectives lowered as kernels of their own, run at the step's
 *   collective points): the same values, exactly (every value here is a
 *   small integer or half, so f32 sums are exact in any order);
 * - a graph whose ranks differs from the run's is refused, naming the op. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backends.h"
#include "comm.h"
#include "interp.h"
#include "passes.h"
#include "testutil.h"

enum { S = 4 }; /* elements in one rank's shard */
static int me, ranks = 1;

static double x_of(int r, int i) { return 10.0 * r + i + 1; }
static double w_of(int r, int j) { return 0.5 * (r + 1) + j; }
static double v_of(int r, int j) { return 100.0 * r + j; }
static double u_of(int r, int i) { return r + 2.0 * i; }
static double a_of(int r, int i) { return r - i; }
static double c_of(int i) { return i + 1; }

static tg_graph *graph_for(tg_ctx *ctx, int n) {
  static char text[4096];
  snprintf(text, sizeof text,
           "# tg IR 1\n"
           "%%0 = param {init=zeros} : f32[%d] \"x\"\n"
           "%%1 = input : f32[%d] \"w\"\n"
           "%%2 = all_gather %%0 {ranks=%d} : f32[%d]\n"
           "%%3 = mul %%2, %%1 : f32[%d]\n"
           "%%4 = sum %%3 {axes=[0]} : f32[1]\n"
           "%%5 = param {init=zeros} : f32[%d] \"v\"\n"
           "%%6 = input : f32[%d] \"u\"\n"
           "%%7 = reduce_scatter %%5 {ranks=%d} : f32[%d]\n"
           "%%8 = mul %%7, %%6 : f32[%d]\n"
           "%%9 = sum %%8 {axes=[0]} : f32[1]\n"
           "%%10 = param {init=zeros} : f32[%d] \"a\"\n"
           "%%11 = input : f32[%d] \"c\"\n"
           "%%12 = all_reduce %%10 {ranks=%d} : f32[%d]\n"
           "%%13 = mul %%12, %%11 : f32[%d]\n"
           "%%14 = sum %%13 {axes=[0]} : f32[1]\n"
           "%%15 = add %%4, %%9 : f32[1]\n"
           "%%16 = add %%15, %%14 : f32[1]\n"
           "%%17 = reshape %%16 : f32[]\n"
           "output \"loss\" = %%17\n"
           "output \"ag\" = %%2\n"
           "output \"rs\" = %%7\n"
           "output \"ar\" = %%12\n",
           S, n * S, n, n * S, n * S, n * S, S, n, S, S, S, S, n, S, S);
  const tg_source *src = tg_source_add(ctx, "collectives.tgir", text, strlen(text));
  return tg_read_ir(ctx, src);
}

static const tg_node *named(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, name)) return g->outputs[i].node;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->name && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
  ck_abort_msg("no node %s", name);
  return NULL;
}

static void fill(tg_interp *it, const tg_graph *g, const char *name, int64_t n, double (*f)(int, int)) {
  double *v = tg_interp_leaf(it, named(g, name));
  ck_assert_ptr_nonnull(v);
  for (int64_t i = 0; i < n; i++) v[i] = f(me, (int)i);
}

static double c_of_rank(int r, int i) { return (void)r, c_of(i); }

/* The values every rank must see (exact: small integers and halves), from
 * the interpreter or a backend's run `run`. */
static void check_values(const char *who, int run, const double *ag, const double *rs, const double *ar,
                         const double *dx, const double *dv, const double *da) {
  for (int q = 0; q < ranks; q++)
    for (int i = 0; i < S; i++) {
      ck_assert_msg(ag[q * S + i] == x_of(q, i), "%s run %d: all_gather[%d] = %g", who, run, q * S + i, ag[q * S + i]);
      ck_assert_msg(dv[q * S + i] == u_of(q, i), "%s run %d: grad v[%d] = %g", who, run, q * S + i, dv[q * S + i]);
    }
  for (int i = 0; i < S; i++) {
    double rs_want = 0, ar_want = 0, dx_want = 0;
    for (int q = 0; q < ranks; q++) {
      rs_want += v_of(q, me * S + i);
      ar_want += a_of(q, i);
      dx_want += w_of(q, me * S + i);
    }
    ck_assert_msg(rs[i] == rs_want, "%s run %d: reduce_scatter[%d] = %g, not %g", who, run, i, rs[i], rs_want);
    ck_assert_msg(ar[i] == ar_want, "%s run %d: all_reduce[%d] = %g, not %g", who, run, i, ar[i], ar_want);
    ck_assert_msg(dx[i] == dx_want, "%s run %d: grad x[%d] = %g, not %g", who, run, i, dx[i], dx_want);
    ck_assert_msg(da[i] == c_of(i), "%s run %d: grad a[%d] = %g", who, run, i, da[i]);
  }
}

START_TEST(forward_and_gradients) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("failed: %s", tu_errors(ctx));
  tg_graph *g = graph_for(ctx, ranks);
  tg_autodiff(ctx, g);
  ctx->bail = NULL;
  ck_assert(tg_verify(ctx, g));
  tg_interp *it = tg_interp_new(g, TG_PREC_F64);
  ck_assert_ptr_nonnull(it);
  fill(it, g, "x", S, x_of);
  fill(it, g, "w", (int64_t)ranks * S, w_of);
  fill(it, g, "v", (int64_t)ranks * S, v_of);
  fill(it, g, "u", S, u_of);
  fill(it, g, "a", S, a_of);
  fill(it, g, "c", S, c_of_rank);
  ctx->bail = &bail;
  tg_interp_run(ctx, it);
  ctx->bail = NULL;

  check_values("the interpreter", 0, tg_interp_value(it, named(g, "ag")), tg_interp_value(it, named(g, "rs")),
               tg_interp_value(it, named(g, "ar")), tg_interp_value(it, named(g, TG_GRAD_PREFIX "x")),
               tg_interp_value(it, named(g, TG_GRAD_PREFIX "v")), tg_interp_value(it, named(g, TG_GRAD_PREFIX "a")));
  tg_interp_free(it);
  tu_ctx_free(ctx);
}
END_TEST

static void fill_leaf(tg_exec *e, const tg_graph *g, const char *name, int64_t n, double (*f)(int, int)) {
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = (float)f(me, (int)i);
  tg_tensor_write(tg_exec_leaf(e, named(g, name)), v, TG_HOST_F32);
  free(v);
}

static double *read_out(tg_exec *e, const tg_graph *g, const char *name) {
  const tg_node *n = named(g, name);
  double *v = malloc(sizeof(double) * (size_t)tg_type_numel(&n->type));
  ck_assert_msg(tg_exec_read(e, n, v, TG_HOST_F64), "%s is not readable", name);
  return v;
}

static void check_outputs(tg_exec *e, const tg_graph *g, const char *backend, int run) {
  double *ag = read_out(e, g, "ag"), *rs = read_out(e, g, "rs"), *ar = read_out(e, g, "ar");
  double *dx = read_out(e, g, TG_GRAD_PREFIX "x"), *dv = read_out(e, g, TG_GRAD_PREFIX "v");
  double *da = read_out(e, g, TG_GRAD_PREFIX "a");
  check_values(backend, run, ag, rs, ar, dx, dv, da);
  free(ag), free(rs), free(ar), free(dx), free(dv), free(da);
}

static void run_on(const char *backend) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s failed: %s", backend, tu_errors(ctx));
  tg_graph *g = graph_for(ctx, ranks);
  tg_autodiff(ctx, g);
  tg_pipeline_opts po = {.kernels = true};
  tg_run_pipeline(ctx, g, &po);
  tg_device_opts o = {.precision = TG_PREC_F32};
  tg_device *d = tg_device_open_named(ctx, backend, &o);
  tg_exec *e = tg_exec_compile(d, ctx, g, &(tg_exec_opts){.name = "collectives", .remat = -1});
  fill_leaf(e, g, "x", S, x_of);
  fill_leaf(e, g, "w", (int64_t)ranks * S, w_of);
  fill_leaf(e, g, "v", (int64_t)ranks * S, v_of);
  fill_leaf(e, g, "u", S, u_of);
  fill_leaf(e, g, "a", S, a_of);
  fill_leaf(e, g, "c", S, c_of_rank);
  /* three runs: on the CUDA backend the first runs eagerly, the second is
   * captured as a CUDA graph, the third replays it */
  for (int run = 0; run < 3; run++) {
    tg_exec_run(ctx, e);
    check_outputs(e, g, backend, run);
  }
  ctx->bail = NULL;
  tg_exec_free(e);
  tg_device_close(d);
  tu_ctx_free(ctx);
}

START_TEST(lowered_on_the_backends) {
  run_on("ref");
  run_on("cpu");
  run_on("cuda-emu");
}
END_TEST

START_TEST(other_group_size_is_refused) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("failed: %s", tu_errors(ctx));
  tg_graph *g = graph_for(ctx, ranks + 1);
  ctx->bail = NULL;
  char why[512] = "";
  ck_assert(!tg_interp_check(g, why, sizeof why));
  ck_assert_msg(strstr(why, "all_gather") && strstr(why, "mpirun -np"), "%s", why);
  ck_assert_ptr_null(tg_interp_new(g, TG_PREC_F64));
  tu_ctx_free(ctx);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("collectives");
  TCase *t = tcase_create("collectives");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, forward_and_gradients);
  tcase_add_test(t, lowered_on_the_backends);
  tcase_add_test(t, other_group_size_is_refused);
  suite_add_tcase(s, t);
  return s;
}

int main(int argc, char **argv) {
  if (!tu_mpi_start(&argc, &argv, 2, "TG_COLLECTIVES_TEST_ONE_RANK", &me, &ranks)) return 1;
  printf("test_collectives: rank %d of %d\n", me, ranks);
  int rc = tu_run(suite());
  tg_comm_finalize();
  return rc;
}
