/* flash_c.c: flash attention rendered as C for the CPU backend (flash.h).
 *
 * The emitted function copies what it multiplies into small f32 tiles, so
 * that loads from strided (and possibly bf16) operands happen once per tile,
 * and multiplies tiles with a register-blocked product (emit_tile_product:
 * four rows by two vectors' columns in vector registers).  The per-row loops it
 * replaced kept their partial sums in memory and ran attention at about 10
 * GFLOP/s on one core against OpenBLAS's 70 for the step's matmuls
 * (docs/performance.md).
 *
 * Forward: one OpenMP iteration per (batch, head, tile of query rows); the
 * key tiles up to the diagonal are visited in order with the online softmax.
 * Backward: one iteration per (batch, head), which alone writes that head's
 * dq, dk and dv: for each key tile and each query tile at or below it, P and
 * dS once, then dv += P^T do, dk += dS^T q, dq += dS k.  So each output
 * element is summed by one thread in a fixed order (the same bits whatever
 * the schedule), with five tile products a pair of tiles and no atomics;
 * the head's q, do and dq rows live in a per-thread heap scratch. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "flash_c.h"

enum { C_MAX_D = 256 };

/* Rows (and keys) per tile: 64 up to D = 64, smaller for wider heads so
 * that the forward's six tiles (q, acc, k, k^T, v: BT x DP floats; p: BT x
 * BT) stay within about 96 KiB of a thread's stack. */
static int c_tile(int64_t D) { return D <= 64 ? 64 : D <= 128 ? 32 : 16; }

static bool fail(char *why, size_t n, const char *msg) {
  if (why && n) snprintf(why, n, "%s", msg);
  return false;
}

bool tg_flash_supported_c(const tg_flash_shape *s, char *why, size_t n) {
  if (s->nb < 1 || s->nh < 1 || s->T < 1 || s->D < 1)
    return fail(why, n, "flash attention: empty shape (nb, nh, T and D must be positive)");
  /* the emitted code counts rows and (batch, head) pairs in int */
  if (s->T > INT32_MAX || s->nb > INT32_MAX / s->nh)
    return fail(why, n, "flash attention: T and nb*nh must each be below 2^31");
  if (s->D > C_MAX_D) {
    if (why && n)
      snprintf(why, n,
               "flash attention: head size D=%" PRId64 " is over the C backend's %d "
               "(its tiles live on the stack)",
               s->D, C_MAX_D);
    return false;
  }
  if (!isfinite(s->scale)) return fail(why, n, "flash attention: the scale is not finite");
  if (why && n) why[0] = 0;
  return true;
}

/* ---- pieces of emitted text ------------------------------------------------ */

/* A float literal that reads back as the same float. */
static void flt(char *buf, size_t n, double x) { snprintf(buf, n, "%.9ef", (double)(float)x); }

/* "t * ST + d * SD" for operand o, leaving out what is zero or one. */
static void idx(char *buf, size_t n, const tg_flash_operand *o, const char *t, const char *d) {
  size_t k = 0;
  buf[0] = 0;
  const char *var[2] = {t, d};
  int64_t st[2] = {o->stride[2], o->stride[3]};
  for (int a = 0; a < 2; a++) {
    if (!var[a] || st[a] == 0) continue;
    const char *plus = k ? " + " : "";
    if (st[a] == 1) k += (size_t)snprintf(buf + k, n - k, "%s%s", plus, var[a]);
    else k += (size_t)snprintf(buf + k, n - k, "%s(%s) * %" PRId64 "LL", plus, var[a], st[a]);
    if (k >= n) k = n - 1;
  }
  if (!k) snprintf(buf, n, "0");
}

/* The load of element (t, d) of operand name through its per-head pointer
 * name##p, as an f32 expression. */
static char *ld(char *buf, size_t n, const char *fn, const char *name, const tg_flash_operand *o,
                const char *t, const char *d) {
  char ix[256];
  idx(ix, sizeof ix, o, t, d);
  if (o->bf16) snprintf(buf, n, "%s_bf16_ld(%sp[%s])", fn, name, ix);
  else snprintf(buf, n, "%sp[%s]", name, ix);
  return buf;
}

/* The statement storing f32 expression val into element (t, d). */
static void st(FILE *f, const char *indent, const char *fn, const char *name,
               const tg_flash_operand *o, const char *t, const char *d, const char *val) {
  char ix[256];
  idx(ix, sizeof ix, o, t, d);
  if (o->bf16) fprintf(f, "%s%sp[%s] = %s_bf16_st(%s);\n", indent, name, ix, fn, val);
  else fprintf(f, "%s%sp[%s] = %s;\n", indent, name, ix, val);
}

static const char *ptype(const tg_flash_operand *o) { return o->bf16 ? "unsigned short" : "float"; }

/* Bit conversions for bf16 operands, only when some operand is bf16 (the
 * union is the C11 way to reinterpret bits without memcpy's header). */
static void emit_helpers(FILE *f, const char *fn, const tg_flash_operand *const *ops, int n) {
  bool any = false;
  for (int i = 0; i < n; i++) any |= ops[i]->bf16;
  if (!any) return;
  fprintf(f,
          "static inline float %s_bf16_ld(unsigned short h) {\n"
          "  union { unsigned int u; float f; } x;\n"
          "  x.u = (unsigned int)h << 16;\n"
          "  return x.f;\n"
          "}\n"
          "/* round to nearest even; NaN stays NaN (quiet) */\n"
          "static inline unsigned short %s_bf16_st(float f) {\n"
          "  union { float f; unsigned int u; } x;\n"
          "  x.f = f;\n"
          "  if ((x.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x.u >> 16) | 0x40u);\n"
          "  return (unsigned short)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);\n"
          "}\n",
          fn, fn);
}

/* "name + (offset + b * SB + h * SH)": the operand's pointer for one head. */
static void head_ptr(FILE *f, const char *qual, const char *name, const tg_flash_operand *o) {
  fprintf(f, "    %s%s *%sp = %s + (%" PRId64 "LL + b * %" PRId64 "LL + h * %" PRId64 "LL);\n", qual,
          ptype(o), name, name, o->offset, o->stride[0], o->stride[1]);
}

static bool refuse(FILE *f, const char *fn, const tg_flash_shape *s) {
  char why[256];
  if (tg_flash_supported_c(s, why, sizeof why)) return false;
  fprintf(f, "#error \"%s: %s\"\n", fn, why);
  return true;
}

/* The shape as constants; DP is D rounded up to the products' 16 columns
 * (the padding columns hold zeros). */
static void emit_consts(FILE *f, const tg_flash_shape *s) {
  int64_t B = c_tile(s->D), nt = (s->T + B - 1) / B;
  char sc[64];
  flt(sc, sizeof sc, s->scale);
  fprintf(f,
          "  enum { NB = %" PRId64 ", NH = %" PRId64 ", T = %" PRId64 ", D = %" PRId64 ", DP = %" PRId64
          ", BT = %" PRId64 ", NT = %" PRId64 " };\n",
          s->nb, s->nh, s->T, s->D, (s->D + 15) / 16 * 16, B, nt);
  fprintf(f, "  const float scale = %s;\n", sc);
}

/* A Cephes-style e^x (about 1 ulp) that gcc vectorises, unlike libm's expf
 * (whose calls were half the backward's time); -inf gives 0, nan stays. */
static void emit_exp(FILE *f, const char *fn) {
  fprintf(f,
          "static inline float %s_exp(float x) {\n"
          "  float c = x < -87.5f ? -87.5f : x > 88.5f ? 88.5f : x;\n"
          "  float n = __builtin_floorf(c * 1.44269504088896341f + 0.5f);\n"
          "  float r = c - n * 0.693359375f + n * 2.12194440e-4f;\n"
          "  float y = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r\n"
          "              + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;\n"
          "  y = y * r * r + r + 1.0f;\n"
          "  union { unsigned u; float f; } s = {(unsigned)((int)n + 126) << 23};\n"
          "  y = y * s.f * 2.0f;\n"
          "  return x < -87.5f ? 0.0f : x > 88.5f ? __builtin_inff() : y;\n"
          "}\n",
          fn);
}


/* ---- the tile products ------------------------------------------------------ */

/* C (+)= A B on tiles: C is M x N (ldc), B is K x N with contiguous rows
 * (ldb), N a multiple of 16; A(m, k) is a[m * lda + k] (_nn) or, read
 * transposed, a[k * lda + m] (_tn).  Four rows by two vectors of C at a
 * time are held in eight vectors (GNU C vector extensions: 16 floats, a
 * register each, where the compiler targets AVX-512; else 8, AVX's
 * registers or pairs of SSE ones) so that each load of B feeds four
 * multiply-adds; N's last columns, where fewer than two vectors are left,
 * go one vector at a time; the row-at-a-time loops this replaced stored
 * their partial sums after every term and ran at a seventh of the matmuls'
 * speed.  Every element of C is still one sum over k in order.
 * tri skips, on the diagonal tile of causal attention (query row r, key c:
 * only c <= r count), the work whose result is zero or never read, by
 * blocks of four rows: 1, columns j past the block's last row (P = q k^T
 * and do v^T: columns c > r are masked); 2, terms k before the block's
 * first row (dv += P^T do, dk += dS^T q: P[r][c] is 0 for r < c); 3,
 * terms k past its last row (o += P v, dq += dS k).  What is skipped is
 * exactly +-0 or unread, so the results are the same bits; on T = 64
 * (one tile a head) it is two fifths of the products. */
static void emit_tile_product(FILE *f, const char *fn, const char *name, const char *a_at) {
  fprintf(f,
          "static inline void %s_%s(int M, int N, int K, const float *a, long lda, const float *b, long ldb,\n"
          "                         float *c, long ldc, int add, int tri) {\n"
          "#define A_(m, k) (%s)\n"
          "  enum { W = %s_W };\n"
          "  int i = 0;\n"
          "  for (; i + 4 <= M; i += 4) {\n"
          "    const int jn = tri == 1 && i + 4 < N ? i + 4 : N;\n"
          "    const int k0 = tri == 2 ? i : 0, k1 = tri == 3 && i + 4 < K ? i + 4 : K;\n"
          "    int j = 0;\n"
          "    for (; j < jn && j + 2 * W <= N; j += 2 * W) { /* four rows by two vectors */\n"
          "      %s_vw x00 = {0}, x01 = {0}, x10 = {0}, x11 = {0}, x20 = {0}, x21 = {0}, x30 = {0}, x31 = {0};\n"
          "      for (int k = k0; k < k1; k++) {\n"
          "        const %s_vw b0 = *(const %s_vw *)(b + k * ldb + j), b1 = *(const %s_vw *)(b + k * ldb + j + W);\n"
          "        const float a0 = A_(i, k), a1 = A_(i + 1, k), a2 = A_(i + 2, k), a3 = A_(i + 3, k);\n"
          "        x00 += a0 * b0, x01 += a0 * b1, x10 += a1 * b0, x11 += a1 * b1;\n"
          "        x20 += a2 * b0, x21 += a2 * b1, x30 += a3 * b0, x31 += a3 * b1;\n"
          "      }\n"
          "      %s_vw *y0 = (%s_vw *)(c + i * ldc + j), *y1 = (%s_vw *)(c + (i + 1) * ldc + j);\n"
          "      %s_vw *y2 = (%s_vw *)(c + (i + 2) * ldc + j), *y3 = (%s_vw *)(c + (i + 3) * ldc + j);\n"
          "      if (add) {\n"
          "        y0[0] += x00, y0[1] += x01, y1[0] += x10, y1[1] += x11;\n"
          "        y2[0] += x20, y2[1] += x21, y3[0] += x30, y3[1] += x31;\n"
          "      } else {\n"
          "        y0[0] = x00, y0[1] = x01, y1[0] = x10, y1[1] = x11;\n"
          "        y2[0] = x20, y2[1] = x21, y3[0] = x30, y3[1] = x31;\n"
          "      }\n"
          "    }\n"
          "    for (; j < jn; j += W) { /* four rows by one vector: N's last columns */\n"
          "      %s_vw x0 = {0}, x1 = {0}, x2 = {0}, x3 = {0};\n"
          "      for (int k = k0; k < k1; k++) {\n"
          "        const %s_vw b0 = *(const %s_vw *)(b + k * ldb + j);\n"
          "        x0 += A_(i, k) * b0, x1 += A_(i + 1, k) * b0, x2 += A_(i + 2, k) * b0, x3 += A_(i + 3, k) * b0;\n"
          "      }\n"
          "      %s_vw *y0 = (%s_vw *)(c + i * ldc + j), *y1 = (%s_vw *)(c + (i + 1) * ldc + j);\n"
          "      %s_vw *y2 = (%s_vw *)(c + (i + 2) * ldc + j), *y3 = (%s_vw *)(c + (i + 3) * ldc + j);\n"
          "      if (add) *y0 += x0, *y1 += x1, *y2 += x2, *y3 += x3;\n"
          "      else *y0 = x0, *y1 = x1, *y2 = x2, *y3 = x3;\n"
          "    }\n"
          "  }\n"
          "  for (; i < M; i++) { /* the last rows, whole: what tri skips is zeros or unread */\n"
          "    for (int j = 0; j < N; j += W) {\n"
          "      %s_vw x0 = {0};\n"
          "      for (int k = 0; k < K; k++) x0 += A_(i, k) * *(const %s_vw *)(b + k * ldb + j);\n"
          "      %s_vw *y = (%s_vw *)(c + i * ldc + j);\n"
          "      if (add) *y += x0;\n"
          "      else *y = x0;\n"
          "    }\n"
          "  }\n"
          "#undef A_\n"
          "}\n",
          fn, name, a_at, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn,
          fn);
}

/* The max and the sum of a vector's lanes (the forward's rows): log2(W)
 * rounds, each combining every lane with the lane s away (lane ^ s), so
 * every lane ends with the whole; lane by lane they were a chain of W
 * dependent scalar maxes and adds, 4 cycles each (the forward on the baby
 * Shakespeare shapes: 400-412 us a layer before, 336-340 after).  The
 * sum's order is a tree's, not left to right.  After the vector type
 * (emit_tile_products). */
static void emit_lane_reductions(FILE *f, const char *fn) {
  for (int w = 16; w >= 8; w /= 2) {
    fprintf(f, "%s\n", w == 16 ? "#ifdef __AVX512F__" : "#else");
    for (int sum = 0; sum <= 1; sum++) {
      fprintf(f, "static inline float %s_lanes_%s(%s_vw v) {\n", fn, sum ? "sum" : "max", fn);
      for (int sb = w / 2; sb >= 1; sb /= 2) {
        char idx[256];
        int n = 0;
        for (int j = 0; j < w; j++) n += snprintf(idx + n, sizeof idx - (size_t)n, "%s%d", j ? ", " : "", j ^ sb);
        fprintf(f,
                "#ifdef __clang__\n"
                "  { const %s_vw u = __builtin_shufflevector(v, v, %s);\n"
                "#else\n"
                "  { const %s_vw u = __builtin_shuffle(v, (%s_vi){%s});\n"
                "#endif\n",
                fn, idx, fn, fn, idx);
        if (sum) fprintf(f, "    v += u; }\n");
        else fprintf(f, "    const %s_vi gt = u > v;\n    v = (%s_vw)(((%s_vi)u & gt) | ((%s_vi)v & ~gt)); }\n", fn, fn, fn, fn);
      }
      fprintf(f, "  return v[0];\n}\n");
    }
  }
  fprintf(f, "#endif\n");
}

/* The vector type (unaligned, may alias the float tiles; and its int twin,
 * a comparison's mask): 16 floats where
 * the compiler targets AVX-512 (-march=native on such a CPU), else 8 (AVX's
 * registers, or pairs of SSE ones); and both products.  N is a multiple of
 * 16, so of either width. */
static void emit_tile_products(FILE *f, const char *fn, bool transposed_too) {
  fprintf(f,
          "#ifdef __AVX512F__\n"
          "typedef float %s_vw __attribute__((vector_size(64), aligned(4), may_alias));\n"
          "typedef int %s_vi __attribute__((vector_size(64)));\n"
          "enum { %s_W = 16 };\n"
          "#else\n"
          "typedef float %s_vw __attribute__((vector_size(32), aligned(4), may_alias));\n"
          "typedef int %s_vi __attribute__((vector_size(32)));\n"
          "enum { %s_W = 8 };\n"
          "#endif\n",
          fn, fn, fn, fn, fn, fn);
  emit_tile_product(f, fn, "mm_nn", "a[(m) * lda + (k)]");
  if (transposed_too) emit_tile_product(f, fn, "mm_tn", "a[(k) * lda + (m)]");
  /* A tile transposed (k for q k^T, v for dP = do v^T), by 16 x 16 blocks
   * in registers where the compiler targets AVX-512: four rounds of
   * two-vector shuffles (vpermt2ps), each swapping one bit of the row
   * index with the same bit of the column index; element by element, a
   * strided scalar load and store each, it was a sixth of the forward.
   * Both sides are multiples of 16 (BT and DP are). */
  fprintf(f,
          "/* dst[c * ldd + r] = src[r * lds + c] for r < R, c < C */\n"
          "static inline void %s_transpose(const float *src, int lds, float *dst, int ldd, int R, int C) {\n"
          "#if defined(__AVX512F__) && !defined(__clang__) /* __builtin_shuffle is gcc's */\n"
          "  if (R %% 16 == 0 && C %% 16 == 0) {\n"
          "    for (int r0 = 0; r0 < R; r0 += 16)\n"
          "      for (int c0 = 0; c0 < C; c0 += 16) {\n"
          "        %s_vw x[16];\n"
          "        for (int i = 0; i < 16; i++) x[i] = *(const %s_vw *)(src + (r0 + i) * lds + c0);\n",
          fn, fn, fn);
  /* round sb: row i (bit sb clear) takes row i + sb's columns j - sb
   * where j has bit sb; row i + sb takes row i's columns j + sb where j
   * lacks it */
  for (int sb = 8; sb >= 1; sb /= 2) {
    char lo[256], hi[256];
    int nl = 0, nh = 0;
    for (int j = 0; j < 16; j++) {
      nl += snprintf(lo + nl, sizeof lo - (size_t)nl, "%s%d", j ? ", " : "", (j & sb) ? 16 + j - sb : j);
      nh += snprintf(hi + nh, sizeof hi - (size_t)nh, "%s%d", j ? ", " : "", (j & sb) ? 16 + j : j + sb);
    }
    /* unrolled, so that x stays in registers */
    fprintf(f, "        {\n          const %s_vi lo = {%s}, hi = {%s};\n", fn, lo, hi);
    for (int i = 0; i < 16; i++)
      if (!(i & sb))
        fprintf(f, "          { const %s_vw a = x[%d], b = x[%d]; x[%d] = __builtin_shuffle(a, b, lo); "
                   "x[%d] = __builtin_shuffle(a, b, hi); }\n",
                fn, i, i + sb, i, i + sb);
    fprintf(f, "        }\n");
  }
  fprintf(f,
          "        for (int i = 0; i < 16; i++) *(%s_vw *)(dst + (c0 + i) * ldd + r0) = x[i];\n"
          "      }\n"
          "    return;\n"
          "  }\n"
          "#endif\n"
          "  for (int c = 0; c < C; c++)\n"
          "    for (int r = 0; r < R; r++) dst[c * ldd + r] = src[r * lds + c];\n"
          "}\n",
          fn);
}

/* ---- forward --------------------------------------------------------------- */

void tg_flash_emit_c_fwd(FILE *f, const char *fn, const tg_flash_shape *s) {
  fprintf(f,
          "/* flash attention forward (tg codegen/c/flash_c.c): nb=%" PRId64 " nh=%" PRId64
          " T=%" PRId64 " D=%" PRId64 ".\n"
          " * o = causal softmax(scale q k^T) v and lse = its rows' log-sum-exp, by tiles of\n"
          " * query rows, the keys a tile at a time with a running max m and sum l. */\n",
          s->nb, s->nh, s->T, s->D);
  if (refuse(f, fn, s)) return;
  const tg_flash_operand *ops[] = {&s->q, &s->k, &s->v, &s->o, &s->lse};
  emit_helpers(f, fn, ops, 5);
  char a[512], b[512], c[512];
  fprintf(f, "float logf(float);\n");
  emit_exp(f, fn);
  emit_tile_products(f, fn, false);
  emit_lane_reductions(f, fn);
  fprintf(f, "void %s(const %s *q, const %s *k, const %s *v, %s *o, %s *lse) {\n", fn, ptype(&s->q),
          ptype(&s->k), ptype(&s->v), ptype(&s->o), ptype(&s->lse));
  emit_consts(f, s);
  fprintf(f,
          "#pragma omp parallel for schedule(dynamic, 1)\n"
          "  for (long long task = 0; task < (long long)NB * NH * NT; task++) {\n"
          "    /* the last query tiles see the most keys: hand them out first */\n"
          "    const long long bh = task %% (NB * NH), b = bh / NH, h = bh %% NH;\n"
          "    const long long i0 = (NT - 1 - task / (NB * NH)) * BT;\n"
          "    const int nq = T - i0 < BT ? (int)(T - i0) : BT;\n");
  head_ptr(f, "const ", "q", &s->q);
  head_ptr(f, "const ", "k", &s->k);
  head_ptr(f, "const ", "v", &s->v);
  head_ptr(f, "", "o", &s->o);
  head_ptr(f, "", "lse", &s->lse);
  fprintf(f,
          "    float qt[BT][DP], acc[BT][DP], kr[BT][DP], kt[DP][BT], vt[BT][DP], p[BT][BT], m[BT], l[BT];\n"
          "    for (int r = 0; r < nq; r++) {\n"
          "      for (int d = 0; d < DP; d++) {\n"
          "        qt[r][d] = d < D ? %s : 0.0f;\n"
          "        acc[r][d] = 0.0f;\n"
          "      }\n"
          "      m[r] = -3.402823466e+38f; /* -FLT_MAX: exp(m - max) is 0 on the first tile */\n"
          "      l[r] = 0.0f;\n"
          "    }\n"
          "    for (long long j0 = 0; j0 < i0 + nq; j0 += BT) {\n"
          "      const int nk = T - j0 < BT ? (int)(T - j0) : BT;\n"
          /* the tile's k and v rows (zeros past the last key and past D),
           * row by row with no test in the loop that loads them, then k
           * transposed from its copy (in L1) */
          "      for (int c = 0; c < BT; c++) {\n"
          "        if (c < nk) {\n"
          "          #pragma omp simd /* independent columns: -O2 alone would not vectorize (the pointers may alias) */\n"
          "          for (int d = 0; d < D; d++) {\n"
          "            kr[c][d] = %s;\n"
          "            vt[c][d] = %s;\n"
          "          }\n"
          "        }\n"
          "        for (int d = c < nk ? D : 0; d < DP; d++) kr[c][d] = vt[c][d] = 0.0f;\n"
          "      }\n"
          "      %s_transpose(&kr[0][0], DP, &kt[0][0], BT, BT, DP);\n"
          "      const int diag = j0 == i0; /* the diagonal tile: key c <= query row r */\n"
          "      %s_mm_nn(nq, BT, DP, &qt[0][0], DP, &kt[0][0], BT, &p[0][0], BT, 0, diag);\n"
          "      for (int r = 0; r < nq; r++) {\n"
          "        const long long i = i0 + r;\n"
          "        /* keys j <= i of this tile: none for the rows above it */\n"
          "        const int nc = i < j0 ? 0 : i - j0 + 1 < nk ? (int)(i - j0 + 1) : nk;\n"
          /* the loops run to nc rounded up to 16 keys, the masked ones
           * -inf (so exp gives 0): whole vectors, where a count of nc left
           * up to 15 scalar exps a row */
          "        const int nv = (nc + 15) / 16 * 16;\n"
          /* the max and the sum over vectors of the row, lane by lane, then
           * across the lanes by a tree (lanes_max, lanes_sum): gcc 12 leaves
           * an omp simd reduction here scalar ("no vectype" for its per-lane
           * array) */
          "        float *const pr = p[r];\n"
          "        for (int c = 0; c < nv; c++) pr[c] = c < nc ? pr[c] * scale : -__builtin_inff();\n"
          "        %s_vw vmx = (%s_vw){0} + m[r];\n"
          "        for (int c = 0; c < nv; c += %s_W) {\n"
          "          const %s_vw x = *(const %s_vw *)(pr + c);\n"
          "          const %s_vi gt = x > vmx;\n"
          "          vmx = (%s_vw)(((%s_vi)x & gt) | ((%s_vi)vmx & ~gt));\n"
          "        }\n"
          "        const float mx = %s_lanes_max(vmx);\n"
          "        const float alpha = %s_exp(m[r] - mx);\n"
          "        for (int c = 0; c < nv; c++) pr[c] = %s_exp(pr[c] - mx);\n"
          "        %s_vw vsum = {0};\n"
          "        for (int c = 0; c < nv; c += %s_W) vsum += *(const %s_vw *)(pr + c);\n"
          "        const float sum = %s_lanes_sum(vsum);\n"
          "        for (int c = nv; c < BT; c++) pr[c] = 0.0f;\n"
          "        m[r] = mx;\n"
          "        l[r] = l[r] * alpha + sum;\n"
          "        for (int d = 0; d < DP; d++) acc[r][d] *= alpha;\n"
          "      }\n"
          "      %s_mm_nn(nq, DP, nk, &p[0][0], BT, &vt[0][0], DP, &acc[0][0], DP, 1, diag ? 3 : 0);\n"
          "    }\n"
          "    for (int r = 0; r < nq; r++) {\n"
          "      const long long i = i0 + r;\n"
          "      const float inv = 1.0f / l[r];\n"
          "      #pragma omp simd /* independent columns: -O2 alone would not vectorize (the pointers may alias) */\n"
          "      for (int d = 0; d < D; d++) {\n",
          ld(a, sizeof a, fn, "q", &s->q, "i0 + r", "d"), ld(b, sizeof b, fn, "k", &s->k, "j0 + c", "d"),
          ld(c, sizeof c, fn, "v", &s->v, "j0 + c", "d"), fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn, fn,
          fn, fn, fn, fn, fn, fn);
  st(f, "        ", fn, "o", &s->o, "i", "d", "acc[r][d] * inv");
  fprintf(f, "      }\n");
  st(f, "      ", fn, "lse", &s->lse, "i", NULL, "m[r] + logf(l[r])");
  fprintf(f, "    }\n  }\n}\n");
}

/* ---- backward -------------------------------------------------------------- */

/* One task's loads: q and do of the whole head as zero-padded f32 rows,
 * Di = do_i . o_i and lse_i. */
static void emit_bwd_head_loads(FILE *f, const char *fn, const tg_flash_shape *s) {
  char a[512], b[512], c[512], d[512];
  fprintf(f,
          "    memset(dqa, 0, sizeof(float) * T * DP);\n"
          "    for (long long i = 0; i < T; i++) {\n"
          "      float dsum = 0.0f;\n"
          "      #pragma omp simd /* independent columns: -O2 alone would not vectorize (the pointers may alias) */\n"
          "      for (int d = 0; d < D; d++) {\n"
          "        qs[i * DP + d] = %s;\n"
          "        dos[i * DP + d] = %s;\n"
          "      }\n"
          "      for (int d = D; d < DP; d++) qs[i * DP + d] = dos[i * DP + d] = 0.0f;\n"
          "      #pragma omp simd reduction(+: dsum) /* in lanes: not a chain of D dependent adds */\n"
          "      for (int d = 0; d < D; d++) dsum += dos[i * DP + d] * %s;\n"
          "      di[i] = dsum;\n"
          "      li[i] = %s;\n"
          "    }\n",
          ld(a, sizeof a, fn, "q", &s->q, "i", "d"), ld(b, sizeof b, fn, "dout", &s->dout, "i", "d"),
          ld(c, sizeof c, fn, "o", &s->o, "i", "d"), ld(d, sizeof d, fn, "lse", &s->lse, "i", NULL));
}

/* One key tile against every query tile at or below it: P and dS of each
 * pair of tiles, then dv += P^T do, dk += dS^T q and dq += dS k. */
static void emit_bwd_key_tile(FILE *f, const char *fn, const tg_flash_shape *s) {
  char a[512], b[512];
  fprintf(f,
          "    for (long long j0 = 0; j0 < T; j0 += BT) {\n"
          "      const int nk = T - j0 < BT ? (int)(T - j0) : BT;\n"
          /* the tile's k and v rows (zeros past the last key and past D),
           * copied row by row with no test in the loop that loads them, then
           * transposed from the copies (in L1) */
          "      for (int c = 0; c < BT; c++) {\n"
          "        float *kc = kr + c * DP, *vc = vr + c * DP;\n"
          "        if (c < nk) {\n"
          "          #pragma omp simd /* independent columns: -O2 alone would not vectorize (the pointers may alias) */\n"
          "          for (int d = 0; d < D; d++) {\n"
          "            kc[d] = %s;\n"
          "            vc[d] = %s;\n"
          "          }\n"
          "        }\n"
          "        for (int d = c < nk ? D : 0; d < DP; d++) kc[d] = vc[d] = 0.0f;\n"
          "      }\n"
          "      %s_transpose(kr, DP, kt, BT, BT, DP);\n"
          "      %s_transpose(vr, DP, vt, BT, BT, DP);\n"
          "      memset(dka, 0, sizeof(float) * BT * DP);\n"
          "      memset(dva, 0, sizeof(float) * BT * DP);\n"
          "      for (long long i0 = j0; i0 < T; i0 += BT) {\n"
          "        const int nq = T - i0 < BT ? (int)(T - i0) : BT;\n"
          "        const int diag = i0 == j0; /* the diagonal tile: key c <= query row r */\n"
          "        %s_mm_nn(nq, BT, DP, qs + i0 * DP, DP, kt, BT, p, BT, 0, diag);\n"
          "        %s_mm_nn(nq, BT, DP, dos + i0 * DP, DP, vt, BT, ds, BT, 0, diag);\n"
          "        for (int r = 0; r < nq; r++) {\n"
          "          const long long i = i0 + r;\n"
          "          const int nc = i - j0 + 1 < nk ? (int)(i - j0 + 1) : nk; /* keys j <= i */\n"
          "          const int nv = (nc + 15) / 16 * 16; /* whole vectors, as the forward's */\n"
          "          float *pr = p + r * BT, *dr = ds + r * BT;\n"
          "          const float lse_i = li[i], d_i = di[i];\n"
          "#pragma omp simd\n"
          "          for (int c = 0; c < nv; c++) {\n"
          "            const float e = %s_exp(c < nc ? scale * pr[c] - lse_i : -__builtin_inff());\n"
          "            pr[c] = e;\n"
          "            dr[c] = c < nc ? e * (dr[c] - d_i) : 0.0f; /* a masked key's dS: 0, whatever do v^T held */\n"
          "          }\n"
          "          for (int c = nv; c < BT; c++) pr[c] = dr[c] = 0.0f;\n"
          "        }\n"
          "        %s_mm_tn(nk, DP, nq, p, BT, dos + i0 * DP, DP, dva, DP, 1, diag ? 2 : 0);\n"
          "        %s_mm_tn(nk, DP, nq, ds, BT, qs + i0 * DP, DP, dka, DP, 1, diag ? 2 : 0);\n"
          "        %s_mm_nn(nq, DP, nk, ds, BT, kr, DP, dqa + i0 * DP, DP, 1, diag ? 3 : 0);\n"
          "      }\n"
          "      for (int c = 0; c < nk; c++) {\n"
          "        #pragma omp simd /* independent columns: -O2 alone would not vectorize (the pointers may alias) */\n"
          "        for (int d = 0; d < D; d++) {\n",
          ld(a, sizeof a, fn, "k", &s->k, "j0 + c", "d"), ld(b, sizeof b, fn, "v", &s->v, "j0 + c", "d"), fn,
          fn, fn, fn, fn, fn, fn, fn);
  st(f, "          ", fn, "dk", &s->dk, "j0 + c", "d", "scale * dka[c * DP + d]");
  st(f, "          ", fn, "dv", &s->dv, "j0 + c", "d", "dva[c * DP + d]");
  fprintf(f, "        }\n      }\n    }\n");
}

void tg_flash_emit_c_bwd(FILE *f, const char *fn, const tg_flash_shape *s) {
  fprintf(f,
          "/* flash attention backward (tg codegen/c/flash_c.c): nb=%" PRId64 " nh=%" PRId64
          " T=%" PRId64 " D=%" PRId64 ".\n"
          " * With P = exp(scale q k^T - lse) (causal) recomputed and Di = do_i . o_i:\n"
          " * dS = P .* (do v^T - Di), dq = scale dS k, dk = scale dS^T q, dv = P^T do.\n"
          " * One task a (batch, head): it alone writes that head's dq, dk and dv, so the\n"
          " * five products of each pair of tiles are done once and nothing is shared. */\n",
          s->nb, s->nh, s->T, s->D);
  if (refuse(f, fn, s)) return;
  const tg_flash_operand *ops[] = {&s->q, &s->k, &s->v, &s->o, &s->lse, &s->dout, &s->dq, &s->dk, &s->dv};
  emit_helpers(f, fn, ops, 9);
  emit_exp(f, fn);
  emit_tile_products(f, fn, true);
  fprintf(f,
          "#include <stdio.h>\n"
          "#include <stdlib.h>\n"
          "#include <string.h>\n"
          "void %s(const %s *q, const %s *k, const %s *v, const %s *o, const %s *lse, const %s *dout,\n"
          "        %s *dq, %s *dk, %s *dv) {\n",
          fn, ptype(&s->q), ptype(&s->k), ptype(&s->v), ptype(&s->o), ptype(&s->lse), ptype(&s->dout),
          ptype(&s->dq), ptype(&s->dk), ptype(&s->dv));
  emit_consts(f, s);
  fprintf(f,
          "  /* each thread's scratch: the head's q, do and dq rows, Di and lse, and the\n"
          "   * tiles (on the heap: a head of T rows does not fit a thread's stack) */\n"
          "  enum { SCRATCH = 3 * T * DP + 2 * T + 4 * DP * BT + 2 * BT * BT + 2 * BT * DP };\n"
          "#pragma omp parallel\n"
          "  {\n"
          "    float *w = malloc(sizeof(float) * SCRATCH);\n"
          "    if (!w) {\n"
          "      fprintf(stderr, \"tg: out of memory for flash attention's scratch (%%zu bytes a thread)\\n\",\n"
          "              sizeof(float) * SCRATCH);\n"
          "      abort();\n"
          "    }\n"
          "    float *qs = w, *dos = qs + T * DP, *dqa = dos + T * DP, *di = dqa + T * DP, *li = di + T;\n"
          "    float *kt = li + T, *vt = kt + DP * BT, *kr = vt + DP * BT, *p = kr + BT * DP, *ds = p + BT * BT;\n"
          "    float *dka = ds + BT * BT, *dva = dka + BT * DP, *vr = dva + BT * DP;\n"
          "#pragma omp for schedule(dynamic, 1)\n"
          "  for (long long bh = 0; bh < (long long)NB * NH; bh++) {\n"
          "    const long long b = bh / NH, h = bh %% NH;\n");
  const char *in[] = {"q", "k", "v", "o", "lse", "dout"};
  const tg_flash_operand *io[] = {&s->q, &s->k, &s->v, &s->o, &s->lse, &s->dout};
  for (int i = 0; i < 6; i++) head_ptr(f, "const ", in[i], io[i]);
  head_ptr(f, "", "dq", &s->dq);
  head_ptr(f, "", "dk", &s->dk);
  head_ptr(f, "", "dv", &s->dv);
  emit_bwd_head_loads(f, fn, s);
  emit_bwd_key_tile(f, fn, s);
  fprintf(f, "    for (long long i = 0; i < T; i++) {\n"
             "      #pragma omp simd /* independent columns: -O2 alone would not vectorize (the pointers may alias) */\n"
             "      for (int d = 0; d < D; d++) {\n");
  st(f, "        ", fn, "dq", &s->dq, "i", "d", "scale * dqa[i * DP + d]");
  fprintf(f, "      }\n    }\n  }\n    free(w);\n  }\n}\n");
}
