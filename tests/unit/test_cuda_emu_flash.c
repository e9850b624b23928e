/* test_cuda_emu_flash.c: the CUDA flash attention (codegen/cuda/flash_cuda.c) run
 * on the emulated device, against the double-precision reference of
 * flash_ref.h, on GPT-2's layout (q, k, v strided views of one qkv buffer)
 * and an odd one, f32 and bf16, T = 1 (one row), 37 (not a multiple of the
 * tile), 64 (whole tiles), 100 with D = 128 (the smaller backward tile,
 * several tiles), and in bf16 200 with D = 64 and 100 with D = 128: bf16
 * operands in GPT-2's layout are staged with cp.async, two stages deep, and
 * these go through several tiles of each kernel (the emulator fails a
 * launch that touches a tile before the cp.async.wait_group covering it).
 *
 * Every case's kernels go into one module (a prefix each), launched as
 * tg_flash_cuda_launches says, each argument described with its extent so
 * that an access outside an operand's own buffer fails the launch.  The
 * emulator checks every shared-memory access for races, so the kernels'
 * barriers are checked too, and runs mma and ldmatrix with the PTX ISA's
 * fragment layouts: a layout bug shows as an error of order 1.
 *
 * Tolerances.  The kernels stage q, k, v and do in shared memory as bf16
 * (rounded to nearest even: relative error u = 2^-9 ~ 2e-3 each) and round
 * P and dS to bf16 before their products; accumulation is f32.  The
 * reference is computed from the inputs as the kernels see them after
 * staging (rounded to bf16), so what remains is the rounding of P and dS
 * and f32 arithmetic.  Each output is a sum over at most T keys of terms
 * p_j x_j with p_j >= 0 summing to 1 (o, dv) or of dS terms (dq, dk);
 * rounding each p_j (or dS_j) by u moves the sum by at most u times the
 * sum of the magnitudes, which is within a small factor of the largest
 * output, so errors stay near u ~ 2e-3 of max |ref| and, the roundings
 * being independent, usually well below.  The scores feed exp, whose
 * relative error is the scores' absolute error: the f32 dot products of
 * D <= 128 rounded operands, ~1e-6.  ex2/lg2 are within 2 ulp.  dq and dk
 * add the cancellation in dP - Di (Di from the unrounded f32 operands in
 * the kernel, the rounded ones in the reference): of order u again.  So:
 * 1e-2 of max |ref| for every output (about 5u); bf16 outputs add their own
 * rounding (u): 1.5e-2.  A missing scale, a mask off by one key, a
 * transposed fragment or a rescale forgotten between tiles is off by 1e-1
 * or more. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_api.h"
#include "flash_cuda.h"
#include "flash_ref.h"

static tg_cuda_api api;
static CUcontext ctx;

#define CK(call)                                                                                                    \
  do {                                                                                                              \
    CUresult r_ = (call);                                                                                           \
    ck_assert_msg(r_ == CUDA_SUCCESS, "%s: %d: %s", #call, r_, api.emu_last_error());                               \
  } while (0)

typedef struct ecase {
  int64_t nb, nh, T, D;
  double scale, amp; /* inputs uniform in [-amp, amp] */
  bool bf16, odd;
  double tol;
} ecase;

static const ecase cases[] = {
    {2, 3, 37, 16, 0.5, 2.0, false, false, 1e-2}, /* scores over ~±10: the running max moves */
    {2, 3, 37, 64, 0.125, 1.0, false, false, 1e-2},
    {2, 3, 1, 16, 0.25, 1.0, false, false, 1e-2},
    {2, 3, 1, 64, 0.125, 1.0, false, false, 1e-2},
    {2, 3, 64, 16, 0.25, 2.0, false, false, 1e-2},
    {2, 3, 64, 64, 0.125, 1.0, false, false, 1e-2},
    {2, 3, 37, 64, 0.125, 1.0, true, false, 1.5e-2},
    {2, 3, 1, 16, 0.25, 1.0, true, false, 1.5e-2},
    {2, 3, 64, 16, 0.25, 1.0, true, false, 1.5e-2},
    {1, 2, 100, 128, 0.088, 1.0, false, false, 1e-2}, /* D > 64: the smaller tile, several tiles */
    /* bf16 in GPT-2's layout is staged with cp.async: several tiles through both stages, the
     * last one partial (T not a multiple of 64) and the diagonal; D = 128 has one stage in the
     * backward (two do not fit 48 KiB) */
    {1, 2, 200, 64, 0.125, 1.0, true, false, 1.5e-2},
    {1, 2, 100, 128, 0.088, 1.0, true, false, 1.5e-2},
    {2, 3, 37, 16, 0.25, 1.0, false, true, 1e-2},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

static tg_flash_shape shape_of(const ecase *c) {
  return (c->odd ? odd_shape : gpt2_shape)(c->nb, c->nh, c->T, c->D, c->scale, c->bf16);
}

/* Every case's forward and backward in one source, prefixes c0f and c0b,
 * c1f and c1b, ... (a prefix's helpers are emitted with its kernels) */
static char *source(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  for (int i = 0; i < NCASES; i++) {
    tg_flash_shape s = shape_of(&cases[i]);
    char prefix[16];
    snprintf(prefix, sizeof prefix, "c%df", i);
    tg_flash_emit_cuda(f, prefix, &s, false);
    snprintf(prefix, sizeof prefix, "c%db", i);
    tg_flash_emit_cuda(f, prefix, &s, true);
  }
  fputs("#ifndef __CUDA_ARCH__\nTG_EMU_KERNEL_TABLE(\n", f);
  for (int i = 0; i < NCASES; i++)
    fprintf(f, "  TG_EMU_KERNEL(c%df_fwd) TG_EMU_KERNEL(c%db_bwd_dkdv) TG_EMU_KERNEL(c%db_bwd_dq)\n", i, i, i);
  fputs(")\n#endif\n", f);
  fclose(f);
  return text;
}

static char image_path[4096];

static void setup(void) {
  tg_cuda_api_emulated(&api);
  CK(api.cuInit(0));
  CK(api.cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(api.cuCtxSetCurrent(ctx));
}

static void teardown(void) { api.cuDevicePrimaryCtxRelease(0); }

static CUmodule module(void) {
  if (!image_path[0]) {
    char *src = source();
    void *image;
    size_t size;
    bool hit;
    char err[16384];
    bool ok = api.compile(src, "flash_test.cu", "sm_90", &image, &size, &hit, err, sizeof err);
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

/* A device copy of a host buffer (outputs start as NaN: an element left
 * unwritten shows). */
static CUdeviceptr upload(const buf *b) {
  CUdeviceptr p;
  size_t bytes = (size_t)b->n * (b->bf16 ? 2 : 4);
  CK(api.cuMemAlloc(&p, bytes));
  CK(api.cuMemcpyHtoD(p, b->p, bytes));
  return p;
}

static void download(buf *b, CUdeviceptr p) { CK(api.cuMemcpyDtoH(b->p, p, (size_t)b->n * (b->bf16 ? 2 : 4))); }

typedef struct dev {
  buf qkv, dout, o, lse, dq, dk, dv;
  CUdeviceptr d[7];
} dev;

/* Runs case c's forward then backward, each launch described. */
static void run(CUmodule m, int ci, const tg_flash_shape *s, dev *x) {
  static const char *const fwd_names[] = {"q", "k", "v", "o", "lse"};
  static const char *const bwd_names[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
  CUdeviceptr qkv = x->d[0];
  /* q, k and v are views of one buffer: each argument's extent is qkv's
   * from its own start */
  size_t qkv_bytes = (size_t)x->qkv.n * (x->qkv.bf16 ? 2 : 4);
  size_t out_bytes[7];
  for (int i = 0; i < 7; i++) {
    const buf *b[] = {&x->qkv, &x->dout, &x->o, &x->lse, &x->dq, &x->dk, &x->dv};
    out_bytes[i] = (size_t)b[i]->n * (b[i]->bf16 ? 2 : 4);
  }
  for (int bwd = 0; bwd < 2; bwd++) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "c%d%c", ci, bwd ? 'b' : 'f');
    tg_flash_launch l[TG_FLASH_MAX_LAUNCHES];
    int n = tg_flash_cuda_launches(s, prefix, bwd, l);
    ck_assert_int_eq(n, bwd ? 2 : 1);
    /* the kernels take base pointers: q, k and v all point at qkv */
    CUdeviceptr q = qkv, k = qkv, v = qkv, o = x->d[2], lse = x->d[3], dout = x->d[1], dq = x->d[4], dk = x->d[5],
                dv = x->d[6];
    void *fargs[] = {&q, &k, &v, &o, &lse};
    void *bargs[] = {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv};
    size_t fbytes[] = {qkv_bytes, qkv_bytes, qkv_bytes, out_bytes[2], out_bytes[3]};
    size_t bbytes[] = {qkv_bytes, qkv_bytes, qkv_bytes, out_bytes[2], out_bytes[3], out_bytes[1], out_bytes[4],
                       out_bytes[5], out_bytes[6]};
    for (int i = 0; i < n; i++) {
      CUfunction f;
      CK(api.cuModuleGetFunction(&f, m, l[i].name));
      api.emu_describe_launch(l[i].name, "flash attention test", bwd ? 9 : 5, bwd ? bwd_names : fwd_names,
                              bwd ? bbytes : fbytes);
      CK(api.cuLaunchKernel(f, l[i].grid[0], l[i].grid[1], l[i].grid[2], l[i].block[0], l[i].block[1], l[i].block[2],
                            (unsigned)l[i].shmem, NULL, bwd ? bargs : fargs, NULL));
    }
  }
  download(&x->o, x->d[2]);
  download(&x->lse, x->d[3]);
  download(&x->dq, x->d[4]);
  download(&x->dk, x->d[5]);
  download(&x->dv, x->d[6]);
}

static bool same(const buf *a, const buf *b) { return !memcmp(a->p, b->p, (size_t)a->n * (a->bf16 ? 2 : 4)); }

START_TEST(test_flash_on_emulator) {
  const ecase *c = &cases[_i];
  tg_flash_shape s = shape_of(c);
  CUmodule m = module();
  int64_t nqkv = extent(&s, &s.v, true), n = extent(&s, &s.dout, true);
  dev x;
  x.qkv = buf_new(nqkv, c->bf16);
  x.dout = buf_new(n, c->bf16);
  for (int64_t i = 0; i < nqkv; i++) buf_set(&x.qkv, i, c->amp * uniform());
  for (int64_t i = 0; i < n; i++) buf_set(&x.dout, i, uniform());
  /* the reference sees the inputs as the kernels stage them: rounded to bf16 */
  buf rq = buf_new(nqkv, false), rd = buf_new(n, false);
  for (int64_t i = 0; i < nqkv; i++) buf_set(&rq, i, from_bf16(to_bf16((float)buf_get(&x.qkv, i))));
  for (int64_t i = 0; i < n; i++) buf_set(&rd, i, from_bf16(to_bf16((float)buf_get(&x.dout, i))));
  ref r = reference(&s, &rq, &rd);

  x.o = buf_new(extent(&s, &s.o, true), c->bf16);
  x.lse = buf_new(extent(&s, &s.lse, false), false);
  x.dq = buf_new(extent(&s, &s.dq, true), c->bf16);
  x.dk = buf_new(extent(&s, &s.dk, true), c->bf16);
  x.dv = buf_new(extent(&s, &s.dv, true), c->bf16);
  const buf *all[] = {&x.qkv, &x.dout, &x.o, &x.lse, &x.dq, &x.dk, &x.dv};
  for (int i = 0; i < 7; i++) x.d[i] = upload(all[i]);
  run(m, _i, &s, &x);

  double e[5] = {rel_err(&s, &s.o, &x.o, r.o, true), rel_err(&s, &s.lse, &x.lse, r.lse, false),
                 rel_err(&s, &s.dq, &x.dq, r.dq, true), rel_err(&s, &s.dk, &x.dk, r.dk, true),
                 rel_err(&s, &s.dv, &x.dv, r.dv, true)};
  printf("flash CUDA (emulated) nb=%d nh=%d T=%d D=%d %s%s: max error / max |ref|: o %.2e lse %.2e dq %.2e "
         "dk %.2e dv %.2e\n",
         (int)c->nb, (int)c->nh, (int)c->T, (int)c->D, c->bf16 ? "bf16" : "f32", c->odd ? " odd layouts" : "", e[0],
         e[1], e[2], e[3], e[4]);
  const char *names[] = {"o", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; i++)
    ck_assert_msg(e[i] <= c->tol, "T=%d D=%d: %s off by %.3g (allowed %.3g)", (int)c->T, (int)c->D, names[i], e[i],
                  c->tol);

  /* the same bits again: the kernels are deterministic, and so is the emulator */
  dev y = x;
  y.o = buf_new(x.o.n, c->bf16);
  y.lse = buf_new(x.lse.n, false);
  y.dq = buf_new(x.dq.n, c->bf16);
  y.dk = buf_new(x.dk.n, c->bf16);
  y.dv = buf_new(x.dv.n, c->bf16);
  run(m, _i, &s, &y);
  ck_assert(same(&x.o, &y.o) && same(&x.lse, &y.lse) && same(&x.dq, &y.dq) && same(&x.dk, &y.dk) &&
            same(&x.dv, &y.dv));
  for (int i = 0; i < 7; i++) CK(api.cuMemFree(x.d[i]));
  buf *owned[] = {&x.qkv, &x.dout, &x.o, &x.lse, &x.dq, &x.dk, &x.dv, &y.o, &y.lse, &y.dq, &y.dk, &y.dv, &rq, &rd};
  for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) free(owned[i]->p);
  ref_free(&r);
}
END_TEST

/* An operand described one row shorter than the kernels read: the
 * description, not the allocation, is the bound. */
START_TEST(test_flash_reads_past_a_short_operand) {
  const ecase *c = &cases[1];
  tg_flash_shape s = shape_of(c);
  CUmodule m = module();
  int64_t nqkv = extent(&s, &s.v, true);
  buf qkv = buf_new(nqkv, false);
  for (int64_t i = 0; i < nqkv; i++) buf_set(&qkv, i, uniform());
  buf o = buf_new(extent(&s, &s.o, true), false), lse = buf_new(extent(&s, &s.lse, false), false);
  CUdeviceptr dq = upload(&qkv), dol = upload(&o), dl = upload(&lse);
  CUdeviceptr q = dq, k = dq, v = dq;
  void *args[] = {&q, &k, &v, &dol, &dl};
  const char *names[] = {"qkv", "qkv+k", "qkv+v", "o", "lse"};
  size_t qkv_bytes = (size_t)nqkv * 4;
  size_t bytes[] = {qkv_bytes, qkv_bytes, qkv_bytes, (size_t)o.n * 4 - 4 * (size_t)s.D, (size_t)lse.n * 4};
  tg_flash_launch l[TG_FLASH_MAX_LAUNCHES];
  ck_assert_int_eq(tg_flash_cuda_launches(&s, "c1f", false, l), 1);
  CUfunction f;
  CK(api.cuModuleGetFunction(&f, m, l[0].name));
  api.emu_describe_launch(l[0].name, NULL, 5, names, bytes);
  CUresult rc = api.cuLaunchKernel(f, l[0].grid[0], l[0].grid[1], l[0].grid[2], l[0].block[0], 1, 1, 0, NULL, args, NULL);
  ck_assert_int_eq(rc, CUDA_ERROR_ILLEGAL_ADDRESS);
  const char *msg = api.emu_last_error();
  printf("expected failure: %s\n", msg);
  ck_assert_msg(strstr(msg, "kernel c1f_fwd") && strstr(msg, "past the end of argument o"), "%s", msg);
  free(qkv.p), free(o.p), free(lse.p);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_emu_flash");
  TCase *t = tcase_create("flash");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 1200);
  tcase_add_loop_test(t, test_flash_on_emulator, 0, NCASES);
  tcase_add_test(t, test_flash_reads_past_a_short_operand);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  char dir[] = "/tmp/tg_cuda_emu_flash_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("TG_CACHE", dir, 1);
  int rc = tu_run(suite());
  tu_remove_tree(dir);
  return rc;
}
