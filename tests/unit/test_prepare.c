/* test_prepare.c: token files in llm.c's format, and `tgrun prepare` end
 * to end into a fresh directory, against the reference counts of
 * ../shared/data/README.md. */
#include "testutil.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prepare.h"
#include "tgrun_cli.h"
#include "tokenizer.h"
#include "tokens_file.h"

static char why[1024];
static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_prepare_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* A path in the test's directory, in one of 16 buffers used in turn. */
static const char *in_dir(const char *name) {
  static char buf[16][256];
  static int k;
  char *p = buf[k++ % 16];
  snprintf(p, 256, "%s/%s", dir, name);
  return p;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(p, 1, n, f), n);
  fclose(f);
}

static int count_entries(const char *path) {
  DIR *d = opendir(path);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

/* ---- token files -------------------------------------------------------------- */

START_TEST(test_tokens_round_trip) {
  const int32_t ids[] = {0, 1, 255, 256, 50256, 65535, 7};
  const char *path = in_dir("a.bin");
  ck_assert_msg(tg_tokens_write(path, ids, 7, why, sizeof why), "%s", why);
  size_t size;
  unsigned char *raw = (unsigned char *)tu_slurp(path, &size);
  ck_assert_uint_eq(size, 1024 + 14);
  /* llm.c's header, little-endian: 20240520 = 0x0134D888, version 1, count 7 */
  const unsigned char head[12] = {0x88, 0xD8, 0x34, 0x01, 1, 0, 0, 0, 7, 0, 0, 0};
  ck_assert_mem_eq(raw, head, 12);
  for (int i = 12; i < 1024; i++) ck_assert_int_eq(raw[i], 0);
  ck_assert_int_eq(raw[1024 + 2 * 4], 50256 & 0xFF);
  ck_assert_int_eq(raw[1024 + 2 * 4 + 1], 50256 >> 8);
  free(raw);

  tg_tokens *t = tg_tokens_open(path, 65536, why, sizeof why);
  ck_assert_msg(t, "%s", why);
  ck_assert_uint_eq(t->n, 7);
  for (int i = 0; i < 7; i++) ck_assert_int_eq(t->ids[i], ids[i]);
  tg_tokens_close(t);

  ck_assert_msg(tg_tokens_write(path, NULL, 0, why, sizeof why), "%s", why); /* replaces it */
  t = tg_tokens_open(path, 0, why, sizeof why);
  ck_assert_msg(t, "%s", why);
  ck_assert_uint_eq(t->n, 0);
  tg_tokens_close(t);
  ck_assert_int_eq(count_entries(dir), 1); /* no temporary file left behind */
}
END_TEST

START_TEST(test_tokens_write_refuses) {
  const int32_t big[] = {1, 70000}, neg[] = {-1};
  const char *path = in_dir("b.bin");
  ck_assert(!tg_tokens_write(path, big, 2, why, sizeof why));
  ck_assert_msg(strstr(why, path) && strstr(why, "token 1 is 70000"), "%s", why);
  ck_assert(!tg_tokens_write(path, neg, 1, why, sizeof why));
  ck_assert_msg(strstr(why, "token 0 is -1"), "%s", why);
  ck_assert_int_eq(access(path, F_OK), -1);
  ck_assert(!tg_tokens_write(in_dir("no/such/dir/c.bin"), big, 1, why, sizeof why));
  ck_assert_msg(strstr(why, "cannot create"), "%s", why);
}
END_TEST

/* Writes a token file of n ids 0, 1, ... with the header values given and
 * extra bytes (-k: k bytes cut off the end), then expects tg_tokens_open to
 * refuse it with a message naming the file and containing msg. */
static void bad_file(int32_t magic, int32_t version, int32_t count, int n, long extra,
                     int32_t vocab, const char *msg) {
  size_t size = 1024 + 2 * (size_t)n;
  unsigned char *p = calloc(size + 16, 1);
  const int32_t h[3] = {magic, version, count};
  for (int k = 0; k < 3; k++)
    for (int b = 0; b < 4; b++) p[4 * k + b] = (unsigned char)((uint32_t)h[k] >> 8 * b);
  for (int i = 0; i < n; i++) p[1024 + 2 * i] = (unsigned char)i;
  const char *path = in_dir("bad.bin");
  write_bytes(path, p, (size_t)((long)size + extra));
  free(p);
  tg_tokens *t = tg_tokens_open(path, vocab, why, sizeof why);
  ck_assert_msg(!t, "accepted a file that should fail with '%s'", msg);
  ck_assert_msg(strstr(why, path) && strstr(why, msg), "got '%s', want '%s'", why, msg);
}

START_TEST(test_tokens_bad_files) {
  bad_file(20240520, 1, 10, 10, -1, 0, "truncated: the header says 10 tokens (1044 bytes) but "
           "the file has 1043 bytes");
  bad_file(20240520, 1, 10, 10, -1000, 0, "truncated: 44 bytes, less than the 1024-byte header");
  bad_file(20240520, 1, 10, 10, -1044, 0, "truncated: 0 bytes");
  bad_file(12345, 1, 10, 10, 0, 0, "bad magic 12345 (expected 20240520)");
  bad_file(20240801, 7, 10, 10, 0, 0, "Llama 3");
  bad_file(20240520, 2, 10, 10, 0, 0, "unsupported version 2");
  bad_file(20240520, 1, 9, 10, 0, 0, "2 bytes after the 9 tokens the header counts");
  bad_file(20240520, 1, 11, 10, 0, 0, "the header says 11 tokens");
  bad_file(20240520, 1, -3, 10, 0, 0, "negative");
  bad_file(20240520, 1, 10, 10, 0, 9, "token 9 is 9, not below the vocabulary size 9");
  tg_tokens *t = tg_tokens_open(in_dir("none.bin"), 0, why, sizeof why);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(why, "cannot open") && strstr(why, "none.bin"), "%s", why);
  ck_assert_ptr_null(tg_tokens_open(dir, 0, why, sizeof why));
  ck_assert_msg(strstr(why, "a directory"), "%s", why);
}
END_TEST

/* ---- prepare ------------------------------------------------------------------ */

static int run(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5,
               const char *a6, const char *a7, const char *a8) {
  char *argv[10] = {"prepare"};
  const char *in[8] = {a1, a2, a3, a4, a5, a6, a7, a8};
  int argc = 1;
  for (int i = 0; i < 8 && in[i]; i++) argv[argc++] = (char *)in[i];
  return tgrun_prepare_main(argc, argv);
}

static size_t count_tokens(const char *path, int32_t vocab) {
  tg_tokens *t = tg_tokens_open(path, vocab, why, sizeof why);
  ck_assert_msg(t, "%s", why);
  size_t n = t->n;
  tg_tokens_close(t);
  return n;
}

/* Decodes train.bin then val.bin of dir with its own tokenizer.json and
 * checks that this gives back the input. */
static void assert_round_trip(const char *out, const char *input) {
  tg_tokenizer *tok = tg_prepare_load_tokenizer(out, why, sizeof why);
  ck_assert_msg(tok, "%s", why);
  size_t size;
  char *text = tu_slurp(input, &size);
  size_t at = 0;
  for (int k = 0; k < 2; k++) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", out, k ? "val.bin" : "train.bin");
    tg_tokens *t = tg_tokens_open(p, tg_tok_vocab_size(tok), why, sizeof why);
    ck_assert_msg(t, "%s", why);
    int32_t *ids = malloc((t->n ? t->n : 1) * sizeof *ids);
    for (size_t i = 0; i < t->n; i++) ids[i] = t->ids[i];
    char *s;
    size_t n;
    ck_assert_msg(tg_tok_decode(tok, ids, t->n, &s, &n, why, sizeof why), "%s", why);
    ck_assert_uint_le(at + n, size);
    ck_assert_msg(!memcmp(s, text + at, n), "%s does not decode to its part of the input", p);
    at += n;
    free(s);
    free(ids);
    tg_tokens_close(t);
  }
  ck_assert_uint_eq(at, size);
  free(text);
  tg_tok_free(tok);
}

START_TEST(test_prepare_char) {
  const char *input = tu_data_path("tinyshakespeare/input.txt"), *out = in_dir("sh/char");
  ck_assert_int_eq(run("--tokenizer", "char", "--input", input, "--out", out, NULL, NULL), 0);
  ck_assert_uint_eq(count_tokens(in_dir("sh/char/train.bin"), 65), 1003854);
  ck_assert_uint_eq(count_tokens(in_dir("sh/char/val.bin"), 65), 111540);
  tg_tokenizer *tok = tg_prepare_load_tokenizer(out, why, sizeof why);
  ck_assert_msg(tok, "%s", why);
  ck_assert_int_eq(tg_tok_kind_of(tok), TG_TOK_CHAR);
  ck_assert_int_eq(tg_tok_vocab_size(tok), 65);
  tg_tok_free(tok);
  assert_round_trip(out, input);
}
END_TEST

START_TEST(test_prepare_gpt2) {
  const char *input = tu_data_path("tinyshakespeare/input.txt"), *out = in_dir("gpt2");
  ck_assert_int_eq(run("--tokenizer", "gpt2", "--input", input, "--out", out, "--gpt2-dir",
                       tu_data_path("gpt2")),
                   0);
  ck_assert_uint_eq(count_tokens(in_dir("gpt2/train.bin"), TG_GPT2_VOCAB), 301966);
  ck_assert_uint_eq(count_tokens(in_dir("gpt2/val.bin"), TG_GPT2_VOCAB), 36059);
  size_t size;
  char *js = tu_slurp(in_dir("gpt2/tokenizer.json"), &size);
  ck_assert_msg(strstr(js, "\"kind\": \"gpt2\"") && strstr(js, "\"encoder\": \"/"), "%s", js);
  free(js);
  assert_round_trip(out, input);
}
END_TEST

START_TEST(test_prepare_small) {
  /* 10 characters, 9 distinct, two of them two bytes long; int(10 * 0.7) = 7 */
  const char *input = in_dir("small.txt"), *out = in_dir("small");
  const char text[] = "ab\"\\\n\xc3\xa9\t\x01z\xc3\xa9";
  write_bytes(input, text, sizeof text - 1);
  ck_assert_int_eq(run("--tokenizer", "char", "--input", input, "--out", out, "--val-fraction",
                       "0.3"),
                   0);
  ck_assert_uint_eq(count_tokens(in_dir("small/train.bin"), 9), 7);
  ck_assert_uint_eq(count_tokens(in_dir("small/val.bin"), 9), 3);
  assert_round_trip(out, input); /* the JSON escapes of the vocabulary read back */
  ck_assert_int_eq(run("--tokenizer", "char", "--input", input, "--out", out, "--val-fraction",
                       "0"),
                   0);
  ck_assert_uint_eq(count_tokens(in_dir("small/val.bin"), 9), 0);
}
END_TEST

START_TEST(test_prepare_usage) {
  const char *input = tu_data_path("tinyshakespeare/input.txt"), *out = in_dir("u");
  ck_assert_int_eq(run("--help", NULL, NULL, NULL, NULL, NULL, NULL, NULL), 0);
  ck_assert_int_eq(run(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), 2);
  ck_assert_int_eq(run("--input", input, "--out", out, NULL, NULL, NULL, NULL), 2);
  ck_assert_int_eq(run("--tokenizer", "bpe", "--input", input, "--out", out, NULL, NULL), 2);
  ck_assert_int_eq(run("--tokenizer", "char", "--out", out, NULL, NULL, NULL, NULL), 2);
  ck_assert_int_eq(run("--tokenizer", "char", "--input", input, NULL, NULL, NULL, NULL), 2);
  ck_assert_int_eq(run("--tokenizer", "char", "--input", input, "--out", out, "--val-fraction",
                       "1"),
                   2);
  ck_assert_int_eq(run("--tokenizer", "char", "--input", input, "--out", out, "--val-fraction",
                       "x"),
                   2);
  ck_assert_int_eq(run("--tokenizer", "char", "--input", input, "--out", out, "--bogus", "1"), 2);
  ck_assert_int_eq(run("--tokenizer", "char", "--input", input, "--out", NULL, NULL, NULL), 2);
  ck_assert_int_eq(access(out, F_OK), -1);
}
END_TEST

START_TEST(test_prepare_bad_input) {
  char out[256];
  strcpy(out, in_dir("x")); /* in_dir's buffers are reused */
  ck_assert_int_eq(run("--tokenizer", "char", "--input", in_dir("none.txt"), "--out", out, NULL,
                       NULL),
                   1);
  write_bytes(in_dir("latin1.txt"), "caf\xe9\n", 5);
  ck_assert_int_eq(run("--tokenizer", "gpt2", "--input", in_dir("latin1.txt"), "--out", out, NULL,
                       NULL),
                   1);
  write_bytes(in_dir("empty.txt"), "", 0);
  ck_assert_int_eq(run("--tokenizer", "char", "--input", in_dir("empty.txt"), "--out", out, NULL,
                       NULL),
                   1);
  write_bytes(in_dir("ok.txt"), "hello\n", 6);
  ck_assert_int_eq(run("--tokenizer", "gpt2", "--input", in_dir("ok.txt"), "--out", out,
                       "--gpt2-dir", dir),
                   1);
  write_bytes(in_dir("file"), "", 0);
  ck_assert_int_eq(run("--tokenizer", "char", "--input", in_dir("ok.txt"), "--out",
                       in_dir("file/sub"), NULL, NULL),
                   1);
  ck_assert_int_eq(access(out, F_OK), -1);
}
END_TEST

static void bad_json(const char *text, const char *msg) {
  char *out = strdup(in_dir("j"));
  char cmd[300];
  snprintf(cmd, sizeof cmd, "mkdir -p %s", out);
  ck_assert_int_eq(system(cmd), 0);
  write_bytes(in_dir("j/tokenizer.json"), text, strlen(text));
  ck_assert_ptr_null(tg_prepare_load_tokenizer(out, why, sizeof why));
  ck_assert_msg(strstr(why, "j/tokenizer.json") && strstr(why, msg), "got '%s', want '%s'", why,
                msg);
  free(out);
}

START_TEST(test_load_tokenizer_errors) {
  bad_json("{\"kind\": \"char\"", "byte 15");
  bad_json("{\"kind\": \"bpe\", \"vocab_size\": 3}", "\"kind\": \"char\" or \"gpt2\"");
  bad_json("{\"kind\": \"char\", \"vocab_size\": 0}", "vocab_size");
  bad_json("{\"kind\": \"char\", \"vocab_size\": 2, \"vocab\": [\"a\"]}", "array of vocab_size");
  bad_json("{\"kind\": \"char\", \"vocab_size\": 2, \"vocab\": [\"b\", \"a\"]}", "entry 1");
  bad_json("{\"kind\": \"char\", \"vocab_size\": 1, \"vocab\": [1]}", "other than strings");
  bad_json("{\"kind\": \"gpt2\", \"vocab_size\": 50257}", "\"encoder\" and \"vocab_bpe\"");
  ck_assert_ptr_null(tg_prepare_load_tokenizer(in_dir("nowhere"), why, sizeof why));
  ck_assert_msg(strstr(why, "nowhere/tokenizer.json"), "%s", why);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("prepare");
  TCase *tc = tcase_create("prepare");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60); /* ASan builds tokenize all of Tiny Shakespeare */
  tcase_add_test(tc, test_tokens_round_trip);
  tcase_add_test(tc, test_tokens_write_refuses);
  tcase_add_test(tc, test_tokens_bad_files);
  tcase_add_test(tc, test_prepare_char);
  tcase_add_test(tc, test_prepare_gpt2);
  tcase_add_test(tc, test_prepare_small);
  tcase_add_test(tc, test_prepare_usage);
  tcase_add_test(tc, test_prepare_bad_input);
  tcase_add_test(tc, test_load_tokenizer_errors);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(suite()); }
