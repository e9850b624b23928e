/* half.c: the 16-bit float formats, bf16 and f16 (half.h). */
#include "half.h"

#include <string.h>

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float tg_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t tg_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  /* Truncating a NaN could clear every mantissa bit and make it infinite;
   * keep the sign and the top payload bits and set the quiet bit. */
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)(u >> 16 | 0x0040);
  /* Round to nearest even: add just under half, plus the lowest kept bit.
   * A carry into the exponent is right, up to infinity. */
  u += 0x7fff + (u >> 16 & 1);
  return (uint16_t)(u >> 16);
}

float tg_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 0x1f, m = h & 0x3ff;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in f32 */
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000 | m << 13); /* inf, NaN with its payload */
  return bits_f32(sign | (e + 112) << 23 | m << 13);         /* rebias 15 -> 127 */
}

/* Shifts m right by s bits (1 <= s <= 31), rounding to nearest even. */
static uint32_t shift_round(uint32_t m, unsigned s) {
  uint32_t r = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
  return r + (rem > half || (rem == half && (r & 1)));
}

uint16_t tg_f32_to_f16(float f) {
  uint32_t u = f32_bits(f), sign = u >> 16 & 0x8000, x = u & 0x7fffffff;
  if (x > 0x7f800000) return (uint16_t)(sign | 0x7e00 | (x >> 13 & 0x3ff)); /* quiet NaN */
  if (x >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to inf */
  if (x >= 0x38800000) /* normal in f16: rebias 127 -> 15, keep 10 bits */
    return (uint16_t)(sign | shift_round(x - 0x38000000, 13));
  if (x < 0x33000000) return (uint16_t)sign; /* at most 2^-25: rounds to zero */
  /* Subnormal in f16: the value is m * 2^(e-150) with the hidden bit; in
   * units of 2^-24 that is m >> (126 - e).  Rounding up may give the
   * smallest normal, 0x0400, which is the right encoding. */
  uint32_t e = x >> 23, m = (x & 0x7fffff) | 0x800000;
  return (uint16_t)(sign | shift_round(m, 126 - e));
}
