/* flash_cuda.c: flash attention rendered as CUDA for the GPU backend (flash.h).
 *
 * FlashAttention-2's scheme on the bf16 tensor cores (mma.sync m16n8k16,
 * sm_80 and later), written out with the shapes as constants: the device
 * code is flash_helpers.cuh and the kernels' bodies flash_fwd.cuh,
 * flash_bwd_dkdv.cuh and flash_bwd_dq.cuh (embedded at build time); this
 * file prints each kernel's signature and the shape's constants before its
 * body, and chooses the tiling:
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
    put(f, prefix, tg_flash_fwd_text);
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
    put(f, prefix, tg_flash_bwd_dq_text);
  } else {
    operand(f, "dk", "DK", &s->dk, false, true);
    operand(f, "dv", "DV", &s->dv, false, true);
    put(f, prefix, tg_flash_bwd_dkdv_text);
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
  put(f, prefix, tg_flash_helpers_text);
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
