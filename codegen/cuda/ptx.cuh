/* ptx.cuh: every PTX instruction generated CUDA uses, each in a wrapper of
 * its own beside the emulated device's version of it.
 *
 * On the GPU (__CUDA_ARCH__) a wrapper is the inline asm; built for the
 * emulated device (after runtime/cuda/emu/cuda_emu.h) it calls the
 * emulator's model of the instruction, which also checks its use (shared
 * addresses, fragment layouts, cp.async groups) and reports the caller's
 * line.  Generated code calls only these tg_ names, so this header and
 * runtime/cuda/emu/ are the only places that know the emulator's.  Embedded
 * at build time (cmake/embed.cmake) into the prelude every unit and the
 * flash attention kernels are compiled after; the file compiles on its own
 * (tests/unit/test_device_code.c). */

#ifndef TG_PTX_CUH
#define TG_PTX_CUH
// The emulator reports the caller's line; the GPU's wrappers take no such parameter.
#ifdef __CUDA_ARCH__
#define TG_CALLER_LINE
#define TG_CALLER_LINE_ONLY
#else
#define TG_CALLER_LINE , int line = __builtin_LINE()
#define TG_CALLER_LINE_ONLY int line = __builtin_LINE()
#endif
__device__ __forceinline__ float tg_f16_load(unsigned short h) {
#ifdef __CUDA_ARCH__
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
#else
  return tg_emu::f16_to_f32(h);
#endif
}
__device__ __forceinline__ unsigned short tg_f16_store(float f) {
#ifdef __CUDA_ARCH__
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  return tg_emu::f32_to_f16_rn(f);
#endif
}
// Two floats as a bf16 pair rounded to nearest even, lo in bits 0-15
// (cvt puts its first source in the upper half).
__device__ __forceinline__ unsigned tg_cvt_bf16x2(float lo, float hi) {
#ifdef __CUDA_ARCH__
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return tg_emu::cvt_rn_bf16x2_f32(hi, lo);
#endif
}
__device__ __forceinline__ float tg_ex2_approx(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tg_emu::ex2_approx_ftz(x);
#endif
}
__device__ __forceinline__ float tg_lg2_approx(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tg_emu::lg2_approx_ftz(x);
#endif
}
// c (16x8 f32) += a (16x16 bf16, row-major) b (16x8 bf16, column-major).
// Lane l, g = l / 4, t = l % 4, holds a: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..2t+9),
// (g+8, 2t+8..); b: (2t..2t+1, g), (2t+8..2t+9, g); c: (g, 2t), (g, 2t+1), (g+8, 2t),
// (g+8, 2t+1) (row, column); a pair's lower column (row for b) in the low half.
__device__ __forceinline__ void tg_mma_bf16(float *c, const unsigned *a, unsigned b0, unsigned b1 TG_CALLER_LINE) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  tg_emu::mma_m16n8k16_bf16(c, a, b0, b1, line);
#endif
}
// The shared-memory address of p, as ldmatrix and cp.async take it.
template <typename P>
__device__ __forceinline__ unsigned tg_smem_addr(P p) {
#ifdef __CUDA_ARCH__
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
#else
  return tg_emu::cvta_to_shared(p);
#endif
}
// Two 8x8 bf16 matrices read transposed: lanes 0-7 give the addresses of the first's
// rows, lanes 8-15 the second's; lane l gets in b[m] matrix m's elements (2(l%4), l/4)
// and (2(l%4)+1, l/4).
__device__ __forceinline__ void tg_ldmatrix_x2_trans(unsigned addr, unsigned *b TG_CALLER_LINE) {
#ifdef __CUDA_ARCH__
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(b[0]), "=r"(b[1]) : "r"(addr) : "memory");
#else
  tg_emu::ldmatrix(2, true, addr, b, line);
#endif
}
// cp.async: 16 bytes from global memory to shared (addr from tg_smem_addr), completed by
// cp.async.wait_group after cp.async.commit_group; the emulated device copies at once.
template <typename P>
__device__ __forceinline__ void tg_cp_async16(unsigned addr, P src TG_CALLER_LINE) {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" : : "r"(addr), "l"(src) : "memory");
#else
  tg_emu::cp_async(addr, src, 16, line);
#endif
}
__device__ __forceinline__ void tg_cp_async_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;" : : : "memory");
#else
  tg_emu::cp_async_commit();
#endif
}
// Waits until at most N of this thread's committed groups are still in flight (the
// other threads' copies need a __syncthreads after their own waits).
template <int N>
__device__ __forceinline__ void tg_cp_async_wait(TG_CALLER_LINE_ONLY) {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group %0;" : : "n"(N) : "memory");
#else
  tg_emu::cp_async_wait(N, line);
#endif
}
#endif
