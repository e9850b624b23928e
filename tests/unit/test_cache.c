/* test_cache.c: SHA-256 and the on-disk compile cache.
 *
 * SHA-256 against the FIPS 180-4 example vectors, fed whole and in pieces
 * of awkward sizes (the streaming code has a partial-block path); the
 * choice of directory ($TG_CACHE over $XDG_CACHE_HOME/tg over
 * $HOME/.cache/tg), created on demand; put/get round trips, misses, and
 * keys that could escape the directory; and a directory that cannot be
 * created, which must say which one, where it came from and why.
 *
 * Every test works in a fresh directory under /tmp and points TG_CACHE
 * there, so the user's cache is never touched. */
#include "testutil.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"

static char dir[64];
static char cache_dir[128];

/* The tests change these; other tests in the same process (CK_FORK=no)
 * must not see it. */
static char *saved_home, *saved_xdg;

static void setup(void) {
  saved_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  saved_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  strcpy(dir, "/tmp/tg_cache_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", dir);
  setenv("TG_CACHE", cache_dir, 1);
}

static void restore(const char *name, char **saved) {
  if (*saved) setenv(name, *saved, 1);
  else unsetenv(name);
  free(*saved);
  *saved = NULL;
}

static void teardown(void) {
  restore("HOME", &saved_home);
  restore("XDG_CACHE_HOME", &saved_xdg);
  tu_remove_tree(dir);
}

static const char *hex_of(const void *data, size_t n) {
  static char hex[TG_SHA256_HEX];
  tg_sha256 s;
  tg_sha256_init(&s);
  tg_sha256_update(&s, data, n);
  tg_sha256_final(&s, NULL, hex);
  return hex;
}

/* ---- SHA-256 ------------------------------------------------------------- */

START_TEST(sha256_fips_vectors) {
  ck_assert_str_eq(hex_of("", 0),
                   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  ck_assert_str_eq(hex_of("abc", 3),
                   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  ck_assert_str_eq(hex_of(m448, strlen(m448)),
                   "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                     "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  ck_assert_str_eq(hex_of(m896, strlen(m896)),
                   "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  char *a = malloc(1000000);
  memset(a, 'a', 1000000);
  ck_assert_str_eq(hex_of(a, 1000000),
                   "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(a);
}
END_TEST

/* The million 'a's in pieces that straddle block boundaries every way. */
START_TEST(sha256_streaming) {
  static const size_t pieces[] = {1, 7, 55, 56, 63, 64, 65, 127, 1000};
  char a[1000];
  memset(a, 'a', sizeof a);
  for (size_t k = 0; k < sizeof pieces / sizeof *pieces; k++) {
    tg_sha256 s;
    tg_sha256_init(&s);
    for (size_t done = 0; done < 1000000;) {
      size_t n = 1000000 - done < pieces[k] ? 1000000 - done : pieces[k];
      tg_sha256_update(&s, a, n);
      done += n;
    }
    char hex[TG_SHA256_HEX];
    unsigned char raw[32];
    tg_sha256_final(&s, raw, hex);
    ck_assert_msg(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
                  "pieces of %zu: %s", pieces[k], hex);
    ck_assert_uint_eq(raw[0], 0xcd);
    ck_assert_uint_eq(raw[31], 0xd0);
  }
}
END_TEST

/* Fields are length-prefixed: moving a byte from one to the next changes
 * the key. */
START_TEST(sha256_fields_do_not_run_together) {
  char h1[TG_SHA256_HEX], h2[TG_SHA256_HEX];
  tg_sha256 s;
  tg_sha256_init(&s);
  tg_sha256_field(&s, "ab");
  tg_sha256_field(&s, "c");
  tg_sha256_final(&s, NULL, h1);
  tg_sha256_init(&s);
  tg_sha256_field(&s, "a");
  tg_sha256_field(&s, "bc");
  tg_sha256_final(&s, NULL, h2);
  ck_assert_str_ne(h1, h2);
}
END_TEST

/* ---- the directory -------------------------------------------------------- */

START_TEST(dir_precedence) {
  char buf[512], err[512], want[512];
  snprintf(want, sizeof want, "%s/xdg", dir);
  setenv("XDG_CACHE_HOME", want, 1);
  snprintf(want, sizeof want, "%s/home", dir);
  setenv("HOME", want, 1);

  ck_assert_msg(tg_cache_dir(buf, sizeof buf, err, sizeof err), "%s", err);
  ck_assert_str_eq(buf, cache_dir);
  struct stat st;
  ck_assert_int_eq(stat(cache_dir, &st), 0);
  ck_assert(S_ISDIR(st.st_mode));

  unsetenv("TG_CACHE");
  ck_assert_msg(tg_cache_dir(buf, sizeof buf, err, sizeof err), "%s", err);
  snprintf(want, sizeof want, "%s/xdg/tg", dir);
  ck_assert_str_eq(buf, want);
  ck_assert_int_eq(stat(want, &st), 0);

  /* An empty variable counts as unset, and the XDG spec says to ignore a
   * relative XDG_CACHE_HOME. */
  setenv("TG_CACHE", "", 1);
  setenv("XDG_CACHE_HOME", "relative/dir", 1);
  ck_assert_msg(tg_cache_dir(buf, sizeof buf, err, sizeof err), "%s", err);
  snprintf(want, sizeof want, "%s/home/.cache/tg", dir);
  ck_assert_str_eq(buf, want);
  ck_assert_int_eq(stat(want, &st), 0); /* ~/.cache created on the way */

  unsetenv("XDG_CACHE_HOME");
  ck_assert_msg(tg_cache_dir(buf, sizeof buf, err, sizeof err), "%s", err);
  ck_assert_str_eq(buf, want);

  unsetenv("HOME");
  ck_assert(!tg_cache_dir(buf, sizeof buf, err, sizeof err));
  ck_assert_msg(strstr(err, "TG_CACHE") != NULL, "%s", err);
}
END_TEST

START_TEST(uncreatable_dir) {
  /* A directory beneath a regular file cannot exist, even for root. */
  char file[256], bad[512], buf[512], err[1024];
  snprintf(file, sizeof file, "%s/plainfile", dir);
  FILE *f = fopen(file, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  snprintf(bad, sizeof bad, "%s/sub/tg", file);
  setenv("TG_CACHE", bad, 1);
  ck_assert(!tg_cache_dir(buf, sizeof buf, err, sizeof err));
  ck_assert_msg(strstr(err, bad) && strstr(err, "$TG_CACHE") && strstr(err, "Not a directory"),
                "%s", err);

  /* And the cache operations pass the same message on. */
  bool found;
  void *data;
  size_t n;
  ck_assert(!tg_cache_put("ab", ".bin", "x", 1, err, sizeof err));
  ck_assert_msg(strstr(err, "Not a directory"), "%s", err);
  ck_assert(!tg_cache_get("ab", ".bin", &data, &n, &found, err, sizeof err));
  ck_assert_msg(strstr(err, "Not a directory"), "%s", err);

  /* A file where the directory should be. */
  setenv("TG_CACHE", file, 1);
  ck_assert(!tg_cache_dir(buf, sizeof buf, err, sizeof err));
  ck_assert_msg(strstr(err, "not a directory"), "%s", err);
}
END_TEST

/* ---- entries ------------------------------------------------------------- */

static int count_files(const char *d, const char *needle) {
  DIR *dd = opendir(d);
  int n = 0;
  for (struct dirent *e; dd && (e = readdir(dd));) n += strstr(e->d_name, needle) != NULL;
  if (dd) closedir(dd);
  return n;
}

START_TEST(put_get_round_trip) {
  char err[512], key[TG_SHA256_HEX], path[512];
  strcpy(key, hex_of("some source", 11));
  void *data;
  size_t n;
  bool found = true;
  ck_assert_msg(tg_cache_get(key, ".cubin", &data, &n, &found, err, sizeof err), "%s", err);
  ck_assert(!found);
  ck_assert_ptr_null(data);

  unsigned char bytes[300];
  for (int i = 0; i < 300; i++) bytes[i] = (unsigned char)(i * 7);
  bytes[10] = 0; /* binary: a NUL in the middle must survive */
  ck_assert_msg(tg_cache_put(key, ".cubin", bytes, sizeof bytes, err, sizeof err), "%s", err);
  ck_assert_msg(tg_cache_get(key, ".cubin", &data, &n, &found, err, sizeof err), "%s", err);
  ck_assert(found);
  ck_assert_uint_eq(n, sizeof bytes);
  ck_assert(!memcmp(data, bytes, n));
  ck_assert_uint_eq(((unsigned char *)data)[n], 0);
  free(data);

  ck_assert_msg(tg_cache_path(key, ".cubin", path, sizeof path, err, sizeof err), "%s", err);
  char want[512];
  snprintf(want, sizeof want, "%s/%s.cubin", cache_dir, key);
  ck_assert_str_eq(path, want);

  /* Another suffix is another entry; a put replaces; an empty entry is
   * found and empty. */
  ck_assert(tg_cache_get(key, ".log", &data, &n, &found, err, sizeof err) && !found);
  ck_assert_msg(tg_cache_put(key, ".cubin", "new", 3, err, sizeof err), "%s", err);
  ck_assert(tg_cache_get(key, ".cubin", &data, &n, &found, err, sizeof err) && found);
  ck_assert_uint_eq(n, 3);
  ck_assert_str_eq(data, "new");
  free(data);
  ck_assert_msg(tg_cache_put(key, ".log", "", 0, err, sizeof err), "%s", err);
  ck_assert(tg_cache_get(key, ".log", &data, &n, &found, err, sizeof err) && found);
  ck_assert_uint_eq(n, 0);
  free(data);

  ck_assert_int_eq(count_files(cache_dir, ".tmp."), 0);
  ck_assert_int_eq(count_files(cache_dir, key), 2);
}
END_TEST

/* Sealed entries: damaged ones (truncated, altered, emptied, unsealed)
 * come back as not found, with the reason, so that the caller rebuilds. */
START_TEST(sealed_entries) {
  char err[512], key[TG_SHA256_HEX], path[512], damaged[256];
  strcpy(key, hex_of("sealed", 6));
  unsigned char bytes[1000];
  for (int i = 0; i < 1000; i++) bytes[i] = (unsigned char)(i * 13);
  void *data;
  size_t n;
  bool found;
  ck_assert_msg(tg_cache_put_sealed(key, ".so", bytes, sizeof bytes, err, sizeof err), "%s", err);
  ck_assert(tg_cache_get_sealed(key, ".so", &data, &n, &found, damaged, sizeof damaged, err, sizeof err));
  ck_assert(found && n == sizeof bytes && !memcmp(data, bytes, n) && !*damaged);
  free(data);
  ck_assert(tg_cache_path(key, ".so", path, sizeof path, err, sizeof err));
  /* truncated */
  ck_assert_int_eq(truncate(path, 500), 0);
  ck_assert(tg_cache_get_sealed(key, ".so", &data, &n, &found, damaged, sizeof damaged, err, sizeof err));
  ck_assert(!found && !data);
  ck_assert_msg(strstr(damaged, "differs from its seal"), "%s", damaged);
  /* altered, same size */
  bytes[700] ^= 1;
  ck_assert(tg_cache_put(key, ".so", bytes, sizeof bytes, err, sizeof err));
  ck_assert(tg_cache_get_sealed(key, ".so", &data, &n, &found, damaged, sizeof damaged, err, sizeof err) && !found);
  /* emptied */
  ck_assert(tg_cache_put(key, ".so", "", 0, err, sizeof err));
  ck_assert(tg_cache_get_sealed(key, ".so", &data, &n, &found, damaged, sizeof damaged, err, sizeof err) && !found);
  /* resealed as it is now: found again */
  ck_assert(tg_cache_put(key, ".so", bytes, sizeof bytes, err, sizeof err));
  ck_assert_msg(tg_cache_seal(key, ".so", err, sizeof err), "%s", err);
  ck_assert(tg_cache_get_sealed(key, ".so", &data, &n, &found, damaged, sizeof damaged, err, sizeof err) && found);
  free(data);
  /* no seal at all */
  char other[TG_SHA256_HEX];
  strcpy(other, hex_of("unsealed", 8));
  ck_assert(tg_cache_put(other, ".cubin", bytes, sizeof bytes, err, sizeof err));
  ck_assert(tg_cache_get_sealed(other, ".cubin", &data, &n, &found, damaged, sizeof damaged, err, sizeof err));
  ck_assert(!found);
  ck_assert_msg(strstr(damaged, "has no seal"), "%s", damaged);
}
END_TEST

/* A writer replaces an entry over and over while this process reads it:
 * every read must see one whole version, never a mix or a short file. */
START_TEST(readers_never_see_partial_entries) {
  enum { SIZE = 256 * 1024, WRITES = 40 };
  const char *key = "c0ffee";
  char err[512];
  char *buf = malloc(SIZE);
  memset(buf, 'a', SIZE);
  ck_assert_msg(tg_cache_put(key, ".bin", buf, SIZE, err, sizeof err), "%s", err);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    for (int i = 0; i < WRITES; i++) {
      memset(buf, i % 2 ? 'a' : 'b', SIZE);
      if (!tg_cache_put(key, ".bin", buf, SIZE, err, sizeof err)) _exit(1);
    }
    _exit(0);
  }
  int reads = 0, status = 0;
  for (bool done = false; !done; reads++) {
    done = waitpid(pid, &status, WNOHANG) == pid;
    void *data;
    size_t n;
    bool found;
    ck_assert_msg(tg_cache_get(key, ".bin", &data, &n, &found, err, sizeof err), "%s", err);
    ck_assert(found);
    ck_assert_uint_eq(n, SIZE);
    const char *d = data;
    for (size_t i = 1; i < n; i++)
      if (d[i] != d[0]) ck_abort_msg("read %d mixes versions at byte %zu", reads, i);
    free(data);
  }
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ck_assert_int_eq(count_files(cache_dir, ".tmp."), 0);
  free(buf);
}
END_TEST

START_TEST(tmp_and_install) {
  char err[512], tmp[512], path[512];
  const char *key = "0123456789abcdef";
  ck_assert_msg(tg_cache_tmp(key, ".so", tmp, sizeof tmp, err, sizeof err), "%s", err);
  ck_assert(strstr(tmp, cache_dir) == tmp);
  ck_assert_int_eq(access(tmp, F_OK), 0);
  FILE *f = fopen(tmp, "w");
  fputs("object", f);
  fclose(f);
  ck_assert_msg(tg_cache_install(tmp, key, ".so", err, sizeof err), "%s", err);
  ck_assert_int_ne(access(tmp, F_OK), 0);
  ck_assert(tg_cache_path(key, ".so", path, sizeof path, err, sizeof err));
  ck_assert_int_eq(access(path, R_OK), 0);
  ck_assert_int_eq(count_files(cache_dir, ".tmp."), 0);

  /* A failed install leaves no temporary file behind. */
  ck_assert_msg(tg_cache_tmp(key, ".so", tmp, sizeof tmp, err, sizeof err), "%s", err);
  ck_assert(!tg_cache_install(tmp, "not hex", ".so", err, sizeof err));
  ck_assert_int_eq(count_files(cache_dir, ".tmp."), 0);
}
END_TEST

START_TEST(bad_names_rejected) {
  char err[512], path[512];
  void *data;
  size_t n;
  bool found;
  ck_assert(!tg_cache_path("../etc", ".so", path, sizeof path, err, sizeof err));
  ck_assert_msg(strstr(err, "bad cache key"), "%s", err);
  ck_assert(!tg_cache_path("ABCD", ".so", path, sizeof path, err, sizeof err));
  ck_assert(!tg_cache_path("", ".so", path, sizeof path, err, sizeof err));
  ck_assert(!tg_cache_put("abcd", "/x", "", 0, err, sizeof err));
  ck_assert_msg(strstr(err, "bad cache suffix"), "%s", err);
  ck_assert(!tg_cache_get("abcd", ".a/b", &data, &n, &found, err, sizeof err));
  ck_assert(!tg_cache_path("abcd", ".", path, sizeof path, err, sizeof err));
  ck_assert(tg_cache_path("abcd", "", path, sizeof path, err, sizeof err));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cache");
  TCase *t = tcase_create("cache");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, sha256_fips_vectors);
  tcase_add_test(t, sha256_streaming);
  tcase_add_test(t, sha256_fields_do_not_run_together);
  tcase_add_test(t, dir_precedence);
  tcase_add_test(t, uncreatable_dir);
  tcase_add_test(t, put_get_round_trip);
  tcase_add_test(t, readers_never_see_partial_entries);
  tcase_add_test(t, tmp_and_install);
  tcase_add_test(t, sealed_entries);
  tcase_add_test(t, bad_names_rejected);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(suite()); }
