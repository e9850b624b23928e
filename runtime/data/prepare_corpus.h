/* prepare_corpus.h: `tgrun prepare` for a corpus of documents (its command
 * line: tools/tgrun_prepare.c), as llm.c's dev/data/fineweb.py and
 * nanoGPT's data/openwebtext/prepare.py make one: documents from a
 * directory, a list of files or JSON lines (one document a line, its text
 * in a named field, as FineWeb and OpenWebText are distributed), each
 * preceded by GPT-2's <|endoftext|> (50256), tokenized on all cores and
 * written in shards of a chosen size:
 *
 *   OUT/NAME_val_000000.bin    the first shard, for validation (llm.c's rule)
 *   OUT/NAME_train_000001.bin  the rest, in order
 *   ...
 *   OUT/tokenizer.json         GPT-2's, written when the corpus is done
 *
 * Which input is what: a directory stands for its regular files (not
 * those whose name starts with '.'), in name order; a file whose name ends
 * in ".jsonl" holds one document a line; any other file is one document.
 *
 * An interruption loses at most the shard being filled: after each shard
 * OUT/prepare.state records where the next one starts (the document, and
 * how many of its tokens the shards already hold), and --resume goes on
 * from there, giving the same shards as a run without a break. */
#ifndef TG_PREPARE_CORPUS_H
#define TG_PREPARE_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tg_corpus_opts {
  const char *const *inputs; /* directories and files, in order */
  int n_inputs;
  const char *out;           /* the directory; made if missing */
  const char *name;          /* the shards' prefix; NULL: out's last component */
  const char *text_field;    /* the JSON field holding a document's text; NULL: "text" */
  const char *gpt2_dir;      /* as tg_prepare_opts's */
  int64_t shard_tokens;      /* tokens a shard (the last may hold fewer); 0: 10^8 as llm.c */
  int64_t max_shards;        /* stop after this many shards in all, resumable; 0: no limit */
  int threads;               /* tokenizing threads; 0: every core this process may use */
  bool resume;               /* go on from OUT/prepare.state */
  double progress_every;     /* seconds between progress lines on stderr; 0: 2 */
} tg_corpus_opts;

/* Prepares the corpus; prints a line per shard written to stdout and
 * progress lines (documents, tokens, MB/s, ETA) to stderr.  False with a
 * message naming the file and line of bad input (invalid JSON, a line
 * without the field, a field that is not a string), a missing input, or
 * a state that does not match the options. */
bool tg_prepare_corpus(const tg_corpus_opts *o, char *why, size_t whylen);

#endif
