/* sampler.h: the next token from a row of logits, as nanoGPT's generate
 * picks it, with Hugging Face's top-p (nucleus) filter and repetition
 * penalty on top.
 *
 * For logits l[0 .. V) (the true vocabulary only: a padded model's extra,
 * masked logits must be left out by the caller), a temperature t > 0 and
 * top_k k (0 = no limit):
 *
 *   1. keep the ids whose logit is >= the k-th largest logit (all of them
 *      when k == 0 or k >= V).  Ties with the k-th largest are all kept,
 *      as nanoGPT's `logits[logits < v[:, [-1]]] = -inf` keeps them, so
 *      more than k ids can survive;
 *   2. p_i = exp((l_i - max l) / t) / sum over kept ids of the same, in
 *      double precision; subtracting the maximum first means no overflow
 *      for any t, and dividing the difference (not l_i) by t means the
 *      largest logit always gets weight exactly 1;
 *   2b. top_p P < 1 (tg_sample_top_p): of the ids step 1 kept, keep the
 *      smallest set of the most likely whose probabilities (step 2's, over
 *      step 1's ids) add up to at least P, as transformers' TopPLogitsWarper
 *      does after its temperature and top-k warpers; ids tied with the
 *      least likely one kept are all kept (as ties are in step 1, where
 *      torch's sort would keep an arbitrary few of them), and the most
 *      likely id always survives.  The kept probabilities are renormalised;
 *   3. draw u = tg_rng_uniform(rng) and return the first kept id whose
 *      cumulative weight exceeds u * sum (one draw per call, always, so a
 *      sequence of calls is reproducible from the generator's state).
 *
 * Temperature must be > 0: there is no special greedy mode.  One small
 * enough that (max - l_i) / t passes about 745 for every id below the
 * maximum gives those ids a weight that underflows to exactly 0, so
 * sampling becomes argmax (uniform among ids tied at the maximum) without
 * a separate path; 1e-30 does it whenever no logit lies within 1e-27 below
 * the maximum.
 * +inf gives the uniform distribution over the kept ids.
 * Logits of -inf are allowed (weight 0); +inf logits share all the weight
 * equally; NaN is refused.
 *
 * The choice follows nanoGPT's distribution, not its exact draws: torch's
 * multinomial and float32 softmax are not reproduced bit for bit. */
#ifndef TG_SAMPLER_H
#define TG_SAMPLER_H

#include <stdint.h>

#include "rng.h"

/* The sampled id in [0, V), or -1 when V < 1, top_k < 0, temperature is
 * not > 0 (NaN included), a logit is NaN, all logits are -inf, or memory
 * runs out; on -1 the generator has not been used.  scratch is room for V
 * floats used for top-k selection, or NULL to have one allocated and freed
 * on each call that needs it (0 < top_k < V). */
int32_t tg_sample(const float *logits, int32_t V, double temperature, int32_t top_k, tg_rng *rng,
                  float *scratch);

/* tg_sample with step 2b: top_p in (0, 1] (1: no filter, the same draws
 * as tg_sample); -1 also when top_p is outside (0, 1] or NaN.  scratch,
 * as for tg_sample, is also used when top_p < 1. */
int32_t tg_sample_top_p(const float *logits, int32_t V, double temperature, int32_t top_k, double top_p,
                        tg_rng *rng, float *scratch);

/* The repetition penalty of CTRL (Keskar et al. 2019) as transformers'
 * RepetitionPenaltyLogitsProcessor applies it, in place, before any
 * sampling (greedy too): for every id with present[id] != 0 (the ids in
 * the prompt and the text so far, each counted once however often it
 * occurs), a positive logit is divided by penalty and a negative one
 * multiplied by it.  penalty > 1 makes those ids less likely, 1 changes
 * nothing, below 1 favours them. */
void tg_sample_penalize(float *logits, int32_t V, const uint8_t *present, double penalty);

/* Greedy decoding (temperature 0): the first largest logit, as
 * torch.argmax picks; -1, as tg_sample, when V < 1, a logit is NaN or all
 * are -inf, so that a broken model is refused rather than read as token 0. */
int32_t tg_sample_greedy(const float *logits, int32_t V);

#endif
