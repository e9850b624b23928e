/* test_interp.c: the reference interpreter, op by op, on small cases whose
 * answers are computed by hand or by a plain loop written here, then the
 * precision modes, run-time errors, assigns, and a tiny GPT-2 from
 * models/gpt2.tg whose initial loss must be near ln(vocab).
 *
 * Graphs are written in the IR text form (docs/ir.md), which keeps each
 * case short and readable. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "init.h"
#include "interp.h"
#include "testutil.h"

/* ---- fixture: one graph and interpreter per test ------------------------- */

static tg_ctx *ctx;
static tg_graph *graph;
static tg_interp *interp;

static void setup(void) { ctx = tu_ctx(); }

static void teardown(void) {
  tg_interp_free(interp);
  interp = NULL;
  if (graph) tg_graph_free(graph);
  graph = NULL;
  tu_ctx_free(ctx);
}

/* Reads IR text (the header is added here), verifies it, and makes the
 * interpreter in the given precision (replacing any earlier one). */
static void load(const char *body, tg_precision prec) {
  tg_interp_free(interp);
  if (graph) tg_graph_free(graph);
  char *text = tg_sprintf(ctx->arena, "# tg IR 1\n%s", body);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("bad test IR: %s", tu_errors(ctx));
  graph = tg_read_ir(ctx, tg_source_add(ctx, "t.tgir", text, strlen(text)));
  ctx->bail = NULL;
  ck_assert(tg_verify(ctx, graph));
  interp = tg_interp_new(graph, prec);
  ck_assert_ptr_nonnull(interp);
}

static tg_node *node(int k) {
  ck_assert_int_lt(k, graph->n_nodes);
  return graph->nodes[k];
}

/* Copies v into leaf node k's storage. */
static void fill(int k, const double *v) {
  double *dst = tg_interp_leaf(interp, node(k));
  ck_assert_ptr_nonnull(dst);
  memcpy(dst, v, sizeof(double) * (size_t)tg_type_numel(&node(k)->type));
}

static void run_ok(void) {
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("run failed: %s", tu_errors(ctx));
  tg_interp_run(ctx, interp);
  ctx->bail = NULL;
}

/* Runs expecting an error; returns the diagnostics. */
static const char *run_fails(void) {
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) {
    ctx->bail = NULL;
    return tu_errors(ctx);
  }
  tg_interp_run(ctx, interp);
  ck_abort_msg("the run should have failed");
  return NULL;
}

static const double *value(int k) { return tg_interp_value(interp, node(k)); }

/* Each of node k's values equals want's, exactly (hand cases are exact)
 * or within tol. */
static void expect_near(int k, const double *want, double tol) {
  const double *got = value(k);
  int64_t n = tg_type_numel(&node(k)->type);
  for (int64_t i = 0; i < n; i++) {
    bool ok = got[i] == want[i] || fabs(got[i] - want[i]) <= tol ||
              (isnan(got[i]) && isnan(want[i]));
    ck_assert_msg(ok, "node %%%d element %lld: got %.17g, want %.17g", k, (long long)i, got[i],
                  want[i]);
  }
}
static void expect(int k, const double *want) { expect_near(k, want, 0); }

#define V(...) ((const double[]){__VA_ARGS__})

/* ---- elementwise -------------------------------------------------------- */

START_TEST(test_broadcast_add_row) {
  load("%0 = input : f32[2, 3] \"a\"\n"
       "%1 = input : f32[3] \"b\"\n"
       "%2 = add %0, %1 : f32[2, 3]\n"
       "%3 = sub %0, %1 : f32[2, 3]\n"
       "%4 = sub %1, %0 : f32[2, 3]\n",
       TG_PREC_F64);
  fill(0, V(1, 2, 3, 4, 5, 6));
  fill(1, V(10, 20, 30));
  run_ok();
  expect(2, V(11, 22, 33, 14, 25, 36));
  expect(3, V(-9, -18, -27, -6, -15, -24));
  expect(4, V(9, 18, 27, 6, 15, 24));
}
END_TEST

START_TEST(test_broadcast_outer) {
  /* [3,1] * [1,4]: an outer product; div and maximum broadcast alike. */
  load("%0 = input : f32[3, 1] \"a\"\n"
       "%1 = input : f32[1, 4] \"b\"\n"
       "%2 = mul %0, %1 : f32[3, 4]\n"
       "%3 = div %1, %0 : f32[3, 4]\n"
       "%4 = maximum %0, %1 : f32[3, 4]\n"
       "%5 = const {value=2} : f32[]\n"
       "%6 = mul %2, %5 : f32[3, 4]\n",
       TG_PREC_F64);
  fill(0, V(1, 2, 4));
  fill(1, V(1, 2, 3, 8));
  run_ok();
  expect(2, V(1, 2, 3, 8, 2, 4, 6, 16, 4, 8, 12, 32));
  expect(3, V(1, 2, 3, 8, 0.5, 1, 1.5, 4, 0.25, 0.5, 0.75, 2));
  expect(4, V(1, 2, 3, 8, 2, 2, 3, 8, 4, 4, 4, 8));
  expect(6, V(2, 4, 6, 16, 4, 8, 12, 32, 8, 16, 24, 64));
}
END_TEST

START_TEST(test_unary) {
  load("%0 = input : f32[4] \"x\"\n"
       "%1 = neg %0 : f32[4]\n"
       "%2 = exp %0 : f32[4]\n"
       "%3 = log %0 : f32[4]\n"
       "%4 = sqrt %0 : f32[4]\n"
       "%5 = rsqrt %0 : f32[4]\n"
       "%6 = tanh %0 : f32[4]\n",
       TG_PREC_F64);
  double x[4] = {0.25, 1, 2, 9};
  fill(0, x);
  run_ok();
  double want[6][4];
  for (int i = 0; i < 4; i++) {
    want[0][i] = -x[i];
    want[1][i] = exp(x[i]);
    want[2][i] = log(x[i]);
    want[3][i] = sqrt(x[i]);
    want[4][i] = 1 / sqrt(x[i]);
    want[5][i] = tanh(x[i]);
  }
  for (int k = 0; k < 6; k++) expect(k + 1, want[k]);
  expect(5, V(2, 1, 1 / sqrt(2.0), 1.0 / 3)); /* by hand, too */
}
END_TEST

START_TEST(test_comparisons) {
  load("%0 = input : f32[2, 1] \"a\"\n"
       "%1 = input : f32[3] \"b\"\n"
       "%2 = lt %0, %1 : bool[2, 3]\n"
       "%3 = le %0, %1 : bool[2, 3]\n"
       "%4 = gt %0, %1 : bool[2, 3]\n"
       "%5 = ge %0, %1 : bool[2, 3]\n"
       "%6 = eq %0, %1 : bool[2, 3]\n"
       "%7 = ne %0, %1 : bool[2, 3]\n"
       "%8 = eq %2, %3 : bool[2, 3]\n",
       TG_PREC_F64);
  fill(0, V(1, 2));
  fill(1, V(0, 1, 2));
  run_ok();
  expect(2, V(0, 0, 1, 0, 0, 0));
  expect(3, V(0, 1, 1, 0, 0, 1));
  expect(4, V(1, 0, 0, 1, 1, 0));
  expect(5, V(1, 1, 0, 1, 1, 1));
  expect(6, V(0, 1, 0, 0, 0, 1));
  expect(7, V(1, 0, 1, 1, 1, 0));
  expect(8, V(1, 0, 1, 1, 1, 0)); /* eq of bools: lt == le */
}
END_TEST

START_TEST(test_where) {
  /* cond [2,1], a [3], b a scalar: all three broadcast to [2, 3]. */
  load("%0 = input : f32[2, 1] \"c\"\n"
       "%1 = const {value=0} : f32[]\n"
       "%2 = gt %0, %1 : bool[2, 1]\n"
       "%3 = input : f32[3] \"a\"\n"
       "%4 = const {value=-inf} : f32[]\n"
       "%5 = where %2, %3, %4 : f32[2, 3]\n",
       TG_PREC_F64);
  fill(0, V(-1, 5));
  fill(3, V(7, 8, 9));
  run_ok();
  expect(5, V(-INFINITY, -INFINITY, -INFINITY, 7, 8, 9));
}
END_TEST

START_TEST(test_expand) {
  load("%0 = input : f32[3, 1] \"x\"\n"
       "%1 = expand %0 : f32[2, 3, 2]\n",
       TG_PREC_F64);
  fill(0, V(1, 2, 3));
  run_ok();
  expect(1, V(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3));
}
END_TEST

/* ---- casts, integers, precision ----------------------------------------- */

START_TEST(test_cast_int_and_bool) {
  load("%0 = input : f32[6] \"x\"\n"
       "%1 = cast %0 : i32[6]\n"
       "%2 = cast %0 : bool[6]\n"
       "%3 = cast %1 : f32[6]\n"
       "%4 = cast %2 : i32[6]\n",
       TG_PREC_F64);
  fill(0, V(2.7, -2.7, 0, -0.0, 0.5, -1e9));
  run_ok();
  expect(1, V(2, -2, 0, 0, 0, -1e9)); /* toward zero, as C */
  expect(2, V(1, 1, 0, 0, 1, 1));
  expect(3, V(2, -2, 0, 0, 0, -1e9));
  expect(4, V(1, 1, 0, 0, 1, 1));
}
END_TEST

START_TEST(test_cast_rounds_to_nearest_even) {
  load("%0 = input : f32[7] \"x\"\n"
       "%1 = cast %0 : bf16[7]\n"
       "%2 = cast %0 : f16[7]\n",
       TG_PREC_F64);
  double u = ldexp(1, -8); /* half of bf16's spacing at 1 */
  fill(0, V(1 + u, 1 + 3 * u, 1 + u + ldexp(1, -30), 65519, 65520, ldexp(1, -25), 3 * ldexp(1, -26)));
  run_ok();
  /* bf16 keeps 8 significant bits: ties go to the even neighbour. */
  const double *b = value(1);
  ck_assert(b[0] == 1);                   /* tie between 1 and 1+2^-7: even is 1 */
  ck_assert(b[1] == 1 + ldexp(1, -6));    /* tie between 1+2^-7 and 1+2^-6: even is the latter */
  ck_assert(b[2] == 1 + ldexp(1, -7));    /* just above the tie: up */
  /* f16: largest finite 65504; 65520 is the tie with 65536 (out of range), so inf */
  const double *h = value(2);
  ck_assert(h[3] == 65504);
  ck_assert(isinf(h[4]) && h[4] > 0);
  ck_assert(h[5] == 0);                   /* half the smallest subnormal 2^-24: even is 0 */
  ck_assert(h[6] == ldexp(1, -24));       /* 0.75 of it: up */
}
END_TEST

/* F32 mode converts bf16 the way a float32 machine does, through float:
 * 1 + 2^-8 + 2^-30 first becomes the float 1 + 2^-8, then a tie, so 1. */
START_TEST(test_bf16_through_float_in_f32_mode) {
  load("%0 = input : f32[1] \"x\"\n%1 = cast %0 : bf16[1]\n", TG_PREC_F32);
  fill(0, V(1 + ldexp(1, -8) + ldexp(1, -30)));
  run_ok();
  ck_assert(value(1)[0] == 1);
}
END_TEST

/* bf16 of a float by its bits: round to nearest even on the top 16 bits.
 * An independent statement of the rounding, for finite values. */
static double bf16_by_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  u &= 0xFFFF0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* Random doubles over float's whole range and beyond: F32 mode must give
 * exactly C's (double)(float)v, and bf16 exactly the bit-level rounding. */
START_TEST(test_f32_mode_matches_c_float) {
  enum { N = 4000 };
  char *ir = tg_sprintf(ctx->arena,
                        "%%0 = input : f32[%d] \"x\"\n%%1 = cast %%0 : bf16[%d]\n"
                        "%%2 = exp %%0 : f32[%d]\n",
                        N, N, N);
  load(ir, TG_PREC_F32);
  double *x = tg_interp_leaf(interp, node(0)), orig[N];
  uint64_t s = 12345;
  for (int i = 0; i < N; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double m = (double)(s >> 11) * 0x1p-53 + 0.5;          /* [0.5, 1.5) with 53 bits */
    int e = (int)((s >> 3) % 300) - 160;                    /* 2^-160 .. 2^139 */
    orig[i] = x[i] = (s & 1 ? -1 : 1) * ldexp(m, e);
  }
  x[0] = 3.40282356e38; /* above FLT_MAX by less than half a step: FLT_MAX */
  x[1] = 3.4028236e38;  /* beyond the halfway point to 2^128: inf */
  orig[0] = x[0], orig[1] = x[1];
  run_ok();
  for (int i = 0; i < N; i++) {
    float f = (float)orig[i];
    ck_assert_msg(value(0)[i] == (double)f, "f32 of %.17g: got %.17g want %.9g", orig[i],
                  value(0)[i], (double)f);
    if (isfinite(f) && fabs(f) < 3.3e38f) /* below bf16's overflow, where the bit trick holds */
      ck_assert_msg(value(1)[i] == bf16_by_bits(f), "bf16 of %.9g: got %.17g want %.17g",
                    (double)f, value(1)[i], bf16_by_bits(f));
    ck_assert(value(2)[i] == (double)(float)exp((double)f));
  }
  ck_assert(value(0)[0] == 3.4028234663852886e38);
  ck_assert(isinf(value(0)[1]));
}
END_TEST

START_TEST(test_f32_mode_rounds) {
  const char *ir = "%0 = const {value=0.1} : f32[]\n"
                   "%1 = const {value=0.2} : f32[]\n"
                   "%2 = add %0, %1 : f32[]\n";
  load(ir, TG_PREC_F64);
  run_ok();
  ck_assert(value(2)[0] == 0.1 + 0.2); /* 0.30000000000000004: exact doubles */
  load(ir, TG_PREC_F32);
  run_ok();
  float a = 0.1f, b = 0.2f, sum = a + b;
  ck_assert(value(0)[0] == (double)a);
  ck_assert(value(2)[0] == (double)sum);
  ck_assert(value(2)[0] != 0.1 + 0.2);
}
END_TEST

START_TEST(test_f32_mode_rounds_leaves) {
  load("%0 = input : f32[1] \"x\"\n%1 = neg %0 : f32[1]\n", TG_PREC_F32);
  fill(0, V(0.1));
  run_ok();
  ck_assert(tg_interp_leaf(interp, node(0))[0] == (double)0.1f);
  ck_assert(value(1)[0] == -(double)0.1f);
}
END_TEST

START_TEST(test_i32_arithmetic) {
  load("%0 = input : i32[4] \"a\"\n"
       "%1 = input : i32[4] \"b\"\n"
       "%2 = div %0, %1 : i32[4]\n"
       "%3 = mul %0, %1 : i32[4]\n",
       TG_PREC_F32);
  fill(0, V(-7, 7, 2147483647, 16777217));
  fill(1, V(2, -2, 1, 1));
  run_ok();
  expect(2, V(-3, -3, 2147483647, 16777217)); /* truncating; and F32 mode leaves i32 exact */
  expect(3, V(-14, -14, 2147483647, 16777217));
}
END_TEST

START_TEST(test_i32_overflow_is_an_error) {
  load("%0 = input : i32[2] \"a\"\n"
       "%1 = add %0, %0 : i32[2] @ m.tg:4:9\n",
       TG_PREC_F64);
  fill(0, V(1, 1073741824));
  const char *err = run_fails();
  ck_assert_msg(strstr(err, "m.tg:4:9: error: element 1 is 2147483648, which i32 cannot hold "
                            "(node %1, add)"),
                "%s", err);
}
END_TEST

START_TEST(test_i32_division_by_zero_is_an_error) {
  load("%0 = input : i32[1] \"a\"\n%1 = div %0, %0 : i32[1]\n", TG_PREC_F64);
  fill(0, V(0));
  ck_assert_ptr_nonnull(strstr(run_fails(), "element 0 is nan, which i32 cannot hold (node %1, div)"));
}
END_TEST

START_TEST(test_cast_out_of_i32_range_is_an_error) {
  load("%0 = input : f32[1] \"x\"\n%1 = cast %0 : i32[1]\n", TG_PREC_F64);
  fill(0, V(3e10));
  ck_assert_ptr_nonnull(strstr(run_fails(), "element 0 is 30000000000, which i32 cannot hold (node %1, cast)"));
}
END_TEST

START_TEST(test_non_integer_index_input_is_an_error) {
  load("%0 = input : i32[2] \"idx\" @ m.tg:1:7\n", TG_PREC_F64);
  fill(0, V(1, 2.5));
  ck_assert_ptr_nonnull(strstr(run_fails(), "m.tg:1:7: error: element 1 is 2.5, which i32 cannot hold (node %0, input)"));
}
END_TEST

/* ---- reductions ---------------------------------------------------------- */

START_TEST(test_sum_max_keepdim) {
  load("%0 = input : f32[2, 3, 4] \"x\"\n"
       "%1 = sum %0 {axes=[0, 2]} : f32[1, 3, 1]\n"
       "%2 = max %0 {axes=[1]} : f32[2, 1, 4]\n"
       "%3 = sum %0 {axes=[0, 1, 2]} : f32[1, 1, 1]\n"
       "%4 = max %0 {axes=[0, 2]} : f32[1, 3, 1]\n",
       TG_PREC_F64);
  double x[24];
  for (int i = 0; i < 24; i++) x[i] = (i * 7) % 11 - 5; /* mixed signs, not sorted */
  fill(0, x);
  run_ok();
  double s02[3] = {0}, m1[8], m02[3];
  for (int j = 0; j < 3; j++) m02[j] = -INFINITY;
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 4; k++) m1[i * 4 + k] = -INFINITY;
  double total = 0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) {
        double v = x[i * 12 + j * 4 + k];
        s02[j] += v;
        total += v;
        m1[i * 4 + k] = fmax(m1[i * 4 + k], v);
        m02[j] = fmax(m02[j], v);
      }
  expect(1, s02);
  expect(2, m1);
  expect(3, V(total));
  expect(4, m02);
  ck_assert(total == -3); /* by hand: two full cycles of -5..5 (sum 0), then -5, 2 */
}
END_TEST

START_TEST(test_max_of_minus_inf_row) {
  load("%0 = input : f32[2, 2] \"x\"\n"
       "%1 = max %0 {axes=[1]} : f32[2, 1]\n"
       "%2 = sum %0 {axes=[1]} : f32[2, 1]\n",
       TG_PREC_F64);
  fill(0, V(-INFINITY, -INFINITY, -INFINITY, 3));
  run_ok();
  expect(1, V(-INFINITY, 3));
  expect(2, V(-INFINITY, -INFINITY));
}
END_TEST

/* ---- movement ----------------------------------------------------------- */

START_TEST(test_transpose) {
  load("%0 = input : f32[2, 3, 4] \"x\"\n"
       "%1 = transpose %0 {perm=[2, 0, 1]} : f32[4, 2, 3]\n"
       "%2 = transpose %0 {perm=[0, 2, 1]} : f32[2, 4, 3]\n"
       "%3 = input : f32[2, 3] \"y\"\n"
       "%4 = transpose %3 {perm=[1, 0]} : f32[3, 2]\n",
       TG_PREC_F64);
  double x[24], w1[24], w2[24];
  for (int i = 0; i < 24; i++) x[i] = i;
  fill(0, x);
  fill(3, V(1, 2, 3, 4, 5, 6));
  run_ok();
  /* result dim d is input dim perm[d]: out[k][i][j] = x[i][j][k] */
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) {
        w1[k * 6 + i * 3 + j] = x[i * 12 + j * 4 + k];
        w2[i * 12 + k * 3 + j] = x[i * 12 + j * 4 + k];
      }
  expect(1, w1);
  expect(2, w2);
  expect(4, V(1, 4, 2, 5, 3, 6));
}
END_TEST

START_TEST(test_slice_pad_inverse) {
  load("%0 = input : f32[2, 5] \"x\"\n"
       "%1 = slice %0 {axis=1, start=1, len=3} : f32[2, 3]\n"
       "%2 = pad %1 {axis=1, start=1, len=5} : f32[2, 5]\n"
       "%3 = slice %2 {axis=1, start=1, len=3} : f32[2, 3]\n"
       "%4 = slice %0 {axis=0, start=1, len=1} : f32[1, 5]\n"
       "%5 = pad %4 {axis=0, start=0, len=3} : f32[3, 5]\n",
       TG_PREC_F64);
  fill(0, V(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  run_ok();
  expect(1, V(2, 3, 4, 7, 8, 9));
  expect(2, V(0, 2, 3, 4, 0, 0, 7, 8, 9, 0));
  expect(3, V(2, 3, 4, 7, 8, 9)); /* slice undoes pad */
  expect(5, V(6, 7, 8, 9, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
}
END_TEST

START_TEST(test_concat_reshape) {
  load("%0 = input : f32[2, 1] \"a\"\n"
       "%1 = input : f32[2, 2] \"b\"\n"
       "%2 = concat %0, %1, %0 {axis=1} : f32[2, 4]\n"
       "%3 = concat %1, %1 {axis=0} : f32[4, 2]\n"
       "%4 = reshape %2 : f32[4, 2]\n",
       TG_PREC_F64);
  fill(0, V(1, 2));
  fill(1, V(10, 11, 20, 21));
  run_ok();
  expect(2, V(1, 10, 11, 1, 2, 20, 21, 2));
  expect(3, V(10, 11, 20, 21, 10, 11, 20, 21));
  expect(4, V(1, 10, 11, 1, 2, 20, 21, 2));
}
END_TEST

START_TEST(test_iota) {
  load("%0 = iota {axis=0} : i32[2, 3]\n"
       "%1 = iota {axis=1} : i32[2, 3]\n"
       "%2 = ge %0, %1 : bool[2, 3]\n",
       TG_PREC_F32);
  run_ok();
  expect(0, V(0, 0, 0, 1, 1, 1));
  expect(1, V(0, 1, 2, 0, 1, 2));
  expect(2, V(1, 0, 0, 1, 1, 0));
}
END_TEST

/* ---- gather and scatter_add --------------------------------------------- */

START_TEST(test_gather_scatter_add) {
  load("%0 = input : f32[5, 2] \"table\"\n"
       "%1 = input : i32[2, 3] \"idx\"\n"
       "%2 = gather %0, %1 : f32[2, 3, 2]\n"
       "%3 = scatter_add %2, %1 : f32[5, 2]\n"
       "%4 = input : i32[] \"one\"\n"
       "%5 = gather %0, %4 : f32[2]\n",
       TG_PREC_F64);
  fill(0, V(0, 1, 10, 11, 20, 21, 30, 31, 40, 41));
  fill(1, V(4, 0, 4, 1, 1, 4));
  fill(4, V(3));
  run_ok();
  expect(2, V(40, 41, 0, 1, 40, 41, 10, 11, 10, 11, 40, 41));
  /* repeated indices sum: row 4 three times, row 1 twice, rows 2, 3 none */
  expect(3, V(0, 1, 20, 22, 0, 0, 0, 0, 120, 123));
  expect(5, V(30, 31));
}
END_TEST

START_TEST(test_gather_out_of_range) {
  load("%0 = input : f32[5, 2] \"table\"\n"
       "%1 = input : i32[3] \"idx\"\n"
       "%2 = gather %0, %1 : f32[3, 2] @ model.tg:12:5\n",
       TG_PREC_F64);
  fill(1, V(0, 5, 1));
  const char *err = run_fails();
  ck_assert_msg(strstr(err, "model.tg:12:5: error: gather index 5 is outside [0, 5) (node %2, gather)"),
                "%s", err);
  fill(1, V(-1, 0, 0));
  err = run_fails();
  ck_assert_msg(strstr(err, "gather index -1 is outside [0, 5)"), "%s", err);
}
END_TEST

START_TEST(test_scatter_add_out_of_range) {
  load("%0 = input : f32[2, 2] \"src\"\n"
       "%1 = input : i32[2] \"idx\"\n"
       "%2 = scatter_add %0, %1 : f32[3, 2] @ model.tg:2:1\n",
       TG_PREC_F64);
  fill(1, V(2, 3));
  const char *err = run_fails();
  ck_assert_msg(strstr(err, "model.tg:2:1: error: scatter_add index 3 is outside [0, 3) (node %2, "
                            "scatter_add)"),
                "%s", err);
}
END_TEST

/* ---- matmul ------------------------------------------------------------- */

/* A plain reference: a [A0, A1, M, K] @ b [B0, B1, K, N] with rank-4 views
 * (missing leading dims as 1) broadcast to [max, max, M, N]. */
static void ref_matmul(const double *a, const int64_t *da, const double *b, const int64_t *db,
                       int64_t M, int64_t K, int64_t N, double *out) {
  int64_t o0 = da[0] > db[0] ? da[0] : db[0], o1 = da[1] > db[1] ? da[1] : db[1];
  for (int64_t i = 0; i < o0; i++)
    for (int64_t j = 0; j < o1; j++)
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          double acc = 0;
          for (int64_t k = 0; k < K; k++) {
            int64_t ai = (da[0] == 1 ? 0 : i) * da[1] + (da[1] == 1 ? 0 : j);
            int64_t bi = (db[0] == 1 ? 0 : i) * db[1] + (db[1] == 1 ? 0 : j);
            acc += a[(ai * M + m) * K + k] * b[(bi * K + k) * N + n];
          }
          out[((i * o1 + j) * M + m) * N + n] = acc;
        }
}

static void fill_pattern(int k, double *buf, int seed) {
  int64_t n = tg_type_numel(&node(k)->type);
  for (int64_t i = 0; i < n; i++) buf[i] = (double)((i * 13 + seed * 7) % 17) / 4 - 2;
  fill(k, buf);
}

START_TEST(test_matmul_batch_broadcast) {
  load("%0 = input : f32[2, 3, 4] \"a\"\n"
       "%1 = input : f32[4, 5] \"b\"\n"
       "%2 = matmul %0, %1 : f32[2, 3, 5]\n"
       "%3 = input : f32[2, 1, 3, 4] \"c\"\n"
       "%4 = input : f32[5, 4, 2] \"d\"\n"
       "%5 = matmul %3, %4 : f32[2, 5, 3, 2]\n"
       "%6 = input : f32[3, 4] \"e\"\n"
       "%7 = matmul %6, %4 : f32[5, 3, 2]\n",
       TG_PREC_F64);
  double a[24], b[20], c[24], d[40], e[12], want[60];
  fill_pattern(0, a, 1);
  fill_pattern(1, b, 2);
  fill_pattern(3, c, 3);
  fill_pattern(4, d, 4);
  fill_pattern(6, e, 5);
  run_ok();
  ref_matmul(a, (int64_t[]){1, 2}, b, (int64_t[]){1, 1}, 3, 4, 5, want);
  expect(2, want);
  ref_matmul(c, (int64_t[]){2, 1}, d, (int64_t[]){1, 5}, 3, 4, 2, want);
  expect(5, want);
  ref_matmul(e, (int64_t[]){1, 1}, d, (int64_t[]){1, 5}, 3, 4, 2, want);
  expect(7, want);
  /* one element by hand: [2,3,4]@[4,5] at (1, 2, 3) */
  double acc = 0;
  for (int k = 0; k < 4; k++) acc += a[12 + 2 * 4 + k] * b[k * 5 + 3];
  ck_assert(value(2)[15 + 2 * 5 + 3] == acc);
}
END_TEST

/* ---- leaves, assign, guards --------------------------------------------- */

START_TEST(test_leaf_initialisers) {
  load("%0 = param {init=ones} : f32[3] \"w\"\n"
       "%1 = param {init=zeros} : f32[2] \"b\"\n"
       "%2 = param {init=normal(0.02)} : f32[2] \"n\"\n"
       "%3 = state {init=ones} : f32[1] \"s\"\n"
       "%4 = add %0, %0 : f32[3]\n",
       TG_PREC_F64);
  ck_assert_ptr_null(tg_interp_leaf(interp, node(4))); /* not a leaf */
  run_ok();
  expect(0, V(1, 1, 1));
  expect(1, V(0, 0));
  expect(2, V(0, 0)); /* normal: zeros until the caller fills it (tg_param_init) */
  expect(3, V(1));
  expect(4, V(2, 2, 2));
}
END_TEST

/* A tiny training step: s += x, p -= 0.5 * x, each through assign. */
START_TEST(test_assign_updates_leaves) {
  load("%0 = input : f32[2] \"x\"\n"
       "%1 = state {init=zeros} : f32[2] \"s\"\n"
       "%2 = param {init=ones} : f32[2] \"p\"\n"
       "%3 = add %1, %0 : f32[2]\n"
       "%4 = const {value=0.5} : f32[]\n"
       "%5 = mul %0, %4 : f32[2]\n"
       "%6 = sub %2, %5 : f32[2]\n"
       "%7 = assign %1, %3 : f32[2]\n"
       "%8 = assign %2, %6 : f32[2]\n"
       "%9 = mul %1, %2 : f32[2]\n",
       TG_PREC_F64);
  fill(0, V(1, 3));
  run_ok();
  expect(7, V(1, 3));
  expect(8, V(0.5, -0.5));
  expect(9, V(0, 0)); /* within a run, leaves keep their old values */
  expect(1, V(1, 3)); /* after it, the assigns have landed */
  expect(2, V(0.5, -0.5));
  run_ok();
  expect(7, V(2, 6));
  expect(8, V(0, -2));
  expect(9, V(0.5, -1.5));
  expect(1, V(2, 6));
  expect(2, V(0, -2));
}
END_TEST

START_TEST(test_unknown_op_guard) {
  load("%0 = input : f32[2] \"x\"\n%1 = neg %0 : f32[2] @ m.tg:3:3\n", TG_PREC_F64);
  node(1)->op = TG_NOPS; /* no such op: stands for one added to ops.def but not here */
  const char *err = run_fails();
  ck_assert_msg(strstr(err, "m.tg:3:3: error: the interpreter has no rule for op"), "%s", err);
  node(1)->op = TG_OP_neg; /* the graph is freed in teardown; keep it sane */
}
END_TEST

START_TEST(test_too_large_graph_refused) {
  char *text = tg_sprintf(ctx->arena, "# tg IR 1\n%%0 = input : f32[65536, 65536] \"x\"\n");
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  graph = tg_read_ir(ctx, tg_source_add(ctx, "big.tgir", text, strlen(text)));
  ctx->bail = NULL;
  char why[256];
  ck_assert(!tg_interp_check(graph, why, sizeof why));
  ck_assert_msg(strstr(why, "more than 2147483648 values (4294967296 by node %0)"), "%s", why);
  ck_assert_ptr_null(tg_interp_new(graph, TG_PREC_F64));
}
END_TEST

START_TEST(test_value_of_foreign_node) {
  load("%0 = input : f32[2] \"x\"\n", TG_PREC_F64);
  tg_node other = *node(0);
  other.id = 7;
  ck_assert_ptr_null(tg_interp_value(interp, &other));
  ck_assert_ptr_null(tg_interp_leaf(interp, &other));
}
END_TEST

/* ---- a real model ------------------------------------------------------- */

/* GPT-2 from models/gpt2.tg at a tiny size, weights from tg_param_init.
 *
 * Why the loss must be near ln(vocab): the logits are ln_f(x) · wteᵀ.
 * ln_f's output has entries of size about 1 (weight ones, bias zeros) and
 * wte's entries have std 0.02, so each logit is a sum of n_embd = 32 terms
 * of std ~0.02: std ~0.02·sqrt(32) ~ 0.11.  With logits that small the
 * softmax is near uniform, and cross-entropy ~ ln(V) + var/2 ~ ln 64 +
 * 0.006 on average over the 16 positions; 0.05 leaves room for chance. */
static double gpt2_tiny_loss(tg_precision prec, uint64_t seed) {
  static const tg_define defs[] = {{"n_layer", 2, false, NULL},    {"n_embd", 32, false, NULL},
                                   {"n_head", 4, false, NULL},     {"vocab", 64, false, NULL},
                                   {"block_size", 16, false, NULL}, {"B", 2, false, NULL},
                                   {"T", 8, false, NULL}};
  const char *inc[1] = {tu_path("models")};
  tg_compile_opts opts = {defs, 7, inc, 1};
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("gpt2: %s", tu_errors(ctx));
  if (graph) tg_graph_free(graph);
  tg_interp_free(interp);
  graph = tg_compile_file(ctx, tu_path("models/gpt2.tg"), &opts);
  ck_assert(tg_verify(ctx, graph));
  interp = tg_interp_new(graph, prec);
  ck_assert_ptr_nonnull(interp);
  uint64_t rng = seed;
  for (int i = 0; i < graph->n_nodes; i++) {
    const tg_node *n = graph->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_input) continue;
    int64_t numel = tg_type_numel(&n->type);
    double *dst = tg_interp_leaf(interp, n);
    if (n->op == TG_OP_input) { /* idx and targets: tokens in [0, 64) */
      ck_assert_int_eq(numel, 16);
      for (int64_t k = 0; k < numel; k++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        dst[k] = (double)(rng >> 58);
      }
      continue;
    }
    float *w = malloc(sizeof *w * (size_t)numel);
    tg_param_init(n, seed, w);
    for (int64_t k = 0; k < numel; k++) dst[k] = w[k];
    free(w);
  }
  tg_interp_run(ctx, interp);
  ctx->bail = NULL;
  const tg_node *loss = NULL;
  for (int i = 0; i < graph->n_outputs; i++)
    if (!strcmp(graph->outputs[i].name, "loss")) loss = graph->outputs[i].node;
  ck_assert_ptr_nonnull(loss);
  ck_assert_int_eq(tg_type_numel(&loss->type), 1);
  return tg_interp_value(interp, loss)[0];
}

START_TEST(test_gpt2_tiny_initial_loss) {
  double l64 = gpt2_tiny_loss(TG_PREC_F64, 1337);
  ck_assert_msg(isfinite(l64) && fabs(l64 - log(64.0)) < 0.05, "loss %.9g, ln 64 = %.9g", l64,
                log(64.0));
  double l32 = gpt2_tiny_loss(TG_PREC_F32, 1337);
  /* float32 rounding of every node moves the loss by rounding errors only */
  ck_assert_msg(fabs(l32 - l64) < 1e-5, "f32 %.9g vs f64 %.9g", l32, l64);
  ck_assert(l32 != l64); /* and F32 mode did round something */
}
END_TEST

Suite *interp_suite(void) {
  Suite *s = suite_create("interp");
  TCase *t = tcase_create("ops");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 60);
  tcase_add_test(t, test_broadcast_add_row);
  tcase_add_test(t, test_broadcast_outer);
  tcase_add_test(t, test_unary);
  tcase_add_test(t, test_comparisons);
  tcase_add_test(t, test_where);
  tcase_add_test(t, test_expand);
  tcase_add_test(t, test_cast_int_and_bool);
  tcase_add_test(t, test_cast_rounds_to_nearest_even);
  tcase_add_test(t, test_bf16_through_float_in_f32_mode);
  tcase_add_test(t, test_f32_mode_matches_c_float);
  tcase_add_test(t, test_f32_mode_rounds);
  tcase_add_test(t, test_f32_mode_rounds_leaves);
  tcase_add_test(t, test_i32_arithmetic);
  tcase_add_test(t, test_i32_overflow_is_an_error);
  tcase_add_test(t, test_i32_division_by_zero_is_an_error);
  tcase_add_test(t, test_cast_out_of_i32_range_is_an_error);
  tcase_add_test(t, test_non_integer_index_input_is_an_error);
  tcase_add_test(t, test_sum_max_keepdim);
  tcase_add_test(t, test_max_of_minus_inf_row);
  tcase_add_test(t, test_transpose);
  tcase_add_test(t, test_slice_pad_inverse);
  tcase_add_test(t, test_concat_reshape);
  tcase_add_test(t, test_iota);
  tcase_add_test(t, test_gather_scatter_add);
  tcase_add_test(t, test_gather_out_of_range);
  tcase_add_test(t, test_scatter_add_out_of_range);
  tcase_add_test(t, test_matmul_batch_broadcast);
  tcase_add_test(t, test_leaf_initialisers);
  tcase_add_test(t, test_assign_updates_leaves);
  tcase_add_test(t, test_unknown_op_guard);
  tcase_add_test(t, test_too_large_graph_refused);
  tcase_add_test(t, test_value_of_foreign_node);
  tcase_add_test(t, test_gpt2_tiny_initial_loss);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(interp_suite()); }
