/* test_sampler.c: the random number generator, temperature, top-k and
 * top-p sampling from logits, and the repetition penalty.
 *
 * Statistical checks draw from fixed seeds, so they give the same result
 * on every run; their thresholds are set so that a correct implementation
 * would fail for fewer than one seed in a million (chi-square quantiles at
 * 1 - 1e-6, or 5 standard deviations), while the mistakes they are meant
 * to catch (a wrong temperature, a lost tie, modulo bias, an off-by-one)
 * move the statistic by orders of magnitude. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "sampler.h"

/* ---- the generator -------------------------------------------------------- */

/* Expected values from a Python transcription of Vigna's reference
 * xoshiro256starstar.c and splitmix64.c (prng.di.unimi.it). */
START_TEST(test_rng_known_answers) {
  static const uint64_t xo[] = {11520u, 0u, 1509978240u, UINT64_C(1215971899390074240),
                                UINT64_C(1216172134540287360), UINT64_C(607988272756665600)};
  tg_rng r;
  ck_assert(tg_rng_set_state(&r, (const uint64_t[]){1, 2, 3, 4}));
  for (int i = 0; i < 6; i++) ck_assert_uint_eq(tg_rng_next(&r), xo[i]);

  static const uint64_t sm[] = {UINT64_C(6457827717110365317), UINT64_C(3203168211198807973),
                                UINT64_C(9817491932198370423), UINT64_C(4593380528125082431),
                                UINT64_C(16408922859458223821)};
  uint64_t x = 1234567;
  for (int i = 0; i < 5; i++) ck_assert_uint_eq(tg_splitmix64(&x), sm[i]);
}
END_TEST

START_TEST(test_rng_reproducible) {
  tg_rng a, b;
  tg_rng_seed(&a, 1337, 5);
  tg_rng_seed(&b, 1337, 5);
  for (int i = 0; i < 1000; i++) ck_assert_uint_eq(tg_rng_next(&a), tg_rng_next(&b));

  /* Saving and restoring the state continues the same sequence. */
  uint64_t st[TG_RNG_WORDS];
  tg_rng_state(&a, st);
  uint64_t want[100];
  for (int i = 0; i < 100; i++) want[i] = tg_rng_next(&a);
  tg_rng c;
  ck_assert(tg_rng_set_state(&c, st));
  for (int i = 0; i < 100; i++) ck_assert_uint_eq(tg_rng_next(&c), want[i]);

  /* The state xoshiro never leaves is refused, and c is left alone. */
  tg_rng_state(&c, st);
  ck_assert(!tg_rng_set_state(&c, (const uint64_t[]){0, 0, 0, 0}));
  uint64_t after[TG_RNG_WORDS];
  tg_rng_state(&c, after);
  ck_assert(memcmp(st, after, sizeof st) == 0);

  /* Seeds and streams near 0 give full states, never the all-zero one. */
  for (uint64_t s = 0; s < 4; s++) {
    tg_rng_seed(&c, s, 0);
    tg_rng_state(&c, st);
    ck_assert(st[0] | st[1] | st[2] | st[3]);
  }
}
END_TEST

static double pearson(const double *x, const double *y, int n) {
  double mx = 0, my = 0;
  for (int i = 0; i < n; i++) mx += x[i], my += y[i];
  mx /= n, my /= n;
  double sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < n; i++) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxy / sqrt(sxx * syy);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Streams that the loader puts side by side (neighbouring batch indices,
 * neighbouring seeds, a training and an evaluation stream) behave as
 * unrelated sequences. */
START_TEST(test_rng_streams_independent) {
  enum { N = 100000, S = 4096 };
  /* Distinct first outputs over every (seed, stream) in [0, 64)^2, which
   * a key like seed + stream would not give: a collision among 4096 truly
   * random 64-bit values has probability below 1e-12. */
  static uint64_t first[S], sorted[S];
  for (int s = 0; s < S; s++) {
    tg_rng r;
    tg_rng_seed(&r, (uint64_t)s / 64, (uint64_t)s % 64);
    first[s] = sorted[s] = tg_rng_next(&r);
  }
  qsort(sorted, S, sizeof *sorted, cmp_u64);
  for (int i = 1; i < S; i++) ck_assert(sorted[i - 1] != sorted[i]);
  /* Each bit of the first output is set in half the streams: the count is
   * Binomial(4096, 1/2), sd 32, so 5 sd is 160. */
  for (int bit = 0; bit < 64; bit++) {
    int ones = 0;
    for (int s = 0; s < S; s++) ones += (int)(first[s] >> bit & 1);
    ck_assert_msg(abs(ones - S / 2) < 160, "bit %d set in %d of %d streams", bit, ones, S);
  }

  /* Lockstep correlation of pairs of streams: for independent uniforms the
   * sample correlation has sd 1/sqrt(N) = 0.0032; 5 sd is 0.016. */
  static const uint64_t pairs[][4] = {
      {1337, 0, 1337, 1},
      {1337, 7, 1337, 8},
      {1337, 0, 1338, 0},
      {0, 0, 1, 0},
      {1337, 3, 1337, UINT64_C(1) << 63 | 3},
  };
  static double x[N], y[N];
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) {
    tg_rng a, b;
    tg_rng_seed(&a, pairs[p][0], pairs[p][1]);
    tg_rng_seed(&b, pairs[p][2], pairs[p][3]);
    for (int i = 0; i < N; i++) {
      x[i] = tg_rng_uniform(&a);
      y[i] = tg_rng_uniform(&b);
    }
    double c = pearson(x, y, N);
    ck_assert_msg(fabs(c) < 0.016, "pair %zu: correlation %g", p, c);
    /* and the next value of one stream against the other's current */
    c = pearson(x + 1, y, N - 1);
    ck_assert_msg(fabs(c) < 0.016, "pair %zu: lagged correlation %g", p, c);
  }
}
END_TEST

START_TEST(test_rng_uniform) {
  enum { N = 200000 };
  tg_rng r;
  tg_rng_seed(&r, 42, 0);
  double sum = 0, sum2 = 0;
  for (int i = 0; i < N; i++) {
    double u = tg_rng_uniform(&r);
    REQUIRE(u >= 0 && u < 1, "draw %d: %.17g", i, u);
    REQUIRE(u * 0x1.0p53 == floor(u * 0x1.0p53), "draw %d: %.17g", i, u); /* a multiple of 2^-53 */
    sum += u;
    sum2 += u * u;
  }
  /* Mean 1/2 with sd sqrt(1/12 / N) = 0.00065; variance 1/12 with sd
   * sqrt(1/180 / N) = 0.00017 (4th central moment 1/80 - 1/144). */
  double mean = sum / N, var = sum2 / N - mean * mean;
  ck_assert_msg(fabs(mean - 0.5) < 5 * 0.00065, "mean %g", mean);
  ck_assert_msg(fabs(var - 1.0 / 12) < 5 * 0.00017, "variance %g", var);
}
END_TEST

START_TEST(test_rng_below) {
  tg_rng r;
  tg_rng_seed(&r, 3, 3);
  for (int i = 0; i < 100; i++) ck_assert_uint_eq(tg_rng_below(&r, 1), 0);
  ck_assert_uint_eq(tg_rng_below(&r, 0), 0);

  /* Small n: chi-square, 2 degrees of freedom, 1 - 1e-6 quantile 27.6. */
  enum { N = 300000 };
  long count[3] = {0};
  for (int i = 0; i < N; i++) {
    uint64_t v = tg_rng_below(&r, 3);
    REQUIRE(v < 3, "draw %d: %llu", i, (unsigned long long)v);
    count[v]++;
  }
  double chi2 = 0;
  for (int i = 0; i < 3; i++) chi2 += (count[i] - N / 3.0) * (count[i] - N / 3.0) / (N / 3.0);
  ck_assert_msg(chi2 < 27.6, "chi-square %g", chi2);

  /* Modulo bias at its worst: for n = ceil(2^65 / 3), x % n would give the
   * values below 2^64 - n (about half of [0, n)) twice the chance of the
   * rest, so 2/3 of the draws would land there instead of 1/2.  Over N
   * draws the unbiased share has sd 0.0009; 5 sd is 0.0046. */
  uint64_t n = UINT64_C(0xAAAAAAAAAAAAAAAB);
  uint64_t low_end = 0 - n; /* 2^64 - n */
  long low = 0;
  for (int i = 0; i < N; i++) {
    uint64_t v = tg_rng_below(&r, n);
    REQUIRE(v < n, "draw %d: %llu", i, (unsigned long long)v);
    low += v < low_end;
  }
  double share = (double)low / N, want = (double)low_end / (double)n;
  ck_assert_msg(fabs(share - want) < 0.0046, "share below 2^64 - n: %g, want %g", share, want);

  /* Powers of two take one draw each: the same values as masking. */
  tg_rng a, b;
  tg_rng_seed(&a, 8, 8);
  tg_rng_seed(&b, 8, 8);
  for (int i = 0; i < 1000; i++) ck_assert_uint_eq(tg_rng_below(&a, 1024), tg_rng_next(&b) & 1023);
}
END_TEST

/* ---- the sampler ---------------------------------------------------------- */

/* 1 - 1e-6 quantiles of chi-square with 1 .. 9 degrees of freedom, rounded
 * down (computed from the regularised incomplete gamma function). */
static const double chi2_crit[] = {0, 23.9, 27.6, 30.6, 33.3, 35.8, 38.2, 40.5, 42.7, 44.8};

/* nanoGPT's rule written the slow way: id i is kept when fewer than k ids
 * have a larger logit; then softmax of l / t over the kept ones. */
static void expected(const float *l, int V, double t, int k, double *p) {
  double max = -INFINITY, sum = 0;
  for (int i = 0; i < V; i++) {
    int larger = 0;
    for (int j = 0; j < V; j++) larger += l[j] > l[i];
    /* -inf stays out by hand: -inf / inf would be NaN. */
    p[i] = (k == 0 || larger < k) && l[i] != -INFINITY ? 1 : 0;
    if (p[i] > 0 && l[i] / t > max) max = l[i] / t;
  }
  for (int i = 0; i < V; i++) {
    if (p[i] > 0) p[i] = exp(l[i] / t - max);
    sum += p[i];
  }
  for (int i = 0; i < V; i++) p[i] /= sum;
}

/* Hugging Face's top-p written the slow way, over expected()'s
 * probabilities: id i is kept when the ids of larger logit carry less than
 * top_p (so ties are kept together, and at an infinite temperature, where
 * all are equally likely, the order is still the logits'); the kept ones
 * renormalised. */
static void expected_top_p(const float *l, int V, double t, int k, double top_p, double *p) {
  double q[16], sum = 0;
  expected(l, V, t, k, q);
  for (int i = 0; i < V; i++) {
    double above = 0;
    for (int j = 0; j < V; j++) above += l[j] > l[i] ? q[j] : 0;
    p[i] = q[i] > 0 && above < top_p ? q[i] : 0;
    sum += p[i];
  }
  for (int i = 0; i < V; i++) p[i] /= sum;
}

/* Samples 200,000 times and checks the frequencies against
 * expected_top_p(): ids of probability 0 must never come up, and
 * Pearson's chi-square over the others must stay below its 1 - 1e-6
 * quantile.  Returns the frequencies in freq. */
static void check_top_p_frequencies(const float *l, int V, double t, int k, double top_p, uint64_t seed,
                                    double *freq) {
  enum { N = 200000 };
  double p[16];
  long count[16] = {0};
  ck_assert(V <= 16);
  expected_top_p(l, V, t, k, top_p, p);
  tg_rng r;
  tg_rng_seed(&r, seed, 0);
  float scratch[16];
  for (int i = 0; i < N; i++) {
    int32_t id = top_p == 1 ? tg_sample(l, V, t, k, &r, i % 2 ? scratch : NULL)
                            : tg_sample_top_p(l, V, t, k, top_p, &r, i % 2 ? scratch : NULL);
    REQUIRE(id >= 0 && id < V, "t=%g k=%d: sampled %d", t, k, (int)id);
    count[id]++;
  }
  double chi2 = 0, maxdiff = 0;
  int kept = 0;
  for (int i = 0; i < V; i++) {
    double f = (double)count[i] / N;
    if (freq) freq[i] = f;
    if (fabs(f - p[i]) > maxdiff) maxdiff = fabs(f - p[i]);
    if (p[i] == 0) {
      ck_assert_msg(count[i] == 0, "t=%g k=%d: id %d has probability 0 but came %ld times", t, k, i,
                    count[i]);
      continue;
    }
    kept++;
    chi2 += (count[i] - N * p[i]) * (count[i] - N * p[i]) / (N * p[i]);
  }
  if (kept > 1)
    ck_assert_msg(chi2 < chi2_crit[kept - 1],
                  "t=%g k=%d: chi-square %g over %d ids (limit %g), max |freq - p| %g", t, k, chi2,
                  kept, chi2_crit[kept - 1], maxdiff);
}

static void check_frequencies(const float *l, int V, double t, int k, uint64_t seed, double *freq) {
  check_top_p_frequencies(l, V, t, k, 1.0, seed, freq);
}

static const float L8[8] = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, -3.0f};

START_TEST(test_softmax_frequencies) {
  check_frequencies(L8, 8, 1.0, 0, 1, NULL);
  check_frequencies(L8, 8, 1.0, 8, 2, NULL);  /* k = V: no limit */
  check_frequencies(L8, 8, 1.0, 50, 3, NULL); /* k > V: no limit */
  check_frequencies(L8, 8, 1.0, 3, 4, NULL);  /* 2.0, 1.5, 1.0 */
  check_frequencies(L8, 8, 0.7, 5, 5, NULL);
}
END_TEST

/* Lower temperature sharpens, higher flattens, each matching softmax(l / t). */
START_TEST(test_temperature) {
  double f05[8], f1[8], f2[8];
  check_frequencies(L8, 8, 0.5, 0, 11, f05);
  check_frequencies(L8, 8, 1.0, 0, 12, f1);
  check_frequencies(L8, 8, 2.0, 0, 13, f2);
  ck_assert(f05[0] > f1[0] && f1[0] > f2[0]); /* the largest logit */
  ck_assert(f05[7] < f1[7] && f1[7] < f2[7]); /* the smallest */

  /* A tiny temperature is argmax; ties at the maximum share the draws. */
  tg_rng r;
  tg_rng_seed(&r, 14, 0);
  for (int i = 0; i < 1000; i++) ck_assert_int_eq(tg_sample(L8, 8, 1e-30, 0, &r, NULL), 0);
  for (int i = 0; i < 1000; i++) ck_assert_int_eq(tg_sample(L8, 8, 5e-324, 3, &r, NULL), 0);
  static const float tied[5] = {0.25f, 4.0f, 3.999f, 4.0f, -2.0f};
  check_frequencies(tied, 5, 1e-12, 0, 15, NULL); /* half and half on ids 1 and 3 */

  /* An infinite one is uniform over the kept ids, masked ones excluded. */
  static const float masked[6] = {1.0f, -INFINITY, 3.0f, -0.5f, -INFINITY, 0.0f};
  check_frequencies(masked, 6, INFINITY, 0, 16, NULL);
  double p[6];
  expected(masked, 6, INFINITY, 0, p);
  ck_assert(p[0] == 0.25 && p[1] == 0);
  check_frequencies(masked, 6, 1.0, 0, 17, NULL);
  check_frequencies(masked, 6, 1.0, 5, 18, NULL); /* the 5th largest is -inf */
}
END_TEST

/* Ties with the k-th largest logit are all kept, as nanoGPT's
 * logits[logits < v[:, [-1]]] = -inf keeps them. */
START_TEST(test_ties) {
  static const float l[5] = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
  double p[5];
  expected(l, 5, 1.0, 2, p);
  ck_assert(p[0] == 0 && p[3] == 0 && fabs(p[1] - 1.0 / 3) < 1e-15); /* three 3s kept for k = 2 */
  check_frequencies(l, 5, 1.0, 1, 21, NULL);                          /* three 3s */
  check_frequencies(l, 5, 1.0, 2, 22, NULL);                          /* three 3s */
  check_frequencies(l, 5, 1.0, 3, 23, NULL);                          /* three 3s */
  check_frequencies(l, 5, 1.0, 4, 24, NULL);                          /* 3s and the 2 */
  check_frequencies(l, 5, 1.0, 5, 25, NULL);                          /* all */
  static const float flat[7] = {0, 0, 0, 0, 0, 0, 0};
  check_frequencies(flat, 7, 1.0, 1, 26, NULL); /* all equal: all kept */
  /* +inf logits take all the weight, shared evenly. */
  static const float inf[4] = {INFINITY, 1e30f, INFINITY, 0};
  tg_rng r;
  tg_rng_seed(&r, 27, 0);
  long hits[4] = {0};
  for (int i = 0; i < 20000; i++) hits[tg_sample(inf, 4, 1.0, 0, &r, NULL)]++;
  ck_assert(hits[1] == 0 && hits[3] == 0);
  ck_assert_msg(labs(hits[0] - 10000) < 5 * 71, "%ld", hits[0]); /* sd sqrt(20000 / 4) */
}
END_TEST

/* top_k = 1 is argmax at any temperature, over GPT-2's vocabulary. */
START_TEST(test_top1_is_argmax) {
  enum { V = 50257 };
  static float l[V], scratch[V];
  tg_rng data, r;
  tg_rng_seed(&data, 31, 0);
  tg_rng_seed(&r, 31, 1);
  static const double temps[] = {0.01, 1.0, 100.0};
  for (int row = 0; row < 30; row++) {
    for (int i = 0; i < V; i++) l[i] = (float)(tg_rng_uniform(&data) * 20 - 10);
    /* A maximum above the range, so that it is unique: floats near 10 are
     * 1e-6 apart, close enough for a tie among 50,257 draws now and then. */
    int best = (int)tg_rng_below(&data, V);
    l[best] = 10.5f;
    for (int t = 0; t < 3; t++)
      ck_assert_int_eq(tg_sample(l, V, temps[t], 1, &r, t % 2 ? scratch : NULL), best);
  }
}
END_TEST

/* The kept set for every k over logits with many repeats, against the
 * slow definition: at temperature +inf each kept id has probability
 * 1 / kept >= 1/40, so 8,000 draws miss one with probability below 1e-80. */
START_TEST(test_top_k_selection) {
  enum { V = 40 };
  float l[V], scratch[V];
  tg_rng data, r;
  tg_rng_seed(&data, 41, 0);
  tg_rng_seed(&r, 41, 1);
  for (int round = 0; round < 8; round++) {
    for (int i = 0; i < V; i++) l[i] = (float)tg_rng_below(&data, round < 4 ? 6 : 1000) - 3;
    if (round == 7) l[5] = -INFINITY;
    for (int k = 0; k <= V; k += 1 + round) {
      double p[V];
      expected(l, V, INFINITY, k, p);
      int seen[V] = {0};
      for (int i = 0; i < 8000; i++) {
        int32_t id = tg_sample(l, V, INFINITY, k, &r, scratch);
        REQUIRE(id >= 0 && id < V, "round %d k %d: sampled %d", round, k, (int)id);
        seen[id] = 1;
      }
      for (int i = 0; i < V; i++)
        ck_assert_msg(seen[i] == (p[i] > 0), "round %d k %d id %d", round, k,
                      i);
    }
  }
}
END_TEST

START_TEST(test_determinism_and_refusals) {
  tg_rng a, b;
  tg_rng_seed(&a, 51, 0);
  tg_rng_seed(&b, 51, 0);
  for (int i = 0; i < 1000; i++)
    ck_assert_int_eq(tg_sample(L8, 8, 0.9, i % 4, &a, NULL), tg_sample(L8, 8, 0.9, i % 4, &b, NULL));

  /* One draw per call, whatever the logits: after one sample the generator
   * stands where one tg_rng_uniform would leave it. */
  tg_rng_seed(&a, 52, 0);
  tg_rng_seed(&b, 52, 0);
  (void)tg_sample(L8, 8, 1.0, 3, &a, NULL);
  (void)tg_rng_uniform(&b);
  ck_assert_uint_eq(tg_rng_next(&a), tg_rng_next(&b));

  /* Refusals return -1 without drawing. */
  static const float nan_row[3] = {0, NAN, 1};
  static const float dead[3] = {-INFINITY, -INFINITY, -INFINITY};
  uint64_t before[TG_RNG_WORDS], after[TG_RNG_WORDS];
  tg_rng_state(&a, before);
  ck_assert_int_eq(tg_sample(L8, 0, 1.0, 0, &a, NULL), -1);
  ck_assert_int_eq(tg_sample(L8, 8, 0.0, 0, &a, NULL), -1);
  ck_assert_int_eq(tg_sample(L8, 8, -1.0, 0, &a, NULL), -1);
  ck_assert_int_eq(tg_sample(L8, 8, NAN, 0, &a, NULL), -1);
  ck_assert_int_eq(tg_sample(L8, 8, 1.0, -1, &a, NULL), -1);
  ck_assert_int_eq(tg_sample(nan_row, 3, 1.0, 0, &a, NULL), -1);
  ck_assert_int_eq(tg_sample(dead, 3, 1.0, 0, &a, NULL), -1);
  tg_rng_state(&a, after);
  ck_assert(memcmp(before, after, sizeof before) == 0);

  /* Greedy (temperature 0): the first largest, and the same refusals */
  static const float tie[4] = {1, 3, 3, -INFINITY};
  ck_assert_int_eq(tg_sample_greedy(tie, 4), 1);
  ck_assert_int_eq(tg_sample_greedy(nan_row, 3), -1);
  ck_assert_int_eq(tg_sample_greedy(dead, 3), -1);
  ck_assert_int_eq(tg_sample_greedy(L8, 0), -1);

  /* One id: always it. */
  ck_assert_int_eq(tg_sample(L8, 1, 1.0, 0, &a, NULL), 0);
  ck_assert_int_eq(tg_sample(L8, 1, 1.0, 1, &a, NULL), 0);
}
END_TEST

/* ---- top-p ---------------------------------------------------------------- */

/* The nucleus against the slow rule, alone and after temperature and
 * top-k; the ids it leaves out never come up. */
START_TEST(test_top_p_frequencies) {
  check_top_p_frequencies(L8, 8, 1.0, 0, 0.5, 21, NULL);
  check_top_p_frequencies(L8, 8, 1.0, 0, 0.8, 22, NULL);
  check_top_p_frequencies(L8, 8, 1.0, 0, 0.99, 23, NULL);
  check_top_p_frequencies(L8, 8, 2.0, 0, 0.6, 24, NULL);  /* flatter: more ids reach P */
  check_top_p_frequencies(L8, 8, 0.7, 5, 0.9, 25, NULL);  /* P over top-k's renormalised ids */
  check_top_p_frequencies(L8, 8, 1.0, 2, 0.55, 26, NULL); /* top-k leaves 2.0 and 1.5 */
  static const float tied[5] = {0.25f, 4.0f, 3.999f, 4.0f, -2.0f};
  check_top_p_frequencies(tied, 5, 1.0, 0, 0.2, 27, NULL); /* one 4.0 reaches P; its twin stays */
  static const float masked[6] = {1.0f, -INFINITY, 3.0f, -0.5f, -INFINITY, 0.0f};
  check_top_p_frequencies(masked, 6, INFINITY, 0, 0.5, 28, NULL); /* uniform: 2 of the 4 finite ids */
}
END_TEST

/* Worked by hand for L8 at temperature 1: softmax gives 2.0 p = 0.405 and
 * 1.5 p = 0.245, so P = 0.5 keeps those two ids and nothing else; a P
 * small enough is argmax; P = 1 is no filter, draw for draw. */
START_TEST(test_top_p_excludes) {
  tg_rng r;
  tg_rng_seed(&r, 31, 0);
  long seen[8] = {0};
  float scratch[8];
  for (int i = 0; i < 20000; i++) {
    int32_t id = tg_sample_top_p(L8, 8, 1.0, 0, 0.5, &r, i % 2 ? scratch : NULL);
    REQUIRE(id == 0 || id == 6, "top-p 0.5 drew id %d (logit %g)", (int)id, id >= 0 ? L8[id] : 0.0);
    seen[id]++;
  }
  ck_assert_msg(seen[0] > seen[6] && seen[6] > 0, "ids 0 and 6: %ld and %ld draws", seen[0], seen[6]);
  for (int i = 0; i < 1000; i++) ck_assert_int_eq(tg_sample_top_p(L8, 8, 1.0, 0, 1e-9, &r, NULL), 0);

  tg_rng a, b;
  tg_rng_seed(&a, 32, 0);
  tg_rng_seed(&b, 32, 0);
  for (int i = 0; i < 5000; i++)
    REQUIRE(tg_sample_top_p(L8, 8, 0.9, i % 4, 1.0, &a, scratch) == tg_sample(L8, 8, 0.9, i % 4, &b, NULL),
            "draw %d: top-p 1 differs from no top-p", i);

  /* outside (0, 1]: refused, and the generator untouched */
  const double bad[] = {0.0, -0.5, 1.0000001, NAN, INFINITY};
  for (int i = 0; i < 5; i++) {
    tg_rng_seed(&a, 33, 0);
    tg_rng_seed(&b, 33, 0);
    ck_assert_int_eq(tg_sample_top_p(L8, 8, 1.0, 0, bad[i], &a, NULL), -1);
    ck_assert_uint_eq(tg_rng_next(&a), tg_rng_next(&b));
  }
}
END_TEST

/* A wide row, as GPT-2's 50,257: the nucleus is found by selection, not a
 * sort; checked against a count over a sorted copy. */
static int cmp_desc(const void *x, const void *y) {
  float a = *(const float *)x, b = *(const float *)y;
  return (a < b) - (a > b);
}

START_TEST(test_top_p_wide) {
  enum { V = 50257 };
  float *l = malloc(V * sizeof *l), *sorted = malloc(V * sizeof *l), *scratch = malloc(V * sizeof *l);
  tg_rng r;
  tg_rng_seed(&r, 41, 0);
  for (int i = 0; i < V; i++) l[i] = (float)(8.0 * tg_rng_uniform(&r) - 4.0);
  memcpy(sorted, l, V * sizeof *l);
  qsort(sorted, V, sizeof *sorted, cmp_desc);
  double total = 0;
  for (int i = 0; i < V; i++) total += exp((double)sorted[i] - sorted[0]);
  const double ps[] = {0.01, 0.3, 0.9};
  for (int c = 0; c < 3; c++) {
    /* the edge: the first logit, in descending order, where the mass reaches P */
    double cum = 0;
    float edge = sorted[V - 1];
    for (int i = 0; i < V; i++) {
      cum += exp((double)sorted[i] - sorted[0]);
      if (cum >= ps[c] * total) {
        edge = sorted[i];
        break;
      }
    }
    float lowest = INFINITY;
    /* 600 draws: each a selection over 50,257 logits (slow under the
     * sanitizers); the chance that none falls in the lower half of the
     * kept set is 2^-600 */
    for (int i = 0; i < 600; i++) {
      int32_t id = tg_sample_top_p(l, V, 1.0, 0, ps[c], &r, scratch);
      REQUIRE(id >= 0 && l[id] >= edge, "P=%g: drew logit %g below the edge %g", ps[c], id >= 0 ? l[id] : 0, edge);
      if (l[id] < lowest) lowest = l[id];
    }
    /* the draws reach down near the edge: the filter is not stricter */
    double kept = 0;
    for (int i = 0; i < V; i++) kept += sorted[i] >= edge;
    ck_assert_msg(kept < 3 || lowest < sorted[(int)(kept / 2)], "P=%g: the lowest draw %g, the kept %g", ps[c],
                  lowest, kept);
  }
  free(l);
  free(sorted);
  free(scratch);
}
END_TEST

/* ---- the repetition penalty ------------------------------------------------ */

static double softmax_of(const float *l, int V, int id) {
  double max = -INFINITY, sum = 0;
  for (int i = 0; i < V; i++) max = l[i] > max ? l[i] : max;
  for (int i = 0; i < V; i++) sum += exp(l[i] - max);
  return exp(l[id] - max) / sum;
}

START_TEST(test_repetition_penalty) {
  const float row[6] = {2.0f, -1.0f, 0.5f, -3.0f, 0.0f, 1.5f};
  const uint8_t present[6] = {1, 1, 0, 0, 1, 0};
  float l[6];
  memcpy(l, row, sizeof l);
  tg_sample_penalize(l, 6, present, 2.0);
  /* a positive logit divided, a negative one multiplied, the absent and 0 as they were */
  for (int i = 0; i < 6; i++) {
    float want = !present[i] ? row[i] : row[i] > 0 ? row[i] / 2 : row[i] * 2;
    ck_assert_msg(l[i] == want, "id %d: %g, want %g", i, l[i], want);
  }
  /* present ids lose probability, absent ones gain it */
  ck_assert(softmax_of(l, 6, 0) < softmax_of(row, 6, 0));
  ck_assert(softmax_of(l, 6, 1) < softmax_of(row, 6, 1));
  ck_assert(softmax_of(l, 6, 5) > softmax_of(row, 6, 5));
  /* and in draws: id 0, the argmax before, is overtaken by 1.5 */
  tg_rng r;
  tg_rng_seed(&r, 51, 0);
  long before = 0, after = 0;
  for (int i = 0; i < 20000; i++) {
    before += tg_sample(row, 6, 1.0, 0, &r, NULL) == 0;
    after += tg_sample(l, 6, 1.0, 0, &r, NULL) == 0;
  }
  /* 5 standard deviations of a share of 20,000 draws: at most 0.018 */
  ck_assert_msg(fabs(before / 20000.0 - softmax_of(row, 6, 0)) < 0.018, "id 0 drawn %ld times before", before);
  ck_assert_msg(fabs(after / 20000.0 - softmax_of(l, 6, 0)) < 0.018, "id 0 drawn %ld times after", after);
  ck_assert_int_eq(tg_sample_greedy(row, 6), 0);
  ck_assert_int_eq(tg_sample_greedy(l, 6), 5);
  /* 1 changes nothing */
  memcpy(l, row, sizeof l);
  tg_sample_penalize(l, 6, present, 1.0);
  ck_assert(!memcmp(l, row, sizeof l));
}
END_TEST

int main(void) {
  Suite *s = suite_create("sampler");
  TCase *rng = tcase_create("rng");
  tcase_add_test(rng, test_rng_known_answers);
  tcase_add_test(rng, test_rng_reproducible);
  tcase_add_test(rng, test_rng_streams_independent);
  tcase_add_test(rng, test_rng_uniform);
  tcase_add_test(rng, test_rng_below);
  tcase_set_timeout(rng, 60);
  suite_add_tcase(s, rng);
  TCase *tc = tcase_create("sample");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_softmax_frequencies);
  tcase_add_test(tc, test_temperature);
  tcase_add_test(tc, test_ties);
  tcase_add_test(tc, test_top1_is_argmax);
  tcase_add_test(tc, test_top_k_selection);
  tcase_add_test(tc, test_determinism_and_refusals);
  tcase_add_test(tc, test_top_p_frequencies);
  tcase_add_test(tc, test_top_p_excludes);
  tcase_add_test(tc, test_top_p_wide);
  tcase_add_test(tc, test_repetition_penalty);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
