/* flash_ref.h: flash attention's reference for the tests of its code
 * generators (test_flash_codegen.c runs the C, test_cuda_emu_flash.c the
 * CUDA on the emulated device).
 *
 * GPT-2's layout of the operands, another with offsets and transposed
 * strides, f32 and bf16 buffers, deterministic random inputs, and the
 * outputs in double precision from the definitions (docs/ir.md), with the
 * error measure both use: max |got - want| / max |want| per output. */
#ifndef TG_FLASH_REF_H
#define TG_FLASH_REF_H

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flash.h"

/* ---- shapes ----------------------------------------------------------------- */

/* GPT-2's layout: q, k, v views of qkv [nb, T, 3*nh*D] (q at 0, k at nh*D,
 * v at 2*nh*D), o, do, dq, dk, dv contiguous [nb, nh, T, D], lse [nb, nh, T]. */
static inline tg_flash_shape gpt2_shape(int64_t nb, int64_t nh, int64_t T, int64_t D, double scale, bool bf16) {
  tg_flash_shape s;
  memset(&s, 0, sizeof s);
  s.nb = nb, s.nh = nh, s.T = T, s.D = D, s.scale = scale;
  int64_t C = 3 * nh * D;
  tg_flash_operand qkv = {0, {T * C, D, C, 1}, bf16};
  s.q = s.k = s.v = qkv;
  s.k.offset = nh * D;
  s.v.offset = 2 * nh * D;
  tg_flash_operand dense = {0, {nh * T * D, T * D, D, 1}, bf16};
  s.o = s.dout = s.dq = s.dk = s.dv = dense;
  s.lse = (tg_flash_operand){0, {nh * T, T, 1, 0}, false};
  return s;
}

/* The same with other layouts for the rest: o and dq [nb, T, nh, D] after an
 * offset, do and dk transposed ([nb, nh, D, T]: a column stride other than
 * 1), lse [T, nb, nh] after an offset. */
static inline tg_flash_shape odd_shape(int64_t nb, int64_t nh, int64_t T, int64_t D, double scale, bool bf16) {
  tg_flash_shape s = gpt2_shape(nb, nh, T, D, scale, bf16);
  s.o = (tg_flash_operand){5, {T * nh * D, D, nh * D, 1}, bf16};
  s.dq = s.o;
  s.dout = (tg_flash_operand){0, {nh * D * T, D * T, 1, T}, bf16};
  s.dk = s.dout;
  s.lse = (tg_flash_operand){3, {nh, 1, nb * nh, 0}, false};
  return s;
}

/* Elements a buffer needs for operand o (strides non-negative). */
static inline int64_t extent(const tg_flash_shape *s, const tg_flash_operand *o, bool has_d) {
  return 1 + o->offset + (s->nb - 1) * o->stride[0] + (s->nh - 1) * o->stride[1] + (s->T - 1) * o->stride[2] +
         (has_d ? (s->D - 1) * o->stride[3] : 0);
}

static inline int64_t at(const tg_flash_operand *o, int64_t b, int64_t h, int64_t t, int64_t d) {
  return o->offset + b * o->stride[0] + h * o->stride[1] + t * o->stride[2] + d * o->stride[3];
}

/* ---- bf16 and f32 buffers --------------------------------------------------- */

static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* finite inputs only */
}

static inline float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A buffer of n elements, f32 or bf16, as the emitted code reads it. */
typedef struct buf {
  bool bf16;
  int64_t n;
  void *p;
} buf;

static inline buf buf_new(int64_t n, bool bf16) {
  buf b = {bf16, n, malloc((size_t)n * (bf16 ? 2 : 4))};
  ck_assert_ptr_nonnull(b.p);
  /* NaN everywhere, so that an element left unwritten cannot pass */
  for (int64_t i = 0; i < n; i++) {
    if (bf16) ((uint16_t *)b.p)[i] = 0x7fc0;
    else ((float *)b.p)[i] = NAN;
  }
  return b;
}

static inline double buf_get(const buf *b, int64_t i) {
  return b->bf16 ? from_bf16(((const uint16_t *)b->p)[i]) : ((const float *)b->p)[i];
}

/* Stores x, rounded to the buffer's type; returns the value stored. */
static inline double buf_set(buf *b, int64_t i, double x) {
  if (b->bf16) {
    ((uint16_t *)b->p)[i] = to_bf16((float)x);
    return from_bf16(((uint16_t *)b->p)[i]);
  }
  ((float *)b->p)[i] = (float)x;
  return (float)x;
}

static uint64_t rng __attribute__((unused)) = 88172645463325252ull;
static inline double uniform(void) { /* xorshift64: the same inputs on every run */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

/* ---- the double-precision reference ------------------------------------------ */

typedef struct ref {
  double *o, *lse, *dq, *dk, *dv; /* [nb, nh, T, D] (lse [nb, nh, T]) */
} ref;

/* From the definitions, one (batch, head) at a time, with the inputs as the
 * kernel sees them (already rounded to the buffers' types). */
static inline ref reference(const tg_flash_shape *s, const buf *qkv, const buf *dout) {
  int64_t T = s->T, D = s->D, n = s->nb * s->nh * T * D;
  ref r = {calloc((size_t)n, 8), calloc((size_t)(n / D), 8), calloc((size_t)n, 8), calloc((size_t)n, 8),
           calloc((size_t)n, 8)};
  double *q = malloc((size_t)(T * D) * 8), *k = malloc((size_t)(T * D) * 8), *v = malloc((size_t)(T * D) * 8),
         *g = malloc((size_t)(T * D) * 8), *p = malloc((size_t)(T * T) * 8), *sc = malloc((size_t)T * 8);
  for (int64_t b = 0; b < s->nb; b++)
    for (int64_t h = 0; h < s->nh; h++) {
      int64_t base = (b * s->nh + h) * T * D;
      for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) {
          q[t * D + d] = buf_get(qkv, at(&s->q, b, h, t, d));
          k[t * D + d] = buf_get(qkv, at(&s->k, b, h, t, d));
          v[t * D + d] = buf_get(qkv, at(&s->v, b, h, t, d));
          g[t * D + d] = buf_get(dout, at(&s->dout, b, h, t, d));
        }
      for (int64_t i = 0; i < T; i++) {
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j <= i; j++) {
          double x = 0;
          for (int64_t d = 0; d < D; d++) x += q[i * D + d] * k[j * D + d];
          sc[j] = s->scale * x;
          m = fmax(m, sc[j]);
        }
        for (int64_t j = 0; j <= i; j++) l += exp(sc[j] - m);
        double lse = m + log(l);
        r.lse[(b * s->nh + h) * T + i] = lse;
        for (int64_t j = 0; j < T; j++) p[i * T + j] = j <= i ? exp(sc[j] - lse) : 0;
        for (int64_t d = 0; d < D; d++) {
          double x = 0;
          for (int64_t j = 0; j <= i; j++) x += p[i * T + j] * v[j * D + d];
          r.o[base + i * D + d] = x;
        }
      }
      for (int64_t i = 0; i < T; i++) {
        double di = 0;
        for (int64_t d = 0; d < D; d++) di += g[i * D + d] * r.o[base + i * D + d];
        for (int64_t j = 0; j <= i; j++) {
          double dp = 0;
          for (int64_t d = 0; d < D; d++) dp += g[i * D + d] * v[j * D + d];
          double pij = p[i * T + j], ds = pij * (dp - di);
          for (int64_t d = 0; d < D; d++) {
            r.dq[base + i * D + d] += s->scale * ds * k[j * D + d];
            r.dk[base + j * D + d] += s->scale * ds * q[i * D + d];
            r.dv[base + j * D + d] += pij * g[i * D + d];
          }
        }
      }
    }
  free(q), free(k), free(v), free(g), free(p), free(sc);
  return r;
}

static inline void ref_free(ref *r) { free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv); }

/* max |got - want| / max |want| over one output; NaN if any element is NaN. */
static inline double rel_err(const tg_flash_shape *s, const tg_flash_operand *op, const buf *got, const double *want,
                      bool has_d) {
  double err = 0, mag = 0;
  int64_t D = has_d ? s->D : 1;
  for (int64_t b = 0; b < s->nb; b++)
    for (int64_t h = 0; h < s->nh; h++)
      for (int64_t t = 0; t < s->T; t++)
        for (int64_t d = 0; d < D; d++) {
          double w = want[((b * s->nh + h) * s->T + t) * D + d];
          double x = buf_get(got, at(op, b, h, t, d));
          if (isnan(x)) return NAN;
          err = fmax(err, fabs(x - w));
          mag = fmax(mag, fabs(w));
        }
  return err / (mag > 0 ? mag : 1);
}

#endif
