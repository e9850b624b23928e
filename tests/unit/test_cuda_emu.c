/* test_cuda_emu.c: the emulated CUDA device (runtime/cuda/emu/) through
 * the api table, as the backend will use it.
 *
 * Kernels are written here as CUDA source in the generated code's style
 * (TG_ARG, TG_SHARED, PTX in small functions with the emulator's branch);
 * the same source also compiles with NVRTC (checked when NVRTC is there),
 * so the tests are about CUDA as the GPU runs it.
 *
 * Built-ins: indices over a 3-D grid of 3-D blocks; every kind of shuffle
 * (widths, 64-bit values) and vote against their definitions computed on
 * the host; a block reduction over several blocks; atomics on global and
 * shared memory; __syncwarp ordering shared memory within a warp; f16 and
 * bf16 conversions against their definitions; mma.m16n8k16 and ldmatrix
 * against a naive product for random fragments.
 *
 * Checks: a missing __syncthreads in a block reduction is a race naming
 * the kernel; an index one past the end of an argument names the kernel,
 * the argument and the index; a barrier only some threads reach is a
 * deadlock; threads at different barriers, lanes at different collectives,
 * a misaligned float4 load, an out-of-bounds shared index, a write-write
 * race and reading unwritten shared memory are all reported.  A failed
 * launch is sticky until the context is released.
 *
 * Driver: memory and copies checked against allocations, stream capture and
 * graph replay (launches, copies, sets, event-record nodes), the capture
 * rules; events recorded in a capture (CUDA_ERROR_CAPTURED_EVENT); the
 * launch limits (parameter space, __launch_bounds__, static plus dynamic
 * shared memory); the stream-order checker, on streams and in graphs. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_api.h"
#include "flash_cuda.h"
#include "nvrtc.h"

static tg_cuda_api api;
static CUcontext ctx;

#define CK(call)                                                                                                    \
  do {                                                                                                              \
    CUresult r_ = (call);                                                                                           \
    ck_assert_msg(r_ == CUDA_SUCCESS, "%s: %d: %s", #call, r_, api.emu_last_error());                               \
  } while (0)

static void setup(void) {
  tg_cuda_api_emulated(&api);
  CK(api.cuInit(0));
  CK(api.cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(api.cuCtxSetCurrent(ctx));
}

static void teardown(void) { api.cuDevicePrimaryCtxRelease(0); }

/* ---- the kernels ------------------------------------------------------------------- */

static const char kernels[] =
    "#ifdef __CUDA_ARCH__\n"
    "#define TG_ARG(T) T *__restrict__\n"
    "#define TG_PTR(T) T *\n"
    "#define TG_SHARED(T, name, count) __shared__ T name[count]\n"
    "#define TG_LD4(p, i) (*(const float4 *)&(p)[i])\n"
    "#endif\n"
    "\n"
    "// tg kernel: indices\n"
    "// Each thread writes its indices and the launch's shape, 12 ints.\n"
    "extern \"C\" __global__ void indices(TG_ARG(int) out) {\n"
    "  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
    "  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
    "  const int g = 12 * (block * blockDim.x * blockDim.y * blockDim.z + thread);\n"
    "  out[g + 0] = threadIdx.x; out[g + 1] = threadIdx.y; out[g + 2] = threadIdx.z;\n"
    "  out[g + 3] = blockIdx.x; out[g + 4] = blockIdx.y; out[g + 5] = blockIdx.z;\n"
    "  out[g + 6] = blockDim.x; out[g + 7] = blockDim.y; out[g + 8] = blockDim.z;\n"
    "  out[g + 9] = gridDim.x; out[g + 10] = gridDim.y; out[g + 11] = gridDim.z;\n"
    "}\n"
    "\n"
    "// tg kernel: shuffles\n"
    "// Every kind of shuffle and vote, 10 results a thread (floats as bits).\n"
    "extern \"C\" __global__ void shuffles(TG_ARG(const float) in, TG_ARG(unsigned) out) {\n"
    "  const int g = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;\n"
    "  const float v = in[g];\n"
    "  const long long w = (long long)g << 33;\n"
    "  out[10 * g + 0] = __float_as_uint(__shfl_sync(0xffffffffu, v, 5));\n"
    "  out[10 * g + 1] = __float_as_uint(__shfl_sync(0xffffffffu, v, lane + 3, 8));\n"
    "  out[10 * g + 2] = __float_as_uint(__shfl_up_sync(0xffffffffu, v, 3));\n"
    "  out[10 * g + 3] = __float_as_uint(__shfl_down_sync(0xffffffffu, v, 3, 16));\n"
    "  out[10 * g + 4] = __float_as_uint(__shfl_xor_sync(0xffffffffu, v, 9));\n"
    "  out[10 * g + 5] = (unsigned)(__shfl_xor_sync(0xffffffffu, w, 1) >> 33);\n"
    "  out[10 * g + 6] = __ballot_sync(0xffffffffu, v > 0.5f);\n"
    "  out[10 * g + 7] = __any_sync(0xffffffffu, v > 0.99f);\n"
    "  out[10 * g + 8] = __all_sync(0xffffffffu, v > -1.0f);\n"
    "  // only the lanes of the mask take part\n"
    "  out[10 * g + 9] = __float_as_uint(lane < 16 ? __shfl_down_sync(0x0000ffffu, v, 2) : v);\n"
    "}\n"
    "\n"
    "// The generated code's block reduction (codegen/cuda/render_cuda.c): every thread\n"
    "// gets the sum.\n"
    "__device__ float block_sum(float v) {\n"
    "  TG_SHARED(float, part, 32);\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  __syncthreads();\n"
    "  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;\n"
    "  __syncthreads();\n"
    "  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? part[threadIdx.x & 31] : 0.0f;\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  return v;\n"
    "}\n"
    "// The same with the barrier between the partial sums' stores and loads missing.\n"
    "__device__ float block_sum_unsynced(float v) {\n"
    "  TG_SHARED(float, part, 32);\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  __syncthreads();\n"
    "  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;\n"
    "  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? part[threadIdx.x & 31] : 0.0f;\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  return v;\n"
    "}\n"
    "\n"
    "// tg kernel: row_sums\n"
    "// sums[b] = the sum of row b of x [rows][n], a block a row, twice (the shared\n"
    "// array is reused across calls); mismatch[b] counts the threads that got other bits.\n"
    "extern \"C\" __global__ void row_sums(TG_ARG(const float) x, TG_ARG(float) sums, int n) {\n"
    "  float acc = 0.0f;\n"
    "  for (int j = threadIdx.x; j < n; j += blockDim.x) acc += x[(long long)blockIdx.x * n + j];\n"
    "  const float s = block_sum(acc);\n"
    "  const float s2 = block_sum(2.0f * acc);\n"
    "  if (threadIdx.x == 0) { sums[3 * blockIdx.x] = s; sums[3 * blockIdx.x + 1] = s2; sums[3 * blockIdx.x + 2] = 0.0f; }\n"
    "  __syncthreads();\n"
    "  if (s != __shfl_sync(0xffffffffu, s, 0) || s2 != 2.0f * s) atomicAdd(&sums[3 * blockIdx.x + 2], 1.0f);\n"
    "  if ((threadIdx.x & 31) == 0 && s != sums[3 * blockIdx.x]) atomicAdd(&sums[3 * blockIdx.x + 2], 1.0f);\n"
    "}\n"
    "\n"
    "// tg kernel: row_sums_unsynced\n"
    "extern \"C\" __global__ void row_sums_unsynced(TG_ARG(const float) x, TG_ARG(float) sums, int n) {\n"
    "  float acc = 0.0f;\n"
    "  for (int j = threadIdx.x; j < n; j += blockDim.x) acc += x[(long long)blockIdx.x * n + j];\n"
    "  const float s = block_sum_unsynced(acc);\n"
    "  if (threadIdx.x == 0) sums[blockIdx.x] = s;\n"
    "}\n"
    "\n"
    "// tg kernel: conditional_loads\n"
    "// Loads in the forms generated code writes them: in a conditional with an int\n"
    "// (a float ? float : int is a float), cast to an index, in arithmetic.\n"
    "extern \"C\" __global__ void conditional_loads(TG_ARG(const float) x, TG_ARG(const int) k, TG_ARG(float) y) {\n"
    "  const int i = threadIdx.x;\n"
    "  y[4 * i] = (i % 2 ? x[i] : 0);\n"
    "  y[4 * i + 1] = x[(long long)(long long)k[i]];\n"
    "  y[4 * i + 2] = x[i] * 0.5f + k[i];\n"
    "  y[4 * i + 3] = (float)(x[i] < 0.25f) + (float)(int)x[i];\n"
    "}\n"
    "\n"
    "// tg kernel: copy_one_too_many\n"
    "// y = x, with the bound off by one.\n"
    "extern \"C\" __global__ void copy_one_too_many(TG_ARG(const float) x, TG_ARG(float) y, int n) {\n"
    "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i <= n) y[i] = x[i];\n"
    "}\n"
    "\n"
    "// tg kernel: atomics\n"
    "extern \"C\" __global__ void atomics(TG_ARG(int) counts, TG_ARG(float) fsum, TG_ARG(unsigned) top) {\n"
    "  TG_SHARED(int, hist, 8);\n"
    "  if (threadIdx.x < 8) hist[threadIdx.x] = 0;\n"
    "  __syncthreads();\n"
    "  atomicAdd(&hist[threadIdx.x % 8], 1);\n"
    "  atomicAdd(&counts[0], 1);\n"
    "  atomicAdd(&fsum[0], 0.25f);\n"
    "  atomicMax(&top[0], (unsigned)(blockIdx.x * 1000 + threadIdx.x));\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x < 8) counts[1 + 8 * blockIdx.x + threadIdx.x] = hist[threadIdx.x];\n"
    "}\n"
    "\n"
    "// tg kernel: warp_exchange\n"
    "// Each lane reads its neighbour's store after __syncwarp: ordered within the warp.\n"
    "extern \"C\" __global__ void warp_exchange(TG_ARG(float) out, int sync) {\n"
    "  TG_SHARED(float, buf, 64);\n"
    "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
    "  buf[threadIdx.x] = (float)threadIdx.x;\n"
    "  if (sync) __syncwarp();\n"
    "  out[threadIdx.x] = buf[warp * 32 + (lane + 1) % 32];\n"
    "}\n"
    "\n"
    "// tg kernel: half_barrier\n"
    "// A barrier only the first half of the block reaches.\n"
    "extern \"C\" __global__ void half_barrier(TG_ARG(float) out) {\n"
    "  if (threadIdx.x < blockDim.x / 2) __syncthreads();\n"
    "  out[threadIdx.x] = 1.0f;\n"
    "}\n"
    "\n"
    "// tg kernel: two_barriers\n"
    "// Each half of the block at a barrier of its own.\n"
    "extern \"C\" __global__ void two_barriers(TG_ARG(float) out) {\n"
    "  if (threadIdx.x < blockDim.x / 2) {\n"
    "    out[threadIdx.x] = 1.0f;\n"
    "    __syncthreads();\n"
    "  } else {\n"
    "    __syncthreads();\n"
    "    out[threadIdx.x] = 2.0f;\n"
    "  }\n"
    "}\n"
    "\n"
    "// tg kernel: barrier_versus_warp\n"
    "// Lane 0 waits at a barrier for its warp, which waits for it at __syncwarp.\n"
    "extern \"C\" __global__ void barrier_versus_warp(TG_ARG(float) out) {\n"
    "  if (threadIdx.x == 0) __syncthreads();\n"
    "  else __syncwarp();\n"
    "  out[threadIdx.x] = 1.0f;\n"
    "}\n"
    "\n"
    "// tg kernel: split_warp\n"
    "// Half a warp shuffles while the other half votes.\n"
    "extern \"C\" __global__ void split_warp(TG_ARG(float) out) {\n"
    "  float v = (float)threadIdx.x;\n"
    "  if ((threadIdx.x & 31) < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);\n"
    "  else v = (float)__ballot_sync(0xffffffffu, v > 3.0f);\n"
    "  out[threadIdx.x] = v;\n"
    "}\n"
    "\n"
    "// tg kernel: misaligned_load\n"
    "extern \"C\" __global__ void misaligned_load(TG_ARG(const float) x, TG_ARG(float) y) {\n"
    "  const float4 v = TG_LD4(x, 4 * threadIdx.x + 1);\n"
    "  y[threadIdx.x] = v.x + v.y + v.z + v.w;\n"
    "}\n"
    "\n"
    "// tg kernel: shared_overrun\n"
    "extern \"C\" __global__ void shared_overrun(TG_ARG(float) y) {\n"
    "  TG_SHARED(float, tile, 64);\n"
    "  tile[threadIdx.x + 1] = 1.0f;\n"
    "  __syncthreads();\n"
    "  y[threadIdx.x] = tile[threadIdx.x];\n"
    "}\n"
    "\n"
    "// tg kernel: write_race\n"
    "// Two warps store to one word with no barrier between.\n"
    "extern \"C\" __global__ void write_race(TG_ARG(float) y) {\n"
    "  TG_SHARED(float, cell, 1);\n"
    "  if ((threadIdx.x & 31) == 0) cell[0] = (float)threadIdx.x;\n"
    "  __syncthreads();\n"
    "  y[threadIdx.x] = cell[0];\n"
    "}\n"
    "\n"
    "// tg kernel: neighbour_halves\n"
    "// Two warps store to the two halves of one 4-byte word with no barrier\n"
    "// between: different bytes, so no race (shared memory is byte-addressed).\n"
    "extern \"C\" __global__ void neighbour_halves(TG_ARG(float) y) {\n"
    "  TG_SHARED(unsigned short, halves, 2);\n"
    "  if ((threadIdx.x & 31) == 0) halves[threadIdx.x / 32] = (unsigned short)(100 + threadIdx.x);\n"
    "  __syncthreads();\n"
    "  y[threadIdx.x] = (float)halves[0] + 1000.0f * (float)halves[1];\n"
    "}\n"
    "\n"
    "// tg kernel: fused_multiply_add\n"
    "// a * b + c: NVRTC fuses it (--fmad=true), one rounding.  The operands\n"
    "// are loaded first, as the generated code's temporaries are (a checked\n"
    "// load between the product and the sum keeps them apart on the host).\n"
    "extern \"C\" __global__ void fused_multiply_add(TG_ARG(const float) x, TG_ARG(float) y) {\n"
    "  const float a = x[0], b = x[1], c = x[2];\n"
    "  y[threadIdx.x] = a * b + c;\n"
    "}\n"
    "\n"
    "// tg kernel: unwritten_shared\n"
    "extern \"C\" __global__ void unwritten_shared(TG_ARG(float) y) {\n"
    "  TG_SHARED(float, tile, 64);\n"
    "  if (threadIdx.x < 32) tile[threadIdx.x] = 1.0f;\n"
    "  __syncthreads();\n"
    "  y[threadIdx.x] = tile[threadIdx.x];\n"
    "}\n"
    "\n"
    "// f16 and bf16, the prelude's conversions (as render_cuda.c writes them).\n"
    "__device__ __forceinline__ float f16_load(unsigned short h) {\n"
    "#ifdef __CUDA_ARCH__\n"
    "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f;\n"
    "#else\n"
    "  return tg_emu::f16_to_f32(h);\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ unsigned short f16_store(float f) {\n"
    "#ifdef __CUDA_ARCH__\n"
    "  unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h;\n"
    "#else\n"
    "  return tg_emu::f32_to_f16_rn(f);\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ unsigned bf16x2(float lo, float hi) {\n"
    "#ifdef __CUDA_ARCH__\n"
    "  unsigned r; asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo)); return r;\n"
    "#else\n"
    "  return tg_emu::cvt_rn_bf16x2_f32(hi, lo);\n"
    "#endif\n"
    "}\n"
    "\n"
    "// tg kernel: conversions\n"
    "// For each float: its f16 (rounded), that f16 back to float, and its bf16 pair with -x.\n"
    "extern \"C\" __global__ void conversions(TG_ARG(const float) x, TG_ARG(unsigned) out, int n) {\n"
    "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  const unsigned short h = f16_store(x[i]);\n"
    "  out[3 * i] = h;\n"
    "  out[3 * i + 1] = __float_as_uint(f16_load((unsigned short)(i * 2654435761u >> 16)));\n"
    "  out[3 * i + 2] = bf16x2(x[i], -x[i]);\n"
    "}\n";

/* The tensor-core check kernels use the flash attention helpers as
 * generated (prefix fa), plus ldmatrix .x4 for A. */
static const char mma_kernels[] =
    "__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned *a) {\n"
    "#ifdef __CUDA_ARCH__\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\"\n"
    "               : \"=r\"(a[0]), \"=r\"(a[1]), \"=r\"(a[2]), \"=r\"(a[3]) : \"r\"(addr) : \"memory\");\n"
    "#else\n"
    "  tg_emu::ldmatrix(4, false, addr, a, __LINE__);\n"
    "#endif\n"
    "}\n"
    "\n"
    "// tg kernel: mma_check\n"
    "// One warp: d1 = c + a b with a's fragments loaded as the PTX ISA lays them out\n"
    "// (fa_frag_a), d2 the same with a through ldmatrix .x4; b through ldmatrix .x2 .trans\n"
    "// from a row-major [k][n] tile (fa_ldsm_t).  a [16][16], b [16][8] bf16 pairs, c [16][8].\n"
    "extern \"C\" __global__ void __launch_bounds__(32) mma_check(TG_ARG(const unsigned) a, TG_ARG(const unsigned) b,\n"
    "                                                        TG_ARG(const float) c, TG_ARG(float) d1, TG_ARG(float) d2) {\n"
    "  TG_SHARED(__align__(16) unsigned, as, 16 * 8);\n"
    "  TG_SHARED(__align__(16) unsigned, bs, 16 * 4);\n"
    "  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;\n"
    "  for (int i = lane; i < 16 * 8; i += 32) as[i] = a[i];\n"
    "  for (int i = lane; i < 16 * 4; i += 32) bs[i] = b[i];\n"
    "  __syncthreads();\n"
    "  unsigned af[4], ax[4], bf[2];\n"
    "  fa_frag_a(af, as, 8, 0, 0);\n"
    "  ldsm_x4(tg_smem_addr(as + ((lane & 7) + 8 * ((lane >> 3) & 1)) * 8 + 4 * (lane >> 4)), ax);\n"
    "  fa_ldsm_t(bs + (lane & 15) * 4, bf);\n"
    "  float x[4], y[4];\n"
    "  for (int i = 0; i < 4; i++) x[i] = y[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];\n"
    "  tg_mma_bf16(x, af, bf[0], bf[1]);\n"
    "  tg_mma_bf16(y, ax, bf[0], bf[1]);\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    d1[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = x[i];\n"
    "    d2[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = y[i];\n"
    "  }\n"
    "}\n";

/* cp.async and the approximate exp2/log2, through the same helpers. */
static const char ptx_kernels[] =
    "// tg kernel: async_copy\n"
    "// Each thread copies 16 bytes into a shared tile with cp.async (at an offset of\n"
    "// `shift` floats), waits, and reads its neighbour's after a barrier.  skip 1 leaves\n"
    "// out the wait, skip 2 the wait for the second of two groups.\n"
    "extern \"C\" __global__ void async_copy(TG_ARG(const float) x, TG_ARG(float) y, int shift, int skip) {\n"
    "  TG_SHARED(__align__(16) float, tile, 4 * 64 + 4);\n"
    "  TG_SHARED(__align__(16) float, other, 4 * 64);\n"
    "  tg_cp_async16(tg_smem_addr(tile + 4 * threadIdx.x + shift), x + 4 * threadIdx.x);\n"
    "  tg_cp_async_commit();\n"
    "  tg_cp_async16(tg_smem_addr(other + 4 * threadIdx.x), x + 4 * threadIdx.x);\n"
    "  tg_cp_async_commit();\n"
    "  if (skip == 0) tg_cp_async_wait<0>();\n"
    "  if (skip == 2) tg_cp_async_wait<1>();  // the first group only\n"
    "  __syncthreads();\n"
    "  if (skip == 2) y[threadIdx.x] = other[4 * ((threadIdx.x + 1) % 64)];\n"
    "  for (int i = 0; i < 4; i++) y[4 * threadIdx.x + i] = tile[4 * ((threadIdx.x + 1) % 64) + i + shift];\n"
    "}\n"
    "\n"
    "// tg kernel: dynamic_shared\n"
    "// Reverses x through the launch's dynamic shared memory.\n"
    "extern \"C\" __global__ void dynamic_shared(TG_ARG(const float) x, TG_ARG(float) y) {\n"
    "#ifdef __CUDA_ARCH__\n"
    "  extern __shared__ __align__(16) float buf[];\n"
    "#else\n"
    "  TG_SHARED_DYNAMIC(float, buf);\n"
    "#endif\n"
    "  buf[threadIdx.x] = x[threadIdx.x];\n"
    "  __syncthreads();\n"
    "  y[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];\n"
    "}\n"
    "\n"
    "// tg kernel: approx\n"
    "extern \"C\" __global__ void approx(TG_ARG(const float) x, TG_ARG(float) y) {\n"
    "  y[2 * threadIdx.x] = tg_ex2_approx(x[threadIdx.x]);\n"
    "  y[2 * threadIdx.x + 1] = tg_lg2_approx(x[threadIdx.x]);\n"
    "}\n";

static const char table[] =
    "#ifndef __CUDA_ARCH__\n"
    "TG_EMU_KERNEL_TABLE(TG_EMU_KERNEL(indices) TG_EMU_KERNEL(shuffles) TG_EMU_KERNEL(row_sums)\n"
    "  TG_EMU_KERNEL(row_sums_unsynced) TG_EMU_KERNEL(conditional_loads) TG_EMU_KERNEL(copy_one_too_many) TG_EMU_KERNEL(atomics)\n"
    "  TG_EMU_KERNEL(warp_exchange) TG_EMU_KERNEL(half_barrier) TG_EMU_KERNEL(two_barriers)\n"
    "  TG_EMU_KERNEL(barrier_versus_warp) TG_EMU_KERNEL(split_warp) TG_EMU_KERNEL(misaligned_load) TG_EMU_KERNEL(shared_overrun)\n"
    "  TG_EMU_KERNEL(write_race) TG_EMU_KERNEL(neighbour_halves) TG_EMU_KERNEL(fused_multiply_add) TG_EMU_KERNEL(unwritten_shared) TG_EMU_KERNEL(conversions)\n"
    "  TG_EMU_KERNEL(mma_check) TG_EMU_KERNEL(async_copy) TG_EMU_KERNEL(dynamic_shared) TG_EMU_KERNEL(approx) TG_EMU_KERNEL(fa_fwd))\n"
    "#endif\n";

/* The whole test source: the kernels, the flash helpers (and a forward
 * kernel, which comes with them), the mma check, the table. */
static char *source(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  fputs(kernels, f);
  tg_flash_shape s;
  memset(&s, 0, sizeof s);
  s.nb = 1, s.nh = 1, s.T = 16, s.D = 16, s.scale = 0.25;
  tg_flash_operand dense = {0, {256, 256, 16, 1}, false};
  s.q = s.k = s.v = s.o = dense;
  s.lse = (tg_flash_operand){0, {16, 16, 1, 0}, false};
  tg_flash_emit_cuda(f, "fa", &s, false);
  fputs(mma_kernels, f);
  fputs(ptx_kernels, f);
  fputs(table, f);
  fclose(f);
  return text;
}

static CUmodule module(void) {
  static char image_path[4096];
  if (!image_path[0]) {
    char *src = source();
    void *image;
    size_t size;
    bool hit;
    char err[16384];
    bool ok = api.compile(src, "emu_test.cu", "sm_90", &image, &size, &hit, err, sizeof err);
    if (!ok) fprintf(stderr, "%s\n", err); /* the whole of it: Check's messages are short */
    ck_assert_msg(ok, "%.1000s", err);
    snprintf(image_path, sizeof image_path, "%s", (char *)image);
    free(image);
    free(src);
  }
  CUmodule m;
  CK(api.cuModuleLoadData(&m, image_path));
  return m;
}

static CUfunction function(CUmodule m, const char *name) {
  CUfunction f;
  CK(api.cuModuleGetFunction(&f, m, name));
  return f;
}

static CUdeviceptr upload(const void *host, size_t bytes) {
  CUdeviceptr p;
  CK(api.cuMemAlloc(&p, bytes));
  if (host) CK(api.cuMemcpyHtoD(p, host, bytes));
  return p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float uniform(void) { /* xorshift64, in [0, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((rng >> 40) * (1.0 / 16777216.0));
}

/* Launches f with the argument pointers given, expecting `want`; returns
 * the emulator's message. */
static const char *launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          void **args, CUresult want) {
  CUresult r = api.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, 0, NULL, args, NULL);
  ck_assert_msg(r == want, "launch gave %d, wanted %d: %s", r, want, api.emu_last_error());
  if (want != CUDA_SUCCESS) printf("expected failure: %s\n", api.emu_last_error()); /* for the test's log */
  return api.emu_last_error();
}

/* ---- NVRTC: the test kernels are CUDA -------------------------------------------------- */

START_TEST(test_kernels_compile_with_nvrtc) {
  char *src = source();
  tg_cubin c = {0};
  char err[16384];
  if (!tg_nvrtc_compile(src, "emu_test.cu", "sm_90", NULL, 0, &c, err, sizeof err)) {
    /* without NVRTC there is nothing to compare with; a compile error is a bug */
    ck_assert_msg(strstr(err, "cannot load NVRTC"), "%s", err);
  } else {
    ck_assert_msg(!c.log || !c.log[0], "NVRTC: %s", c.log);
  }
  tg_cubin_free(&c);
  free(src);
}
END_TEST

/* ---- built-ins ---------------------------------------------------------------------------- */

START_TEST(test_indices_over_3d_grid) {
  CUmodule m = module();
  const unsigned g[3] = {3, 2, 2}, b[3] = {4, 3, 2};
  const int n = 12 * 3 * 2 * 2 * 4 * 3 * 2;
  CUdeviceptr out = upload(NULL, sizeof(int) * n);
  void *args[] = {&out};
  launch(function(m, "indices"), g[0], g[1], g[2], b[0], b[1], b[2], args, CUDA_SUCCESS);
  int *h = malloc(sizeof(int) * n);
  CK(api.cuMemcpyDtoH(h, out, sizeof(int) * n));
  int k = 0;
  for (unsigned bz = 0; bz < g[2]; bz++)
    for (unsigned by = 0; by < g[1]; by++)
      for (unsigned bx = 0; bx < g[0]; bx++)
        for (unsigned tz = 0; tz < b[2]; tz++)
          for (unsigned ty = 0; ty < b[1]; ty++)
            for (unsigned tx = 0; tx < b[0]; tx++, k += 12) {
              const int want[12] = {(int)tx, (int)ty, (int)tz, (int)bx, (int)by, (int)bz,
                                    (int)b[0], (int)b[1], (int)b[2], (int)g[0], (int)g[1], (int)g[2]};
              for (int i = 0; i < 12; i++) ck_assert_msg(h[k + i] == want[i], "element %d of record %d", i, k / 12);
            }
  free(h);
}
END_TEST

static unsigned bits(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}

START_TEST(test_shuffles_and_votes) {
  CUmodule m = module();
  enum { N = 128 }; /* 2 blocks of 64: 4 warps */
  float x[N];
  for (int i = 0; i < N; i++) x[i] = uniform();
  x[70] = 0.995f; /* one lane of warp 2 makes __any_sync(v > 0.99) true */
  for (int i = 0; i < N; i++)
    if (i / 32 != 2 && x[i] > 0.99f) x[i] = 0.5f;
  CUdeviceptr in = upload(x, sizeof x), out = upload(NULL, sizeof(unsigned) * 10 * N);
  void *args[] = {&in, &out};
  launch(function(m, "shuffles"), 2, 1, 1, 64, 1, 1, args, CUDA_SUCCESS);
  unsigned h[10 * N];
  CK(api.cuMemcpyDtoH(h, out, sizeof h));
  for (int g = 0; g < N; g++) {
    const int lane = g % 32, base = g - lane;
    unsigned ballot = 0;
    int any = 0, all = 1;
    for (int l = 0; l < 32; l++) {
      ballot |= (unsigned)(x[base + l] > 0.5f) << l;
      any |= x[base + l] > 0.99f;
      all &= x[base + l] > -1.0f;
    }
    const unsigned want[10] = {
        bits(x[base + 5]),
        bits(x[base + (lane & ~7) + (lane + 3) % 8]),           /* width 8: within its group of 8 */
        bits(x[lane >= 3 ? g - 3 : g]),                          /* up: the first 3 keep their own */
        bits(x[lane % 16 + 3 < 16 ? g + 3 : g]),                 /* down, width 16 */
        bits(x[base + (lane ^ 9)]),
        (unsigned)(base + (lane ^ 1)),                           /* 64-bit */
        ballot,
        (unsigned)any,
        (unsigned)all,
        bits(lane < 16 ? x[lane + 2 < 16 ? g + 2 : g] : x[g]),   /* mask of lanes 0-15 */
    };
    for (int i = 0; i < 10; i++)
      ck_assert_msg(h[10 * g + i] == want[i], "thread %d, result %d: %#x, want %#x", g, i, h[10 * g + i], want[i]);
  }
}
END_TEST

START_TEST(test_block_reduction_over_blocks) {
  CUmodule m = module();
  enum { ROWS = 5, N = 1000 };
  float *x = malloc(sizeof(float) * ROWS * N);
  for (int i = 0; i < ROWS * N; i++) x[i] = uniform() - 0.5f;
  CUdeviceptr dx = upload(x, sizeof(float) * ROWS * N), ds = upload(NULL, sizeof(float) * 3 * ROWS);
  int n = N;
  void *args[] = {&dx, &ds, &n};
  launch(function(m, "row_sums"), ROWS, 1, 1, 256, 1, 1, args, CUDA_SUCCESS);
  float got[3 * ROWS];
  CK(api.cuMemcpyDtoH(got, ds, sizeof got));
  for (int r = 0; r < ROWS; r++) {
    double want = 0, mag = 0;
    for (int j = 0; j < N; j++) want += x[r * N + j], mag += fabs(x[r * N + j]);
    /* float sums of 1000 terms: within (N) u of the sum of magnitudes */
    ck_assert_msg(fabs(got[3 * r] - want) <= 1000 * 6e-8 * mag, "row %d: %g, want %g", r, got[3 * r], want);
    ck_assert_msg(got[3 * r + 1] == 2 * got[3 * r], "row %d twice: %g", r, got[3 * r + 1]);
    /* every thread of every warp has the same sum (the generated reduction
     * once gave it to warp 0 only: found here, on the emulator) */
    ck_assert_msg(got[3 * r + 2] == 0, "row %d: %g threads got another sum", r, got[3 * r + 2]);
  }
  free(x);
}
END_TEST

START_TEST(test_loads_keep_their_type) {
  CUmodule m = module();
  float x[32];
  int k[32];
  for (int i = 0; i < 32; i++) x[i] = 0.125f * (float)i + 0.0625f, k[i] = 31 - i;
  CUdeviceptr dx = upload(x, sizeof x), dk = upload(k, sizeof k), dy = upload(NULL, sizeof(float) * 128);
  void *args[] = {&dx, &dk, &dy};
  launch(function(m, "conditional_loads"), 1, 1, 1, 32, 1, 1, args, CUDA_SUCCESS);
  float y[128];
  CK(api.cuMemcpyDtoH(y, dy, sizeof y));
  for (int i = 0; i < 32; i++) {
    ck_assert_msg(y[4 * i] == (i % 2 ? x[i] : 0.0f), "%d: %g", i, (double)y[4 * i]);
    ck_assert(y[4 * i + 1] == x[31 - i]);
    ck_assert(y[4 * i + 2] == x[i] * 0.5f + (float)k[i]);
    ck_assert(y[4 * i + 3] == (float)(x[i] < 0.25f) + (float)(int)x[i]);
  }
}
END_TEST

START_TEST(test_atomics) {
  CUmodule m = module();
  enum { BLOCKS = 3, THREADS = 96 };
  int zeros[1 + 8 * BLOCKS] = {0};
  float fz = 0;
  unsigned uz = 0;
  CUdeviceptr counts = upload(zeros, sizeof zeros), fsum = upload(&fz, 4), top = upload(&uz, 4);
  void *args[] = {&counts, &fsum, &top};
  launch(function(m, "atomics"), BLOCKS, 1, 1, THREADS, 1, 1, args, CUDA_SUCCESS);
  int c[1 + 8 * BLOCKS];
  float f;
  unsigned t;
  CK(api.cuMemcpyDtoH(c, counts, sizeof c));
  CK(api.cuMemcpyDtoH(&f, fsum, 4));
  CK(api.cuMemcpyDtoH(&t, top, 4));
  ck_assert_int_eq(c[0], BLOCKS * THREADS);
  for (int i = 1; i < 1 + 8 * BLOCKS; i++) ck_assert_int_eq(c[i], THREADS / 8);
  ck_assert(f == 0.25f * BLOCKS * THREADS); /* quarters add exactly */
  ck_assert_uint_eq(t, (BLOCKS - 1) * 1000 + THREADS - 1);
}
END_TEST

START_TEST(test_syncwarp_orders_shared_memory) {
  CUmodule m = module();
  CUdeviceptr out = upload(NULL, sizeof(float) * 64);
  int sync = 1;
  void *args[] = {&out, &sync};
  launch(function(m, "warp_exchange"), 1, 1, 1, 64, 1, 1, args, CUDA_SUCCESS);
  float h[64];
  CK(api.cuMemcpyDtoH(h, out, sizeof h));
  for (int i = 0; i < 64; i++) ck_assert(h[i] == (float)((i & ~31) + ((i & 31) + 1) % 32));
  /* without the __syncwarp, lane 0 reads lane 1's store unordered */
  sync = 0;
  const char *msg = launch(function(m, "warp_exchange"), 1, 1, 1, 64, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
  ck_assert_msg(strstr(msg, "kernel warp_exchange") && (strstr(msg, "race") || strstr(msg, "no thread of this block has written")),
                "%s", msg);
}
END_TEST

/* Round to nearest even, from the definition: the nearest of the two
 * neighbouring values of the format, ties to the even one. */
static uint16_t ref_bf16(float f) {
  if (isnan(f)) return 0x7fff;
  if (isinf(f)) return (uint16_t)(bits(f) >> 16);
  uint32_t u = bits(f), lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float a, b;
  memcpy(&a, &lo, 4);
  memcpy(&b, &hi, 4);
  double da = fabs((double)f - a), db = fabs((double)f - b);
  if (isinf(b)) return (uint16_t)(lo >> 16) + (db < da || (da == db && ((lo >> 16) & 1)) ? 1 : 0);
  if (da < db || (da == db && !((lo >> 16) & 1))) return (uint16_t)(lo >> 16);
  return (uint16_t)(hi >> 16);
}

static double half_value(uint16_t h) {
  int e = (h >> 10) & 31, man = h & 1023;
  double v = e == 31 ? (man ? NAN : INFINITY) : e ? ldexp(1024 + man, e - 25) : ldexp(man, -24);
  return h & 0x8000 ? -v : v;
}

/* The nearest half to f, ties to even (searching the ordered halves). */
static uint16_t ref_f16(float f) {
  if (isnan(f)) return 0x7fff;
  uint16_t sign = signbit(f) ? 0x8000 : 0, best = 0;
  double a = fabs((double)f), bd = INFINITY;
  if (a >= 65520.0) return sign | 0x7c00; /* rounds past the largest half (65504) */
  for (uint32_t h = 0; h < 0x7c00; h++) {
    double d = fabs(half_value((uint16_t)h) - a);
    if (d < bd || (d == bd && !(h & 1))) bd = d, best = (uint16_t)h;
  }
  return sign | best;
}

START_TEST(test_f16_and_bf16_conversions) {
  CUmodule m = module();
  enum { N = 512 };
  float x[N];
  for (int i = 0; i < N; i++) {
    /* magnitudes from subnormal halves to past the largest half, ties included */
    float mant = 1.0f + (float)(i % 64) / 64.0f + ((i % 7) ? 0.0f : 1.0f / 2048.0f);
    x[i] = ldexpf(mant, (i % 48) - 28) * ((i & 1) ? -1.0f : 1.0f);
  }
  x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = NAN, x[4] = 65504.0f, x[5] = 65520.0f, x[6] = 5.96046448e-8f;
  x[7] = 2.98023224e-8f, x[8] = 3.0e-8f, x[9] = 1.00048828125f; /* a tie in f16 */
  CUdeviceptr dx = upload(x, sizeof x), out = upload(NULL, sizeof(unsigned) * 3 * N);
  int n = N;
  void *args[] = {&dx, &out, &n};
  launch(function(m, "conversions"), 2, 1, 1, 256, 1, 1, args, CUDA_SUCCESS);
  unsigned *h = malloc(sizeof(unsigned) * 3 * N);
  CK(api.cuMemcpyDtoH(h, out, sizeof(unsigned) * 3 * N));
  for (int i = 0; i < N; i++) {
    ck_assert_msg(h[3 * i] == ref_f16(x[i]), "f16 of %a: %#x, want %#x", (double)x[i], h[3 * i], ref_f16(x[i]));
    uint16_t hv = (uint16_t)((unsigned)i * 2654435761u >> 16);
    double want = half_value(hv);
    float got;
    memcpy(&got, &h[3 * i + 1], 4);
    ck_assert_msg((isnan(want) && isnan(got)) || got == (float)want, "half %#x: %a, want %a", hv, (double)got, want);
    unsigned pair = ((unsigned)ref_bf16(-x[i]) << 16) | ref_bf16(x[i]);
    ck_assert_msg(h[3 * i + 2] == pair, "bf16 pair of %a: %#x, want %#x", (double)x[i], h[3 * i + 2], pair);
  }
  free(h);
}
END_TEST

static uint16_t to_bf16(float f) { return ref_bf16(f); }
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

START_TEST(test_mma_and_ldmatrix_against_naive_product) {
  CUmodule m = module();
  CUfunction f = function(m, "mma_check");
  for (int round = 0; round < 20; round++) {
    /* a [16][16], b [16][8] as bf16 pairs (lower column in the low half), c [16][8] */
    uint16_t a[16 * 16], b[16 * 8];
    float c[16 * 8];
    for (int i = 0; i < 256; i++) a[i] = to_bf16(4 * uniform() - 2);
    for (int i = 0; i < 128; i++) b[i] = to_bf16(4 * uniform() - 2), c[i] = 8 * uniform() - 4;
    CUdeviceptr da = upload(a, sizeof a), db = upload(b, sizeof b), dc = upload(c, sizeof c);
    CUdeviceptr d1 = upload(NULL, sizeof c), d2 = upload(NULL, sizeof c);
    void *args[] = {&da, &db, &dc, &d1, &d2};
    launch(f, 1, 1, 1, 32, 1, 1, args, CUDA_SUCCESS);
    float r1[128], r2[128];
    CK(api.cuMemcpyDtoH(r1, d1, sizeof r1));
    CK(api.cuMemcpyDtoH(r2, d2, sizeof r2));
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 8; j++) {
        double want = c[i * 8 + j], mag = fabs(c[i * 8 + j]);
        for (int k = 0; k < 16; k++) {
          double p = (double)from_bf16(a[i * 16 + k]) * from_bf16(b[k * 8 + j]);
          want += p, mag += fabs(p);
        }
        /* the products are exact; the emulator rounds the sum once: half an
         * ulp of the result.  A wrong fragment is off by O(1). */
        ck_assert_msg(fabs(r1[i * 8 + j] - want) <= 6e-8 * mag + 1e-30, "round %d: d(%d,%d) %g, want %g", round, i, j,
                      (double)r1[i * 8 + j], want);
        ck_assert_msg(r2[i * 8 + j] == r1[i * 8 + j], "ldmatrix .x4 gave a different a at (%d,%d)", i, j);
      }
    CK(api.cuMemFree(da));
    CK(api.cuMemFree(db));
    CK(api.cuMemFree(dc));
    CK(api.cuMemFree(d1));
    CK(api.cuMemFree(d2));
  }
}
END_TEST

START_TEST(test_cp_async_and_approximations) {
  CUmodule m = module();
  float x[256], y[256];
  for (int i = 0; i < 256; i++) x[i] = (float)i;
  CUdeviceptr dx = upload(x, sizeof x), dy = upload(NULL, sizeof y);
  int shift = 0, skip = 0;
  void *args[] = {&dx, &dy, &shift, &skip};
  launch(function(m, "async_copy"), 1, 1, 1, 64, 1, 1, args, CUDA_SUCCESS);
  CK(api.cuMemcpyDtoH(y, dy, sizeof y));
  for (int i = 0; i < 256; i++) ck_assert(y[i] == x[(i + 4) % 256]);
  /* a tile read before the cp.async.wait_group that completes its copy: with no wait,
   * and with a wait that leaves the second group in flight */
  for (skip = 1; skip <= 2; skip++) {
    const char *msg = launch(function(m, "async_copy"), 1, 1, 1, 64, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
    ck_assert_msg(strstr(msg, skip == 1 ? "tile[" : "other[") && strstr(msg, "which a cp.async by thread") &&
                      strstr(msg, "no cp.async.wait_group has completed that copy"),
                  "%s", msg);
    CK(api.cuDevicePrimaryCtxRelease(0)); /* the error is sticky */
    CK(api.cuDevicePrimaryCtxRetain(&ctx, 0));
    m = module();
    dx = upload(x, sizeof x), dy = upload(NULL, sizeof y);
  }
  skip = 0;
  /* cp.async of 16 bytes to a shared address that is not 16-byte aligned */
  shift = 1;
  const char *msg = launch(function(m, "async_copy"), 1, 1, 1, 64, 1, 1, args, 716);
  ck_assert_msg(strstr(msg, "cp.async to shared address") && strstr(msg, "not 16-byte aligned"), "%s", msg);
  CK(api.cuDevicePrimaryCtxRelease(0)); /* the error is sticky */
  CK(api.cuDevicePrimaryCtxRetain(&ctx, 0));
  m = module();
  /* ex2.approx.ftz and lg2.approx.ftz: subnormal inputs count as zero,
   * subnormal results become zero */
  const float in[8] = {3.0f, -0.5f, 1e-40f, -130.0f, 8.0f, 0.0f, -INFINITY, 1e-38f};
  const float want[16] = {8.0f, log2f(3.0f), exp2f(-0.5f), NAN, 1.0f, -INFINITY, 0.0f, NAN,
                          256.0f, 3.0f, 1.0f, -INFINITY, 0.0f, NAN, 1.0f, -INFINITY}; /* 1e-38: subnormal */
  dx = upload(in, sizeof in);
  dy = upload(NULL, sizeof(float) * 16);
  void *args2[] = {&dx, &dy};
  launch(function(m, "approx"), 1, 1, 1, 8, 1, 1, args2, CUDA_SUCCESS);
  float got[16];
  CK(api.cuMemcpyDtoH(got, dy, sizeof got));
  for (int i = 0; i < 16; i++)
    ck_assert_msg((isnan(want[i]) && isnan(got[i])) || got[i] == want[i] || fabsf(got[i] - want[i]) <= 2e-7f * fabsf(want[i]),
                  "%d: %a, want %a", i, (double)got[i], (double)want[i]);
}
END_TEST

START_TEST(test_dynamic_shared_memory) {
  CUmodule m = module();
  CUfunction f = function(m, "dynamic_shared");
  enum { N = 1024 };
  float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = (float)i;
  CUdeviceptr dx = upload(x, sizeof x), dy = upload(NULL, sizeof y);
  void *args[] = {&dx, &dy};
  CK(api.cuLaunchKernel(f, 1, 1, 1, N, 1, 1, N * 4, NULL, args, NULL));
  CK(api.cuMemcpyDtoH(y, dy, sizeof y));
  for (int i = 0; i < N; i++) ck_assert(y[i] == x[N - 1 - i]);
  /* 64 KiB of it needs the opt-in attribute, as on the GPU */
  ck_assert_int_eq(api.cuLaunchKernel(f, 1, 1, 1, N, 1, 1, 65536, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CK(api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536));
  CK(api.cuLaunchKernel(f, 1, 1, 1, N, 1, 1, 65536, NULL, args, NULL));
  /* too little of it for the block: the last threads' stores fall outside */
  const char *msg = 0;
  ck_assert_int_eq(api.cuLaunchKernel(f, 1, 1, 1, N, 1, 1, 1000, NULL, args, NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  msg = api.emu_last_error();
  ck_assert_msg(strstr(msg, "the dynamic shared memory[250]"), "%s", msg);
}
END_TEST

/* ---- what the checks catch ---------------------------------------------------------------- */

START_TEST(test_missing_barrier_is_a_race) {
  CUmodule m = module();
  enum { ROWS = 2, N = 512 };
  float x[ROWS * N];
  for (int i = 0; i < ROWS * N; i++) x[i] = 1.0f;
  CUdeviceptr dx = upload(x, sizeof x), ds = upload(NULL, sizeof(float) * ROWS);
  int n = N;
  void *args[] = {&dx, &ds, &n};
  const char *msg = launch(function(m, "row_sums_unsynced"), ROWS, 1, 1, 256, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
  /* thread 1 reads part[1] before warp 1's lane 0 has stored it: unwritten
   * (or, had it been written before, a race); either names the kernel and
   * the array */
  ck_assert_msg(strstr(msg, "kernel row_sums_unsynced") && strstr(msg, "block (0,0,0)") && strstr(msg, "part["), "%s",
                msg);
  ck_assert_msg(strstr(msg, "race") || strstr(msg, "no thread of this block has written"), "%s", msg);
}
END_TEST

START_TEST(test_one_past_the_end_names_the_argument) {
  CUmodule m = module();
  enum { N = 300 };
  /* x and y are two pieces of one allocation, as the backend's arena: only
   * the description can tell that y[N] is outside y */
  CUdeviceptr arena = upload(NULL, sizeof(float) * 2 * N + 1024);
  CUdeviceptr x = arena, y = arena + sizeof(float) * N;
  int n = N;
  void *args[] = {&x, &y, &n};
  const char *names[] = {"b7 (ln_f.weight)", "b12", "n"};
  size_t bytes[] = {sizeof(float) * N, sizeof(float) * N, 0};
  api.emu_describe_launch("copy_one_too_many", "gpt2.tg:27", 3, names, bytes);
  const char *msg = launch(function(m, "copy_one_too_many"), 2, 1, 1, 256, 1, 1, args, CUDA_ERROR_ILLEGAL_ADDRESS);
  ck_assert_msg(strstr(msg, "kernel copy_one_too_many (gpt2.tg:27)"), "%s", msg);
  ck_assert_msg(strstr(msg, "block (1,0,0), thread (44,0,0)"), "%s", msg); /* thread 300 */
  ck_assert_msg(strstr(msg, "b7 (ln_f.weight)[300]") && strstr(msg, "one past the end"), "%s", msg);
  ck_assert_msg(strstr(msg, "emu_test.cu:"), "the source line: %s", msg);
  /* the error is sticky, as on a GPU, until the context is released */
  CUdeviceptr p;
  ck_assert_int_eq(api.cuMemAlloc(&p, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
  CK(api.cuDevicePrimaryCtxRelease(0));
  CK(api.cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(api.cuMemAlloc(&p, 64));
}
END_TEST

START_TEST(test_undescribed_arguments_are_checked_against_their_allocation) {
  CUmodule m = module();
  enum { N = 300 };
  CUdeviceptr x = upload(NULL, sizeof(float) * N), y = upload(NULL, sizeof(float) * N);
  int n = N;
  void *args[] = {&x, &y, &n};
  const char *msg = launch(function(m, "copy_one_too_many"), 2, 1, 1, 256, 1, 1, args, CUDA_ERROR_ILLEGAL_ADDRESS);
  ck_assert_msg(strstr(msg, "argument 0[300]") && strstr(msg, "one past the end"), "%s", msg);
}
END_TEST

START_TEST(test_wrong_description_is_refused) {
  CUmodule m = module();
  CUdeviceptr x = upload(NULL, 64), y = upload(NULL, 64);
  int n = 4;
  void *args[] = {&x, &y, &n};
  size_t bytes[] = {64, 128, 0}; /* y's extent runs past its allocation */
  api.emu_describe_launch("copy_one_too_many", NULL, 3, NULL, bytes);
  launch(function(m, "copy_one_too_many"), 1, 1, 1, 4, 1, 1, args, CUDA_ERROR_INVALID_VALUE);
  ck_assert_msg(strstr(api.emu_last_error(), "description of argument 1"), "%s", api.emu_last_error());
  api.emu_describe_launch("indices", NULL, 1, NULL, bytes);
  launch(function(m, "copy_one_too_many"), 1, 1, 1, 4, 1, 1, args, CUDA_ERROR_INVALID_VALUE);
  ck_assert_msg(strstr(api.emu_last_error(), "described kernel indices"), "%s", api.emu_last_error());
}
END_TEST

START_TEST(test_barrier_some_threads_skip_is_reported) {
  CUmodule m = module();
  CUdeviceptr out = upload(NULL, sizeof(float) * 256);
  void *args[] = {&out};
  const char *msg = launch(function(m, "half_barrier"), 1, 1, 1, 256, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
  ck_assert_msg(strstr(msg, "kernel half_barrier") && strstr(msg, "__syncthreads") &&
                    strstr(msg, "not every thread reaches"),
                "%s", msg);
}
END_TEST

START_TEST(test_threads_at_different_barriers) {
  CUmodule m = module();
  CUdeviceptr out = upload(NULL, sizeof(float) * 128);
  void *args[] = {&out};
  const char *msg = launch(function(m, "two_barriers"), 1, 1, 1, 128, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
  ck_assert_msg(strstr(msg, "kernel two_barriers") && strstr(msg, "must reach the same barrier"), "%s", msg);
}
END_TEST

START_TEST(test_deadlock_is_reported) {
  CUmodule m = module();
  CUdeviceptr out = upload(NULL, sizeof(float) * 32);
  void *args[] = {&out};
  const char *msg = launch(function(m, "barrier_versus_warp"), 1, 1, 1, 32, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
  ck_assert_msg(strstr(msg, "kernel barrier_versus_warp") && strstr(msg, "deadlock") &&
                    strstr(msg, "thread (0,0,0) waits at __syncthreads") &&
                    strstr(msg, "threads (1,0,0) to (31,0,0) wait at __syncwarp"),
                "%s", msg);
}
END_TEST

START_TEST(test_lanes_at_different_collectives) {
  CUmodule m = module();
  CUdeviceptr out = upload(NULL, sizeof(float) * 32);
  void *args[] = {&out};
  const char *msg = launch(function(m, "split_warp"), 1, 1, 1, 32, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
  ck_assert_msg(strstr(msg, "kernel split_warp") && strstr(msg, "disagree") && strstr(msg, "__ballot_sync") &&
                    strstr(msg, "__shfl_xor_sync"),
                "%s", msg);
}
END_TEST

START_TEST(test_misaligned_vector_load) {
  CUmodule m = module();
  CUdeviceptr x = upload(NULL, sizeof(float) * 4 * 33), y = upload(NULL, sizeof(float) * 32);
  void *args[] = {&x, &y};
  const char *msg = launch(function(m, "misaligned_load"), 1, 1, 1, 32, 1, 1, args, 716);
  ck_assert_msg(strstr(msg, "kernel misaligned_load") && strstr(msg, "not 16-byte aligned"), "%s", msg);
}
END_TEST

START_TEST(test_shared_index_out_of_bounds) {
  CUmodule m = module();
  CUdeviceptr y = upload(NULL, sizeof(float) * 64);
  void *args[] = {&y};
  const char *msg = launch(function(m, "shared_overrun"), 1, 1, 1, 64, 1, 1, args, CUDA_ERROR_ILLEGAL_ADDRESS);
  ck_assert_msg(strstr(msg, "kernel shared_overrun") && strstr(msg, "thread (63,0,0)") && strstr(msg, "tile[64]") &&
                    strstr(msg, "shared array tile"),
                "%s", msg);
}
END_TEST

START_TEST(test_write_write_race) {
  CUmodule m = module();
  CUdeviceptr y = upload(NULL, sizeof(float) * 64);
  void *args[] = {&y};
  const char *msg = launch(function(m, "write_race"), 1, 1, 1, 64, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
  ck_assert_msg(strstr(msg, "thread (32,0,0)") && strstr(msg, "writes cell[0]") && strstr(msg, "thread (0,0,0) wrote"),
                "%s", msg);
}
END_TEST

START_TEST(test_neighbouring_halves_do_not_race) {
  CUmodule m = module();
  CUdeviceptr y = upload(NULL, sizeof(float) * 64);
  void *args[] = {&y};
  launch(function(m, "neighbour_halves"), 1, 1, 1, 64, 1, 1, args, CUDA_SUCCESS);
  float out[64];
  CK(api.cuMemcpyDtoH(out, y, sizeof out));
  for (int i = 0; i < 64; i++) ck_assert_float_eq(out[i], 100.0f + 1000.0f * 132.0f);
}
END_TEST

/* (1 + 2^-23)^2 - (1 + 2^-22) is 2^-46 when the product is fused into the
 * sum (one rounding, as NVRTC's default --fmad=true compiles it) and 0 when
 * the product is rounded to f32 first (1 + 2^-22). */
START_TEST(test_multiply_add_is_fused) {
#if defined(__x86_64__) || defined(__i386__)
  if (!__builtin_cpu_supports("fma")) {
    printf("this host has no FMA: the emulated kernels round a * b + c twice (docs/cuda-emu.md)\n");
    return;
  }
#endif
  CUmodule m = module();
  const float e = ldexpf(1, -23);
  float x[3] = {1 + e, 1 + e, -(1 + 2 * e)};
  CUdeviceptr dx = upload(x, sizeof x), dy = upload(NULL, sizeof(float) * 32);
  void *args[] = {&dx, &dy};
  launch(function(m, "fused_multiply_add"), 1, 1, 1, 32, 1, 1, args, CUDA_SUCCESS);
  float y[32];
  CK(api.cuMemcpyDtoH(y, dy, sizeof y));
  ck_assert_msg(y[0] == ldexpf(1, -46), "a * b + c gave %a, want 0x1p-46 (fused, as NVRTC's --fmad=true)", (double)y[0]);
}
END_TEST

START_TEST(test_unwritten_shared_memory) {
  CUmodule m = module();
  CUdeviceptr y = upload(NULL, sizeof(float) * 64);
  void *args[] = {&y};
  const char *msg = launch(function(m, "unwritten_shared"), 1, 1, 1, 64, 1, 1, args, CUDA_ERROR_LAUNCH_FAILED);
  /* which of threads 32-63 reads first is the schedule's choice: the last
   * to reach the barrier goes on first */
  ck_assert_msg(strstr(msg, "thread (63,0,0)") && strstr(msg, "tile[63]") && strstr(msg, "no thread of this block"),
                "%s", msg);
}
END_TEST

START_TEST(test_compile_error_names_the_kernel) {
  /* the second kernel's conditional mixes a load through a pointer to
   * non-const with an int: a compile error on the emulated device (where it
   * would otherwise silently be an int), reported with the kernel's name */
  static const char src[] = "// tg kernel: good\n"
                            "extern \"C\" __global__ void good(TG_ARG(float) y) { y[threadIdx.x] = 1.0f; }\n"
                            "// tg kernel: bad\n"
                            "extern \"C\" __global__ void bad(TG_ARG(float) y) {\n"
                            "  y[threadIdx.x] = threadIdx.x < 4 ? y[0] : 0;\n"
                            "}\n"
                            "#ifndef __CUDA_ARCH__\n"
                            "TG_EMU_KERNEL_TABLE(TG_EMU_KERNEL(good) TG_EMU_KERNEL(bad))\n"
                            "#endif\n";
  void *image = NULL;
  size_t size;
  bool hit;
  char err[16384];
  ck_assert(!api.compile(src, "bad.cu", "sm_90", &image, &size, &hit, err, sizeof err));
  ck_assert_ptr_null(image);
  ck_assert_msg(!strncmp(err, "the host C++ compiler could not compile kernel bad in bad.cu", 60), "%.600s", err);
  ck_assert_msg(strstr(err, "bad.cu:5 is in kernel bad") && !strstr(err, "kernel good"), "%.3000s", err);
}
END_TEST

/* ---- driver ---------------------------------------------------------------------------------------- */

START_TEST(test_device_and_memory) {
  char name[64];
  int v;
  CK(api.cuDeviceGetName(name, sizeof name, 0));
  ck_assert_str_eq(name, "emulated device");
  CK(api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  ck_assert_int_eq(v, 9);
  CK(api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  ck_assert_int_eq(v, 132);
  CK(api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
  ck_assert_int_eq(v, 227 * 1024);
  size_t total, free_before, free_after;
  CK(api.cuMemGetInfo(&free_before, &total));
  CUdeviceptr p;
  CK(api.cuMemAlloc(&p, 1000));
  CK(api.cuMemGetInfo(&free_after, &total));
  ck_assert_uint_eq(free_before - free_after, 1000);
  ck_assert_uint_eq(p % 256, 0);
  unsigned char h[1000];
  CK(api.cuMemcpyDtoH(h, p, 1000));
  ck_assert_uint_eq(h[999], 0xff); /* fresh memory reads as NaN */
  /* a copy that runs off the end of its allocation */
  ck_assert_int_eq(api.cuMemcpyHtoD(p + 500, h, 600), CUDA_ERROR_INVALID_VALUE);
  ck_assert_msg(strstr(api.emu_last_error(), "past the end"), "%s", api.emu_last_error());
  ck_assert_int_eq(api.cuMemsetD8Async(p + 1000, 0, 1, NULL), CUDA_ERROR_INVALID_VALUE);
  CK(api.cuMemsetD8Async(p, 7, 1000, NULL));
  CK(api.cuMemcpyDtoH(h, p, 1000));
  ck_assert_uint_eq(h[0], 7);
  ck_assert_int_eq(api.cuMemFree(p + 4), CUDA_ERROR_INVALID_VALUE);
  CK(api.cuMemFree(p));
  const char *s;
  CK(api.cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
  ck_assert_str_eq(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
  CK(api.cuGetErrorString(CUDA_ERROR_LAUNCH_FAILED, &s));
  ck_assert_str_eq(s, "unspecified launch failure");
  /* no context current on another thread's behalf: calls need one */
  CK(api.cuCtxSetCurrent(NULL));
  ck_assert_int_eq(api.cuMemAlloc(&p, 8), 201);
}
END_TEST

START_TEST(test_capture_and_replay) {
  CUmodule m = module();
  CUfunction rs = function(m, "row_sums");
  enum { ROWS = 3, N = 256 };
  CUstream s;
  CUevent e0, e1;
  CK(api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(api.cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(api.cuEventCreate(&e1, CU_EVENT_DEFAULT));
  float *x = malloc(sizeof(float) * ROWS * N), sums[3 * ROWS];
  CUdeviceptr dx = upload(NULL, sizeof(float) * ROWS * N), ds = upload(NULL, sizeof sums), dcopy = upload(NULL, sizeof sums);
  int n = N;
  void *args[] = {&dx, &ds, &n};
  /* the step: upload x (from host memory read at replay), zero the sums,
   * reduce, copy the sums aside and download them */
  CK(api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(api.cuEventRecordWithFlags(e0, s, CU_EVENT_RECORD_EXTERNAL));
  CK(api.cuMemcpyHtoDAsync(dx, x, sizeof(float) * ROWS * N, s));
  CK(api.cuMemsetD8Async(ds, 0, sizeof sums, s));
  CK(api.cuLaunchKernel(rs, ROWS, 1, 1, 256, 1, 1, 0, s, args, NULL));
  n = 1; /* arguments are captured by value: changing n now changes nothing */
  CK(api.cuMemcpyDtoDAsync(dcopy, ds, sizeof sums, s));
  CK(api.cuMemcpyDtoHAsync(sums, dcopy, sizeof sums, s));
  CK(api.cuEventRecordWithFlags(e1, s, CU_EVENT_RECORD_EXTERNAL));
  /* nothing ran yet: the event-record nodes record the events at replay */
  float ms;
  ck_assert_int_eq(api.cuEventElapsedTime(&ms, e0, e1), 600);
  /* synchronous calls are not allowed while capturing (global mode) */
  CUdeviceptr p;
  ck_assert_int_eq(api.cuMemAlloc(&p, 4), 900);
  CUgraph g;
  ck_assert_int_eq(api.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ck_assert_msg(strstr(api.emu_last_error(), "cuMemAlloc"), "%s", api.emu_last_error());
  /* again, properly */
  n = N;
  CK(api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(api.cuEventRecordWithFlags(e0, s, CU_EVENT_RECORD_EXTERNAL));
  CK(api.cuMemcpyHtoDAsync(dx, x, sizeof(float) * ROWS * N, s));
  CK(api.cuMemsetD8Async(ds, 0, sizeof sums, s));
  CK(api.cuLaunchKernel(rs, ROWS, 1, 1, 256, 1, 1, 0, s, args, NULL));
  n = 1;
  CK(api.cuMemcpyDtoDAsync(dcopy, ds, sizeof sums, s));
  CK(api.cuMemcpyDtoHAsync(sums, dcopy, sizeof sums, s));
  CK(api.cuEventRecordWithFlags(e1, s, CU_EVENT_RECORD_EXTERNAL));
  CK(api.cuStreamEndCapture(s, &g));
  CUgraphExec ge;
  CK(api.cuGraphInstantiateWithFlags(&ge, g, 0));
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < ROWS * N; i++) x[i] = (float)(step + 1) * (float)(i % N == 0 ? i / N + 1 : 0);
    memset(sums, 0, sizeof sums);
    CK(api.cuGraphLaunch(ge, s));
    CK(api.cuStreamSynchronize(s));
    for (int r = 0; r < ROWS; r++) {
      ck_assert(sums[3 * r] == (float)((step + 1) * (r + 1)));
      ck_assert(sums[3 * r + 1] == (float)(2 * (step + 1) * (r + 1)));
      ck_assert(sums[3 * r + 2] == 0);
    }
  }
  CK(api.cuEventElapsedTime(&ms, e0, e1));
  ck_assert(ms >= 0);
  CK(api.cuGraphExecDestroy(ge));
  CK(api.cuGraphDestroy(g));
  CK(api.cuStreamDestroy(s));
  free(x);
}
END_TEST

/* Streams a (with a_flags) and b (non-blocking), and events without
 * timing (e2 may be NULL). */
static void two_streams(CUstream *a, unsigned a_flags, CUstream *b, CUevent *e1, CUevent *e2) {
  CK(api.cuStreamCreate(a, a_flags));
  CK(api.cuStreamCreate(b, CU_STREAM_NON_BLOCKING));
  CK(api.cuEventCreate(e1, CU_EVENT_DISABLE_TIMING));
  if (e2) CK(api.cuEventCreate(e2, CU_EVENT_DISABLE_TIMING));
}

START_TEST(test_capture_across_streams) {
  CUstream a, b;
  CUevent fork, join;
  two_streams(&a, 0, &b, &fork, &join);
  CUdeviceptr p = upload(NULL, 64);
  unsigned char h[64];
  /* b joins a's capture through an event, works, and a waits for it */
  CK(api.cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(api.cuMemsetD8Async(p, 1, 32, a));
  CK(api.cuEventRecord(fork, a));
  CK(api.cuStreamWaitEvent(b, fork, 0));
  CK(api.cuMemsetD8Async(p + 32, 2, 32, b));
  CK(api.cuEventRecord(join, b));
  CK(api.cuStreamWaitEvent(a, join, 0));
  CK(api.cuMemcpyDtoHAsync(h, p, 64, a));
  CUgraph g;
  CK(api.cuStreamEndCapture(a, &g));
  CUgraphExec ge;
  CK(api.cuGraphInstantiateWithFlags(&ge, g, 0));
  memset(h, 0, sizeof h);
  CK(api.cuGraphLaunch(ge, a));
  ck_assert(h[0] == 1 && h[31] == 1 && h[32] == 2 && h[63] == 2);
  /* without the join the capture is refused */
  CK(api.cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(api.cuEventRecord(fork, a));
  CK(api.cuStreamWaitEvent(b, fork, 0));
  CK(api.cuMemsetD8Async(p, 3, 64, b));
  CUgraph g2;
  ck_assert_int_eq(api.cuStreamEndCapture(a, &g2), 904);
  /* work on the legacy stream while a blocking stream captures */
  CK(api.cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED));
  ck_assert_int_eq(api.cuMemsetD8Async(p, 3, 64, NULL), 900);
  ck_assert_int_eq(api.cuStreamEndCapture(a, &g2), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CK(api.cuGraphExecDestroy(ge));
  CK(api.cuGraphDestroy(g));
}
END_TEST

/* A plain cuEventRecord in a capturing stream makes no node: the event is
 * "last recorded in a capturing stream", which the driver refuses to
 * synchronize or time (CUDA_ERROR_CAPTURED_EVENT), replays or not, until
 * it is recorded outside a capture; CU_EVENT_RECORD_EXTERNAL makes an
 * event-record node, and is invalid outside capture. */
START_TEST(test_events_recorded_in_capture) {
  CUstream s;
  CUevent plain, ext, start;
  CK(api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(api.cuEventCreate(&plain, CU_EVENT_DEFAULT));
  CK(api.cuEventCreate(&ext, CU_EVENT_DEFAULT));
  CK(api.cuEventCreate(&start, CU_EVENT_DEFAULT));
  CUdeviceptr p = upload(NULL, 64);
  ck_assert_int_eq(api.cuEventRecordWithFlags(ext, s, CU_EVENT_RECORD_EXTERNAL), CUDA_ERROR_INVALID_VALUE);
  CK(api.cuEventRecord(start, s));
  CK(api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CK(api.cuMemsetD8Async(p, 1, 64, s));
  CK(api.cuEventRecord(plain, s));
  CK(api.cuEventRecordWithFlags(ext, s, CU_EVENT_RECORD_EXTERNAL));
  CUgraph g;
  CK(api.cuStreamEndCapture(s, &g));
  CUgraphExec ge;
  CK(api.cuGraphInstantiateWithFlags(&ge, g, 0));
  for (int i = 0; i < 2; i++) {
    CK(api.cuGraphLaunch(ge, s));
    ck_assert_int_eq(api.cuEventSynchronize(plain), 907);
    ck_assert_msg(strstr(api.emu_last_error(), "CUDA_ERROR_CAPTURED_EVENT"), "%s", api.emu_last_error());
    float ms;
    ck_assert_int_eq(api.cuEventElapsedTime(&ms, start, plain), 907);
    CK(api.cuEventSynchronize(ext)); /* the replay recorded it */
    CK(api.cuEventElapsedTime(&ms, start, ext));
    ck_assert(ms >= 0);
  }
  const char *name;
  CK(api.cuGetErrorName(907, &name));
  ck_assert_str_eq(name, "CUDA_ERROR_CAPTURED_EVENT");
  /* recorded outside a capture again, it is an ordinary event */
  CK(api.cuEventRecord(plain, s));
  CK(api.cuEventSynchronize(plain));
  CK(api.cuGraphExecDestroy(ge));
  CK(api.cuGraphDestroy(g));
  CK(api.cuStreamDestroy(s));
}
END_TEST

/* Kernels for the launch limits (emulator only: one takes more parameter
 * space than NVRTC allows). */
static const char limit_kernels[] =
    "struct big8000 { float v[2000]; };\n"
    "// tg kernel: big_params\n"
    "extern \"C\" __global__ void big_params(big8000 p, TG_ARG(float) y) { y[threadIdx.x] = p.v[threadIdx.x]; }\n"
    "// tg kernel: bounded\n"
    "extern \"C\" __global__ void __launch_bounds__(64) bounded(TG_ARG(float) y) { y[threadIdx.x] = 1.0f; }\n"
    "// tg kernel: static_and_dynamic\n"
    "// 16 KiB of static shared memory and the launch's dynamic.\n"
    "extern \"C\" __global__ void static_and_dynamic(TG_ARG(float) y) {\n"
    "  TG_SHARED(float, fixed, 4096);\n"
    "  TG_SHARED_DYNAMIC(float, buf);\n"
    "  fixed[threadIdx.x] = 1.0f;\n"
    "  buf[threadIdx.x] = 2.0f;\n"
    "  __syncthreads();\n"
    "  y[threadIdx.x] = fixed[threadIdx.x] + buf[threadIdx.x];\n"
    "}\n"
    "TG_EMU_KERNEL_TABLE(TG_EMU_KERNEL(big_params) TG_EMU_KERNEL(bounded) TG_EMU_KERNEL(static_and_dynamic))\n";

static const char huge_params_kernel[] =
    "struct huge { float v[8192]; };\n"
    "// tg kernel: huge_params\n"
    "extern \"C\" __global__ void huge_params(huge p, TG_ARG(float) y) { y[threadIdx.x] = p.v[threadIdx.x]; }\n"
    "TG_EMU_KERNEL_TABLE(TG_EMU_KERNEL(huge_params))\n";

/* Compiles src for the emulator and loads it: cuModuleLoadData's result. */
static CUresult load_source(const char *src, const char *name, CUmodule *m) {
  void *image;
  size_t size;
  bool hit;
  char err[16384];
  bool ok = api.compile(src, name, "sm_90", &image, &size, &hit, err, sizeof err);
  ck_assert_msg(ok, "%.2000s", err);
  CUresult r = api.cuModuleLoadData(m, image);
  free(image);
  return r;
}

START_TEST(test_launch_limits) {
  CUmodule m;
  CK(load_source(limit_kernels, "limits.cu", &m));
  CUdeviceptr y = upload(NULL, 4096);
  float h[128];
  /* 8,008 bytes of parameters: over the traditional 4 KB, within the
   * 32,764 of CUDA 12.1 on sm_70 and later */
  static float big[2000];
  for (int i = 0; i < 2000; i++) big[i] = (float)i;
  void *big_args[] = {big, &y};
  CK(api.cuLaunchKernel(function(m, "big_params"), 1, 1, 1, 128, 1, 1, 0, NULL, big_args, NULL));
  CK(api.cuMemcpyDtoH(h, y, sizeof h));
  ck_assert(h[127] == 127.0f);
  /* over it: no image with such a kernel loads */
  CUmodule huge;
  ck_assert_int_eq(load_source(huge_params_kernel, "huge.cu", &huge), CUDA_ERROR_INVALID_IMAGE);
  ck_assert_msg(strstr(api.emu_last_error(), "huge_params takes 32776 bytes of parameters"), "%s", api.emu_last_error());
  /* __launch_bounds__(64): a block of 65 threads is refused */
  void *args[] = {&y};
  CUfunction bounded = function(m, "bounded");
  CK(api.cuLaunchKernel(bounded, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
  ck_assert_int_eq(api.cuLaunchKernel(bounded, 1, 1, 1, 65, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  ck_assert_msg(strstr(api.emu_last_error(), "over its __launch_bounds__(64)"), "%s", api.emu_last_error());
  /* 16 KiB static + 32 KiB dynamic fits the 48 KiB without the opt-in;
   * 16 + 40 does not, though the dynamic part alone is under 48 */
  CUfunction sd = function(m, "static_and_dynamic");
  CK(api.cuLaunchKernel(sd, 1, 1, 1, 128, 1, 1, 32 * 1024, NULL, args, NULL));
  CK(api.cuMemcpyDtoH(h, y, sizeof h));
  ck_assert(h[0] == 3.0f);
  ck_assert_int_eq(api.cuLaunchKernel(sd, 1, 1, 1, 128, 1, 1, 40 * 1024, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  ck_assert_msg(strstr(api.emu_last_error(), "48 KiB less its static shared memory"), "%s", api.emu_last_error());
  /* the opt-in counts the dynamic part only, and the sum must stay within
   * the device's 227 KiB */
  ck_assert_int_eq(api.cuFuncSetAttribute(sd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 220 * 1024),
                   CUDA_ERROR_INVALID_VALUE);
  CK(api.cuFuncSetAttribute(sd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 40 * 1024));
  CK(api.cuLaunchKernel(sd, 1, 1, 1, 128, 1, 1, 40 * 1024, NULL, args, NULL));
  /* a kernel's first launch learns its static size as it runs: refused
   * then too, and not sticky (the driver refuses, nothing failed) */
  CUmodule m2;
  CK(load_source(limit_kernels, "limits.cu", &m2));
  sd = function(m2, "static_and_dynamic");
  ck_assert_int_eq(api.cuLaunchKernel(sd, 1, 1, 1, 128, 1, 1, 40 * 1024, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  ck_assert_msg(strstr(api.emu_last_error(), "over the 49152 it may have"), "%s", api.emu_last_error());
  CK(api.cuLaunchKernel(sd, 1, 1, 1, 128, 1, 1, 32 * 1024, NULL, args, NULL));
}
END_TEST

/* Starts over with a fresh context (after a failure that ruins one). */
static void fresh_context(void) {
  CK(api.cuDevicePrimaryCtxRelease(0));
  CK(api.cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(api.cuCtxSetCurrent(ctx));
}

/* Every stream runs at once here; the stream-order checker finds what
 * would race on a GPU: an access on one stream to bytes another stream
 * wrote (or read, for a write) with no event wait or synchronize between. */
START_TEST(test_stream_order) {
  for (int variant = 0; variant < 4; variant++) {
    CUstream a, b;
    CUevent done;
    two_streams(&a, CU_STREAM_NON_BLOCKING, &b, &done, NULL);
    CUdeviceptr p = upload(NULL, 256), q = upload(NULL, 256);
    unsigned char h[256];
    CK(api.cuMemsetD8Async(p, 1, 256, a));
    CK(api.cuMemsetD8Async(q, 1, 256, b)); /* other bytes: no conflict */
    if (variant == 1) {
      CK(api.cuEventRecord(done, a));
      CK(api.cuStreamWaitEvent(b, done, 0));
    } else if (variant == 2) {
      CK(api.cuStreamSynchronize(a));
    }
    CUresult r = variant == 3 ? api.cuMemsetD8Async(p + 128, 2, 16, b) : api.cuMemcpyDtoHAsync(h, p, 256, b);
    if (variant == 1 || variant == 2) {
      ck_assert_msg(r == CUDA_SUCCESS, "%d: %s", r, api.emu_last_error());
      ck_assert_uint_eq(h[255], 1);
    } else {
      /* a read, then a write, after another stream's write, unordered */
      ck_assert_int_eq(r, CUDA_ERROR_LAUNCH_FAILED);
      const char *msg = api.emu_last_error();
      printf("expected failure: %s\n", msg);
      ck_assert_msg(strstr(msg, "stream-order race") && strstr(msg, "cuMemsetD8Async on stream") &&
                        strstr(msg, variant == 3 ? "cuMemsetD8Async on stream" : "cuMemcpyDtoHAsync on stream") &&
                        strstr(msg, variant == 3 ? "writes the destination" : "reads the source") &&
                        strstr(msg, "which cuMemsetD8Async on stream"),
                    "%s", msg);
      fresh_context();
    }
  }
}
END_TEST

/* A kernel and a cuBLASLt matmul on one stream reading what another
 * stream wrote: a race without the wait, fine with it. */
START_TEST(test_stream_order_kernels_and_matmuls) {
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t l;
  cublasLtMatmulPreference_t pref;
  ck_assert_int_eq(api.cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  ck_assert_int_eq(api.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ck_assert_int_eq(api.cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  ck_assert_int_eq(api.cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t heur;
  int returned = 0;
  ck_assert_int_eq(api.cublasLtMatmulAlgoGetHeuristic(lt, op, l, l, l, l, pref, 1, &heur, &returned),
                   CUBLAS_STATUS_SUCCESS);
  for (int variant = 0; variant < 4; variant++) {
    bool matmul = variant >= 2, wait = variant % 2;
    CUfunction rs = function(module(), "row_sums"); /* (a fresh context has no modules) */
    CUstream a, b;
    CUevent done;
    two_streams(&a, CU_STREAM_NON_BLOCKING, &b, &done, NULL);
    CUdeviceptr x = upload(NULL, 256 * 4), y = upload(NULL, 256 * 4);
    CK(api.cuMemsetD8Async(x, 0, 256 * 4, a));
    if (wait) {
      CK(api.cuEventRecord(done, a));
      CK(api.cuStreamWaitEvent(b, done, 0));
    }
    int n = 256;
    void *args[] = {&x, &y, &n};
    float alpha = 1, beta = 0;
    bool ok;
    if (matmul)
      ok = api.cublasLtMatmul(lt, op, &alpha, (void *)(uintptr_t)x, l, (void *)(uintptr_t)x, l, &beta,
                              (void *)(uintptr_t)y, l, (void *)(uintptr_t)y, l, &heur.algo, NULL, 0,
                              b) == CUBLAS_STATUS_SUCCESS;
    else ok = api.cuLaunchKernel(rs, 1, 1, 1, 256, 1, 1, 0, b, args, NULL) == CUDA_SUCCESS;
    const char *msg = api.emu_last_error();
    ck_assert_msg(ok == wait, "variant %d: %s", variant, msg);
    if (!wait) {
      printf("expected failure: %s\n", msg);
      ck_assert_msg(strstr(msg, "stream-order race") &&
                        strstr(msg, matmul ? "cublasLtMatmul on stream" : "kernel row_sums on stream") &&
                        strstr(msg, "which cuMemsetD8Async on stream"),
                    "%s", msg);
      fresh_context();
      continue;
    }
    CK(api.cuStreamDestroy(a));
    CK(api.cuStreamDestroy(b));
  }
}
END_TEST

/* In a graph, the branches of streams that joined the capture run beside
 * the capturing stream's: the checker follows the capture's dependencies. */
START_TEST(test_stream_order_in_graphs) {
  for (int overlap = 0; overlap < 2; overlap++) {
    CUstream a, b;
    CUevent fork, join;
    two_streams(&a, CU_STREAM_NON_BLOCKING, &b, &fork, &join);
    CUdeviceptr p = upload(NULL, 64);
    unsigned char h[64];
    CK(api.cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(api.cuMemsetD8Async(p, 1, 64, a));
    CK(api.cuEventRecord(fork, a));
    CK(api.cuStreamWaitEvent(b, fork, 0));
    CK(api.cuMemsetD8Async(p + 32, 2, 32, b));            /* after the fork: ordered after a's first set */
    CK(api.cuMemsetD8Async(p + (overlap ? 40 : 0), 3, 16, a)); /* beside b's: races when it overlaps */
    CK(api.cuEventRecord(join, b));
    CK(api.cuStreamWaitEvent(a, join, 0));
    CK(api.cuMemcpyDtoHAsync(h, p, 64, a)); /* after the join */
    CUgraph g;
    CK(api.cuStreamEndCapture(a, &g));
    CUgraphExec ge;
    CK(api.cuGraphInstantiateWithFlags(&ge, g, 0));
    CUresult r = api.cuGraphLaunch(ge, a);
    if (!overlap) {
      ck_assert_msg(r == CUDA_SUCCESS, "%d: %s", r, api.emu_last_error());
      ck_assert(h[0] == 3 && h[16] == 1 && h[32] == 2);
      CK(api.cuGraphLaunch(ge, a)); /* and again: the replays are ordered on a */
      CK(api.cuGraphExecDestroy(ge));
      CK(api.cuGraphDestroy(g));
    } else {
      ck_assert_int_eq(r, CUDA_ERROR_LAUNCH_FAILED);
      const char *msg = api.emu_last_error();
      printf("expected failure: %s\n", msg);
      ck_assert_msg(strstr(msg, "branch 0 of a graph replayed on stream") &&
                        strstr(msg, "which cuMemsetD8Async on branch 1 of a graph replayed on stream"),
                    "%s", msg);
    }
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_emu");
  TCase *t = tcase_create("builtins");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 600);
  tcase_add_test(t, test_kernels_compile_with_nvrtc);
  tcase_add_test(t, test_indices_over_3d_grid);
  tcase_add_test(t, test_shuffles_and_votes);
  tcase_add_test(t, test_block_reduction_over_blocks);
  tcase_add_test(t, test_loads_keep_their_type);
  tcase_add_test(t, test_atomics);
  tcase_add_test(t, test_syncwarp_orders_shared_memory);
  tcase_add_test(t, test_f16_and_bf16_conversions);
  tcase_add_test(t, test_mma_and_ldmatrix_against_naive_product);
  tcase_add_test(t, test_cp_async_and_approximations);
  tcase_add_test(t, test_dynamic_shared_memory);
  suite_add_tcase(s, t);
  TCase *c = tcase_create("checks");
  tcase_add_checked_fixture(c, setup, teardown);
  tcase_set_timeout(c, 600);
  tcase_add_test(c, test_missing_barrier_is_a_race);
  tcase_add_test(c, test_one_past_the_end_names_the_argument);
  tcase_add_test(c, test_undescribed_arguments_are_checked_against_their_allocation);
  tcase_add_test(c, test_wrong_description_is_refused);
  tcase_add_test(c, test_barrier_some_threads_skip_is_reported);
  tcase_add_test(c, test_threads_at_different_barriers);
  tcase_add_test(c, test_deadlock_is_reported);
  tcase_add_test(c, test_lanes_at_different_collectives);
  tcase_add_test(c, test_misaligned_vector_load);
  tcase_add_test(c, test_shared_index_out_of_bounds);
  tcase_add_test(c, test_write_write_race);
  tcase_add_test(c, test_neighbouring_halves_do_not_race);
  tcase_add_test(c, test_multiply_add_is_fused);
  tcase_add_test(c, test_unwritten_shared_memory);
  tcase_add_test(c, test_compile_error_names_the_kernel);
  suite_add_tcase(s, c);
  TCase *d = tcase_create("driver");
  tcase_add_checked_fixture(d, setup, teardown);
  tcase_set_timeout(d, 600);
  tcase_add_test(d, test_device_and_memory);
  tcase_add_test(d, test_capture_and_replay);
  tcase_add_test(d, test_capture_across_streams);
  tcase_add_test(d, test_events_recorded_in_capture);
  tcase_add_test(d, test_launch_limits);
  tcase_add_test(d, test_stream_order);
  tcase_add_test(d, test_stream_order_in_graphs);
  tcase_add_test(d, test_stream_order_kernels_and_matmuls);
  suite_add_tcase(s, d);
  return s;
}

int main(void) {
  /* one cache for every (forked) test: the module is compiled once */
  char dir[] = "/tmp/tg_cuda_emu_test_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("TG_CACHE", dir, 1);
  int rc = tu_run(suite());
  tu_remove_tree(dir);
  return rc;
}
