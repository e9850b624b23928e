/* tokenizer_impl.h: inside a tokenizer, for tokenizer*.c only.
 *
 * Each kind's constructor (tokenizer_char.c, tokenizer_bpe.c) fills the
 * common table of pieces, which is all decoding needs (tokenizer.c), and
 * its own encode and free functions, which tokenizer.c calls through the
 * pointers: the common code calls down into no kind by name. */
#ifndef TG_TOKENIZER_IMPL_H
#define TG_TOKENIZER_IMPL_H

#include "tokenizer.h"

typedef struct tg_tok_char tg_tok_char; /* tokenizer_char.c */
typedef struct tg_tok_bpe tg_tok_bpe;   /* tokenizer_bpe.c */

struct tg_tokenizer {
  tg_tok_kind kind;
  char *source;        /* file name for messages */
  int32_t n_vocab;
  uint32_t *piece_off; /* id i is pieces[piece_off[i] .. piece_off[i + 1]) */
  char *pieces;
  tg_tok_char *chr;    /* kind char: code point -> id */
  tg_tok_bpe *bpe;     /* kind gpt2: merges and cache */
  /* the kind's encoder (false with a message for text it cannot encode) */
  bool (*encode)(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, char *why,
                 size_t whylen);
  void (*free_kind)(tg_tokenizer *t); /* frees chr or bpe */
};

#endif
