/* corpus.h: a split of the training data as an ordered list of token
 * files (shards), so that a corpus is not limited to one file's 2^31
 * tokens: llm.c's FineWeb 10B is about a hundred files of 10^8 tokens,
 * named fineweb_train_000001.bin, ..., fineweb_val_000000.bin.
 *
 * Which files make a split (tg_corpus_open):
 *   - a pattern (train.cfg's train_files / val_files), a glob taken as
 *     written (relative paths from the current directory), its matches in
 *     name order;
 *   - else DIR/<split>.bin when it exists (what `tgrun prepare` writes for
 *     a small corpus, and what tg always read);
 *   - else DIR/<split>_NNN.bin and DIR/NAME_<split>_NNN.bin, in name order
 *     (`tgrun prepare --shard-tokens` and llm.c's dev/data scripts).
 * When every matched name ends in a number before ".bin", the numbers must
 * run without a gap: a shard missing from the middle of a download is
 * reported by its number rather than silently skipped.
 *
 * Counts are uint64_t throughout: one shard holds at most INT32_MAX tokens
 * (its header's count), the corpus any number of them. */
#ifndef TG_CORPUS_H
#define TG_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokens_file.h"

typedef struct tg_corpus {
  char *name;         /* what it was opened as (a directory and split, or a pattern), for messages */
  tg_tokens **shards; /* in reading order */
  int n_shards;
  uint64_t n;         /* tokens in all shards */
  uint64_t largest;   /* tokens in the largest shard */
} tg_corpus;

/* Opens the shards of split ("train" or "val") from dir, or those that
 * pattern matches when pattern is non-empty; every id is checked to lie
 * below vocab when vocab > 0.  NULL with a message naming the directory,
 * the pattern or the file (and for a gap, the missing shard's number). */
tg_corpus *tg_corpus_open(const char *dir, const char *split, const char *pattern, int32_t vocab, char *why,
                          size_t whylen);

/* A corpus of shards already open, in that order; it takes them over
 * (tg_corpus_close closes them).  For tests and tools. */
tg_corpus *tg_corpus_of(const char *name, tg_tokens **shards, int n_shards);

void tg_corpus_close(tg_corpus *c);

/* Which files tg_corpus_open would read, without opening them: a
 * NULL-terminated array of paths to free with tg_corpus_free_paths, or NULL
 * with a message. */
char **tg_corpus_paths(const char *dir, const char *split, const char *pattern, char *why, size_t whylen);
void tg_corpus_free_paths(char **paths);

#endif
