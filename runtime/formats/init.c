/* init.c: initial values of parameters and optimizer state (see init.h).
 *
 * zeros and ones are what they say.  normal(std) draws each element from a
 * counter-based generator, so an element's value is a pure function of
 * (seed, tensor name, element index) and depends on nothing else: not the
 * order parameters are declared or initialised in, not which other
 * parameters exist, not even the tensor's own size (a longer tensor of the
 * same name starts with the same values).  That makes runs reproducible
 * across model edits and lets any backend regenerate the same weights.
 *
 * The generator:
 *   key      = mix(seed ^ mix(fnv1a64(name)))
 *   bits(c)  = mix(key + (c + 1) * 0x9E3779B97F4A7C15)
 * where mix is SplitMix64's finaliser; bits(c) is thus the (c+1)-th output
 * of a SplitMix64 generator started at key, computed directly.  Element i
 * takes bits(2i) and bits(2i+1), turns each into a uniform in (0, 1) as
 * ((bits >> 11) + 0.5) / 2^53 (never 0, so the log below is finite, and
 * never 1), and Box-Muller gives sqrt(-2 ln u1) cos(2 pi u2), a standard
 * normal, scaled by std and rounded to float. */
#include "init.h"

#include <math.h>

/* SplitMix64's output function: a bijective 64-bit mixer. */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* 64-bit FNV-1a of a string: spreads the name over the key. */
static uint64_t fnv1a64(const char *s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 0x100000001B3ull;
  return h;
}

static uint64_t bits(uint64_t key, uint64_t counter) {
  return mix(key + (counter + 1) * 0x9E3779B97F4A7C15ull);
}

/* A uniform in the open interval (0, 1): 53 random bits, offset by half a
 * step so that neither end is reached. */
static double open_uniform(uint64_t b) { return ((double)(b >> 11) + 0.5) * 0x1p-53; }

static double standard_normal(uint64_t key, uint64_t i) {
  double u1 = open_uniform(bits(key, 2 * i)), u2 = open_uniform(bits(key, 2 * i + 1));
  const double two_pi = 6.283185307179586476925286766559; /* M_PI is not C11 */
  return sqrt(-2 * log(u1)) * cos(two_pi * u2);
}

void tg_param_init(const tg_node *leaf, uint64_t seed, float *out) {
  int64_t numel = tg_type_numel(&leaf->type);
  bool init_leaf = leaf->op == TG_OP_param || leaf->op == TG_OP_state;
  tg_init_kind kind = init_leaf ? leaf->init.kind : TG_INIT_ZEROS; /* inputs: zeros */
  if (kind != TG_INIT_NORMAL) {
    for (int64_t i = 0; i < numel; i++) out[i] = kind == TG_INIT_ONES ? 1.0f : 0.0f;
    return;
  }
  uint64_t key = mix(seed ^ mix(fnv1a64(leaf->name ? leaf->name : "")));
  for (int64_t i = 0; i < numel; i++)
    out[i] = (float)(leaf->init.std * standard_normal(key, (uint64_t)i));
}
