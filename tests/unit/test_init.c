/* test_init.c: parameter initialisation (runtime/formats/init.c): zeros and ones,
 * normal values that depend only on (seed, name, index), their statistics,
 * and a few pinned values so that a change to the generator, which would
 * change every freshly initialised model, cannot pass unnoticed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "init.h"
#include "testutil.h"

/* A leaf node made by hand: tg_param_init reads only op, type, name, init. */
static tg_node leaf(tg_op op, const char *name, int64_t numel, tg_init_kind kind, double std) {
  tg_node n = {0};
  n.op = op;
  n.name = name;
  n.type.dtype = TG_F32;
  n.type.rank = 1;
  n.type.dim[0].size = numel;
  n.init = (tg_init){.kind = kind, .std = std};
  return n;
}

static float *init(const tg_node *n, uint64_t seed) {
  float *out = malloc(sizeof *out * (size_t)tg_type_numel(&n->type));
  tg_param_init(n, seed, out);
  return out;
}

START_TEST(test_zeros_ones) {
  tg_node z = leaf(TG_OP_param, "b", 5, TG_INIT_ZEROS, 0);
  tg_node o = leaf(TG_OP_state, "s", 5, TG_INIT_ONES, 0);
  tg_node n0 = leaf(TG_OP_param, "w", 5, TG_INIT_NORMAL, 0); /* normal(0): all zeros */
  float *vz = init(&z, 1), *vo = init(&o, 1), *vn = init(&n0, 1);
  for (int i = 0; i < 5; i++) {
    ck_assert(vz[i] == 0.0f);
    ck_assert(vo[i] == 1.0f);
    ck_assert(vn[i] == 0.0f);
  }
  free(vz);
  free(vo);
  free(vn);
}
END_TEST

START_TEST(test_pinned_values) {
  /* Computed once from the generator described in init.c; these are the
   * first values of wte.weight in every GPT-2 started with seed 42 (times
   * 0.02).  If this fails, the generator changed: say so loudly. */
  tg_node n = leaf(TG_OP_param, "wte.weight", 4, TG_INIT_NORMAL, 1);
  float *v = init(&n, 42);
  ck_assert(v[0] == -0.294833243f);
  ck_assert(v[1] == -0.453912169f);
  ck_assert(v[2] == 0.924611688f);
  ck_assert(v[3] == -0.764461637f);
  free(v);
}
END_TEST

START_TEST(test_deterministic_and_keyed) {
  tg_node a = leaf(TG_OP_param, "h.0.attn.c_attn.weight", 1000, TG_INIT_NORMAL, 0.02);
  tg_node b = leaf(TG_OP_param, "h.1.attn.c_attn.weight", 1000, TG_INIT_NORMAL, 0.02);
  float *a1 = init(&a, 7), *a2 = init(&a, 7), *a3 = init(&a, 8), *b1 = init(&b, 7);
  ck_assert(memcmp(a1, a2, 1000 * sizeof *a1) == 0); /* same seed and name: same values */
  int same_seed = 0, same_name = 0;
  for (int i = 0; i < 1000; i++) {
    same_seed += a1[i] == a3[i];
    same_name += a1[i] == b1[i];
  }
  /* another seed or another name gives unrelated values (floats of random
   * normals coincide with probability ~1e-7 each) */
  ck_assert_int_le(same_seed, 1);
  ck_assert_int_le(same_name, 1);
  free(a1);
  free(a2);
  free(a3);
  free(b1);
}
END_TEST

START_TEST(test_independent_of_everything_else) {
  /* Same name, std 1, seed 3: a node that differs in size, op, location,
   * id, dtype and std starts with the same standard normals (scaled). */
  tg_node a = leaf(TG_OP_param, "x", 10, TG_INIT_NORMAL, 1);
  tg_node b = leaf(TG_OP_state, "x", 25, TG_INIT_NORMAL, 2);
  b.id = 99;
  b.loc = (tg_loc){"elsewhere.tg", 5, 5};
  b.type.dtype = TG_BF16;
  float *va = init(&a, 3), *vb = init(&b, 3);
  for (int i = 0; i < 10; i++) ck_assert(vb[i] == (float)(2 * (double)va[i]));
  free(va);
  free(vb);
}
END_TEST

/* Params x in two models that differ in everything else: other params
 * before it, other shapes: x's initial values are the same. */
static float *param_values(const char *text, const char *name, uint64_t seed) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("compile: %s", tu_errors(ctx));
  tg_compile_opts opts = {0};
  tg_graph *g = tg_compile_source(ctx, tg_source_add(ctx, "m.tg", text, strlen(text)), &opts);
  float *out = NULL;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param && !strcmp(g->nodes[i]->name, name))
      out = init(g->nodes[i], seed);
  ck_assert_ptr_nonnull(out);
  tg_graph_free(g);
  tu_ctx_free(ctx);
  return out;
}

START_TEST(test_same_in_different_models) {
  const char *m1 = "config { C = 4 }\n"
                   "param x: [C] = normal(0.5)\n"
                   "output s = sum(x, -1)\n";
  const char *m2 = "config { C = 4 }\n"
                   "param z: [8, C] = normal(1)\n"
                   "param y: [C] = ones\n"
                   "param x: [C] = normal(0.5)\n"
                   "output s = sum(x * y, -1)\n"
                   "output t = sum(z, 0)\n";
  float *v1 = param_values(m1, "x", 11), *v2 = param_values(m2, "x", 11);
  ck_assert(memcmp(v1, v2, 4 * sizeof *v1) == 0);
  free(v1);
  free(v2);
}
END_TEST

/* Over 100k values of normal(0.02): the sample mean has standard error
 * 0.02/sqrt(n) = 6.3e-5 and the sample std about 0.02/sqrt(2n) = 4.5e-5;
 * the fraction within one std is 0.6827 with standard error
 * sqrt(p(1-p)/n) = 0.0015, and the correlation of neighbours has standard
 * error 1/sqrt(n) = 0.0032.  Each is allowed 5 standard errors, so the
 * test fails by chance with probability below 1e-6 (and, being
 * deterministic, either always passes or always fails). */
START_TEST(test_normal_statistics) {
  enum { N = 100000 };
  const double sd = 0.02;
  tg_node n = leaf(TG_OP_param, "wte.weight", N, TG_INIT_NORMAL, sd);
  float *v = init(&n, 1234);
  double sum = 0, sq = 0, cross = 0, maxabs = 0;
  int within = 0;
  for (int i = 0; i < N; i++) {
    sum += v[i];
    sq += (double)v[i] * v[i];
    if (i > 0) cross += (double)v[i] * v[i - 1];
    within += fabs(v[i]) < sd;
    maxabs = fmax(maxabs, fabs(v[i]));
  }
  double mean = sum / N, var = sq / N - mean * mean, std = sqrt(var);
  double corr = (cross / (N - 1) - mean * mean) / var;
  ck_assert_msg(fabs(mean) < 5 * sd / sqrt(N), "mean %g", mean);
  ck_assert_msg(fabs(std - sd) < 5 * sd / sqrt(2.0 * N), "std %g", std);
  ck_assert_msg(fabs((double)within / N - 0.682689) < 5 * sqrt(0.6827 * 0.3173 / N), "within %d",
                within);
  ck_assert_msg(fabs(corr) < 5 / sqrt(N), "neighbour correlation %g", corr);
  /* Box-Muller with 53-bit uniforms never exceeds ~8.6 std; 100k draws
   * beyond 6 std would have probability ~2e-4. */
  ck_assert_msg(maxabs < 6 * sd, "max |v| %g", maxabs);
  free(v);
}
END_TEST

Suite *init_suite(void) {
  Suite *s = suite_create("init");
  TCase *t = tcase_create("init");
  tcase_add_test(t, test_zeros_ones);
  tcase_add_test(t, test_pinned_values);
  tcase_add_test(t, test_deterministic_and_keyed);
  tcase_add_test(t, test_independent_of_everything_else);
  tcase_add_test(t, test_same_in_different_models);
  tcase_add_test(t, test_normal_statistics);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(init_suite()); }
