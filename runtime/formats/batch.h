/* batch.h: a batch of token ids and targets, as a safetensors file with two
 * int32 tensors "idx" and "targets" of one shape [B, T]. */
#ifndef TG_BATCH_H
#define TG_BATCH_H

#include "diag.h"

typedef struct tg_batch {
  int64_t B, T;
  int32_t *idx, *targets; /* B·T each, row-major */
} tg_batch;

/* Reads and checks a batch file; bails through ctx naming the file and the
 * tensor on anything unexpected. */
tg_batch *tg_batch_load(tg_ctx *ctx, const char *path);
/* Checks that every id lies in [0, vocab); path is the batch file, for the
 * message. */
void tg_batch_check_ids(tg_ctx *ctx, const tg_batch *b, const char *path, int64_t vocab);
void tg_batch_free(tg_batch *b);

#endif
