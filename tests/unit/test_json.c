/* test_json.c: the strict JSON parser under the safetensors reader, and
 * the string escaping every JSON writer uses (base/json_text.h).
 *
 * The parser sees untrusted headers, so most of these tests are about what
 * it refuses and where it says the problem is: every input is copied into
 * a malloc'ed buffer of exactly its length (no NUL after it), so that
 * AddressSanitizer catches a read one byte too far. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "json_text.h"

static tg_arena *arena;
static tg_json_error err;

static void setup(void) { arena = tg_arena_new(); }
static void teardown(void) { tg_arena_free(arena); }

/* Parses n bytes of text from an exact-size copy. */
static tg_json *parse_n(const char *text, size_t n, const tg_json_opts *opts) {
  char *copy = malloc(n ? n : 1);
  memcpy(copy, text, n);
  tg_json *v = tg_json_parse(arena, copy, n, opts, &err);
  free(copy);
  return v;
}

static tg_json *parse(const char *text) { return parse_n(text, strlen(text), NULL); }

static tg_json *ok(const char *text) {
  tg_json *v = parse(text);
  ck_assert_msg(v, "'%s' failed at %zu: %s", text, err.pos, err.msg);
  return v;
}

/* Asserts that text is refused at byte pos with a message containing msg. */
static void bad(const char *text, size_t pos, const char *msg) {
  tg_json *v = parse(text);
  ck_assert_msg(!v, "'%s' was accepted", text);
  ck_assert_msg(err.pos == pos && strstr(err.msg, msg), "'%s': got '%s' at %zu, want '%s' at %zu",
                text, err.msg, err.pos, msg, pos);
}

START_TEST(test_scalars) {
  ck_assert_int_eq(ok("null")->kind, TG_JSON_NULL);
  ck_assert_int_eq(ok("true")->kind, TG_JSON_TRUE);
  ck_assert_int_eq(ok(" \t\r\nfalse \n")->kind, TG_JSON_FALSE);
  tg_json *v = ok("42");
  ck_assert_int_eq(v->kind, TG_JSON_INT);
  ck_assert_int_eq(v->u.i, 42);
  ck_assert_uint_eq(v->pos, 0);
  ck_assert_uint_eq(v->end, 2);
  v = ok("  -7 ");
  ck_assert_int_eq(v->u.i, -7);
  ck_assert_uint_eq(v->pos, 2);
  ck_assert_uint_eq(v->end, 4);
  v = ok("-0");
  ck_assert_int_eq(v->kind, TG_JSON_INT);
  ck_assert_int_eq(v->u.i, 0);
}
END_TEST

START_TEST(test_int64_edges) {
  tg_json *v = ok("9223372036854775807");
  ck_assert_int_eq(v->kind, TG_JSON_INT);
  ck_assert(v->u.i == INT64_MAX);
  v = ok("-9223372036854775808");
  ck_assert_int_eq(v->kind, TG_JSON_INT);
  ck_assert(v->u.i == INT64_MIN);
  v = ok("9223372036854775808"); /* one too many: still a number, not an int */
  ck_assert_int_eq(v->kind, TG_JSON_REAL);
  ck_assert(v->u.d == 9223372036854775808.0);
  ck_assert_int_eq(ok("-9223372036854775809")->kind, TG_JSON_REAL);
  ck_assert_int_eq(ok("123456789012345678901234567890")->kind, TG_JSON_REAL);
}
END_TEST

START_TEST(test_reals) {
  tg_json *v = ok("1.5");
  ck_assert_int_eq(v->kind, TG_JSON_REAL);
  ck_assert(v->u.d == 1.5);
  ck_assert(ok("-2.5e3")->u.d == -2500.0);
  ck_assert(ok("1E+2")->u.d == 100.0);
  ck_assert(ok("25e-2")->u.d == 0.25);
  ck_assert_int_eq(ok("1.0")->kind, TG_JSON_REAL); /* integral value, but not written as one */
  ck_assert_int_eq(ok("1e2")->kind, TG_JSON_REAL);
  ck_assert(ok("1e-400")->u.d == 0.0); /* underflow is only imprecise */
}
END_TEST

START_TEST(test_bad_numbers) {
  bad("01", 0, "leading zero");
  bad("-01", 0, "leading zero");
  bad("-", 0, "expected a digit");
  bad("-a", 0, "expected a digit");
  bad("1.", 2, "after '.'");
  bad("1.e5", 2, "after '.'");
  bad("1e", 2, "exponent");
  bad("1e+", 3, "exponent");
  bad(".5", 0, "expected a value");
  bad("+1", 0, "expected a value");
  bad("NaN", 0, "expected a value");
  bad("Infinity", 0, "expected a value");
  bad("-Infinity", 0, "expected a digit");
  bad("0x10", 1, "unexpected data");
  bad("1e400", 0, "out of range");
  bad("-1e400", 0, "out of range");
}
END_TEST

START_TEST(test_strings) {
  tg_json *v = ok("\"abc\"");
  ck_assert_int_eq(v->kind, TG_JSON_STRING);
  ck_assert_str_eq(v->u.s, "abc");
  ck_assert_uint_eq(v->n, 3);
  ck_assert_str_eq(ok("\"\"")->u.s, "");
  ck_assert_str_eq(ok("\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"")->u.s, "\" \\ / \b \f \n \r \t");
  ck_assert_str_eq(ok("\"\\u0041\\u00e9\\u20AC\"")->u.s, "A\xc3\xa9\xe2\x82\xac");
  /* U+1F600 as a surrogate pair, and as raw UTF-8 */
  ck_assert_str_eq(ok("\"\\ud83d\\ude00\"")->u.s, "\xf0\x9f\x98\x80");
  ck_assert_str_eq(ok("\"\xf0\x9f\x98\x80 \xc3\xa9\"")->u.s, "\xf0\x9f\x98\x80 \xc3\xa9");
  ck_assert_str_eq(ok("\"\\uDBFF\\uDFFF\"")->u.s, "\xf4\x8f\xbf\xbf"); /* U+10FFFF */
  v = ok("\"a\\u0000b\"");
  ck_assert_uint_eq(v->n, 3);
  ck_assert(memcmp(v->u.s, "a\0b", 4) == 0);
  ck_assert_str_eq(ok("\"\x7f\"")->u.s, "\x7f"); /* DEL is no control character to JSON */
}
END_TEST

START_TEST(test_bad_strings) {
  bad("\"abc", 0, "unterminated");
  bad("\"abc\\\"", 0, "unterminated");
  bad("\"\\", 0, "unterminated");
  bad("\"a\nb\"", 2, "control byte 0x0a");
  bad("\"\x01\"", 1, "control byte 0x01");
  bad("\"\\x\"", 1, "invalid escape");
  bad("\"\\U0041\"", 1, "invalid escape");
  bad("\"\\u12\"", 1, "four hex digits");
  bad("\"\\u12g4\"", 1, "four hex digits");
  bad("\"\\ud83d\"", 1, "without a low one");
  bad("\"\\ud83dx\"", 1, "without a low one");
  bad("\"\\ud83d\\u0041\"", 1, "without a low one");
  bad("\"\\ud83d\\ud83d\"", 1, "without a low one");
  bad("\"\\ude00\"", 1, "lone low surrogate");
  bad("\"\xff\"", 1, "invalid UTF-8 byte 0xff");
  bad("\"a\xc0\x80\"", 2, "invalid UTF-8");         /* overlong NUL */
  bad("\"\xe0\x80\xaf\"", 1, "invalid UTF-8");      /* overlong '/' */
  bad("\"\xed\xa0\x80\"", 1, "invalid UTF-8");      /* encoded surrogate */
  bad("\"\xf4\x90\x80\x80\"", 1, "invalid UTF-8");  /* past U+10FFFF */
  bad("\"\xe2\x82\"", 1, "invalid UTF-8");          /* cut short by the quote */
  bad("\"\x80\"", 1, "invalid UTF-8");              /* a lone continuation byte */
}
END_TEST

START_TEST(test_arrays_and_objects) {
  tg_json *v = ok("[1, \"two\", [3], {}, []]");
  ck_assert_int_eq(v->kind, TG_JSON_ARRAY);
  ck_assert_uint_eq(v->n, 5);
  ck_assert_int_eq(v->u.items[0].u.i, 1);
  ck_assert_str_eq(v->u.items[1].u.s, "two");
  ck_assert_int_eq(v->u.items[2].u.items[0].u.i, 3);
  ck_assert_int_eq(v->u.items[3].kind, TG_JSON_OBJECT);
  ck_assert_uint_eq(v->u.items[3].n, 0);
  ck_assert_uint_eq(v->u.items[4].n, 0);
  ck_assert_uint_eq(v->u.items[2].pos, 11);
  ck_assert_uint_eq(v->u.items[2].end, 14);

  v = ok("{\"z\": 1, \"a\": {\"b\": [true]}, \"m\": null}");
  ck_assert_int_eq(v->kind, TG_JSON_OBJECT);
  ck_assert_uint_eq(v->n, 3);
  /* members keep the order of the text */
  ck_assert_str_eq(v->u.items[0].key, "z");
  ck_assert_str_eq(v->u.items[1].key, "a");
  ck_assert_str_eq(v->u.items[2].key, "m");
  ck_assert_int_eq(tg_json_get(v, "z")->u.i, 1);
  ck_assert_int_eq(tg_json_get(tg_json_get(v, "a"), "b")->u.items[0].kind, TG_JSON_TRUE);
  ck_assert_ptr_null(tg_json_get(v, "q"));
  ck_assert_ptr_null(tg_json_get(v, "zz"));
  ck_assert_ptr_null(tg_json_get(tg_json_get(v, "z"), "z")); /* not an object */
}
END_TEST

START_TEST(test_bad_structure) {
  bad("", 0, "expected a value, found the end of the text");
  bad("   ", 3, "expected a value");
  bad("{\"a\" 1}", 5, "expected ':'");
  bad("{\"a\":1 \"b\":2}", 7, "expected ',' or '}'");
  bad("[1 2]", 3, "expected ',' or ']'");
  bad("[1,]", 3, "expected a value, found ']'");
  bad("{\"a\":1,}", 7, "expected a string key");
  bad("{a:1}", 1, "expected a string key");
  bad("{'a':1}", 1, "expected a string key");
  bad("[1", 2, "expected ',' or ']'");
  bad("{\"a\":1", 6, "expected ',' or '}'");
  bad("{\"a\":", 5, "expected a value");
  bad("[", 1, "expected a value");
  bad("{} x", 3, "unexpected data after the JSON value");
  bad("1 2", 2, "unexpected data");
  bad("{}{}", 2, "unexpected data");
  bad("tru", 0, "expected true");
  bad("nul", 0, "expected null");
  bad("truex", 4, "unexpected data");
  bad("[\x01]", 1, "found byte 0x01");
  bad("\xef\xbb\xbf{}", 0, "found byte 0xef"); /* no byte-order mark */
  bad("\f{}", 0, "found byte 0x0c");           /* form feed is no JSON whitespace */
}
END_TEST

START_TEST(test_not_nul_terminated) {
  /* The parser must stop at len: "123" out of "123456" */
  tg_json *v = parse_n("123456", 3, NULL);
  ck_assert_ptr_nonnull(v);
  ck_assert_int_eq(v->u.i, 123);
  ck_assert_ptr_null(parse_n("\"abc\"", 4, NULL));
  ck_assert_str_eq(err.msg, "unterminated string");
  ck_assert_ptr_null(parse_n("true", 3, NULL));
  ck_assert_ptr_null(parse_n("{}\0", 3, NULL)); /* a NUL is data, not an end */
  ck_assert_uint_eq(err.pos, 2);
}
END_TEST

START_TEST(test_duplicate_keys) {
  bad("{\"a\":1,\"a\":2}", 7, "duplicate key");
  ck_assert_str_eq(err.dup_key, "a");
  ck_assert_int_eq(err.depth, 1);
  bad("{\"x\":{\"b\":1,\"c\":2,\"b\":3}}", 18, "duplicate key");
  ck_assert_str_eq(err.dup_key, "b");
  ck_assert_int_eq(err.depth, 2);
  /* decoded keys are compared: "\u0061" is "a" */
  bad("{\"a\":1,\"\\u0061\":2}", 7, "duplicate key");
  /* NUL inside keys: compared by length, not as C strings */
  ok("{\"a\\u0000b\":1,\"a\\u0000c\":2,\"a\":3,\"ab\":4}");
  bad("{\"a\\u0000b\":1,\"a\\u0000b\":2}", 14, "duplicate key");
  /* the same key in different objects is fine */
  ok("{\"a\":{\"a\":1},\"b\":{\"a\":2}}");
}
END_TEST

/* Many keys, sorted to find a repeat: the first repeat in the text is
 * named, even when another pair sorts first. */
START_TEST(test_duplicate_among_many) {
  enum { N = 2000 };
  char *text = malloc(N * 16 + 64);
  size_t k = (size_t)sprintf(text, "{");
  for (int i = 0; i < N; i++) k += (size_t)sprintf(text + k, "%s\"k%d\":%d", i ? "," : "", i, i);
  strcpy(text + k, "}");
  ck_assert_uint_eq(ok(text)->n, N);
  size_t at = k + 1;
  k += (size_t)sprintf(text + k, ",\"k1500\":0,\"k0\":0}");
  tg_json *v = parse(text);
  ck_assert_ptr_null(v);
  ck_assert_str_eq(err.dup_key, "k1500");
  ck_assert_uint_eq(err.pos, at);
  free(text);
}
END_TEST

static char *nested(int depth) {
  char *s = malloc(2 * (size_t)depth + 1);
  memset(s, '[', (size_t)depth);
  memset(s + depth, ']', (size_t)depth);
  s[2 * depth] = 0;
  return s;
}

START_TEST(test_depth_limit) {
  char *s = nested(64);
  ok(s); /* the default limit */
  free(s);
  s = nested(65);
  bad(s, 64, "nested more than 64 deep");
  free(s);
  tg_json_opts three = {.max_depth = 3};
  ck_assert_ptr_nonnull(parse_n("[[[]]]", 6, &three));
  ck_assert_ptr_null(parse_n("[[[[]]]]", 8, &three));
  ck_assert_ptr_null(parse_n("{\"a\":{\"b\":{\"c\":{}}}}", 20, &three));
  /* A limit past the cap is capped: a million brackets fail cleanly
   * instead of overflowing the stack. */
  s = nested(1000000);
  tg_json_opts huge = {.max_depth = 1 << 30};
  ck_assert_ptr_null(parse_n(s, strlen(s), &huge));
  ck_assert(strstr(err.msg, "nested more than 1000 deep"));
  free(s);
}
END_TEST

START_TEST(test_value_limit) {
  tg_json_opts four = {.max_values = 4};
  ck_assert_ptr_nonnull(parse_n("[1,2,3]", 7, &four)); /* the array and three numbers */
  ck_assert_ptr_null(parse_n("[1,2,3,4]", 9, &four));
  ck_assert_str_eq(err.msg, "more than 4 values");
  ck_assert_uint_eq(err.pos, 7);
  ck_assert_ptr_null(parse_n("{\"a\":[[[1]]]}", 13, &four));
}
END_TEST

START_TEST(test_utf8_check) {
  ck_assert_uint_eq(tg_json_utf8_check("abc", 3), 3);
  ck_assert_uint_eq(tg_json_utf8_check("a\xc3\xa9z", 4), 4);
  ck_assert_uint_eq(tg_json_utf8_check("ab\xc3", 3), 2);
  ck_assert_uint_eq(tg_json_utf8_check("\xed\xbf\xbf", 3), 0);
  ck_assert_uint_eq(tg_json_utf8_check("x\xf8", 2), 1);
  ck_assert_uint_eq(tg_json_utf8_check("", 0), 0);
}
END_TEST

/* The writer's escaping (base/json_text.c), and that the parser reads every
 * byte below 0x80 back from it. */
START_TEST(test_quote) {
  tg_sbuf b = {0};
  const char *mixed = "a\"b\\c\nd\te\x01\x1f\x7f\xc3\xa9";
  tg_json_quote(&b, mixed, strlen(mixed));
  ck_assert_str_eq(tg_sb_text(&b), "\"a\\\"b\\\\c\\nd\\te\\u0001\\u001f\x7f\xc3\xa9\"");
  tg_sb_free(&b);
  char all[128];
  for (int i = 0; i < 128; i++) all[i] = (char)i;
  tg_json_quote(&b, all, sizeof all);
  tg_json *v = ok(tg_sb_text(&b));
  ck_assert_uint_eq(v->n, sizeof all);
  ck_assert(memcmp(v->u.s, all, sizeof all) == 0);
  tg_sb_free(&b);
  /* the FILE form: the same text, NULL as "" */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  tg_json_fquote(f, "x\"\n");
  tg_json_fquote(f, NULL);
  fclose(f);
  ck_assert_str_eq(text, "\"x\\\"\\n\"\"\"");
  free(text);
}
END_TEST

START_TEST(test_kind_names) {
  ck_assert_str_eq(tg_json_kind_name(TG_JSON_INT), "a number");
  ck_assert_str_eq(tg_json_kind_name(TG_JSON_OBJECT), "an object");
  ck_assert_str_eq(tg_json_kind_name(TG_JSON_TRUE), "a boolean");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("json");
  TCase *tc = tcase_create("json");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_scalars);
  tcase_add_test(tc, test_int64_edges);
  tcase_add_test(tc, test_reals);
  tcase_add_test(tc, test_bad_numbers);
  tcase_add_test(tc, test_strings);
  tcase_add_test(tc, test_bad_strings);
  tcase_add_test(tc, test_arrays_and_objects);
  tcase_add_test(tc, test_bad_structure);
  tcase_add_test(tc, test_not_nul_terminated);
  tcase_add_test(tc, test_duplicate_keys);
  tcase_add_test(tc, test_duplicate_among_many);
  tcase_add_test(tc, test_depth_limit);
  tcase_add_test(tc, test_value_limit);
  tcase_add_test(tc, test_utf8_check);
  tcase_add_test(tc, test_quote);
  tcase_add_test(tc, test_kind_names);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(suite()); }
