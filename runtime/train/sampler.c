/* sampler.c: temperature, top-k and top-p sampling, and the repetition
 * penalty; see sampler.h. */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static float median3(float a, float b, float c) {
  if (a > b) {
    float x = a;
    a = b;
    b = x;
  }
  /* now a <= b */
  if (c <= a) return a;
  if (c >= b) return b;
  return c;
}

/* Reorders a[lo .. hi) (not empty, no NaN) around a median-of-three
 * pivot, which it returns: [lo, *lt) > pivot, [*lt, *gt) == pivot (never
 * empty), [*gt, hi) < pivot, descending order. */
static float partition3(float *a, int32_t lo, int32_t hi, int32_t *lt_out, int32_t *gt_out) {
  float p = median3(a[lo], a[lo + (hi - lo) / 2], a[hi - 1]);
  int32_t lt = lo, i = lo, gt = hi;
  while (i < gt) {
    float x = a[i];
    if (x > p) {
      a[i++] = a[lt];
      a[lt++] = x;
    } else if (x < p) {
      a[i] = a[--gt];
      a[gt] = x;
    } else {
      i++;
    }
  }
  *lt_out = lt;
  *gt_out = gt;
  return p;
}

/* The k-th largest of a[0 .. n) (1 <= k <= n, no NaN), reordering a.
 * Quickselect with a three-way partition, so that long runs of equal
 * logits (masked ones, or ties) end the search instead of slowing it. */
static float kth_largest(float *a, int32_t n, int32_t k) {
  int32_t lo = 0, hi = n, want = k - 1;
  for (;;) {
    if (hi - lo == 1) return a[lo];
    int32_t lt, gt;
    float p = partition3(a, lo, hi, &lt, &gt);
    if (want < lt) hi = lt;
    else if (want < gt) return p;
    else lo = gt;
  }
}

/* The unnormalised probability of a kept logit x. */
static double weight(float x, float max, double temperature) {
  if (isinf(max)) return x == max ? 1.0 : 0.0; /* max is +inf: only the +inf ones count */
  if (x == -INFINITY) return 0.0;              /* -inf / +inf temperature would be NaN */
  return exp(((double)x - (double)max) / temperature);
}

/* The largest logit x of a[0 .. n) (the ids top-k kept, reordered here)
 * such that the ids whose logit is >= x carry at least `target` of the
 * weight: the nucleus's edge.  The three-way quickselect of kth_largest,
 * steered by weight instead of by count, so that no sort of the whole
 * vocabulary (50,257 ids for GPT-2) is needed for each token. */
static float nucleus_edge(float *a, int32_t n, float max, double temperature, double target) {
  int32_t lo = 0, hi = n;
  double above = 0; /* the weight of the kept ids larger than all of [lo, hi): always < target */
  float lowest_kept = max;
  while (lo < hi) {
    int32_t lt, gt;
    float p = partition3(a, lo, hi, &lt, &gt);
    double greater = 0;
    for (int32_t j = lo; j < lt; j++) greater += weight(a[j], max, temperature);
    double equal = (double)(gt - lt) * weight(p, max, temperature);
    if (above + greater >= target) {
      hi = lt; /* the edge is among the larger ones (the pivot's own group is not empty: hi shrinks) */
    } else if (above + greater + equal >= target) {
      return p;
    } else {
      above += greater + equal;
      lowest_kept = p;
      lo = gt;
    }
  }
  /* Rounding (target is P times a sum taken in another order) can leave
   * the target just out of reach: then every id is kept. */
  return lowest_kept;
}

int32_t tg_sample(const float *logits, int32_t V, double temperature, int32_t top_k, tg_rng *rng,
                  float *scratch) {
  return tg_sample_top_p(logits, V, temperature, top_k, 1.0, rng, scratch);
}

int32_t tg_sample_top_p(const float *logits, int32_t V, double temperature, int32_t top_k, double top_p,
                        tg_rng *rng, float *scratch) {
  if (V < 1 || top_k < 0 || !(temperature > 0) || !(top_p > 0 && top_p <= 1)) return -1;
  float max = -INFINITY;
  for (int32_t i = 0; i < V; i++) {
    if (isnan(logits[i])) return -1;
    if (logits[i] > max) max = logits[i];
  }
  if (max == -INFINITY) return -1;

  /* Dividing by a positive temperature keeps the order of the logits, so
   * the k-th largest can be found among the raw ones. */
  float threshold = -INFINITY;
  bool by_k = top_k > 0 && top_k < V, by_p = top_p < 1;
  float *a = NULL;
  if (by_k || by_p) {
    a = scratch ? scratch : malloc((size_t)V * sizeof *a);
    if (!a) return -1;
  }
  if (by_k) {
    memcpy(a, logits, (size_t)V * sizeof *a);
    threshold = kth_largest(a, V, top_k);
  }
  if (by_p) {
    /* The probabilities top-p reads are those over the ids top-k kept. */
    int32_t n = 0;
    double kept = 0;
    for (int32_t i = 0; i < V; i++)
      if (logits[i] >= threshold) {
        a[n++] = logits[i];
        kept += weight(logits[i], max, temperature);
      }
    threshold = nucleus_edge(a, n, max, temperature, top_p * kept);
  }
  if (!scratch) free(a);

  /* Two passes computing the same weights in the same order, rather than a
   * buffer of V doubles: the second pass's running sum reaches exactly the
   * first's total. */
  double total = 0;
  for (int32_t i = 0; i < V; i++)
    if (logits[i] >= threshold) total += weight(logits[i], max, temperature);
  /* total >= 1, from the maximum's weight: nothing to divide by zero. */
  double u = tg_rng_uniform(rng) * total;
  double cum = 0;
  int32_t last = -1;
  for (int32_t i = 0; i < V; i++) {
    if (!(logits[i] >= threshold)) continue;
    double w = weight(logits[i], max, temperature);
    if (w <= 0) continue;
    cum += w;
    last = i;
    if (cum > u) return i;
  }
  /* u * total can round up to total itself; the draw then belongs to the
   * last id with any weight. */
  return last;
}

int32_t tg_sample_greedy(const float *logits, int32_t V) {
  if (V < 1) return -1;
  int32_t best = 0;
  for (int32_t i = 0; i < V; i++) {
    if (isnan(logits[i])) return -1;
    if (logits[i] > logits[best]) best = i;
  }
  return logits[best] == -INFINITY ? -1 : best;
}

void tg_sample_penalize(float *logits, int32_t V, const uint8_t *present, double penalty) {
  /* in float, as transformers computes it on float32 logits */
  float r = (float)penalty;
  for (int32_t i = 0; i < V; i++)
    if (present[i]) logits[i] = logits[i] < 0 ? logits[i] * r : logits[i] / r;
}
