/* dataloader.c: batches keyed by (seed, global batch index) from a corpus
 * of shards, in random (nanoGPT) or sequential (llm.c) order; see
 * dataloader.h.
 *
 * Nothing is cached between batches: locating a batch walks the shard
 * list (a hundred entries for FineWeb 10B), which costs nothing next to
 * copying B * T tokens, and keeps every batch a function of its index. */
#include "dataloader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "alloc.h"
#include "diag.h"

/* The streams of the shard orders of the shuffled order, one an epoch;
 * kept apart from training streams (below 2^63) and evaluation streams
 * (2^63 | k, k < 2^62 in any real run). */
#define SHUFFLE_STREAM (TG_LOADER_EVAL_STREAM | (UINT64_C(1) << 62))

struct tg_loader {
  const tg_corpus *c;
  tg_data_order order;
  int64_t B, T;
  int rank, nranks;
  uint64_t seed;
  uint64_t position;
};

static const char *const order_names[] = {"random", "sequential", "shuffled"};

const char *tg_data_order_name(tg_data_order o) {
  return (unsigned)o < sizeof order_names / sizeof *order_names ? order_names[o] : "?";
}

bool tg_data_order_parse(const char *s, tg_data_order *o) {
  for (int i = 0; i < 3; i++)
    if (!strcmp(s, order_names[i])) {
      *o = (tg_data_order)i;
      return true;
    }
  return false;
}

/* ---- random order -------------------------------------------------------------------- */

/* The starting points of a sequence of T + 1 tokens in a shard of n. */
static uint64_t starts_in(uint64_t n, int64_t T) { return n > (uint64_t)T ? n - (uint64_t)T : 0; }

static uint64_t all_starts(const tg_corpus *c, int64_t T) {
  uint64_t s = 0;
  for (int i = 0; i < c->n_shards; i++) s += starts_in(c->shards[i]->n, T);
  return s;
}

/* The u-th starting point (u < all_starts) as a shard and an offset in it. */
static void start_at(const tg_corpus *c, int64_t T, uint64_t u, int *shard, uint64_t *off) {
  int i = 0;
  for (;; i++) {
    uint64_t s = starts_in(c->shards[i]->n, T);
    if (u < s) break;
    u -= s;
  }
  *shard = i;
  *off = u;
}

/* Seeds r for stream and moves it to the start of rank's slice.  The ranks
 * before this one draw their offsets first; those draws are made and
 * dropped, since tg_rng_below's rejections make the stream's position
 * after them unknowable without drawing (rank * B draws, cheap next to
 * copying B * T tokens). */
static void slice_start(tg_rng *r, uint64_t seed, uint64_t stream, int rank, int64_t B, uint64_t starts) {
  tg_rng_seed(r, seed, stream);
  int64_t skip = (int64_t)rank * B;
  for (int64_t i = 0; i < skip; i++) (void)tg_rng_below(r, starts);
}

void tg_loader_offsets(const tg_corpus *c, int64_t B, int64_t T, int rank, uint64_t seed, uint64_t stream,
                       int64_t *off) {
  uint64_t starts = all_starts(c, T);
  tg_rng r;
  slice_start(&r, seed, stream, rank, B, starts);
  for (int64_t b = 0; b < B; b++) {
    int shard;
    uint64_t o;
    start_at(c, T, tg_rng_below(&r, starts), &shard, &o);
    for (int i = 0; i < shard; i++) o += c->shards[i]->n;
    off[b] = (int64_t)o;
  }
}

static void copy_row(const uint16_t *seq, int64_t T, int32_t *x, int32_t *y) {
  for (int64_t t = 0; t < T; t++) {
    x[t] = seq[t];
    y[t] = seq[t + 1];
  }
}

static void fill_random(const tg_corpus *c, int64_t B, int64_t T, int rank, uint64_t seed, uint64_t stream,
                        int32_t *idx, int32_t *targets) {
  uint64_t starts = all_starts(c, T);
  tg_rng r;
  slice_start(&r, seed, stream, rank, B, starts);
  for (int64_t b = 0; b < B; b++) {
    int shard;
    uint64_t o;
    start_at(c, T, tg_rng_below(&r, starts), &shard, &o);
    copy_row(c->shards[shard]->ids + o, T, idx + b * T, targets + b * T);
  }
}

/* ---- sequential orders ----------------------------------------------------------------- */

/* Whole steps of step_tokens (+ 1 for the last target) a shard of n holds. */
static uint64_t steps_in(uint64_t n, uint64_t step_tokens) { return n > step_tokens ? (n - 1) / step_tokens : 0; }

/* Global batch g's shard, its offset there (where slice 0 starts) and its
 * epoch.  An epoch holds the same steps in any shard order. */
static void locate(const tg_corpus *c, bool shuffle, uint64_t seed, uint64_t step_tokens, uint64_t g, int *shard,
                   uint64_t *off, uint64_t *epoch) {
  uint64_t per_epoch = 0;
  for (int i = 0; i < c->n_shards; i++) per_epoch += steps_in(c->shards[i]->n, step_tokens);
  *epoch = g / per_epoch;
  uint64_t j = g % per_epoch;
  int *order = tg_xmalloc((size_t)c->n_shards * sizeof *order);
  for (int i = 0; i < c->n_shards; i++) order[i] = i;
  if (shuffle) { /* Fisher-Yates from the epoch's own stream */
    tg_rng r;
    tg_rng_seed(&r, seed, SHUFFLE_STREAM | *epoch);
    for (int i = c->n_shards - 1; i > 0; i--) {
      int k = (int)tg_rng_below(&r, (uint64_t)i + 1), t = order[i];
      order[i] = order[k];
      order[k] = t;
    }
  }
  int i = 0;
  for (;; i++) {
    uint64_t s = steps_in(c->shards[order[i]]->n, step_tokens);
    if (j < s) break;
    j -= s;
  }
  *shard = order[i];
  *off = j * step_tokens;
  free(order);
}

static void fill_sequential(const tg_corpus *c, bool shuffle, int64_t B, int64_t T, int slice, int slices,
                            uint64_t seed, uint64_t g, int32_t *idx, int32_t *targets) {
  int shard;
  uint64_t off, epoch, bt = (uint64_t)B * (uint64_t)T;
  locate(c, shuffle, seed, bt * (uint64_t)slices, g, &shard, &off, &epoch);
  const uint16_t *base = c->shards[shard]->ids + off + (uint64_t)slice * bt;
  for (int64_t b = 0; b < B; b++) copy_row(base + b * T, T, idx + b * T, targets + b * T);
}

/* ---- the loader ------------------------------------------------------------------------- */

bool tg_loader_check(const tg_corpus *c, tg_data_order order, int64_t B, int64_t T, int rank, int nranks,
                     char *why, size_t whylen) {
  if (B < 1) return tg_why(why, whylen, "batch size %lld: must be at least 1", (long long)B);
  if (T < 1) return tg_why(why, whylen, "sequence length %lld: must be at least 1", (long long)T);
  if (nranks < 1) return tg_why(why, whylen, "%d ranks: must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return tg_why(why, whylen, "rank %d: must lie in [0, %d)", rank, nranks);
  /* nranks * B offsets are drawn, and callers size idx as B * T: keep both
   * products, and the sequences' T + 1, clear of overflow. */
  if (T == INT64_MAX || B > INT64_MAX / nranks || B * nranks > INT64_MAX / (T + 1))
    return tg_why(why, whylen, "%d ranks x batch %lld x sequence %lld: too large", nranks, (long long)B,
                  (long long)T);
  const char *name = c->n_shards == 1 && c->shards[0]->path ? c->shards[0]->path : c->name;
  const char *tokens = c->n_shards == 1 ? "tokens" : "tokens in its largest shard";
  if (c->largest <= (uint64_t)T)
    return tg_why(why, whylen, "%s: %llu %s, too few for one sequence of T + 1 = %lld tokens (T = %lld)", name,
                  (unsigned long long)c->largest, tokens, (long long)T + 1, (long long)T);
  if (order != TG_ORDER_RANDOM && c->largest <= (uint64_t)(B * nranks * T))
    return tg_why(why, whylen,
                  "%s: %llu %s, too few for one step in %s order, which reads %d slices x B %lld x T %lld + 1 = "
                  "%lld tokens from one shard (fewer slices or a smaller batch fit, or data_order = random)",
                  name, (unsigned long long)c->largest, tokens, tg_data_order_name(order), nranks, (long long)B,
                  (long long)T, (long long)(B * nranks * T + 1));
  return true;
}

tg_loader *tg_loader_new(const tg_corpus *c, tg_data_order order, int64_t B, int64_t T, int rank, int nranks,
                         uint64_t seed, uint64_t position, char *why, size_t whylen) {
  if (!tg_loader_check(c, order, B, T, rank, nranks, why, whylen)) return NULL;
  if (position >= TG_LOADER_EVAL_STREAM) {
    tg_why(why, whylen, "loader position %llu: must be below 2^63", (unsigned long long)position);
    return NULL;
  }
  tg_loader *l = malloc(sizeof *l);
  if (!l) {
    tg_why(why, whylen, "out of memory");
    return NULL;
  }
  *l = (tg_loader){c, order, B, T, rank, nranks, seed, position};
  return l;
}

void tg_loader_next(tg_loader *l, int32_t *idx, int32_t *targets) {
  if (l->order == TG_ORDER_RANDOM)
    fill_random(l->c, l->B, l->T, l->rank, l->seed, l->position, idx, targets);
  else
    fill_sequential(l->c, l->order == TG_ORDER_SHUFFLED, l->B, l->T, l->rank, l->nranks, l->seed, l->position, idx,
                    targets);
  l->position++;
}

uint64_t tg_loader_position(const tg_loader *l) { return l->position; }

void tg_loader_where(const tg_loader *l, int *shard, uint64_t *offset, uint64_t *epoch) {
  uint64_t bt = (uint64_t)l->B * (uint64_t)l->T;
  if (l->order == TG_ORDER_RANDOM) {
    tg_rng r;
    uint64_t starts = all_starts(l->c, l->T);
    slice_start(&r, l->seed, l->position, l->rank, l->B, starts);
    start_at(l->c, l->T, tg_rng_below(&r, starts), shard, offset);
    *epoch = 0;
    return;
  }
  locate(l->c, l->order == TG_ORDER_SHUFFLED, l->seed, bt * (uint64_t)l->nranks, l->position, shard, offset, epoch);
  *offset += (uint64_t)l->rank * bt;
}

void tg_loader_free(tg_loader *l) { free(l); }

void tg_loader_eval_batch(const tg_corpus *c, tg_data_order order, int64_t B, int64_t T, uint64_t seed, int64_t k,
                          int rank, int nranks, int32_t *idx, int32_t *targets) {
  char why[512];
  if (!tg_loader_check(c, order, B, T, rank, nranks, why, sizeof why) || k < 0) {
    if (k < 0) snprintf(why, sizeof why, "evaluation batch %lld: must be at least 0", (long long)k);
    fprintf(stderr, "tg_loader_eval_batch: %s\n", why);
    abort();
  }
  if (order == TG_ORDER_RANDOM)
    fill_random(c, B, T, rank, seed, TG_LOADER_EVAL_STREAM | (uint64_t)k, idx, targets);
  else
    fill_sequential(c, false, B, T, rank, nranks, seed, (uint64_t)k, idx, targets);
}
