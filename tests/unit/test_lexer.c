/* test_lexer.c: tokens, values and locations from the Flex scanner. */
#include <math.h>

#include "parse_state.h"
#include "parser.h"
#include "lexer.h"
#include "testutil.h"

typedef struct tok {
  int kind;
  double num;
  const char *str;
  int line, col;
} tok;

/* Scans text into at most max tokens (the last is 0, end of input, or
 * TG_YYUNDEF after an error); returns how many. */
static int scan(tg_ctx *ctx, const char *text, tok *out, int max) {
  tg_parse_state ps = {.ctx = ctx};
  ps.src = tg_source_add(ctx, "t.tg", text, strlen(text));
  yyscan_t sc;
  ck_assert_int_eq(tg_yylex_init_extra(&ps, &sc), 0);
  YY_BUFFER_STATE buf = tg_yy_scan_bytes(ps.src->text, (int)ps.src->len, sc);
  TG_YYLTYPE loc = {1, 1, 1, 1};
  int n = 0;
  while (n < max) {
    TG_YYSTYPE val = {0};
    int k = tg_yylex(&val, &loc, sc);
    out[n] = (tok){k, 0, NULL, loc.first_line, loc.first_column};
    if (k == NUMBER) out[n].num = val.num;
    if (k == IDENT || k == STRING) out[n].str = val.str;
    n++;
    if (k == 0 || k == TG_YYUNDEF) break;
  }
  tg_yy_delete_buffer(buf, sc);
  tg_yylex_destroy(sc);
  return n;
}

START_TEST(test_config_tokens) {
  tg_ctx *ctx = tu_ctx();
  tok t[16];
  int n = scan(ctx, "config { n_layer = 12 }", t, 16);
  int want[] = {CONFIG, '{', IDENT, '=', NUMBER, '}', 0};
  ck_assert_int_eq(n, 7);
  for (int i = 0; i < n; i++) ck_assert_int_eq(t[i].kind, want[i]);
  ck_assert_str_eq(t[2].str, "n_layer");
  ck_assert(t[4].num == 12.0);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_numbers_and_ranges) {
  tg_ctx *ctx = tu_ctx();
  tok t[16];
  int n = scan(ctx, "1e-5 0.044715 0..n_layer 3", t, 16);
  ck_assert_int_eq(n, 7);
  ck_assert_int_eq(t[0].kind, NUMBER);
  ck_assert(t[0].num == 1e-5);
  ck_assert(t[1].num == 0.044715);
  /* "0..n" is a range, not the number "0." followed by ".n" */
  ck_assert_int_eq(t[2].kind, NUMBER);
  ck_assert(t[2].num == 0.0);
  ck_assert_int_eq(t[3].kind, DOTDOT);
  ck_assert_int_eq(t[4].kind, IDENT);
  ck_assert(t[5].num == 3.0);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_operators) {
  tg_ctx *ctx = tu_ctx();
  tok t[20];
  int n = scan(ctx, "== != <= >= < > ... .. . @ * / + -", t, 20);
  int want[] = {EQ, NE, LE, GE, '<', '>', ELLIPSIS, DOTDOT, '.', '@', '*', '/', '+', '-', 0};
  ck_assert_int_eq(n, 15);
  for (int i = 0; i < n; i++) ck_assert_int_eq(t[i].kind, want[i]);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_keywords_are_whole_words) {
  tg_ctx *ctx = tu_ctx();
  tok t[8];
  int n = scan(ctx, "for format in input_ids block", t, 8);
  ck_assert_int_eq(n, 6);
  ck_assert_int_eq(t[0].kind, FOR);
  ck_assert_int_eq(t[1].kind, IDENT);
  ck_assert_str_eq(t[1].str, "format");
  ck_assert_int_eq(t[2].kind, IN);
  ck_assert_int_eq(t[3].kind, IDENT);
  ck_assert_int_eq(t[4].kind, BLOCK);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_locations_skip_comments) {
  tg_ctx *ctx = tu_ctx();
  tok t[8];
  int n = scan(ctx, "# a comment\n  x = 1 # another\n\ty", t, 8);
  ck_assert_int_eq(n, 5);
  ck_assert_int_eq(t[0].line, 2);
  ck_assert_int_eq(t[0].col, 3);
  ck_assert_int_eq(t[2].col, 7);
  ck_assert_int_eq(t[3].line, 3);
  ck_assert_int_eq(t[3].col, 2); /* a tab is one column */
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_string) {
  tg_ctx *ctx = tu_ctx();
  tok t[4];
  int n = scan(ctx, "import \"std.tg\"", t, 4);
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(t[1].kind, STRING);
  ck_assert_str_eq(t[1].str, "std.tg");
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_errors) {
  static const struct {
    const char *text, *message;
    int col;
  } cases[] = {
      {"x = $", "unexpected character '$'", 5},
      {"eps = 1. }", "malformed number '1.'", 7},
      {"v = 2e", "exponent has no digits", 5},
      {"import \"std.tg", "unterminated string", 8},
      {"n = 1e999", "number '1e999' is too large", 5},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tg_ctx *ctx = tu_ctx();
    tok t[8];
    int n = scan(ctx, cases[i].text, t, 8);
    ck_assert_int_eq(t[n - 1].kind, TG_YYUNDEF);
    ck_assert_msg(strstr(ctx->message, cases[i].message), "case %zu: got '%s'", i, ctx->message);
    char where[32];
    snprintf(where, sizeof where, "t.tg:1:%d: error:", cases[i].col);
    ck_assert_msg(strstr(tu_errors(ctx), where), "case %zu: got '%s'", i, tu_errors(ctx));
    tu_ctx_free(ctx);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("lexer");
  TCase *tc = tcase_create("lexer");
  tcase_add_test(tc, test_config_tokens);
  tcase_add_test(tc, test_numbers_and_ranges);
  tcase_add_test(tc, test_operators);
  tcase_add_test(tc, test_keywords_are_whole_words);
  tcase_add_test(tc, test_locations_skip_comments);
  tcase_add_test(tc, test_string);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
