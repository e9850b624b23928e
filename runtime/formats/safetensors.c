/* safetensors.c: reading, validating and writing safetensors files.
 *
 * Reading.  The whole file goes into one malloc'ed buffer (after fstat has
 * shown it to be a regular file of at most 64 GiB), the header is parsed by
 * the strict JSON parser (json.c), and every tensor entry is checked before
 * anything points into the buffer: exactly the keys dtype, shape and
 * data_offsets; a supported dtype; a shape of non-negative integers whose
 * element count cannot overflow; offsets inside the data section holding
 * exactly the bytes that dtype and shape need.  Then, as the format demands
 * (and the reference implementation checks), the tensors must tile the data
 * section: sorted by offset, none may overlap the one before it or leave a
 * gap, and the last must end where the file does.  A file that passes can
 * be used without further bounds checks.
 *
 * Tensor data lies at 8 + header length + begin, which the format does not
 * align: a tensor's data pointer may be odd.  Callers must memcpy the bytes
 * (or use tg_st_to_f64), never cast the pointer to float * or int32_t *.
 *
 * Errors name the file and, where there is one, the tensor, and bail
 * through ctx; the reader frees all it allocated before passing the bail
 * on (its own jmp_buf, as tg_elaborate does), so an error leaks nothing.
 * The tg_st_file owns its own arena, so tg_st_free needs no ctx.
 *
 * Writing.  The header is compact JSON in the order given ("__metadata__"
 * first), padded with spaces so that the data starts 8-byte aligned (as
 * the Rust implementation does), and the data follows contiguously in the
 * same order.  The file is written beside its target and renamed over it
 * only when complete and synced, so a crash or a full disk leaves the old
 * file intact. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "half.h"
#include "json.h"
#include "json_text.h"

/* The reference implementation's header limit: a header longer than this
 * is far more likely a wrong file than a real model. */
enum { HEADER_MAX = 100000000 };
#define FILE_MAX ((uint64_t)64 << 30)
/* A header nests three deep (root, tensor, shape); a little slack lets a
 * wrongly nested entry be reported by what it means, not by its depth. */
enum { JSON_DEPTH = 8 };
/* About 6 + rank values per tensor: room for several hundred thousand
 * tensors, while a hostile header stays within a few hundred MB. */
#define JSON_MAX_VALUES ((size_t)1 << 22)

static const char *const st_dtype_names[TG_NDTYPES] = {
    [TG_F32] = "F32", [TG_BF16] = "BF16", [TG_F16] = "F16", [TG_I32] = "I32", [TG_BOOL] = "BOOL",
};
#define SUPPORTED "F32, BF16, F16, I32, BOOL"

/* The public struct and what only this file needs to free and search it. */
typedef struct st_file {
  tg_st_file pub;
  tg_arena *arena;            /* path, names, metadata, the tensor array */
  const tg_st_tensor **sorted; /* tensors by name, for tg_st_find */
} st_file;

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
  return v;
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* ---- the reader's state and its errors --------------------------------- */

enum { SHOW_MAX = 160, NSHOW = 4 };

typedef struct reader {
  tg_ctx *ctx;
  st_file *f;
  const char *path;          /* for messages: the file's own copy */
  tg_arena *tmp;             /* the JSON tree, dropped after the parse */
  int fd;                    /* open while reading, else -1 */
  const unsigned char *data; /* the data section, after the header */
  size_t data_size;
  int64_t (*offsets)[2];     /* per tensor, in the tmp arena */
  char shown[NSHOW][SHOW_MAX];
  int next_shown;
} reader;

static _Noreturn void fail(reader *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void fail(reader *R, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tg_vreport(R->ctx, "error", (tg_loc){R->path, 0, 0}, fmt, ap);
  va_end(ap);
  tg_bail(R->ctx);
}

/* Bytes from a file made printable for a message: ASCII and valid UTF-8 as
 * they are, anything else as \xNN, and a long text cut short.  Returns one
 * of a few rotating buffers, so a message can show several. */
static const char *show(reader *R, const char *s, size_t n) {
  char *out = R->shown[R->next_shown++ % NSHOW];
  size_t k = 0, i = 0;
  while (i < n && k < SHOW_MAX - 12) {
    unsigned char c = (unsigned char)s[i];
    size_t m = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (c >= 0x80 && m <= n - i && tg_json_utf8_check(s + i, m) == m) {
      memcpy(out + k, s + i, m);
      k += m;
      i += m;
    } else if (c >= 0x20 && c < 0x7f) {
      out[k++] = (char)c;
      i++;
    } else {
      k += (size_t)snprintf(out + k, SHOW_MAX - k, "\\x%02x", c);
      i++;
    }
  }
  if (i < n) {
    memcpy(out + k, "...", 3);
    k += 3;
  }
  out[k] = 0;
  return out;
}

static const char *show_str(reader *R, const char *s) { return show(R, s, strlen(s)); }

/* The text of a JSON value as it stands in the header, for "shape[1] is 2.5". */
static const char *show_json(reader *R, const char *header, const tg_json *v) {
  return show(R, header + v->pos, v->end - v->pos);
}

static _Noreturn void fail_tensor(reader *R, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void fail_tensor(reader *R, const char *name, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  fail(R, "tensor '%s': %s", show_str(R, name), what);
}

const char *tg_st_shape_str(const int64_t *shape, int rank, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* ---- loading the bytes -------------------------------------------------- */

static st_file *file_new(const char *path) {
  st_file *f = calloc(1, sizeof *f);
  if (!f) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  f->arena = tg_arena_new();
  f->pub.path = tg_strdup(f->arena, path);
  return f;
}

void tg_st_free(tg_st_file *pub) {
  if (!pub) return;
  st_file *f = (st_file *)pub;
  free(f->pub.buf);
  tg_arena_free(f->arena);
  free(f);
}

static reader *reader_new(tg_ctx *ctx, const char *path) {
  reader *R = calloc(1, sizeof *R);
  if (!R) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  R->ctx = ctx;
  R->f = file_new(path);
  R->path = R->f->pub.path;
  R->tmp = tg_arena_new();
  R->fd = -1;
  return R;
}

/* Frees the reader; the file too unless keep. */
static void reader_free(reader *R, bool keep) {
  if (R->fd >= 0) close(R->fd);
  tg_arena_free(R->tmp);
  if (!keep) tg_st_free(&R->f->pub);
  free(R);
}

/* Reads the whole of path into f->buf: a regular file only (a FIFO or a
 * device could block or never end), sized by fstat on the open file. */
static void load_file(reader *R, const char *path) {
  R->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (R->fd < 0) fail(R, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(R->fd, &st) != 0) fail(R, "cannot read: %s", strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(R, "cannot read: it is a directory");
  if (!S_ISREG(st.st_mode)) fail(R, "cannot read: not a regular file");
  if ((uint64_t)st.st_size > FILE_MAX || (uint64_t)st.st_size >= SIZE_MAX)
    fail(R, "the file is too large (%lld bytes; the limit is 64 GiB)", (long long)st.st_size);
  size_t size = (size_t)st.st_size, got = 0;
  R->f->pub.buf = malloc(size ? size : 1);
  if (!R->f->pub.buf) fail(R, "cannot read: no memory for %zu bytes", size);
  while (got < size) {
    size_t want = size - got < ((size_t)1 << 30) ? size - got : (size_t)1 << 30;
    ssize_t k = read(R->fd, (char *)R->f->pub.buf + got, want);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail(R, "cannot read: %s", strerror(errno));
    if (k == 0) fail(R, "cannot read: the file shrank to %zu bytes while being read", got);
    got += (size_t)k;
  }
  R->f->pub.size = size;
  close(R->fd);
  R->fd = -1;
}

/* ---- the header --------------------------------------------------------- */

static bool parse_dtype(const tg_json *v, tg_dtype *out) {
  for (int i = 0; i < TG_NDTYPES; i++)
    if (strlen(st_dtype_names[i]) == v->n && memcmp(st_dtype_names[i], v->u.s, v->n) == 0) {
      *out = (tg_dtype)i;
      return true;
    }
  return false;
}

/* The product of the non-zero dims may not pass TG_MAX_ELEMS, so that any
 * product of dims a caller forms (even when another dim is 0) stays far
 * from int64 overflow. */
static void parse_shape(reader *R, const char *hdr, const char *name, const tg_json *v,
                        tg_st_tensor *t) {
  if (v->kind != TG_JSON_ARRAY)
    fail_tensor(R, name, "shape must be an array of integers, not %s", tg_json_kind_name(v->kind));
  if (v->n > TG_MAX_RANK)
    fail_tensor(R, name, "shape has %zu dims; at most %d are supported", v->n, TG_MAX_RANK);
  t->rank = (int)v->n;
  int64_t nonzero = 1;
  for (int d = 0; d < t->rank; d++) {
    const tg_json *x = &v->u.items[d];
    if (x->kind != TG_JSON_INT || x->u.i < 0)
      fail_tensor(R, name, "shape[%d] is %s; dims must be non-negative integers", d,
                  show_json(R, hdr, x));
    if (x->u.i > TG_MAX_ELEMS)
      fail_tensor(R, name, "shape[%d] is %lld, more than the limit of 2^48", d,
                  (long long)x->u.i);
    t->shape[d] = x->u.i;
    if (x->u.i && nonzero > TG_MAX_ELEMS / x->u.i)
      fail_tensor(R, name, "shape %s has more than 2^48 elements", show_json(R, hdr, v));
    if (x->u.i) nonzero *= x->u.i;
  }
}

static int64_t numel(const tg_st_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->shape[d];
  return n;
}

static void parse_offsets(reader *R, const char *hdr, const char *name, const tg_json *v,
                          tg_st_tensor *t, int64_t off[2]) {
  if (v->kind != TG_JSON_ARRAY || v->n != 2 || v->u.items[0].kind != TG_JSON_INT ||
      v->u.items[1].kind != TG_JSON_INT)
    fail_tensor(R, name, "data_offsets must be two integers [begin, end], not %s",
                show_json(R, hdr, v));
  int64_t b = v->u.items[0].u.i, e = v->u.items[1].u.i;
  if (b < 0 || e < 0)
    fail_tensor(R, name, "data_offsets [%lld, %lld] must not be negative", (long long)b,
                (long long)e);
  if (b > e)
    fail_tensor(R, name, "data_offsets [%lld, %lld] begin after they end", (long long)b,
                (long long)e);
  int64_t need = numel(t) * tg_dtype_size(t->dtype);
  if (e - b != need) {
    char s[256];
    fail_tensor(R, name, "data_offsets [%lld, %lld] hold %lld bytes but %s %s needs %lld",
                (long long)b, (long long)e, (long long)(e - b), st_dtype_names[t->dtype],
                tg_st_shape_str(t->shape, t->rank, s, sizeof s), (long long)need);
  }
  if ((uint64_t)e > R->data_size)
    fail_tensor(R, name,
                "data_offsets [%lld, %lld] go past the end of the data, which has %zu bytes "
                "(is the file truncated?)",
                (long long)b, (long long)e, R->data_size);
  off[0] = b;
  off[1] = e;
  t->data = R->data + b;
  t->nbytes = (size_t)(e - b);
}

static bool key_is(const tg_json *m, const char *key) {
  return m->key_len == strlen(key) && memcmp(m->key, key, m->key_len) == 0;
}

static void parse_tensor(reader *R, const char *hdr, const tg_json *m, tg_st_tensor *t,
                         int64_t off[2]) {
  const char *name = m->key;
  if (m->key_len == 0) fail(R, "tensor '': a tensor name must not be empty");
  if (strlen(name) != m->key_len)
    fail_tensor(R, name, "the name contains a NUL byte (\\u0000)");
  /* Names end up in messages and in IR names: no control characters. */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    if (*p < 0x20 || *p == 0x7f)
      fail_tensor(R, name, "the name contains the control character 0x%02x", *p);
  if (m->kind != TG_JSON_OBJECT)
    fail_tensor(R, name, "must be an object with dtype, shape and data_offsets, not %s",
                tg_json_kind_name(m->kind));
  for (size_t k = 0; k < m->n; k++) {
    const tg_json *x = &m->u.items[k];
    if (!key_is(x, "dtype") && !key_is(x, "shape") && !key_is(x, "data_offsets"))
      fail_tensor(R, name, "unknown key '%s' (a tensor has dtype, shape and data_offsets)",
                  show(R, x->key, x->key_len));
  }
  const tg_json *dtype = tg_json_get(m, "dtype"), *shape = tg_json_get(m, "shape"),
                *offsets = tg_json_get(m, "data_offsets");
  if (!dtype) fail_tensor(R, name, "no dtype");
  if (!shape) fail_tensor(R, name, "no shape");
  if (!offsets) fail_tensor(R, name, "no data_offsets");
  if (dtype->kind != TG_JSON_STRING)
    fail_tensor(R, name, "dtype must be a string, not %s", tg_json_kind_name(dtype->kind));
  if (!parse_dtype(dtype, &t->dtype))
    fail_tensor(R, name, "dtype %s is not supported (" SUPPORTED ")",
                show(R, dtype->u.s, dtype->n));
  t->name = tg_strndup(R->f->arena, name, m->key_len);
  parse_shape(R, hdr, name, shape, t);
  parse_offsets(R, hdr, name, offsets, t, off);
}

static void parse_meta(reader *R, const tg_json *m) {
  if (m->kind != TG_JSON_OBJECT)
    fail(R, "__metadata__ must be an object of strings, not %s", tg_json_kind_name(m->kind));
  tg_st_file *f = &R->f->pub;
  f->meta = tg_alloc(R->f->arena, (m->n ? m->n : 1) * sizeof *f->meta);
  for (size_t k = 0; k < m->n; k++) {
    const tg_json *x = &m->u.items[k];
    const char *key = show(R, x->key, x->key_len);
    if (x->kind != TG_JSON_STRING)
      fail(R, "__metadata__ '%s': the value must be a string, not %s", key,
           tg_json_kind_name(x->kind));
    if (strlen(x->key) != x->key_len || strlen(x->u.s) != x->n)
      fail(R, "__metadata__ '%s': a NUL byte (\\u0000) in the key or the value", key);
    f->meta[k].key = tg_strndup(R->f->arena, x->key, x->key_len);
    f->meta[k].value = tg_strndup(R->f->arena, x->u.s, x->n);
  }
  f->n_meta = (int)m->n;
}

/* Tensors sorted by their offsets, for the tiling check. */
typedef struct span {
  int64_t begin, end;
  int index;
} span;

static int by_offsets(const void *pa, const void *pb) {
  const span *a = pa, *b = pb;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  if (a->end != b->end) return a->end < b->end ? -1 : 1;
  return (a->index > b->index) - (a->index < b->index);
}

/* The tensors must cover the data section exactly once: no overlap, no
 * gap (the format forbids holes, so that a file cannot hide a second file
 * inside itself), nothing left over at the end. */
static void check_tiling(reader *R) {
  const tg_st_file *f = &R->f->pub;
  span *s = tg_alloc(R->tmp, ((size_t)f->n_tensors + 1) * sizeof *s);
  for (int i = 0; i < f->n_tensors; i++) s[i] = (span){R->offsets[i][0], R->offsets[i][1], i};
  qsort(s, (size_t)f->n_tensors, sizeof *s, by_offsets);
  int64_t at = 0;
  int last = -1; /* the tensor that ends at `at` */
  for (int k = 0; k < f->n_tensors; k++) {
    const char *name = f->tensors[s[k].index].name;
    if (s[k].begin < at)
      fail_tensor(R, name, "data_offsets [%lld, %lld] overlap tensor '%s' at [%lld, %lld]",
                  (long long)s[k].begin, (long long)s[k].end,
                  show_str(R, f->tensors[s[last].index].name), (long long)s[last].begin,
                  (long long)s[last].end);
    if (s[k].begin > at)
      fail_tensor(R, name,
                  "data_offsets [%lld, %lld] leave bytes [%lld, %lld) before it unused "
                  "(the format allows no gaps)",
                  (long long)s[k].begin, (long long)s[k].end, (long long)at,
                  (long long)s[k].begin);
    at = s[k].end;
    last = k;
  }
  if ((uint64_t)at != R->data_size)
    fail(R, "the data section has %zu bytes but the tensors end at byte %lld "
            "(the format allows no unused bytes)",
         R->data_size, (long long)at);
}

static int by_name(const void *pa, const void *pb) {
  const tg_st_tensor *a = *(const tg_st_tensor *const *)pa, *b = *(const tg_st_tensor *const *)pb;
  return strcmp(a->name, b->name);
}

static void index_names(reader *R) {
  st_file *f = R->f;
  size_t n = (size_t)f->pub.n_tensors;
  f->sorted = tg_alloc(f->arena, (n ? n : 1) * sizeof *f->sorted);
  for (size_t i = 0; i < n; i++) f->sorted[i] = &f->pub.tensors[i];
  qsort(f->sorted, n, sizeof *f->sorted, by_name);
}

static _Noreturn void fail_json(reader *R, const tg_json_error *err) {
  if (err->dup_key && err->depth == 1)
    fail(R, "tensor '%s' appears twice in the header (the second time at byte %zu)",
         show_str(R, err->dup_key), err->pos);
  if (err->dup_key)
    fail(R, "header is not valid JSON at byte %zu: duplicate key '%s'", err->pos,
         show_str(R, err->dup_key));
  fail(R, "header is not valid JSON at byte %zu: %s", err->pos, err->msg);
}

static void parse_header(reader *R, const char *hdr, size_t n) {
  tg_json_error err;
  tg_json_opts opts = {.max_depth = JSON_DEPTH, .max_values = JSON_MAX_VALUES};
  const tg_json *root = tg_json_parse(R->tmp, hdr, n, &opts, &err);
  if (!root) fail_json(R, &err);
  if (root->kind != TG_JSON_OBJECT)
    fail(R, "the header must be a JSON object, not %s", tg_json_kind_name(root->kind));
  tg_st_file *f = &R->f->pub;
  f->tensors = tg_alloc(R->f->arena, (root->n ? root->n : 1) * sizeof *f->tensors);
  R->offsets = tg_alloc(R->tmp, (root->n ? root->n : 1) * sizeof *R->offsets);
  for (size_t k = 0; k < root->n; k++) {
    const tg_json *m = &root->u.items[k];
    if (key_is(m, "__metadata__")) {
      parse_meta(R, m);
    } else {
      parse_tensor(R, hdr, m, &f->tensors[f->n_tensors], R->offsets[f->n_tensors]);
      f->n_tensors++;
    }
  }
  check_tiling(R);
  index_names(R);
}

/* Checks the framing (length, header, data) of the bytes in f->buf. */
static void parse_file(reader *R) {
  const unsigned char *b = R->f->pub.buf;
  size_t size = R->f->pub.size;
  if (size < 8)
    fail(R, "truncated: the file has %zu bytes, less than the 8-byte header length that starts "
            "a safetensors file",
         size);
  uint64_t n = le64(b);
  if (n > HEADER_MAX)
    fail(R, "the header length %llu is over the limit of %d bytes (is this a safetensors file?)",
         (unsigned long long)n, HEADER_MAX);
  if (n > size - 8)
    fail(R, "truncated: the header says %llu bytes but the file has %zu after the length",
         (unsigned long long)n, size - 8);
  if (n < 2) fail(R, "the header length is %llu; a header holds at least '{}'", (unsigned long long)n);
  R->data = b + 8 + n;
  R->data_size = size - 8 - (size_t)n;
  parse_header(R, (const char *)b + 8, (size_t)n);
}

/* Runs the reader with its own bail, so that an error frees what was made
 * before it is passed on to the caller's handler. */
static tg_st_file *run(tg_ctx *ctx, reader *R, const char *path, const void *bytes, size_t size) {
  jmp_buf here, *const outer = ctx->bail;
  ctx->bail = &here;
  if (setjmp(here)) {
    reader_free(R, false);
    ctx->bail = outer;
    tg_bail(ctx);
  }
  if (path) {
    load_file(R, path);
  } else {
    R->f->pub.buf = tg_xmalloc(size);
    if (size) memcpy(R->f->pub.buf, bytes, size);
    R->f->pub.size = size;
  }
  parse_file(R);
  ctx->bail = outer;
  tg_st_file *f = &R->f->pub;
  reader_free(R, true);
  return f;
}

tg_st_file *tg_st_read(tg_ctx *ctx, const char *path) {
  return run(ctx, reader_new(ctx, path), path, NULL, 0);
}

tg_st_file *tg_st_parse(tg_ctx *ctx, const char *name, const void *bytes, size_t size) {
  return run(ctx, reader_new(ctx, name), NULL, bytes, size);
}

static int find_cmp(const void *key, const void *elem) {
  return strcmp(key, (*(const tg_st_tensor *const *)elem)->name);
}

const tg_st_tensor *tg_st_find(const tg_st_file *pub, const char *name) {
  const st_file *f = (const st_file *)pub;
  if (!pub->n_tensors) return NULL;
  const tg_st_tensor *const *hit =
      bsearch(name, f->sorted, (size_t)pub->n_tensors, sizeof *f->sorted, find_cmp);
  return hit ? *hit : NULL;
}

const char *tg_st_meta_get(const tg_st_file *f, const char *key) {
  for (int i = 0; i < f->n_meta; i++)
    if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
  return NULL;
}

/* ---- writing ------------------------------------------------------------ */


static bool valid_text(const char *s) {
  return s && tg_json_utf8_check(s, strlen(s)) == strlen(s);
}

static int by_name_ptr(const void *pa, const void *pb) {
  return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

/* Whether the n names hold a repeat (sorted, so O(n log n)); *dup gets it. */
static bool has_duplicate(const char *const *names, int n, const char **dup) {
  const char **v = tg_xmalloc((size_t)n * sizeof *v);
  memcpy(v, names, (size_t)n * sizeof *v);
  qsort(v, (size_t)n, sizeof *v, by_name_ptr);
  *dup = NULL;
  for (int i = 1; i < n && !*dup; i++)
    if (strcmp(v[i - 1], v[i]) == 0) *dup = v[i];
  free(v);
  return *dup != NULL;
}

/* Everything the reader would reject, refused before a byte is written. */
static bool check_tensor(const tg_st_tensor *t, char *why, size_t whylen) {
  for (const unsigned char *c = (const unsigned char *)t->name; t->name && *c; c++)
    if (*c < 0x20 || *c == 0x7f)
      return tg_why(why, whylen, "tensor '%s': the name contains the control character 0x%02x",
                    t->name, *c);
  if (!valid_text(t->name) || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
    return tg_why(why, whylen, "tensor '%s': a name must be non-empty UTF-8, not '__metadata__'",
                  t->name ? t->name : "(null)");
  if ((unsigned)t->dtype >= TG_NDTYPES)
    return tg_why(why, whylen, "tensor '%s': unknown dtype %d", t->name, (int)t->dtype);
  if (t->rank < 0 || t->rank > TG_MAX_RANK)
    return tg_why(why, whylen, "tensor '%s': rank %d (0 to %d are allowed)", t->name, t->rank,
                  TG_MAX_RANK);
  int64_t nonzero = 1;
  for (int d = 0; d < t->rank; d++) {
    int64_t x = t->shape[d];
    if (x < 0 || x > TG_MAX_ELEMS || (x && nonzero > TG_MAX_ELEMS / x))
      return tg_why(why, whylen, "tensor '%s': shape[%d] = %lld is negative or too large",
                    t->name, d, (long long)x);
    if (x) nonzero *= x;
  }
  int64_t need = numel(t) * tg_dtype_size(t->dtype);
  char s[256];
  if ((uint64_t)need != (uint64_t)t->nbytes)
    return tg_why(why, whylen, "tensor '%s': nbytes is %zu but %s %s needs %lld", t->name,
                  t->nbytes, st_dtype_names[t->dtype],
                  tg_st_shape_str(t->shape, t->rank, s, sizeof s),
                  (long long)need);
  if (need && !t->data) return tg_why(why, whylen, "tensor '%s': no data", t->name);
  return true;
}

static bool check_args(const tg_st_tensor *ts, int n, const tg_st_meta *meta, int n_meta,
                       char *why, size_t whylen) {
  if (n < 0 || n_meta < 0 || (n && !ts) || (n_meta && !meta))
    return tg_why(why, whylen, "bad arguments: %d tensors, %d metadata entries", n, n_meta);
  const uint16_t one = 1;
  if (*(const unsigned char *)&one != 1)
    return tg_why(why, whylen, "this host is big-endian; safetensors data is little-endian");
  for (int i = 0; i < n; i++)
    if (!check_tensor(&ts[i], why, whylen)) return false;
  for (int i = 0; i < n_meta; i++)
    if (!valid_text(meta[i].key) || !valid_text(meta[i].value))
      return tg_why(why, whylen, "__metadata__ entry %d: key and value must be UTF-8 strings", i);
  const char **names = tg_xmalloc(((size_t)n + (size_t)n_meta) * sizeof *names);
  for (int i = 0; i < n; i++) names[i] = ts[i].name;
  for (int i = 0; i < n_meta; i++) names[n + i] = meta[i].key;
  const char *dup;
  bool ok = !has_duplicate(names, n, &dup) ||
            tg_why(why, whylen, "tensor '%s' is given twice", dup);
  ok = ok && (!has_duplicate(names + n, n_meta, &dup) ||
              tg_why(why, whylen, "__metadata__ '%s' is given twice", dup));
  free(names);
  return ok;
}

/* The header: the 8-byte length and the JSON padded to a multiple of 8. */
static tg_sbuf build_header(const tg_st_tensor *ts, int n, const tg_st_meta *meta, int n_meta) {
  tg_sbuf b = {0};
  tg_sb_put(&b, "\0\0\0\0\0\0\0\0{", 9);
  if (n_meta) {
    tg_sb_puts(&b, "\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++) {
      if (i) tg_sb_puts(&b, ",");
      tg_json_quote(&b, meta[i].key, strlen(meta[i].key));
      tg_sb_puts(&b, ":");
      tg_json_quote(&b, meta[i].value, strlen(meta[i].value));
    }
    tg_sb_puts(&b, n ? "}," : "}");
  }
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (i) tg_sb_puts(&b, ",");
    tg_json_quote(&b, ts[i].name, strlen(ts[i].name));
    tg_sb_puts(&b, ":{\"dtype\":\"");
    tg_sb_puts(&b, st_dtype_names[ts[i].dtype]);
    tg_sb_puts(&b, "\",\"shape\":[");
    for (int d = 0; d < ts[i].rank; d++) {
      if (d) tg_sb_puts(&b, ",");
      tg_sb_printf(&b, "%lld", (long long)ts[i].shape[d]);
    }
    tg_sb_puts(&b, "],\"data_offsets\":[");
    tg_sb_printf(&b, "%lld", (long long)at);
    tg_sb_puts(&b, ",");
    at += ts[i].nbytes;
    tg_sb_printf(&b, "%lld", (long long)at);
    tg_sb_puts(&b, "]}");
  }
  tg_sb_puts(&b, "}");
  while (b.n % 8) tg_sb_puts(&b, " ");
  uint64_t hlen = b.n - 8;
  for (int k = 0; k < 8; k++) b.s[k] = (char)(hlen >> (8 * k) & 0xff);
  return b;
}

bool tg_st_encode(const tg_st_tensor *ts, int n, const tg_st_meta *meta, int n_meta, void **out,
                  size_t *size, char *why, size_t whylen) {
  if (!check_args(ts, n, meta, n_meta, why, whylen)) return false;
  tg_sbuf h = build_header(ts, n, meta, n_meta);
  size_t total = h.n;
  for (int i = 0; i < n; i++) total += ts[i].nbytes;
  unsigned char *buf = malloc(total);
  if (!buf) {
    tg_sb_free(&h);
    return tg_why(why, whylen, "no memory for %zu bytes", total);
  }
  memcpy(buf, h.s, h.n);
  size_t at = h.n;
  for (int i = 0; i < n; i++) {
    if (ts[i].nbytes) memcpy(buf + at, ts[i].data, ts[i].nbytes);
    at += ts[i].nbytes;
  }
  tg_sb_free(&h);
  *out = buf;
  *size = total;
  return true;
}

/* Writes the header and data to fp; false with errno set on failure. */
static bool write_all(FILE *fp, const tg_sbuf *h, const tg_st_tensor *ts, int n) {
  if (fwrite(h->s, 1, h->n, fp) != h->n) return false;
  for (int i = 0; i < n; i++)
    if (ts[i].nbytes && fwrite(ts[i].data, 1, ts[i].nbytes, fp) != ts[i].nbytes) return false;
  return fflush(fp) == 0 && fsync(fileno(fp)) == 0;
}

bool tg_st_write(const char *path, const tg_st_tensor *ts, int n, const tg_st_meta *meta,
                 int n_meta, char *why, size_t whylen) {
  if (!path || !*path) return tg_why(why, whylen, "no file name");
  if (!check_args(ts, n, meta, n_meta, why, whylen)) return false;
  tg_sbuf h = build_header(ts, n, meta, n_meta);
  size_t tlen = strlen(path) + 32;
  char *tmp = tg_xmalloc(tlen);
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  bool ok = false;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!fp) {
    tg_why(why, whylen, "cannot create '%s': %s", tmp, strerror(errno));
    if (fd >= 0) close(fd), unlink(tmp);
  } else {
    bool written = write_all(fp, &h, ts, n);
    int saved = errno;
    bool closed = fclose(fp) == 0;
    if (!written || !closed)
      tg_why(why, whylen, "cannot write '%s': %s", tmp, strerror(written ? errno : saved));
    else if (rename(tmp, path) != 0)
      tg_why(why, whylen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    else
      ok = true;
    if (!ok) unlink(tmp);
  }
  if (ok) tg_sync_parent_dir(path);
  free(tmp);
  tg_sb_free(&h);
  return ok;
}

/* ---- conversions -------------------------------------------------------- */

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

void tg_st_to_f64(const tg_st_tensor *t, double *out) {
  int size = tg_dtype_size(t->dtype);
  if (!size || !t->nbytes) return;
  int64_t n = (int64_t)(t->nbytes / (size_t)size), want = numel(t);
  if (want < n) n = want;
  const unsigned char *p = t->data;
  for (int64_t i = 0; i < n; i++, p += size) {
    switch (t->dtype) {
    case TG_F32: out[i] = bits_f32(le32(p)); break;
    case TG_BF16: out[i] = tg_bf16_to_f32(le16(p)); break;
    case TG_F16: out[i] = tg_f16_to_f32(le16(p)); break;
    case TG_I32: {
      uint32_t u = le32(p);
      int32_t v;
      memcpy(&v, &u, sizeof v);
      out[i] = v;
      break;
    }
    case TG_BOOL: out[i] = *p != 0; break;
    default: break;
    }
  }
}
