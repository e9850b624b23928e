/* device_code_kernel.cuh: a kernel that calls every PTX wrapper of
 * codegen/cuda/ptx.cuh and the prelude's helpers, so that compiling it
 * after the prelude instantiates each template and asm: built for the
 * emulated device by device_code_check.cpp, embedded into
 * test_device_code.c for NVRTC (cmake/embed.cmake). */

// tg kernel: tg_device_code_check
extern "C" __global__ void __launch_bounds__(128) tg_device_code_check(TG_ARG(const unsigned short) x,
                                                                        TG_ARG(float) y, int n) {
  TG_SHARED(__align__(16) unsigned, tile, 64 * 8);
  const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  const float v = i < n ? tg_bf16_load(x[i]) : 0.0f;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const unsigned a[4] = {tg_cvt_bf16x2(v, v), 0u, 0u, 0u};
  tg_cp_async16(tg_smem_addr(tile + (threadIdx.x & 63) * 4), x);
  tg_cp_async_commit();
  tg_cp_async_wait<0>();
  __syncthreads();
  unsigned b[2];
  tg_ldmatrix_x2_trans(tg_smem_addr(tile + (threadIdx.x & 15) * 8), b);
  tg_mma_bf16(c, a, b[0], b[1]);
  const float s = tg_block_sum(tg_ex2_approx(v) + tg_lg2_approx(1.0f + v * v)) + tg_block_max(v) +
                  tg_column_sum(c[0]) + tg_column_max(c[1]);
  if (i < n) y[i] = tg_gelu(s) + tg_gelu_grad(v) + tg_f16_round(v) + tg_bf16_round(c[2]);
}
