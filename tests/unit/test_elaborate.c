/* test_elaborate.c: from .tg to IR: gpt2.tg's parameters against Hugging
 * Face's GPT-2 state dict, config overrides, symbols, folding, scoping,
 * and the IR text round trip of a whole model. */
#include <math.h>
#include <stdlib.h>

#include "frontend.h"
#include "testutil.h"

static const char *models_dir(void) { return tu_path("models"); }

/* Compiles a file with -D overrides given as "name=value" strings; returns
 * NULL (errors in ctx) on failure. */
static tg_graph *compile_file(tg_ctx *ctx, const char *path, int n, const char *const *defs) {
  static tg_define d[16];
  static char names[16][64];
  for (int i = 0; i < n; i++) ck_assert(tg_define_parse(defs[i], &d[i], names[i], sizeof names[i]));
  const char *inc[1] = {models_dir()};
  tg_compile_opts opts = {d, n, inc, 1};
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) return NULL;
  return tg_compile_file(ctx, path, &opts);
}

static tg_graph *compile_text(tg_ctx *ctx, const char *text) {
  const char *inc[1] = {models_dir()};
  tg_compile_opts opts = {NULL, 0, inc, 1};
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) return NULL;
  return tg_compile_source(ctx, tg_source_add(ctx, "t.tg", text, strlen(text)), &opts);
}

static const tg_node *param(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
  return NULL;
}

static void assert_shape(const tg_node *n, int rank, int64_t d0, int64_t d1) {
  ck_assert_ptr_nonnull(n);
  ck_assert_int_eq(n->type.rank, rank);
  ck_assert_int_eq(n->type.dim[0].size, d0);
  if (rank > 1) ck_assert_int_eq(n->type.dim[1].size, d1);
}

/* GPT-2's parameter count for a config: embeddings, 12C²+13C per layer
 * (qkv, proj, fc, fc proj with biases, two layernorms), final layernorm. */
static int64_t gpt2_params(int64_t L, int64_t C, int64_t V, int64_t P) {
  return V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C;
}

START_TEST(test_gpt2_matches_hugging_face) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_file(ctx, tu_path("models/gpt2.tg"), 0, NULL);
  ck_assert_msg(g, "%s", tu_errors(ctx));
  tg_stats s;
  tg_graph_stats(g, &s);
  ck_assert_int_eq(s.param_elems, 124439808);
  ck_assert_int_eq(s.param_elems, gpt2_params(12, 768, 50257, 1024));
  ck_assert_int_eq(s.n_params, 2 + 12 * 12 + 2);
  assert_shape(param(g, "wte.weight"), 2, 50257, 768);
  assert_shape(param(g, "wpe.weight"), 2, 1024, 768);
  for (int layer = 0; layer < 12; layer += 11) {
    char name[64];
#define P(suffix) (snprintf(name, sizeof name, "h.%d." suffix, layer), param(g, name))
    assert_shape(P("ln_1.weight"), 1, 768, 0);
    assert_shape(P("ln_1.bias"), 1, 768, 0);
    assert_shape(P("attn.c_attn.weight"), 2, 768, 2304);
    assert_shape(P("attn.c_attn.bias"), 1, 2304, 0);
    assert_shape(P("attn.c_proj.weight"), 2, 768, 768);
    assert_shape(P("attn.c_proj.bias"), 1, 768, 0);
    assert_shape(P("ln_2.weight"), 1, 768, 0);
    assert_shape(P("ln_2.bias"), 1, 768, 0);
    assert_shape(P("mlp.c_fc.weight"), 2, 768, 3072);
    assert_shape(P("mlp.c_fc.bias"), 1, 3072, 0);
    assert_shape(P("mlp.c_proj.weight"), 2, 3072, 768);
    assert_shape(P("mlp.c_proj.bias"), 1, 768, 0);
    /* initialisers as nanoGPT: residual projections scaled by 1/sqrt(2L) */
    ck_assert_int_eq(P("ln_1.weight")->init.kind, TG_INIT_ONES);
    ck_assert_int_eq(P("attn.c_attn.bias")->init.kind, TG_INIT_ZEROS);
    ck_assert_int_eq(P("attn.c_attn.weight")->init.kind, TG_INIT_NORMAL);
    ck_assert(P("attn.c_attn.weight")->init.std == 0.02);
    ck_assert(fabs(P("attn.c_proj.weight")->init.std - 0.02 / sqrt(24)) < 1e-15);
    ck_assert(fabs(P("mlp.c_proj.weight")->init.std - 0.02 / sqrt(24)) < 1e-15);
#undef P
  }
  assert_shape(param(g, "ln_f.weight"), 1, 768, 0);
  assert_shape(param(g, "ln_f.bias"), 1, 768, 0);
  ck_assert_ptr_null(param(g, "lm_head.weight")); /* tied: the head is wte */
  ck_assert_int_eq(g->n_outputs, 1);
  ck_assert_str_eq(g->outputs[0].name, "loss");
  ck_assert_int_eq(g->outputs[0].node->type.rank, 0);
  ck_assert(tg_verify(ctx, g));
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_overrides_and_symbols) {
  tg_ctx *ctx = tu_ctx();
  const char *defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "B=4", "T=32"};
  tg_graph *g = compile_file(ctx, tu_path("models/gpt2.tg"), 5, defs);
  ck_assert_msg(g, "%s", tu_errors(ctx));
  tg_stats s;
  tg_graph_stats(g, &s);
  ck_assert_int_eq(s.param_elems, gpt2_params(2, 64, 50257, 1024));
  double v;
  ck_assert(tg_graph_get_config(g, "T", &v) && v == 32);
  ck_assert(tg_graph_get_config(g, "block_size", &v) && v == 1024);
  /* inputs are [B, T] and carry the symbols; the logits' last dim is vocab */
  const tg_node *idx = g->nodes[0];
  ck_assert_int_eq(idx->op, TG_OP_input);
  ck_assert_str_eq(idx->name, "idx");
  ck_assert_int_eq(idx->type.dim[0].size, 4);
  ck_assert_str_eq(idx->type.dim[0].sym, "B");
  ck_assert_str_eq(idx->type.dim[1].sym, "T");
  ck_assert_str_eq(param(g, "wte.weight")->type.dim[0].sym, "vocab");
  const tg_node *logits = NULL;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->name && !strcmp(g->nodes[i]->name, "logits")) logits = g->nodes[i];
  ck_assert_ptr_nonnull(logits);
  ck_assert_int_eq(logits->op, TG_OP_matmul);
  ck_assert_int_eq(logits->type.dim[2].size, 50257);
  ck_assert_str_eq(logits->type.dim[2].sym, "vocab");
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* Printing, reading back and printing again gives the same bytes. */
START_TEST(test_gpt2_ir_round_trip) {
  tg_ctx *ctx = tu_ctx();
  const char *defs[] = {"n_layer=2"};
  tg_graph *g = compile_file(ctx, tu_path("models/gpt2.tg"), 1, defs);
  ck_assert_msg(g, "%s", tu_errors(ctx));
  char *first = tu_print_ir(g);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("reading back failed: %s", tu_errors(ctx));
  tg_graph *g2 = tg_read_ir(ctx, tg_source_add(ctx, "gpt2.tgir", first, strlen(first)));
  ck_assert(tg_verify(ctx, g2));
  char *second = tu_print_ir(g2);
  ck_assert_int_eq(g2->n_nodes, g->n_nodes);
  ck_assert_str_eq(first, second);
  free(first);
  free(second);
  tg_graph_free(g);
  tg_graph_free(g2);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_folding_and_constants) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_text(ctx,
                             "config { D = 64 }\n"
                             "input x: f32[2, D]\n"
                             "output y = sum(x * (1 / sqrt(D)) + 2 * 3 - inf)\n");
  ck_assert_msg(g, "%s", tu_errors(ctx));
  int consts = 0;
  double vals[4];
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_const && consts < 4) vals[consts++] = g->nodes[i]->value;
  /* numbers fold at compile time: one constant per tensor operation */
  ck_assert_int_eq(consts, 3);
  ck_assert(vals[0] == 0.125);
  ck_assert(vals[1] == 6);
  ck_assert(isinf(vals[2]) && vals[2] > 0);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_split_scopes_and_loops) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_text(ctx,
                             "config { B = 2 }\n"
                             "block lin(x: f32[B, C]) {\n"
                             "  param w: [C, C] = normal(0.5)\n"
                             "  return x @ w\n"
                             "}\n"
                             "input x: f32[B, 12]\n"
                             "a, b, c = split(x, 1, 3)\n"
                             "for i in 1 .. 3 { a = blocks[i].inner.lin(a) }\n"
                             "output y = sum(concat([a, b, c], -1))\n");
  ck_assert_msg(g, "%s", tu_errors(ctx));
  ck_assert_ptr_nonnull(param(g, "blocks.1.inner.w"));
  ck_assert_ptr_nonnull(param(g, "blocks.2.inner.w"));
  ck_assert_ptr_null(param(g, "blocks.0.inner.w"));
  assert_shape(param(g, "blocks.1.inner.w"), 2, 4, 4);
  int starts = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_slice) {
      ck_assert_int_eq(g->nodes[i]->start, 4 * starts);
      ck_assert_int_eq(g->nodes[i]->len, 4);
      starts++;
    }
  ck_assert_int_eq(starts, 3);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_reductions_keep_dims) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_text(ctx,
                             "input x: f32[2, 3, 4]\n"
                             "m = max(x, -1)\n"
                             "s = sum(x, [0, 2])\n"
                             "output y = sum(x - m + s)\n");
  ck_assert_msg(g, "%s", tu_errors(ctx));
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->name && !strcmp(n->name, "m")) {
      ck_assert_int_eq(n->type.rank, 3);
      ck_assert_int_eq(n->type.dim[2].size, 1);
      ck_assert_int_eq(n->axes, 4);
    }
    if (n->name && !strcmp(n->name, "s")) ck_assert_int_eq(n->axes, 5);
  }
  ck_assert_int_eq(g->outputs[0].node->type.rank, 0);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_errors) {
  static const struct {
    const char *src, *where, *what;
  } cases[] = {
      {"input x: f32[8, 64, 768]\nparam w: [512, 64] = zeros\noutput y = sum(x @ w)",
       "t.tg:3:18:", "inner dimensions differ"},
      {"output y = q", "t.tg:1:12:", "unknown name 'q'"},
      {"block f(x) { return f(x) }\ninput x: f32[2]\noutput y = sum(f(x))", "t.tg:1:21:",
       "calls itself"},
      {"import \"std.tg\"\ninput x: f32[2]\noutput y = sum(softmax(x, 1))", "t.tg:3:16:",
       "takes 1 argument"},
      {"input x: f32[n_embd]\noutput y = sum(x)", "t.tg:1:14:", "unknown name 'n_embd'"},
      {"import \"std.tg\"\ninput x: i32[2, 3]\noutput y = sum(ln.layernorm(x))", "t.tg:3:19:",
       "must be f32"},
      {"input x: f32[2]\noutput y = sum(x)\noutput y = sum(x)", "t.tg:3:8:", "declared twice"},
      {"", "t.tg:1:1:", "empty file"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tg_ctx *ctx = tu_ctx();
    ck_assert_ptr_null(compile_text(ctx, cases[i].src));
    const char *err = tu_errors(ctx);
    ck_assert_msg(strstr(err, cases[i].where), "case %zu: got '%s'", i, err);
    ck_assert_msg(strstr(err, cases[i].what), "case %zu: got '%s'", i, err);
    tu_ctx_free(ctx);
  }
}
END_TEST

START_TEST(test_unknown_define_suggests) {
  tg_ctx *ctx = tu_ctx();
  const char *defs[] = {"n_layr=2"};
  ck_assert_ptr_null(compile_file(ctx, tu_path("models/gpt2.tg"), 1, defs));
  ck_assert_ptr_nonnull(strstr(ctx->message, "no config constant named 'n_layr'"));
  ck_assert_ptr_nonnull(strstr(ctx->message, "did you mean 'n_layer'?"));
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_define_parse) {
  tg_define d;
  char name[16];
  ck_assert(tg_define_parse("n_layer=2", &d, name, sizeof name));
  ck_assert_str_eq(d.name, "n_layer");
  ck_assert(d.value == 2);
  ck_assert(tg_define_parse("eps=1e-5", &d, name, sizeof name) && d.value == 1e-5);
  ck_assert(!tg_define_parse("n_layer", &d, name, sizeof name));
  ck_assert(!tg_define_parse("=3", &d, name, sizeof name));
  ck_assert(!tg_define_parse("x=", &d, name, sizeof name));
  ck_assert(!tg_define_parse("x=3z", &d, name, sizeof name));
  ck_assert(!tg_define_parse("1x=3", &d, name, sizeof name));
  ck_assert(!tg_define_parse("x=inf", &d, name, sizeof name));
  ck_assert(!tg_define_parse("a_name_much_too_long_for_the_buffer=1", &d, name, sizeof name));
}
END_TEST

START_TEST(test_limits_stop_runaway_loops) {
  tg_ctx *ctx = tu_ctx();
  ctx->step_limit = 100000;
  tg_graph *g = compile_text(ctx, "input x: f32[2]\nfor i in 0 .. 1000000000 { n = i }\noutput y = sum(x)");
  ck_assert_ptr_null(g);
  ck_assert_ptr_nonnull(strstr(ctx->message, "more than 100000 steps"));
  tu_ctx_free(ctx);
  ctx = tu_ctx();
  ctx->node_limit = 1000;
  g = compile_text(ctx, "input x: f32[2]\nfor i in 0 .. 1000000 { x = x + 1 }\noutput y = sum(x)");
  ck_assert_ptr_null(g);
  ck_assert_ptr_nonnull(strstr(ctx->message, "beyond 1000 nodes"));
  tu_ctx_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("elaborate");
  TCase *tc = tcase_create("elaborate");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_gpt2_matches_hugging_face);
  tcase_add_test(tc, test_overrides_and_symbols);
  tcase_add_test(tc, test_gpt2_ir_round_trip);
  tcase_add_test(tc, test_folding_and_constants);
  tcase_add_test(tc, test_split_scopes_and_loops);
  tcase_add_test(tc, test_reductions_keep_dims);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_unknown_define_suggests);
  tcase_add_test(tc, test_define_parse);
  tcase_add_test(tc, test_limits_stop_runaway_loops);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
