/* rng.h: a small deterministic random number generator for the data loader
 * and the sampler.
 *
 * The generator is xoshiro256** (Blackman and Vigna, 2018): 256 bits of
 * state, period 2^256 - 1, fast, and good enough for drawing batch offsets
 * and tokens; it is not for cryptography.  Its state is seeded with
 * splitmix64, as its authors recommend, so that a seed like 0 or 1 still
 * gives a well mixed state.
 *
 * Streams.  tg_rng_seed(r, seed, stream) keys a generator by two numbers:
 * a run's seed and a stream id (the data loader uses the global batch
 * index, the sampler whatever the caller picks).  Both are hashed into one
 * 64-bit key with bijective mixers, so for a fixed seed every stream id
 * gets a different key, hence a different starting state; two different
 * starting points on a cycle of length 2^256 - 1 do not overlap within any
 * practical number of draws.  A stream is therefore cheap to make (a few
 * multiplications), and any stream can be recreated from (seed, stream)
 * alone, which is what lets training resume from a step count.
 *
 * The whole state is TG_RNG_WORDS uint64 values, which tg_rng_state and
 * tg_rng_set_state read and write for checkpoints.  Results are the same
 * on every platform: only 64-bit integer arithmetic and one exact
 * conversion to double are used. */
#ifndef TG_RNG_H
#define TG_RNG_H

#include <stdbool.h>
#include <stdint.h>

#define TG_RNG_WORDS 4

typedef struct tg_rng {
  uint64_t s[TG_RNG_WORDS];
} tg_rng;

/* One step of splitmix64 on *x: advances it and returns the next output
 * (Vigna's reference splitmix64.c), exposed for tests and for hashing. */
uint64_t tg_splitmix64(uint64_t *x);

/* The generator for (seed, stream); see above. */
void tg_rng_seed(tg_rng *r, uint64_t seed, uint64_t stream);

/* The next 64 random bits. */
uint64_t tg_rng_next(tg_rng *r);

/* A uniform double in [0, 1): the top 53 bits of one draw times 2^-53, so
 * every value is a multiple of 2^-53 and 1.0 never occurs. */
double tg_rng_uniform(tg_rng *r);

/* A uniform integer in [0, n) for n >= 1, without modulo bias: draws that
 * fall in the last, incomplete copy of [0, n) within 2^64 are rejected and
 * redrawn, so the number of draws consumed varies (on average below 2, and
 * exactly 1 when n is a power of two).  n == 0 returns 0 without drawing. */
uint64_t tg_rng_below(tg_rng *r, uint64_t n);

/* Checkpointing: copies the state out, or in.  tg_rng_set_state refuses
 * (returns false, r unchanged) the all-zero state, the one state
 * xoshiro256** never leaves. */
void tg_rng_state(const tg_rng *r, uint64_t out[TG_RNG_WORDS]);
bool tg_rng_set_state(tg_rng *r, const uint64_t in[TG_RNG_WORDS]);

#endif
