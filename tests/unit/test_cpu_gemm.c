/* test_cpu_gemm.c: the CPU backend's choice of matmul library
 * (runtime/backend/cpu/cpu_gemm.h): TG_CPU_GEMM's three values and a
 * wrong one, what each choice gives the C compiler, the library's name
 * with its kernels, and its sgemm timed on one core.  oneDNN's cases run
 * where libdnnl.so.2 loads (tools/install-deps.sh installs it); its
 * timing runs one OpenMP thread, so a sanitizer build can run it too. */
#include <check.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"

static bool onednn_installed(void) {
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != NULL;
}

static void choose(const char *value, tg_cpu_gemm *g, bool want_ok, char *why, size_t whylen) {
  if (value) setenv("TG_CPU_GEMM", value, 1);
  else unsetenv("TG_CPU_GEMM");
  why[0] = 0;
  bool ok = tg_cpu_gemm_choose(g, why, whylen);
  ck_assert_msg(ok == want_ok, "TG_CPU_GEMM=%s: %s (%s)", value ? value : "(unset)", ok ? "chosen" : "refused", why);
}

START_TEST(test_openblas_named_and_timed) {
  tg_cpu_gemm g;
  char why[300];
  choose("openblas", &g, true, why, sizeof why);
  ck_assert_int_eq(g.library, TG_CPU_GEMM_OPENBLAS);
  ck_assert_ptr_null(g.flag);      /* the generated C's default: cblas_sgemm */
  ck_assert_str_eq(g.link, "");    /* -lopenblas is linked always */
  ck_assert_msg(!strncmp(g.name, "OpenBLAS ", 9) && strstr(g.name, " kernels"), "name: %s", g.name);
  double flops = tg_cpu_gemm_flops_one_core(&g, why, sizeof why);
  ck_assert_msg(flops > 1e9, "OpenBLAS's sgemm at %g FLOP/s: %s", flops, why); /* any CPU of this century */
  tg_cpu_gemm_close(&g);
}
END_TEST

START_TEST(test_onednn_named_linked_and_timed) {
  tg_cpu_gemm g;
  char why[300];
  if (!onednn_installed()) {
    choose("onednn", &g, false, why, sizeof why); /* asked for and missing: an error that says what to do */
    ck_assert_msg(strstr(why, "libdnnl2"), "%s", why);
    return;
  }
  choose("onednn", &g, true, why, sizeof why);
  ck_assert_int_eq(g.library, TG_CPU_GEMM_ONEDNN);
  ck_assert_str_eq(g.flag, "-DTG_GEMM_ONEDNN");
  /* the file dlopen loaded, for the linker; or its soname */
  ck_assert_msg(g.link[0] == '/' || !strcmp(g.link, "-l:libdnnl.so.2"), "link: %s", g.link);
  ck_assert_msg(!strncmp(g.name, "oneDNN ", 7) && strstr(g.name, " kernels)"), "name: %s", g.name);
  double flops = tg_cpu_gemm_flops_one_core(&g, why, sizeof why);
  ck_assert_msg(flops > 1e9, "oneDNN's sgemm at %g FLOP/s: %s", flops, why);
  tg_cpu_gemm_close(&g);
}
END_TEST

START_TEST(test_auto_prefers_onednn_outside_sanitizers) {
  tg_cpu_gemm g;
  char why[300];
  choose(NULL, &g, true, why, sizeof why);
  tg_cpu_gemm_library unset = g.library;
  tg_cpu_gemm_close(&g);
  choose("auto", &g, true, why, sizeof why);
  ck_assert_int_eq(g.library, unset);
  tg_cpu_gemm_close(&g);
#ifdef TG_SANITIZE
  ck_assert_int_eq(unset, TG_CPU_GEMM_OPENBLAS);
#else
  ck_assert_int_eq(unset, onednn_installed() ? TG_CPU_GEMM_ONEDNN : TG_CPU_GEMM_OPENBLAS);
#endif
}
END_TEST

START_TEST(test_unknown_library_refused) {
  tg_cpu_gemm g;
  char why[300];
  choose("mkl", &g, false, why, sizeof why);
  ck_assert_str_eq(why, "TG_CPU_GEMM=mkl names no matmul library: use onednn, openblas or auto");
  ck_assert_ptr_null(g.handle);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_gemm");
  TCase *t = tcase_create("core");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, test_openblas_named_and_timed);
  tcase_add_test(t, test_onednn_named_linked_and_timed);
  tcase_add_test(t, test_auto_prefers_onednn_outside_sanitizers);
  tcase_add_test(t, test_unknown_library_refused);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
