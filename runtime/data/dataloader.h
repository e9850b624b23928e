/* dataloader.h: random training and evaluation batches from a token file,
 * as nanoGPT's get_batch makes them.
 *
 * A batch is B sequences of T + 1 consecutive tokens, each starting at an
 * offset drawn uniformly from [0, n - T - 1] (n tokens in the file, the
 * offsets drawn independently, so two sequences may repeat or overlap, as
 * in nanoGPT).  idx[b][t] is the token at offset_b + t and targets[b][t]
 * the one after it, both int32 row-major [B, T].
 *
 * Where the offsets come from.  Every batch is a pure function of the seed,
 * its step (or evaluation batch) and its slice, never of earlier draws:
 *
 *   - Training step s (0-based) draws one stream, tg_rng_seed(seed, s):
 *     slices * B offsets in order, cut into `slices` slices of B.  The
 *     training loop (train.c) makes one loader per micro-step, each with
 *     slices = grad_accum * nranks: micro-step m of rank r takes slice
 *     m * nranks + r (the loader's `rank` and `nranks` are that slice and
 *     that count).  A loader's position is the number of steps it has
 *     drawn, so a loader made with position p continues exactly where the
 *     one that had drawn p stopped: resuming needs only the step number, no
 *     generator state.
 *   - The slices are disjoint parts of one global batch (disjoint as
 *     draws; with replacement, the same offset can still come up in two
 *     slices, as it can within one), and their concatenation in slice
 *     order is exactly the batch one loader with batch size slices * B
 *     draws for the same step.  So R ranks at batch b, or R micro-steps of
 *     b, train on the same sequences as one rank at batch R * b, which is
 *     what makes data-parallel and accumulated runs comparable to a single
 *     device's.
 *   - Evaluation batch k uses its own stream, tg_rng_seed(seed,
 *     TG_LOADER_EVAL_STREAM | k), sliced over ranks the same way, so an
 *     evaluation of K batches sees the same sequences every time it runs
 *     (the bench script's reseed, bench/torch_gpt_train.py) and never the
 *     training stream's.  The offsets depend only on (seed, k, n, T, B,
 *     nranks): the two splits, having different lengths, get different
 *     offsets from one seed; a caller that wants them unrelated passes
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

#include "tokens_file.h"

/* The stream ids of evaluation batches have this bit set; training streams
 * (global batch indices) stay below it, which tg_loader_new checks. */
#define TG_LOADER_EVAL_STREAM (UINT64_C(1) << 63)

typedef struct tg_loader tg_loader;

/* Whether batches of B sequences of length T for rank of nranks can be
 * drawn from toks: B >= 1, T >= 1, 0 <= rank < nranks, nranks * B * (T+1)
 * fits in int64, and the file holds at least T + 1 tokens.  The message
 * for a file that is too short names it, its token count and T + 1.  Token
 * ids are not checked here: tg_tokens_open(path, vocab, ...) refuses ids
 * >= vocab when given the vocabulary size. */
bool tg_loader_check(const tg_tokens *toks, int64_t B, int64_t T, int rank, int nranks, char *why,
                     size_t whylen);

/* A training loader for rank of nranks, at position (micro-batches already
 * drawn; 0 for a fresh run).  toks is borrowed and must outlive the
 * loader.  Returns NULL with a message if tg_loader_check fails, if
 * position >= TG_LOADER_EVAL_STREAM, or if memory runs out. */
tg_loader *tg_loader_new(const tg_tokens *toks, int64_t B, int64_t T, int rank, int nranks,
                         uint64_t seed, uint64_t position, char *why, size_t whylen);

/* The next micro-batch, global batch g = position, into idx and targets
 * (B * T int32 each); then position becomes g + 1. */
void tg_loader_next(tg_loader *l, int32_t *idx, int32_t *targets);

/* The number of micro-batches drawn, counting the position it was made
 * with: the g of the next batch. */
uint64_t tg_loader_position(const tg_loader *l);

void tg_loader_free(tg_loader *l);

/* Evaluation batch k (0-based) for rank of nranks from toks, either split,
 * into idx and targets (B * T int32 each).  The arguments must pass
 * tg_loader_check (call it once when opening the split); otherwise this
 * prints why to stderr and aborts, since it has no way to report it. */
void tg_loader_eval_batch(const tg_tokens *toks, int64_t B, int64_t T, uint64_t seed, int64_t k,
                          int rank, int nranks, int32_t *idx, int32_t *targets);

/* The B offsets of rank's slice of the batch drawn from (seed, stream) from
 * a file of n tokens: the training batch g is stream g, evaluation batch k
 * is stream TG_LOADER_EVAL_STREAM | k.  A slice does not depend on the
 * number of ranks, only on the ranks before it.  For logging and tests;
 * requires what tg_loader_check does (n >= T + 1 above all). */
void tg_loader_offsets(size_t n, int64_t B, int64_t T, int rank, uint64_t seed, uint64_t stream,
                       int64_t *off);

#endif
