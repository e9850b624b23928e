/* flash_cuda.c: flash attention rendered as CUDA for the GPU backend (flash.h).
 *
 * FlashAttention-2's scheme on the bf16 tensor cores (mma.sync m16n8k16,
 * sm_80 and later), written out with the shapes as constants:
 *
 *   forward   one block of 4 warps per 64 query rows of one (batch, head),
 *             each warp 16 rows.  Q is staged once and kept in registers
 *             as mma A fragments; K and V are staged 64 keys at a time up
 *             to the diagonal.  S = Q K^T lands in registers in the mma
 *             accumulator layout, which is also the A layout of P for
 *             O += P V, so P never touches shared memory.  Softmax in log2
 *             units (ex2.approx), statistics and lse in f32.
 *   backward  two kernels, so that every output element is summed by one
 *             thread in a fixed order (deterministic, no atomics and no
 *             scratch buffer): dkdv, a block per 64 keys visiting the query
 *             tiles at or after them (S^T = K Q^T, dP^T = V dO^T, then
 *             dV += P^T dO and dK += dS^T Q), and dq, a block per 64 query
 *             rows visiting the key tiles up to them (S = Q K^T,
 *             dP = dO V^T, dQ += dS K).  P and dS are recomputed in both;
 *             Di = do_i . o_i is computed in f32 from the operands where it
 *             is needed.
 *
 * Shared tiles hold bf16 pairs as 32-bit words, each row padded by 8 bf16
 * (4 words): with W = D/2 + 4 words a row and D a multiple of 16, W/4 is
 * odd, so the 8 rows x 4 words a fragment load or an ldmatrix phase touches
 * fall in 32 distinct banks.  Operands that mma wants transposed (V in the
 * forward, dO and Q for dV and dK, K for dQ) are read from their row-major
 * tiles with ldmatrix .trans.  Masking, on diagonal tiles only: a key past
 * its query row (or past T) scores -inf in the forward and gets P = 0 in the
 * backward.  Rows past T are staged as zeros, which keeps everything
 * computed from them finite, and are never stored.
 *
 * Streaming.  The streamed tiles (K and V in the forward and in dq, Q and
 * dO in dkdv) are loaded with cp.async.cg (16 bytes a copy, global to shared
 * without registers) when the operand is bf16 with contiguous rows that
 * are 16-byte aligned (GPT-2's q, k, v views of the [B, T, 3C] buffer and
 * its dO); f32 or oddly strided operands go through registers ($P_stage),
 * as before.  With two stages the copies of tile j+1 are issued and
 * committed before tile j's mma, and cp.async.wait_group 1 plus a barrier
 * publish tile j: the loads of the next tile overlap this one's tensor-core
 * work.  A barrier after the mma keeps a stage from being refilled while
 * another warp still reads it.  Each stage is bn rows: the first tiling,
 * two stages before one and 64, 32, 16 rows, whose static shared memory
 * fits the 48 KiB that needs no opt-in (the forward also stages Q, BM rows,
 * through its K stages).  D = 64: forward 64 x 2 (36.9 KB), backward
 * 32 x 2 (37.4 and 37.1 KB); D = 128: forward 32 x 2, backward 16 x 1.
 *
 * Occupancy.  __launch_bounds__(128, 4) for D <= 64 caps registers at 128 a
 * thread, so 4 blocks (16 warps) fit an SM's 65536 registers; 4 x 37 KB of
 * shared memory fits its 228 KB.  ptxas (CUDA 13.0, sm_90) gives forward
 * 126, dkdv 128, dq 122 registers with no spills (test_flash_occupancy.c
 * checks it).  The dkdv kernel was at 170 registers (8 warps an SM) with
 * 64-row query tiles; halving the streamed tile halves S^T and dP^T (32
 * registers) and makes the bound reachable without spilling.  Larger D
 * keeps its accumulators in registers instead (D = 128: 8 to 12 warps).
 *
 * Recomputation.  dq recomputes S = QK^T and dP = dO V^T, which dkdv has
 * computed too: 2 of the backward's 7 products.  GPT-2 at B=16, T=1024,
 * 12 heads of 64, per layer: one causal product is 192 heads x T^2 D =
 * 12.9 GFLOP, so the recomputation is 25.8 GFLOP, 33 us at 790 TFLOP/s
 * (bf16 dense; 65 us at half of it).  The alternatives:
 *   - dq accumulated by dkdv with atomics (FlashAttention-2): no second
 *     kernel, but float atomics sum in whatever order blocks arrive, so dq
 *     differs from run to run; tg's kernels are deterministic (the same
 *     inputs give the same bits), so this is out whatever it saves.  It is
 *     not free either: (T/64)(T/64+1)/2 = 136 tile pairs a head each add
 *     64 x 64 f32, 428 MB of atomic traffic a layer into an f32 dq, and a
 *     pass to round it to bf16.
 *   - dS stored by dkdv, read by dq (dq = scale dS K): B H T^2 bf16 is 402
 *     MB a layer (201 MB keeping only the causal half), written and read
 *     once: 804 MB (402 MB) = 240 us (120 us) at 3.35 TB/s, against the
 *     33 us of recomputing S and dP, plus that much memory at the backward's
 *     peak.  Recomputing is 4 to 7 times cheaper at the roofline.
 *   - one kernel for dq, dk and dv: dq for a query row sums over all key
 *     tiles, dk and dv for a key over all query tiles; one block owning a
 *     head would hold a [T, D] f32 dq (256 KB at T = 1024: more than an
 *     SM's shared memory) and leave 192 blocks for 132 SMs.
 * So the backward keeps two kernels, and the second's recomputation is the
 * cheapest deterministic way to dq.  What it could still save: Di is
 * computed in both kernels from o and dO (o read twice, 25 MB, 7.5 us a
 * layer), which a third output of dkdv could carry. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "device_code.h"
#include "flash_cuda.h"

enum { BM = 64, THREADS = 128, SMEM_LIMIT = 48 * 1024 };

static int words(int64_t D) { return (int)(D / 2 + 4); }

/* How a kernel streams its tiles: bn rows a tile, ns stages (2: the next
 * tile's cp.async runs during this tile's mma; 1: load, then compute). */
typedef struct tiling {
  int bn, ns;
} tiling;

/* Static shared bytes of each kernel for a tiling. */
static int64_t fwd_smem(int64_t D, tiling t) { return 2 * t.ns * t.bn * (int64_t)words(D) * 4; }
static int64_t dkdv_smem(int64_t D, tiling t) {
  return (2 * BM + 2 * t.ns * t.bn) * (int64_t)words(D) * 4 + 2 * t.ns * t.bn * 4;
}
static int64_t dq_smem(int64_t D, tiling t) { return (2 * BM + 2 * t.ns * t.bn) * (int64_t)words(D) * 4 + BM * 4; }

/* The first tiling, two stages before one and larger tiles before smaller,
 * whose static shared memory fits 48 KiB (the forward also stages Q, BM
 * rows, through its K tiles).  D <= 64: 64 x 2 forward, 32 x 2 backward. */
static tiling choose(int kind, int64_t D);

/* Blocks a multiprocessor should hold (__launch_bounds__'s second number):
 * 4 blocks of 4 warps, 16 warps an SM, for D <= 64, which caps registers at
 * 128 a thread (65536 / (4 * 128)); larger D keeps its registers unspilled
 * instead (tests/unit/test_flash_occupancy.c checks both on sm_90). */
static int min_blocks(int64_t D) { return D <= 64 ? 4 : 1; }

bool tg_flash_supported(const tg_flash_shape *s, char *why, size_t n) {
  const char *msg = NULL;
  char buf[200];
  if (s->nb < 1 || s->nh < 1 || s->T < 1 || s->D < 1)
    msg = "flash attention: empty shape (nb, nh, T and D must be positive)";
  else if (s->D % 16 || s->D > 128) {
    snprintf(buf, sizeof buf,
             "flash attention (CUDA): head size D=%" PRId64 " is not a multiple of 16 up to 128 "
             "(the bf16 mma takes 16 at a time; larger tiles would not fit in registers)",
             s->D);
    msg = buf;
  } else if (s->nb > 65535 || s->nh > 65535)
    msg = "flash attention (CUDA): nb and nh must each be at most 65535 (grid z and y)";
  else if (s->T > INT32_MAX - 2 * BM)
    msg = "flash attention (CUDA): T must be below 2^31 - 128 (rows are counted in int)";
  else if (!isfinite(s->scale))
    msg = "flash attention: the scale is not finite";
  else if (!choose(0, s->D).bn || !choose(1, s->D).bn || !choose(2, s->D).bn)
    msg = "flash attention (CUDA): tiles do not fit in 48 KiB of shared memory"; /* not for D <= 128 */
  if (why && n) snprintf(why, n, "%s", msg ? msg : "");
  return !msg;
}

static bool is_ident(const char *p) {
  if (!p || !(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return false;
  size_t n = 0;
  for (; *p; p++, n++)
    if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
      return false;
  return n <= 100; /* kernel names add at most 9 characters and must fit tg_flash_launch.name */
}

/* ---- emitting text ----------------------------------------------------------- */

/* Copies text to f with every "$P" replaced by the prefix. */
static void put(FILE *f, const char *prefix, const char *text) {
  for (const char *p = text; *p; p++) {
    if (p[0] == '$' && p[1] == 'P') {
      fputs(prefix, f);
      p++;
    } else {
      fputc(*p, f);
    }
  }
}

static void flt(FILE *f, const char *name, double x, const char *comment) {
  fprintf(f, "  const float %s = %.9ef;%s%s\n", name, (double)(float)x, comment ? "  // " : "",
          comment ? comment : "");
}

static const char *ptype(const tg_flash_operand *o) { return o->bf16 ? "unsigned short" : "float"; }

/* "const float *qp = q + (offset + b*SB + h*SH);" and the row and column
 * strides Q_ST, Q_SD (upper-case name). */
static void operand(FILE *f, const char *name, const char *up, const tg_flash_operand *o, bool konst,
                    bool cols) {
  fprintf(f,
          "  TG_PTR(%s%s) %sp = %s + (%" PRId64 "LL + (long long)blockIdx.z * %" PRId64
          "LL + (long long)blockIdx.y * %" PRId64 "LL);\n",
          konst ? "const " : "", ptype(o), name, name, o->offset, o->stride[0], o->stride[1]);
  if (cols)
    fprintf(f, "  const long long %s_ST = %" PRId64 "LL, %s_SD = %" PRId64 "LL;\n", up, o->stride[2], up,
            o->stride[3]);
  else
    fprintf(f, "  const long long %s_ST = %" PRId64 "LL;\n", up, o->stride[2]);
}

static const char *helpers =
    "// tg helpers: $P\n"
    "// Written out here because the source is compiled with no include path:\n"
    "// bf16 loads and stores, and tile staging; the PTX instructions are the\n"
    "// prelude's (codegen/cuda/ptx.cuh).\n"
    "\n"
    "__device__ __forceinline__ float $P_ld(TG_PTR(const float) p, long long i) { return p[i]; }\n"
    "__device__ __forceinline__ float $P_ld(TG_PTR(const unsigned short) p, long long i) {\n"
    "  return __uint_as_float((unsigned)p[i] << 16);\n"
    "}\n"
    "__device__ __forceinline__ void $P_st(TG_PTR(float) p, long long i, float x) { p[i] = x; }\n"
    "__device__ __forceinline__ void $P_st(TG_PTR(unsigned short) p, long long i, float x) {\n"
    "  p[i] = (unsigned short)(tg_cvt_bf16x2(x, 0.0f) & 0xffffu);\n"
    "}\n"
    "__device__ __forceinline__ float $P_ninf() { return -__int_as_float(0x7f800000); }\n"
    "\n"
    "// The mma b operand for rows k0..k0+15, columns n0..n0+7 of a row-major [k][n] bf16\n"
    "// tile in shared memory (b wants it column-major, hence .trans): lane l passes the\n"
    "// address of row k0 + (l & 15) at column n0 (lanes 16-31 repeat valid addresses).\n"
    "__device__ __forceinline__ void $P_ldsm_t(TG_PTR(const unsigned) row, unsigned *b) {\n"
    "  tg_ldmatrix_x2_trans(tg_smem_addr(row), b);\n"
    "}\n"
    "\n"
    "// The a operand for rows r0..r0+15, columns 16*kk..16*kk+15 of a [rows][W words] tile.\n"
    "__device__ __forceinline__ void $P_frag_a(unsigned *a, TG_PTR(const unsigned) tile, int W, int r0, int kk) {\n"
    "  const int lane = threadIdx.x & 31;\n"
    "  TG_PTR(const unsigned) p = tile + (r0 + (lane >> 2)) * W + kk * 8 + (lane & 3);\n"
    "  a[0] = p[0];\n"
    "  a[1] = p[8 * W];\n"
    "  a[2] = p[4];\n"
    "  a[3] = p[8 * W + 4];\n"
    "}\n"
    "\n"
    "// Rows r0..r0+R-1 of a [T, D] operand (row stride st, column stride sd) into a\n"
    "// [R][W words] shared tile as bf16 pairs; rows at or past T become zeros.\n"
    "template <typename X>\n"
    "__device__ __forceinline__ void $P_stage(TG_PTR(unsigned) dst, TG_PTR(const X) src, long long st, long long sd,\n"
    "                                         int r0, int R, int T, int D, int W) {\n"
    "  for (int e = threadIdx.x; e < R * (D / 2); e += blockDim.x) {\n"
    "    const int r = e / (D / 2), c = 2 * (e - r * (D / 2)), i = r0 + r;\n"
    "    float x0 = 0.0f, x1 = 0.0f;\n"
    "    if (i < T) {\n"
    "      x0 = $P_ld(src, i * st + c * sd);\n"
    "      x1 = $P_ld(src, i * st + (c + 1) * sd);\n"
    "    }\n"
    "    dst[r * W + c / 2] = tg_cvt_bf16x2(x0, x1);\n"
    "  }\n"
    "}\n"
    "\n"
    "// The same as $P_stage, but when A (the operand is bf16 with contiguous rows and every\n"
    "// row 16-byte aligned) as 16-byte cp.async copies that complete in the background:\n"
    "// the caller commits them as a group and waits for it before the barrier that\n"
    "// publishes the tile.  Rows at or past T are zeroed by plain stores.\n"
    "template <bool A, typename X>\n"
    "__device__ __forceinline__ void $P_load(TG_PTR(unsigned) dst, TG_PTR(const X) src, long long st, long long sd,\n"
    "                                        int r0, int R, int T, int D, int W) {\n"
    "  if (A) {\n"
    "    for (int e = threadIdx.x; e < R * (D / 8); e += blockDim.x) {\n"
    "      const int r = e / (D / 8), c = 8 * (e - r * (D / 8)), i = r0 + r;\n"
    "      TG_PTR(unsigned) d = dst + r * W + c / 2;\n"
    "      if (i < T) {\n"
    "        tg_cp_async16(tg_smem_addr(d), src + (i * st + c));\n"
    "      } else {\n"
    "        d[0] = 0u;\n"
    "        d[1] = 0u;\n"
    "        d[2] = 0u;\n"
    "        d[3] = 0u;\n"
    "      }\n"
    "    }\n"
    "  } else {\n"
    "    $P_stage(dst, src, st, sd, r0, R, T, D, W);\n"
    "  }\n"
    "}\n"
    "\n"
    "// di[r] = do_i . o_i in f32 for rows i = r0 + r, r < R (0 at or past T), a warp a row.\n"
    "template <typename X, typename Y>\n"
    "__device__ __forceinline__ void $P_rowdot(TG_PTR(float) di, TG_PTR(const X) dout, long long dst, long long dsd,\n"
    "                                          TG_PTR(const Y) o, long long ost, long long osd, int r0, int R,\n"
    "                                          int T, int D) {\n"
    "  const int lane = threadIdx.x & 31;\n"
    "  for (int r = threadIdx.x >> 5; r < R; r += blockDim.x >> 5) {\n"
    "    const int i = r0 + r;\n"
    "    float acc = 0.0f;\n"
    "    if (i < T)\n"
    "      for (int d = lane; d < D; d += 32) acc += $P_ld(dout, i * dst + d * dsd) * $P_ld(o, i * ost + d * osd);\n"
    "    for (int m = 16; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);\n"
    "    if (lane == 0) di[r] = acc;\n"
    "  }\n"
    "}\n"
    "// tg end helpers: $P\n"
    "\n";

static const char *fwd_body =
    "  TG_SHARED(__align__(16) unsigned, ks, NS * BN * W);  // NS stages of BN keys\n"
    "  TG_SHARED(__align__(16) unsigned, vs, NS * BN * W);\n"
    "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;\n"
    "  // the last rows see the most keys: their blocks go first\n"
    "  const int r0 = ((int)gridDim.x - 1 - (int)blockIdx.x) * BM;\n"
    "  const int ra = r0 + warp * 16 + g, rb = ra + 8;  // this lane's two rows\n"
    "\n"
    "  // Q passes through ks (NS * BN >= BM rows) into registers, where it stays.\n"
    "  $P_load<AQ>(ks, qp, Q_ST, Q_SD, r0, BM, T, D, W);\n"
    "  tg_cp_async_commit();\n"
    "  tg_cp_async_wait<0>();\n"
    "  __syncthreads();\n"
    "  unsigned qf[D / 16][4];\n"
    "#pragma unroll\n"
    "  for (int kk = 0; kk < D / 16; kk++) $P_frag_a(qf[kk], ks, W, warp * 16, kk);\n"
    "  float acc[D / 8][4];\n"
    "#pragma unroll\n"
    "  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;\n"
    "  float ma = $P_ninf(), mb = $P_ninf(), la = 0.0f, lb = 0.0f;  // running max and sum, log2 units\n"
    "  const int last = (r0 + BM < T ? r0 + BM : T) - 1;  // the block's last row: no key past it is needed\n"
    "  const int ntiles = last / BN + 1;\n"
    "  __syncthreads();  // every warp has its Q fragments before the first tile lands on them\n"
    "  $P_load<AK>(ks, kp, K_ST, K_SD, 0, BN, T, D, W);\n"
    "  $P_load<AV>(vs, vp, V_ST, V_SD, 0, BN, T, D, W);\n"
    "  tg_cp_async_commit();  // tile 0's group: the loop's wait counts groups\n"
    "\n"
    "  for (int it = 0; it < ntiles; it++) {\n"
    "    const int j0 = it * BN;\n"
    "    TG_PTR(const unsigned) kt = ks + (it % NS) * (BN * W);\n"
    "    TG_PTR(const unsigned) vt = vs + (it % NS) * (BN * W);\n"
    "    if (NS == 2 && it + 1 < ntiles) {  // the next tile streams in while this one is used\n"
    "      $P_load<AK>(ks + ((it + 1) % NS) * (BN * W), kp, K_ST, K_SD, j0 + BN, BN, T, D, W);\n"
    "      $P_load<AV>(vs + ((it + 1) % NS) * (BN * W), vp, V_ST, V_SD, j0 + BN, BN, T, D, W);\n"
    "    }\n"
    "    tg_cp_async_commit();\n"
    "    tg_cp_async_wait<NS - 1>();  // this thread's copies of tile it have landed\n"
    "    __syncthreads();             // and every thread's\n"
    "    float s[BN / 8][4];\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < D / 16; kk++)\n"
    "#pragma unroll\n"
    "      for (int n = 0; n < BN / 8; n++) {\n"
    "        TG_PTR(const unsigned) p = kt + (n * 8 + g) * W + kk * 8 + t;\n"
    "        tg_mma_bf16(s[n], qf[kk], p[0], p[4]);\n"
    "      }\n"
    "    // only a tile reaching past the block's first row has keys to mask\n"
    "    const bool diag = j0 + BN - 1 > r0;\n"
    "    float xa = ma, xb = mb;\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < BN / 8; n++)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; e++) {\n"
    "        const int j = j0 + n * 8 + 2 * t + (e & 1), i = e < 2 ? ra : rb;\n"
    "        float x = s[n][e] * SL2;\n"
    "        if (diag && (j > i || j >= T)) x = $P_ninf();\n"
    "        s[n][e] = x;\n"
    "        if (e < 2) xa = fmaxf(xa, x);\n"
    "        else xb = fmaxf(xb, x);\n"
    "      }\n"
    "    // a row's 64 columns are spread over the 4 lanes of its quad\n"
    "    xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 1));\n"
    "    xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 2));\n"
    "    xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 1));\n"
    "    xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 2));\n"
    "    // exponents against 0 while a row has seen no key, so that -inf - -inf never occurs\n"
    "    const float ba = xa == $P_ninf() ? 0.0f : xa, bb = xb == $P_ninf() ? 0.0f : xb;\n"
    "    const float ca = tg_ex2_approx(ma - ba), cb = tg_ex2_approx(mb - bb);\n"
    "    ma = xa;\n"
    "    mb = xb;\n"
    "    la *= ca;\n"
    "    lb *= cb;\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < BN / 8; n++) {\n"
    "      s[n][0] = tg_ex2_approx(s[n][0] - ba);\n"
    "      s[n][1] = tg_ex2_approx(s[n][1] - ba);\n"
    "      s[n][2] = tg_ex2_approx(s[n][2] - bb);\n"
    "      s[n][3] = tg_ex2_approx(s[n][3] - bb);\n"
    "      la += s[n][0] + s[n][1];\n"
    "      lb += s[n][2] + s[n][3];\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < D / 8; n++) {\n"
    "      acc[n][0] *= ca;\n"
    "      acc[n][1] *= ca;\n"
    "      acc[n][2] *= cb;\n"
    "      acc[n][3] *= cb;\n"
    "    }\n"
    "    // P's accumulator layout, two n-tiles at a time, is the a layout of P V\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < BN / 16; kk++) {\n"
    "      const unsigned a[4] = {tg_cvt_bf16x2(s[2 * kk][0], s[2 * kk][1]), tg_cvt_bf16x2(s[2 * kk][2], s[2 * kk][3]),\n"
    "                             tg_cvt_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),\n"
    "                             tg_cvt_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};\n"
    "#pragma unroll\n"
    "      for (int n = 0; n < D / 8; n++) {\n"
    "        unsigned b[2];\n"
    "        $P_ldsm_t(vt + (kk * 16 + (lane & 15)) * W + n * 4, b);\n"
    "        tg_mma_bf16(acc[n], a, b[0], b[1]);\n"
    "      }\n"
    "    }\n"
    "    __syncthreads();  // every warp is done with this stage before it is refilled\n"
    "    if (NS == 1 && it + 1 < ntiles) {\n"
    "      $P_load<AK>(ks, kp, K_ST, K_SD, j0 + BN, BN, T, D, W);\n"
    "      $P_load<AV>(vs, vp, V_ST, V_SD, j0 + BN, BN, T, D, W);\n"
    "    }\n"
    "  }\n"
    "\n"
    "  la += __shfl_xor_sync(0xffffffffu, la, 1);\n"
    "  la += __shfl_xor_sync(0xffffffffu, la, 2);\n"
    "  lb += __shfl_xor_sync(0xffffffffu, lb, 1);\n"
    "  lb += __shfl_xor_sync(0xffffffffu, lb, 2);\n"
    "  const float ia = 1.0f / la, ib = 1.0f / lb;\n"
    "#pragma unroll\n"
    "  for (int n = 0; n < D / 8; n++) {\n"
    "    const int c = n * 8 + 2 * t;\n"
    "    if (ra < T) {\n"
    "      $P_st(op, ra * O_ST + c * O_SD, acc[n][0] * ia);\n"
    "      $P_st(op, ra * O_ST + (c + 1) * O_SD, acc[n][1] * ia);\n"
    "    }\n"
    "    if (rb < T) {\n"
    "      $P_st(op, rb * O_ST + c * O_SD, acc[n][2] * ib);\n"
    "      $P_st(op, rb * O_ST + (c + 1) * O_SD, acc[n][3] * ib);\n"
    "    }\n"
    "  }\n"
    "  if (t == 0 && ra < T) $P_st(lsep, ra * L_ST, (ma + tg_lg2_approx(la)) * LN2);\n"
    "  if (t == 0 && rb < T) $P_st(lsep, rb * L_ST, (mb + tg_lg2_approx(lb)) * LN2);\n"
    "}\n";

static const char *dq_body =
    "  TG_SHARED(__align__(16) unsigned, qs, BM * W);\n"
    "  TG_SHARED(__align__(16) unsigned, dos, BM * W);\n"
    "  TG_SHARED(__align__(16) unsigned, ks, NS * BN * W);  // NS stages of BN keys\n"
    "  TG_SHARED(__align__(16) unsigned, vs, NS * BN * W);\n"
    "  TG_SHARED(float, dis, BM);\n"
    "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;\n"
    "  const int r0 = ((int)gridDim.x - 1 - (int)blockIdx.x) * BM;  // longest rows first\n"
    "  const int ra = r0 + warp * 16 + g, rb = ra + 8;\n"
    "\n"
    "  // Q, dO and the first key tile go in one group of copies; Di's loads overlap them\n"
    "  $P_load<AQ>(qs, qp, Q_ST, Q_SD, r0, BM, T, D, W);\n"
    "  $P_load<ADO>(dos, doutp, DO_ST, DO_SD, r0, BM, T, D, W);\n"
    "  $P_load<AK>(ks, kp, K_ST, K_SD, 0, BN, T, D, W);\n"
    "  $P_load<AV>(vs, vp, V_ST, V_SD, 0, BN, T, D, W);\n"
    "  tg_cp_async_commit();  // the first group: the loop's wait counts groups\n"
    "  $P_rowdot(dis, doutp, DO_ST, DO_SD, op, O_ST, O_SD, r0, BM, T, D);\n"
    "  // lse in log2 units, like the scores\n"
    "  const float lsa = ra < T ? $P_ld(lsep, ra * L_ST) * LOG2E : 0.0f;\n"
    "  const float lsb = rb < T ? $P_ld(lsep, rb * L_ST) * LOG2E : 0.0f;\n"
    "  float acc[D / 8][4];\n"
    "#pragma unroll\n"
    "  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;\n"
    "  const int last = (r0 + BM < T ? r0 + BM : T) - 1;\n"
    "  const int ntiles = last / BN + 1;\n"
    "\n"
    "  for (int it = 0; it < ntiles; it++) {\n"
    "    const int j0 = it * BN;\n"
    "    TG_PTR(const unsigned) kt = ks + (it % NS) * (BN * W);\n"
    "    TG_PTR(const unsigned) vt = vs + (it % NS) * (BN * W);\n"
    "    if (NS == 2 && it + 1 < ntiles) {  // the next tile streams in while this one is used\n"
    "      $P_load<AK>(ks + ((it + 1) % NS) * (BN * W), kp, K_ST, K_SD, j0 + BN, BN, T, D, W);\n"
    "      $P_load<AV>(vs + ((it + 1) % NS) * (BN * W), vp, V_ST, V_SD, j0 + BN, BN, T, D, W);\n"
    "    }\n"
    "    tg_cp_async_commit();\n"
    "    tg_cp_async_wait<NS - 1>();  // this thread's copies of tile it (and Q, dO) have landed\n"
    "    __syncthreads();             // and every thread's, and Di\n"
    "    const float da = dis[warp * 16 + g], db = dis[warp * 16 + g + 8];\n"
    "    float s[BN / 8][4], dp[BN / 8][4];\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < BN / 8; n++)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < D / 16; kk++) {\n"
    "      unsigned a[4], ad[4];\n"
    "      $P_frag_a(a, qs, W, warp * 16, kk);\n"
    "      $P_frag_a(ad, dos, W, warp * 16, kk);\n"
    "#pragma unroll\n"
    "      for (int n = 0; n < BN / 8; n++) {\n"
    "        TG_PTR(const unsigned) pk = kt + (n * 8 + g) * W + kk * 8 + t;\n"
    "        TG_PTR(const unsigned) pv = vt + (n * 8 + g) * W + kk * 8 + t;\n"
    "        tg_mma_bf16(s[n], a, pk[0], pk[4]);\n"
    "        tg_mma_bf16(dp[n], ad, pv[0], pv[4]);\n"
    "      }\n"
    "    }\n"
    "    const bool diag = j0 + BN - 1 > r0;\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < BN / 8; n++)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; e++) {\n"
    "        const int j = j0 + n * 8 + 2 * t + (e & 1), i = e < 2 ? ra : rb;\n"
    "        float p = tg_ex2_approx(s[n][e] * SL2 - (e < 2 ? lsa : lsb));\n"
    "        if (diag && j > i) p = 0.0f;  // keys past T are past every row below T\n"
    "        s[n][e] = p * (dp[n][e] - (e < 2 ? da : db));  // dS\n"
    "      }\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < BN / 16; kk++) {\n"
    "      const unsigned a[4] = {tg_cvt_bf16x2(s[2 * kk][0], s[2 * kk][1]), tg_cvt_bf16x2(s[2 * kk][2], s[2 * kk][3]),\n"
    "                             tg_cvt_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),\n"
    "                             tg_cvt_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};\n"
    "#pragma unroll\n"
    "      for (int n = 0; n < D / 8; n++) {\n"
    "        unsigned b[2];\n"
    "        $P_ldsm_t(kt + (kk * 16 + (lane & 15)) * W + n * 4, b);\n"
    "        tg_mma_bf16(acc[n], a, b[0], b[1]);\n"
    "      }\n"
    "    }\n"
    "    __syncthreads();  // every warp is done with this stage before it is refilled\n"
    "    if (NS == 1 && it + 1 < ntiles) {\n"
    "      $P_load<AK>(ks, kp, K_ST, K_SD, j0 + BN, BN, T, D, W);\n"
    "      $P_load<AV>(vs, vp, V_ST, V_SD, j0 + BN, BN, T, D, W);\n"
    "    }\n"
    "  }\n"
    "\n"
    "#pragma unroll\n"
    "  for (int n = 0; n < D / 8; n++) {\n"
    "    const int c = n * 8 + 2 * t;\n"
    "    if (ra < T) {\n"
    "      $P_st(dqp, ra * DQ_ST + c * DQ_SD, acc[n][0] * SCALE);\n"
    "      $P_st(dqp, ra * DQ_ST + (c + 1) * DQ_SD, acc[n][1] * SCALE);\n"
    "    }\n"
    "    if (rb < T) {\n"
    "      $P_st(dqp, rb * DQ_ST + c * DQ_SD, acc[n][2] * SCALE);\n"
    "      $P_st(dqp, rb * DQ_ST + (c + 1) * DQ_SD, acc[n][3] * SCALE);\n"
    "    }\n"
    "  }\n"
    "}\n";

static const char *dkdv_body =
    "  TG_SHARED(__align__(16) unsigned, ks, BM * W);\n"
    "  TG_SHARED(__align__(16) unsigned, vs, BM * W);\n"
    "  TG_SHARED(__align__(16) unsigned, qs, NS * BN * W);  // NS stages of BN queries\n"
    "  TG_SHARED(__align__(16) unsigned, dos, NS * BN * W);\n"
    "  TG_SHARED(float, lss, NS * BN);\n"
    "  TG_SHARED(float, dis, NS * BN);\n"
    "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;\n"
    "  const int r0 = (int)blockIdx.x * BM;  // the first keys are seen by the most queries: first\n"
    "  const int ja = r0 + warp * 16 + g, jb = ja + 8;  // this lane's two keys\n"
    "\n"
    "  $P_load<AK>(ks, kp, K_ST, K_SD, r0, BM, T, D, W);\n"
    "  $P_load<AV>(vs, vp, V_ST, V_SD, r0, BM, T, D, W);\n"
    "  float dka[D / 8][4], dva[D / 8][4];\n"
    "#pragma unroll\n"
    "  for (int n = 0; n < D / 8; n++)\n"
    "#pragma unroll\n"
    "    for (int e = 0; e < 4; e++) dka[n][e] = dva[n][e] = 0.0f;\n"
    "\n"
    "  // queries before r0 see none of these keys; BN divides BM, so r0 starts a query tile\n"
    "  const int ntiles = (T - r0 + BN - 1) / BN;\n"
    "  {  // the first query tile joins K and V's group of copies\n"
    "    const int i1 = r0, sn = 0;\n"
    "      $P_load<AQ>(qs + sn * (BN * W), qp, Q_ST, Q_SD, i1, BN, T, D, W);\n"
    "      $P_load<ADO>(dos + sn * (BN * W), doutp, DO_ST, DO_SD, i1, BN, T, D, W);\n"
    "      $P_rowdot(dis + sn * BN, doutp, DO_ST, DO_SD, op, O_ST, O_SD, i1, BN, T, D);\n"
    "      for (int c = threadIdx.x; c < BN; c += blockDim.x)  // lse in log2 units\n"
    "        lss[sn * BN + c] = i1 + c < T ? $P_ld(lsep, (i1 + c) * L_ST) * LOG2E : 0.0f;\n"
    "  }\n"
    "  tg_cp_async_commit();  // the first group: the loop's wait counts groups\n"
    "  for (int it = 0; it < ntiles; it++) {\n"
    "    const int i0 = r0 + it * BN, cur = it % NS;\n"
    "    TG_PTR(const unsigned) qt = qs + cur * (BN * W);\n"
    "    TG_PTR(const unsigned) dot = dos + cur * (BN * W);\n"
    "    TG_PTR(const float) lt = lss + cur * BN;\n"
    "    TG_PTR(const float) dt = dis + cur * BN;\n"
    "    if (NS == 2 && it + 1 < ntiles) {  // the next tile streams in while this one is used\n"
    "      const int i1 = i0 + BN, sn = (it + 1) % NS;\n"
    "      $P_load<AQ>(qs + sn * (BN * W), qp, Q_ST, Q_SD, i1, BN, T, D, W);\n"
    "      $P_load<ADO>(dos + sn * (BN * W), doutp, DO_ST, DO_SD, i1, BN, T, D, W);\n"
    "      $P_rowdot(dis + sn * BN, doutp, DO_ST, DO_SD, op, O_ST, O_SD, i1, BN, T, D);\n"
    "      for (int c = threadIdx.x; c < BN; c += blockDim.x)  // lse in log2 units\n"
    "        lss[sn * BN + c] = i1 + c < T ? $P_ld(lsep, (i1 + c) * L_ST) * LOG2E : 0.0f;\n"
    "    }\n"
    "    tg_cp_async_commit();\n"
    "    tg_cp_async_wait<NS - 1>();  // this thread's copies of tile it (and K, V) have landed\n"
    "    __syncthreads();             // and every thread's\n"
    "    float s[BN / 8][4], dp[BN / 8][4];  // S^T and dP^T: this warp's 16 keys x BN queries\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < BN / 8; n++)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < D / 16; kk++) {\n"
    "      unsigned a[4], av[4];\n"
    "      $P_frag_a(a, ks, W, warp * 16, kk);\n"
    "      $P_frag_a(av, vs, W, warp * 16, kk);\n"
    "#pragma unroll\n"
    "      for (int n = 0; n < BN / 8; n++) {\n"
    "        TG_PTR(const unsigned) pq = qt + (n * 8 + g) * W + kk * 8 + t;\n"
    "        TG_PTR(const unsigned) pd = dot + (n * 8 + g) * W + kk * 8 + t;\n"
    "        tg_mma_bf16(s[n], a, pq[0], pq[4]);\n"
    "        tg_mma_bf16(dp[n], av, pd[0], pd[4]);\n"
    "      }\n"
    "    }\n"
    "    // masks: a key after a query (only while the tile overlaps the keys), queries past T\n"
    "    const bool mask = i0 < r0 + BM || i0 + BN > T;\n"
    "#pragma unroll\n"
    "    for (int n = 0; n < BN / 8; n++)\n"
    "#pragma unroll\n"
    "      for (int e = 0; e < 4; e++) {\n"
    "        const int c = n * 8 + 2 * t + (e & 1), i = i0 + c, j = e < 2 ? ja : jb;\n"
    "        float p = tg_ex2_approx(s[n][e] * SL2 - lt[c]);\n"
    "        if (mask && (j > i || i >= T)) p = 0.0f;\n"
    "        s[n][e] = p;\n"
    "        dp[n][e] = p * (dp[n][e] - dt[c]);  // dS^T\n"
    "      }\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < BN / 16; kk++) {\n"
    "      const unsigned a[4] = {tg_cvt_bf16x2(s[2 * kk][0], s[2 * kk][1]), tg_cvt_bf16x2(s[2 * kk][2], s[2 * kk][3]),\n"
    "                             tg_cvt_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),\n"
    "                             tg_cvt_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};\n"
    "      const unsigned ad[4] = {tg_cvt_bf16x2(dp[2 * kk][0], dp[2 * kk][1]), tg_cvt_bf16x2(dp[2 * kk][2], dp[2 * kk][3]),\n"
    "                              tg_cvt_bf16x2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),\n"
    "                              tg_cvt_bf16x2(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};\n"
    "#pragma unroll\n"
    "      for (int n = 0; n < D / 8; n++) {\n"
    "        unsigned b[2];\n"
    "        $P_ldsm_t(dot + (kk * 16 + (lane & 15)) * W + n * 4, b);\n"
    "        tg_mma_bf16(dva[n], a, b[0], b[1]);\n"
    "        $P_ldsm_t(qt + (kk * 16 + (lane & 15)) * W + n * 4, b);\n"
    "        tg_mma_bf16(dka[n], ad, b[0], b[1]);\n"
    "      }\n"
    "    }\n"
    "    __syncthreads();  // every warp is done with this stage before it is refilled\n"
    "    if (NS == 1 && it + 1 < ntiles) {\n"
    "      const int i1 = i0 + BN, sn = 0;\n"
    "      $P_load<AQ>(qs + sn * (BN * W), qp, Q_ST, Q_SD, i1, BN, T, D, W);\n"
    "      $P_load<ADO>(dos + sn * (BN * W), doutp, DO_ST, DO_SD, i1, BN, T, D, W);\n"
    "      $P_rowdot(dis + sn * BN, doutp, DO_ST, DO_SD, op, O_ST, O_SD, i1, BN, T, D);\n"
    "      for (int c = threadIdx.x; c < BN; c += blockDim.x)  // lse in log2 units\n"
    "        lss[sn * BN + c] = i1 + c < T ? $P_ld(lsep, (i1 + c) * L_ST) * LOG2E : 0.0f;\n"
    "    }\n"
    "  }\n"
    "\n"
    "#pragma unroll\n"
    "  for (int n = 0; n < D / 8; n++) {\n"
    "    const int c = n * 8 + 2 * t;\n"
    "    if (ja < T) {\n"
    "      $P_st(dkp, ja * DK_ST + c * DK_SD, dka[n][0] * SCALE);\n"
    "      $P_st(dkp, ja * DK_ST + (c + 1) * DK_SD, dka[n][1] * SCALE);\n"
    "      $P_st(dvp, ja * DV_ST + c * DV_SD, dva[n][0]);\n"
    "      $P_st(dvp, ja * DV_ST + (c + 1) * DV_SD, dva[n][1]);\n"
    "    }\n"
    "    if (jb < T) {\n"
    "      $P_st(dkp, jb * DK_ST + c * DK_SD, dka[n][2] * SCALE);\n"
    "      $P_st(dkp, jb * DK_ST + (c + 1) * DK_SD, dka[n][3] * SCALE);\n"
    "      $P_st(dvp, jb * DV_ST + c * DV_SD, dva[n][2]);\n"
    "      $P_st(dvp, jb * DV_ST + (c + 1) * DV_SD, dva[n][3]);\n"
    "    }\n"
    "  }\n"
    "}\n";

/* ---- kernels --------------------------------------------------------------- */

enum { K_FWD, K_DKDV, K_DQ };
static const char *const kernel_suffix[] = {"_fwd", "_bwd_dkdv", "_bwd_dq"};

static tiling choose(int kind, int64_t D) {
  static const int bns[] = {64, 32, 16};
  for (int ns = 2; ns >= 1; ns--)
    for (int i = 0; i < 3; i++) {
      tiling t = {bns[i], ns};
      int64_t bytes = kind == K_FWD ? fwd_smem(D, t) : kind == K_DKDV ? dkdv_smem(D, t) : dq_smem(D, t);
      if (bytes <= SMEM_LIMIT && (kind != K_FWD || ns * t.bn >= BM)) return t;
    }
  return (tiling){0, 0};
}

/* An operand cp.async can stage: bf16 with contiguous rows, each 16-byte
 * aligned (every stride and the offset a multiple of 8 elements; the
 * buffers themselves are TG_MEMPLAN_ALIGN-aligned). */
static bool async_ok(const tg_flash_operand *o) {
  return o->bf16 && o->stride[3] == 1 && o->offset % 8 == 0 && o->stride[0] % 8 == 0 && o->stride[1] % 8 == 0 &&
         o->stride[2] % 8 == 0;
}

static void signature(FILE *f, const char *prefix, int kind, const tg_flash_shape *s) {
  fprintf(f, "extern \"C\" __global__ void __launch_bounds__(%d, %d) %s%s(\n", THREADS, min_blocks(s->D), prefix,
          kernel_suffix[kind]);
  fprintf(f, "    TG_ARG(const %s) q, TG_ARG(const %s) k, TG_ARG(const %s) v,\n", ptype(&s->q), ptype(&s->k),
          ptype(&s->v));
  if (kind == K_FWD) {
    fprintf(f, "    TG_ARG(%s) o, TG_ARG(%s) lse) {\n", ptype(&s->o), ptype(&s->lse));
    return;
  }
  fprintf(f, "    TG_ARG(const %s) o, TG_ARG(const %s) lse, TG_ARG(const %s) dout,\n", ptype(&s->o),
          ptype(&s->lse), ptype(&s->dout));
  fprintf(f, "    TG_ARG(%s) dq, TG_ARG(%s) dk, TG_ARG(%s) dv) {\n", ptype(&s->dq), ptype(&s->dk),
          ptype(&s->dv));
}

static void consts(FILE *f, const tg_flash_shape *s, int kind) {
  tiling t = choose(kind, s->D);
  fprintf(f, "  const int T = %" PRId64 ", D = %" PRId64 ", W = %d;  // W: words a shared row (D/2 + 4)\n", s->T,
          s->D, words(s->D));
  fprintf(f, "  const int BM = %d, BN = %d, NS = %d;  // rows a block owns, rows a streamed tile has, its stages\n",
          BM, t.bn, t.ns);
  fprintf(f, "  // staged with cp.async (bf16, contiguous aligned rows) or through registers\n");
  fprintf(f, "  const bool AQ = %s, AK = %s, AV = %s", async_ok(&s->q) ? "true" : "false",
          async_ok(&s->k) ? "true" : "false", async_ok(&s->v) ? "true" : "false");
  if (kind != K_FWD) fprintf(f, ", ADO = %s", async_ok(&s->dout) ? "true" : "false");
  fprintf(f, ";\n");
}

static void emit_kernel(FILE *f, const char *prefix, int kind, const tg_flash_shape *s) {
  static const char *const what[] = {
      "// Forward for 64 query rows of one (batch, head), a warp per 16 rows: S = Q K^T and\n"
      "// O += P V on the tensor cores (bf16 in, f32 accumulate), keys a tile at a time up to\n"
      "// the diagonal with the online softmax (running max and sum in f32, log2 units).\n"
      "// Writes o = O / sum and lse = log-sum-exp of the scaled scores.\n",
      "// Backward, dk and dv for 64 keys of one (batch, head), a warp per 16 keys, over the\n"
      "// query tiles at or after them: S^T = K Q^T and dP^T = V dO^T on the tensor cores,\n"
      "// P^T = exp(S^T - lse) and dS^T = P^T (dP^T - Di) in f32, dV += P^T dO, dK += dS^T Q.\n"
      "// dk = scale dK, dv = dV.  One thread sums each element: deterministic.\n",
      "// Backward, dq for 64 query rows of one (batch, head), a warp per 16 rows, over the key\n"
      "// tiles up to the diagonal: S = Q K^T and dP = dO V^T on the tensor cores,\n"
      "// P = exp(S - lse) and dS = P (dP - Di) in f32, dQ += dS K.  dq = scale dQ.\n"
      "// One thread sums each element: deterministic.\n",
  };
  fprintf(f, "// tg kernel: %s%s\n%s", prefix, kernel_suffix[kind], what[kind]);
  signature(f, prefix, kind, s);
  consts(f, s, kind);
  flt(f, "SL2", s->scale * 1.4426950408889634, "scale * log2(e): scores in log2 units");
  if (kind == K_FWD) {
    flt(f, "LN2", 0.69314718055994531, NULL);
    operand(f, "q", "Q", &s->q, true, true);
    operand(f, "k", "K", &s->k, true, true);
    operand(f, "v", "V", &s->v, true, true);
    operand(f, "o", "O", &s->o, false, true);
    operand(f, "lse", "L", &s->lse, false, false);
    put(f, prefix, fwd_body);
    return;
  }
  flt(f, "SCALE", s->scale, NULL);
  flt(f, "LOG2E", 1.4426950408889634, NULL);
  operand(f, "q", "Q", &s->q, true, true);
  operand(f, "k", "K", &s->k, true, true);
  operand(f, "v", "V", &s->v, true, true);
  operand(f, "o", "O", &s->o, true, true);
  operand(f, "lse", "L", &s->lse, true, false);
  operand(f, "dout", "DO", &s->dout, true, true);
  if (kind == K_DQ) {
    operand(f, "dq", "DQ", &s->dq, false, true);
    put(f, prefix, dq_body);
  } else {
    operand(f, "dk", "DK", &s->dk, false, true);
    operand(f, "dv", "DV", &s->dv, false, true);
    put(f, prefix, dkdv_body);
  }
}

void tg_cuda_emit_memory_macros(FILE *f) { fputs(tg_cuda_memory_text, f); }

void tg_flash_emit_cuda_kernels(FILE *f, const char *prefix, const tg_flash_shape *s, bool backward) {
  char why[256];
  fprintf(f,
          "// tg flash attention %s (codegen/cuda/flash_cuda.c): nb=%" PRId64 " nh=%" PRId64 " T=%" PRId64
          " D=%" PRId64 " scale=%.9g\n",
          backward ? "backward" : "forward", s->nb, s->nh, s->T, s->D, s->scale);
  if (!is_ident(prefix)) {
    fprintf(f, "#error \"flash attention: kernel prefix is not an identifier of at most 100 characters\"\n");
    return;
  }
  if (!tg_flash_supported(s, why, sizeof why)) {
    fprintf(f, "#error \"%s: %s\"\n", prefix, why);
    return;
  }
  put(f, prefix, helpers);
  if (!backward) {
    emit_kernel(f, prefix, K_FWD, s);
    return;
  }
  emit_kernel(f, prefix, K_DKDV, s);
  fputc('\n', f);
  emit_kernel(f, prefix, K_DQ, s);
}

void tg_flash_emit_cuda(FILE *f, const char *prefix, const tg_flash_shape *s, bool backward) {
  tg_cuda_emit_memory_macros(f);
  fputs(tg_cuda_ptx_text, f);
  tg_flash_emit_cuda_kernels(f, prefix, s, backward);
}

int tg_flash_cuda_launches(const tg_flash_shape *s, const char *prefix, bool backward, tg_flash_launch *out) {
  if (!is_ident(prefix) || !tg_flash_supported(s, NULL, 0)) return 0;
  int kinds[2] = {K_FWD, 0}, n = 1;
  if (backward) kinds[0] = K_DKDV, kinds[1] = K_DQ, n = 2;
  for (int i = 0; i < n; i++) {
    tg_flash_launch *l = &out[i];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s%s", prefix, kernel_suffix[kinds[i]]);
    l->grid[0] = (unsigned)((s->T + BM - 1) / BM);
    l->grid[1] = (unsigned)s->nh;
    l->grid[2] = (unsigned)s->nb;
    l->block[0] = THREADS;
    l->block[1] = l->block[2] = 1;
    l->shmem = 0;
  }
  return n;
}
