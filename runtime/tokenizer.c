/* tokenizer.c: what the two tokenizers share: dispatch, decoding through
 * the table of pieces, and UTF-8.
 *
 * Decoding needs nothing kind-specific because every id stands for a fixed
 * byte string; only encoding differs (tokenizer_char.c, tokenizer_bpe.c). */
#include "tokenizer.h"
#include "ir.h" /* tg_xmalloc, tg_why */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tg_tok_kind tg_tok_kind_of(const tg_tokenizer *t) { return t->kind; }

const char *tg_tok_kind_name(tg_tok_kind k) { return k == TG_TOK_CHAR ? "char" : "gpt2"; }

int32_t tg_tok_vocab_size(const tg_tokenizer *t) { return t->n_vocab; }

const char *tg_tok_source(const tg_tokenizer *t) { return t->source; }

bool tg_tok_encode(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n,
                   char *why, size_t whylen) {
  if (t->kind == TG_TOK_CHAR) return tg_tok_char_encode(t, text, len, ids, n, why, whylen);
  tg_tok_gpt2_encode(t, text, len, ids, n);
  return true;
}

const char *tg_tok_piece(const tg_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_vocab) return NULL;
  *len = t->piece_off[id + 1] - t->piece_off[id];
  return t->pieces + t->piece_off[id];
}

bool tg_tok_decode(const tg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
                   char *why, size_t whylen) {
  /* Two passes, so the output is allocated once and a bad id is reported
   * before anything is built. */
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->n_vocab)
      return tg_why(why, whylen, "%s: token %zu is %ld, outside the vocabulary [0, %ld)",
                    t->source, i, (long)ids[i], (long)t->n_vocab);
    total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
  }
  char *out = malloc(total + 1);
  if (!out) return tg_why(why, whylen, "out of memory decoding %zu tokens", n);
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
    memcpy(out + at, t->pieces + t->piece_off[ids[i]], k);
    at += k;
  }
  out[at] = 0;
  *text = out;
  *len = at;
  return true;
}

void tg_tok_free(tg_tokenizer *t) {
  if (!t) return;
  tg_tok_char_free(t->chr);
  tg_tok_bpe_free(t->bpe);
  free(t->source);
  free(t->piece_off);
  free(t->pieces);
  free(t);
}

/* ---- UTF-8 ---------------------------------------------------------------- */

int tg_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned char c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  /* The ranges of the second byte follow Unicode's table of well-formed
   * sequences (3.9, D92), which rules out overlong forms, surrogates and
   * code points past U+10FFFF without decoding first. */
  int len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 0;
  if (n < (size_t)len || s[1] < lo || s[1] > hi) return 0;
  uint32_t v = c & (0x7F >> len);
  v = v << 6 | (s[1] & 0x3F);
  for (int i = 2; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3F);
  }
  *cp = v;
  return len;
}

size_t tg_utf8_check(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    if (u[i] < 0x80) {
      i++;
      continue;
    }
    uint32_t cp;
    int k = tg_utf8_decode(u + i, n - i, &cp);
    if (!k) return i;
    i += (size_t)k;
  }
  return n;
}

int tg_utf8_encode(uint32_t cp, char *out) {
  unsigned char *o = (unsigned char *)out;
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | cp >> 6);
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | cp >> 12);
    o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | cp >> 18);
  o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* The tokenizer files and the text to prepare are read whole. */
bool tg_read_whole_file(const char *path, char **buf, size_t *size, char *why, size_t whylen) {
  FILE *f = fopen(path, "rb");
  if (!f) return tg_why(why, whylen, "cannot open %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *p = tg_xmalloc(cap);
  for (;;) {
    if (n == cap) p = tg_xrealloc(p, cap *= 2);
    size_t got = fread(p + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  bool ok = !ferror(f);
  if (!ok) tg_why(why, whylen, "cannot read %s: %s", path, strerror(errno));
  fclose(f);
  if (!ok) {
    free(p);
    return false;
  }
  *buf = p;
  *size = n;
  return true;
}
