/* test_parser.c: the syntax tree the Bison grammar builds. */
#include "ast.h"
#include "testutil.h"

/* Parses text; returns NULL (with the error in ctx) on a syntax error. */
static tg_ast *parse(tg_ctx *ctx, const char *text) {
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) return NULL;
  const tg_source *src = tg_source_add(ctx, "t.tg", text, strlen(text));
  return tg_parse(ctx, src);
}

/* The expression as a fully parenthesised string, to check precedence. */
static void show(const tg_expr *e, char *buf, size_t n) {
  char l[200], r[200]; /* small enough that "(l op r)" always fits */
  switch (e->kind) {
  case TG_E_NUM: snprintf(buf, n, "%g", e->num); break;
  case TG_E_NAME: snprintf(buf, n, "%s", e->path.segs[e->path.n - 1].name); break;
  case TG_E_UNARY:
    show(e->lhs, l, sizeof l);
    snprintf(buf, n, "(-%s)", l);
    break;
  case TG_E_BINARY:
    show(e->lhs, l, sizeof l);
    show(e->rhs, r, sizeof r);
    if (e->op < 256) snprintf(buf, n, "(%s %c %s)", l, e->op, r);
    else snprintf(buf, n, "(%s %s %s)", l, e->op == TG_TOK_GE ? ">=" : e->op == TG_TOK_EQ ? "==" : "?", r);
    break;
  case TG_E_CALL: snprintf(buf, n, "%s(...)", e->path.segs[e->path.n - 1].name); break;
  case TG_E_LIST: snprintf(buf, n, "[%d]", e->args.n); break;
  }
}

START_TEST(test_precedence) {
  static const struct {
    const char *src, *want;
  } cases[] = {
      {"y = a + b * c", "(a + (b * c))"},
      {"y = a * b @ c", "((a * b) @ c)"},
      {"y = a @ b + c", "((a @ b) + c)"},
      {"y = -a * b", "((-a) * b)"},
      {"y = a - b - c", "((a - b) - c)"},
      {"y = a + b >= c * d", "((a + b) >= (c * d))"},
      {"y = (a + b) * c", "((a + b) * c)"},
      {"y = 0.5 * x == 1", "((0.5 * x) == 1)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tg_ctx *ctx = tu_ctx();
    tg_ast *ast = parse(ctx, cases[i].src);
    ck_assert_ptr_nonnull(ast);
    ck_assert_int_eq(ast->items.n, 1);
    char buf[512];
    show(ast->items.items[0]->value, buf, sizeof buf);
    ck_assert_str_eq(buf, cases[i].want);
    tu_ctx_free(ctx);
  }
}
END_TEST

START_TEST(test_statements_need_no_separators) {
  tg_ctx *ctx = tu_ctx();
  tg_ast *ast = parse(ctx, "config { n_layer = 12  n_head = 12 } x = 1 y = x");
  ck_assert_ptr_nonnull(ast);
  ck_assert_int_eq(ast->items.n, 3);
  const tg_stmt *c = ast->items.items[0];
  ck_assert_int_eq(c->kind, TG_S_CONFIG);
  ck_assert_int_eq(c->body.n, 2);
  ck_assert_str_eq(c->body.items[1]->names[0], "n_head");
  ck_assert_int_eq(ast->items.items[2]->kind, TG_S_ASSIGN);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_scoped_calls_and_paths) {
  tg_ctx *ctx = tu_ctx();
  tg_ast *ast = parse(ctx, "x = h[i].layer(x, 2)\ny = x @ transpose(wte.weight)");
  ck_assert_ptr_nonnull(ast);
  const tg_expr *call = ast->items.items[0]->value;
  ck_assert_int_eq(call->kind, TG_E_CALL);
  ck_assert_int_eq(call->path.n, 2);
  ck_assert_str_eq(call->path.segs[0].name, "h");
  ck_assert_ptr_nonnull(call->path.segs[0].index);
  ck_assert_str_eq(call->path.segs[1].name, "layer");
  ck_assert_int_eq(call->args.n, 2);
  /* the call's location is its name's, where errors about it point */
  ck_assert_int_eq(call->loc.col, 10);
  const tg_expr *t = ast->items.items[1]->value->rhs;
  ck_assert_int_eq(t->kind, TG_E_CALL);
  const tg_expr *w = t->args.items[0];
  ck_assert_int_eq(w->kind, TG_E_NAME);
  ck_assert_int_eq(w->path.n, 2);
  ck_assert_str_eq(w->path.segs[1].name, "weight");
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_block_with_patterns) {
  tg_ctx *ctx = tu_ctx();
  tg_ast *ast = parse(ctx,
                      "block ln(x: f32[..., C], n, y: i32[B, T]) {\n"
                      "  param weight: [C] = ones\n"
                      "  q, k, v = split(x, -1, 3)\n"
                      "  for i in 0 .. n { x = x + 1 }\n"
                      "  return x\n"
                      "}\n");
  ck_assert_ptr_nonnull(ast);
  const tg_stmt *b = ast->items.items[0];
  ck_assert_int_eq(b->kind, TG_S_BLOCK);
  ck_assert_str_eq(b->names[0], "ln");
  ck_assert_int_eq(b->n_args, 3);
  ck_assert(b->args[0].type->any_prefix);
  ck_assert_int_eq(b->args[0].type->dims.n, 1);
  ck_assert_ptr_null(b->args[1].type);
  ck_assert_str_eq(b->args[2].type->dtype, "i32");
  ck_assert_int_eq(b->args[2].type->dims.n, 2);
  ck_assert_int_eq(b->body.n, 4);
  ck_assert_int_eq(b->body.items[0]->kind, TG_S_PARAM);
  ck_assert_int_eq(b->body.items[1]->n_names, 3);
  ck_assert_str_eq(b->body.items[1]->names[2], "v");
  ck_assert_int_eq(b->body.items[2]->kind, TG_S_FOR);
  ck_assert_int_eq(b->body.items[3]->kind, TG_S_RETURN);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_declarations) {
  tg_ctx *ctx = tu_ctx();
  tg_ast *ast = parse(ctx,
                      "import \"std.tg\"\n"
                      "input idx: i32[B, T]\n"
                      "param c_attn.weight: bf16[C, 3 * C] = normal(0.02 / sqrt(2 * n))\n"
                      "output loss = f(idx)\n");
  ck_assert_ptr_nonnull(ast);
  ck_assert_int_eq(ast->items.n, 4);
  ck_assert_str_eq(ast->items.items[0]->file, "std.tg");
  const tg_stmt *in = ast->items.items[1];
  ck_assert_int_eq(in->kind, TG_S_INPUT);
  ck_assert_str_eq(in->dtype, "i32");
  ck_assert_int_eq(in->shape.n, 2);
  const tg_stmt *p = ast->items.items[2];
  ck_assert_int_eq(p->kind, TG_S_PARAM);
  ck_assert_int_eq(p->path.n, 2);
  ck_assert_str_eq(p->dtype, "bf16");
  ck_assert_int_eq(p->value->kind, TG_E_CALL);
  ck_assert_int_eq(ast->items.items[3]->kind, TG_S_OUTPUT);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_syntax_errors) {
  static const struct {
    const char *src, *where, *what;
  } cases[] = {
      {"y = a +\n", "t.tg:1:8:", "unexpected end of file"},
      {"y = (a + b\nz = 1", "t.tg:2:1:", "unexpected identifier"},
      {"y = a < b < c", "t.tg:1:11:", "unexpected '<'"},
      {"block f(x) { return x", "t.tg:1:21:", "unexpected end of file"},
      {"param w [4] = zeros", "t.tg:1:13:", "expecting ':'"},
      {"input for: f32[B]", "t.tg:1:7:", "unexpected keyword 'for'"},
      {"x = 1 +* 2", "t.tg:1:8:", "unexpected '*'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tg_ctx *ctx = tu_ctx();
    ck_assert_ptr_null(parse(ctx, cases[i].src));
    const char *err = tu_errors(ctx);
    ck_assert_msg(strstr(err, cases[i].where) && strstr(err, cases[i].what), "case %zu: got '%s'",
                  i, err);
    ck_assert_int_eq(ctx->nerrors, 1);
    tu_ctx_free(ctx);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("parser");
  TCase *tc = tcase_create("parser");
  tcase_add_test(tc, test_precedence);
  tcase_add_test(tc, test_statements_need_no_separators);
  tcase_add_test(tc, test_scoped_calls_and_paths);
  tcase_add_test(tc, test_block_with_patterns);
  tcase_add_test(tc, test_declarations);
  tcase_add_test(tc, test_syntax_errors);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
