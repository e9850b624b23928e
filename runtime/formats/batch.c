/* batch.c: reading a batch of token ids (see batch.h).
 *
 * Token ids index the embedding table and pick the target logit, so an id
 * outside the vocabulary would read out of bounds or silently score
 * nothing: every id is checked here, once, before any step runs. */
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "names.h" /* the tensors are the graph inputs they fill */
#include "safetensors.h"

void tg_batch_free(tg_batch *b) {
  if (!b) return;
  free(b->idx);
  free(b->targets);
  free(b);
}

/* Copies one [B, T] int32 tensor out of the file (its data may be
 * unaligned). */
static int32_t *take(tg_ctx *ctx, const tg_st_file *f, const char *name, int64_t B, int64_t T) {
  tg_loc at = {f->path, 0, 0};
  const tg_st_tensor *t = tg_st_find(f, name);
  if (!t) tg_error(ctx, at, "tensor '%s' is missing: a batch holds int32 'idx' and 'targets'", name);
  if (t->dtype != TG_I32)
    tg_error(ctx, at, "tensor '%s' has dtype %s; token ids are I32", name, tg_dtype_name(t->dtype));
  if (t->rank != 2 || t->shape[0] != B || t->shape[1] != T)
    tg_error(ctx, at, "tensor '%s' must have the shape [%lld, %lld] of 'idx'", name,
             (long long)B, (long long)T);
  int32_t *v = malloc((size_t)(B * T) * sizeof *v + 1);
  if (!v) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  memcpy(v, t->data, (size_t)(B * T) * sizeof *v);
  return v;
}

static void check_ids(tg_ctx *ctx, const int32_t *v, const char *name, const tg_batch *b,
                      const char *path, int64_t vocab) {
  for (int64_t i = 0; i < b->B * b->T; i++)
    if (v[i] < 0 || v[i] >= vocab)
      tg_error(ctx, (tg_loc){path, 0, 0},
               "tensor '%s': id %d at [%lld, %lld] is outside the vocabulary [0, %lld)", name,
               (int)v[i], (long long)(i / b->T), (long long)(i % b->T), (long long)vocab);
}

void tg_batch_check_ids(tg_ctx *ctx, const tg_batch *b, const char *path, int64_t vocab) {
  check_ids(ctx, b->idx, TG_INPUT_IDX, b, path, vocab);
  check_ids(ctx, b->targets, TG_INPUT_TARGETS, b, path, vocab);
}

tg_batch *tg_batch_load(tg_ctx *ctx, const char *path) {
  tg_st_file *f = tg_st_read(ctx, path);
  tg_batch *b = calloc(1, sizeof *b);
  if (!b) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  jmp_buf here, *outer = ctx->bail;
  ctx->bail = &here;
  if (setjmp(here)) {
    ctx->bail = outer;
    tg_batch_free(b);
    tg_st_free(f);
    tg_bail(ctx);
  }
  tg_loc at = {f->path, 0, 0};
  const tg_st_tensor *idx = tg_st_find(f, TG_INPUT_IDX);
  if (!idx) tg_error(ctx, at, "tensor 'idx' is missing: a batch holds int32 'idx' and 'targets'");
  if (idx->rank != 2 || idx->shape[0] < 1 || idx->shape[1] < 1)
    tg_error(ctx, at, "tensor 'idx' must be a non-empty [B, T] matrix");
  for (int i = 0; i < f->n_tensors; i++)
    if (strcmp(f->tensors[i].name, TG_INPUT_IDX) && strcmp(f->tensors[i].name, TG_INPUT_TARGETS))
      tg_error(ctx, at, "tensor '%s' does not belong in a batch (only 'idx' and 'targets')",
               f->tensors[i].name);
  b->B = idx->shape[0];
  b->T = idx->shape[1];
  b->idx = take(ctx, f, TG_INPUT_IDX, b->B, b->T);
  b->targets = take(ctx, f, TG_INPUT_TARGETS, b->B, b->T);
  ctx->bail = outer;
  tg_st_free(f);
  return b;
}
