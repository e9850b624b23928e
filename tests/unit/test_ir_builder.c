/* test_ir_builder.c: building graphs and shape inference.
 *
 * tg_infer_type is the one statement of each op's typing rule, shared by
 * the frontend, the reader and the verifier, so its results and its error
 * messages are pinned here op by op: the messages are what a user sees
 * when a model does not type-check, so they must name the facts (the two
 * shapes, the sizes that differ). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIMS(...) ((const tg_dim[]){__VA_ARGS__})

static tg_type ty(tg_dtype dt, int rank, const tg_dim *dims) {
  tg_type t = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) t.dim[i] = dims[i];
  return t;
}

static char *tstr(const tg_type *t) {
  static char buf[4][TG_TYPE_STR_MAX];
  static int k;
  return tg_type_str(t, buf[k++ % 4], TG_TYPE_STR_MAX);
}

/* Each test gets a fresh graph in its own arena. */
static tg_ctx *ctx;
static tg_graph *g;

static void setup(void) {
  ctx = tu_ctx();
  g = tg_graph_new(ctx->arena);
}

static void teardown(void) {
  tg_graph_free(g);
  tu_ctx_free(ctx);
}

static tg_node *node(tg_op op, int nin, tg_node *a, tg_node *b, tg_node *c) {
  tg_node *in[3] = {a, b, c};
  tg_node *n = tg_node_new(g, op, (tg_loc){"m.tg", 1, 1});
  tg_node_set_inputs(g, n, nin, in);
  return n;
}

static tg_node *add(tg_node *n) {
  const char *err = tg_graph_add(g, n);
  ck_assert_msg(err == NULL, "%s: %s", tg_ops[n->op].name, err);
  return n;
}

/* Adding n must fail; returns the message after checking the graph did
 * not grow and n got no id. */
static const char *add_fails(tg_node *n) {
  int before = g->n_nodes;
  const char *err = tg_graph_add(g, n);
  ck_assert_msg(err != NULL, "%s was accepted as %s", tg_ops[n->op].name, tstr(&n->type));
  ck_assert_int_eq(g->n_nodes, before);
  ck_assert_int_eq(n->id, -1);
  return err;
}

#define ck_assert_has(s, sub) \
  ck_assert_msg(strstr((s), (sub)) != NULL, "'%s' lacks '%s'", (s), (sub))

/* Leaves are looked up by name, so the verifier wants them named. */
static const char *fresh_name(void) { return tg_sprintf(ctx->arena, "leaf%d", g->n_nodes); }

static tg_node *input(tg_type t) {
  tg_node *n = node(TG_OP_input, 0, NULL, NULL, NULL);
  n->type = t;
  n->name = fresh_name();
  return add(n);
}

static tg_node *param(tg_type t) {
  tg_node *n = node(TG_OP_param, 0, NULL, NULL, NULL);
  n->type = t;
  n->name = fresh_name();
  n->init = (tg_init){.kind = TG_INIT_NORMAL, .std = 0.02};
  return add(n);
}

static tg_node *scalar(double v) {
  tg_node *n = node(TG_OP_const, 0, NULL, NULL, NULL);
  n->type = ty(TG_F32, 0, NULL);
  n->value = v;
  return add(n);
}

static tg_node *bin(tg_op op, tg_node *a, tg_node *b) { return add(node(op, 2, a, b, NULL)); }

static const tg_type F_BTC = {TG_F32, 3, {{8, "B"}, {1024, "T"}, {768, "C"}}};

/* ---- helpers of the type module ----------------------------------------- */

START_TEST(test_dtypes_and_ops) {
  tg_dtype d;
  ck_assert(tg_dtype_parse("bf16", 4, &d) && d == TG_BF16);
  ck_assert(tg_dtype_parse("bool", 4, &d) && d == TG_BOOL);
  ck_assert(!tg_dtype_parse("f64", 3, &d));
  ck_assert(!tg_dtype_parse("f32x", 3 + 1, &d));
  ck_assert_int_eq(tg_dtype_size(TG_F32), 4);
  ck_assert_int_eq(tg_dtype_size(TG_F16), 2);
  ck_assert(tg_dtype_is_float(TG_BF16) && !tg_dtype_is_float(TG_I32));
  tg_op op;
  ck_assert(tg_op_lookup("matmul", 6, &op) && op == TG_OP_matmul);
  ck_assert(!tg_op_lookup("mat", 3, &op));
  ck_assert_str_eq(tg_ops[TG_OP_sum].name, "sum");
  ck_assert_int_eq(tg_ops[TG_OP_concat].arity, -1);
  ck_assert_str_eq(tg_kind_name(TG_KIND_MOVEMENT), "movement");
}
END_TEST

START_TEST(test_type_str_and_numbers) {
  char buf[TG_TYPE_STR_MAX];
  ck_assert_str_eq(tg_type_str(&F_BTC, buf, sizeof buf), "f32[B=8, T=1024, C=768]");
  tg_type s = ty(TG_I32, 0, NULL);
  ck_assert_str_eq(tg_type_str(&s, buf, sizeof buf), "i32[]");
  tg_type m = ty(TG_BOOL, 2, DIMS({4, NULL}, {2, "n"}));
  ck_assert_str_eq(tg_type_str(&m, buf, sizeof buf), "bool[4, n=2]");
  ck_assert_int_eq(tg_type_numel(&F_BTC), 8 * 1024 * 768);
  ck_assert_int_eq(tg_type_numel(&s), 1);
  char num[40];
  ck_assert_str_eq(tg_fmt_double(0.02, num, sizeof num), "0.02");
  ck_assert_str_eq(tg_fmt_double(12, num, sizeof num), "12");
  ck_assert_str_eq(tg_fmt_double(-INFINITY, num, sizeof num), "-inf");
  ck_assert_str_eq(tg_fmt_double(NAN, num, sizeof num), "nan");
  ck_assert_str_eq(tg_fmt_double(1e300, num, sizeof num), "1e+300");
  double x = 0.1 + 0.2;
  ck_assert(strtod(tg_fmt_double(x, num, sizeof num), NULL) == x);
}
END_TEST

/* ---- broadcasting --------------------------------------------------------- */

START_TEST(test_broadcast_bias) {
  tg_node *x = input(F_BTC);
  tg_node *b = param(ty(TG_F32, 1, DIMS({768, "C"})));
  tg_node *y = bin(TG_OP_add, x, b);
  ck_assert_str_eq(tstr(&y->type), "f32[B=8, T=1024, C=768]");
  /* The other way round gives the same. */
  tg_node *z = bin(TG_OP_mul, b, x);
  ck_assert_str_eq(tstr(&z->type), "f32[B=8, T=1024, C=768]");
  ck_assert_int_eq(y->id, 2);
  ck_assert_int_eq(z->id, 3);
  ck_assert_ptr_eq(g->nodes[3], z);
}
END_TEST

START_TEST(test_broadcast_column_row) {
  tg_node *col = input(ty(TG_F32, 2, DIMS({1024, "T"}, {1, NULL})));
  tg_node *row = input(ty(TG_F32, 2, DIMS({1, NULL}, {1024, "T"})));
  tg_node *y = bin(TG_OP_sub, col, row);
  ck_assert_str_eq(tstr(&y->type), "f32[T=1024, T=1024]");
}
END_TEST

START_TEST(test_broadcast_symbols) {
  /* A size without a symbol picks up the other side's symbol. */
  tg_node *plain = input(ty(TG_F32, 1, DIMS({8, NULL})));
  tg_node *named = input(ty(TG_F32, 1, DIMS({8, "B"})));
  ck_assert_str_eq(tstr(&bin(TG_OP_add, plain, named)->type), "f32[B=8]");
  ck_assert_str_eq(tstr(&bin(TG_OP_add, named, plain)->type), "f32[B=8]");
  /* A stretched 1 takes the symbol of the dim it stretches to. */
  tg_node *one = input(ty(TG_F32, 1, DIMS({1, NULL})));
  ck_assert_str_eq(tstr(&bin(TG_OP_div, one, named)->type), "f32[B=8]");
  /* A scalar broadcasts against anything. */
  tg_node *c = scalar(2);
  ck_assert_str_eq(tstr(&bin(TG_OP_maximum, input(F_BTC), c)->type), "f32[B=8, T=1024, C=768]");
  ck_assert_str_eq(tstr(&bin(TG_OP_mul, c, c)->type), "f32[]");
}
END_TEST

START_TEST(test_broadcast_fails) {
  tg_node *a = input(ty(TG_F32, 2, DIMS({4, NULL}, {3, NULL})));
  tg_node *b = input(ty(TG_F32, 2, DIMS({4, NULL}, {5, NULL})));
  const char *err = add_fails(node(TG_OP_add, 2, a, b, NULL));
  ck_assert_has(err, "shapes do not broadcast");
  ck_assert_has(err, "f32[4, 3] and f32[4, 5]");
  ck_assert_has(err, "(3 vs 5)");
  err = add_fails(node(TG_OP_mul, 2, input(F_BTC), input(ty(TG_F32, 1, DIMS({512, NULL}))), NULL));
  ck_assert_has(err, "768 vs 512");
}
END_TEST

START_TEST(test_binary_dtypes) {
  tg_node *f = input(ty(TG_F32, 1, DIMS({4, NULL})));
  tg_node *i = input(ty(TG_I32, 1, DIMS({4, NULL})));
  tg_node *bl = input(ty(TG_BOOL, 1, DIMS({4, NULL})));
  ck_assert_has(add_fails(node(TG_OP_add, 2, f, i, NULL)),
                "add of different dtypes: f32[4] and i32[4]");
  ck_assert_has(add_fails(node(TG_OP_add, 2, bl, bl, NULL)), "add of bool tensors");
  ck_assert_has(add_fails(node(TG_OP_lt, 2, bl, bl, NULL)), "lt of bool tensors");
  ck_assert_int_eq(bin(TG_OP_eq, bl, bl)->type.dtype, TG_BOOL);
  for (tg_op op = TG_OP_lt; op <= TG_OP_ne; op++) {
    tg_node *r = bin(op, f, f);
    ck_assert_msg(r->type.dtype == TG_BOOL, "%s gives %s", tg_ops[op].name, tstr(&r->type));
  }
  ck_assert_int_eq(bin(TG_OP_add, i, i)->type.dtype, TG_I32);
}
END_TEST

/* ---- elementwise ---------------------------------------------------------- */

START_TEST(test_unary) {
  tg_node *x = input(F_BTC);
  for (tg_op op = TG_OP_neg; op <= TG_OP_tanh; op++) {
    tg_node *y = add(node(op, 1, x, NULL, NULL));
    ck_assert_str_eq(tstr(&y->type), "f32[B=8, T=1024, C=768]");
  }
  tg_node *i = input(ty(TG_I32, 2, DIMS({2, NULL}, {3, NULL})));
  ck_assert_str_eq(tstr(&add(node(TG_OP_neg, 1, i, NULL, NULL))->type), "i32[2, 3]");
  ck_assert_has(add_fails(node(TG_OP_exp, 1, i, NULL, NULL)),
                "exp needs a float tensor, not i32[2, 3]");
  ck_assert_has(add_fails(node(TG_OP_rsqrt, 1, i, NULL, NULL)), "rsqrt needs a float tensor");
  tg_node *bl = input(ty(TG_BOOL, 1, DIMS({2, NULL})));
  ck_assert_has(add_fails(node(TG_OP_neg, 1, bl, NULL, NULL)), "neg of a bool tensor");
}
END_TEST

START_TEST(test_cast) {
  tg_node *x = input(F_BTC);
  tg_node *c = node(TG_OP_cast, 1, x, NULL, NULL);
  c->type.dtype = TG_BF16;
  add(c);
  ck_assert_str_eq(tstr(&c->type), "bf16[B=8, T=1024, C=768]");
  tg_node *d = node(TG_OP_cast, 1, x, NULL, NULL);
  d->type.dtype = TG_NDTYPES;
  ck_assert_has(add_fails(d), "cast to an unknown dtype");
}
END_TEST

START_TEST(test_where) {
  tg_node *mask = input(ty(TG_BOOL, 2, DIMS({1024, "T"}, {1024, "T"})));
  tg_node *x = input(F_BTC);
  tg_node *scores = input(ty(TG_F32, 4, DIMS({8, "B"}, {12, "H"}, {1024, "T"}, {1024, "T"})));
  tg_node *ninf = scalar(-INFINITY);
  tg_node *w = add(node(TG_OP_where, 3, mask, scores, ninf));
  ck_assert_str_eq(tstr(&w->type), "f32[B=8, H=12, T=1024, T=1024]");
  const char *err = add_fails(node(TG_OP_where, 3, x, scores, ninf));
  ck_assert_has(err, "where's condition must be bool, not f32[B=8, T=1024, C=768]");
  tg_node *i = input(ty(TG_I32, 0, NULL));
  ck_assert_has(add_fails(node(TG_OP_where, 3, mask, scores, i)),
                "where's branches differ in dtype");
  tg_node *m5 = input(ty(TG_BOOL, 1, DIMS({5, NULL})));
  ck_assert_has(add_fails(node(TG_OP_where, 3, m5, scores, ninf)), "shapes do not broadcast");
}
END_TEST

/* ---- reductions ----------------------------------------------------------- */

START_TEST(test_reductions) {
  tg_node *x = input(F_BTC);
  tg_node *s = node(TG_OP_sum, 1, x, NULL, NULL);
  s->axes = 1u << 2;
  ck_assert_str_eq(tstr(&add(s)->type), "f32[B=8, T=1024, 1]");
  tg_node *m = node(TG_OP_max, 1, x, NULL, NULL);
  m->axes = 1u << 0 | 1u << 2;
  ck_assert_str_eq(tstr(&add(m)->type), "f32[1, T=1024, 1]");
  /* The kept 1s broadcast straight back against the input. */
  ck_assert_str_eq(tstr(&bin(TG_OP_sub, x, m)->type), "f32[B=8, T=1024, C=768]");

  tg_node *bad = node(TG_OP_sum, 1, x, NULL, NULL);
  bad->axes = 1u << 3;
  ck_assert_has(add_fails(bad), "sum over an axis beyond the input's rank 3");
  tg_node *high = node(TG_OP_max, 1, x, NULL, NULL);
  high->axes = 1u << 31;
  ck_assert_has(add_fails(high), "max over an axis beyond the input's rank 3");
  tg_node *none = node(TG_OP_sum, 1, x, NULL, NULL);
  ck_assert_has(add_fails(none), "sum over no axes");
  tg_node *bl = input(ty(TG_BOOL, 1, DIMS({2, NULL})));
  tg_node *sb = node(TG_OP_sum, 1, bl, NULL, NULL);
  sb->axes = 1;
  ck_assert_has(add_fails(sb), "sum of a bool tensor");
}
END_TEST

/* ---- movement ------------------------------------------------------------- */

START_TEST(test_reshape) {
  tg_node *x = input(F_BTC);
  tg_node *r = node(TG_OP_reshape, 1, x, NULL, NULL);
  r->type = ty(TG_I32, 4, DIMS({8, "B"}, {1024, "T"}, {12, "H"}, {64, NULL}));
  add(r);
  /* The dtype comes from the input whatever the node said. */
  ck_assert_str_eq(tstr(&r->type), "f32[B=8, T=1024, H=12, 64]");
  tg_node *bad = node(TG_OP_reshape, 1, x, NULL, NULL);
  bad->type = ty(TG_F32, 2, DIMS({8192, NULL}, {700, NULL}));
  const char *err = add_fails(bad);
  ck_assert_has(err, "reshape of f32[B=8, T=1024, C=768] (6291456 elements)");
  ck_assert_has(err, "to f32[8192, 700] (5734400 elements)");
}
END_TEST

START_TEST(test_transpose) {
  tg_node *x = input(F_BTC);
  tg_node *t = node(TG_OP_transpose, 1, x, NULL, NULL);
  memcpy(t->perm, (int[]){0, 2, 1}, 3 * sizeof(int));
  ck_assert_str_eq(tstr(&add(t)->type), "f32[B=8, C=768, T=1024]");
  tg_node *dup = node(TG_OP_transpose, 1, x, NULL, NULL);
  memcpy(dup->perm, (int[]){0, 0, 1}, 3 * sizeof(int));
  ck_assert_has(add_fails(dup), "transpose: perm is not a permutation of 0..2");
  tg_node *out = node(TG_OP_transpose, 1, x, NULL, NULL);
  memcpy(out->perm, (int[]){0, 1, 3}, 3 * sizeof(int));
  ck_assert_has(add_fails(out), "not a permutation");
  tg_node *neg = node(TG_OP_transpose, 1, x, NULL, NULL);
  memcpy(neg->perm, (int[]){0, -1, 2}, 3 * sizeof(int));
  ck_assert_has(add_fails(neg), "not a permutation");
}
END_TEST

START_TEST(test_slice) {
  tg_node *x = input(F_BTC);
  tg_node *s = node(TG_OP_slice, 1, x, NULL, NULL);
  s->axis = 2, s->start = 256, s->len = 256;
  ck_assert_str_eq(tstr(&add(s)->type), "f32[B=8, T=1024, 256]");
  tg_node *end = node(TG_OP_slice, 1, x, NULL, NULL);
  end->axis = 2, end->start = 512, end->len = 256;
  add(end); /* [512, 768) is exactly the last third */
  tg_node *bad = node(TG_OP_slice, 1, x, NULL, NULL);
  bad->axis = 2, bad->start = 600, bad->len = 256;
  ck_assert_has(add_fails(bad), "slice of length 256 from 600 is outside dim 2 of f32[B=8, T=1024, C=768]");
  tg_node *zero = node(TG_OP_slice, 1, x, NULL, NULL);
  zero->axis = 0, zero->start = 0, zero->len = 0;
  ck_assert_has(add_fails(zero), "slice of length 0 from 0 is outside dim 0");
  tg_node *ax = node(TG_OP_slice, 1, x, NULL, NULL);
  ax->axis = 3, ax->len = 1;
  ck_assert_has(add_fails(ax), "slice axis 3 is outside 0..2");
}
END_TEST

START_TEST(test_concat) {
  tg_node *a = input(ty(TG_F32, 2, DIMS({2, "B"}, {3, NULL})));
  tg_node *b = input(ty(TG_F32, 2, DIMS({2, NULL}, {5, NULL})));
  tg_node *c = input(ty(TG_F32, 2, DIMS({2, NULL}, {1, NULL})));
  tg_node *in[] = {a, b, c};
  tg_node *cc = tg_node_new(g, TG_OP_concat, (tg_loc){0});
  tg_node_set_inputs(g, cc, 3, in);
  cc->axis = 1;
  ck_assert_str_eq(tstr(&add(cc)->type), "f32[B=2, 9]");
  /* The joined dim gets a fresh size and so loses its symbol. */
  tg_node *one = add(node(TG_OP_concat, 1, a, NULL, NULL));
  ck_assert_str_eq(tstr(&one->type), "f32[2, 3]");
  tg_node *bad = node(TG_OP_concat, 2, a, b, NULL);
  bad->axis = 0;
  ck_assert_has(
      add_fails(bad),
      "concat along axis 0 of f32[B=2, 3] and f32[2, 5]: other dims and dtype must agree");
  tg_node *none = tg_node_new(g, TG_OP_concat, (tg_loc){0});
  tg_node_set_inputs(g, none, 0, NULL);
  ck_assert_has(add_fails(none), "concat needs at least one input");
}
END_TEST

START_TEST(test_gather) {
  tg_node *wte = param(ty(TG_F32, 2, DIMS({50257, "vocab"}, {768, "n_embd"})));
  tg_node *idx = input(ty(TG_I32, 2, DIMS({8, "B"}, {1024, "T"})));
  ck_assert_str_eq(tstr(&bin(TG_OP_gather, wte, idx)->type), "f32[B=8, T=1024, n_embd=768]");
  tg_node *fidx = input(ty(TG_F32, 1, DIMS({4, NULL})));
  ck_assert_has(add_fails(node(TG_OP_gather, 2, wte, fidx, NULL)),
                "gather indices must be i32, not f32[4]");
  tg_node *s = scalar(1);
  ck_assert_has(add_fails(node(TG_OP_gather, 2, s, idx, NULL)), "gather from a scalar");
  tg_node *big = input(ty(TG_F32, 5, DIMS({2, NULL}, {2, NULL}, {2, NULL}, {2, NULL}, {2, NULL})));
  tg_node *bidx = input(ty(TG_I32, 5, DIMS({2, NULL}, {2, NULL}, {2, NULL}, {2, NULL}, {2, NULL})));
  ck_assert_has(add_fails(node(TG_OP_gather, 2, big, bidx, NULL)),
                "gather result has rank above 8");
}
END_TEST

/* ---- matmul --------------------------------------------------------------- */

START_TEST(test_matmul) {
  tg_node *x = input(F_BTC);
  tg_node *w = param(ty(TG_F32, 2, DIMS({768, "C"}, {3072, NULL})));
  ck_assert_str_eq(tstr(&bin(TG_OP_matmul, x, w)->type), "f32[B=8, T=1024, 3072]");
  /* Batch dims broadcast: [B, H, T, D] @ [B, H, D, T] and [B, 1, ...]. */
  tg_node *q = input(ty(TG_F32, 4, DIMS({8, "B"}, {12, "H"}, {1024, "T"}, {64, NULL})));
  tg_node *k = input(ty(TG_F32, 4, DIMS({8, "B"}, {1, NULL}, {64, NULL}, {1024, "T"})));
  ck_assert_str_eq(tstr(&bin(TG_OP_matmul, q, k)->type), "f32[B=8, H=12, T=1024, T=1024]");

  tg_node *w2 = param(ty(TG_F32, 2, DIMS({512, NULL}, {10, NULL})));
  const char *err = add_fails(node(TG_OP_matmul, 2, x, w2, NULL));
  ck_assert_has(err, "matmul: inner dimensions differ: f32[B=8, T=1024, C=768] @ f32[512, 10]");
  ck_assert_has(err, "(768 vs 512)");
  tg_node *v = input(ty(TG_F32, 1, DIMS({768, NULL})));
  ck_assert_has(add_fails(node(TG_OP_matmul, 2, v, w, NULL)),
                "matmul needs operands of rank at least 2");
  tg_node *i = input(ty(TG_I32, 2, DIMS({768, NULL}, {4, NULL})));
  ck_assert_has(add_fails(node(TG_OP_matmul, 2, x, i, NULL)),
                "matmul needs float operands of one dtype");
  tg_node *kb = input(ty(TG_F32, 4, DIMS({4, NULL}, {12, NULL}, {64, NULL}, {1024, NULL})));
  ck_assert_has(add_fails(node(TG_OP_matmul, 2, q, kb, NULL)),
                "matmul: batch dims: shapes do not broadcast");
}
END_TEST

/* ---- leaves, arity and limits -------------------------------------------- */

START_TEST(test_leaves) {
  tg_node *c = scalar(-INFINITY);
  ck_assert_str_eq(tstr(&c->type), "f32[]");
  tg_node *io = node(TG_OP_iota, 0, NULL, NULL, NULL);
  io->type = ty(TG_I32, 2, DIMS({1024, "T"}, {1024, "T"}));
  io->axis = 1;
  ck_assert_str_eq(tstr(&add(io)->type), "i32[T=1024, T=1024]");

  tg_node *pi = node(TG_OP_param, 0, NULL, NULL, NULL);
  pi->type = ty(TG_I32, 1, DIMS({4, NULL}));
  ck_assert_has(add_fails(pi), "parameters must have a float dtype, not i32");
  tg_node *pn = node(TG_OP_param, 0, NULL, NULL, NULL);
  pn->type = ty(TG_F32, 1, DIMS({4, NULL}));
  pn->init = (tg_init){.kind = TG_INIT_NORMAL, .std = -1};
  ck_assert_has(add_fails(pn), "normal() needs a finite standard deviation >= 0");
  pn->init.std = NAN;
  ck_assert_has(add_fails(pn), "normal() needs a finite standard deviation");
  tg_node *cv = node(TG_OP_const, 0, NULL, NULL, NULL);
  cv->type = ty(TG_F32, 1, DIMS({2, NULL}));
  ck_assert_has(add_fails(cv), "const must be a scalar");
  tg_node *bi = node(TG_OP_iota, 0, NULL, NULL, NULL);
  bi->type = ty(TG_F32, 1, DIMS({4, NULL}));
  ck_assert_has(add_fails(bi), "iota gives i32, not f32");
  bi->type.dtype = TG_I32;
  bi->axis = 1;
  ck_assert_has(add_fails(bi), "iota axis 1 is outside 0..0");
  bi->type.rank = 0;
  bi->axis = 0;
  ck_assert_has(add_fails(bi), "iota needs a shape of rank at least 1");
}
END_TEST

START_TEST(test_shape_limits) {
  tg_node *r9 = node(TG_OP_input, 0, NULL, NULL, NULL);
  r9->type = ty(
      TG_F32, 8,
      DIMS({1, NULL}, {1, NULL}, {1, NULL}, {1, NULL}, {1, NULL}, {1, NULL}, {1, NULL}, {1, NULL}));
  add(r9); /* rank 8 is allowed */
  tg_node *r = node(TG_OP_input, 0, NULL, NULL, NULL);
  r->type = r9->type;
  r->type.rank = 9;
  ck_assert_has(add_fails(r), "rank 9 is outside 0..8");
  tg_node *big = node(TG_OP_param, 0, NULL, NULL, NULL);
  big->type = ty(TG_F32, 3, DIMS({1 << 20, NULL}, {1 << 20, NULL}, {1 << 9, NULL}));
  ck_assert_has(add_fails(big), "tensor too large (more than 2^48 elements)");
  tg_node *huge = node(TG_OP_input, 0, NULL, NULL, NULL);
  huge->type = ty(TG_F32, 1, DIMS({INT64_MAX, NULL}));
  ck_assert_has(add_fails(huge), "too large");
  tg_node *zero = node(TG_OP_input, 0, NULL, NULL, NULL);
  zero->type = ty(TG_F32, 2, DIMS({4, NULL}, {0, NULL}));
  ck_assert_has(add_fails(zero), "dim 1 has size 0; sizes must be at least 1");
  /* A concat whose total would pass 2^48 is refused, not overflowed. */
  tg_node *h = input(ty(TG_F32, 1, DIMS({(int64_t)1 << 47, NULL})));
  tg_node *in[] = {h, h, h};
  tg_node *cc = tg_node_new(g, TG_OP_concat, (tg_loc){0});
  tg_node_set_inputs(g, cc, 3, in);
  ck_assert_has(add_fails(cc), "concat result too large");
}
END_TEST

START_TEST(test_arity) {
  tg_node *x = input(F_BTC);
  ck_assert_has(add_fails(node(TG_OP_add, 1, x, NULL, NULL)), "add takes 2 inputs, got 1");
  ck_assert_has(add_fails(node(TG_OP_neg, 2, x, x, NULL)), "neg takes 1 input, got 2");
  ck_assert_has(add_fails(node(TG_OP_where, 2, x, x, NULL)), "where takes 3 inputs, got 2");
  ck_assert_has(add_fails(node(TG_OP_exp, 1, NULL, NULL, NULL)), "exp: input 0 is missing");
}
END_TEST

START_TEST(test_config_and_outputs) {
  double v = 0;
  ck_assert(!tg_graph_get_config(g, "n_layer", &v));
  tg_graph_set_config(g, "n_layer", 12);
  tg_graph_set_config(g, "n_head", 12);
  tg_graph_set_config(g, "n_layer", 2); /* an override keeps the first position */
  ck_assert_int_eq(g->n_config, 2);
  ck_assert_str_eq(g->config[0].name, "n_layer");
  ck_assert(tg_graph_get_config(g, "n_layer", &v) && v == 2);
  tg_node *x = input(F_BTC);
  tg_graph_add_output(g, "x", x);
  ck_assert_int_eq(g->n_outputs, 1);
  ck_assert_ptr_eq(g->outputs[0].node, x);
  ck_assert_str_eq(g->outputs[0].name, "x");
  /* Growing past the first allocation keeps every node in order. */
  for (int i = 0; i < 300; i++) add(node(TG_OP_neg, 1, g->nodes[g->n_nodes - 1], NULL, NULL));
  ck_assert_int_eq(g->n_nodes, 301);
  for (int i = 0; i < g->n_nodes; i++) ck_assert_int_eq(g->nodes[i]->id, i);
  ck_assert(tg_verify(ctx, g));
}
END_TEST

/* The ops autodiff and the optimizer introduce. */
START_TEST(test_gradient_ops) {
  tg_node *x = input(ty(TG_F32, 3, DIMS({2, "B"}, {4, "T"}, {1, NULL})));
  tg_node *e = node(TG_OP_expand, 1, x, NULL, NULL);
  e->type = ty(TG_F32, 3, DIMS({2, "B"}, {4, "T"}, {8, "C"}));
  ck_assert_int_eq(add(e)->type.dim[2].size, 8);
  tg_node *bad = node(TG_OP_expand, 1, e, NULL, NULL);
  bad->type = ty(TG_F32, 3, DIMS({2, NULL}, {4, NULL}, {16, NULL}));
  ck_assert_has(add_fails(bad), "expand: f32[B=2, T=4, C=8] does not broadcast to f32[2, 4, 16]");

  tg_node *p = node(TG_OP_pad, 1, e, NULL, NULL);
  p->axis = 2, p->start = 8, p->len = 24;
  ck_assert_int_eq(add(p)->type.dim[2].size, 24);
  tg_node *p2 = node(TG_OP_pad, 1, e, NULL, NULL);
  p2->axis = 2, p2->start = 17, p2->len = 24;
  ck_assert_has(add_fails(p2), "does not fit");

  tg_node *idx = input(ty(TG_I32, 2, DIMS({2, "B"}, {4, "T"})));
  tg_node *sc = node(TG_OP_scatter_add, 2, e, idx, NULL);
  sc->type = ty(TG_F32, 2, DIMS({50, "vocab"}, {8, NULL}));
  ck_assert_int_eq(add(sc)->type.dim[0].size, 50);
  tg_node *sc2 = node(TG_OP_scatter_add, 2, e, idx, NULL);
  sc2->type = ty(TG_F32, 2, DIMS({50, "vocab"}, {9, NULL}));
  ck_assert_has(add_fails(sc2), "cannot give f32[vocab=50, 9]");
  tg_node *sc3 = node(TG_OP_scatter_add, 2, e, e, NULL);
  sc3->type = sc->type;
  ck_assert_has(add_fails(sc3), "indices must be i32");

  tg_node *w = param(ty(TG_F32, 2, DIMS({50, "vocab"}, {8, NULL})));
  tg_node *st = node(TG_OP_state, 0, NULL, NULL, NULL);
  st->type = w->type;
  add(st);
  add(node(TG_OP_assign, 2, w, sc, NULL));
  add(node(TG_OP_assign, 2, st, sc, NULL));
  ck_assert_has(add_fails(node(TG_OP_assign, 2, e, e, NULL)), "target must be a param or state");
  ck_assert_has(add_fails(node(TG_OP_assign, 2, w, e, NULL)), "assign of f32[B=2, T=4, C=8] to");
}
END_TEST

/* The ops of the flash_attn pass: q, k, v [..., T, D] of one type, lse
 * [..., T, 1], o and do like q; the gradients take q's, k's, v's type. */
static tg_node *flash(tg_op op, int nin, tg_node *const *in) {
  tg_node *n = tg_node_new(g, op, (tg_loc){"m.tg", 1, 1});
  tg_node_set_inputs(g, n, nin, in);
  n->value = 0.125;
  return n;
}

START_TEST(test_flash_attention_ops) {
  tg_type bhtd = ty(TG_F32, 4, DIMS({2, "B"}, {3, "H"}, {5, "T"}, {8, "D"}));
  tg_node *q = input(bhtd), *k = input(bhtd), *v = input(bhtd);
  tg_node *lse = add(flash(TG_OP_flash_attention_lse, 2, (tg_node *[]){q, k}));
  ck_assert_str_eq(tstr(&lse->type), "f32[B=2, H=3, T=5, 1]");
  tg_node *o = add(flash(TG_OP_flash_attention, 4, (tg_node *[]){q, k, v, lse}));
  ck_assert_str_eq(tstr(&o->type), "f32[B=2, H=3, T=5, D=8]");
  for (tg_op op = TG_OP_flash_attention_dq; op <= TG_OP_flash_attention_dv; op++) {
    tg_node *d = add(flash(op, 6, (tg_node *[]){q, k, v, o, lse, o}));
    ck_assert(tg_type_equal(&d->type, &q->type));
  }
  /* a k of another shape, an lse of the wrong shape, a bad scale, ints */
  tg_node *k2 = input(ty(TG_F32, 4, DIMS({2, NULL}, {3, NULL}, {6, NULL}, {8, NULL})));
  ck_assert_has(add_fails(flash(TG_OP_flash_attention_lse, 2, (tg_node *[]){q, k2})),
                "flash_attention_lse: f32[2, 3, 6, 8] differs from q f32[B=2, H=3, T=5, D=8]");
  ck_assert_has(add_fails(flash(TG_OP_flash_attention, 4, (tg_node *[]){q, k, v, o})),
                "flash_attention: lse f32[B=2, H=3, T=5, D=8] is not f32[B=2, H=3, T=5, 1]");
  ck_assert_has(add_fails(flash(TG_OP_flash_attention_dv, 6, (tg_node *[]){q, k, v, lse, lse, o})),
                "flash_attention_dv: o f32[B=2, H=3, T=5, 1] differs from q");
  tg_node *inf = flash(TG_OP_flash_attention_lse, 2, (tg_node *[]){q, k});
  inf->value = INFINITY;
  ck_assert_has(add_fails(inf), "needs a finite scale");
  tg_node *iq = input(ty(TG_I32, 2, DIMS({5, NULL}, {8, NULL})));
  ck_assert_has(add_fails(flash(TG_OP_flash_attention_lse, 2, (tg_node *[]){iq, iq})),
                "needs float q of rank at least 2");
  tg_node *vec = input(ty(TG_F32, 1, DIMS({8, NULL})));
  ck_assert_has(add_fails(flash(TG_OP_flash_attention_lse, 2, (tg_node *[]){vec, vec})),
                "needs float q of rank at least 2");
  ck_assert_has(add_fails(flash(TG_OP_flash_attention, 3, (tg_node *[]){q, k, v})),
                "flash_attention takes 4 inputs, got 3");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ir_builder");
  TCase *tc = tcase_create("builder");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_dtypes_and_ops);
  tcase_add_test(tc, test_type_str_and_numbers);
  tcase_add_test(tc, test_broadcast_bias);
  tcase_add_test(tc, test_broadcast_column_row);
  tcase_add_test(tc, test_broadcast_symbols);
  tcase_add_test(tc, test_broadcast_fails);
  tcase_add_test(tc, test_binary_dtypes);
  tcase_add_test(tc, test_unary);
  tcase_add_test(tc, test_cast);
  tcase_add_test(tc, test_where);
  tcase_add_test(tc, test_reductions);
  tcase_add_test(tc, test_reshape);
  tcase_add_test(tc, test_transpose);
  tcase_add_test(tc, test_slice);
  tcase_add_test(tc, test_concat);
  tcase_add_test(tc, test_gather);
  tcase_add_test(tc, test_matmul);
  tcase_add_test(tc, test_leaves);
  tcase_add_test(tc, test_shape_limits);
  tcase_add_test(tc, test_arity);
  tcase_add_test(tc, test_config_and_outputs);
  tcase_add_test(tc, test_gradient_ops);
  tcase_add_test(tc, test_flash_attention_ops);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(suite()); }
