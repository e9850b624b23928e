/* tokenizer_char.c: nanoGPT's character level tokenizer.
 *
 * nanoGPT's prepare.py takes chars = sorted(set(text)) over the decoded
 * text, so the vocabulary is code points (not bytes), in code point order,
 * and id i is the i-th of them.  Lookups go through a direct table for
 * ASCII, which is nearly all of English text, and a binary search above. */
#include "tokenizer.h"
#include "tokenizer_impl.h"

#include "alloc.h"
#include "diag.h" /* tg_why */
#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tg_tok_char {
  uint32_t *cps;      /* the vocabulary, ascending; id = index */
  int32_t ascii[128]; /* id of each ASCII code point, or -1 */
};

static bool char_encode(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, char *why,
                        size_t whylen);
static void char_free(tg_tokenizer *t);

/* Builds the tokenizer from n ascending code points (taking cps). */
static tg_tokenizer *from_code_points(const char *name, uint32_t *cps, int32_t n) {
  tg_tokenizer *t = tg_xmalloc(sizeof *t);
  memset(t, 0, sizeof *t);
  t->kind = TG_TOK_CHAR;
  t->encode = char_encode;
  t->free_kind = char_free;
  t->source = strcpy(tg_xmalloc(strlen(name) + 1), name);
  t->n_vocab = n;
  t->chr = tg_xmalloc(sizeof *t->chr);
  t->chr->cps = cps;
  for (int c = 0; c < 128; c++) t->chr->ascii[c] = -1;
  t->piece_off = tg_xmalloc(((size_t)n + 1) * sizeof *t->piece_off);
  t->pieces = tg_xmalloc((size_t)n * 4);
  uint32_t at = 0;
  for (int32_t i = 0; i < n; i++) {
    if (cps[i] < 128) t->chr->ascii[cps[i]] = i;
    t->piece_off[i] = at;
    at += (uint32_t)tg_utf8_encode(cps[i], t->pieces + at);
  }
  t->piece_off[n] = at;
  return t;
}

/* "U+00E9 'é'", or without the glyph for control characters, for messages. */
static const char *describe(uint32_t cp, char buf[32]) {
  char u[5] = {0};
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
    snprintf(buf, 32, "U+%04X", (unsigned)cp);
  } else {
    tg_utf8_encode(cp, u);
    snprintf(buf, 32, "U+%04X '%s'", (unsigned)cp, u);
  }
  return buf;
}

tg_tokenizer *tg_tok_char_from_text(const char *name, const char *text, size_t len, char *why,
                                    size_t whylen) {
  /* A bitmap of the code points seen: 136 KB, and one pass over the text
   * however large it is. */
  enum { NCP = 0x110000 };
  uint8_t *seen = calloc(NCP / 8, 1);
  if (!seen) {
    tg_why(why, whylen, "out of memory");
    return NULL;
  }
  const unsigned char *u = (const unsigned char *)text;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    int k = tg_utf8_decode(u + i, len - i, &cp);
    if (!k) {
      tg_why(why, whylen, "%s: not UTF-8 text: byte offset %zu (0x%02X) does not start a valid "
             "UTF-8 character", name, i, u[i]);
      free(seen);
      return NULL;
    }
    seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    i += (size_t)k;
  }
  int32_t n = 0;
  for (uint32_t cp = 0; cp < NCP; cp++) n += seen[cp >> 3] >> (cp & 7) & 1;
  uint32_t *cps = tg_xmalloc((size_t)n * sizeof *cps);
  n = 0;
  for (uint32_t cp = 0; cp < NCP; cp++)
    if (seen[cp >> 3] >> (cp & 7) & 1) cps[n++] = cp;
  free(seen);
  return from_code_points(name, cps, n);
}

tg_tokenizer *tg_tok_char_from_symbols(const char *name, const char *const *symbols,
                                       const size_t *lens, int n, char *why, size_t whylen) {
  if (n < 1) {
    tg_why(why, whylen, "%s: the vocabulary is empty", name);
    return NULL;
  }
  uint32_t *cps = tg_xmalloc((size_t)n * sizeof *cps);
  for (int i = 0; i < n; i++) {
    uint32_t cp = 0;
    int k = lens[i] ? tg_utf8_decode((const unsigned char *)symbols[i], lens[i], &cp) : 0;
    char a[32], b[32];
    if (!k || (size_t)k != lens[i]) {
      tg_why(why, whylen, "%s: vocabulary entry %d is not exactly one UTF-8 character", name, i);
    } else if (i && cp <= cps[i - 1]) {
      tg_why(why, whylen, "%s: vocabulary entry %d (%s) does not come after entry %d (%s): the "
             "symbols must be distinct and in code point order", name, i, describe(cp, a), i - 1,
             describe(cps[i - 1], b));
    } else {
      cps[i] = cp;
      continue;
    }
    free(cps);
    return NULL;
  }
  return from_code_points(name, cps, n);
}

static bool char_encode(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, char *why,
                        size_t whylen) {
  const tg_tok_char *c = t->chr;
  const unsigned char *u = (const unsigned char *)text;
  /* At most one id per byte: allocate that and shrink at the end. */
  int32_t *out = tg_xmalloc((len ? len : 1) * sizeof *out);
  size_t m = 0;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    int32_t id = -1;
    int k = tg_utf8_decode(u + i, len - i, &cp);
    if (!k) {
      tg_why(why, whylen, "not UTF-8 text: byte offset %zu (0x%02X) does not start a valid UTF-8 "
             "character", i, u[i]);
      free(out);
      return false;
    }
    if (cp < 128) {
      id = c->ascii[cp];
    } else {
      int32_t lo = 0, hi = t->n_vocab;
      while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (c->cps[mid] < cp) lo = mid + 1;
        else hi = mid;
      }
      if (lo < t->n_vocab && c->cps[lo] == cp) id = lo;
    }
    if (id < 0) {
      char d[32];
      tg_why(why, whylen, "character %s at byte offset %zu is not in the vocabulary of %s (%ld "
             "symbols)", describe(cp, d), i, t->source, (long)t->n_vocab);
      free(out);
      return false;
    }
    out[m++] = id;
    i += (size_t)k;
  }
  *ids = tg_xrealloc(out, (m ? m : 1) * sizeof *out);
  *n = m;
  return true;
}

static void char_free(tg_tokenizer *t) {
  if (!t->chr) return;
  free(t->chr->cps);
  free(t->chr);
}
