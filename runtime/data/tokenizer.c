/* tokenizer.c: what the two tokenizers share: dispatch, and decoding
 * through the table of pieces.
 *
 * Decoding needs nothing kind-specific because every id stands for a fixed
 * byte string; only encoding differs (tokenizer_char.c, tokenizer_bpe.c). */
#include "tokenizer.h"
#include "tokenizer_impl.h"

#include "diag.h" /* tg_why */

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
  return t->encode(t, text, len, ids, n, why, whylen);
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
  if (t->free_kind) t->free_kind(t);
  free(t->source);
  free(t->piece_off);
  free(t->pieces);
  free(t);
}
