/* gelu_kernel.h: GELU's tanh form and its derivative, once for both targets: the
 * C and CUDA preludes embed this text (cmake/embed.cmake, without this
 * comment) after defining TG_GELU_FN as their function qualifiers
 * (static inline; __device__ __forceinline__), and tg_tanh before it.
 * The same numbers stand in passes/gelu.c, the interpreter and the
 * emulated cuBLASLt's epilogue. */

// GELU's tanh form and its derivative; tg_gelu computes in the order
// std.tg writes GELU, so that it rounds as the primitive ops did
TG_GELU_FN float tg_gelu(float x) {
  return 0.5f * x * (1.0f + tg_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
TG_GELU_FN float tg_gelu_grad(float x) {
  const float t = tg_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 0.134145f * x * x);
}
