/* test_tokenizer.c: the char and GPT-2 tokenizers against the reference
 * figures of ../shared/data/README.md and an independent Python encoder.
 *
 * The data lives outside the repository: $TG_DATA, or ../shared/data beside
 * the source tree. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer.h"
#include "utf8.h"

static char why[1024];

static tg_tokenizer *gpt2(void) {
  tg_tokenizer *t = tg_tok_gpt2_load(tu_data_path("gpt2/encoder.json"), tu_data_path("gpt2/vocab.bpe"),
                                     why, sizeof why);
  ck_assert_msg(t, "%s", why);
  return t;
}

static void encode(tg_tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *m) {
  ck_assert_msg(tg_tok_encode(t, s, n, ids, m, why, sizeof why), "%s", why);
}

/* Asserts that ids decode to exactly s[0 .. n). */
static void assert_decodes_to(const tg_tokenizer *t, const int32_t *ids, size_t m, const char *s,
                              size_t n) {
  char *back;
  size_t len;
  ck_assert_msg(tg_tok_decode(t, ids, m, &back, &len, why, sizeof why), "%s", why);
  ck_assert_uint_eq(len, n);
  ck_assert_msg(!memcmp(back, s, n), "decoded text differs");
  ck_assert_int_eq(back[len], 0);
  free(back);
}

/* nanoGPT's split: the byte where the int(n * 0.9)-th character starts. */
static size_t split_at(const char *s, size_t size) {
  size_t n = 0, k, seen = 0, i = 0;
  for (i = 0; i < size; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
  k = (size_t)((double)n * 0.9);
  for (i = 0; i < size; i++)
    if (((unsigned char)s[i] & 0xC0) != 0x80 && seen++ == k) break;
  return i;
}

/* ---- char ------------------------------------------------------------------ */

START_TEST(test_char_shakespeare) {
  size_t size;
  const char *path = tu_data_path("tinyshakespeare/input.txt");
  char *text = tu_slurp(path, &size);
  tg_tokenizer *t = tg_tok_char_from_text(path, text, size, why, sizeof why);
  ck_assert_msg(t, "%s", why);
  ck_assert_int_eq(tg_tok_kind_of(t), TG_TOK_CHAR);
  ck_assert_int_eq(tg_tok_vocab_size(t), 65);
  size_t len;
  ck_assert_mem_eq(tg_tok_piece(t, 0, &len), "\n", 1);
  ck_assert_mem_eq(tg_tok_piece(t, 64, &len), "z", 1);
  ck_assert_ptr_null(tg_tok_piece(t, 65, &len));

  /* nanoGPT's own example (Karpathy's "Let's build GPT"). */
  int32_t *ids;
  size_t m;
  encode(t, "hii there", 9, &ids, &m);
  const int32_t want[] = {46, 47, 47, 1, 58, 46, 43, 56, 43};
  ck_assert_uint_eq(m, 9);
  ck_assert_mem_eq(ids, want, sizeof want);
  free(ids);

  size_t cut = split_at(text, size);
  encode(t, text, cut, &ids, &m);
  ck_assert_uint_eq(m, 1003854);
  free(ids);
  encode(t, text + cut, size - cut, &ids, &m);
  ck_assert_uint_eq(m, 111540);
  free(ids);
  encode(t, text, size, &ids, &m);
  ck_assert_uint_eq(m, 1115394);
  assert_decodes_to(t, ids, m, text, size);
  free(ids);
  tg_tok_free(t);
  free(text);
}
END_TEST

START_TEST(test_char_multibyte) {
  const char text[] = "b\xc3\xa9" "a\xe4\xb8\xad\xf0\x9f\x98\x80" "a"; /* b é a 中 😀 a */
  tg_tokenizer *t = tg_tok_char_from_text("mem", text, sizeof text - 1, why, sizeof why);
  ck_assert_msg(t, "%s", why);
  ck_assert_int_eq(tg_tok_vocab_size(t), 5); /* a b é 中 😀, by code point */
  int32_t *ids;
  size_t m;
  encode(t, text, sizeof text - 1, &ids, &m);
  const int32_t want[] = {1, 2, 0, 3, 4, 0};
  ck_assert_uint_eq(m, 6);
  ck_assert_mem_eq(ids, want, sizeof want);
  assert_decodes_to(t, ids, m, text, sizeof text - 1);
  free(ids);
  tg_tok_free(t);
}
END_TEST

START_TEST(test_char_errors) {
  ck_assert_ptr_null(tg_tok_char_from_text("in.txt", "ab\xc3(", 4, why, sizeof why));
  ck_assert_msg(strstr(why, "in.txt") && strstr(why, "byte offset 2"), "%s", why);

  tg_tokenizer *t = tg_tok_char_from_text("in.txt", "abc", 3, why, sizeof why);
  int32_t *ids = NULL;
  size_t m;
  ck_assert(!tg_tok_encode(t, "ab\xc3\xa9", 4, &ids, &m, why, sizeof why));
  ck_assert_msg(strstr(why, "U+00E9") && strstr(why, "byte offset 2") && strstr(why, "in.txt"),
                "%s", why);
  ck_assert(!tg_tok_encode(t, "a\xff", 2, &ids, &m, why, sizeof why));
  ck_assert_msg(strstr(why, "byte offset 1"), "%s", why);
  const int32_t bad[] = {0, 3};
  char *s;
  size_t n;
  ck_assert(!tg_tok_decode(t, bad, 2, &s, &n, why, sizeof why));
  ck_assert_msg(strstr(why, "token 1 is 3"), "%s", why);
  tg_tok_free(t);

  const char *syms[] = {"a", "c", "b"};
  size_t lens[] = {1, 1, 1};
  ck_assert_ptr_null(tg_tok_char_from_symbols("tok.json", syms, lens, 3, why, sizeof why));
  ck_assert_msg(strstr(why, "tok.json") && strstr(why, "entry 2"), "%s", why);
  const char *two[] = {"a", "bc"};
  size_t twolens[] = {1, 2};
  ck_assert_ptr_null(tg_tok_char_from_symbols("tok.json", two, twolens, 2, why, sizeof why));
  ck_assert_msg(strstr(why, "entry 1 is not exactly one"), "%s", why);
  ck_assert_ptr_null(tg_tok_char_from_symbols("tok.json", two, twolens, 0, why, sizeof why));
}
END_TEST

/* ---- gpt2 ------------------------------------------------------------------ */

START_TEST(test_gpt2_shakespeare) {
  size_t size;
  char *text = tu_slurp(tu_data_path("tinyshakespeare/input.txt"), &size);
  tg_tokenizer *t = gpt2();
  ck_assert_int_eq(tg_tok_kind_of(t), TG_TOK_GPT2);
  ck_assert_int_eq(tg_tok_vocab_size(t), TG_GPT2_VOCAB);
  int32_t *ids;
  size_t m;
  encode(t, text, size, &ids, &m);
  ck_assert_uint_eq(m, 338025);
  const int32_t first[] = {5962, 22307, 25, 198, 8421, 356, 5120, 597, 2252, 11, 3285, 502};
  ck_assert_mem_eq(ids, first, sizeof first);
  assert_decodes_to(t, ids, m, text, size);
  free(ids);
  encode(t, text, size, &ids, &m); /* again, now from the cache */
  ck_assert_uint_eq(m, 338025);
  assert_decodes_to(t, ids, m, text, size);
  free(ids);

  size_t cut = split_at(text, size);
  encode(t, text, cut, &ids, &m);
  ck_assert_uint_eq(m, 301966);
  free(ids);
  encode(t, text + cut, size - cut, &ids, &m);
  ck_assert_uint_eq(m, 36059);
  free(ids);
  tg_tok_free(t);
  free(text);
}
END_TEST

/* Expected ids from an independent reference: OpenAI's gpt-2/src/encoder.py
 * re-typed in Python with the `regex` module (2026.5.9) and run on
 * ../shared/data/gpt2, the input given as bytes decoded with
 * errors="surrogateescape" (so each byte that is not UTF-8 is a character
 * of its own, category Cs) and each chunk encoded back the same way before
 * bytes_to_unicode.  That script reproduces the README's 338,025 tokens. */
typedef struct tricky {
  const char *s;
  size_t len, n;
  int32_t ids[24];
} tricky;

static const tricky cases[] = {
    {"Hello world", 11, 2, {15496, 995}},
    {"I'm sure you'll see they've done it, he'd said; it's John's.", 60, 20,
     {40, 1101, 1654, 345, 1183, 766, 484, 1053, 1760, 340, 11, 339, 1549, 531, 26, 340, 338, 1757,
      338, 13}},
    {"DON'T SHOUT'S 'tis", 18, 9, {41173, 6, 51, 6006, 12425, 6, 50, 705, 48010}},
    {"  multiple   spaces\n\n", 21, 6, {220, 3294, 220, 220, 9029, 628}},
    {"tabs\tand\t\ttabs \t\n", 17, 11, {8658, 82, 197, 392, 197, 197, 8658, 82, 220, 197, 198}},
    {"digits 12345 and 3.14159 and 1,000,000", 38, 15,
     {12894, 896, 17031, 2231, 290, 513, 13, 1415, 19707, 290, 352, 11, 830, 11, 830}},
    {"h\303\251llo w\303\266rld \344\270\255\346\226\207", 20, 10,
     {71, 2634, 18798, 266, 30570, 335, 220, 40792, 23877, 229}},
    {"emoji \360\237\230\200\360\237\221\215\360\237\217\275"
     " and flags \360\237\207\272\360\237\207\270", 37, 17,
     {368, 31370, 30325, 222, 41840, 235, 8582, 237, 121, 290, 9701, 12520, 229, 118, 8582, 229,
      116}},
    {"bad \377\376 bytes \344\270 cut \355\240\200 end\303", 28, 14,
     {14774, 220, 187, 186, 9881, 220, 10310, 2005, 220, 169, 254, 222, 886, 127}},
    {"trailing spaces   ", 18, 6, {9535, 4386, 9029, 220, 220, 220}},
    {"\n\n\nnewlines\r\n", 13, 6, {628, 198, 3605, 6615, 201, 198}},
    {"<|endoftext|>", 13, 7, {27, 91, 437, 1659, 5239, 91, 29}},
    {"unicode spaces:\343\200\200\302\240x\342\200\250y", 25, 11,
     {46903, 1098, 9029, 25, 5099, 222, 1849, 87, 447, 101, 88}},
    {"numbers \302\275 \302\262 \342\205\253 \331\243", 20, 10,
     {77, 17024, 25208, 1587, 110, 2343, 227, 104, 18923, 96}},
    {"e\314\201 combining", 13, 4, {68, 136, 223, 19771}},
    {"", 0, 0, {0}},
    {"\000\034 control", 10, 3, {188, 216, 1630}},
    {"!!!\?\?\?... --- ''quoted''", 24, 8, {10185, 28358, 986, 11420, 10148, 421, 5191, 7061}},
};

START_TEST(test_gpt2_tricky) {
  tg_tokenizer *t = gpt2();
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const tricky *k = &cases[c];
    /* an exact-size copy, so that ASan sees a read past the end */
    char *s = malloc(k->len ? k->len : 1);
    memcpy(s, k->s, k->len);
    int32_t *ids;
    size_t m;
    encode(t, s, k->len, &ids, &m);
    ck_assert_msg(m == k->n && !memcmp(ids, k->ids, m * sizeof *ids),
                  "case %zu (\"%s\"): %zu ids, want %zu, or they differ", c, k->s, m, k->n);
    assert_decodes_to(t, ids, m, s, k->len);
    free(ids);
    free(s);
  }
  tg_tok_free(t);
}
END_TEST

START_TEST(test_gpt2_long_runs) {
  /* Chunks too long for the cache take the merge loop alone. */
  tg_tokenizer *t = gpt2();
  size_t n = 100000;
  char *s = malloc(n);
  memset(s, 'a', n);
  int32_t *ids;
  size_t m;
  encode(t, s, n, &ids, &m);
  ck_assert_uint_lt(m, n / 2);
  assert_decodes_to(t, ids, m, s, n);
  free(ids);
  for (size_t i = 0; i < n; i++) s[i] = (char)(i * 7919 % 251 + 1);
  encode(t, s, n, &ids, &m);
  assert_decodes_to(t, ids, m, s, n);
  free(ids);
  free(s);
  tg_tok_free(t);
}
END_TEST

START_TEST(test_gpt2_endoftext) {
  tg_tokenizer *t = gpt2();
  size_t len;
  const char *p = tg_tok_piece(t, TG_GPT2_EOT, &len);
  ck_assert_uint_eq(len, 13);
  ck_assert_mem_eq(p, "<|endoftext|>", 13);
  int32_t *ids;
  size_t m;
  encode(t, "a<|endoftext|>b", 15, &ids, &m);
  for (size_t i = 0; i < m; i++) ck_assert_int_ne(ids[i], TG_GPT2_EOT);
  free(ids);
  const int32_t two[] = {15496, TG_GPT2_EOT};
  char *s;
  ck_assert(tg_tok_decode(t, two, 2, &s, &len, why, sizeof why));
  ck_assert_str_eq(s, "Hello<|endoftext|>");
  free(s);
  const int32_t bad[] = {TG_GPT2_VOCAB};
  ck_assert(!tg_tok_decode(t, bad, 1, &s, &len, why, sizeof why));
  ck_assert_msg(strstr(why, "encoder.json") && strstr(why, "50257"), "%s", why);
  tg_tok_free(t);
}
END_TEST

/* ---- loading errors ----------------------------------------------------------- */

static char dir[64];

static const char *tmp_file(const char *name, const char *text) {
  static char path[4][128];
  static int k;
  char *p = path[k++ % 4];
  snprintf(p, 128, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  fputs(text, f);
  fclose(f);
  return p;
}

static void bad_gpt2(const char *enc, const char *bpe, const char *msg) {
  tg_tokenizer *t = tg_tok_gpt2_load(enc, bpe, why, sizeof why);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(why, msg), "got '%s', want '%s'", why, msg);
}

START_TEST(test_gpt2_load_errors) {
  strcpy(dir, "/tmp/tg_tok_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *enc = tu_data_path("gpt2/encoder.json"), *bpe = tu_data_path("gpt2/vocab.bpe");
  char want[256];

  snprintf(want, sizeof want, "cannot open %s/none.json", dir);
  char none[128];
  snprintf(none, sizeof none, "%s/none.json", dir);
  bad_gpt2(none, bpe, want);

  const char *e = tmp_file("e1.json", "{\"a\": 0,\n \"b\": 1,}");
  snprintf(want, sizeof want, "%s:2:", e);
  bad_gpt2(e, bpe, want);
  bad_gpt2(tmp_file("e2.json", "{\"a\": 0}"), bpe, "expected an object mapping");

  const char *b = tmp_file("v1.bpe", "\xc4\xa0 t\n");
  snprintf(want, sizeof want, "%s:1: expected '#version", b);
  bad_gpt2(enc, b, want);
  b = tmp_file("v2.bpe", "#version: 0.2\n\xc4\xa0 t\nfoo\n");
  snprintf(want, sizeof want, "%s:3: expected two symbols", b);
  bad_gpt2(enc, b, want);
  b = tmp_file("v3.bpe", "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0 t\n");
  snprintf(want, sizeof want, "%s:3: the same merge twice", b);
  bad_gpt2(enc, b, want);
  b = tmp_file("v4.bpe", "#version: 0.2\n\xc4\x80 \xc4\x81\n"); /* bytes 0 and 1 */
  snprintf(want, sizeof want, "%s:2: the merged symbol is not in", b);
  bad_gpt2(enc, b, want);
  b = tmp_file("v5.bpe", "#version: 0.2\n\xc4\xa0 t");
  bad_gpt2(enc, b, "does not end with a newline");
  b = tmp_file("v6.bpe", "#version: 0.2\n\xe4\xb8\xad t\n");
  bad_gpt2(enc, b, ":2: U+4E2D is not one of the 256");

  /* A tiny but consistent vocabulary loads and merges. */
  static char small[8192];
  size_t at = 0;
  at += (size_t)snprintf(small + at, sizeof small - at, "{");
  for (int c = 0, extra = 0; c < 256; c++) {
    /* bytes_to_unicode: the printable bytes as themselves, the rest from U+0100 */
    bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
    int cp = printable ? c : 0x100 + extra++;
    at += (size_t)snprintf(small + at, sizeof small - at, "\"\\u%04x\": %d, ", cp, c);
  }
  snprintf(small + at, sizeof small - at, "\"ab\": 256, \"abc\": 257}");
  e = tmp_file("small.json", small);
  b = tmp_file("small.bpe", "#version: 0.2\na b\nab c\n");
  tg_tokenizer *t = tg_tok_gpt2_load(e, b, why, sizeof why);
  ck_assert_msg(t, "%s", why);
  int32_t *ids;
  size_t m;
  encode(t, "abcab ab", 8, &ids, &m);
  const int32_t want_ids[] = {257, 256, ' ', 256};
  ck_assert_uint_eq(m, 4);
  ck_assert_mem_eq(ids, want_ids, sizeof want_ids);
  free(ids);
  tg_tok_free(t);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -r %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- UTF-8 and classes ---------------------------------------------------------- */

START_TEST(test_utf8) {
  uint32_t cp;
  ck_assert_int_eq(tg_utf8_decode((const unsigned char *)"\xc3\xa9", 2, &cp), 2);
  ck_assert_uint_eq(cp, 0xE9);
  ck_assert_int_eq(tg_utf8_decode((const unsigned char *)"\xf0\x9f\x98\x80", 4, &cp), 4);
  ck_assert_uint_eq(cp, 0x1F600);
  ck_assert_int_eq(tg_utf8_decode((const unsigned char *)"\xf4\x8f\xbf\xbf", 4, &cp), 4);
  ck_assert_uint_eq(cp, 0x10FFFF);
  const char *bad[] = {"\xc0\xaf", "\xc1\xbf", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xf0\x8f\xbf\xbf",
                       "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\x80", "\xbf", "\xff",
                       "\xe4\xb8", "\xe4\xb8(", "\xc3("};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(!tg_utf8_decode((const unsigned char *)bad[i], strlen(bad[i]), &cp),
                  "bad case %zu accepted", i);
  char out[4];
  const uint32_t cps[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF};
  for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
    int n = tg_utf8_encode(cps[i], out);
    ck_assert_int_eq(tg_utf8_decode((const unsigned char *)out, (size_t)n, &cp), n);
    ck_assert_uint_eq(cp, cps[i]);
  }
  ck_assert_uint_eq(tg_utf8_check("ab\xc3\xa9\xff", 5), 4);
  ck_assert_uint_eq(tg_utf8_check("ab\xc3", 3), 2);
  ck_assert_uint_eq(tg_utf8_check("", 0), 0);
}
END_TEST

START_TEST(test_unicode_classes) {
  ck_assert_int_eq(tg_unicode_class('a'), TG_UNI_LETTER);
  ck_assert_int_eq(tg_unicode_class('Z'), TG_UNI_LETTER);
  ck_assert_int_eq(tg_unicode_class('7'), TG_UNI_NUMBER);
  ck_assert_int_eq(tg_unicode_class(' '), TG_UNI_SPACE);
  ck_assert_int_eq(tg_unicode_class('\t'), TG_UNI_SPACE);
  ck_assert_int_eq(tg_unicode_class('\r'), TG_UNI_SPACE);
  ck_assert_int_eq(tg_unicode_class(0x1C), TG_UNI_OTHER); /* isspace() in Python, not \s */
  ck_assert_int_eq(tg_unicode_class('\''), TG_UNI_OTHER);
  ck_assert_int_eq(tg_unicode_class('_'), TG_UNI_OTHER);
  ck_assert_int_eq(tg_unicode_class(0xA0), TG_UNI_SPACE);
  ck_assert_int_eq(tg_unicode_class(0x3000), TG_UNI_SPACE);
  ck_assert_int_eq(tg_unicode_class(0xE9), TG_UNI_LETTER);
  ck_assert_int_eq(tg_unicode_class(0x4E2D), TG_UNI_LETTER);
  ck_assert_int_eq(tg_unicode_class(0xBD), TG_UNI_NUMBER);   /* ½ */
  ck_assert_int_eq(tg_unicode_class(0x216B), TG_UNI_NUMBER); /* Ⅻ */
  ck_assert_int_eq(tg_unicode_class(0x301), TG_UNI_OTHER);   /* combining acute */
  ck_assert_int_eq(tg_unicode_class(0x1F600), TG_UNI_OTHER);
  ck_assert_int_eq(tg_unicode_class(0x10FFFF), TG_UNI_OTHER);
  ck_assert_int_eq(tg_unicode_class(0x110000), TG_UNI_OTHER);
  ck_assert_str_eq(tg_unicode_version, "15.1.0");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("tokenizer");
  TCase *tc = tcase_create("tokenizer");
  tcase_set_timeout(tc, 60); /* ASan builds run the whole of Tiny Shakespeare */
  tcase_add_test(tc, test_char_shakespeare);
  tcase_add_test(tc, test_char_multibyte);
  tcase_add_test(tc, test_char_errors);
  tcase_add_test(tc, test_gpt2_shakespeare);
  tcase_add_test(tc, test_gpt2_tricky);
  tcase_add_test(tc, test_gpt2_long_runs);
  tcase_add_test(tc, test_gpt2_endoftext);
  tcase_add_test(tc, test_gpt2_load_errors);
  tcase_add_test(tc, test_utf8);
  tcase_add_test(tc, test_unicode_classes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(suite()); }
