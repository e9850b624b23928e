/* flash_helpers.cuh: the device helpers of one flash attention call site's
 * kernels (flash_cuda.c, flash_cuda.h): bf16 loads and stores, an mma
 * operand's fragment, and staging a tile into shared memory, through
 * registers or with cp.async.  Every name is $P_...: the emitter replaces
 * $P by the call site's prefix, so that units stay independent.  The PTX
 * they use is the prelude's (ptx.cuh).  Embedded at build time
 * (cmake/embed.cmake, without this comment); built by every test that
 * compiles the flash kernels (test_flash_occupancy, test_codegen with
 * NVRTC; test_cuda_emu_flash, test_device_code on the emulated device). */

// tg helpers: $P
// Written out here because the source is compiled with no include path:
// bf16 loads and stores, and tile staging; the PTX instructions are the
// prelude's (codegen/cuda/ptx.cuh).

__device__ __forceinline__ float $P_ld(TG_PTR(const float) p, long long i) { return p[i]; }
__device__ __forceinline__ float $P_ld(TG_PTR(const unsigned short) p, long long i) {
  return __uint_as_float((unsigned)p[i] << 16);
}
__device__ __forceinline__ void $P_st(TG_PTR(float) p, long long i, float x) { p[i] = x; }
__device__ __forceinline__ void $P_st(TG_PTR(unsigned short) p, long long i, float x) {
  p[i] = (unsigned short)(tg_cvt_bf16x2(x, 0.0f) & 0xffffu);
}
__device__ __forceinline__ float $P_ninf() { return -__int_as_float(0x7f800000); }

// The mma b operand for rows k0..k0+15, columns n0..n0+7 of a row-major [k][n] bf16
// tile in shared memory (b wants it column-major, hence .trans): lane l passes the
// address of row k0 + (l & 15) at column n0 (lanes 16-31 repeat valid addresses).
__device__ __forceinline__ void $P_ldsm_t(TG_PTR(const unsigned) row, unsigned *b) {
  tg_ldmatrix_x2_trans(tg_smem_addr(row), b);
}

// The a operand for rows r0..r0+15, columns 16*kk..16*kk+15 of a [rows][W words] tile.
__device__ __forceinline__ void $P_frag_a(unsigned *a, TG_PTR(const unsigned) tile, int W, int r0, int kk) {
  const int lane = threadIdx.x & 31;
  TG_PTR(const unsigned) p = tile + (r0 + (lane >> 2)) * W + kk * 8 + (lane & 3);
  a[0] = p[0];
  a[1] = p[8 * W];
  a[2] = p[4];
  a[3] = p[8 * W + 4];
}

// Rows r0..r0+R-1 of a [T, D] operand (row stride st, column stride sd) into a
// [R][W words] shared tile as bf16 pairs; rows at or past T become zeros.
template <typename X>
__device__ __forceinline__ void $P_stage(TG_PTR(unsigned) dst, TG_PTR(const X) src, long long st, long long sd,
                                         int r0, int R, int T, int D, int W) {
  for (int e = threadIdx.x; e < R * (D / 2); e += blockDim.x) {
    const int r = e / (D / 2), c = 2 * (e - r * (D / 2)), i = r0 + r;
    float x0 = 0.0f, x1 = 0.0f;
    if (i < T) {
      x0 = $P_ld(src, i * st + c * sd);
      x1 = $P_ld(src, i * st + (c + 1) * sd);
    }
    dst[r * W + c / 2] = tg_cvt_bf16x2(x0, x1);
  }
}

// The same as $P_stage, but when A (the operand is bf16 with contiguous rows and every
// row 16-byte aligned) as 16-byte cp.async copies that complete in the background:
// the caller commits them as a group and waits for it before the barrier that
// publishes the tile.  Rows at or past T are zeroed by plain stores.
template <bool A, typename X>
__device__ __forceinline__ void $P_load(TG_PTR(unsigned) dst, TG_PTR(const X) src, long long st, long long sd,
                                        int r0, int R, int T, int D, int W) {
  if (A) {
    for (int e = threadIdx.x; e < R * (D / 8); e += blockDim.x) {
      const int r = e / (D / 8), c = 8 * (e - r * (D / 8)), i = r0 + r;
      TG_PTR(unsigned) d = dst + r * W + c / 2;
      if (i < T) {
        tg_cp_async16(tg_smem_addr(d), src + (i * st + c));
      } else {
        d[0] = 0u;
        d[1] = 0u;
        d[2] = 0u;
        d[3] = 0u;
      }
    }
  } else {
    $P_stage(dst, src, st, sd, r0, R, T, D, W);
  }
}

// di[r] = do_i . o_i in f32 for rows i = r0 + r, r < R (0 at or past T), a warp a row.
template <typename X, typename Y>
__device__ __forceinline__ void $P_rowdot(TG_PTR(float) di, TG_PTR(const X) dout, long long dst, long long dsd,
                                          TG_PTR(const Y) o, long long ost, long long osd, int r0, int R,
                                          int T, int D) {
  const int lane = threadIdx.x & 31;
  for (int r = threadIdx.x >> 5; r < R; r += blockDim.x >> 5) {
    const int i = r0 + r;
    float acc = 0.0f;
    if (i < T)
      for (int d = lane; d < D; d += 32) acc += $P_ld(dout, i * dst + d * dsd) * $P_ld(o, i * ost + d * osd);
    for (int m = 16; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (lane == 0) di[r] = acc;
  }
}
// tg end helpers: $P

