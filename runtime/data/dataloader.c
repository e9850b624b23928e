/* dataloader.c: nanoGPT's get_batch with batches keyed by (seed, global
 * batch index); see dataloader.h. */
#include "dataloader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "rng.h"
#include "alloc.h"
#include "diag.h"

struct tg_loader {
  const tg_tokens *toks;
  int64_t B, T;
  int rank, nranks;
  uint64_t seed;
  uint64_t position;
};

bool tg_loader_check(const tg_tokens *toks, int64_t B, int64_t T, int rank, int nranks, char *why,
                     size_t whylen) {
  if (B < 1) return tg_why(why, whylen, "batch size %lld: must be at least 1", (long long)B);
  if (T < 1) return tg_why(why, whylen, "sequence length %lld: must be at least 1", (long long)T);
  if (nranks < 1) return tg_why(why, whylen, "%d ranks: must be at least 1", nranks);
  if (rank < 0 || rank >= nranks)
    return tg_why(why, whylen, "rank %d: must lie in [0, %d)", rank, nranks);
  /* nranks * B offsets are drawn, and callers size idx as B * T: keep both
   * products, and the sequences' T + 1, clear of overflow. */
  if (T == INT64_MAX || B > INT64_MAX / nranks || B * nranks > INT64_MAX / (T + 1))
    return tg_why(why, whylen, "%d ranks x batch %lld x sequence %lld: too large", nranks,
                  (long long)B, (long long)T);
  const char *path = toks->path ? toks->path : "(tokens)";
  if ((uint64_t)T >= toks->n)
    return tg_why(why, whylen,
                  "%s: %zu tokens, too few for one sequence of T + 1 = %lld tokens (T = %lld)",
                  path, toks->n, (long long)T + 1, (long long)T);
  return true;
}

/* Seeds r for stream and moves it to the start of rank's slice.  The ranks
 * before this one draw their offsets first; those draws are made and
 * dropped, since tg_rng_below's rejections make the stream's position
 * after them unknowable without drawing (rank * B draws, cheap next to
 * copying B * T tokens). */
static void slice_start(tg_rng *r, uint64_t seed, uint64_t stream, int rank, int64_t B,
                        uint64_t starts) {
  tg_rng_seed(r, seed, stream);
  int64_t skip = (int64_t)rank * B;
  for (int64_t i = 0; i < skip; i++) (void)tg_rng_below(r, starts);
}

void tg_loader_offsets(size_t n, int64_t B, int64_t T, int rank, uint64_t seed, uint64_t stream,
                       int64_t *off) {
  /* n - T starting points, [0, n - T - 1]: nanoGPT's
   * torch.randint(len(data) - block_size). */
  uint64_t starts = (uint64_t)n - (uint64_t)T;
  tg_rng r;
  slice_start(&r, seed, stream, rank, B, starts);
  for (int64_t b = 0; b < B; b++) off[b] = (int64_t)tg_rng_below(&r, starts);
}

/* tg_loader_offsets and the copy in one pass, without a buffer. */
static void fill(const tg_tokens *toks, int64_t B, int64_t T, int rank, uint64_t seed,
                 uint64_t stream, int32_t *idx, int32_t *targets) {
  uint64_t starts = (uint64_t)toks->n - (uint64_t)T;
  tg_rng r;
  slice_start(&r, seed, stream, rank, B, starts);
  for (int64_t b = 0; b < B; b++) {
    const uint16_t *seq = toks->ids + tg_rng_below(&r, starts);
    int32_t *x = idx + b * T, *y = targets + b * T;
    for (int64_t t = 0; t < T; t++) {
      x[t] = seq[t];
      y[t] = seq[t + 1];
    }
  }
}

tg_loader *tg_loader_new(const tg_tokens *toks, int64_t B, int64_t T, int rank, int nranks,
                         uint64_t seed, uint64_t position, char *why, size_t whylen) {
  if (!tg_loader_check(toks, B, T, rank, nranks, why, whylen)) return NULL;
  if (position >= TG_LOADER_EVAL_STREAM) {
    tg_why(why, whylen, "loader position %llu: must be below 2^63",
           (unsigned long long)position);
    return NULL;
  }
  tg_loader *l = malloc(sizeof *l);
  if (!l) {
    tg_why(why, whylen, "out of memory");
    return NULL;
  }
  *l = (tg_loader){toks, B, T, rank, nranks, seed, position};
  return l;
}

void tg_loader_next(tg_loader *l, int32_t *idx, int32_t *targets) {
  fill(l->toks, l->B, l->T, l->rank, l->seed, l->position, idx, targets);
  l->position++;
}

uint64_t tg_loader_position(const tg_loader *l) { return l->position; }

void tg_loader_free(tg_loader *l) { free(l); }

void tg_loader_eval_batch(const tg_tokens *toks, int64_t B, int64_t T, uint64_t seed, int64_t k,
                          int rank, int nranks, int32_t *idx, int32_t *targets) {
  char why[512];
  if (!tg_loader_check(toks, B, T, rank, nranks, why, sizeof why) || k < 0) {
    if (k < 0) snprintf(why, sizeof why, "evaluation batch %lld: must be at least 0", (long long)k);
    fprintf(stderr, "tg_loader_eval_batch: %s\n", why);
    abort();
  }
  fill(toks, B, T, rank, seed, TG_LOADER_EVAL_STREAM | (uint64_t)k, idx, targets);
}
