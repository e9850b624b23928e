/* pack.c: a text as the page embeds what it opens on demand (report.h:
 * tg_report_pack): gzip'ed with zlib, then base64'ed.
 *
 * GPT-2 124M's IR after each of its passes is megabytes of text, and the
 * page must stay a few: gzip makes it about a sixth, base64 (a JSON string
 * holds no bytes) four thirds of that, and the browser's own
 * DecompressionStream("gzip") opens it when the reader asks (page.js).
 * The fastest level: the page is made at every --report html, and level 1
 * is within a fifth of level 6's size for IR text at a third of its time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "alloc.h"
#include "report.h"

static const char base64_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(tg_arena *arena, const unsigned char *in, size_t n) {
  char *out = tg_alloc(arena, (n + 2) / 3 * 4 + 1), *o = out;
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
    *o++ = base64_digits[v >> 18], *o++ = base64_digits[v >> 12 & 63];
    *o++ = base64_digits[v >> 6 & 63], *o++ = base64_digits[v & 63];
  }
  if (i < n) { /* one or two bytes left: padded with '=' */
    unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0);
    *o++ = base64_digits[v >> 18], *o++ = base64_digits[v >> 12 & 63];
    *o++ = i + 1 < n ? base64_digits[v >> 6 & 63] : '=';
    *o++ = '=';
  }
  *o = 0;
  return out;
}

char *tg_report_pack(tg_arena *arena, const char *text, size_t n) {
  z_stream z = {0};
  /* 15 + 16: a window of 32 KB, with gzip's header and trailer (what
   * DecompressionStream("gzip") reads) */
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return NULL;
  uLong cap = deflateBound(&z, (uLong)n);
  unsigned char *zipped = tg_xmalloc(cap);
  z.next_in = (Bytef *)(uintptr_t)text; /* zlib's next_in is not const; it only reads */
  z.avail_in = (uInt)n;
  z.next_out = zipped;
  z.avail_out = (uInt)cap;
  int done = deflate(&z, Z_FINISH);
  size_t len = cap - z.avail_out;
  deflateEnd(&z);
  char *out = done == Z_STREAM_END ? base64(arena, zipped, len) : NULL;
  free(zipped);
  return out;
}
