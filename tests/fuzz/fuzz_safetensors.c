/* fuzz_safetensors.c: the libFuzzer target for the safetensors reader.
 *
 * Each input is the bytes of a would-be .safetensors file.  It is parsed
 * with tg_st_parse under a silent context (an error is the expected
 * outcome for most inputs, and longjmps back here); a file that is
 * accepted is then used the way a loader uses it, so that a validation
 * gap shows up as an out-of-bounds read under ASan rather than passing
 * unnoticed:
 *   - every byte of every tensor is read (summed), and small tensors are
 *     converted with tg_st_to_f64;
 *   - every tensor is found again by name with tg_st_find, and every
 *     metadata key with tg_st_meta_get;
 *   - the file is written back with tg_st_encode (which must accept
 *     whatever the reader accepted) and read again, and must come back
 *     the same: names, dtypes, shapes, bytes and metadata.
 * A broken property aborts, which libFuzzer reports as a crash.
 *
 * Built two ways: with -fsanitize=fuzzer (clang) as fuzz_safetensors, and
 * with replay_main.c as fuzz_safetensors_replay, which any compiler builds
 * and which runs tests/fuzz/st_corpus under ctest. */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Large enough for any tensor a small input can describe with real bytes. */
enum { MAX_CONVERT = 1 << 16 };

static void check(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_safetensors: broken: %s\n", what);
    abort();
  }
}

static int64_t numel(const tg_st_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->shape[d];
  return n;
}

/* Reads every byte and converts small tensors; returns a value that the
 * compiler cannot drop. */
static uint64_t touch(const tg_st_tensor *t) {
  const unsigned char *p = t->data;
  uint64_t sum = 0;
  for (size_t i = 0; i < t->nbytes; i++) sum += p[i];
  int64_t n = numel(t);
  check((size_t)n * (size_t)tg_dtype_size(t->dtype) == t->nbytes, "nbytes is numel * size");
  if (n > 0 && n <= MAX_CONVERT) {
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) abort();
    tg_st_to_f64(t, v);
    for (int64_t i = 0; i < n; i++) sum += v[i] == v[i]; /* not NaN */
    free(v);
  }
  return sum;
}

static void same(const tg_st_file *a, const tg_st_file *b) {
  check(a->n_tensors == b->n_tensors && a->n_meta == b->n_meta, "same counts");
  for (int i = 0; i < a->n_tensors; i++) {
    const tg_st_tensor *x = &a->tensors[i], *y = &b->tensors[i];
    check(!strcmp(x->name, y->name) && x->dtype == y->dtype && x->rank == y->rank, "same tensor");
    for (int d = 0; d < x->rank; d++) check(x->shape[d] == y->shape[d], "same shape");
    check(x->nbytes == y->nbytes, "same size");
    check(!x->nbytes || !memcmp(x->data, y->data, x->nbytes), "same bytes");
  }
  for (int i = 0; i < a->n_meta; i++)
    check(!strcmp(a->meta[i].key, b->meta[i].key) && !strcmp(a->meta[i].value, b->meta[i].value),
          "same metadata");
}

/* Writes f back out and reads it again. */
static void round_trip(tg_ctx *ctx, const tg_st_file *f) {
  void *bytes;
  size_t size;
  char why[256];
  if (!tg_st_encode(f->tensors, f->n_tensors, f->meta, f->n_meta, &bytes, &size, why, sizeof why)) {
    fprintf(stderr, "fuzz_safetensors: the writer refused what the reader accepted: %s\n", why);
    abort();
  }
  uint64_t h = 0;
  for (int k = 7; k >= 0; k--) h = h << 8 | ((const unsigned char *)bytes)[k];
  check(size >= 8 + h && h % 8 == 0, "header padded to 8");
  tg_st_file *volatile g = NULL;
  jmp_buf bail, *outer = ctx->bail;
  ctx->bail = &bail;
  if (setjmp(bail) == 0) g = tg_st_parse(ctx, "again.safetensors", bytes, size);
  ctx->bail = outer;
  free(bytes);
  check(g != NULL, "the reader accepts what the writer wrote");
  same(f, g);
  tg_st_free(g);
}

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tg_ctx *ctx = tg_ctx_new(NULL);
  jmp_buf bail;
  ctx->bail = &bail;
  tg_st_file *volatile f = NULL;
  if (setjmp(bail) == 0) {
    f = tg_st_parse(ctx, "fuzz.safetensors", data, size);
    check(ctx->nerrors == 0, "no error reported for an accepted file");
  } else {
    check(ctx->nerrors == 1 && ctx->message[0], "one error, with a message");
  }
  if (f) {
    uint64_t sum = 0;
    for (int i = 0; i < f->n_tensors; i++) {
      const tg_st_tensor *t = &f->tensors[i];
      sum += touch(t);
      check(tg_st_find(f, t->name) == t, "found by name");
    }
    for (int i = 0; i < f->n_meta; i++)
      check(!strcmp(tg_st_meta_get(f, f->meta[i].key), f->meta[i].value), "metadata by key");
    sink = sum;
    round_trip(ctx, f);
    tg_st_free(f);
  }
  tg_ctx_free(ctx);
  return 0;
}
