/* test_cuda_emu_blaslt.c: the emulated cuBLASLt (runtime/cuda/emu/emu_blaslt.c)
 * against a naive loop written here from cuBLASLt's definitions.
 *
 * Every epilogue the emulator has (DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX,
 * GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADA, BGRADB) with every type
 * combination cuBLASLt takes (F32; BF16 and F16 in, their own type or F32
 * out; the FAST_TF32 and FAST_16BF compute types), column-major, row-major
 * and mixed orders, all four transposes, one product or a strided batch of
 * three, beta 0 or not, C apart from D or the same memory.  The naive loop
 * sums in double; GELU's derivative is taken by central differences, so the
 * emulator's formula is checked, not copied.  BGRADA with a transposed A
 * and BGRADB with a non-transposed B are left out: cuBLASLt has no
 * algorithm for them, and test_refusals_say_why checks the emulator says so.
 *
 * Tolerance: the operands are multiples of 1/8 up to 4, so every product
 * (a multiple of 1/64 up to 16) and every partial sum over k = 6 is exact
 * in f32 as in double: the emulator's f32 accumulator with fused
 * multiply-adds gives the exact sum here, as the loop does, alpha (0.75),
 * beta (0.5) and the bias keep it exact, and the two differ only in the
 * final rounding to D's type (half an ulp: 2^-24 for F32, 2^-9 for BF16,
 * 2^-11 for F16, of the value) and GELU (in double on both sides from the
 * same value), plus the finite difference's error (~1e-8) for DGELU; each
 * element must be within 2 ulps of D's type of max(|want|, 1e-3).  Bias
 * gradients are f32 sums over n = 7 (DGELU_BGRAD, of rounded GELU
 * values) or k = 6 (BGRADA/B, exact) terms: within 2 ulps of their sum of
 * magnitudes plus the f32 sum's bound, 7 u of it (measured: all pass at 2
 * ulps, the bound is not needed in practice but is what may be claimed).
 * That the accumulator is f32 and fused is checked apart, with sums that
 * tell f32 from double and fused from unfused
 * (test_accumulates_in_f32_with_fma).  A wrong transpose, order, stride or
 * epilogue is off by O(1).
 *
 * Also: what the emulator refuses (NOT_SUPPORTED, with the reason), an
 * operand reaching past its allocation (named, and the context's error
 * sticky), the heuristic, and a matmul captured into a graph with alpha
 * and beta taken by value. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_api.h"

static tg_cuda_api api;
static CUcontext ctx;
static cublasLtHandle_t lt;

#define CK(call)                                                                                                    \
  do {                                                                                                              \
    CUresult r_ = (call);                                                                                           \
    ck_assert_msg(r_ == CUDA_SUCCESS, "%s: %d: %s", #call, r_, api.emu_last_error());                               \
  } while (0)
#define LT(call)                                                                                                    \
  do {                                                                                                              \
    cublasStatus_t s_ = (call);                                                                                     \
    ck_assert_msg(s_ == CUBLAS_STATUS_SUCCESS, "%s: %s: %s", #call, api.cublasLtGetStatusString(s_),               \
                  api.emu_last_error());                                                                            \
  } while (0)

static void setup(void) {
  tg_cuda_api_emulated(&api);
  CK(api.cuInit(0));
  CK(api.cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(api.cuCtxSetCurrent(ctx));
  LT(api.cublasLtCreate(&lt));
}

static void teardown(void) {
  api.cublasLtDestroy(lt);
  api.cuDevicePrimaryCtxRelease(0);
}

/* ---- element types ------------------------------------------------------------------ */

static size_t tsize(int t) { return t == CUDA_R_32F ? 4 : 2; }

static double half_value(uint16_t h) {
  int e = (h >> 10) & 31, man = h & 1023;
  double v = e == 31 ? (man ? NAN : INFINITY) : e ? ldexp(1024 + man, e - 25) : ldexp(man, -24);
  return h & 0x8000 ? -v : v;
}

static double get(int t, const void *base, int64_t i) {
  if (t == CUDA_R_32F) return ((const float *)base)[i];
  uint16_t h = ((const uint16_t *)base)[i];
  if (t == CUDA_R_16F) return half_value(h);
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Values exact in every type: multiples of 1/8 up to 4 in magnitude. */
static uint64_t rng = 0x2545f4914f6cdd1dull;
static double small(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)((int)(rng >> 40) % 65 - 32) / 8.0;
}

static void put(int t, void *base, int64_t i, double x) {
  if (t == CUDA_R_32F) {
    ((float *)base)[i] = (float)x;
    return;
  }
  /* x is 0 or a multiple of 1/8 of magnitude 1/8 to 4: exact in both */
  uint16_t h = 0;
  if (t == CUDA_R_16BF) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    h = (uint16_t)(u >> 16);
  } else if (x != 0) {
    int e = ilogb(fabs(x));
    h = (uint16_t)((x < 0 ? 0x8000 : 0) | (e + 15) << 10 | (int)((ldexp(fabs(x), -e) - 1) * 1024));
  }
  ck_assert_msg(get(t, &h, 0) == x, "%g is not exact in type %d", x, t);
  ((uint16_t *)base)[i] = h;
}

/* ---- the naive reference ---------------------------------------------------------------- */

typedef struct mat {
  int type, order;
  int64_t rows, cols, ld, batch, stride;
} mat;

static int64_t idx(const mat *m, int64_t b, int64_t r, int64_t c) {
  return b * m->stride + (m->order == CUBLASLT_ORDER_COL ? c * m->ld + r : r * m->ld + c);
}

static int64_t elements(const mat *m) {
  return (m->batch - 1) * m->stride + (m->order == CUBLASLT_ORDER_COL ? (m->cols - 1) * m->ld + m->rows
                                                                      : (m->rows - 1) * m->ld + m->cols);
}

static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad(double x) { return (gelu(x + 1e-5) - gelu(x - 1e-5)) / 2e-5; }

typedef struct problem {
  int compute, ta, tb;
  uint32_t epi;
  mat a, b, c, d;
  int bias_type;   /* -1: D's */
  bool in_place;   /* C is D */
  float alpha, beta;
  int64_t aux_ld, aux_stride, bias_stride;
} problem;

static bool has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
static bool has_gelu(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
static bool aux_out(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
static bool aux_in(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }

/* ulp of type t near |x| (at least 1e-3) */
static double ulp(int t, double x) {
  double m = fmax(fabs(x), 1e-3);
  int bits = t == CUDA_R_32F ? 24 : t == CUDA_R_16F ? 11 : 8;
  return ldexp(1.0, ilogb(m) - bits + 1);
}

/* Runs problem P through the emulator and checks it against the loop. */
static void check(const problem *P, const char *what) {
  const int64_t m = P->d.rows, n = P->d.cols, k = P->ta == CUBLAS_OP_N ? P->a.cols : P->a.rows;
  const int nb = (int)P->d.batch;
  const int bt = P->bias_type >= 0 ? P->bias_type : P->d.type;
  /* host operands */
  size_t na = (size_t)elements(&P->a), nbb = (size_t)elements(&P->b), nc = (size_t)elements(&P->c),
         nd = (size_t)elements(&P->d);
  void *ha = calloc(na, 4), *hb = calloc(nbb, 4), *hc = calloc(nc, 4), *hd = calloc(nd, 4);
  int64_t naux = P->aux_stride * (nb - 1) + (n - 1) * P->aux_ld + m, nbias = P->bias_stride * (nb - 1) + (m > n ? m : n);
  void *haux = calloc((size_t)naux, 4), *hbias = calloc((size_t)nbias, 4);
  for (size_t i = 0; i < na; i++) put(P->a.type, ha, (int64_t)i, small());
  for (size_t i = 0; i < nbb; i++) put(P->b.type, hb, (int64_t)i, small());
  for (size_t i = 0; i < nc; i++) put(P->c.type, hc, (int64_t)i, small());
  for (int64_t i = 0; i < naux; i++) put(P->d.type, haux, i, small() / 4);
  for (int64_t i = 0; i < nbias; i++) put(bt, hbias, i, small());
  /* device */
  CUdeviceptr da, db, dc, dd, daux, dbias;
  CK(api.cuMemAlloc(&da, na * tsize(P->a.type)));
  CK(api.cuMemAlloc(&db, nbb * tsize(P->b.type)));
  CK(api.cuMemAlloc(&dd, nd * tsize(P->d.type)));
  CK(api.cuMemAlloc(&daux, (size_t)naux * tsize(P->d.type)));
  CK(api.cuMemAlloc(&dbias, (size_t)nbias * tsize(bt)));
  CK(api.cuMemcpyHtoD(da, ha, na * tsize(P->a.type)));
  CK(api.cuMemcpyHtoD(db, hb, nbb * tsize(P->b.type)));
  CK(api.cuMemcpyHtoD(daux, haux, (size_t)naux * tsize(P->d.type)));
  CK(api.cuMemcpyHtoD(dbias, hbias, (size_t)nbias * tsize(bt)));
  if (P->in_place) {
    dc = dd;
    CK(api.cuMemcpyHtoD(dd, hc, nc * tsize(P->c.type)));
  } else {
    CK(api.cuMemAlloc(&dc, nc * tsize(P->c.type)));
    CK(api.cuMemcpyHtoD(dc, hc, nc * tsize(P->c.type)));
  }
  /* descriptors */
  cublasLtMatmulDesc_t op;
  LT(api.cublasLtMatmulDescCreate(&op, P->compute, CUDA_R_32F));
  int32_t ta = P->ta, tb = P->tb;
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4));
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4));
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &P->epi, 4));
  void *bias_ptr = (void *)(uintptr_t)dbias, *aux_ptr = (void *)(uintptr_t)daux;
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr));
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &P->bias_stride, 8));
  if (P->bias_type >= 0) LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &P->bias_type, 4));
  if (aux_in(P->epi) || aux_out(P->epi)) {
    LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr, sizeof aux_ptr));
    LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &P->aux_ld, 8));
    LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &P->aux_stride, 8));
  }
  const mat *ms[4] = {&P->a, &P->b, &P->c, &P->d};
  cublasLtMatrixLayout_t L[4];
  for (int i = 0; i < 4; i++) {
    LT(api.cublasLtMatrixLayoutCreate(&L[i], ms[i]->type, (uint64_t)ms[i]->rows, (uint64_t)ms[i]->cols, ms[i]->ld));
    int32_t order = ms[i]->order, batch = (int32_t)ms[i]->batch;
    LT(api.cublasLtMatrixLayoutSetAttribute(L[i], CUBLASLT_MATRIX_LAYOUT_ORDER, &order, 4));
    LT(api.cublasLtMatrixLayoutSetAttribute(L[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, 4));
    LT(api.cublasLtMatrixLayoutSetAttribute(L[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &ms[i]->stride, 8));
  }
  cublasLtMatmulPreference_t pref;
  LT(api.cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = 0;
  LT(api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, 8));
  cublasLtMatmulHeuristicResult_t heur;
  int returned = 0;
  LT(api.cublasLtMatmulAlgoGetHeuristic(lt, op, L[0], L[1], L[2], L[3], pref, 1, &heur, &returned));
  ck_assert_int_eq(returned, 1);
  ck_assert_uint_eq(heur.workspaceSize, 0);
  LT(api.cublasLtMatmul(lt, op, &P->alpha, (void *)(uintptr_t)da, L[0], (void *)(uintptr_t)db, L[1], &P->beta,
                        (void *)(uintptr_t)dc, L[2], (void *)(uintptr_t)dd, L[3], &heur.algo, NULL, 0, NULL));
  void *gd = calloc(nd, 4), *gaux = calloc((size_t)naux, 4), *gbias = calloc((size_t)nbias, 4);
  CK(api.cuMemcpyDtoH(gd, dd, nd * tsize(P->d.type)));
  CK(api.cuMemcpyDtoH(gaux, daux, (size_t)naux * tsize(P->d.type)));
  CK(api.cuMemcpyDtoH(gbias, dbias, (size_t)nbias * tsize(bt)));
  /* the loop */
  for (int b = 0; b < nb; b++) {
    double *rowsum = calloc((size_t)m, sizeof(double)), *rowmag = calloc((size_t)m, sizeof(double));
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t p = 0; p < k; p++) {
          double x = get(P->a.type, ha, P->ta == CUBLAS_OP_N ? idx(&P->a, b, i, p) : idx(&P->a, b, p, i));
          double y = get(P->b.type, hb, P->tb == CUBLAS_OP_N ? idx(&P->b, b, p, j) : idx(&P->b, b, j, p));
          acc += x * y;
        }
        double v = P->alpha * acc;
        if (P->beta != 0) v += P->beta * get(P->c.type, hc, idx(&P->c, b, i, j));
        if (has_bias(P->epi)) v += get(bt, hbias, b * P->bias_stride + i);
        int64_t ai = b * P->aux_stride + j * P->aux_ld + i;
        if (aux_out(P->epi)) {
          double got = get(P->d.type, gaux, ai);
          ck_assert_msg(fabs(got - v) <= 2 * ulp(P->d.type, v), "%s: aux(%d; %lld, %lld) %g, want %g", what, b,
                        (long long)i, (long long)j, got, v);
        }
        if (has_gelu(P->epi)) v = gelu(v);
        if (aux_in(P->epi)) v *= gelu_grad(get(P->d.type, haux, ai));
        rowsum[i] += v, rowmag[i] += fabs(v);
        double got = get(P->d.type, gd, idx(&P->d, b, i, j));
        ck_assert_msg(fabs(got - v) <= 2 * ulp(P->d.type, v) + 1e-8 * fabs(v), "%s: D(%d; %lld, %lld) %g, want %g",
                      what, b, (long long)i, (long long)j, got, v);
      }
    if (P->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      for (int64_t i = 0; i < m; i++) {
        double got = get(bt, gbias, b * P->bias_stride + i);
        ck_assert_msg(fabs(got - rowsum[i]) <= 2 * ulp(bt, rowmag[i]) + 7 * ldexp(rowmag[i], -24),
                      "%s: bias gradient %lld: %g, want %g", what,
                      (long long)i, got, rowsum[i]);
      }
    if (P->epi == CUBLASLT_EPILOGUE_BGRADA || P->epi == CUBLASLT_EPILOGUE_BGRADB) {
      bool a = P->epi == CUBLASLT_EPILOGUE_BGRADA;
      for (int64_t i = 0; i < (a ? m : n); i++) {
        double sum = 0, mag = 0;
        for (int64_t p = 0; p < k; p++) {
          double x = a ? get(P->a.type, ha, P->ta == CUBLAS_OP_N ? idx(&P->a, b, i, p) : idx(&P->a, b, p, i))
                       : get(P->b.type, hb, P->tb == CUBLAS_OP_N ? idx(&P->b, b, p, i) : idx(&P->b, b, i, p));
          sum += x, mag += fabs(x);
        }
        double got = get(bt, gbias, b * P->bias_stride + i);
        ck_assert_msg(fabs(got - sum) <= 2 * ulp(bt, mag), "%s: %s %lld: %g, want %g", what, a ? "BGRADA" : "BGRADB",
                      (long long)i, got, sum);
      }
    }
    free(rowsum), free(rowmag);
  }
  for (int i = 0; i < 4; i++) LT(api.cublasLtMatrixLayoutDestroy(L[i]));
  LT(api.cublasLtMatmulDescDestroy(op));
  LT(api.cublasLtMatmulPreferenceDestroy(pref));
  CUdeviceptr all[] = {da, db, dd, daux, dbias};
  for (int i = 0; i < 5; i++) CK(api.cuMemFree(all[i]));
  if (!P->in_place) CK(api.cuMemFree(dc));
  free(ha), free(hb), free(hc), free(hd), free(haux), free(hbias), free(gd), free(gaux), free(gbias);
}

/* A matrix of r x c in the given order, with a padded leading dimension
 * and, for batches, a stride past the end of the matrix. */
static mat layout(int type, int order, int64_t r, int64_t c, int64_t batch) {
  int64_t ld = (order == CUBLASLT_ORDER_COL ? r : c) + 3;
  int64_t size = (order == CUBLASLT_ORDER_COL ? c : r) * ld;
  return (mat){type, order, r, c, ld, batch, batch > 1 ? size + 5 : 0};
}

START_TEST(test_every_combination_against_the_loop) {
  static const uint32_t epis[] = {CUBLASLT_EPILOGUE_DEFAULT,    CUBLASLT_EPILOGUE_BIAS,          CUBLASLT_EPILOGUE_GELU,
                                  CUBLASLT_EPILOGUE_GELU_BIAS,  CUBLASLT_EPILOGUE_GELU_AUX,      CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                  CUBLASLT_EPILOGUE_DGELU,      CUBLASLT_EPILOGUE_DGELU_BGRAD,   CUBLASLT_EPILOGUE_BGRADA,
                                  CUBLASLT_EPILOGUE_BGRADB};
  static const struct {
    int compute, ab, cd, bias;
  } types[] = {
      {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, -1},
      {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF, -1},
      {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F},
      {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_32F, -1},
      {CUBLAS_COMPUTE_32F, CUDA_R_16F, CUDA_R_16F, -1},
      {CUBLAS_COMPUTE_32F, CUDA_R_16F, CUDA_R_32F, -1},
      {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F, -1},
      {CUBLAS_COMPUTE_32F_FAST_16BF, CUDA_R_32F, CUDA_R_32F, -1},
  };
  static const int orders[][2] = {{CUBLASLT_ORDER_COL, CUBLASLT_ORDER_COL},
                                  {CUBLASLT_ORDER_ROW, CUBLASLT_ORDER_ROW},
                                  {CUBLASLT_ORDER_ROW, CUBLASLT_ORDER_COL}}; /* A and B's order, C and D's */
  int runs = 0;
  for (size_t e = 0; e < sizeof epis / sizeof *epis; e++)
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
      for (size_t o = 0; o < sizeof orders / sizeof *orders; o++)
        for (int tr = 0; tr < 4; tr++) {
          const int m = 5, n = 7, k = 6, nb = (tr + (int)o) % 2 ? 3 : 1;
          problem P = {.compute = types[t].compute, .ta = tr & 1, .tb = tr >> 1, .epi = epis[e],
                       .bias_type = types[t].bias, .alpha = 0.75f};
          int oab = orders[o][0], ocd = orders[o][1];
          /* the aux matrix is column-major: aux epilogues want a column-major D */
          if ((aux_in(P.epi) || aux_out(P.epi)) && ocd != CUBLASLT_ORDER_COL) continue;
          /* BGRADA wants A as it is, BGRADB B transposed (test_refusals_say_why) */
          if ((P.epi == CUBLASLT_EPILOGUE_BGRADA && P.ta) || (P.epi == CUBLASLT_EPILOGUE_BGRADB && !P.tb)) continue;
          P.a = P.ta ? layout(types[t].ab, oab, k, m, nb) : layout(types[t].ab, oab, m, k, nb);
          P.b = P.tb ? layout(types[t].ab, oab, n, k, nb) : layout(types[t].ab, oab, k, n, nb);
          P.d = layout(types[t].cd, ocd, m, n, nb);
          P.c = P.d;
          P.beta = (e + t + tr) % 3 ? 0.5f : 0.0f;
          P.in_place = (e + o + tr) % 4 == 0;
          P.aux_ld = 8, P.aux_stride = nb > 1 ? 64 : 0, P.bias_stride = nb > 1 ? 9 : 0;
          char what[160];
          snprintf(what, sizeof what, "epilogue %u, compute %d, types %d/%d, orders %d/%d, trans %d%d, batch %d, beta %g%s",
                   P.epi, P.compute, types[t].ab, types[t].cd, oab, ocd, P.ta, P.tb, nb, (double)P.beta,
                   P.in_place ? ", in place" : "");
          check(&P, what);
          runs++;
        }
  printf("%d matmuls checked against the loop\n", runs);
  ck_assert_int_ge(runs, 700);
}
END_TEST

/* ---- refusals and faults --------------------------------------------------------------------- */

static cublasLtMatrixLayout_t make_layout(int type, uint64_t r, uint64_t c, int64_t ld) {
  cublasLtMatrixLayout_t l;
  LT(api.cublasLtMatrixLayoutCreate(&l, type, r, c, ld));
  return l;
}

START_TEST(test_refusals_say_why) {
  cublasLtMatmulDesc_t op;
  ck_assert_int_eq(api.cublasLtMatmulDescCreate(&op, (cublasComputeType_t)64, CUDA_R_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  ck_assert_msg(strstr(api.emu_last_error(), "compute type 64"), "%s", api.emu_last_error());
  LT(api.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  uint32_t relu = 2;
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, 4));
  int64_t wrong_size = 0;
  ck_assert_int_eq(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &wrong_size, 8),
                   CUBLAS_STATUS_INVALID_VALUE);
  ck_assert_int_eq(api.cublasLtMatmulDescSetAttribute(op, (cublasLtMatmulDescAttributes_t)22, &relu, 4),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayout_t a = make_layout(CUDA_R_32F, 4, 4, 4), b = make_layout(CUDA_R_16BF, 4, 4, 4),
                         c = make_layout(CUDA_R_32F, 4, 4, 4);
  cublasLtMatmulPreference_t pref;
  LT(api.cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t h;
  int n = -1;
  /* the unknown epilogue */
  ck_assert_int_eq(api.cublasLtMatmulAlgoGetHeuristic(lt, op, a, a, c, c, pref, 1, &h, &n), CUBLAS_STATUS_NOT_SUPPORTED);
  ck_assert_int_eq(n, 0);
  ck_assert_msg(strstr(api.emu_last_error(), "epilogue 2"), "%s", api.emu_last_error());
  uint32_t def = CUBLASLT_EPILOGUE_DEFAULT;
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &def, 4));
  /* A in F32 and B in BF16: no such kernel */
  ck_assert_int_eq(api.cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &h, &n), CUBLAS_STATUS_NOT_SUPPORTED);
  ck_assert_msg(strstr(api.emu_last_error(), "types A CUDA_R_32F, B CUDA_R_16BF"), "%s", api.emu_last_error());
  /* shapes that do not agree */
  cublasLtMatrixLayout_t wide = make_layout(CUDA_R_32F, 4, 5, 4);
  ck_assert_int_eq(api.cublasLtMatmulAlgoGetHeuristic(lt, op, wide, a, c, c, pref, 1, &h, &n), CUBLAS_STATUS_INVALID_VALUE);
  /* a leading dimension too small */
  cublasLtMatrixLayout_t thin = make_layout(CUDA_R_32F, 4, 4, 3);
  ck_assert_int_eq(api.cublasLtMatmulAlgoGetHeuristic(lt, op, thin, a, c, c, pref, 1, &h, &n), CUBLAS_STATUS_INVALID_VALUE);
  ck_assert_msg(strstr(api.emu_last_error(), "leading dimension 3"), "%s", api.emu_last_error());
  /* aux epilogues with a row-major D */
  uint32_t gelu_aux = CUBLASLT_EPILOGUE_GELU_AUX;
  int32_t row = CUBLASLT_ORDER_ROW;
  int64_t aux_ld = 8;
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu_aux, 4));
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, 8));
  cublasLtMatrixLayout_t rd = make_layout(CUDA_R_32F, 4, 4, 4);
  LT(api.cublasLtMatrixLayoutSetAttribute(rd, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, 4));
  ck_assert_int_eq(api.cublasLtMatmulAlgoGetHeuristic(lt, op, a, a, rd, rd, pref, 1, &h, &n), CUBLAS_STATUS_NOT_SUPPORTED);
  ck_assert_msg(strstr(api.emu_last_error(), "row-major D"), "%s", api.emu_last_error());
  /* the bias-gradient epilogues with a transposition cuBLASLt lacks: no
   * algorithm (and with the one it has, one) */
  uint32_t bgrad[2] = {CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB};
  int32_t trans[2] = {CUBLAS_OP_N, CUBLAS_OP_T};
  int64_t no_aux_ld = 0;
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &no_aux_ld, 8));
  for (int e = 0; e < 2; e++)
    for (int t = 0; t < 2; t++) {
      LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &bgrad[e], 4));
      LT(api.cublasLtMatmulDescSetAttribute(op, e == 0 ? CUBLASLT_MATMUL_DESC_TRANSA : CUBLASLT_MATMUL_DESC_TRANSB,
                                            &trans[t], 4));
      bool has = e == 0 ? t == 0 : t == 1;
      n = -1;
      ck_assert_int_eq(api.cublasLtMatmulAlgoGetHeuristic(lt, op, a, a, c, c, pref, 1, &h, &n),
                       has ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED);
      ck_assert_int_eq(n, has ? 1 : 0);
      if (!has)
        ck_assert_msg(strstr(api.emu_last_error(), e == 0 ? "non-transposed A" : "transposed B"), "%s",
                      api.emu_last_error());
      LT(api.cublasLtMatmulDescSetAttribute(op, e == 0 ? CUBLASLT_MATMUL_DESC_TRANSA : CUBLASLT_MATMUL_DESC_TRANSB,
                                            &trans[0], 4));
    }
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &def, 4));
  /* pointer mode device */
  int32_t device = 1;
  LT(api.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device, 4));
  ck_assert_int_eq(api.cublasLtMatmulAlgoGetHeuristic(lt, op, a, a, c, c, pref, 1, &h, &n), CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayout_t ls[] = {a, b, c, wide, thin, rd};
  for (int i = 0; i < 6; i++) LT(api.cublasLtMatrixLayoutDestroy(ls[i]));
  LT(api.cublasLtMatmulDescDestroy(op));
  LT(api.cublasLtMatmulPreferenceDestroy(pref));
}
END_TEST

START_TEST(test_operand_past_its_allocation) {
  cublasLtMatmulDesc_t op;
  LT(api.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  /* B is 16 x 16 with 3 batches, its allocation holds two */
  cublasLtMatrixLayout_t l = make_layout(CUDA_R_32F, 16, 16, 16);
  int32_t batch = 3;
  int64_t stride = 256;
  LT(api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, 4));
  LT(api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, 8));
  CUdeviceptr a, b, d;
  CK(api.cuMemAlloc(&a, 3 * 256 * 4));
  CK(api.cuMemAlloc(&b, 2 * 256 * 4));
  CK(api.cuMemAlloc(&d, 3 * 256 * 4));
  float alpha = 1, beta = 0;
  cublasStatus_t s = api.cublasLtMatmul(lt, op, &alpha, (void *)(uintptr_t)a, l, (void *)(uintptr_t)b, l, &beta,
                                        (void *)(uintptr_t)d, l, (void *)(uintptr_t)d, l, NULL, NULL, 0, NULL);
  ck_assert_int_eq(s, CUBLAS_STATUS_EXECUTION_FAILED);
  printf("expected failure: %s\n", api.emu_last_error());
  ck_assert_msg(strstr(api.emu_last_error(), "operand B (batch 2 of 3)") && strstr(api.emu_last_error(), "past the end"),
                "%s", api.emu_last_error());
  /* as a faulting kernel would, it spoils the context */
  ck_assert_int_eq(api.cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  LT(api.cublasLtMatrixLayoutDestroy(l));
  LT(api.cublasLtMatmulDescDestroy(op));
}
END_TEST

/* The accumulator is f32 with fused multiply-adds, k in order, as the
 * emulator says (emu_blaslt.c): two 1 x 1 products over k = 3 and k = 2
 * whose exact sums (what a double accumulator gives) differ from it.
 * - 1 + 2^-24 + 2^-24: each f32 addition rounds 1 + 2^-24 back to 1 (a tie,
 *   to even), so the f32 sum is 1; in double it is 1 + 2^-23.
 * - -1 (1 + 2^-22) + (1 + 2^-23)^2: the product (1 + 2^-23)^2 = 1 + 2^-22 +
 *   2^-46 is not an f32; fused into the running sum -(1 + 2^-22) it leaves
 *   2^-46, while a product rounded to f32 first (no FMA) gives 0. */
START_TEST(test_accumulates_in_f32_with_fma) {
  cublasLtMatmulDesc_t op;
  LT(api.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const float e23 = ldexpf(1, -23), e22 = ldexpf(1, -22), e24 = ldexpf(1, -24);
  const float cases[2][2][3] = {{{1, e24, e24}, {1, 1, 1}}, {{-1, 1 + e23, 0}, {1 + e22, 1 + e23, 0}}};
  const float want[2] = {1.0f, ldexpf(1, -46)};
  for (int c = 0; c < 2; c++) {
    const uint64_t k = c == 0 ? 3 : 2;
    /* A 1 x k (row vector, ld 1), B k x 1, D 1 x 1 */
    cublasLtMatrixLayout_t la = make_layout(CUDA_R_32F, 1, k, 1), lb = make_layout(CUDA_R_32F, k, 1, k),
                           ld = make_layout(CUDA_R_32F, 1, 1, 1);
    CUdeviceptr a, b, d;
    CK(api.cuMemAlloc(&a, 16));
    CK(api.cuMemAlloc(&b, 16));
    CK(api.cuMemAlloc(&d, 16));
    CK(api.cuMemcpyHtoD(a, cases[c][0], 12));
    CK(api.cuMemcpyHtoD(b, cases[c][1], 12));
    float alpha = 1, beta = 0, got = -1;
    LT(api.cublasLtMatmul(lt, op, &alpha, (void *)(uintptr_t)a, la, (void *)(uintptr_t)b, lb, &beta,
                          (void *)(uintptr_t)d, ld, (void *)(uintptr_t)d, ld, NULL, NULL, 0, NULL));
    CK(api.cuMemcpyDtoH(&got, d, 4));
    ck_assert_msg(got == want[c], "case %d: D = %a, want %a (an f32 accumulator with fused multiply-adds)", c,
                  (double)got, (double)want[c]);
    cublasLtMatrixLayout_t ls[] = {la, lb, ld};
    for (int i = 0; i < 3; i++) LT(api.cublasLtMatrixLayoutDestroy(ls[i]));
    CUdeviceptr all[] = {a, b, d};
    for (int i = 0; i < 3; i++) CK(api.cuMemFree(all[i]));
  }
  LT(api.cublasLtMatmulDescDestroy(op));
}
END_TEST

/* An algorithm from a heuristic told nothing of alignment may need 256
 * bytes (cublasLt.h's default for CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*):
 * A 4 bytes past an allocation's start is refused with it, and taken with
 * one chosen for 4-byte aligned A. */
START_TEST(test_alignment_the_algorithm_was_chosen_for) {
  cublasLtMatmulDesc_t op;
  LT(api.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t l = make_layout(CUDA_R_32F, 2, 2, 2);
  float ha[5] = {0, 1, 2, 3, 4}, hb[4] = {1, 0, 0, 1}, hd[4];
  CUdeviceptr a, b, d;
  CK(api.cuMemAlloc(&a, 20));
  CK(api.cuMemAlloc(&b, 16));
  CK(api.cuMemAlloc(&d, 16));
  CK(api.cuMemcpyHtoD(a, ha, 20));
  CK(api.cuMemcpyHtoD(b, hb, 16));
  const void *a4 = (const void *)(uintptr_t)(a + 4);
  float alpha = 1, beta = 0;
  for (int told = 0; told < 2; told++) {
    cublasLtMatmulPreference_t pref;
    LT(api.cublasLtMatmulPreferenceCreate(&pref));
    uint32_t four = 4;
    if (told) LT(api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four, 4));
    cublasLtMatmulHeuristicResult_t h;
    int n = 0;
    LT(api.cublasLtMatmulAlgoGetHeuristic(lt, op, l, l, l, l, pref, 1, &h, &n));
    ck_assert_int_eq(n, 1);
    cublasStatus_t s = api.cublasLtMatmul(lt, op, &alpha, a4, l, (void *)(uintptr_t)b, l, &beta, (void *)(uintptr_t)d, l,
                                          (void *)(uintptr_t)d, l, &h.algo, NULL, 0, NULL);
    ck_assert_int_eq(s, told ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED);
    if (!told)
      ck_assert_msg(strstr(api.emu_last_error(), "4-byte aligned, and the algorithm was chosen for 256-byte aligned A"),
                    "%s", api.emu_last_error());
    LT(api.cublasLtMatmulPreferenceDestroy(pref));
  }
  CK(api.cuMemcpyDtoH(hd, d, 16));
  for (int i = 0; i < 4; i++) ck_assert(hd[i] == ha[1 + i]);
  CUdeviceptr all[] = {a, b, d};
  for (int i = 0; i < 3; i++) CK(api.cuMemFree(all[i]));
  LT(api.cublasLtMatrixLayoutDestroy(l));
  LT(api.cublasLtMatmulDescDestroy(op));
}
END_TEST

START_TEST(test_matmul_in_a_graph) {
  cublasLtMatmulDesc_t op;
  LT(api.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t l = make_layout(CUDA_R_32F, 2, 2, 2);
  float ha[4] = {1, 2, 3, 4}, hb[4] = {1, 0, 0, 1}, hd[4];
  CUdeviceptr a, b, d;
  CK(api.cuMemAlloc(&a, 16));
  CK(api.cuMemAlloc(&b, 16));
  CK(api.cuMemAlloc(&d, 16));
  CK(api.cuMemcpyHtoD(a, ha, 16));
  CK(api.cuMemcpyHtoD(b, hb, 16));
  CUstream s;
  CK(api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  float alpha = 2, beta = 0;
  CK(api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  LT(api.cublasLtMatmul(lt, op, &alpha, (void *)(uintptr_t)a, l, (void *)(uintptr_t)b, l, &beta, (void *)(uintptr_t)d,
                        l, (void *)(uintptr_t)d, l, NULL, NULL, 0, s));
  alpha = 100; /* read when captured, as cuBLASLt does with host scalars */
  CK(api.cuMemcpyDtoHAsync(hd, d, 16, s));
  CUgraph g;
  CK(api.cuStreamEndCapture(s, &g));
  CUgraphExec e;
  CK(api.cuGraphInstantiateWithFlags(&e, g, 0));
  memset(hd, 0, sizeof hd);
  CK(api.cuGraphLaunch(e, s));
  for (int i = 0; i < 4; i++) ck_assert(hd[i] == 2 * ha[i]);
  CK(api.cuGraphExecDestroy(e));
  CK(api.cuGraphDestroy(g));
  CK(api.cuStreamDestroy(s));
  LT(api.cublasLtMatrixLayoutDestroy(l));
  LT(api.cublasLtMatmulDescDestroy(op));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_emu_blaslt");
  TCase *t = tcase_create("blaslt");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 600);
  tcase_add_test(t, test_every_combination_against_the_loop);
  tcase_add_test(t, test_refusals_say_why);
  tcase_add_test(t, test_operand_past_its_allocation);
  tcase_add_test(t, test_matmul_in_a_graph);
  tcase_add_test(t, test_accumulates_in_f32_with_fma);
  tcase_add_test(t, test_alignment_the_algorithm_was_chosen_for);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(suite()); }
