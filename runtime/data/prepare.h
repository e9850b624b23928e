/* prepare.h: `tgrun prepare` (its command line: tools/tgrun_prepare.c),
 * which turns a text file into a data directory for training, and the
 * reading back of that directory's tokenizer.
 *
 * The directory holds, as nanoGPT's data/<name>/prepare.py makes them:
 *   train.bin       the first 90% of the text's characters, tokenized
 *   val.bin         the rest (token files in llm.c's format: tokens_file.h)
 *   tokenizer.json  how to turn ids back into text:
 *       {"kind": "char", "vocab_size": 65, "vocab": ["\n", " ", "!", ...]}
 *       {"kind": "gpt2", "vocab_size": 50257,
 *        "encoder": "/abs/path/encoder.json", "vocab_bpe": "/abs/path/vocab.bpe"}
 * The split is by characters (code points) for both tokenizers, so that
 * char and gpt2 runs on the same text see the same validation text. */
#ifndef TG_PREPARE_H
#define TG_PREPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

typedef struct tg_prepare_opts {
  const char *tokenizer;  /* "char" or "gpt2" */
  const char *input;      /* the text, UTF-8 */
  const char *out;        /* the directory to write; made if missing */
  const char *gpt2_dir;   /* encoder.json and vocab.bpe; NULL: $TG_DATA/gpt2,
                           * else ../shared/data/gpt2 */
  double val_fraction;    /* the share of characters for val.bin, in [0, 1) */
} tg_prepare_opts;

/* Writes out/train.bin, out/val.bin and out/tokenizer.json, printing a line
 * per file to stdout.  False with a message naming the file and the
 * problem (an input that is not UTF-8 text, a missing GPT-2 file, a failed
 * write); nothing half-written is left behind. */
bool tg_prepare(const tg_prepare_opts *o, char *why, size_t whylen);

/* The tokenizer recorded in dir/tokenizer.json, or NULL with a message
 * naming that file (or the GPT-2 file it points to).  A directory of
 * llm.c's shards (NAME_train_NNNNNN.bin) without tokenizer.json gets
 * GPT-2's tokenizer from $TG_DATA/gpt2 (or ../shared/data/gpt2): llm.c's
 * version-1 token files are GPT-2 tokens. */
tg_tokenizer *tg_prepare_load_tokenizer(const char *dir, char *why, size_t whylen);

/* GPT-2's tokenizer from gpt2_dir's encoder.json and vocab.bpe (NULL:
 * $TG_DATA/gpt2, else ../shared/data/gpt2); *enc and *bpe get the two
 * paths (to free, also on failure).  NULL with a message that, for a
 * missing file, says where to get it. */
tg_tokenizer *tg_prepare_gpt2(const char *gpt2_dir, char **enc, char **bpe, char *why, size_t whylen);

/* Writes dir/tokenizer.json for t (enc and bpe: GPT-2's files, recorded as
 * absolute paths; unused for char) and prints a line saying so. */
bool tg_prepare_write_tokenizer(const char *dir, const tg_tokenizer *t, const char *enc, const char *bpe, char *why,
                                size_t whylen);

/* 1003854 -> "1,003,854", into buf. */
const char *tg_prepare_commas(uint64_t v, char buf[32]);

#endif
