/* prelude.cuh: what every unit of the generated CUDA needs before it (after
 * memory.cuh and ptx.cuh, before gelu_kernel.h): the index type, conversions,
 * block and column reductions, and the multi-tensor tables' entry search.
 *
 * Embedded at build time (cmake/embed.cmake, without this comment) and
 * printed by tg_cuda_print_prelude (cuda_kernels.h); the file compiles on
 * its own after those (tests/unit/test_device_code.c). */

typedef long long tg_idx;
#ifdef __CUDA_ARCH__
#define TG_UNROLL _Pragma("unroll")  // a loop whose arrays must stay in registers
#define TG_UNROLL4 _Pragma("unroll 4")  // a long walk: four iterations' loads issued together
#else
#define TG_UNROLL
#define TG_UNROLL4
#endif
__device__ __forceinline__ float tg_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float tg_exp(float x) { return expf(x); }
__device__ __forceinline__ float tg_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float tg_bf16_load(unsigned short x) { return __uint_as_float((unsigned)x << 16); }
__device__ __forceinline__ unsigned short tg_bf16_store(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);  // quiet nan
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
}
// the bf16 of a value that is one already (emit.c: holds_bf16): its top half
__device__ __forceinline__ unsigned short tg_bf16_bits(float f) { return (unsigned short)(__float_as_uint(f) >> 16); }
// a bf16 or f16 value computed in registers, rounded as the interpreter rounds it
__device__ __forceinline__ float tg_bf16_round(float f) { return tg_bf16_load(tg_bf16_store(f)); }
__device__ __forceinline__ float tg_f16_round(float f) { return tg_f16_load(tg_f16_store(f)); }
// Block reductions: warp shuffles, then one value per warp through shared
// memory, which every warp sums again, so that every thread gets the result
// (the same bits: the same values in the same order).  Blocks are 256 threads.
__device__ __forceinline__ float tg_max2(float a, float b) { return (b > a || b != b) ? b : a; }
__device__ float tg_block_sum(float v) {
  TG_SHARED(float, part, 32);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? part[threadIdx.x & 31] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float tg_block_max(float v) {
  TG_SHARED(float, part, 32);
  for (int o = 16; o > 0; o >>= 1) v = tg_max2(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? part[threadIdx.x & 31] : -tg_inf();
  for (int o = 16; o > 0; o >>= 1) v = tg_max2(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// A multi-tensor kernel's table (codegen/cuda/cuda_plan.h: tg_cuda_table): a buffer is its
// address and its bytes (the emulated device checks accesses against them; a GPU never
// reads them), 8-byte fields as the runtime writes them.
struct tg_table_buf { unsigned long long addr, bytes; };
static_assert(sizeof(tg_table_buf) == 16, "the runtime writes two 8-byte fields");
// The entry of block b in a table of n entries in block order: the last whose first
// block is at most b, in log2(n) probes (every thread of a block reads the same ones).
template <typename P> __device__ __forceinline__ int tg_table_find(P t, int n, unsigned b) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (t[mid].first <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
// Column reductions: thread t holds column t % 16's partial over row group t / 16;
// each column's 16 partials are added in row-group order through shared memory
// (rows of 17: no bank conflicts), and every thread of the column gets the result.
// The first barrier keeps a second call from overwriting what the first still reads.
__device__ float tg_column_sum(float v) {
  TG_SHARED(float, part, 16 * 17);
  __syncthreads();
  part[(threadIdx.x / 16) * 17 + threadIdx.x % 16] = v;
  __syncthreads();
  float s = 0.0f;
  for (int r = 0; r < 16; r++) s += part[r * 17 + threadIdx.x % 16];
  return s;
}
__device__ float tg_column_max(float v) {
  TG_SHARED(float, part, 16 * 17);
  __syncthreads();
  part[(threadIdx.x / 16) * 17 + threadIdx.x % 16] = v;
  __syncthreads();
  float s = -tg_inf();
  for (int r = 0; r < 16; r++) s = tg_max2(s, part[r * 17 + threadIdx.x % 16]);
  return s;
}

