/* tokens_file.h: token files in llm.c's format, so that tg and llm.c can
 * read each other's training data.
 *
 * The format (llm.c, dev/data/data_common.py): a header of 256 int32
 * little-endian values, [0] the magic 20240520, [1] the version 1, [2] the
 * number of tokens N, the rest zero; then N uint16 little-endian token ids.
 * So a file holds at most INT32_MAX tokens from a vocabulary of at most
 * 65,536 (GPT-2's 50,257 fits).  llm.c's other version, 7 (uint32 Llama 3
 * tokens under magic 20240801), is refused with a message saying so.
 *
 * The reader maps the file and checks everything before handing out a
 * token: magic, version, that the size is exactly header + 2N bytes (a
 * short file is reported as truncated), and, given a vocabulary size, that
 * every id lies below it.  Messages name the file and what is wrong. */
#ifndef TG_TOKENS_FILE_H
#define TG_TOKENS_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TG_TOKENS_MAGIC 20240520
#define TG_TOKENS_VERSION 1
#define TG_TOKENS_HEADER_BYTES 1024 /* 256 int32 */

typedef struct tg_tokens {
  char *path;
  const uint16_t *ids; /* n ids, inside the mapping; host order (little-endian hosts only) */
  size_t n;
  void *map; /* the whole file, read-only */
  size_t map_size;
} tg_tokens;

/* Writes ids[0 .. n) to path atomically: a temporary file in the same
 * directory, fsync, rename, fsync of the directory, so that a crash leaves
 * the old file or the new one, never a part.  Each id must lie in
 * [0, 65535] and n in [0, INT32_MAX].  Returns false with a message (the
 * old file, if any, is kept). */
bool tg_tokens_write(const char *path, const int32_t *ids, size_t n, char *why, size_t whylen);
/* The same from ids already uint16 (a shard being prepared). */
bool tg_tokens_write16(const char *path, const uint16_t *ids, size_t n, char *why, size_t whylen);

/* Maps and checks path; when vocab > 0 also checks that every id is below
 * it.  Returns NULL with a message naming the file on any problem. */
tg_tokens *tg_tokens_open(const char *path, int32_t vocab, char *why, size_t whylen);
void tg_tokens_close(tg_tokens *t);

#endif
