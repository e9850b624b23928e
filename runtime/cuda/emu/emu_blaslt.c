/* emu_blaslt.c: cuBLASLt on the emulated device, a reference GEMM that
 * honours the whole descriptor.
 *
 *   D = epilogue(alpha op(A) op(B) + beta C)    per batch
 *
 * op(A) is m x k (A itself k x m when transposed), op(B) k x n, C and D
 * m x n; each matrix has its own layout: element type (F32, BF16, F16),
 * order (column- or row-major), leading dimension, batch count and stride.
 *
 * Accumulation is in f32, as on the GPU (CUBLAS_COMPUTE_32F: an f32
 * accumulator; the tensor cores' products of 16-bit operands are exact in
 * it): each element of op(A) op(B) is acc = fmaf(a[p], b[p], acc) for p =
 * 0, 1, ..., k-1 in order, then alpha acc + beta C (an fmaf) and the bias
 * in f32, the scale type; GELU and its derivative are computed in double
 * from that f32 value and rounded once to D's type (they stand for the
 * GPU's f32 formulas to within that rounding); the bias-gradient sums are
 * f32 sums in order too.  Why one order stands for the GPU's: cuBLASLt
 * sums k in blocks (16 or 32 per mma, then across the k tiles, and split-k
 * may add partial sums at the end), an order the emulator cannot know; any
 * order of k f32 additions is within (k-1) u sum|a b| of the exact product
 * (u = 2^-24), and the sequential order has the largest such bound of
 * them, so a tolerance that holds against the emulator's order holds for
 * the GPU's.  Results are deterministic (one order), and differ from a real
 * cuBLASLt by accumulation rounding of that size (FAST_TF32 and FAST_16BF,
 * which round the operands on the GPU, are computed from the full f32
 * operands here).
 *
 * Epilogues (cublasLt.h): BIAS adds bias[i] (a vector over D's rows) before
 * GELU; GELU is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))), base/gelu.h; the _AUX forms store the GELU input (after the bias) in
 * the aux matrix (D's type, column-major, EPILOGUE_AUX_LD, a multiple of 8
 * and at least m); DGELU multiplies the product by GELU'(aux); DGELU_BGRAD
 * also stores the sums of D's rows (before rounding) in the bias vector;
 * BGRADA stores the row sums of op(A) (over k) and BGRADB the column sums
 * of op(B) in the bias vector.  A bias (or bias gradient) vector has
 * BIAS_DATA_TYPE, D's type by default, and BIAS_BATCH_STRIDE elements
 * between batches.
 *
 * What the GPU would refuse is refused: compute types other than 32F and
 * its FAST_16BF and FAST_TF32 forms, scale types other than 32F, device
 * pointer modes, the type combinations cuBLASLt lacks (FAST_* need F32
 * everywhere; otherwise A and B alike, C and D alike, and C/D either A's
 * type or F32), aux epilogues with a row-major D.  Every range a call
 * touches is checked against the device's allocations; one outside is
 * reported (CUBLAS_STATUS_EXECUTION_FAILED) naming the operand and batch,
 * and, as a faulting kernel would, leaves the context's error sticky. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"
#include "gelu.h"

/* ---- handles ------------------------------------------------------------------------ */

struct cublasLtContext {
  int unused;
};

static emu_registry handles, descs, layouts, prefs;

/* The emulator's state lives inside cuBLASLt's opaque structs. */
_Static_assert(sizeof(emu_lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc fits");
_Static_assert(sizeof(emu_lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");

typedef struct emu_lt_pref {
  uint32_t search;
  uint64_t max_workspace;
  uint32_t min_align[4]; /* A, B, C, D: bytes the caller promises (256 by default) */
} emu_lt_pref;
_Static_assert(sizeof(emu_lt_pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "pref fits");

/* A marker in the algorithms AlgoGetHeuristic hands out. */
static const uint64_t ALGO_MARK = 0x656d752d616c676full; /* "emu-algo" */

static cublasStatus_t lt_fail(cublasStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cublasStatus_t lt_fail(cublasStatus_t s, const char *fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  emu_set_error("%s", msg);
  return s;
}

/* Whether p is in r, asked under the device lock. */
static bool is_live(emu_registry *r, const void *p) {
  emu_lock();
  bool live = emu_reg_has(r, p);
  emu_unlock();
  return live;
}

/* The Create calls: a new zeroed object of `size` bytes, registered, with
 * init_size bytes of init at its start; NULL (and *s saying why) when out
 * of memory. */
static void *object_create(emu_registry *r, size_t size, const void *init, size_t init_size, const char *call,
                           cublasStatus_t *s) {
  emu_lock();
  void *o = calloc(1, size);
  *s = CUBLAS_STATUS_SUCCESS;
  if (!o || !emu_reg_add(r, o)) {
    free(o);
    o = NULL;
    *s = lt_fail(CUBLAS_STATUS_ALLOC_FAILED, "%s: out of memory", call);
  } else if (init_size) {
    memcpy(o, init, init_size);
  }
  emu_unlock();
  return o;
}

/* The Destroy calls: p must be live in r, else `dead` ("CALL: not a live WHAT"). */
static cublasStatus_t object_destroy(emu_registry *r, void *p, cublasStatus_t dead, const char *call, const char *what) {
  emu_lock();
  cublasStatus_t s = emu_reg_del(r, p) ? CUBLAS_STATUS_SUCCESS : lt_fail(dead, "%s: not a live %s", call, what);
  if (!s) free(p);
  emu_unlock();
  return s;
}

static cublasStatus_t lt_create(cublasLtHandle_t *h) {
  if (!h) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: NULL");
  cublasStatus_t s;
  struct cublasLtContext *c = object_create(&handles, sizeof *c, NULL, 0, "cublasLtCreate", &s);
  if (c) *h = c;
  return s;
}

static cublasStatus_t lt_destroy(cublasLtHandle_t h) {
  return object_destroy(&handles, h, CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy", "handle");
}

static const char *lt_status_string(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

static const char *type_name(int t) {
  return t == CUDA_R_32F ? "CUDA_R_32F" : t == CUDA_R_16BF ? "CUDA_R_16BF" : t == CUDA_R_16F ? "CUDA_R_16F" : "?";
}

static bool known_type(int t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

static cublasStatus_t desc_create(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType scale) {
  if (!d) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: NULL");
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16BF && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED,
                   "cublasLtMatmulDescCreate: compute type %d (the emulator has CUBLAS_COMPUTE_32F and its FAST_16BF, "
                   "FAST_TF32 forms)",
                   (int)compute);
  if (scale != CUDA_R_32F)
    return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescCreate: scale type %d (the emulator has CUDA_R_32F)",
                   (int)scale);
  emu_lt_desc v = {.compute = compute, .scale = scale, .transa = CUBLAS_OP_N, .transb = CUBLAS_OP_N,
                   .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .bias_type = -1};
  cublasStatus_t s;
  cublasLtMatmulDescOpaque_t *o = object_create(&descs, sizeof *o, &v, sizeof v, "cublasLtMatmulDescCreate", &s);
  if (o) *d = o;
  return s;
}

static cublasStatus_t desc_destroy(cublasLtMatmulDesc_t d) {
  return object_destroy(&descs, d, CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy", "descriptor");
}

/* Copies an attribute of exactly `want` bytes. */
static cublasStatus_t attr_copy(void *dst, size_t want, const void *buf, size_t size, const char *call, const char *attr) {
  if (!buf || size != want)
    return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %s takes %zu bytes, given %zu%s", call, attr, want, size,
                   buf ? "" : " (NULL buffer)");
  memcpy(dst, buf, want);
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t size) {
  static const char call[] = "cublasLtMatmulDescSetAttribute";
  if (!is_live(&descs, d)) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: not a live descriptor", call);
  emu_lt_desc v;
  memcpy(&v, d, sizeof v);
  cublasStatus_t s;
  int32_t i32 = 0;
  uint32_t u32 = 0;
  switch (a) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
    if ((s = attr_copy(&i32, 4, buf, size, call, "COMPUTE_TYPE"))) return s;
    v.compute = i32;
    break;
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    if ((s = attr_copy(&i32, 4, buf, size, call, "SCALE_TYPE"))) return s;
    v.scale = i32;
    break;
  case CUBLASLT_MATMUL_DESC_POINTER_MODE:
    if ((s = attr_copy(&i32, 4, buf, size, call, "POINTER_MODE"))) return s;
    v.pointer_mode = i32;
    break;
  case CUBLASLT_MATMUL_DESC_TRANSA:
    if ((s = attr_copy(&i32, 4, buf, size, call, "TRANSA"))) return s;
    v.transa = i32;
    break;
  case CUBLASLT_MATMUL_DESC_TRANSB:
    if ((s = attr_copy(&i32, 4, buf, size, call, "TRANSB"))) return s;
    v.transb = i32;
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    if ((s = attr_copy(&u32, 4, buf, size, call, "EPILOGUE"))) return s;
    v.epilogue = u32;
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    if ((s = attr_copy(&v.bias, sizeof(void *), buf, size, call, "BIAS_POINTER"))) return s;
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
    if ((s = attr_copy(&v.bias_stride, 8, buf, size, call, "BIAS_BATCH_STRIDE"))) return s;
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    if ((s = attr_copy(&v.aux, sizeof(void *), buf, size, call, "EPILOGUE_AUX_POINTER"))) return s;
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
    if ((s = attr_copy(&v.aux_ld, 8, buf, size, call, "EPILOGUE_AUX_LD"))) return s;
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
    if ((s = attr_copy(&v.aux_stride, 8, buf, size, call, "EPILOGUE_AUX_BATCH_STRIDE"))) return s;
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    if ((s = attr_copy(&i32, 4, buf, size, call, "BIAS_DATA_TYPE"))) return s;
    if (i32 != -1 && !known_type(i32))
      return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: BIAS_DATA_TYPE %d (the emulator has F32, BF16, F16)", call, i32);
    v.bias_type = i32;
    break;
  default:
    return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: the emulator does not know attribute %d", call, (int)a);
  }
  memcpy(d, &v, sizeof v);
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t layout_create(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                    int64_t ld) {
  if (!l) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: NULL");
  if (!known_type(type))
    return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED,
                   "cublasLtMatrixLayoutCreate: type %d (the emulator has CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F)", (int)type);
  emu_lt_layout v = {.type = type, .order = CUBLASLT_ORDER_COL, .rows = rows, .cols = cols, .ld = ld, .batch = 1};
  cublasStatus_t s;
  cublasLtMatrixLayoutOpaque_t *o = object_create(&layouts, sizeof *o, &v, sizeof v, "cublasLtMatrixLayoutCreate", &s);
  if (o) *l = o;
  return s;
}

static cublasStatus_t layout_destroy(cublasLtMatrixLayout_t l) {
  return object_destroy(&layouts, l, CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy", "layout");
}

static cublasStatus_t layout_set(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *buf,
                                 size_t size) {
  static const char call[] = "cublasLtMatrixLayoutSetAttribute";
  if (!is_live(&layouts, l)) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: not a live layout", call);
  emu_lt_layout v;
  memcpy(&v, l, sizeof v);
  cublasStatus_t s;
  int32_t i32 = 0;
  uint32_t u32 = 0;
  switch (a) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE:
    if ((s = attr_copy(&u32, 4, buf, size, call, "TYPE"))) return s;
    if (!known_type((int)u32))
      return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: TYPE %u (the emulator has F32, BF16, F16)", call, u32);
    v.type = (int)u32;
    break;
  case CUBLASLT_MATRIX_LAYOUT_ORDER:
    if ((s = attr_copy(&i32, 4, buf, size, call, "ORDER"))) return s;
    if (i32 != CUBLASLT_ORDER_COL && i32 != CUBLASLT_ORDER_ROW)
      return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: ORDER %d (the emulator has COL and ROW)", call, i32);
    v.order = i32;
    break;
  case CUBLASLT_MATRIX_LAYOUT_ROWS:
    if ((s = attr_copy(&v.rows, 8, buf, size, call, "ROWS"))) return s;
    break;
  case CUBLASLT_MATRIX_LAYOUT_COLS:
    if ((s = attr_copy(&v.cols, 8, buf, size, call, "COLS"))) return s;
    break;
  case CUBLASLT_MATRIX_LAYOUT_LD:
    if ((s = attr_copy(&v.ld, 8, buf, size, call, "LD"))) return s;
    break;
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    if ((s = attr_copy(&v.batch, 4, buf, size, call, "BATCH_COUNT"))) return s;
    break;
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    if ((s = attr_copy(&v.stride, 8, buf, size, call, "STRIDED_BATCH_OFFSET"))) return s;
    break;
  default:
    return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: the emulator does not know attribute %d", call, (int)a);
  }
  memcpy(l, &v, sizeof v);
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t pref_create(cublasLtMatmulPreference_t *p) {
  if (!p) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: NULL");
  /* cublasLt.h: CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES default to 256 */
  const emu_lt_pref init = {0, 0, {256, 256, 256, 256}};
  cublasStatus_t s;
  cublasLtMatmulPreferenceOpaque_t *o =
      object_create(&prefs, sizeof *o, &init, sizeof init, "cublasLtMatmulPreferenceCreate", &s);
  if (o) *p = o;
  return s;
}

static cublasStatus_t pref_destroy(cublasLtMatmulPreference_t p) {
  return object_destroy(&prefs, p, CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy", "preference");
}

static cublasStatus_t pref_set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                               size_t size) {
  static const char call[] = "cublasLtMatmulPreferenceSetAttribute";
  if (!is_live(&prefs, p)) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: not a live preference", call);
  emu_lt_pref v;
  memcpy(&v, p, sizeof v);
  cublasStatus_t s;
  if (a == CUBLASLT_MATMUL_PREF_SEARCH_MODE) {
    if ((s = attr_copy(&v.search, 4, buf, size, call, "SEARCH_MODE"))) return s;
  } else if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if ((s = attr_copy(&v.max_workspace, 8, buf, size, call, "MAX_WORKSPACE_BYTES"))) return s;
  } else if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
    if ((s = attr_copy(&v.min_align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], 4, buf, size, call,
                       "MIN_ALIGNMENT_*_BYTES")))
      return s;
  } else {
    return lt_fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: the emulator does not know attribute %d", call, (int)a);
  }
  memcpy(p, &v, sizeof v);
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- validation ---------------------------------------------------------------------- */

static size_t type_bytes(int t) { return t == CUDA_R_32F ? 4 : 2; }

static bool has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool has_gelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool writes_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
static bool reads_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
static bool writes_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}

static const char *epilogue_name(uint32_t e) {
  switch (e) {
  case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
  case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
  case CUBLASLT_EPILOGUE_GELU: return "GELU";
  case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
  case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
  case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
  case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
  case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
  case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
  case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
  default: return NULL;
  }
}

static bool layout_ok(const emu_lt_layout *l, const char *name, char *why, size_t n) {
  uint64_t lead = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
  if (l->ld < 1 || (uint64_t)l->ld < lead) {
    snprintf(why, n, "matrix %s: leading dimension %lld is less than its %s (%llu)", name, (long long)l->ld,
             l->order == CUBLASLT_ORDER_COL ? "rows (column-major)" : "columns (row-major)", (unsigned long long)lead);
    return false;
  }
  if (l->batch < 1) {
    snprintf(why, n, "matrix %s: batch count %d", name, (int)l->batch);
    return false;
  }
  return true;
}

static int bias_type(const emu_lt_call *c) { return c->op.bias_type >= 0 ? c->op.bias_type : c->d.type; }

/* The epilogue's own rules, for emu_lt_validate. */
static cublasStatus_t epilogue_ok(const emu_lt_call *c, char *why, size_t n) {
  const emu_lt_desc *o = &c->op;
  const emu_lt_layout *D = &c->d;
  const uint64_t m = D->rows;
  uint32_t e = o->epilogue;
  /* The bias-gradient epilogues exist for one transposition each: BGRADA
   * sums op(A)'s rows only for a non-transposed A, BGRADB op(B)'s columns
   * only for a transposed B (NVIDIA's nvmath-python skips the other cases
   * in its cuBLASLt epilogue tests as unsupported: "CUBLASLT_EPILOGUE_BGRADA
   * only works with non-transposed A", "BGRADB only works with transposed
   * B"; cublasLtEpilogue_t in the cuBLAS documentation: "Apply Bias
   * gradient to the input matrix A/B ... The reduction happens over the
   * GEMM's k dimension").  cublasLtMatmulAlgoGetHeuristic then has no
   * algorithm: CUBLAS_STATUS_NOT_SUPPORTED with returnAlgoCount 0 ("If no
   * heuristic function available for current configuration"). */
  if ((e == CUBLASLT_EPILOGUE_BGRADA && o->transa != CUBLAS_OP_N) ||
      (e == CUBLASLT_EPILOGUE_BGRADB && o->transb != CUBLAS_OP_T)) {
    snprintf(why, n, "epilogue %s with TRANSA %s, TRANSB %s: cuBLASLt has BGRADA for a non-transposed A and BGRADB "
             "for a transposed B only", epilogue_name(e), o->transa == CUBLAS_OP_N ? "N" : "T",
             o->transb == CUBLAS_OP_N ? "N" : "T");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  /* TG_EMU_LT_EPILOGUES=0: a cuBLASLt with no algorithm for any epilogue
   * but DEFAULT, so that a caller's fallback (the CUDA backend's epilogue
   * kernels) runs in CI */
  const char *epilogues = getenv("TG_EMU_LT_EPILOGUES");
  if (e != CUBLASLT_EPILOGUE_DEFAULT && epilogues && !strcmp(epilogues, "0")) {
    snprintf(why, n, "epilogue %s: TG_EMU_LT_EPILOGUES=0 (the emulated cuBLASLt has no epilogues)", epilogue_name(e));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if ((has_bias(e) || writes_bias(e)) && !o->bias && c->A) {
    snprintf(why, n, "epilogue %s needs CUBLASLT_MATMUL_DESC_BIAS_POINTER", epilogue_name(e));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (writes_aux(e) || reads_aux(e)) {
    if (!o->aux && c->A) {
      snprintf(why, n, "epilogue %s needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", epilogue_name(e));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (D->order != CUBLASLT_ORDER_COL) {
      snprintf(why, n, "epilogue %s with a row-major D: the aux matrix is column-major (AUX_LD counts rows), so the "
               "emulator takes aux epilogues with a column-major D only", epilogue_name(e));
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (o->aux_ld < (int64_t)m || o->aux_ld % 8) {
      snprintf(why, n, "EPILOGUE_AUX_LD %lld: must be a multiple of 8 and at least D's %llu rows", (long long)o->aux_ld,
               (unsigned long long)m);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (o->aux_stride % 8) {
      snprintf(why, n, "EPILOGUE_AUX_BATCH_STRIDE %lld: must be a multiple of 8", (long long)o->aux_stride);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_lt_validate(const emu_lt_call *c, char *why, size_t n) {
  const emu_lt_desc *o = &c->op;
  if (o->compute != CUBLAS_COMPUTE_32F && o->compute != CUBLAS_COMPUTE_32F_FAST_16BF &&
      o->compute != CUBLAS_COMPUTE_32F_FAST_TF32) {
    snprintf(why, n, "compute type %d is not one the emulator has (32F, 32F_FAST_16BF, 32F_FAST_TF32)", o->compute);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (o->scale != CUDA_R_32F) {
    snprintf(why, n, "scale type %d: the emulator has CUDA_R_32F", o->scale);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (o->pointer_mode != 0) {
    snprintf(why, n, "pointer mode %d: the emulator has CUBLASLT_POINTER_MODE_HOST (alpha and beta on the host)",
             o->pointer_mode);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if ((o->transa != CUBLAS_OP_N && o->transa != CUBLAS_OP_T) || (o->transb != CUBLAS_OP_N && o->transb != CUBLAS_OP_T)) {
    snprintf(why, n, "TRANSA %d, TRANSB %d: the emulator has CUBLAS_OP_N and CUBLAS_OP_T", o->transa, o->transb);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (!epilogue_name(o->epilogue)) {
    snprintf(why, n, "epilogue %u is not one the emulator has (DEFAULT, BIAS, GELU, GELU_AUX, GELU_BIAS, GELU_AUX_BIAS, "
             "DGELU, DGELU_BGRAD, BGRADA, BGRADB)", o->epilogue);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const emu_lt_layout *A = &c->a, *B = &c->b, *C = &c->c, *D = &c->d;
  /* types */
  bool fast = o->compute != CUBLAS_COMPUTE_32F;
  bool ok;
  if (fast) ok = A->type == CUDA_R_32F && B->type == CUDA_R_32F && C->type == CUDA_R_32F && D->type == CUDA_R_32F;
  else ok = A->type == B->type && C->type == D->type && (C->type == A->type || C->type == CUDA_R_32F);
  if (!ok) {
    snprintf(why, n,
             "types A %s, B %s, C %s, D %s with compute type %d: cuBLASLt has %s", type_name(A->type), type_name(B->type),
             type_name(C->type), type_name(D->type), o->compute,
             fast ? "F32 everywhere for the FAST compute types"
                  : "A and B of one type, C and D of one type, C/D that type or F32");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  /* shapes */
  uint64_t m = D->rows, nn = D->cols;
  uint64_t am = o->transa == CUBLAS_OP_N ? A->rows : A->cols, k = o->transa == CUBLAS_OP_N ? A->cols : A->rows;
  uint64_t bk = o->transb == CUBLAS_OP_N ? B->rows : B->cols, bn = o->transb == CUBLAS_OP_N ? B->cols : B->rows;
  if (!m || !nn) {
    snprintf(why, n, "D is %llu x %llu: empty", (unsigned long long)m, (unsigned long long)nn);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (am != m || bn != nn || bk != k || C->rows != m || C->cols != nn) {
    snprintf(why, n,
             "shapes do not agree: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu, D %llu x %llu (want op(A) m x k, "
             "op(B) k x n, C and D m x n)",
             (unsigned long long)am, (unsigned long long)k, (unsigned long long)bk, (unsigned long long)bn,
             (unsigned long long)C->rows, (unsigned long long)C->cols, (unsigned long long)m, (unsigned long long)nn);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!layout_ok(A, "A", why, n) || !layout_ok(B, "B", why, n) || !layout_ok(C, "C", why, n) ||
      !layout_ok(D, "D", why, n))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (A->batch != D->batch || B->batch != D->batch || C->batch != D->batch) {
    snprintf(why, n, "batch counts differ: A %d, B %d, C %d, D %d", (int)A->batch, (int)B->batch, (int)C->batch,
             (int)D->batch);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (c->C && c->C == c->D && memcmp(C, D, sizeof *C)) {
    snprintf(why, n, "C and D are the same memory but their layouts differ (in place needs one layout)");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (c->beta != 0 && !c->C && c->A) {
    snprintf(why, n, "beta is %g but C is NULL", (double)c->beta);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return epilogue_ok(c, why, n);
}

/* ---- memory ranges --------------------------------------------------------------------- */

/* Bytes of batch b of a matrix: [lo, hi). */
static void matrix_range(const emu_lt_layout *l, uintptr_t base, int b, uintptr_t *lo, uintptr_t *hi) {
  uint64_t major = l->order == CUBLASLT_ORDER_COL ? l->cols : l->rows, lead = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
  int64_t first = (int64_t)b * l->stride;
  uint64_t count = (major - 1) * (uint64_t)l->ld + lead;
  *lo = base + (uintptr_t)(first * (int64_t)type_bytes(l->type));
  *hi = *lo + count * type_bytes(l->type);
}

/* Batch b of an operand starting at base lies in base's allocation. */
static bool range_check(uintptr_t base, uintptr_t lo, uintptr_t hi, const char *what, int b, int batches, char *why,
                        size_t n) {
  char name[96];
  if (batches > 1) snprintf(name, sizeof name, "%s (batch %d of %d)", what, b, batches);
  else snprintf(name, sizeof name, "%s", what);
  return emu_range_in(base, lo, hi - lo, name, why, n);
}

static bool ranges_ok(const emu_lt_call *c, char *why, size_t n) {
  const int batches = c->d.batch;
  const uint32_t e = c->op.epilogue;
  const uint64_t m = c->d.rows, nn = c->d.cols;
  for (int b = 0; b < batches; b++) {
    uintptr_t lo, hi;
    matrix_range(&c->a, c->A, b, &lo, &hi);
    if (!range_check(c->A, lo, hi, "operand A", b, batches, why, n)) return false;
    matrix_range(&c->b, c->B, b, &lo, &hi);
    if (!range_check(c->B, lo, hi, "operand B", b, batches, why, n)) return false;
    if (c->beta != 0) {
      matrix_range(&c->c, c->C, b, &lo, &hi);
      if (!range_check(c->C, lo, hi, "operand C", b, batches, why, n)) return false;
    }
    matrix_range(&c->d, c->D, b, &lo, &hi);
    if (!range_check(c->D, lo, hi, "operand D", b, batches, why, n)) return false;
    if (has_bias(e) || writes_bias(e)) {
      uint64_t len = e == CUBLASLT_EPILOGUE_BGRADB ? nn : m;
      size_t es = type_bytes(bias_type(c));
      lo = c->op.bias + (uintptr_t)((int64_t)b * c->op.bias_stride * (int64_t)es);
      if (!range_check(c->op.bias, lo, lo + len * es, "the bias vector", b, batches, why, n)) return false;
    }
    if (writes_aux(e) || reads_aux(e)) {
      size_t es = type_bytes(c->d.type);
      lo = c->op.aux + (uintptr_t)((int64_t)b * c->op.aux_stride * (int64_t)es);
      hi = lo + ((nn - 1) * (uint64_t)c->op.aux_ld + m) * es;
      if (!range_check(c->op.aux, lo, hi, "the aux matrix", b, batches, why, n)) return false;
    }
  }
  return true;
}

/* ---- elements ------------------------------------------------------------------------------ */

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double f16_value(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp == 0x1f ? (man ? NAN : INFINITY) : exp ? ldexp(1024 + man, exp - 25) : ldexp(man, -24);
  return h & 0x8000 ? -v : v;
}

/* A 16-bit D is the float result rounded again, as on the GPU (an f32
 * accumulator, then a conversion rounding to nearest even). */
static uint16_t to_bf16(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t to_f16(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fff;
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) {
    uint32_t r = a - 0x38000000u;
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a < 0x33000000u) return (uint16_t)sign;
  uint32_t exp = a >> 23, man = (a & 0x7fffffu) | 0x800000u, shift = 126 - exp;
  uint32_t r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}

static double load(int type, uintptr_t base, int64_t i) {
  if (type == CUDA_R_32F) {
    float f;
    memcpy(&f, (const void *)(base + (uintptr_t)i * 4), 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, (const void *)(base + (uintptr_t)i * 2), 2);
  return type == CUDA_R_16BF ? bits_f32((uint32_t)h << 16) : f16_value(h);
}

static void store(int type, uintptr_t base, int64_t i, double x) {
  if (type == CUDA_R_32F) {
    float f = (float)x;
    memcpy((void *)(base + (uintptr_t)i * 4), &f, 4);
    return;
  }
  uint16_t h = type == CUDA_R_16BF ? to_bf16(x) : to_f16(x);
  memcpy((void *)(base + (uintptr_t)i * 2), &h, 2);
}

/* Element (r, c) of batch b. */
static int64_t at(const emu_lt_layout *l, int b, uint64_t r, uint64_t c) {
  return (int64_t)b * l->stride + (l->order == CUBLASLT_ORDER_COL ? (int64_t)(c * (uint64_t)l->ld + r)
                                                                   : (int64_t)(r * (uint64_t)l->ld + c));
}

/* ---- running ---------------------------------------------------------------------------------- */

cublasStatus_t emu_lt_run(const emu_lt_call *c, char *why, size_t whylen) {
  cublasStatus_t s = emu_lt_validate(c, why, whylen);
  if (s) return s;
  if (!ranges_ok(c, why, whylen)) return CUBLAS_STATUS_EXECUTION_FAILED;
  const uint64_t m = c->d.rows, n = c->d.cols, k = c->op.transa == CUBLAS_OP_N ? c->a.cols : c->a.rows;
  const uint32_t e = c->op.epilogue;
  const int bt = bias_type(c);
  float *a = malloc(sizeof(float) * (m * k + 1)), *bt_ = malloc(sizeof(float) * (n * k + 1));
  float *rowsum = calloc(m + 1, sizeof(float));
  if (!a || !bt_ || !rowsum) {
    free(a), free(bt_), free(rowsum);
    snprintf(why, whylen, "out of memory");
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  for (int b = 0; b < c->d.batch; b++) {
    /* op(A) row by row and op(B) column by column, as dense floats (exact:
     * every operand type is a subset of f32) */
    for (uint64_t i = 0; i < m; i++)
      for (uint64_t p = 0; p < k; p++)
        a[i * k + p] = (float)load(c->a.type, c->A, c->op.transa == CUBLAS_OP_N ? at(&c->a, b, i, p) : at(&c->a, b, p, i));
    for (uint64_t j = 0; j < n; j++)
      for (uint64_t p = 0; p < k; p++)
        bt_[j * k + p] = (float)load(c->b.type, c->B, c->op.transb == CUBLAS_OP_N ? at(&c->b, b, p, j) : at(&c->b, b, j, p));
    uintptr_t bias = c->op.bias + (uintptr_t)((int64_t)b * c->op.bias_stride * (int64_t)type_bytes(bt));
    uintptr_t aux = c->op.aux + (uintptr_t)((int64_t)b * c->op.aux_stride * (int64_t)type_bytes(c->d.type));
    memset(rowsum, 0, sizeof(float) * m);
    for (uint64_t j = 0; j < n; j++)
      for (uint64_t i = 0; i < m; i++) {
        /* the f32 accumulator, one fused multiply-add per k in order */
        float acc = 0;
        const float *x = a + i * k, *y = bt_ + j * k;
        for (uint64_t p = 0; p < k; p++) acc = fmaf(x[p], y[p], acc);
        /* alpha, beta and the bias in the scale type, f32 */
        float v = c->alpha * acc;
        if (c->beta != 0) v = fmaf(c->beta, (float)load(c->c.type, c->C, at(&c->c, b, i, j)), v);
        if (has_bias(e)) v += (float)load(bt, bias, (int64_t)i);
        if (writes_aux(e)) store(c->d.type, aux, (int64_t)(j * (uint64_t)c->op.aux_ld + i), v);
        double out = v; /* GELU and its derivative: to within D's rounding */
        if (has_gelu(e)) out = tg_gelu_tanh(v);
        if (reads_aux(e)) out *= tg_gelu_tanh_grad(load(c->d.type, aux, (int64_t)(j * (uint64_t)c->op.aux_ld + i)));
        rowsum[i] += (float)out;
        store(c->d.type, c->D, at(&c->d, b, i, j), out);
      }
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      for (uint64_t i = 0; i < m; i++) store(bt, bias, (int64_t)i, rowsum[i]);
    if (e == CUBLASLT_EPILOGUE_BGRADA)
      for (uint64_t i = 0; i < m; i++) {
        float sum = 0;
        for (uint64_t p = 0; p < k; p++) sum += a[i * k + p];
        store(bt, bias, (int64_t)i, sum);
      }
    if (e == CUBLASLT_EPILOGUE_BGRADB)
      for (uint64_t j = 0; j < n; j++) {
        float sum = 0;
        for (uint64_t p = 0; p < k; p++) sum += bt_[j * k + p];
        store(bt, bias, (int64_t)j, sum);
      }
  }
  free(a), free(bt_), free(rowsum);
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- the calls ------------------------------------------------------------------------------------ */

static bool gather(const char *call, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, emu_lt_call *out, cublasStatus_t *s) {
  emu_lock();
  bool live = emu_reg_has(&descs, op), la = emu_reg_has(&layouts, a), lb = emu_reg_has(&layouts, b), lc = emu_reg_has(&layouts, c),
       ld = emu_reg_has(&layouts, d);
  emu_unlock();
  if (!live || !la || !lb || !lc || !ld) {
    *s = lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %s is not a live %s", call,
                 !live ? "the operation descriptor" : !la ? "A's layout" : !lb ? "B's layout" : !lc ? "C's layout" : "D's layout",
                 !live ? "cublasLtMatmulDesc_t" : "cublasLtMatrixLayout_t");
    return false;
  }
  memset(out, 0, sizeof *out);
  memcpy(&out->op, op, sizeof out->op);
  memcpy(&out->a, a, sizeof out->a);
  memcpy(&out->b, b, sizeof out->b);
  memcpy(&out->c, c, sizeof out->c);
  memcpy(&out->d, d, sizeof out->d);
  return true;
}

static cublasStatus_t heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t *results,
                                int *returned) {
  static const char call[] = "cublasLtMatmulAlgoGetHeuristic";
  emu_lock();
  bool live = emu_reg_has(&handles, h), lp = emu_reg_has(&prefs, pref);
  emu_unlock();
  if (!live) return lt_fail(CUBLAS_STATUS_NOT_INITIALIZED, "%s: not a live cublasLt handle", call);
  if (!lp) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: not a live preference", call);
  if (requested < 1 || !results || !returned)
    return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: requested %d results (at least 1, with room for them)", call, requested);
  *returned = 0;
  emu_lt_call cl;
  cublasStatus_t s;
  if (!gather(call, op, a, b, c, d, &cl, &s)) return s;
  cl.alpha = 1, cl.beta = 0; /* shapes and types only: no memory is touched */
  char why[1024];
  if ((s = emu_lt_validate(&cl, why, sizeof why))) return lt_fail(s, "%s: %s", call, why);
  memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = ALGO_MARK;
  /* the alignments it was chosen for, which cublasLtMatmul holds the
   * pointers to (algo_aligned) */
  emu_lt_pref pv;
  memcpy(&pv, pref, sizeof pv);
  for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = pv.min_align[i];
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/* Whether the pointers are aligned as the algorithm needs.  The heuristic
 * picks among the algorithms that work with pointers aligned to the
 * preference's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES (256 by
 * default: "Selecting a smaller value will exclude algorithms that can not
 * work with matrix A that is not as strictly aligned as they need",
 * cublasLt.h), so an algorithm it returned may need that much; a pointer
 * aligned less is refused, as cuBLASLt refuses an algorithm its operands
 * do not suit (CUBLAS_STATUS_NOT_SUPPORTED).  The emulator takes the
 * strictest reading: every such algorithm needs the full alignment. */
static bool algo_aligned(const cublasLtMatmulAlgo_t *algo, const void *A, const void *B, const void *C, const void *D,
                         const char *call) {
  const void *p[4] = {A, B, C, D};
  for (int i = 0; i < 4; i++) {
    uint64_t need = algo->data[1 + i];
    uintptr_t at = (uintptr_t)p[i];
    if (!p[i] || !need || at % need == 0) continue;
    lt_fail(CUBLAS_STATUS_NOT_SUPPORTED,
            "%s: %c is at %#llx, %llu-byte aligned, and the algorithm was chosen for %llu-byte aligned %c "
            "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES, 256 unless set): ask the heuristic with the alignment "
            "the pointers have", call, "ABCD"[i], (unsigned long long)at, (unsigned long long)(at & -at),
            (unsigned long long)need, "ABCD"[i], "ABCD"[i]);
    return false;
  }
  return true;
}

static cublasStatus_t matmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                             cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                             const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                             const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes, CUstream stream) {
  static const char call[] = "cublasLtMatmul";
  (void)workspace, (void)workspace_bytes; /* the emulator needs none */
  if (!is_live(&handles, h)) return lt_fail(CUBLAS_STATUS_NOT_INITIALIZED, "%s: not a live cublasLt handle", call);
  emu_lt_call cl;
  cublasStatus_t s;
  if (!gather(call, op, a, b, c, d, &cl, &s)) return s;
  if (!alpha || !beta) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: alpha or beta is NULL", call);
  if (algo && algo->data[0] != ALGO_MARK)
    return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: the algorithm did not come from cublasLtMatmulAlgoGetHeuristic", call);
  if (!A || !B || !D) return lt_fail(CUBLAS_STATUS_INVALID_VALUE, "%s: A, B or D is NULL", call);
  if (algo && !algo_aligned(algo, A, B, C, D, call)) return CUBLAS_STATUS_NOT_SUPPORTED;
  memcpy(&cl.alpha, alpha, 4); /* host pointers of the scale type (32F), read now as cuBLASLt does */
  memcpy(&cl.beta, beta, 4);
  cl.A = (uintptr_t)A, cl.B = (uintptr_t)B, cl.C = (uintptr_t)C, cl.D = (uintptr_t)D;
  char why[2048];
  if ((s = emu_lt_validate(&cl, why, sizeof why))) return lt_fail(s, "%s: %s", call, why);
  emu_lock();
  CUresult r = emu_ctx_check(call);
  if (r) {
    emu_unlock();
    return CUBLAS_STATUS_EXECUTION_FAILED; /* the message is set */
  }
  if (emu_capture_matmul(stream, &cl, emu_lt_run, &s)) {
    emu_unlock();
    /* EXECUTION_FAILED: the driver said why (a stream-order race, the legacy stream) */
    if (s && s != CUBLAS_STATUS_EXECUTION_FAILED)
      lt_fail(s, "%s: could not record it in the capture (out of memory, or a bad stream)", call);
    return s;
  }
  s = emu_lt_run(&cl, why, sizeof why);
  if (s == CUBLAS_STATUS_EXECUTION_FAILED) emu_set_sticky(CUDA_ERROR_ILLEGAL_ADDRESS); /* as a faulting kernel would */
  emu_unlock();
  if (s) return lt_fail(s, "%s: %s", call, why);
  return CUBLAS_STATUS_SUCCESS;
}

void emu_blaslt_fill(tg_cuda_api *api) {
  api->cublasLtCreate = lt_create;
  api->cublasLtDestroy = lt_destroy;
  api->cublasLtGetStatusString = lt_status_string;
  api->cublasLtMatmulDescCreate = desc_create;
  api->cublasLtMatmulDescDestroy = desc_destroy;
  api->cublasLtMatmulDescSetAttribute = desc_set;
  api->cublasLtMatrixLayoutCreate = layout_create;
  api->cublasLtMatrixLayoutDestroy = layout_destroy;
  api->cublasLtMatrixLayoutSetAttribute = layout_set;
  api->cublasLtMatmulPreferenceCreate = pref_create;
  api->cublasLtMatmulPreferenceDestroy = pref_destroy;
  api->cublasLtMatmulPreferenceSetAttribute = pref_set;
  api->cublasLtMatmulAlgoGetHeuristic = heuristic;
  api->cublasLtMatmul = matmul;
}
