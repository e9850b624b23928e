/* test_ir_verify.c: the verifier accepts well-formed graphs and names the
 * first broken invariant of a damaged one.
 *
 * Passes rewrite graphs in place, so each test builds a good graph, damages
 * it the way a buggy pass might (a stale type, an input moved after its
 * user, a node from another graph), and checks the report.  tg_verify must
 * report and return false, never bail: ctx->bail stays NULL here, so a bail
 * would abort the test. */
#include "testutil.h"

#include <string.h>

#define DIMS(...) ((const tg_dim[]){__VA_ARGS__})

static tg_type ty(tg_dtype dt, int rank, const tg_dim *dims) {
  tg_type t = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) t.dim[i] = dims[i];
  return t;
}

static tg_ctx *ctx;
static tg_graph *g;
/* The good graph: x, w (param), h = x @ w, b (param), y = h + b, s = sum(y). */
static tg_node *x, *w, *h, *b, *y, *s;

static tg_node *node(tg_graph *gr, tg_op op, int nin, tg_node *n0, tg_node *n1, int line) {
  tg_node *in[2] = {n0, n1};
  tg_node *n = tg_node_new(gr, op, (tg_loc){"m.tg", line, 5});
  tg_node_set_inputs(gr, n, nin, in);
  return n;
}

static tg_node *add(tg_graph *gr, tg_node *n) {
  const char *err = tg_graph_add(gr, n);
  ck_assert_msg(err == NULL, "%s", err);
  return n;
}

static tg_node *leaf(tg_graph *gr, tg_op op, tg_type t, int line) {
  tg_node *n = node(gr, op, 0, NULL, NULL, line);
  n->type = t;
  /* leaves are looked up by name, so the verifier wants them named */
  n->name = tg_sprintf(ctx->arena, "leaf%d", gr->n_nodes);
  if (op == TG_OP_param) n->init = (tg_init){.kind = TG_INIT_NORMAL, .std = 0.02};
  return add(gr, n);
}

static void setup(void) {
  ctx = tu_ctx();
  g = tg_graph_new(ctx->arena);
  x = leaf(g, TG_OP_input, ty(TG_F32, 2, DIMS({4, "T"}, {8, "C"})), 1);
  w = leaf(g, TG_OP_param, ty(TG_F32, 2, DIMS({8, "C"}, {16, NULL})), 2);
  h = add(g, node(g, TG_OP_matmul, 2, x, w, 3));
  b = leaf(g, TG_OP_param, ty(TG_F32, 1, DIMS({16, NULL})), 4);
  y = add(g, node(g, TG_OP_add, 2, h, b, 5));
  s = node(g, TG_OP_sum, 1, y, NULL, 6);
  s->axes = 3;
  add(g, s);
  tg_graph_add_output(g, "loss", s);
}

static void teardown(void) {
  tg_graph_free(g);
  tu_ctx_free(ctx);
}

/* Runs the verifier, expecting it to fail with `want` in the report. */
static void rejects(const char *want) {
  ck_assert_ptr_null(ctx->bail);
  ck_assert_msg(!tg_verify(ctx, g), "the damaged graph verified");
  const char *errs = tu_errors(ctx);
  ck_assert_msg(strstr(errs, want) != NULL, "want: %s\ngot:  %s", want, errs);
  ck_assert_int_eq(ctx->nerrors, 1);
}

START_TEST(test_accepts_good_graphs) {
  ck_assert(tg_verify(ctx, g));
  ck_assert_int_eq(ctx->nerrors, 0);
  ck_assert_str_eq(tu_errors(ctx), "");
  /* An empty graph is fine too. */
  tg_graph *e = tg_graph_new(ctx->arena);
  ck_assert(tg_verify(ctx, e));
  /* Symbols are not part of type equality: a node whose dims lost their
   * symbols still verifies. */
  y->type.dim[0].sym = NULL;
  ck_assert(tg_verify(ctx, g));
  ck_assert_int_eq(ctx->nerrors, 0);
}
END_TEST

START_TEST(test_tampered_type) {
  y->type.dim[1].size = 32;
  rejects(
      "m.tg:5:5: error: verify: %4 (add): its type says f32[T=4, 32] but add of its inputs gives "
      "f32[T=4, 16]");
}
END_TEST

START_TEST(test_tampered_dtype) {
  h->type.dtype = TG_BF16;
  rejects(
      "verify: %2 (matmul): its type says bf16[T=4, 16] but matmul of its inputs gives f32[T=4, "
      "16]");
}
END_TEST

START_TEST(test_tampered_attribute) {
  s->axes = 1;
  rejects("verify: %5 (sum): its type says f32[1, 1] but sum of its inputs gives f32[1, 16]");
}
END_TEST

START_TEST(test_ill_typed_after_rewrite) {
  /* A pass swaps the matmul's operands: inference itself fails. */
  h->in[0] = w;
  h->in[1] = x;
  rejects("m.tg:3:5: error: verify: %2 (matmul): matmul: inner dimensions differ");
}
END_TEST

START_TEST(test_input_comes_later) {
  /* y = h + b is rewired to read s, which comes after it. */
  y->in[0] = s;
  rejects("verify: %4 (add): input 0 is %5, which does not come before it");
}
END_TEST

START_TEST(test_self_input) {
  y->in[1] = y;
  rejects("verify: %4 (add): input 1 is %4, which does not come before it");
}
END_TEST

START_TEST(test_wrong_arity) {
  y->nin = 1;
  rejects("verify: %4 (add): add takes 2 inputs, got 1");
}
END_TEST

START_TEST(test_missing_input) {
  h->in[1] = NULL;
  rejects("verify: %2 (matmul): input 1 is missing");
}
END_TEST

START_TEST(test_foreign_node) {
  tg_graph *other = tg_graph_new(ctx->arena);
  leaf(other, TG_OP_param, ty(TG_F32, 1, DIMS({16, NULL})), 9);
  leaf(other, TG_OP_param, ty(TG_F32, 1, DIMS({16, NULL})), 9);
  leaf(other, TG_OP_param, ty(TG_F32, 1, DIMS({16, NULL})), 9);
  tg_node *b2 = leaf(other, TG_OP_param, ty(TG_F32, 1, DIMS({16, NULL})), 9);
  /* Same id as b (3) and same type, but another graph's node. */
  ck_assert_int_eq(b2->id, b->id);
  y->in[1] = b2;
  rejects("verify: %4 (add): input 1 is not a node of this graph");
  tg_graph_free(other);
}
END_TEST

START_TEST(test_unadded_node) {
  /* A node made but never added (id -1) used as an input. */
  tg_node *loose = node(g, TG_OP_neg, 1, x, NULL, 7);
  y->in[0] = loose;
  rejects("verify: %4 (add): input 0 is not a node of this graph");
}
END_TEST

START_TEST(test_stale_id) {
  /* Reordering nodes without renumbering them. */
  g->nodes[1] = b;
  g->nodes[3] = w;
  rejects("verify: %1 (param): its id is 3 but it stands at position 1");
}
END_TEST

START_TEST(test_bad_rank) {
  y->type.rank = 9;
  rejects("verify: %4 (add): its type has rank 9, outside 0..8");
}
END_TEST

START_TEST(test_bad_op) {
  y->op = TG_NOPS;
  rejects("verify: %4 (?): unknown op");
}
END_TEST

START_TEST(test_output_not_in_graph) {
  tg_node *loose = node(g, TG_OP_neg, 1, x, NULL, 7);
  tg_graph_add_output(g, "stray", loose);
  rejects("tg: error: verify: output 'stray' refers to a node not in the graph");
}
END_TEST

START_TEST(test_reports_first_problem_only) {
  y->type.dim[1].size = 32;
  h->type.dim[1].size = 32;
  rejects("verify: %2 (matmul)");
  ck_assert_ptr_null(strstr(tu_errors(ctx), "%4 (add)"));
}
END_TEST

START_TEST(test_location_unknown) {
  /* Nodes made by passes have no location; the report still names them. */
  y->loc = (tg_loc){NULL, 0, 0};
  y->nin = 3;
  rejects("tg: error: verify: %4 (add): add takes 2 inputs, got 3");
}
END_TEST

static Suite *suite(void) {
  Suite *su = suite_create("ir_verify");
  TCase *tc = tcase_create("verify");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_accepts_good_graphs);
  tcase_add_test(tc, test_tampered_type);
  tcase_add_test(tc, test_tampered_dtype);
  tcase_add_test(tc, test_tampered_attribute);
  tcase_add_test(tc, test_ill_typed_after_rewrite);
  tcase_add_test(tc, test_input_comes_later);
  tcase_add_test(tc, test_self_input);
  tcase_add_test(tc, test_wrong_arity);
  tcase_add_test(tc, test_missing_input);
  tcase_add_test(tc, test_foreign_node);
  tcase_add_test(tc, test_unadded_node);
  tcase_add_test(tc, test_stale_id);
  tcase_add_test(tc, test_bad_rank);
  tcase_add_test(tc, test_bad_op);
  tcase_add_test(tc, test_output_not_in_graph);
  tcase_add_test(tc, test_reports_first_problem_only);
  tcase_add_test(tc, test_location_unknown);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return tu_run(suite()); }
