/* sbuf.c: a growing string (sbuf.h). */
#include "sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

static void reserve(tg_sbuf *b, size_t more) {
  if (b->n + more + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + more + 1) cap *= 2;
  b->s = tg_xrealloc(b->s, cap);
  b->cap = cap;
}

void tg_sb_put(tg_sbuf *b, const void *data, size_t n) {
  reserve(b, n);
  memcpy(b->s + b->n, data, n);
  b->n += n;
  b->s[b->n] = 0;
}

void tg_sb_puts(tg_sbuf *b, const char *s) { tg_sb_put(b, s, strlen(s)); }

void tg_sb_printf(tg_sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0) return;
  reserve(b, (size_t)need);
  va_start(ap, fmt);
  vsnprintf(b->s + b->n, (size_t)need + 1, fmt, ap);
  va_end(ap);
  b->n += (size_t)need;
}

const char *tg_sb_text(const tg_sbuf *b) { return b->s ? b->s : ""; }

char *tg_sb_take(tg_sbuf *b) {
  char *s = b->s ? b->s : tg_xcalloc(1, 1);
  memset(b, 0, sizeof *b);
  return s;
}

void tg_sb_free(tg_sbuf *b) {
  free(b->s);
  memset(b, 0, sizeof *b);
}
