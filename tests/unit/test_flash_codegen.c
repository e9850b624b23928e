/* test_flash_codegen.c: the flash attention code generators (codegen/flash.h).
 *
 * The C renderer is checked by running it: the emitted forward and backward
 * are compiled with the system compiler into a shared object, loaded, and
 * run on random inputs laid out like GPT-2's (q, k, v strided views of one
 * [nb, T, 3*nh*D] qkv buffer), against a double-precision reference
 * computed from the definitions (docs/ir.md; flash_ref.h).  T = 37 is not a
 * multiple of the tile, T = 1 is a single row, T = 64 is whole tiles, T = 150
 * is several tiles with D = 24 not a multiple of the products' 16 columns,
 * D = 48 not of AVX-512's 32 and D = 160 with 16-row tiles; each built for
 * the baseline x86-64 and, as the CPU backend builds it, -march=native.
 *
 * Tolerance (f32 cases): every output is a sum over at most T keys of
 * terms that are themselves D-term dot products, summed in f32 in some
 * order, plus expf/logf (an ulp or two each).  The rounding error of such
 * sums is at most about (T + D) u times the sum of the terms' magnitudes
 * (u = 2^-24 = 6e-8); with T, D <= 64 and inputs of size O(1) that sum is
 * within a small factor of the largest output, giving ~1e-5 of the largest
 * |reference| at worst and ~1e-6 in practice (errors add up like a random
 * walk).  Errors are measured as max |got - ref| / max |ref| per tensor and
 * allowed 2e-5.  A wrong formula (a missing scale, a mask off by one key,
 * a rescale forgotten between tiles) is off by 1e-2 or more.
 *
 * The bf16 case stores q, k, v, do and the outputs as bf16: the inputs are
 * rounded before the reference sees them, so only the output rounding
 * (2^-9 relative) and f32 arithmetic remain; allowed 1e-2.
 *
 * The CUDA renderer's source is checked here for what NVRTC needs (no
 * #include), for the tensor-core instruction, for one `// tg kernel:` line
 * per launch, and for being the same bytes each time; it is run, on the
 * emulated device, against the same reference (flash_ref.h) in
 * test_cuda_emu_flash.c. */
#include <dlfcn.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flash_c.h"
#include "flash_cuda.h"
#include "flash_ref.h"
#include "testutil.h"

extern char **environ;

/* ---- compiling emitted C ---------------------------------------------------- */

static char tmpdir[64];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tg_flash_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  char path[128];
  const char *names[] = {"flash.c", "flash.so"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
    unlink(path);
  }
  rmdir(tmpdir);
}

/* Writes the forward and backward of s as C, compiles them with warnings
 * as errors, and loads the result. */
static void *build_c(const tg_flash_shape *s, bool native) {
  char src[128], so[128];
  snprintf(src, sizeof src, "%s/flash.c", tmpdir);
  snprintf(so, sizeof so, "%s/flash.so", tmpdir);
  FILE *f = fopen(src, "w");
  ck_assert_ptr_nonnull(f);
  tg_flash_emit_c_fwd(f, "attn_fwd", s);
  tg_flash_emit_c_bwd(f, "attn_bwd", s);
  ck_assert_int_eq(fclose(f), 0);
  /* native: as the CPU backend builds it (runtime/backend/cpu: GNU C, so
   * multiply-adds contract into FMAs, and -march=native: AVX-512's 16-float
   * vectors where this CPU has them, AVX2's 8 where it has those); else ISO
   * C11 for the baseline x86-64 (pairs of SSE registers, no FMA) */
  char *argv[] = {"cc", native ? "-std=gnu11" : "-std=c11", "-O2", "-fopenmp", "-fPIC", "-shared", "-Wall",
                  "-Wextra", "-Werror", "-o", so, src, "-lm", native ? "-march=native" : NULL, NULL};
  pid_t pid;
  ck_assert_int_eq(posix_spawnp(&pid, "cc", NULL, NULL, argv, environ), 0);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "cc failed on the emitted %s (kept)", src);
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  /* the mapping outlives the files: remove them now, before a failed check
   * can end the test */
  remove_tmpdir();
  ck_assert_msg(h != NULL, "dlopen: %s", dlerror());
  return h;
}

/* ---- running the emitted C ---------------------------------------------------- */

typedef void fwd32(const float *, const float *, const float *, float *, float *);
typedef void bwd32(const float *, const float *, const float *, const float *, const float *, const float *,
                   float *, float *, float *);
typedef void fwd16(const uint16_t *, const uint16_t *, const uint16_t *, uint16_t *, float *);
typedef void bwd16(const uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, const float *,
                   const uint16_t *, uint16_t *, uint16_t *, uint16_t *);

typedef struct outs {
  buf o, lse, dq, dk, dv;
} outs;

static outs run_c(void *h, const tg_flash_shape *s, const buf *qkv, const buf *dout) {
  bool bf = s->q.bf16;
  outs r = {buf_new(extent(s, &s->o, true), bf), buf_new(extent(s, &s->lse, false), false),
            buf_new(extent(s, &s->dq, true), bf), buf_new(extent(s, &s->dk, true), bf),
            buf_new(extent(s, &s->dv, true), bf)};
  void *fwd = dlsym(h, "attn_fwd"), *bwd = dlsym(h, "attn_bwd");
  ck_assert_msg(fwd && bwd, "symbols missing: %s", dlerror());
  if (bf) {
    const uint16_t *x = qkv->p;
    ((fwd16 *)fwd)(x, x, x, r.o.p, r.lse.p);
    ((bwd16 *)bwd)(x, x, x, r.o.p, r.lse.p, dout->p, r.dq.p, r.dk.p, r.dv.p);
  } else {
    const float *x = qkv->p;
    ((fwd32 *)fwd)(x, x, x, r.o.p, r.lse.p);
    ((bwd32 *)bwd)(x, x, x, r.o.p, r.lse.p, dout->p, r.dq.p, r.dk.p, r.dv.p);
  }
  return r;
}

static void outs_free(outs *o) {
  buf *b[] = {&o->o, &o->lse, &o->dq, &o->dk, &o->dv};
  for (int i = 0; i < 5; i++) free(b[i]->p);
}

static bool same_bytes(const buf *a, const buf *b) {
  return memcmp(a->p, b->p, (size_t)a->n * (a->bf16 ? 2 : 4)) == 0;
}

typedef struct ccase {
  int64_t nb, nh, T, D;
  double scale, amp; /* inputs uniform in [-amp, amp] */
  bool bf16, odd; /* odd: odd_shape's layouts */
  double tol;
} ccase;

static const ccase ccases[] = {
    {2, 3, 37, 16, 0.5, 2.0, false, false, 2e-5}, /* scores spread over ~±10: the running max moves */
    {2, 3, 37, 64, 0.125, 1.0, false, false, 2e-5},
    {2, 3, 1, 16, 0.25, 1.0, false, false, 2e-5},
    {2, 3, 1, 64, 0.125, 1.0, false, false, 2e-5},
    {2, 3, 64, 16, 0.25, 2.0, false, false, 2e-5},
    {2, 3, 64, 64, 0.125, 1.0, false, false, 2e-5},
    {2, 3, 37, 64, 0.125, 1.0, true, false, 1e-2},
    {1, 2, 100, 128, 0.088, 1.0, false, false, 2e-5}, /* D > 64: the smaller tile, several tiles */
    {1, 2, 150, 24, 0.2, 2.0, false, false, 2e-5},    /* three 64-row tiles, the last part full; D padded to 32 */
    {1, 2, 70, 48, 0.14, 1.0, false, false, 2e-5},    /* 48 columns: AVX-512's two vectors, then one */
    {1, 1, 40, 160, 0.08, 1.0, false, false, 2e-5},   /* D > 128: 16-row tiles, 16 keys: one vector */
    {2, 3, 37, 16, 0.25, 1.0, false, true, 2e-5},
};

START_TEST(test_c_matches_reference) {
  const ccase *c = &ccases[_i / 2];
  const bool native = _i % 2;
  tg_flash_shape s = (c->odd ? odd_shape : gpt2_shape)(c->nb, c->nh, c->T, c->D, c->scale, c->bf16);
  char why[200];
  ck_assert_msg(tg_flash_supported_c(&s, why, sizeof why), "%s", why);
  make_tmpdir();
  void *h = build_c(&s, native);

  int64_t nqkv = extent(&s, &s.v, true), n = extent(&s, &s.dout, true); /* v ends last in qkv */
  buf qkv = buf_new(nqkv, c->bf16), dout = buf_new(n, c->bf16);
  for (int64_t i = 0; i < nqkv; i++) buf_set(&qkv, i, c->amp * uniform());
  for (int64_t i = 0; i < n; i++) buf_set(&dout, i, uniform());
  ref r = reference(&s, &qkv, &dout);

  outs got = run_c(h, &s, &qkv, &dout);
  double e[5] = {rel_err(&s, &s.o, &got.o, r.o, true), rel_err(&s, &s.lse, &got.lse, r.lse, false),
                 rel_err(&s, &s.dq, &got.dq, r.dq, true), rel_err(&s, &s.dk, &got.dk, r.dk, true),
                 rel_err(&s, &s.dv, &got.dv, r.dv, true)};
  printf("flash C nb=%d nh=%d T=%d D=%d %s%s%s: max error / max |ref|: "
         "o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
         (int)c->nb, (int)c->nh, (int)c->T, (int)c->D, c->bf16 ? "bf16" : "f32", c->odd ? " odd layouts" : "",
         native ? ", -march=native" : "", e[0], e[1], e[2], e[3], e[4]);
  const char *names[] = {"o", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; i++)
    ck_assert_msg(e[i] <= c->tol, "T=%d D=%d: %s off by %.3g (allowed %.3g)", (int)c->T, (int)c->D, names[i],
                  e[i], c->tol);

  /* the same bits again: nothing depends on the thread schedule or on
   * what the outputs held before */
  outs again = run_c(h, &s, &qkv, &dout);
  ck_assert(same_bytes(&got.o, &again.o) && same_bytes(&got.lse, &again.lse));
  ck_assert(same_bytes(&got.dq, &again.dq) && same_bytes(&got.dk, &again.dk) && same_bytes(&got.dv, &again.dv));

  outs_free(&got);
  outs_free(&again);
  ref_free(&r);
  free(qkv.p);
  free(dout.p);
  /* no dlclose: libgomp came in with the object and would be unmapped
   * under its idle worker threads */
}
END_TEST

START_TEST(test_c_refuses) {
  char why[200];
  tg_flash_shape s = gpt2_shape(1, 1, 8, 320, 0.1, false);
  ck_assert(!tg_flash_supported_c(&s, why, sizeof why));
  ck_assert_msg(strstr(why, "D=320") && strstr(why, "256"), "%s", why);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  tg_flash_emit_c_fwd(f, "attn_fwd", &s);
  fclose(f);
  ck_assert_msg(strstr(text, "#error \"attn_fwd: flash attention: head size D=320"), "%s", text);
  free(text);
  s = gpt2_shape(1, 1, 0, 16, 0.1, false);
  ck_assert(!tg_flash_supported_c(&s, why, sizeof why));
  ck_assert_msg(strstr(why, "empty shape"), "%s", why);
  s = gpt2_shape(1, 1, 8, 256, 0.1, false);
  ck_assert(tg_flash_supported_c(&s, why, sizeof why));
}
END_TEST

/* ---- CUDA source --------------------------------------------------------------- */

static char *emit_cuda(const tg_flash_shape *s, const char *prefix, bool backward) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  tg_flash_emit_cuda(f, prefix, s, backward);
  ck_assert_int_eq(fclose(f), 0);
  return text;
}

static const int64_t cuda_shapes[][2] = {{37, 16}, {37, 64}, {1, 16}, {64, 64}, {100, 128}}; /* T, D */

START_TEST(test_cuda_source) {
  int64_t T = cuda_shapes[_i][0], D = cuda_shapes[_i][1];
  tg_flash_shape s = gpt2_shape(2, 3, T, D, 0.125, false);
  char why[200];
  ck_assert_msg(tg_flash_supported(&s, why, sizeof why), "%s", why);
  for (int bwd = 0; bwd < 2; bwd++) {
    char *a = emit_cuda(&s, "attn7", bwd), *b = emit_cuda(&s, "attn7", bwd);
    ck_assert_msg(strcmp(a, b) == 0, "T=%d D=%d: two emissions differ", (int)T, (int)D);
    ck_assert_msg(!strstr(a, "#include"), "NVRTC has no include path");
    ck_assert_msg(!strstr(a, "#error \"attn7"), "refused: %.300s", strstr(a, "#error \"attn7"));
    ck_assert(strstr(a, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
    ck_assert(strstr(a, "cvt.rn.bf16x2.f32"));

    tg_flash_launch l[TG_FLASH_MAX_LAUNCHES];
    int n = tg_flash_cuda_launches(&s, "attn7", bwd, l);
    ck_assert_int_eq(n, bwd ? 2 : 1);
    int kernels = 0;
    for (const char *p = a; (p = strstr(p, "// tg kernel: ")); p++) kernels++;
    ck_assert_int_eq(kernels, n);
    for (int i = 0; i < n; i++) {
      char line[1024], decl[1024]; /* roomy: gcc does not bound the length of name */
      snprintf(line, sizeof line, "// tg kernel: %s\n", l[i].name);
      snprintf(decl, sizeof decl, " %s(\n", l[i].name);
      ck_assert_msg(strstr(a, line) && strstr(a, decl), "no kernel %s", l[i].name);
      ck_assert_uint_eq(l[i].grid[0], (unsigned)((T + 63) / 64));
      ck_assert_uint_eq(l[i].grid[1], 3);
      ck_assert_uint_eq(l[i].grid[2], 2);
      ck_assert_uint_eq(l[i].block[0] * l[i].block[1] * l[i].block[2], 128);
      ck_assert_uint_eq(l[i].shmem, 0);
    }
    ck_assert_str_eq(l[0].name, bwd ? "attn7_bwd_dkdv" : "attn7_fwd");
    if (bwd) ck_assert_str_eq(l[1].name, "attn7_bwd_dq");
    free(a);
    free(b);
  }
}
END_TEST

START_TEST(test_cuda_shape_in_source) {
  /* strides, offsets and the scale are constants of the source */
  tg_flash_shape s = gpt2_shape(2, 3, 37, 64, 0.125, false), t = s;
  t.k.offset += 1;
  char *a = emit_cuda(&s, "attn", false), *b = emit_cuda(&t, "attn", false);
  ck_assert(strcmp(a, b) != 0);
  free(b);
  t = s;
  t.scale = 0.25;
  b = emit_cuda(&t, "attn", false);
  ck_assert(strcmp(a, b) != 0);
  free(b);
  t = s;
  t.o.bf16 = true;
  b = emit_cuda(&t, "attn", false);
  ck_assert_msg(strstr(b, "TG_ARG(unsigned short) o"), "%s", b);
  free(a);
  free(b);
}
END_TEST

START_TEST(test_cuda_refuses) {
  char why[200];
  const int64_t bad_d[] = {8, 24, 144, 256};
  for (int i = 0; i < 4; i++) {
    tg_flash_shape s = gpt2_shape(2, 3, 37, bad_d[i], 0.1, false);
    ck_assert(!tg_flash_supported(&s, why, sizeof why));
    ck_assert_msg(strstr(why, "not a multiple of 16 up to 128"), "%s", why);
    tg_flash_launch l[TG_FLASH_MAX_LAUNCHES];
    ck_assert_int_eq(tg_flash_cuda_launches(&s, "attn", true, l), 0);
    char *text = emit_cuda(&s, "attn", true);
    ck_assert_msg(strstr(text, "#error \"attn: flash attention (CUDA): head size D="), "%s", text);
    ck_assert(!strstr(text, "__global__"));
    free(text);
  }
  tg_flash_shape s = gpt2_shape(2, 70000, 37, 64, 0.1, false);
  ck_assert(!tg_flash_supported(&s, why, sizeof why));
  ck_assert_msg(strstr(why, "65535"), "%s", why);
  s = gpt2_shape(2, 3, 37, 64, 0.1, false);
  tg_flash_launch l[TG_FLASH_MAX_LAUNCHES];
  ck_assert_int_eq(tg_flash_cuda_launches(&s, "not a name", false, l), 0);
  char *text = emit_cuda(&s, "9attn", false);
  ck_assert(strstr(text, "#error \"flash attention: kernel prefix") && !strstr(text, "__global__"));
  free(text);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("flash_codegen");
  TCase *c = tcase_create("c");
  tcase_set_timeout(c, 120);
  tcase_add_loop_test(c, test_c_matches_reference, 0, 2 * (int)(sizeof ccases / sizeof ccases[0]));
  tcase_add_test(c, test_c_refuses);
  suite_add_tcase(s, c);
  TCase *cu = tcase_create("cuda");
  tcase_add_loop_test(cu, test_cuda_source, 0, (int)(sizeof cuda_shapes / sizeof cuda_shapes[0]));
  tcase_add_test(cu, test_cuda_shape_in_source);
  tcase_add_test(cu, test_cuda_refuses);
  suite_add_tcase(s, cu);
  return s;
}

int main(void) { return tu_run(suite()); }
