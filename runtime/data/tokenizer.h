/* tokenizer.h: text to token ids and back, for training data and samples.
 *
 * Two tokenizers share one interface:
 *   - char: nanoGPT's character level tokenizer.  The vocabulary is the
 *     sorted set of distinct Unicode code points of a text (Tiny
 *     Shakespeare has 65); id i is the i-th smallest.
 *   - gpt2: GPT-2's byte-level BPE, exactly as OpenAI's encoder.py and
 *     tiktoken's r50k_base, read from encoder.json and vocab.bpe.
 *
 * Every token id stands for a fixed byte string (its piece), so decoding is
 * the same for both: concatenate the pieces.  Encoding then decoding gives
 * back the input bytes exactly.
 *
 * gpt2 treats all input as ordinary text: "<|endoftext|>" in the input is
 * encoded as the 7 tokens of its characters, as encoder.py and tiktoken's
 * encode_ordinary do, never as TG_GPT2_EOT; a training loop that wants a
 * document separator appends TG_GPT2_EOT itself.  Decoding TG_GPT2_EOT
 * gives "<|endoftext|>".  Bytes that are not UTF-8 are encoded too, each as
 * a character of its own that is neither letter, number nor space (what
 * Python's errors="surrogateescape" makes of them), so any byte string
 * round-trips.  char, in contrast, refuses bytes that are not UTF-8 and
 * characters outside its vocabulary.
 *
 * Errors come back as a message in the caller's buffer (why, whylen), which
 * names the file and, where it helps, the line or byte offset.  A
 * tokenizer is not thread-safe: gpt2's encode fills a cache. */
#ifndef TG_TOKENIZER_H
#define TG_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TG_GPT2_VOCAB 50257
#define TG_GPT2_EOT 50256 /* <|endoftext|> */

typedef enum tg_tok_kind { TG_TOK_CHAR, TG_TOK_GPT2 } tg_tok_kind;

typedef struct tg_tokenizer tg_tokenizer;

/* ---- making one ---------------------------------------------------------- */

/* A char tokenizer whose vocabulary is every code point of text[0 .. len);
 * name (the file the text came from) is used in messages.  Fails on bytes
 * that are not UTF-8, naming the byte offset. */
tg_tokenizer *tg_tok_char_from_text(const char *name, const char *text, size_t len, char *why,
                                    size_t whylen);
/* A char tokenizer from its vocabulary: n strings, each one UTF-8 encoded
 * code point (lens[i] bytes), in strictly increasing order, as
 * tokenizer.json stores it.  name is that file, for messages. */
tg_tokenizer *tg_tok_char_from_symbols(const char *name, const char *const *symbols,
                                       const size_t *lens, int n, char *why, size_t whylen);
/* GPT-2's tokenizer from encoder.json (50,257 pieces) and vocab.bpe (the
 * merges, by rank); both are checked for consistency. */
tg_tokenizer *tg_tok_gpt2_load(const char *encoder_json, const char *vocab_bpe, char *why,
                               size_t whylen);
void tg_tok_free(tg_tokenizer *t);

/* ---- using one ----------------------------------------------------------- */

tg_tok_kind tg_tok_kind_of(const tg_tokenizer *t);
const char *tg_tok_kind_name(tg_tok_kind k); /* "char", "gpt2" */
int32_t tg_tok_vocab_size(const tg_tokenizer *t);
/* The file the tokenizer came from (for gpt2, encoder.json). */
const char *tg_tok_source(const tg_tokenizer *t);

/* Encodes text[0 .. len) into a malloc'ed array *ids of *n ids (the caller
 * frees it; *ids is non-NULL even when *n is 0).  Returns false with a
 * message on failure (char only: not UTF-8, or not in the vocabulary). */
bool tg_tok_encode(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n,
                   char *why, size_t whylen);
/* Decodes ids into a malloc'ed, NUL-terminated *text of *len bytes (which
 * may hold NULs).  Fails on an id outside [0, vocab size). */
bool tg_tok_decode(const tg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
                   char *why, size_t whylen);
/* The bytes id stands for (*len of them, not NUL-terminated), or NULL when
 * id is outside the vocabulary: for printing samples a token at a time.
 * One gpt2 piece can be part of a UTF-8 character. */
const char *tg_tok_piece(const tg_tokenizer *t, int32_t id, size_t *len);

#endif
