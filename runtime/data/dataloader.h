/* dataloader.h: training and evaluation batches from a corpus (one token
 * file or many shards, corpus.h), in one of three orders:
 *
 *   random      nanoGPT's get_batch (the default, and what tg always did):
 *               B sequences of T + 1 consecutive tokens, each starting at
 *               an offset drawn uniformly from the corpus's starting points
 *               (offsets [0, n_i - T - 1] of each shard i, so that no
 *               sequence straddles two shards; a single file gives exactly
 *               nanoGPT's [0, n - T - 1]), drawn independently, so two
 *               sequences may repeat or overlap.
 *   sequential  llm.c's DataLoader: the corpus read in order, shard after
 *               shard, every token once an epoch.  A step's global batch is
 *               the next S * B * T + 1 tokens of the current shard (S the
 *               slices: grad_accum x ranks), slice s taking the B rows that
 *               start at s * B * T, each row's targets the tokens after it.
 *               A shard's tail too short for a whole step is skipped, as
 *               llm.c skips it; after the last shard the next epoch starts.
 *   shuffled    sequential, the shards read in a seeded order that differs
 *               each epoch (llm.c shuffles its shards too; it also permutes
 *               the sequences inside a shard, which tg does not).
 *
 * idx[b][t] is the token at offset_b + t and targets[b][t] the one after
 * it, both int32 row-major [B, T].
 *
 * Where a batch comes from.  Every batch is a pure function of the seed,
 * its step (or evaluation batch) and its slice, never of earlier draws:
 *
 *   - Training step s (0-based) is global batch s.  In random order it
 *     draws one stream, tg_rng_seed(seed, s): slices * B offsets in order,
 *     cut into `slices` slices of B; in the sequential orders it is the
 *     s-th step-sized run of tokens, located by walking the shard sizes (an
 *     epoch holds the same number of steps whatever the shard order).  The
 *     training loop (train.c) makes one loader per micro-step, each with
 *     slices = grad_accum * nranks: micro-step m of rank r takes slice
 *     m * nranks + r (the loader's `rank` and `nranks` are that slice and
 *     that count).  A loader's position is the number of steps it has
 *     drawn, so a loader made with position p continues exactly where the
 *     one that had drawn p stopped, across shard and epoch boundaries:
 *     resuming needs only the step number (the checkpoint's data_position)
 *     and the same shards, batch and ranks.
 *   - The slices are disjoint parts of one global batch (in random order
 *     disjoint as draws: with replacement, the same offset can still come
 *     up in two slices), and their concatenation in slice order is exactly
 *     the batch one loader with batch size slices * B draws for the same
 *     step.  So R ranks at batch b, or R micro-steps of b, train on the same
 *     sequences as one rank at batch R * b, which is what makes
 *     data-parallel and accumulated runs comparable to a single device's.
 *   - Evaluation batch k in random order uses its own stream,
 *     tg_rng_seed(seed, TG_LOADER_EVAL_STREAM | k), sliced over ranks the
 *     same way, so an evaluation of K batches sees the same sequences every
 *     time it runs and never the training stream's.  In the sequential
 *     orders it is global batch k of the split read in order from its
 *     start (never shuffled), as llm.c evaluates: batches 0 .. K-1 each
 *     time.  The random offsets depend only on (seed, k, the shard sizes,
 *     T, B, nranks); a caller that wants the two splits unrelated passes
 *     different seeds (the bench script uses seed + 1 for validation and
 *     seed + 2 for the training-loss estimate).
 *
 * The offsets are not torch.randint's: the same seed does not give
 * nanoGPT's batches, only batches drawn the same way. */
#ifndef TG_DATALOADER_H
#define TG_DATALOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "corpus.h"

/* The stream ids of evaluation batches have this bit set; training streams
 * (global batch indices) stay below it, which tg_loader_new checks. */
#define TG_LOADER_EVAL_STREAM (UINT64_C(1) << 63)

typedef enum tg_data_order { TG_ORDER_RANDOM, TG_ORDER_SEQUENTIAL, TG_ORDER_SHUFFLED } tg_data_order;

/* "random", "sequential", "shuffled"; and back (false for another word). */
const char *tg_data_order_name(tg_data_order o);
bool tg_data_order_parse(const char *s, tg_data_order *o);

typedef struct tg_loader tg_loader;

/* Whether batches of B sequences of length T for rank of nranks can be
 * drawn from c in that order: B >= 1, T >= 1, 0 <= rank < nranks,
 * nranks * B * (T+1) fits in int64, some shard holds T + 1 tokens (random)
 * or nranks * B * T + 1 tokens (the sequential orders: one step's global
 * batch, which never straddles shards).  The message for data that is too
 * short names the file (or corpus), its token count and what it needs.
 * Token ids are not checked here: tg_corpus_open refuses ids >= vocab
 * when given the vocabulary size. */
bool tg_loader_check(const tg_corpus *c, tg_data_order order, int64_t B, int64_t T, int rank, int nranks,
                     char *why, size_t whylen);

/* A training loader for rank of nranks, at position (steps already drawn;
 * 0 for a fresh run).  c is borrowed and must outlive the loader.  Returns
 * NULL with a message if tg_loader_check fails, if position >=
 * TG_LOADER_EVAL_STREAM, or if memory runs out. */
tg_loader *tg_loader_new(const tg_corpus *c, tg_data_order order, int64_t B, int64_t T, int rank, int nranks,
                         uint64_t seed, uint64_t position, char *why, size_t whylen);

/* The next micro-batch, global batch g = position, into idx and targets
 * (B * T int32 each); then position becomes g + 1. */
void tg_loader_next(tg_loader *l, int32_t *idx, int32_t *targets);

/* The number of batches drawn, counting the position it was made with:
 * the g of the next batch. */
uint64_t tg_loader_position(const tg_loader *l);

/* Where the next batch's slice starts: its shard (index into c->shards)
 * and the token offset in it, and the epoch (sequential orders; random
 * order gives the first row's place and epoch 0).  For the progress line
 * and tests. */
void tg_loader_where(const tg_loader *l, int *shard, uint64_t *offset, uint64_t *epoch);

void tg_loader_free(tg_loader *l);

/* Evaluation batch k (0-based) for rank of nranks from c, either split,
 * into idx and targets (B * T int32 each).  The arguments must pass
 * tg_loader_check (call it once when opening the split); otherwise this
 * prints why to stderr and aborts, since it has no way to report it. */
void tg_loader_eval_batch(const tg_corpus *c, tg_data_order order, int64_t B, int64_t T, uint64_t seed, int64_t k,
                          int rank, int nranks, int32_t *idx, int32_t *targets);

/* Random order: the B offsets of rank's slice of the batch drawn from
 * (seed, stream), as positions in the concatenation of c's shards: the
 * training batch g is stream g, evaluation batch k is stream
 * TG_LOADER_EVAL_STREAM | k.  A slice does not depend on the number of
 * ranks, only on the ranks before it.  For logging and tests; requires
 * what tg_loader_check does. */
void tg_loader_offsets(const tg_corpus *c, int64_t B, int64_t T, int rank, uint64_t seed, uint64_t stream,
                       int64_t *off);

#endif
