/* prepare.h: `tgrun prepare`, which turns a text file into a data directory
 * for training, and the reading back of that directory's tokenizer.
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

#include <stddef.h>

#include "tokenizer.h"

/* The command: argv[0] is the command's name ("prepare"), the options
 * follow (see the --help text in prepare.c).  Prints one line per file
 * written to stdout and errors to stderr; returns the exit status: 0, 1 for
 * a bad input or tokenizer file (or a failed write), 2 for bad usage. */
int tg_prepare_main(int argc, char **argv);

/* The tokenizer recorded in dir/tokenizer.json, or NULL with a message
 * naming that file (or the GPT-2 file it points to). */
tg_tokenizer *tg_prepare_load_tokenizer(const char *dir, char *why, size_t whylen);

#endif
