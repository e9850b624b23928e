/* flash.h: the flash attention ops as both targets generate them: one call
 * site's shapes and strides (tg_flash_shape); the emitters are each
 * target's (codegen/c/flash_c.h, codegen/cuda/flash_cuda.h).
 *
 * One call site of flash attention (a forward: flash_attention_lse and
 * flash_attention together; or a backward: flash_attention_dq, _dk and _dv
 * together) becomes one emitted C function or a few CUDA kernels with its
 * shapes, strides and scale baked in as constants, so that the compiler sees
 * constant trip counts and strides.
 *
 * What they compute (docs/ir.md, "The flash attention ops"), for each batch
 * b < nb and head h < nh, with q, k, v, o, do [T, D] matrices and
 * s_ij = scale * q_i . k_j for keys j <= i:
 *   forward   lse_i = log sum_{j<=i} exp(s_ij),  o_i = sum_{j<=i} exp(s_ij - lse_i) v_j
 *   backward  P_ij = exp(s_ij - lse_i),  D_i = do_i . o_i,
 *             dS = P .* (do v^T - D),  dq = scale dS k,  dk = scale dS^T q,  dv = P^T do
 * Both renderers use the tiled online softmax and never hold a [T, T]
 * matrix; the backward recomputes P from lse.  Both are deterministic: every
 * output element is summed by one thread in a fixed order (no atomics), so
 * the same inputs give the same bits whatever the thread schedule.
 *
 * Emitted function arguments, in this order, as pointers to each operand's
 * base (float * for an f32 operand, unsigned short * for a bf16 one, the
 * inputs const):
 *   forward   (q, k, v, o, lse)
 *   backward  (q, k, v, o, lse, do, dq, dk, dv)
 * Every backward CUDA kernel takes all nine; every forward kernel all five.
 * Outputs must not overlap each other or the inputs; the inputs may overlap
 * (q, k and v are usually views of one qkv buffer).
 */
#ifndef TG_FLASH_H
#define TG_FLASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where one operand's elements are: element (b, h, t, d) is at
 * offset + b*stride[0] + h*stride[1] + t*stride[2] + d*stride[3] elements
 * from the argument pointer (lse uses stride[0..2]; it has no d). */
typedef struct tg_flash_operand {
  int64_t offset;
  int64_t stride[4];
  bool bf16; /* stored as bf16 (raw uint16 bits), else f32 */
} tg_flash_operand;

typedef struct tg_flash_shape {
  int64_t nb, nh, T, D;
  double scale;
  tg_flash_operand q, k, v, o, lse, dout, dq, dk, dv; /* dq, dk, dv: backward only */
} tg_flash_shape;

#endif
