/* test_ir_text.c: the IR text form, Graphviz output and statistics.
 *
 * The text form is the IR's test and debugging interface, so it must read
 * back exactly what it prints (byte for byte after a second print) and
 * reject malformed text with a precise file:line:col message instead of
 * crashing: the reader sees hand-edited files and fuzzer output. */
#include "testutil.h"

#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* ---- building graphs by hand ---------------------------------------------- */

#define DIMS(...) ((const tg_dim[]){__VA_ARGS__})

static tg_type ty(tg_dtype dt, int rank, const tg_dim *dims) {
  tg_type t = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) t.dim[i] = dims[i];
  return t;
}

static tg_node *node(tg_graph *g, tg_op op, int nin, tg_node *a, tg_node *b, tg_node *c) {
  tg_node *in[3] = {a, b, c};
  tg_node *n = tg_node_new(g, op, (tg_loc){"models/t.tg", 10 + nin, 3});
  tg_node_set_inputs(g, n, nin, in);
  return n;
}

static tg_node *add(tg_graph *g, tg_node *n) {
  const char *err = tg_graph_add(g, n);
  ck_assert_msg(err == NULL, "tg_graph_add(%s) failed: %s", tg_ops[n->op].name, err);
  return n;
}

static tg_node *leaf(tg_graph *g, tg_op op, tg_type t, const char *name) {
  tg_node *n = node(g, op, 0, NULL, NULL, NULL);
  n->type = t;
  n->name = name;
  return n;
}

static tg_node *un(tg_graph *g, tg_op op, tg_node *a) {
  return add(g, node(g, op, 1, a, NULL, NULL));
}
static tg_node *bin(tg_graph *g, tg_op op, tg_node *a, tg_node *b) {
  return add(g, node(g, op, 2, a, b, NULL));
}

/* A flash attention op with a scale that needs all 17 digits. */
static tg_node *flash(tg_graph *g, tg_op op, int nin, tg_node **in) {
  tg_node *n = tg_node_new(g, op, (tg_loc){"models/std.tg", 38, 23});
  tg_node_set_inputs(g, n, nin, in);
  n->value = 1 / sqrt(8.0);
  return n;
}

/* A graph using every op of ops.def and every attribute kind, with names
 * and locations that need escaping or careful parsing. */
static tg_graph *every_op_graph(tg_ctx *ctx) {
  tg_graph *g = tg_graph_new(ctx->arena);
  g->source = "models/every \"op\".tg";
  tg_graph_set_config(g, "B", 2);
  tg_graph_set_config(g, "T", 4);
  tg_graph_set_config(g, "C", 8);
  tg_graph_set_config(g, "vocab", 16);
  tg_graph_set_config(g, "lr", 0.0003);
  tg_graph_set_config(g, "eps", -1e-300);

  tg_node *idx = leaf(g, TG_OP_input, ty(TG_I32, 2, DIMS({2, "B"}, {4, "T"})), "idx");
  idx->loc = (tg_loc){"models/dir with space/a:b.tg", 14, 7};
  add(g, idx);
  tg_node *wte = leaf(g, TG_OP_param, ty(TG_F32, 2, DIMS({16, "vocab"}, {8, "C"})), "wte.weight");
  wte->init = (tg_init){.kind = TG_INIT_NORMAL, .std = 0.02, .split = TG_SPLIT_VOCAB, .split_groups = 1};
  add(g, wte);
  tg_node *gain = leaf(g, TG_OP_param, ty(TG_F32, 1, DIMS({8, "C"})), "we\"ird\\name\x01\xc3\xa9");
  gain->init = (tg_init){.kind = TG_INIT_ONES, .std = 0};
  add(g, gain);
  tg_node *bias = leaf(g, TG_OP_param, ty(TG_F32, 1, DIMS({8, NULL})), "bias");
  bias->init = (tg_init){.kind = TG_INIT_ZEROS, .std = 0};
  bias->loc = (tg_loc){NULL, 0, 0};
  add(g, bias);
  tg_node *x = bin(g, TG_OP_gather, wte, idx);
  tg_node *ninf = leaf(g, TG_OP_const, ty(TG_F32, 0, NULL), NULL);
  ninf->value = -INFINITY;
  add(g, ninf);
  tg_node *nan = leaf(g, TG_OP_const, ty(TG_F32, 0, NULL), "nan");
  nan->value = NAN;
  add(g, nan);
  tg_node *half = leaf(g, TG_OP_const, ty(TG_F32, 0, NULL), NULL);
  half->value = 0.1 + 0.2;
  add(g, half);
  tg_node *row = leaf(g, TG_OP_iota, ty(TG_I32, 2, DIMS({4, "T"}, {4, "T"})), NULL);
  row->axis = 0;
  add(g, row);
  tg_node *col = leaf(g, TG_OP_iota, ty(TG_I32, 2, DIMS({4, "T"}, {4, "T"})), NULL);
  col->axis = 1;
  add(g, col);

  tg_node *mask = bin(g, TG_OP_le, col, row);
  tg_node *zero = leaf(g, TG_OP_const, ty(TG_F32, 0, NULL), NULL);
  add(g, zero);
  tg_node *fill = add(g, node(g, TG_OP_where, 3, mask, zero, ninf));
  tg_node *h = bin(g, TG_OP_mul, x, gain);
  h = bin(g, TG_OP_add, h, bias);
  h = bin(g, TG_OP_sub, h, half);
  h = bin(g, TG_OP_div, h, x);
  h = bin(g, TG_OP_maximum, h, zero);
  for (tg_op op = TG_OP_neg; op <= TG_OP_gelu_grad; op++) h = un(g, op, h);
  for (tg_op op = TG_OP_lt; op <= TG_OP_ne; op++) bin(g, op, h, x);

  tg_node *cast = node(g, TG_OP_cast, 1, h, NULL, NULL);
  cast->type.dtype = TG_BF16;
  add(g, cast);
  tg_node *s = node(g, TG_OP_sum, 1, h, NULL, NULL);
  s->axes = 1u << 2;
  s->name = "m";
  add(g, s);
  tg_node *m = node(g, TG_OP_max, 1, h, NULL, NULL);
  m->axes = 1u << 0 | 1u << 2;
  add(g, m);
  tg_node *rs = node(g, TG_OP_reshape, 1, h, NULL, NULL);
  rs->type = ty(TG_F32, 2, DIMS({8, NULL}, {8, "C"}));
  add(g, rs);
  tg_node *tr = node(g, TG_OP_transpose, 1, h, NULL, NULL);
  memcpy(tr->perm, (int[]){0, 2, 1}, sizeof(int[3]));
  add(g, tr);
  tg_node *sl = node(g, TG_OP_slice, 1, h, NULL, NULL);
  sl->axis = 2, sl->start = 2, sl->len = 3;
  add(g, sl);
  tg_node *cc = node(g, TG_OP_concat, 3, h, x, h);
  cc->axis = 1;
  add(g, cc);
  tg_node *wt = node(g, TG_OP_transpose, 1, wte, NULL, NULL);
  memcpy(wt->perm, (int[]){1, 0}, sizeof(int[2]));
  add(g, wt);
  tg_node *logits = bin(g, TG_OP_matmul, h, wt);
  logits->name = "logits";
  /* the ops that autodiff and the optimizer introduce */
  tg_node *ex = node(g, TG_OP_expand, 1, s, NULL, NULL);
  ex->type = ty(TG_F32, 3, DIMS({2, "B"}, {4, "T"}, {8, "C"}));
  add(g, ex);
  tg_node *pd = node(g, TG_OP_pad, 1, sl, NULL, NULL);
  pd->axis = 2, pd->start = 2, pd->len = 8;
  add(g, pd);
  tg_node *sc = node(g, TG_OP_scatter_add, 2, ex, idx, NULL);
  sc->type = ty(TG_F32, 2, DIMS({16, "vocab"}, {8, "C"}));
  add(g, sc);
  tg_node *mom = leaf(g, TG_OP_state, ty(TG_F32, 2, DIMS({16, "vocab"}, {8, "C"})), "adam.m.wte.weight");
  mom->init = (tg_init){.kind = TG_INIT_ZEROS, .std = 0};
  add(g, mom);
  bin(g, TG_OP_assign, mom, sc);
  bin(g, TG_OP_assign, wte, bin(g, TG_OP_sub, wte, sc));
  /* the ops the flash_attn pass introduces: q = x, k = h, v = x */
  tg_node *fa_in[6] = {x, h, x};
  tg_node *lse = add(g, flash(g, TG_OP_flash_attention_lse, 2, fa_in));
  fa_in[3] = lse;
  tg_node *o = add(g, flash(g, TG_OP_flash_attention, 4, fa_in));
  fa_in[3] = o, fa_in[4] = lse, fa_in[5] = h;
  for (tg_op op = TG_OP_flash_attention_dq; op <= TG_OP_flash_attention_dv; op++)
    add(g, flash(g, op, 6, fa_in));
  /* the collectives, on a 1-D shard */
  tg_node *shard = add(g, leaf(g, TG_OP_input, ty(TG_F32, 1, DIMS({8, NULL})), "shard"));
  tg_node *ar = node(g, TG_OP_all_reduce, 1, shard, NULL, NULL);
  ar->ranks = 4;
  add(g, ar);
  tg_node *ag = node(g, TG_OP_all_gather, 1, ar, NULL, NULL);
  ag->ranks = 4;
  add(g, ag);
  tg_node *rsc = node(g, TG_OP_reduce_scatter, 1, ag, NULL, NULL);
  rsc->ranks = 2;
  add(g, rsc);
  tg_node *amax = node(g, TG_OP_all_max, 1, rsc, NULL, NULL);
  amax->ranks = 2;
  add(g, amax);
  /* tensor parallelism's marker, of any shape */
  tg_node *rep = node(g, TG_OP_replicate, 1, logits, NULL, NULL);
  rep->ranks = 2;
  add(g, rep);
  tg_node *loss = node(g, TG_OP_sum, 1, logits, NULL, NULL);
  loss->axes = 7;
  add(g, loss);
  tg_graph_add_output(g, "loss", loss);
  tg_graph_add_output(g, "logits", logits);
  tg_graph_add_output(g, "mask \"fill\"", fill);
  return g;
}

/* ---- reading text --------------------------------------------------------- */

/* Reads text registered as t.tgir; NULL when the reader bailed. */
static tg_graph *read_text(tg_ctx *ctx, const char *text) {
  jmp_buf jb;
  const tg_source *src = tg_source_add(ctx, "t.tgir", text, strlen(text));
  ctx->bail = &jb;
  if (setjmp(jb)) {
    ctx->bail = NULL;
    return NULL;
  }
  tg_graph *g = tg_read_ir(ctx, src);
  ctx->bail = NULL;
  return g;
}

static void assert_round_trip(const tg_graph *g) {
  char *first = tu_print_ir(g);
  tg_ctx *ctx = tu_ctx();
  tg_graph *back = read_text(ctx, first);
  ck_assert_msg(back != NULL, "reading printed IR failed:\n%s\n--- text:\n%s", tu_errors(ctx),
                first);
  char *second = tu_print_ir(back);
  ck_assert_str_eq(first, second);
  ck_assert(tg_verify(ctx, back));
  ck_assert_int_eq(back->n_nodes, g->n_nodes);
  ck_assert_int_eq(back->n_outputs, g->n_outputs);
  ck_assert_int_eq(back->n_config, g->n_config);
  tg_graph_free(back);
  tu_ctx_free(ctx);
  free(first);
  free(second);
}

START_TEST(test_golden_format) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tg_graph_new(ctx->arena);
  g->source = "models/gpt2.tg";
  tg_graph_set_config(g, "n_embd", 768);
  tg_graph_set_config(g, "vocab", 50257);
  tg_node *idx = leaf(g, TG_OP_input, ty(TG_I32, 2, DIMS({8, "B"}, {1024, "T"})), "idx");
  idx->loc = (tg_loc){"models/gpt2.tg", 14, 7};
  add(g, idx);
  tg_node *wte =
      leaf(g, TG_OP_param, ty(TG_F32, 2, DIMS({50257, "vocab"}, {768, "n_embd"})), "wte.weight");
  wte->init = (tg_init){.kind = TG_INIT_NORMAL, .std = 0.02};
  wte->loc = (tg_loc){"models/gpt2.tg", 16, 7};
  add(g, wte);
  tg_node *x = node(g, TG_OP_gather, 2, wte, idx, NULL);
  x->loc = (tg_loc){"models/gpt2.tg", 30, 5};
  add(g, x);
  tg_node *c = leaf(g, TG_OP_const, ty(TG_F32, 0, NULL), NULL);
  c->value = -INFINITY;
  c->loc = (tg_loc){NULL, 0, 0};
  add(g, c);
  tg_node *s = node(g, TG_OP_sum, 1, x, NULL, NULL);
  s->axes = 4;
  s->name = "m";
  s->loc = (tg_loc){"models/std.tg", 8, 7};
  add(g, s);
  tg_node *cast = node(g, TG_OP_cast, 1, s, NULL, NULL);
  cast->type.dtype = TG_BF16;
  cast->loc = (tg_loc){NULL, 0, 0};
  add(g, cast);
  tg_graph_add_output(g, "loss", s);
  char *text = tu_print_ir(g);
  ck_assert_str_eq(text,
                   "# tg IR 1\n"
                   "source \"models/gpt2.tg\"\n"
                   "config n_embd = 768\n"
                   "config vocab = 50257\n"
                   "%0 = input : i32[B=8, T=1024] \"idx\" @ models/gpt2.tg:14:7\n"
                   "%1 = param {init=normal(0.02)} : f32[vocab=50257, n_embd=768] \"wte.weight\" @ "
                   "models/gpt2.tg:16:7\n"
                   "%2 = gather %1, %0 : f32[B=8, T=1024, n_embd=768] @ models/gpt2.tg:30:5\n"
                   "%3 = const {value=-inf} : f32[]\n"
                   "%4 = sum %2 {axes=[2]} : f32[B=8, T=1024, 1] \"m\" @ models/std.tg:8:7\n"
                   "%5 = cast %4 : bf16[B=8, T=1024, 1]\n"
                   "output \"loss\" = %4\n");
  assert_round_trip(g);
  free(text);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_round_trip_every_op) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = every_op_graph(ctx);
  ck_assert(tg_verify(ctx, g));
  /* The graph must keep covering the whole op table and every attribute
   * kind, or the round trip would not test all of the format. */
  tg_stats s;
  tg_graph_stats(g, &s);
  bool attr_seen[TG_ATTR_RANKS + 1] = {false};
  for (int op = 0; op < TG_NOPS; op++) {
    ck_assert_msg(s.by_op[op] > 0, "op %s is not in the round-trip graph", tg_ops[op].name);
    attr_seen[tg_ops[op].attr] = true;
  }
  for (int a = 0; a <= TG_ATTR_RANKS; a++)
    ck_assert_msg(attr_seen[a], "attribute kind %d unused", a);
  for (int i = 0; i < 3; i++) ck_assert(g->nodes[1 + i]->op == TG_OP_param);
  ck_assert_int_eq(g->nodes[1]->init.kind, TG_INIT_NORMAL);
  ck_assert_int_eq(g->nodes[2]->init.kind, TG_INIT_ONES);
  ck_assert_int_eq(g->nodes[3]->init.kind, TG_INIT_ZEROS);

  char *text = tu_print_ir(g);
  ck_assert_ptr_nonnull(strstr(text, "source \"models/every \\\"op\\\".tg\"\n"));
  ck_assert_ptr_nonnull(strstr(text, "\"we\\\"ird\\\\name\\x01\\xc3\\xa9\""));
  ck_assert_ptr_nonnull(strstr(text, "{value=-inf}"));
  ck_assert_ptr_nonnull(strstr(text, "{value=nan} : f32[] \"nan\""));
  ck_assert_ptr_nonnull(strstr(text, "{value=0.30000000000000004}"));
  ck_assert_ptr_nonnull(strstr(text, "@ models/dir with space/a:b.tg:14:7\n"));
  ck_assert_ptr_nonnull(strstr(text, "config eps = -1e-300\n"));
  ck_assert_ptr_nonnull(strstr(text, "{perm=[0, 2, 1]}"));
  ck_assert_ptr_nonnull(strstr(text, "{axes=[0, 2]}"));
  ck_assert_ptr_nonnull(strstr(text, "{axis=2, start=2, len=3}"));
  ck_assert_ptr_nonnull(strstr(text, "all_gather %"));
  ck_assert_ptr_nonnull(strstr(text, " {ranks=4} : f32[32] @"));
  ck_assert_ptr_nonnull(strstr(text, " {ranks=2} : f32[16] @"));
  ck_assert_ptr_nonnull(strstr(text, "output \"mask \\\"fill\\\"\" = %"));
  assert_round_trip(g);

  /* What was read back carries the same values, not just the same text. */
  tg_ctx *c2 = tu_ctx();
  tg_graph *back = read_text(c2, text);
  ck_assert_ptr_nonnull(back);
  ck_assert_str_eq(back->source, g->source);
  ck_assert_str_eq(back->nodes[2]->name, g->nodes[2]->name);
  ck_assert_str_eq(back->nodes[0]->loc.file, "models/dir with space/a:b.tg");
  ck_assert_int_eq(back->nodes[0]->loc.line, 14);
  ck_assert_int_eq(back->nodes[0]->loc.col, 7);
  ck_assert_ptr_null(back->nodes[3]->loc.file);
  ck_assert_str_eq(back->nodes[0]->type.dim[1].sym, "T");
  double v;
  ck_assert(tg_graph_get_config(back, "lr", &v));
  ck_assert(v == 0.0003);
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *a = g->nodes[k], *b = back->nodes[k];
    ck_assert_int_eq(a->op, b->op);
    ck_assert_int_eq(b->id, k);
    ck_assert(tg_type_equal(&a->type, &b->type));
    ck_assert_int_eq(a->axes, b->axes);
    if (tg_op_is_collective(a->op) || a->op == TG_OP_replicate) ck_assert_int_eq(a->ranks, b->ranks);
    if (a->op == TG_OP_param) {
      ck_assert_int_eq(a->init.split, b->init.split);
      ck_assert_int_eq(a->init.split ? a->init.split_groups : 0, b->init.split ? b->init.split_groups : 0);
    }
    if (a->op == TG_OP_const)
      ck_assert(memcmp(&a->value, &b->value, sizeof a->value) == 0 ||
                (a->value != a->value && b->value != b->value));
    for (int i = 0; i < a->nin; i++) ck_assert_int_eq(a->in[i]->id, b->in[i]->id);
  }
  ck_assert_int_eq(back->outputs[1].node->id, g->outputs[1].node->id);
  tg_graph_free(back);
  tu_ctx_free(c2);
  free(text);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* Comments, blank lines, CRLF endings and extra spaces are accepted and
 * vanish from the canonical reprint. */
START_TEST(test_read_lenient_layout) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = read_text(ctx,
                          "# tg IR 1 \r\n"
                          "# a comment\n"
                          "\n"
                          "   \t\n"
                          "config  n = 4\n"
                          "%0 = input :   f32[ n=4 ,2 ]   \"x\"\r\n"
                          "  # indented comment\n"
                          "%1   =  sum %0{axes=[ 1 ]}:f32[n=4, 1]\n"
                          "output \"y\"=%1");
  ck_assert_msg(g != NULL, "%s", tu_errors(ctx));
  char *text = tu_print_ir(g);
  ck_assert_str_eq(text,
                   "# tg IR 1\n"
                   "config n = 4\n"
                   "%0 = input : f32[n=4, 2] \"x\"\n"
                   "%1 = sum %0 {axes=[1]} : f32[n=4, 1]\n"
                   "output \"y\" = %1\n");
  free(text);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* ---- reader errors -------------------------------------------------------- */

typedef struct bad_case {
  const char *text;
  int line, col;
  const char *message;
} bad_case;

#define H "# tg IR 1\n"
#define X0 "%0 = input : f32[4, 3] \"x\"\n"

static const bad_case bad_cases[] = {
    {H "%0 = input : f32[2]\n", 2, 6, "input needs a name: weights and batches are matched by it"},
    {H "%0 = const {value=1.5} : i32[]\n", 2, 6, "an i32 const must hold an integer, not 1.5"},
    {H "%0 = const {value=2} : bool[]\n", 2, 6, "a bool const must be 0 or 1, not 2"},
    {"", 1, 1, "expected '# tg IR 1' on the first line"},
    {"%0 = input : f32[]\n", 1, 1, "expected '# tg IR 1' on the first line"},
    {"# tg IR 2\n", 1, 9, "unsupported IR version '2'"},
    {H "%0 = foo : f32[]\n", 2, 6, "unknown op 'foo'"},
    {H X0 "%2 = neg %0 : f32[4, 3]\n", 3, 1, "expected %1, found %2"},
    {H X0 "%1 = add %0, %7 : f32[4, 3]\n", 3, 14, "%7 is not defined yet"},
    {H X0 "%1 = neg %1 : f32[4, 3]\n", 3, 10, "%1 is not defined yet"},
    {H X0 "%1 = neg %0 {axis=1} : f32[4, 3]\n", 3, 13, "neg takes no attributes"},
    {H X0 "%1 = sum %0 {axis=1} : f32[4, 1]\n", 3, 14,
     "expected 'axes=' in sum's attributes, found 'axis=1}'"},
    {H "%0 = param : f32[4]\n", 2, 12, "expected param's attributes {init=...}, found ':'"},
    {H "%0 = param {init=uniform} : f32[4]\n", 2, 18, "unknown initialiser 'uniform}'"},
    {H X0 "%1 = neg %0 : f32[4, 5]\n", 3, 15,
     "type says f32[4, 5] but neg of its inputs gives f32[4, 3]"},
    {H X0 "%1 = neg %0 : f16[4, 3]\n", 3, 15,
     "type says f16[4, 3] but neg of its inputs gives f32[4, 3]"},
    {H X0 "%1 = add %0,\n", 3, 13, "expected a node such as %3, found the end of the line"},
    {H X0 "%1 = neg %0 : f32[4, \n", 3, 22, "expected a dim size, found the end of the line"},
    {H "%0 = input : f32[4\n", 2, 19, "expected ']' after the dims, found the end of the line"},
    {H "%0 = input\n", 2, 11, "expected ':' before the type, found the end of the line"},
    {H "%0 = input f32[2]\n", 2, 12, "expected ':' before the type, found 'f32[2]'"},
    {H "%0 =\n", 2, 5, "expected an op name after '=', found the end of the line"},
    {H "%", 2, 2, "expected a node number, found the end of the line"},
    {H "!!@#$ garbage\n", 2, 1,
     "expected a node (%N = ...), 'source', 'config', 'phase' or 'output' line, found '!!@#$'"},
    {H "configure x = 1\n", 2, 1, "expected a node (%N = ...)"},
    {H "%0 = input : f32[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n", 2, 14, "rank 10 exceeds 8"},
    {H "%0 = input : f32[99999999999999999999]\n", 2, 18,
     "a dim size 99999999999999999999 is out of range"},
    {H "%0 = input : f32[0]\n", 2, 18, "dim size 0: sizes must be at least 1"},
    {H "%0 = input : f32[65536, 65536, 65536, 2]\n", 2, 39, "the type has more than 2^48 elements"},
    {H "%0 = input : f64[2]\n", 2, 14, "unknown dtype 'f64'"},
    {H "%0 = input : f32[n 2]\n", 2, 20, "expected '=' after the dim's symbol, found '2]'"},
    {H "%0 = input : f32[2] \"x\n", 2, 21, "unterminated string"},
    {H "%0 = input : f32[2] \"x\\n\"\n", 2, 23, "unknown escape '\\n\"'"},
    {H "%0 = input : f32[2] \"x\\x0\"\n", 2, 23, "\\x must be followed by two hex digits"},
    {H "%0 = input : f32[2] \"x\\x00\"\n", 2, 23, "a string may not contain \\x00"},
    {H "%0 = input : f32[2] @ a\tb.tg:1:2\n", 2, 24,
     "control byte 0x09 in the location's file name"},
    {H "%0 = input : f32[2] \"x\" junk\n", 2, 25, "unexpected 'junk' at the end of the node line"},
    {H "%0 = input : f32[2] @ nowhere\n", 2, 21, "expected a location FILE:LINE:COL after '@'"},
    {H "%0 = input : f32[2] @ :3:4\n", 2, 23, "the location has no file name"},
    {H "%0 = input : f32[2] @ a.tg:3:99999999999\n", 2, 30,
     "a column number 99999999999 is out of range"},
    {H X0 "%1 = transpose %0 {perm=[1, 0, 2]} : f32[3, 4]\n", 3, 25,
     "perm has 3 entries but the input has rank 2"},
    {H X0 "%1 = transpose %0 {perm=[1, 9]} : f32[3, 4]\n", 3, 29, "axis 9 is outside 0..7"},
    {H X0 "%1 = transpose %0 {perm=[0, 0]} : f32[4, 4]\n", 3, 6,
     "transpose: perm is not a permutation of 0..1"},
    {H X0 "%1 = sum %0 {axes=[1, 0]} : f32[1, 1]\n", 3, 19,
     "axes must be listed in increasing order"},
    {H X0 "%1 = sum %0 {axes=[5]} : f32[4, 3]\n", 3, 6,
     "sum over an axis beyond the input's rank 2"},
    {H X0 "%1 = slice %0 {axis=1, start=2, len=5} : f32[4, 5]\n", 3, 6,
     "slice of length 5 from 2 is outside dim 1 of f32[4, 3]"},
    {H X0 "%1 = slice %0 {axis=1, len=5, start=2} : f32[4, 5]\n", 3, 24,
     "expected 'start=' in slice's attributes"},
    {H X0 "%1 = slice %0 {axis=1, start=-999999999999999999, len=5} : f32[4, 5]\n", 3, 30,
     "a start -999999999999999999 is out of range (-281474976710656..281474976710656)"},
    {H X0 "%1 = matmul %0, %0 : f32[4, 3]\n", 3, 6,
     "matmul: inner dimensions differ: f32[4, 3] @ f32[4, 3] (3 vs 4)"},
    {H X0 "%1 = add %0 : f32[4, 3]\n", 3, 6, "add takes 2 inputs, got 1"},
    {H X0 "%1 = concat {axis=0} : f32[4, 3]\n", 3, 6, "concat needs at least one input"},
    {H X0 "%1 = all_gather %0 {ranks=2} : f32[24]\n", 3, 6,
     "all_gather takes a 1-D value, not f32[4, 3] (flatten it first)"},
    {H "%0 = input : f32[5] \"x\"\n%1 = reduce_scatter %0 {ranks=2} : f32[2]\n", 3, 6,
     "reduce_scatter of f32[5]: 5 elements do not split into 2 equal blocks"},
    {H "%0 = input : f32[4] \"x\"\n%1 = all_reduce %0 {ranks=0} : f32[4]\n", 3, 6,
     "all_reduce needs ranks >= 1, got 0"},
    {H "%0 = input : f32[4] \"x\"\n%1 = all_reduce %0 {ranks=-2} : f32[4]\n", 3, 27,
     "expected a rank count"},
    {H "%0 = input : f32[4] \"x\"\n%1 = all_reduce %0 : f32[4]\n", 3, 20,
     "expected all_reduce's attributes {ranks=...}"},
    {H "%0 = param {init=normal(-1.0)} : f32[2]\n", 2, 6,
     "normal() needs a finite standard deviation"},
    {H "%0 = param {init=normal(abc)} : f32[2]\n", 2, 25,
     "expected a standard deviation, found 'abc'"},
    {H "%0 = const {value=1.0.0} : f32[]\n", 2, 19, "expected a value, found '1.0.0'"},
    {H "config x = 1\nconfig x = 2\n", 3, 8, "config 'x' is set twice"},
    {H X0 "config x = 1\n", 3, 1, "config lines must come before the nodes"},
    {H "config x = 1\nsource \"a\"\n", 3, 1,
     "the source line must come before config lines and nodes"},
    {H "source \"a\"\nsource \"b\"\n", 3, 1, "a second source line"},
    {H X0 "output \"y\" = %0\n%1 = neg %0 : f32[4, 3]\n", 4, 1,
     "nodes must come before the output lines"},
    {H X0 "output \"y\" = %1\n", 3, 14, "%1 is not defined yet"},
    {H X0 "output y = %0\n", 3, 8, "expected the output's name (a quoted string), found 'y'"},
};

/* The caret line tg_report prints under the quoted source line. */
static char *caret_line(int col) {
  char *s = malloc((size_t)col + 16);
  int k = sprintf(s, "      | ");
  for (int i = 1; i < col; i++) s[k++] = ' ';
  strcpy(s + k, "^\n");
  return s;
}

START_TEST(test_read_errors) {
  const bad_case *c = &bad_cases[_i];
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = read_text(ctx, c->text);
  const char *errs = tu_errors(ctx);
  ck_assert_msg(g == NULL, "case %d was accepted:\n%s", _i, c->text);
  char want[512];
  snprintf(want, sizeof want, "t.tgir:%d:%d: error: %s", c->line, c->col, c->message);
  ck_assert_msg(strstr(errs, want), "case %d:\nwant: %s\ngot:  %s", _i, want, errs);
  char *caret = caret_line(c->col);
  ck_assert_msg(strstr(errs, caret), "case %d: no caret at column %d:\n%s", _i, c->col, errs);
  ck_assert_int_eq(ctx->nerrors, 1);
  free(caret);
  tu_ctx_free(ctx);
}
END_TEST

/* Rules about the graph as a whole come from the verifier, run on what
 * the reader read. */
START_TEST(test_duplicate_names) {
  tg_ctx *ctx = tu_ctx();
  ck_assert_ptr_null(read_text(ctx, H "%0 = input : f32[2] \"x\"\n%1 = param {init=zeros} : f32[2] \"x\"\n"));
  ck_assert_ptr_nonnull(strstr(tu_errors(ctx), "verify: two leaves are named 'x'"));
  tu_ctx_free(ctx);
  ctx = tu_ctx();
  ck_assert_ptr_null(read_text(ctx, H X0 "output \"y\" = %0\noutput \"y\" = %0\n"));
  ck_assert_ptr_nonnull(strstr(tu_errors(ctx), "verify: two outputs are named 'y'"));
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_node_limit) {
  tg_ctx *ctx = tu_ctx();
  ctx->node_limit = 2;
  tg_graph *g = read_text(ctx, H X0 "%1 = neg %0 : f32[4, 3]\n%2 = neg %1 : f32[4, 3]\n");
  ck_assert_ptr_null(g);
  ck_assert_ptr_nonnull(
      strstr(tu_errors(ctx), "t.tgir:4:1: error: the graph has more than 2 nodes"));
  tu_ctx_free(ctx);
}
END_TEST

/* Reads text from an exactly-sized buffer (no NUL after it, so a scan past
 * the end is an ASan error) with diagnostics off; returns whether it read. */
static bool read_raw(const char *text, size_t len) {
  char *buf = malloc(len ? len : 1);
  memcpy(buf, text, len);
  tg_source src = {NULL, "raw.tgir", buf, len};
  tg_ctx *ctx = tg_ctx_new(NULL);
  jmp_buf jb;
  ctx->bail = &jb;
  /* 0: reading the text, 1: reading its reprint, 2: done; volatile because
   * it changes between setjmp and a possible longjmp. */
  volatile int stage = 0;
  char *volatile a = NULL;
  if (setjmp(jb) == 0) {
    tg_graph *g = tg_read_ir(ctx, &src);
    /* Whatever the reader accepts must verify and round-trip. */
    ck_assert(tg_verify(ctx, g));
    a = tu_print_ir(g);
    tg_graph_free(g);
    stage = 1;
    tg_source src2 = {NULL, "raw2.tgir", a, strlen(a)};
    tg_graph *g2 = tg_read_ir(ctx, &src2);
    char *b = tu_print_ir(g2);
    ck_assert_str_eq(a, b);
    free(b);
    tg_graph_free(g2);
    stage = 2;
  } else {
    ck_assert_msg(stage == 0, "reading the reprint failed: %s\n%s", ctx->message, a);
    ck_assert_msg(ctx->message[0] != 0, "bailed without a message");
  }
  free(a);
  tg_ctx_free(ctx);
  free(buf);
  return stage == 2;
}

/* NUL bytes cannot be stored in a C string name or path: they are
 * refused rather than silently cutting the name short. */
START_TEST(test_nul_bytes) {
  static const char in_name[] = "# tg IR 1\n%0 = input : f32[2] \"a\0b\"\n";
  static const char in_path[] = "# tg IR 1\n%0 = input : f32[2] @ \0a.tg:1:2\n";
  static const char fine[] = "# tg IR 1\n%0 = input : f32[2] \"a\" @ a.tg:1:2\n";
  ck_assert(!read_raw(in_name, sizeof in_name - 1));
  ck_assert(!read_raw(in_path, sizeof in_path - 1));
  ck_assert(read_raw(fine, sizeof fine - 1));
}
END_TEST

START_TEST(test_truncations_and_mutations) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = every_op_graph(ctx);
  char *text = tu_print_ir(g);
  size_t len = strlen(text);
  int accepted = 0;
  for (size_t n = 0; n <= len; n++) accepted += read_raw(text, n);
  /* Every prefix that ends just after a complete line reads. */
  int lines = 0;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  ck_assert_int_ge(accepted, lines);

  static const char interesting[] = "%:,[]{}=\"\\@ 0123456789-x\n\r#azfe.";
  char *m = malloc(len);
  unsigned long seed = 12345;
  for (int iter = 0; iter < 4000; iter++) {
    memcpy(m, text, len);
    int edits = 1 + iter % 3;
    for (int e = 0; e < edits; e++) {
      seed = seed * 6364136223846793005ul + 1442695040888963407ul;
      size_t at = (seed >> 33) % len;
      unsigned r = (unsigned)(seed >> 20);
      m[at] = r & 1 ? interesting[(r >> 1) % (sizeof interesting - 1)] : (char)(r >> 8);
    }
    read_raw(m, len);
  }
  free(m);
  free(text);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* ---- Graphviz and statistics ------------------------------------------------ */

static char *capture(void (*fn)(FILE *, const tg_graph *), const tg_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fn(f, g);
  fclose(f);
  return buf;
}

START_TEST(test_dot) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = every_op_graph(ctx);
  char *dot = capture(tg_print_dot, g);
  ck_assert_ptr_nonnull(strstr(dot, "digraph tg {\n"));
  ck_assert_ptr_nonnull(strstr(dot, "rankdir=TB"));
  ck_assert_ptr_nonnull(
      strstr(dot, "n1 [label=\"param\\nwte.weight\\nf32[vocab=16, C=8]\", shape=ellipse"));
  ck_assert_ptr_nonnull(
      strstr(dot, "n0 [label=\"input\\nidx\\ni32[B=2, T=4]\", shape=parallelogram"));
  ck_assert_ptr_nonnull(strstr(dot, "we\\\"ird\\\\name?"));
  ck_assert_ptr_nonnull(strstr(dot, "n1 -> n4;\n  n0 -> n4;\n"));
  ck_assert_ptr_nonnull(strstr(dot, "out0 [label=\"loss\", shape=doubleoctagon"));
  ck_assert_ptr_nonnull(strstr(dot, "out2 [label=\"mask \\\"fill\\\"\""));
  ck_assert_str_eq(dot + strlen(dot) - 2, "}\n");
  /* Deterministic: a second dump is identical. */
  char *again = capture(tg_print_dot, g);
  ck_assert_str_eq(dot, again);
  free(dot);
  free(again);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_stats_counts) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tg_graph_new(ctx->arena);
  g->source = "models/tiny.tg";
  tg_graph_set_config(g, "vocab", 50257);
  tg_graph_set_config(g, "n_embd", 768);
  tg_graph_set_config(g, "lr", 0.5);
  tg_node *idx = add(g, leaf(g, TG_OP_input, ty(TG_I32, 1, DIMS({4, "T"})), "idx"));
  tg_node *wte =
      leaf(g, TG_OP_param, ty(TG_F32, 2, DIMS({50257, "vocab"}, {768, "n_embd"})), "wte");
  add(g, wte);
  tg_node *gn = leaf(g, TG_OP_param, ty(TG_F32, 1, DIMS({768, "n_embd"})), "g");
  gn->init.kind = TG_INIT_ONES;
  add(g, gn);
  tg_node *x = bin(g, TG_OP_gather, wte, idx);
  x = bin(g, TG_OP_mul, x, gn);
  x = bin(g, TG_OP_mul, x, gn);
  x = bin(g, TG_OP_add, x, gn);
  tg_node *s = node(g, TG_OP_sum, 1, x, NULL, NULL);
  s->axes = 3;
  add(g, s);
  tg_graph_add_output(g, "loss", s);

  tg_stats st;
  tg_graph_stats(g, &st);
  ck_assert_int_eq(st.n_params, 2);
  ck_assert_int_eq(st.param_elems, 50257 * 768 + 768);
  ck_assert_int_eq(st.param_bytes, (50257 * 768 + 768) * 4);
  ck_assert_int_eq(st.n_nodes, 8);
  ck_assert_int_eq(st.by_kind[TG_KIND_LEAF], 3);
  ck_assert_int_eq(st.by_kind[TG_KIND_ELEMENTWISE], 3);
  ck_assert_int_eq(st.by_kind[TG_KIND_REDUCTION], 1);
  ck_assert_int_eq(st.by_kind[TG_KIND_MOVEMENT], 1);
  ck_assert_int_eq(st.by_kind[TG_KIND_MATMUL], 0);
  ck_assert_int_eq(st.by_op[TG_OP_mul], 2);
  ck_assert_int_eq(st.by_op[TG_OP_param], 2);

  char *out = capture(tg_print_stats, g);
  ck_assert_str_eq(out,
                   "model    models/tiny.tg\n"
                   "config   vocab=50257 n_embd=768 lr=0.5\n"
                   "params   38,598,144 in 2 tensors (147.2 MiB at f32)\n"
                   "nodes    8: 3 leaf, 3 elementwise, 1 reduction, 1 movement\n"
                   "ops      param 2, mul 2, input 1, add 1, sum 1, gather 1\n"
                   "outputs  loss f32[1, 1]\n");
  free(out);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_stats_wraps) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = every_op_graph(ctx);
  char *out = capture(tg_print_stats, g);
  for (int op = 0; op < TG_NOPS; op++) {
    char want[64];
    snprintf(want, sizeof want, " %s ", tg_ops[op].name);
    ck_assert_msg(strstr(out, want), "op %s missing from:\n%s", tg_ops[op].name, out);
  }
  int lines = 0;
  for (char *p = out, *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++)
    ck_assert_msg(nl - p <= 80, "line longer than 80 columns: %.*s", (int)(nl - p), p);
  ck_assert_int_ge(lines, 7); /* the ops line had to wrap */
  ck_assert_ptr_nonnull(strstr(out, "lr=0.0003 eps=-1e-300"));
  ck_assert_ptr_nonnull(strstr(out, "(576 bytes at f32)"));
  free(out);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ir_text");
  TCase *tc = tcase_create("text");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_golden_format);
  tcase_add_test(tc, test_round_trip_every_op);
  tcase_add_test(tc, test_read_lenient_layout);
  tcase_add_loop_test(tc, test_read_errors, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
  tcase_add_test(tc, test_node_limit);
  tcase_add_test(tc, test_duplicate_names);
  tcase_add_test(tc, test_nul_bytes);
  tcase_add_test(tc, test_truncations_and_mutations);
  tcase_add_test(tc, test_dot);
  tcase_add_test(tc, test_stats_counts);
  tcase_add_test(tc, test_stats_wraps);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(suite()); }
