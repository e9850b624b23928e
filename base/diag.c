/* diag.c: compilation context, source files, and error messages.
 *
 * Every error has the form
 *     file:line:col: error: message
 *        12 |   y = x @ w
 *           |         ^
 * and then control returns (by longjmp) to whoever set ctx->bail, which
 * frees the arena.  Sources are kept so that any location can be quoted. */
#include "diag.h"

#include <stdarg.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

tg_ctx *tg_ctx_new(FILE *err) {
  tg_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  ctx->arena = tg_arena_new();
  ctx->err = err;
  /* Generous for GPT-2 (a few thousand nodes with its backward) and small
   * enough that a runaway loop in a .tg file fails fast, not out of memory. */
  ctx->node_limit = 500000;
  ctx->step_limit = 5000000;
  return ctx;
}

void tg_ctx_free(tg_ctx *ctx) {
  if (!ctx) return;
  tg_arena_free(ctx->arena);
  free(ctx);
}

static const tg_source *find_source(const tg_ctx *ctx, const char *path) {
  if (!path) return NULL;
  for (const tg_source *s = ctx->sources; s; s = s->next)
    if (strcmp(s->path, path) == 0) return s;
  return NULL;
}

static int utf8_len(const unsigned char *p, const unsigned char *end);

/* Prints the line `line` of src and a caret under byte column col.  A long
 * line is shown as a window around the column; bytes that are not valid
 * UTF-8 or are control characters are shown as '?', so that the message is
 * itself clean text; and a multi-byte character takes one caret column. */
static void quote_line(FILE *out, const tg_source *src, int line, int col) {
  enum { BEFORE = 60, WIDTH = 140 };
  const unsigned char *p = (const unsigned char *)src->text, *end = p + src->len;
  for (int l = 1; l < line && p < end; p++)
    if (*p == '\n') l++;
  if (p >= end && line > 1) return;
  const unsigned char *eol = p;
  while (eol < end && *eol != '\n' && *eol != '\r') eol++;
  const unsigned char *at = p + (col > 1 ? col - 1 : 0);
  if (at > eol) at = eol;
  const unsigned char *from = at - p > BEFORE ? at - BEFORE : p;
  const unsigned char *to = eol - from > WIDTH ? from + WIDTH : eol;
  if (at > to) to = at;
  /* Never start or end the window inside a UTF-8 sequence. */
  while (from > p && (*from & 0xc0) == 0x80) from--;
  while (to < eol && (*to & 0xc0) == 0x80) to++;

  char pad[WIDTH + 64];
  int npad = 0;
  int w = fprintf(out, "%5d | ", line) - 2;
  if (from > p) {
    fputs("...", out);
    memcpy(pad, "   ", 3);
    npad = 3;
  }
  for (const unsigned char *q = from; q < to;) {
    int n = *q >= 0x80 ? utf8_len(q, eol) : 1;
    bool shown = n > 1 || *q == '\t' || (*q >= 0x20 && *q < 0x7f);
    if (shown) fwrite(q, 1, (size_t)n, out);
    else fputc('?', out);
    if (q < at && npad < (int)sizeof pad - 1) pad[npad++] = *q == '\t' ? '\t' : ' ';
    q += n > 0 ? n : 1;
  }
  if (to < eol) fputs("...", out);
  pad[npad] = 0;
  fprintf(out, "\n%*s| %s^\n", w, "", pad);
}

void tg_vreport(tg_ctx *ctx, const char *severity, tg_loc loc, const char *fmt, va_list ap) {
  bool is_error = strcmp(severity, "error") == 0;
  if (is_error && ctx->nerrors++ == 0) {
    va_list copy;
    va_copy(copy, ap);
    vsnprintf(ctx->message, sizeof ctx->message, fmt, copy);
    va_end(copy);
  }
  if (!ctx->err) return;
  if (loc.file && loc.line > 0)
    fprintf(ctx->err, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, severity);
  else if (loc.file) /* a binary file (weights, a batch): no line to point at */
    fprintf(ctx->err, "%s: %s: ", loc.file, severity);
  else
    fprintf(ctx->err, "tg: %s: ", severity);
  vfprintf(ctx->err, fmt, ap);
  fputc('\n', ctx->err);
  const tg_source *src = find_source(ctx, loc.file);
  if (src && loc.line > 0) quote_line(ctx->err, src, loc.line, loc.col);
}

void tg_report(tg_ctx *ctx, const char *severity, tg_loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tg_vreport(ctx, severity, loc, fmt, ap);
  va_end(ap);
}

_Noreturn void tg_bail(tg_ctx *ctx) {
  if (!ctx->bail) {
    fprintf(stderr, "tg: internal error: error raised with no handler\n");
    abort();
  }
  longjmp(*ctx->bail, 1);
}

_Noreturn void tg_error(tg_ctx *ctx, tg_loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tg_vreport(ctx, "error", loc, fmt, ap);
  va_end(ap);
  tg_bail(ctx);
}

const tg_source *tg_source_add(tg_ctx *ctx, const char *path, const char *text, size_t len) {
  tg_source *s = tg_alloc(ctx->arena, sizeof *s);
  s->path = tg_strdup(ctx->arena, path);
  /* Keep a NUL after the text so scanners may rely on it. */
  s->text = tg_strndup(ctx->arena, text, len);
  s->len = len;
  s->next = ctx->sources;
  ctx->sources = s;
  return s;
}

const tg_source *tg_source_load(tg_ctx *ctx, const char *path, tg_loc from) {
  const tg_source *known = find_source(ctx, path);
  if (known) return known;
  tg_loc at = from.file ? from : (tg_loc){tg_strdup(ctx->arena, path), 1, 1};
  struct stat st;
  if (stat(path, &st) != 0)
    tg_error(ctx, at, "cannot open '%s': %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) tg_error(ctx, at, "cannot read '%s': it is a directory", path);
  if (!S_ISREG(st.st_mode)) tg_error(ctx, at, "cannot read '%s': not a regular file", path);
  if (st.st_size > TG_MAX_FILE_BYTES)
    tg_error(ctx, at, "'%s' is too large (%lld bytes; the limit is %d)", path,
             (long long)st.st_size, TG_MAX_FILE_BYTES);
  FILE *f = fopen(path, "rb");
  if (!f) tg_error(ctx, at, "cannot open '%s': %s", path, strerror(errno));
  size_t cap = (size_t)st.st_size + 1;
  char *buf = tg_alloc(ctx->arena, cap + 1);
  size_t len = fread(buf, 1, cap, f);
  bool bad = ferror(f) || len > (size_t)st.st_size;
  fclose(f);
  if (bad) tg_error(ctx, at, "cannot read '%s': read failed or the file changed", path);
  tg_source *s = tg_alloc(ctx->arena, sizeof *s);
  s->path = tg_strdup(ctx->arena, path);
  s->text = buf;
  s->len = len;
  s->next = ctx->sources;
  ctx->sources = s;
  return s;
}

/* Length of a valid UTF-8 sequence starting at p (non-ASCII), or 0. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
  int n;
  unsigned min;
  unsigned c = p[0];
  if (c >= 0xc2 && c <= 0xdf) n = 2, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) n = 3, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, min = 0x10000;
  else return 0;
  if (end - p < n) return 0;
  unsigned cp = c & (0x3f >> (n - 1));
  for (int i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

void tg_source_check_text(tg_ctx *ctx, const tg_source *src) {
  const unsigned char *p = (const unsigned char *)src->text, *end = p + src->len;
  int line = 1, col = 1;
  while (p < end) {
    unsigned c = *p;
    int n = 1;
    if (c >= 0x80) {
      n = utf8_len(p, end);
      if (!n)
        tg_error(ctx, (tg_loc){src->path, line, col},
                 "this is not a text file: invalid UTF-8 byte 0x%02x", c);
    } else if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') {
      tg_error(ctx, (tg_loc){src->path, line, col},
               "this is not a text file: control byte 0x%02x", c);
    } else if (c == 0x7f) {
      tg_error(ctx, (tg_loc){src->path, line, col}, "this is not a text file: byte 0x7f");
    }
    /* Columns count bytes, as the lexer and the caret printer do. */
    if (c == '\n') line++, col = 1;
    else col += n;
    p += n;
  }
}

bool tg_why(char *why, size_t whylen, const char *fmt, ...) {
  if (why && whylen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return false;
}

int tg_usage_error(const char *prog, const char *fmt, ...) {
  fprintf(stderr, "%s: error: ", prog);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(see %s --help)\n", prog);
  return 2;
}
