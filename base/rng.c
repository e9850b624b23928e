/* rng.c: xoshiro256** seeded through splitmix64; see rng.h. */
#include "rng.h"

#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)

/* splitmix64's output function: a bijection of 64-bit words, which is what
 * makes distinct stream ids of one seed give distinct states. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

uint64_t tg_splitmix64(uint64_t *x) {
  *x += GOLDEN;
  return mix64(*x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void tg_rng_seed(tg_rng *r, uint64_t seed, uint64_t stream) {
  /* For a fixed seed, stream -> key is a composition of bijections (xor
   * with a constant, mix64), and likewise seed -> key for a fixed stream.
   * The added constants keep the common small seeds and stream ids away
   * from 0, mix64's fixed point. */
  uint64_t key = mix64(mix64(seed + GOLDEN) ^ (stream + UINT64_C(0xD1B54A32D192ED03)));
  /* Four consecutive splitmix64 outputs: s[0] alone is a bijection of key,
   * and the words cannot all be zero (mix64(x) == 0 only for x == 0, which
   * at most one of key + i * GOLDEN can be). */
  for (int i = 0; i < TG_RNG_WORDS; i++) r->s[i] = tg_splitmix64(&key);
}

uint64_t tg_rng_next(tg_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double tg_rng_uniform(tg_rng *r) {
  /* The high bits: xoshiro256**'s low bits are as good, but the top ones
   * are what the authors' own conversion uses. */
  return (double)(tg_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t tg_rng_below(tg_rng *r, uint64_t n) {
  if (n == 0) return 0;
  /* 2^64 mod n, computed in 64 bits: values below it are the incomplete
   * copy of [0, n) at the bottom, so what remains has exactly
   * floor(2^64 / n) copies of every residue. */
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t x = tg_rng_next(r);
    if (x >= threshold) return x % n;
  }
}

void tg_rng_state(const tg_rng *r, uint64_t out[TG_RNG_WORDS]) {
  for (int i = 0; i < TG_RNG_WORDS; i++) out[i] = r->s[i];
}

bool tg_rng_set_state(tg_rng *r, const uint64_t in[TG_RNG_WORDS]) {
  uint64_t any = 0;
  for (int i = 0; i < TG_RNG_WORDS; i++) any |= in[i];
  if (!any) return false;
  for (int i = 0; i < TG_RNG_WORDS; i++) r->s[i] = in[i];
  return true;
}
