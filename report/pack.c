/* pack.c: a text as the page embeds what it opens on demand (report.h:
 * tg_report_pack): gzip'ed with libdeflate, then base64'ed.
 *
 * GPT-2 124M's IR after each of its passes is megabytes of text, and the
 * page must stay a few: gzip makes it about a sixth, base64 (a JSON string
 * holds no bytes) four thirds of that, and the browser's own
 * DecompressionStream("gzip") opens it when the reader asks (page.js).
 * One compressor and its output buffer serve every text (tgc packs the IR
 * after each of 14 passes: a compressor's tables each time were fresh
 * memory, a page fault per 4 KB).
 * libdeflate's fastest level, not zlib's: the page is made at every
 * --report html, and on GPT-2's IR text libdeflate's level 1 takes half
 * of zlib's level 1 time and makes a seventh less (zlib's is within a
 * fifth of its level 6's size at a third of its time).  A whole buffer in,
 * a whole buffer out: what libdeflate is made for. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <libdeflate.h>

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

struct tg_report_packer {
  struct libdeflate_compressor *deflate;
  unsigned char *zipped; /* grown as needed, reused */
  size_t cap;
};

tg_report_packer *tg_report_packer_new(void) {
  tg_report_packer *p = tg_xcalloc(1, sizeof *p);
  p->deflate = libdeflate_alloc_compressor(1);
  if (!p->deflate) {
    free(p);
    return NULL;
  }
  return p;
}

void tg_report_packer_free(tg_report_packer *p) {
  if (!p) return;
  libdeflate_free_compressor(p->deflate);
  free(p->zipped);
  free(p);
}

char *tg_report_pack(tg_report_packer *p, tg_arena *arena, const char *text, size_t n) {
  /* gzip's header and trailer: what DecompressionStream("gzip") reads */
  size_t cap = libdeflate_gzip_compress_bound(p->deflate, n);
  if (cap > p->cap) {
    p->zipped = tg_xrealloc(p->zipped, cap);
    p->cap = cap;
  }
  size_t len = libdeflate_gzip_compress(p->deflate, text, n, p->zipped, p->cap);
  return len ? base64(arena, p->zipped, len) : NULL;
}
