/* test_nvrtc.c: CUDA source to CUBIN through NVRTC, and its cache.
 *
 * NVRTC needs no GPU and is part of every build machine's setup, so these
 * tests fail, rather than skip, when it cannot be loaded: a silent skip
 * would let CI stop compiling the generated kernels without anyone seeing.
 *
 * A small kernel compiles for sm_80 and sm_90 with an empty log; the same
 * compile again is a cache hit with the same bytes, and a change of
 * architecture, option or source is a miss.  A warning comes back in the
 * log (from the cache too).  An error in the second of two marked kernels
 * is reported with NVRTC's message and that kernel's name only.
 *
 * Every test points TG_CACHE at a fresh directory under /tmp. */
#include "testutil.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "nvrtc.h"

static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_nvrtc_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  setenv("TG_CACHE", dir, 1);
}

static void teardown(void) { tu_remove_tree(dir); }

static const char scale_src[] =
    "// tg kernel: scale\n"
    "extern \"C\" __global__ void scale(float *x, float a, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] *= a;\n"
    "}\n";

static bool is_elf(const tg_cubin *c) { return c->size > 4 && !memcmp(c->data, "\x7f" "ELF", 4); }

static void compile_ok(const char *src, const char *arch, const char *const *opts, int nopts,
                       tg_cubin *out) {
  char err[8192];
  ck_assert_msg(tg_nvrtc_compile(src, "tg_test.cu", arch, opts, nopts, out, err, sizeof err),
                "compiling for %s: %s", arch, err);
  ck_assert_msg(is_elf(out), "the CUBIN for %s is not an ELF image", arch);
}

START_TEST(version) {
  char err[4096];
  int major = 0, minor = -1;
  ck_assert_msg(tg_nvrtc_version(&major, &minor, err, sizeof err), "%s", err);
  ck_assert_int_ge(major, 12);
  ck_assert_int_ge(minor, 0);
}
END_TEST

START_TEST(compiles_cleanly_and_caches) {
  tg_cubin a, b, c;
  compile_ok(scale_src, "sm_80", NULL, 0, &a);
  ck_assert(!a.from_cache);
  ck_assert_msg(!strcmp(a.log, ""), "sm_80 log not empty: %s", a.log);

  compile_ok(scale_src, "sm_80", NULL, 0, &b);
  ck_assert(b.from_cache);
  ck_assert_uint_eq(a.size, b.size);
  ck_assert(!memcmp(a.data, b.data, a.size));
  ck_assert_str_eq(b.log, "");

  compile_ok(scale_src, "sm_90", NULL, 0, &c);
  ck_assert(!c.from_cache);
  ck_assert_msg(!strcmp(c.log, ""), "sm_90 log not empty: %s", c.log);
  ck_assert(c.size != a.size || memcmp(c.data, a.data, a.size));
  tg_cubin_free(&a);
  tg_cubin_free(&b);
  tg_cubin_free(&c);

  /* The second architecture is cached on its own. */
  compile_ok(scale_src, "sm_90", NULL, 0, &c);
  ck_assert(c.from_cache);
  tg_cubin_free(&c);
}
END_TEST

START_TEST(options_and_source_are_in_the_key) {
  tg_cubin a;
  compile_ok(scale_src, "sm_80", NULL, 0, &a);
  ck_assert(!a.from_cache);
  tg_cubin_free(&a);
  const char *opts[] = {"-DTG_TEST_UNUSED=1"};
  compile_ok(scale_src, "sm_80", opts, 1, &a);
  ck_assert(!a.from_cache);
  tg_cubin_free(&a);
  compile_ok(scale_src, "sm_80", opts, 1, &a);
  ck_assert(a.from_cache);
  tg_cubin_free(&a);
  char other[sizeof scale_src + 16];
  snprintf(other, sizeof other, "%s\n", scale_src);
  compile_ok(other, "sm_80", opts, 1, &a);
  ck_assert(!a.from_cache);
  tg_cubin_free(&a);
}
END_TEST

/* A warning does not fail the compile, but shows in the log, so that a
 * test of generated code can insist on an empty one; a hit keeps it. */
START_TEST(warnings_come_back_in_the_log) {
  const char *src = "// tg kernel: noisy\n"
                    "extern \"C\" __global__ void noisy(float *x) {\n"
                    "  int unused_variable = 3;\n"
                    "  x[0] = 1.0f;\n"
                    "}\n";
  tg_cubin a, b;
  compile_ok(src, "sm_80", NULL, 0, &a);
  ck_assert_msg(strstr(a.log, "warning") && strstr(a.log, "unused_variable"), "log: %s", a.log);
  compile_ok(src, "sm_80", NULL, 0, &b);
  ck_assert(b.from_cache);
  ck_assert_str_eq(b.log, a.log);
  tg_cubin_free(&a);
  tg_cubin_free(&b);
}
END_TEST

START_TEST(error_names_the_kernel) {
  const char *src = "#define N 4\n"
                    "// tg kernel: first_kernel\n"
                    "extern \"C\" __global__ void first_kernel(float *x) {\n"
                    "  x[threadIdx.x % N] = 1.0f;\n"
                    "}\n"
                    "\n"
                    "// tg kernel: second_kernel\n"
                    "extern \"C\" __global__ void second_kernel(float *x) {\n"
                    "  x[0] = undeclared_thing;\n"
                    "}\n";
  char err[16384];
  tg_cubin out;
  for (int attempt = 0; attempt < 2; attempt++) { /* a failure is not cached */
    ck_assert(!tg_nvrtc_compile(src, "tg_test.cu", "sm_80", NULL, 0, &out, err, sizeof err));
    ck_assert_ptr_null(out.data);
    ck_assert_msg(strstr(err, "tg_test.cu(9): error: identifier \"undeclared_thing\" is undefined"),
                  "no NVRTC message in: %s", err);
    ck_assert_msg(strstr(err, "second_kernel"), "no kernel name in: %s", err);
    ck_assert_msg(strstr(err, "could not compile kernel second_kernel in tg_test.cu for sm_80"),
                  "%s", err);
    ck_assert_msg(strstr(err, "tg_test.cu(9) is in kernel second_kernel"), "%s", err);
    ck_assert_msg(!strstr(err, "first_kernel"), "the wrong kernel is named in: %s", err);
    tg_cubin_free(&out);
  }
}
END_TEST

/* Errors in two kernels name both; a line before any marker says so. */
START_TEST(errors_in_several_kernels) {
  const char *src = "__device__ int broken_global = nope;\n"
                    "// tg kernel: k_one\n"
                    "extern \"C\" __global__ void k_one(float *x) { x[0] = bad_one; }\n"
                    "// tg kernel: k_two\n"
                    "extern \"C\" __global__ void k_two(float *x) { x[0] = bad_two; }\n";
  char err[16384];
  tg_cubin out;
  ck_assert(!tg_nvrtc_compile(src, NULL, "sm_90", NULL, 0, &out, err, sizeof err));
  ck_assert_msg(strstr(err, "could not compile kernels k_one, k_two in tg.cu for sm_90"), "%s",
                err);
  ck_assert_msg(strstr(err, "tg.cu(1) is before the first kernel"), "%s", err);
  ck_assert_msg(strstr(err, "tg.cu(3) is in kernel k_one"), "%s", err);
  ck_assert_msg(strstr(err, "tg.cu(5) is in kernel k_two"), "%s", err);
}
END_TEST

START_TEST(bad_arguments) {
  char err[4096];
  tg_cubin out;
  ck_assert(!tg_nvrtc_compile(scale_src, NULL, "compute_80", NULL, 0, &out, err, sizeof err));
  ck_assert_msg(strstr(err, "compute_80"), "%s", err);
  ck_assert(!tg_nvrtc_compile(scale_src, NULL, "sm_", NULL, 0, &out, err, sizeof err));
  ck_assert(!tg_nvrtc_compile(scale_src, NULL, NULL, NULL, 0, &out, err, sizeof err));
  /* An option NVRTC does not know is its error, reported as such. */
  const char *opts[] = {"-Werror"};
  ck_assert(!tg_nvrtc_compile(scale_src, NULL, "sm_80", opts, 1, &out, err, sizeof err));
  ck_assert_msg(strstr(err, "unrecognized option -Werror"), "%s", err);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("nvrtc");
  TCase *t = tcase_create("nvrtc");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 120); /* each NVRTC compile takes about a second */
  tcase_add_test(t, version);
  tcase_add_test(t, compiles_cleanly_and_caches);
  tcase_add_test(t, options_and_source_are_in_the_key);
  tcase_add_test(t, warnings_come_back_in_the_log);
  tcase_add_test(t, error_names_the_kernel);
  tcase_add_test(t, errors_in_several_kernels);
  tcase_add_test(t, bad_arguments);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(suite()); }
