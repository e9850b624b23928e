/* test_ccjit.c: C source to a cached shared object with the system compiler.
 *
 * A tiny function is built, loaded with dlopen and called; the same build
 * again is a cache hit at the same path, other flags or source are misses;
 * a syntax error comes back with the compiler's own message, the path of
 * the saved source and the command; a compiler that does not exist is
 * named.
 *
 * Every test points TG_CACHE at a fresh directory under /tmp. */
#include "testutil.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ccjit.h"

static char dir[64];
static char *saved_cc;

static void setup(void) {
  strcpy(dir, "/tmp/tg_ccjit_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  setenv("TG_CACHE", dir, 1);
  saved_cc = getenv("CC") ? strdup(getenv("CC")) : NULL;
}

static void teardown(void) {
  if (saved_cc) setenv("CC", saved_cc, 1);
  else unsetenv("CC");
  free(saved_cc);
  saved_cc = NULL;
  tu_remove_tree(dir);
}

static int count_files(const char *needle) {
  DIR *dd = opendir(dir);
  int n = 0;
  for (struct dirent *e; dd && (e = readdir(dd));) n += strstr(e->d_name, needle) != NULL;
  if (dd) closedir(dd);
  return n;
}

static const char add_src[] = "int tg_test_add(int a, int b) { return a + b + 1000; }\n";
static const char *const flags[] = {"-O2", "-Wall", "-Wextra"};
static const char *const libs[] = {"-lm"};

START_TEST(builds_loads_and_caches) {
  char err[8192];
  tg_so a, b;
  ck_assert_msg(tg_ccjit_build(add_src, flags, 3, libs, 1, &a, err, sizeof err), "%s", err);
  ck_assert(!a.from_cache);
  ck_assert_msg(!strcmp(a.log, ""), "compiler output: %s", a.log);
  ck_assert(strstr(a.path, dir) == a.path);
  ck_assert(strstr(a.path, ".so"));

  void *lib = dlopen(a.path, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(lib != NULL, "dlopen: %s", dlerror());
  int (*add)(int, int);
  void *p = dlsym(lib, "tg_test_add");
  ck_assert_ptr_nonnull(p);
  memcpy(&add, &p, sizeof p);
  ck_assert_int_eq(add(2, 3), 1005);
  dlclose(lib);

  ck_assert_msg(tg_ccjit_build(add_src, flags, 3, libs, 1, &b, err, sizeof err), "%s", err);
  ck_assert(b.from_cache);
  ck_assert_str_eq(a.path, b.path);
  ck_assert_str_eq(b.log, "");
  tg_so_free(&b);

  /* The source is kept beside the object; no temporary file is left. */
  ck_assert_int_eq(count_files(".c"), 1);
  ck_assert_int_eq(count_files(".tmp."), 0);

  /* Other flags, other libraries, other source: other entries. */
  ck_assert(tg_ccjit_build(add_src, flags, 2, libs, 1, &b, err, sizeof err));
  ck_assert(!b.from_cache);
  ck_assert_str_ne(a.path, b.path);
  tg_so_free(&b);
  ck_assert(tg_ccjit_build(add_src, flags, 3, NULL, 0, &b, err, sizeof err));
  ck_assert(!b.from_cache);
  tg_so_free(&b);
  ck_assert(tg_ccjit_build("int tg_test_two(void) { return 2; }\n", flags, 3, libs, 1, &b, err,
                           sizeof err));
  ck_assert(!b.from_cache);
  tg_so_free(&b);
  tg_so_free(&a);
}
END_TEST

/* What the compiler says on success comes back too, from the cache as well. */
START_TEST(warnings_come_back_in_the_log) {
  char err[8192];
  const char *src = "int tg_test_warn(int a) { int unused_thing; return a; }\n";
  tg_so a, b;
  ck_assert_msg(tg_ccjit_build(src, flags, 3, NULL, 0, &a, err, sizeof err), "%s", err);
  ck_assert_msg(strstr(a.log, "unused_thing"), "log: %s", a.log);
  ck_assert_msg(tg_ccjit_build(src, flags, 3, NULL, 0, &b, err, sizeof err), "%s", err);
  ck_assert(b.from_cache);
  ck_assert_str_eq(a.log, b.log);
  tg_so_free(&a);
  tg_so_free(&b);
}
END_TEST

START_TEST(syntax_error_reported) {
  char err[8192];
  tg_so so;
  const char *src = "int tg_test_bad(int a) { return a +; }\n";
  ck_assert(!tg_ccjit_build(src, flags, 3, NULL, 0, &so, err, sizeof err));
  ck_assert_ptr_null(so.path);
  /* gcc and clang both say "expected expression". */
  ck_assert_msg(strstr(err, "expected expression"), "no compiler message in: %s", err);
  ck_assert_msg(strstr(err, "exit status"), "%s", err);
  ck_assert_msg(strstr(err, "command: "), "%s", err);
  /* The saved source is named, and is there to read. */
  char *c = strstr(err, dir);
  ck_assert_msg(c != NULL, "no source path in: %s", err);
  char path[512];
  size_t n = strcspn(c, " :\n");
  ck_assert_uint_lt(n, sizeof path);
  memcpy(path, c, n);
  path[n] = 0;
  ck_assert_msg(strstr(path, ".c") && access(path, R_OK) == 0, "no source at %s", path);
  ck_assert_int_eq(count_files(".so"), 0);
  ck_assert_int_eq(count_files(".tmp."), 0);
}
END_TEST

START_TEST(missing_compiler_named) {
  char err[8192];
  tg_so so;
  setenv("CC", "tg-no-such-compiler --flag", 1);
  ck_assert(!tg_ccjit_build(add_src, flags, 3, NULL, 0, &so, err, sizeof err));
  ck_assert_msg(strstr(err, "tg-no-such-compiler") && strstr(err, "$CC"), "%s", err);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ccjit");
  TCase *t = tcase_create("ccjit");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 60);
  tcase_add_test(t, builds_loads_and_caches);
  tcase_add_test(t, warnings_come_back_in_the_log);
  tcase_add_test(t, syntax_error_reported);
  tcase_add_test(t, missing_compiler_named);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(suite()); }
