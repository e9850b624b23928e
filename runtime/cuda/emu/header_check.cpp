// header_check.cpp: cuda_emu.h compiled under the project's warnings
// (-Wall -Wextra -Werror) with kernels in the forms generated code takes:
// modules are built at run time without -Werror, so a warning in the
// header would otherwise go unseen.  Built as an object, never run.
#include "cuda_emu.h"

__device__ float block_sum(float v) {
  TG_SHARED(float, part, 32);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(256) check_kernel(TG_ARG(const float) x, TG_ARG(float) y,
                                                                TG_ARG(unsigned short) h, int n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float4 v = TG_LD4(x, i * 4);
    y[i] = v.x + v.y + v.z + v.w + block_sum(x[i]);
    y[i] += 1.0f;
    h[i] = ::tg_emu::f32_to_bf16_rn(y[i]);
    atomicAdd(&y[0], 1.0f);
  }
  TG_SHARED(__align__(16) unsigned, tile, 64 * 8);
  TG_PTR(const unsigned) row = tile + (threadIdx.x & 15) * 8;
  unsigned b[2], a[4] = {0, 0, 0, 0};
  float c[4] = {0, 0, 0, 0};
  tile[threadIdx.x] = 0u;
  __syncthreads();
  ::tg_emu::ldmatrix(2, true, ::tg_emu::cvta_to_shared(row), b, __LINE__);
  ::tg_emu::mma_m16n8k16_bf16(c, a, b[0], b[1], __LINE__);
  ::tg_emu::cp_async(::tg_emu::cvta_to_shared(tile + 4 * threadIdx.x), x + 4 * i, 16, __LINE__);
  y[0] = c[0] + ::tg_emu::ex2_approx_ftz(1.0f) + ::tg_emu::lg2_approx_ftz(2.0f) + __int_as_float(__ballot_sync(~0u, 1));
}

TG_EMU_KERNEL_TABLE(TG_EMU_KERNEL(check_kernel))
