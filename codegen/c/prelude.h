/* prelude.h: what the generated C needs before its kernels: libc headers,
 * the index type, vectorisable e^x and tanh, bf16 and f16 conversions, the
 * bf16 matmuls' f32 copies, and the BLAS and oneDNN functions it calls,
 * declared here so that no header of theirs is needed.  GELU follows it
 * (codegen/gelu_kernel.h).
 *
 * Embedded at build time (cmake/embed.cmake, without this comment) and
 * printed by render_c.c at the top of every file. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef long tg_idx;
static inline float tg_inf(void) { return INFINITY; }
static inline float tg_bits_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned tg_float_bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
/* e^x and tanh x without calls, so that loops over them vectorise: Cephes'
 * single-precision polynomials (about 1 ulp); inf, -inf and nan as libm. */
static inline float tg_exp(float x) {
  float c = x < -87.5f ? -87.5f : x > 88.5f ? 88.5f : x;
  float n = floorf(c * 1.44269504088896341f + 0.5f);
  float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  float y = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r
             + 1.6666665459e-1f) * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  int e = (int)n;
  float s = tg_bits_float((unsigned)(e + 126) << 23);
  y = y * s * 2.0f;
  return x < -87.5f ? 0.0f : x > 88.5f ? INFINITY : y;
}
static inline float tg_tanh(float x) {
  float a = fabsf(x), z = x * x;
  float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
             - 3.33332819422e-1f) * z * x + x;
  float q = 1.0f - 2.0f / (tg_exp(2.0f * a) + 1.0f);
  q = x < 0 ? -q : q;
  return a < 0.625f ? p : a > 9.0f ? (x < 0 ? -1.0f : 1.0f) : q;
}
static inline float tg_bf16_load(unsigned short x) { return tg_bits_float((unsigned)x << 16); }
static inline unsigned short tg_bf16_store(float f) {
  unsigned u = tg_float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40); /* quiet nan */
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* round to nearest even */
}
static inline float tg_bf16_round(float f) { return tg_bf16_load(tg_bf16_store(f)); }
/* the bf16 of a value that is one already (emit.c: holds_bf16): its top half */
static inline unsigned short tg_bf16_bits(float f) { return (unsigned short)(tg_float_bits(f) >> 16); }
static void *tg_scratch_floats(long n) {
  void *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!p) { fprintf(stderr, "tg: out of memory for a bf16 matmul's f32 copies (%ld floats)\n", n); abort(); }
  return p;
}
/* a bf16 matrix (rows x cols, leading dim ld) as a dense f32 copy */
static float *tg_bf16_dense(const unsigned short *m, long rows, long cols, long ld) {
  float *d = (float *)tg_scratch_floats(rows * cols);
  for (long i = 0; i < rows; i++)
    for (long j = 0; j < cols; j++) d[i * cols + j] = tg_bf16_load(m[i * ld + j]);
  return d;
}
/* a dense f32 product rounded into a bf16 result (leading dim ld) */
static void tg_bf16_round_into(const float *c, long rows, long cols, unsigned short *d, long ld) {
  for (long i = 0; i < rows; i++)
    for (long j = 0; j < cols; j++) d[i * ld + j] = tg_bf16_store(c[i * cols + j]);
}
static inline float tg_f16_load(unsigned short h) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }
static inline unsigned short tg_f16_store(float f) { _Float16 h = (_Float16)f; unsigned short u; memcpy(&u, &h, 2); return u; }
static inline float tg_f16_round(float f) { return tg_f16_load(tg_f16_store(f)); }

/* OpenBLAS (cblas.h): row-major 101, no transpose 111, transpose 112 */
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
/* bf16 A and B, f32 C: in OpenBLAS builds with BUILD_BFLOAT16 only, so
 * linked weakly (NULL where the library lacks it) */
void cblas_sbgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const unsigned short *a,
                  int lda, const unsigned short *b, int ldb, float beta, float *c, int ldc)
    __attribute__((weak));
/* y = op(A) x: a one-row product without sgemm's packing of B */
void cblas_sgemv(int order, int ta, int m, int n, float alpha, const float *a, int lda, const float *x,
                 int incx, float beta, float *y, int incy);
void openblas_set_num_threads(int n);
/* The f32 matmuls' library (tg_sgemm, and tg_sgemv for one-row products),
 * chosen by the CPU backend (runtime/backend/cpu/cpu_gemm.c) and compiled
 * in by its flag: oneDNN's sgemm (-DTG_GEMM_ONEDNN), which picks its
 * kernels by the CPU's features (AVX-512 where there is AVX-512, whatever
 * the model), else OpenBLAS's.  Same arguments as cblas_sgemm's and
 * cblas_sgemv's, row-major. */
#ifdef TG_GEMM_ONEDNN
int dnnl_sgemm(char transa, char transb, long m, long n, long k, float alpha, const float *a, long lda,
               const float *b, long ldb, float beta, float *c, long ldc);
static inline void tg_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                            const float *b, int ldb, float beta, float *c, int ldc) {
  (void)order; /* always 101, row-major: dnnl_sgemm's only layout */
  int status = dnnl_sgemm(ta == 112 ? 'T' : 'N', tb == 112 ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (status) { fprintf(stderr, "tg: oneDNN's sgemm refused a %d x %d x %d product (status %d)\n", m, n, k, status); abort(); }
}
/* y = op(A) x (cblas_sgemv's arguments, row-major, y contiguous) as a one-row
 * product, x as a 1 x K matrix (strided: the transpose of a K x 1 one):
 * oneDNN's matrix-vector kernels read A at 1.3 to 1.7 times OpenBLAS's
 * Prescott ones' speed (docs/performance.md) */
static inline void tg_sgemv(int order, int ta, int m, int n, float alpha, const float *a, int lda, const float *x,
                            int incx, float beta, float *y, int incy) {
  if (incy != 1) { cblas_sgemv(order, ta, m, n, alpha, a, lda, x, incx, beta, y, incy); return; }
  int k = ta == 112 ? m : n, cols = ta == 112 ? n : m; /* y[cols] = x[k] op(A)^T */
  int status = dnnl_sgemm(incx == 1 ? 'N' : 'T', ta == 112 ? 'N' : 'T', 1, cols, k, alpha, x, incx == 1 ? k : incx, a,
                          lda, beta, y, cols);
  if (status) { fprintf(stderr, "tg: oneDNN's sgemm refused a 1 x %d x %d product (status %d)\n", cols, k, status); abort(); }
}
#else
static inline void tg_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                            const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static inline void tg_sgemv(int order, int ta, int m, int n, float alpha, const float *a, int lda, const float *x,
                            int incx, float beta, float *y, int incy) {
  cblas_sgemv(order, ta, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
#endif

