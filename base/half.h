/* half.h: the 16-bit float formats, bf16 and IEEE f16, to and from f32
 * (half.c).  Narrowing rounds to nearest even, as CUDA's __float2bfloat16
 * and cvt.rn do, with overflow to infinity and NaN kept a NaN (quiet, its
 * sign and top payload bits kept), so that files, the backends and the
 * reference interpreter agree bit for bit.  Tested exhaustively over all
 * 65,536 values of each format (tests/unit/test_safetensors.c). */
#ifndef TG_HALF_H
#define TG_HALF_H

#include <stdint.h>

float tg_bf16_to_f32(uint16_t h);
uint16_t tg_f32_to_bf16(float f);
float tg_f16_to_f32(uint16_t h);
uint16_t tg_f32_to_f16(float f);

#endif
