/* test_safetensors.c: the safetensors reader, writer and conversions.
 *
 * Round trips of every dtype (with metadata, a 0-d scalar and a tensor
 * with a zero dim) and of a GPT-2-like set of names; the exact bytes of a
 * tiny file, padding included; every kind of malformed file, each checked
 * for a message that names the file and the tensor (and every prefix of a
 * valid file, which must fail cleanly); the conversions on known values
 * and, for the 16-bit formats, exhaustively; and the atomic writer, which
 * must keep the old file and leave no temporary file when it fails.
 *
 * Files go to a fresh directory under /tmp, removed after each test. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_st_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { tu_remove_tree(dir); }

static const char *in_dir(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 512, "%s/%s", dir, name);
  return p;
}

/* Whether dir holds a file with ".tmp." in its name (a writer's leftover). */
static bool temp_left(const char *d) {
  DIR *dd = opendir(d);
  bool found = false;
  for (struct dirent *e; dd && (e = readdir(dd));) found = found || strstr(e->d_name, ".tmp.");
  if (dd) closedir(dd);
  return found;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)len + 1);
  ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static void spill(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
  fclose(f);
}

/* A file from header JSON and n data bytes (0, 1, 2, ... mod 256). */
static unsigned char *make(const char *json, size_t ndata, size_t *size) {
  size_t h = strlen(json);
  *size = 8 + h + ndata;
  unsigned char *b = malloc(*size);
  for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)h >> (8 * k));
  memcpy(b + 8, json, h);
  for (size_t i = 0; i < ndata; i++) b[8 + h + i] = (unsigned char)i;
  return b;
}

/* Parses bytes as "x.safetensors"; NULL when it bailed. The message is left
 * in *errors (malloc'ed) when errors is not NULL. */
static tg_st_file *try_parse(const void *bytes, size_t size, char **errors) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  tg_st_file *volatile f = NULL;
  if (setjmp(bail) == 0) f = tg_st_parse(ctx, "x.safetensors", bytes, size);
  if (errors) *errors = strdup(tu_errors(ctx));
  tu_ctx_free(ctx);
  return f;
}

/* Asserts that bytes are rejected with a message that starts with want,
 * after "x.safetensors: error: ". */
static void rejects_bytes(const void *bytes, size_t size, const char *want) {
  char *errors;
  tg_st_file *f = try_parse(bytes, size, &errors);
  ck_assert_msg(!f, "accepted, wanted: %s", want);
  char full[1024];
  snprintf(full, sizeof full, "x.safetensors: error: %s", want);
  ck_assert_msg(strstr(errors, full), "got:  %swant: %s", errors, full);
  free(errors);
}

static void rejects(const char *json, size_t ndata, const char *want) {
  size_t size;
  unsigned char *b = make(json, ndata, &size);
  rejects_bytes(b, size, want);
  free(b);
}

static tg_st_file *accepts(const char *json, size_t ndata) {
  size_t size;
  unsigned char *b = make(json, ndata, &size);
  char *errors;
  tg_st_file *f = try_parse(b, size, &errors);
  ck_assert_msg(f, "rejected: %s", errors);
  free(errors);
  free(b);
  return f;
}

static tg_st_file *read_ok(const char *path) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  tg_st_file *volatile f = NULL;
  if (setjmp(bail) == 0) f = tg_st_read(ctx, path);
  ck_assert_msg(f, "%s", tu_errors(ctx));
  tu_ctx_free(ctx);
  return f;
}

static void read_fails(const char *path, const char *want) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  tg_st_file *volatile f = NULL;
  if (setjmp(bail) == 0) f = tg_st_read(ctx, path);
  ck_assert_msg(!f, "read '%s'", path);
  char full[1024];
  snprintf(full, sizeof full, "%s: error: %s", path, want);
  ck_assert_msg(strstr(tu_errors(ctx), full), "got:  %swant: %s", tu_errors(ctx), full);
  tu_ctx_free(ctx);
}

static void write_ok(const char *path, const tg_st_tensor *ts, int n, const tg_st_meta *m, int nm) {
  char why[256] = "";
  ck_assert_msg(tg_st_write(path, ts, n, m, nm, why, sizeof why), "%s", why);
}

static tg_st_tensor tensor(const char *name, tg_dtype dt, int rank, const int64_t *shape,
                           const void *data) {
  tg_st_tensor t = {.name = name, .dtype = dt, .rank = rank, .data = data};
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= (t.shape[d] = shape[d]);
  t.nbytes = (size_t)n * (size_t)tg_dtype_size(dt);
  return t;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static void same_tensor(const tg_st_tensor *a, const tg_st_tensor *b) {
  ck_assert_str_eq(a->name, b->name);
  ck_assert_int_eq(a->dtype, b->dtype);
  ck_assert_int_eq(a->rank, b->rank);
  for (int d = 0; d < a->rank; d++) ck_assert_int_eq(a->shape[d], b->shape[d]);
  ck_assert_uint_eq(a->nbytes, b->nbytes);
  if (a->nbytes) ck_assert(memcmp(a->data, b->data, a->nbytes) == 0);
}

/* ---- round trips -------------------------------------------------------- */

static const float f32s[6] = {1.0f, -2.5f, 65504.0f, 1e-30f, -0.0f, 3.14159f};
static const uint16_t bf16s[4] = {0x3f80, 0xc020, 0x7f80, 0x0001};
static const uint16_t f16s[4] = {0x3c00, 0xc100, 0x7bff, 0x0001};
static const int32_t i32s[3] = {-1, 2147483647, (int32_t)0x80000000u};
static const uint8_t bools[5] = {0, 1, 1, 0, 1};
static const float scalar = 42.0f;

static int every_dtype(tg_st_tensor *ts) {
  int n = 0;
  ts[n++] = tensor("f32", TG_F32, 2, SHAPE(2, 3), f32s);
  ts[n++] = tensor("bf16", TG_BF16, 1, SHAPE(4), bf16s);
  ts[n++] = tensor("f16", TG_F16, 2, SHAPE(2, 2), f16s);
  ts[n++] = tensor("i32", TG_I32, 1, SHAPE(3), i32s);
  ts[n++] = tensor("bool", TG_BOOL, 1, SHAPE(5), bools);
  ts[n++] = tensor("scalar", TG_F32, 0, NULL, &scalar);
  ts[n++] = tensor("empty", TG_F16, 3, SHAPE(4, 0, 2), NULL);
  return n;
}

static const tg_st_meta meta[] = {{"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\"\n"}};

START_TEST(test_round_trip_every_dtype) {
  tg_st_tensor ts[8];
  int n = every_dtype(ts);
  const char *path = in_dir("all.safetensors");
  write_ok(path, ts, n, meta, 2);
  ck_assert(!temp_left(dir));
  tg_st_file *f = read_ok(path);
  ck_assert_str_eq(f->path, path);
  ck_assert_int_eq(f->n_tensors, n);
  for (int i = 0; i < n; i++) {
    same_tensor(&f->tensors[i], &ts[i]); /* and in the order written */
    ck_assert_ptr_eq(tg_st_find(f, ts[i].name), &f->tensors[i]);
  }
  ck_assert_int_eq(f->tensors[5].rank, 0);
  ck_assert_uint_eq(f->tensors[5].nbytes, 4);
  ck_assert_uint_eq(f->tensors[6].nbytes, 0);
  ck_assert_ptr_null(tg_st_find(f, "nope"));
  ck_assert_ptr_null(tg_st_find(f, ""));
  ck_assert_int_eq(f->n_meta, 2);
  ck_assert_str_eq(tg_st_meta_get(f, "format"), "pt");
  ck_assert_str_eq(tg_st_meta_get(f, "note"), meta[1].value);
  ck_assert_ptr_null(tg_st_meta_get(f, "missing"));
  /* the data starts 8-byte aligned in the file */
  uint64_t h;
  memcpy(&h, f->buf, 8);
  ck_assert_uint_eq((8 + h) % 8, 0);
  tg_st_free(f);
}
END_TEST

START_TEST(test_encode_matches_write) {
  tg_st_tensor ts[8];
  int n = every_dtype(ts);
  const char *path = in_dir("all.safetensors");
  write_ok(path, ts, n, meta, 2);
  void *mem;
  size_t size, fsize;
  char why[128];
  ck_assert(tg_st_encode(ts, n, meta, 2, &mem, &size, why, sizeof why));
  unsigned char *file = slurp(path, &fsize);
  ck_assert_uint_eq(size, fsize);
  ck_assert(memcmp(mem, file, size) == 0);
  free(file);
  free(mem);
}
END_TEST

START_TEST(test_no_tensors) {
  const char *path = in_dir("empty.safetensors");
  write_ok(path, NULL, 0, NULL, 0);
  size_t n;
  unsigned char *b = slurp(path, &n);
  ck_assert_uint_eq(n, 16);
  ck_assert(memcmp(b, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0);
  free(b);
  tg_st_file *f = read_ok(path);
  ck_assert_int_eq(f->n_tensors, 0);
  ck_assert_int_eq(f->n_meta, 0);
  ck_assert_ptr_null(tg_st_find(f, "a"));
  tg_st_free(f);
  /* metadata alone */
  write_ok(path, NULL, 0, meta, 1);
  f = read_ok(path);
  ck_assert_int_eq(f->n_tensors, 0);
  ck_assert_str_eq(tg_st_meta_get(f, "format"), "pt");
  tg_st_free(f);
}
END_TEST

/* GPT-2's parameters under Hugging Face's names and layouts: Conv1D
 * weights are [in, out], so c_attn.weight is [C, 3C]. */
START_TEST(test_gpt2_names) {
  enum { V = 16, P = 8, C = 4, L = 2, MAXT = 4 + 12 * L };
  static const char *const block[12] = {
      "ln_1.weight",        "ln_1.bias",          "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias",   "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",    "mlp.c_fc.bias",      "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  static const int64_t shapes[12][2] = {{C}, {C}, {C, 3 * C}, {3 * C}, {C, C}, {C},
                                        {C}, {C}, {C, 4 * C}, {4 * C}, {4 * C, C}, {C}};
  tg_st_tensor ts[MAXT];
  char names[MAXT][64];
  float *data[MAXT];
  int n = 0;
  const char *top[4] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
  const int64_t top_shapes[4][2] = {{V, C}, {P, C}, {C}, {C}};
  for (int k = 0; k < 4; k++) {
    snprintf(names[n], 64, "%s", top[k]);
    ts[n] = tensor(names[n], TG_F32, k < 2 ? 2 : 1, top_shapes[k], NULL);
    n++;
  }
  for (int l = 0; l < L; l++)
    for (int k = 0; k < 12; k++) {
      snprintf(names[n], 64, "h.%d.%s", l, block[k]);
      ts[n] = tensor(names[n], TG_F32, shapes[k][1] ? 2 : 1, shapes[k], NULL);
      n++;
    }
  for (int i = 0; i < n; i++) {
    size_t m = ts[i].nbytes / 4;
    data[i] = malloc(m * 4 + 1);
    for (size_t j = 0; j < m; j++) data[i][j] = (float)i + (float)j / 1024.0f;
    ts[i].data = data[i];
  }
  const char *path = in_dir("model.safetensors");
  write_ok(path, ts, n, NULL, 0);
  tg_st_file *f = read_ok(path);
  ck_assert_int_eq(f->n_tensors, n);
  const tg_st_tensor *t = tg_st_find(f, "h.0.attn.c_attn.weight");
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(t->rank, 2);
  ck_assert_int_eq(t->shape[0], C);
  ck_assert_int_eq(t->shape[1], 3 * C);
  t = tg_st_find(f, "h.1.mlp.c_proj.weight");
  ck_assert_int_eq(t->shape[0], 4 * C);
  ck_assert_int_eq(t->shape[1], C);
  for (int i = 0; i < n; i++) {
    t = tg_st_find(f, names[i]);
    ck_assert_ptr_nonnull(t);
    same_tensor(t, &ts[i]);
    double *v = malloc(t->nbytes / 4 * sizeof *v);
    tg_st_to_f64(t, v);
    ck_assert(v[t->nbytes / 4 - 1] == (double)data[i][t->nbytes / 4 - 1]);
    free(v);
  }
  ck_assert_ptr_null(tg_st_find(f, "h.2.ln_1.weight"));
  ck_assert_ptr_null(tg_st_find(f, "lm_head.weight")); /* tied to wte: not stored */
  tg_st_free(f);
  for (int i = 0; i < n; i++) free(data[i]);
}
END_TEST

/* ---- the exact bytes ---------------------------------------------------- */

START_TEST(test_header_bytes) {
  static const float v[2] = {1.0f, -2.0f};
  tg_st_tensor t = tensor("a", TG_F32, 1, SHAPE(2), v);
  const char *path = in_dir("tiny.safetensors");
  write_ok(path, &t, 1, NULL, 0);
  /* 54 bytes of JSON, 2 spaces of padding: the data starts at 8 + 56 */
  static const char want[] = "\x38\0\0\0\0\0\0\0"
                             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  "
                             "\x00\x00\x80\x3f\x00\x00\x00\xc0";
  size_t n;
  unsigned char *b = slurp(path, &n);
  ck_assert_uint_eq(n, sizeof want - 1);
  ck_assert(memcmp(b, want, n) == 0);
  free(b);

  /* with metadata: it comes first; 85 bytes of JSON and 3 of padding */
  tg_st_meta m = {"format", "pt"};
  write_ok(path, &t, 1, &m, 1);
  static const char want_meta[] =
      "\x58\0\0\0\0\0\0\0"
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   "
      "\x00\x00\x80\x3f\x00\x00\x00\xc0";
  b = slurp(path, &n);
  ck_assert_uint_eq(n, sizeof want_meta - 1);
  ck_assert(memcmp(b, want_meta, n) == 0);
  free(b);
}
END_TEST

START_TEST(test_header_escapes_and_order) {
  static const uint8_t one = 1;
  static const int32_t i2[2] = {7, -7};
  tg_st_tensor ts[3] = {
      tensor("z\"q\\\xc3\xa9", TG_BOOL, 0, NULL, &one),
      tensor("b", TG_I32, 2, SHAPE(1, 2), i2),
      tensor("a", TG_F16, 1, SHAPE(0), NULL),
  };
  void *mem;
  size_t size;
  char why[128];
  ck_assert(tg_st_encode(ts, 3, NULL, 0, &mem, &size, why, sizeof why));
  const char *json = "{\"z\\\"q\\\\\xc3\xa9\":{\"dtype\":\"BOOL\",\"shape\":[],"
                     "\"data_offsets\":[0,1]},"
                     "\"b\":{\"dtype\":\"I32\",\"shape\":[1,2],\"data_offsets\":[1,9]},"
                     "\"a\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[9,9]}}";
  size_t h = strlen(json), padded = (h + 7) / 8 * 8;
  ck_assert_uint_eq(size, 8 + padded + 9);
  ck_assert(memcmp((char *)mem + 8, json, h) == 0);
  for (size_t k = h; k < padded; k++) ck_assert_int_eq(((char *)mem)[8 + k], ' ');
  tg_st_file *f = try_parse(mem, size, NULL);
  ck_assert_ptr_nonnull(f);
  for (int i = 0; i < 3; i++) same_tensor(&f->tensors[i], &ts[i]);
  tg_st_free(f);
  free(mem);
}
END_TEST

/* ---- malformed files ---------------------------------------------------- */

/* A small valid file: every prefix of it must be refused, cleanly and with
 * the right kind of message. */
START_TEST(test_every_prefix) {
  static const float a[3] = {1, 2, 3};
  static const uint16_t b[2] = {0x3c00, 0x4000};
  tg_st_tensor ts[2] = {tensor("a", TG_F32, 1, SHAPE(3), a), tensor("b", TG_F16, 1, SHAPE(2), b)};
  tg_st_meta m = {"k", "v"};
  void *mem;
  size_t size;
  char why[128];
  ck_assert(tg_st_encode(ts, 2, &m, 1, &mem, &size, why, sizeof why));
  uint64_t h;
  memcpy(&h, mem, 8);
  tg_st_file *whole = try_parse(mem, size, NULL);
  ck_assert_ptr_nonnull(whole);
  tg_st_free(whole);
  for (size_t len = 0; len < size; len++) {
    char *errors;
    tg_st_file *f = try_parse(mem, len, &errors);
    ck_assert_msg(!f, "a prefix of %zu bytes was accepted", len);
    ck_assert_msg(!strncmp(errors, "x.safetensors: error: ", 22), "%s", errors);
    const char *want = len < 8                ? "truncated: the file has"
                       : len < 8 + h          ? "truncated: the header says"
                       : len < 8 + h + 12     ? "tensor 'a': data_offsets [0, 12] go past the end"
                                              : "tensor 'b': data_offsets [12, 16] go past the end";
    ck_assert_msg(strstr(errors, want), "prefix %zu: %s", len, errors);
    free(errors);
  }
  free(mem);
}
END_TEST

START_TEST(test_bad_length) {
  rejects_bytes("", 0, "truncated: the file has 0 bytes, less than the 8-byte header length that "
                       "starts a safetensors file");
  rejects_bytes("\x02\0\0", 3, "truncated: the file has 3 bytes");
  rejects_bytes("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10,
                "the header length 18446744073709551615 is over the limit of 100000000 bytes "
                "(is this a safetensors file?)");
  rejects_bytes("\x01\xe1\xf5\x05\0\0\0\0{}", 10, "the header length 100000001 is over the limit");
  rejects_bytes("\x00\x10\0\0\0\0\0\0{}", 10,
                "truncated: the header says 4096 bytes but the file has 2 after the length");
  rejects_bytes("\0\0\0\0\0\0\0\0{}", 10, "the header length is 0; a header holds at least '{}'");
  rejects_bytes("\x01\0\0\0\0\0\0\0{}", 10, "the header length is 1");
  /* a text file is no safetensors file */
  rejects_bytes("# tg model\nparam x: [2]\n", 24, "the header length");
}
END_TEST

START_TEST(test_bad_json) {
  rejects("{\"a\":{\"dtype\" \"F32\"}}", 0, "header is not valid JSON at byte 14: expected ':'");
  rejects("{\"a\":1,}", 0, "header is not valid JSON at byte 7: expected a string key");
  rejects("{} {}", 0, "header is not valid JSON at byte 3: unexpected data after the JSON value");
  rejects("{\"\xff\":1}", 0, "header is not valid JSON at byte 2: invalid UTF-8 byte 0xff");
  rejects_bytes("\x04\0\0\0\0\0\0\0{}\0\0", 12,
                "header is not valid JSON at byte 2: unexpected data");
  rejects("[]", 0, "the header must be a JSON object, not an array");
  rejects("\"x\" ", 0, "the header must be a JSON object, not a string");
  rejects("{\"a\":[[[[[[[[[1]]]]]]]]]}", 0, "header is not valid JSON at byte 12: arrays and objects nested more than 8 deep");
}
END_TEST

START_TEST(test_byte_count) {
  rejects("{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[768,2304],"
          "\"data_offsets\":[0,100]}}",
          100,
          "tensor 'h.0.attn.c_attn.weight': data_offsets [0, 100] hold 100 bytes but F32 [768, "
          "2304] needs 7077888");
  rejects("{\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
          "tensor 's': data_offsets [0, 4] hold 4 bytes but BF16 [] needs 2");
  rejects("{\"z\":{\"dtype\":\"I32\",\"shape\":[3,0],\"data_offsets\":[0,4]}}", 4,
          "tensor 'z': data_offsets [0, 4] hold 4 bytes but I32 [3, 0] needs 0");
}
END_TEST

START_TEST(test_offsets_out_of_range) {
  rejects("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
          "tensor 'w': data_offsets [0, 16] go past the end of the data, which has 8 bytes (is "
          "the file truncated?)");
  rejects("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
          "\"data_offsets\":[9223372036854775803,9223372036854775807]}}",
          8, "tensor 'w': data_offsets [9223372036854775803, 9223372036854775807] go past the end");
  rejects("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 8,
          "tensor 'w': data_offsets [-1, 0] must not be negative");
  rejects("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8,
          "tensor 'w': data_offsets [8, 0] begin after they end");
  rejects("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
          "tensor 'w': data_offsets must be two integers [begin, end], not [0]");
  rejects("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
          "tensor 'w': data_offsets must be two integers [begin, end], not [0,1,2]");
  rejects("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0, 1.0]}}", 1,
          "tensor 'w': data_offsets must be two integers [begin, end], not [0, 1.0]");
  rejects("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":\"0-1\"}}", 1,
          "tensor 'w': data_offsets must be two integers [begin, end], not \"0-1\"");
  rejects("{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],"
          "\"data_offsets\":[0,99999999999999999999]}}",
          1, "tensor 'w': data_offsets must be two integers");
}
END_TEST

START_TEST(test_overlap_and_gaps) {
  rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
          12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]");
  /* found by offsets, whatever the order in the header */
  rejects("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
          12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]");
  rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
          8, "tensor 'c': data_offsets [0, 8] overlap tensor 'a' at [0, 8]");
  /* an empty tensor inside another one */
  rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
          8, "tensor 'e': data_offsets [4, 4] overlap tensor 'a' at [0, 8]");
  rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
          20,
          "tensor 'b': data_offsets [12, 20] leave bytes [8, 12) before it unused (the format "
          "allows no gaps)");
  rejects("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
          "tensor 'b': data_offsets [4, 12] leave bytes [0, 4) before it unused");
  rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
          "the data section has 12 bytes but the tensors end at byte 8 (the format allows no "
          "unused bytes)");
  rejects("{}", 1, "the data section has 1 bytes but the tensors end at byte 0");
  /* out of order in the header but tiling the data: fine */
  tg_st_file *f =
      accepts("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
              "\"e\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[4,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"z\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[8,8]}}",
              8);
  ck_assert_str_eq(f->tensors[0].name, "b");
  ck_assert_str_eq(f->tensors[2].name, "a");
  ck_assert_int_eq(((const unsigned char *)tg_st_find(f, "b")->data)[0], 4);
  tg_st_free(f);
}
END_TEST

START_TEST(test_bad_dtype) {
  rejects("{\"x\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
          "tensor 'x': dtype F64 is not supported (F32, BF16, F16, I32, BOOL)");
  rejects("{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
          "tensor 'x': dtype I64 is not supported");
  rejects("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
          "tensor 'x': dtype U8 is not supported");
  rejects("{\"x\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': dtype f32 is not supported");
  rejects("{\"x\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': dtype F32\\x00 is not supported");
  rejects("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': dtype must be a string, not a number");
}
END_TEST

START_TEST(test_bad_shape) {
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape[0] is -1; dims must be non-negative integers");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2.5],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape[1] is 2.5; dims must be non-negative integers");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape[0] is 1.0; dims must be non-negative integers");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape[0] is \"1\"; dims must be non-negative integers");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape[0] is [1]; dims must be non-negative integers");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape[0] is null; dims must be non-negative integers");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape must be an array of integers, not a number");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape has 9 dims; at most 8 are supported");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[281474976710657],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape[0] is 281474976710657, more than the limit of 2^48");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[16777216,16777217],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape [16777216,16777217] has more than 2^48 elements");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[1073741824,1073741824,0],\"data_offsets\":[0,0]}}",
          0, "tensor 'x': shape [1073741824,1073741824,0] has more than 2^48 elements");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4,
          "tensor 'x': shape[0] is 99999999999999999999; dims must be non-negative integers");
  /* the largest shapes allowed parse, when they hold no bytes */
  tg_st_file *f = accepts(
      "{\"x\":{\"dtype\":\"F32\",\"shape\":[281474976710656,0],\"data_offsets\":[0,0]}}", 0);
  ck_assert_int_eq(f->tensors[0].shape[0], (int64_t)1 << 48);
  ck_assert_uint_eq(f->tensors[0].nbytes, 0);
  tg_st_free(f);
}
END_TEST

START_TEST(test_bad_entries) {
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, "tensor 'x': no data_offsets");
  rejects("{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'x': no dtype");
  rejects("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'x': no shape");
  rejects("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4,
          "tensor 'x': unknown key 'extra' (a tensor has dtype, shape and data_offsets)");
  rejects("{\"x\":[1,2]}", 0,
          "tensor 'x': must be an object with dtype, shape and data_offsets, not an array");
  rejects("{\"x\":\"F32\"}", 0, "tensor 'x': must be an object");
  rejects("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
          "tensor '': a tensor name must not be empty");
  rejects("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
          "tensor 'a': the name contains a NUL byte (\\u0000)");
  /* a name with control characters is refused, and shown escaped */
  rejects("{\"a\\nb\\u001b[31m\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
          "tensor 'a\\x0ab\\x1b[31m': the name contains the control character 0x0a");
}
END_TEST

START_TEST(test_duplicate_names) {
  rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
          8, "tensor 'a' appears twice in the header (the second time at byte 54)");
  rejects("{\"__metadata__\":{},\"__metadata__\":{}}", 0,
          "tensor '__metadata__' appears twice in the header");
}
END_TEST

START_TEST(test_bad_metadata) {
  rejects("{\"__metadata__\":{\"format\":1}}", 0,
          "__metadata__ 'format': the value must be a string, not a number");
  rejects("{\"__metadata__\":{\"a\":\"x\",\"b\":null}}", 0,
          "__metadata__ 'b': the value must be a string, not null");
  rejects("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0,
          "__metadata__ 'a': the value must be a string, not an object");
  rejects("{\"__metadata__\":[\"a\"]}", 0,
          "__metadata__ must be an object of strings, not an array");
  rejects("{\"__metadata__\":{\"a\":\"x\\u0000y\"}}", 0,
          "__metadata__ 'a': a NUL byte (\\u0000) in the key or the value");
  rejects("{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"}}", 0,
          "header is not valid JSON at byte 25: duplicate key 'a'");
  tg_st_file *f = accepts("{\"__metadata__\":{}}", 0);
  ck_assert_int_eq(f->n_meta, 0);
  tg_st_free(f);
}
END_TEST

START_TEST(test_read_errors) {
  read_fails(in_dir("missing.safetensors"), "cannot open: No such file or directory");
  read_fails(dir, "cannot read: it is a directory");
  read_fails("/dev/null", "cannot read: not a regular file");
  const char *fifo = in_dir("fifo");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  read_fails(fifo, "cannot read: not a regular file"); /* without blocking */
  const char *path = in_dir("bad.safetensors");
  spill(path, "\x04\0\0\0\0\0\0\0{}", 10);
  read_fails(path, "truncated: the header says 4 bytes but the file has 2 after the length");
}
END_TEST

/* ---- the writer --------------------------------------------------------- */

static void old_file(const char *path, unsigned char **bytes, size_t *n) {
  static const float v[2] = {7, 8};
  tg_st_tensor t = tensor("old", TG_F32, 1, SHAPE(2), v);
  write_ok(path, &t, 1, NULL, 0);
  *bytes = slurp(path, n);
}

static void unchanged(const char *path, const unsigned char *bytes, size_t n) {
  size_t m;
  unsigned char *now = slurp(path, &m);
  ck_assert_uint_eq(m, n);
  ck_assert(memcmp(now, bytes, n) == 0);
  free(now);
}

/* A write that fails part way (the file size limit stands in for a full
 * disk) keeps the old file and removes its temporary file. */
START_TEST(test_atomic_write_failure) {
  const char *path = in_dir("w.safetensors");
  unsigned char *before;
  size_t n;
  old_file(path, &before, &n);
  enum { BIG = 1 << 16 };
  float *big = calloc(BIG, sizeof *big);
  tg_st_tensor t = tensor("new", TG_F32, 1, SHAPE(BIG), big);
  struct rlimit saved, small;
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
  small = saved;
  small.rlim_cur = 4096;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
  char why[256] = "";
  bool ok = tg_st_write(path, &t, 1, NULL, 0, why, sizeof why);
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  ck_assert(!ok);
  ck_assert_msg(strstr(why, "cannot write '") && strstr(why, ".tmp.") && strstr(why, "File too large"),
                "%s", why);
  unchanged(path, before, n);
  ck_assert(!temp_left(dir));
  /* and the same write with room to spare replaces the file */
  write_ok(path, &t, 1, NULL, 0);
  tg_st_file *f = read_ok(path);
  ck_assert_str_eq(f->tensors[0].name, "new");
  tg_st_free(f);
  ck_assert(!temp_left(dir));
  free(big);
  free(before);
}
END_TEST

/* The rename fails when the target is a directory: nothing may be left. */
START_TEST(test_atomic_rename_failure) {
  const char *target = in_dir("adir");
  ck_assert_int_eq(mkdir(target, 0700), 0);
  spill(in_dir("adir/keep"), "x", 1);
  static const float v = 1;
  tg_st_tensor t = tensor("a", TG_F32, 0, NULL, &v);
  char why[256] = "";
  ck_assert(!tg_st_write(target, &t, 1, NULL, 0, why, sizeof why));
  ck_assert_msg(strstr(why, "cannot rename '"), "%s", why);
  ck_assert(!temp_left(dir));
  struct stat st;
  ck_assert_int_eq(stat(in_dir("adir/keep"), &st), 0);
}
END_TEST

START_TEST(test_write_unwritable_dir) {
  const char *path = in_dir("sub/w.safetensors");
  char sub[512];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  static const float v = 1;
  tg_st_tensor t = tensor("a", TG_F32, 0, NULL, &v);
  char why[256] = "";
  /* no such directory */
  ck_assert(!tg_st_write(path, &t, 1, NULL, 0, why, sizeof why));
  ck_assert_msg(strstr(why, "cannot create '") && strstr(why, "No such file or directory"), "%s",
                why);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  unsigned char *before;
  size_t n;
  old_file(path, &before, &n);
  ck_assert_int_eq(chmod(sub, 0500), 0);
  if (access(sub, W_OK) == 0) {
    /* root writes anyway: the other tests simulate failures instead */
    chmod(sub, 0700);
    free(before);
    return;
  }
  ck_assert(!tg_st_write(path, &t, 1, NULL, 0, why, sizeof why));
  ck_assert_msg(strstr(why, "cannot create '") && strstr(why, "Permission denied"), "%s", why);
  chmod(sub, 0700);
  unchanged(path, before, n);
  ck_assert(!temp_left(sub));
  free(before);
}
END_TEST

static void refused(const tg_st_tensor *ts, int n, const tg_st_meta *m, int nm, const char *want) {
  const char *path = in_dir("refused.safetensors");
  char why[256] = "";
  ck_assert(!tg_st_write(path, ts, n, m, nm, why, sizeof why));
  ck_assert_msg(strstr(why, want), "got '%s', want '%s'", why, want);
  ck_assert_int_eq(access(path, F_OK), -1);
  ck_assert(!temp_left(dir));
}

START_TEST(test_writer_refuses) {
  static const float v[4] = {0};
  tg_st_tensor ts[2] = {tensor("a", TG_F32, 1, SHAPE(2), v), tensor("a", TG_F32, 1, SHAPE(2), v)};
  refused(ts, 2, NULL, 0, "tensor 'a' is given twice");
  ts[1].name = "b";
  ts[1].nbytes = 12;
  refused(ts, 2, NULL, 0, "tensor 'b': nbytes is 12 but F32 [2] needs 8");
  ts[1] = tensor("__metadata__", TG_F32, 1, SHAPE(2), v);
  refused(ts, 2, NULL, 0, "tensor '__metadata__': a name must be non-empty UTF-8");
  ts[1] = tensor("", TG_F32, 1, SHAPE(2), v);
  refused(ts, 2, NULL, 0, "a name must be non-empty UTF-8");
  ts[1] = tensor("bad\xff", TG_F32, 1, SHAPE(2), v);
  refused(ts, 2, NULL, 0, "a name must be non-empty UTF-8");
  ts[1] = tensor("tab\tname", TG_F32, 1, SHAPE(2), v);
  refused(ts, 2, NULL, 0, "the name contains the control character 0x09");
  ts[1] = tensor("b", TG_F32, 1, SHAPE(2), NULL);
  refused(ts, 2, NULL, 0, "tensor 'b': no data");
  ts[1] = tensor("b", TG_F32, 1, SHAPE(2), v);
  ts[1].shape[0] = -2;
  refused(ts, 2, NULL, 0, "tensor 'b': shape[0] = -2 is negative or too large");
  ts[1] = tensor("b", TG_F32, 1, SHAPE(2), v);
  ts[1].rank = 9;
  refused(ts, 2, NULL, 0, "tensor 'b': rank 9");
  ts[1].rank = 1;
  ts[1].dtype = TG_NDTYPES;
  refused(ts, 2, NULL, 0, "tensor 'b': unknown dtype");
  tg_st_meta m[2] = {{"k", "v"}, {"k", "w"}};
  refused(ts, 1, m, 2, "__metadata__ 'k' is given twice");
  m[1] = (tg_st_meta){"j", NULL};
  refused(ts, 1, m, 2, "__metadata__ entry 1: key and value must be UTF-8 strings");
  refused(ts, -1, NULL, 0, "bad arguments");
  char why[64];
  ck_assert(!tg_st_write("", ts, 1, NULL, 0, why, sizeof why));
}
END_TEST

/* ---- conversions -------------------------------------------------------- */

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

START_TEST(test_bf16_known) {
  ck_assert(tg_bf16_to_f32(0x3f80) == 1.0f);
  ck_assert(tg_bf16_to_f32(0xc020) == -2.5f);
  ck_assert(tg_bf16_to_f32(0x7f80) == INFINITY);
  ck_assert(tg_bf16_to_f32(0xff80) == -INFINITY);
  ck_assert(isnan(tg_bf16_to_f32(0x7fc0)));
  ck_assert_uint_eq(tg_f32_to_bf16(1.0f), 0x3f80);
  ck_assert_uint_eq(tg_f32_to_bf16(-2.5f), 0xc020);
  ck_assert_uint_eq(tg_f32_to_bf16(65504.0f), 0x4780); /* 0x477fe000 rounds up to 65536 */
  ck_assert_uint_eq(tg_f32_to_bf16(-0.0f), 0x8000);
  ck_assert_uint_eq(tg_f32_to_bf16(INFINITY), 0x7f80);
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0x00000001)), 0x0000); /* f32 subnormal */
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0x00018000)), 0x0002); /* tie, odd: up */
  /* ties round to even */
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0x3f808000)), 0x3f80);
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0x3f818000)), 0x3f82);
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0x3f808001)), 0x3f81);
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0x3f807fff)), 0x3f80);
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0xbf818000)), 0xbf82);
  /* the largest float rounds to infinity, as RNE says */
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0x7f7f7fff)), 0x7f7f);
  /* NaN stays NaN, even one whose payload is all in the dropped bits */
  ck_assert(isnan(tg_bf16_to_f32(tg_f32_to_bf16(from_bits(0x7f800001)))));
  ck_assert(isnan(tg_bf16_to_f32(tg_f32_to_bf16(from_bits(0xff800001)))));
  ck_assert_uint_eq(tg_f32_to_bf16(from_bits(0xff800001)) & 0x8000, 0x8000);
  ck_assert(isnan(tg_bf16_to_f32(tg_f32_to_bf16(NAN))));
}
END_TEST

/* Check records every assertion it evaluates, which is slow in a loop of
 * 65536: the loops below assert only on a mismatch. */
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                        \
  } while (0)

START_TEST(test_bf16_exhaustive) {
  /* every bf16 survives the trip through f32 */
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = tg_bf16_to_f32((uint16_t)h);
    uint16_t back = tg_f32_to_bf16(f);
    if (isnan(f)) EXPECT(isnan(tg_bf16_to_f32(back)), "NaN %04x came back as %04x", h, back);
    else EXPECT(back == h, "%04x came back as %04x", h, back);
  }
}
END_TEST

START_TEST(test_f16_known) {
  ck_assert(tg_f16_to_f32(0x3c00) == 1.0f);
  ck_assert(tg_f16_to_f32(0xc100) == -2.5f);
  ck_assert(tg_f16_to_f32(0x7bff) == 65504.0f);
  ck_assert(tg_f16_to_f32(0x0001) == 0x1p-24f); /* smallest subnormal */
  ck_assert(tg_f16_to_f32(0x03ff) == 1023 * 0x1p-24f); /* largest subnormal */
  ck_assert(tg_f16_to_f32(0x0400) == 0x1p-14f); /* smallest normal */
  ck_assert(tg_f16_to_f32(0x8001) == -0x1p-24f);
  ck_assert(tg_f16_to_f32(0x7c00) == INFINITY);
  ck_assert(tg_f16_to_f32(0xfc00) == -INFINITY);
  ck_assert(isnan(tg_f16_to_f32(0x7e00)));
  ck_assert(isnan(tg_f16_to_f32(0x7c01)));
  ck_assert_uint_eq(bits(tg_f16_to_f32(0x8000)), 0x80000000u); /* -0 */

  ck_assert_uint_eq(tg_f32_to_f16(1.0f), 0x3c00);
  ck_assert_uint_eq(tg_f32_to_f16(-2.5f), 0xc100);
  ck_assert_uint_eq(tg_f32_to_f16(65504.0f), 0x7bff);
  ck_assert_uint_eq(tg_f32_to_f16(65519.0f), 0x7bff); /* below the midpoint to 65536 */
  ck_assert_uint_eq(tg_f32_to_f16(65520.0f), 0x7c00); /* the midpoint: to even, infinity */
  ck_assert_uint_eq(tg_f32_to_f16(1e6f), 0x7c00);
  ck_assert_uint_eq(tg_f32_to_f16(-1e6f), 0xfc00);
  ck_assert_uint_eq(tg_f32_to_f16(INFINITY), 0x7c00);
  ck_assert_uint_eq(tg_f32_to_f16(-0.0f), 0x8000);
  ck_assert_uint_eq(tg_f32_to_f16(0x1p-24f), 0x0001);
  ck_assert_uint_eq(tg_f32_to_f16(0x1p-14f), 0x0400);
  ck_assert_uint_eq(tg_f32_to_f16(1023 * 0x1p-24f), 0x03ff);
  /* subnormal rounding, ties to even */
  ck_assert_uint_eq(tg_f32_to_f16(0x1p-25f), 0x0000);              /* tie 0 | 1 */
  ck_assert_uint_eq(tg_f32_to_f16(-0x1p-25f), 0x8000);
  ck_assert_uint_eq(tg_f32_to_f16(from_bits(0x33000001)), 0x0001); /* just over */
  ck_assert_uint_eq(tg_f32_to_f16(1.5f * 0x1p-24f), 0x0002);       /* tie 1 | 2 */
  ck_assert_uint_eq(tg_f32_to_f16(2.5f * 0x1p-24f), 0x0002);       /* tie 2 | 3 */
  ck_assert_uint_eq(tg_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);    /* up into the normals */
  ck_assert_uint_eq(tg_f32_to_f16(1e-10f), 0x0000);
  ck_assert_uint_eq(tg_f32_to_f16(from_bits(1)), 0x0000);
  /* normal rounding, ties to even */
  ck_assert_uint_eq(tg_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  ck_assert_uint_eq(tg_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  ck_assert_uint_eq(tg_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  ck_assert_uint_eq(tg_f32_to_f16(2047.0f * 0x1p-11f + 0x1p-12f), 0x3c00); /* carries */
  /* NaN stays NaN, with its sign */
  ck_assert(isnan(tg_f16_to_f32(tg_f32_to_f16(NAN))));
  ck_assert(isnan(tg_f16_to_f32(tg_f32_to_f16(from_bits(0x7f800001)))));
  ck_assert_uint_eq(tg_f32_to_f16(from_bits(0xff800001)) & 0xfc00, 0xfc00);
}
END_TEST

START_TEST(test_f16_exhaustive) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = tg_f16_to_f32((uint16_t)h);
    uint16_t back = tg_f32_to_f16(f);
    if (isnan(f)) EXPECT(isnan(tg_f16_to_f32(back)), "NaN %04x came back as %04x", h, back);
    else EXPECT(back == h, "%04x came back as %04x", h, back);
  }
  /* every value halfway between two neighbours goes to the even one */
  for (uint32_t h = 0; h < 0x7bff; h++) {
    double mid = ((double)tg_f16_to_f32((uint16_t)h) + tg_f16_to_f32((uint16_t)(h + 1))) / 2;
    uint16_t got = tg_f32_to_f16((float)mid), want = (uint16_t)((h & 1) ? h + 1 : h);
    EXPECT(got == want, "midpoint after %04x gave %04x, want %04x", h, got, want);
  }
}
END_TEST

#ifdef __FLT16_MAX__
/* Against the compiler's own conversion, which rounds to nearest even. */
START_TEST(test_f16_matches_compiler) {
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < 2000000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    float f = from_bits((uint32_t)x);
    if (isnan(f)) continue;
    _Float16 h = (_Float16)f;
    uint16_t want;
    memcpy(&want, &h, 2);
    EXPECT(tg_f32_to_f16(f) == want, "%a: %04x, want %04x", (double)f, tg_f32_to_f16(f), want);
  }
}
END_TEST
#endif

START_TEST(test_to_f64_every_dtype) {
  /* the data at an odd address, as in a file with an odd header length */
  unsigned char raw[64] = {0};
  double out[8];
  static const unsigned char f32le[] = {0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0};
  tg_st_tensor t = tensor("t", TG_F32, 1, SHAPE(2), raw + 1);
  memcpy(raw + 1, f32le, 8);
  tg_st_to_f64(&t, out);
  ck_assert(out[0] == 1.0 && out[1] == -2.5);

  static const unsigned char bf16le[] = {0x80, 0x3f, 0x20, 0xc0, 0x80, 0xff};
  t = tensor("t", TG_BF16, 1, SHAPE(3), raw + 1);
  memcpy(raw + 1, bf16le, 6);
  tg_st_to_f64(&t, out);
  ck_assert(out[0] == 1.0 && out[1] == -2.5 && out[2] == -INFINITY);

  static const unsigned char f16le[] = {0x00, 0x3c, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x7e};
  t = tensor("t", TG_F16, 2, SHAPE(2, 2), raw + 3);
  memcpy(raw + 3, f16le, 8);
  tg_st_to_f64(&t, out);
  ck_assert(out[0] == 1.0 && out[1] == 65504.0 && out[2] == 0x1p-24 && isnan(out[3]));

  static const unsigned char i32le[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
                                        0, 0, 0, 0x80, 7, 0, 0, 0};
  t = tensor("t", TG_I32, 1, SHAPE(4), raw + 1);
  memcpy(raw + 1, i32le, 16);
  tg_st_to_f64(&t, out);
  ck_assert(out[0] == -1 && out[1] == 2147483647.0 && out[2] == -2147483648.0 && out[3] == 7);

  static const unsigned char b[] = {0, 1, 2, 255};
  t = tensor("t", TG_BOOL, 1, SHAPE(4), raw + 1);
  memcpy(raw + 1, b, 4);
  tg_st_to_f64(&t, out);
  ck_assert(out[0] == 0 && out[1] == 1 && out[2] == 1 && out[3] == 1);

  t = tensor("t", TG_F32, 0, NULL, raw + 1);
  memcpy(raw + 1, f32le + 4, 4);
  tg_st_to_f64(&t, out);
  ck_assert(out[0] == -2.5);

  out[0] = 99;
  t = tensor("t", TG_F32, 2, SHAPE(0, 5), raw);
  tg_st_to_f64(&t, out); /* nothing to convert, nothing written */
  ck_assert(out[0] == 99);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("safetensors");
  TCase *tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_round_trip_every_dtype);
  tcase_add_test(tc, test_encode_matches_write);
  tcase_add_test(tc, test_no_tensors);
  tcase_add_test(tc, test_gpt2_names);
  tcase_add_test(tc, test_header_bytes);
  tcase_add_test(tc, test_header_escapes_and_order);
  tcase_add_test(tc, test_every_prefix);
  tcase_add_test(tc, test_bad_length);
  tcase_add_test(tc, test_bad_json);
  tcase_add_test(tc, test_byte_count);
  tcase_add_test(tc, test_offsets_out_of_range);
  tcase_add_test(tc, test_overlap_and_gaps);
  tcase_add_test(tc, test_bad_dtype);
  tcase_add_test(tc, test_bad_shape);
  tcase_add_test(tc, test_bad_entries);
  tcase_add_test(tc, test_duplicate_names);
  tcase_add_test(tc, test_bad_metadata);
  tcase_add_test(tc, test_read_errors);
  tcase_add_test(tc, test_atomic_write_failure);
  tcase_add_test(tc, test_atomic_rename_failure);
  tcase_add_test(tc, test_write_unwritable_dir);
  tcase_add_test(tc, test_writer_refuses);
  suite_add_tcase(s, tc);
  TCase *conv = tcase_create("conversions");
  tcase_set_timeout(conv, 60);
  tcase_add_test(conv, test_bf16_known);
  tcase_add_test(conv, test_bf16_exhaustive);
  tcase_add_test(conv, test_f16_known);
  tcase_add_test(conv, test_f16_exhaustive);
#ifdef __FLT16_MAX__
  tcase_add_test(conv, test_f16_matches_compiler);
#endif
  tcase_add_test(conv, test_to_f64_every_dtype);
  suite_add_tcase(s, conv);
  return s;
}

int main(void) { return tu_run(suite()); }
