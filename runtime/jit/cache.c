/* cache.c: the on-disk cache of compiled code (see cache.h).
 *
 * Entries are replaced by rename(2) of a complete, fsynced file created in
 * the cache directory itself (rename is atomic only within one file
 * system), so a process that opens an entry never sees a partial one, even
 * if the writer crashes. */
#include "cache.h"
#include "diag.h" /* tg_why */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__GNUC__)
#define TG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TG_PRINTF(f, a)
#endif

/* ---- the cache directory ------------------------------------------------- */

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* Chooses the directory and says which variable chose it, for messages. */
static bool choose_dir(char *buf, size_t buflen, const char **from, char *why, size_t whylen) {
  const char *v;
  int n;
  /* The XDG spec says a relative XDG_CACHE_HOME is invalid and to be
   * ignored; TG_CACHE is ours, so a relative one is taken as given. */
  if ((v = env("TG_CACHE"))) *from = "$TG_CACHE", n = snprintf(buf, buflen, "%s", v);
  else if ((v = env("XDG_CACHE_HOME")) && v[0] == '/')
    *from = "$XDG_CACHE_HOME", n = snprintf(buf, buflen, "%s/tg", v);
  else if ((v = env("HOME"))) *from = "$HOME", n = snprintf(buf, buflen, "%s/.cache/tg", v);
  else
    return tg_why(why, whylen,
                "no directory for the compile cache: set TG_CACHE (neither XDG_CACHE_HOME nor "
                "HOME is set)");
  if (n < 0 || (size_t)n >= buflen)
    return tg_why(why, whylen, "the cache directory name (from %s) is too long", *from);
  return true;
}

/* mkdir -p: each missing component in turn, so that a first run on a fresh
 * account also creates ~/.cache. */
static bool make_dirs(const char *path, const char *from, char *why, size_t whylen) {
  char cause[1024];
  if (!tg_make_dirs(path, cause, sizeof cause))
    return tg_why(why, whylen, "cannot use the cache directory '%s' (from %s): %s; set TG_CACHE to a writable directory",
                  path, from, cause);
  if (access(path, W_OK | X_OK) != 0)
    return tg_why(why, whylen,
                "cannot use the cache directory '%s' (from %s): %s; set TG_CACHE to a writable "
                "directory",
                path, from, strerror(errno));
  return true;
}

bool tg_cache_dir(char *buf, size_t buflen, char *why, size_t whylen) {
  const char *from = "";
  return choose_dir(buf, buflen, &from, why, whylen) && make_dirs(buf, from, why, whylen);
}

/* Keys and suffixes become file names: allow nothing that could leave the
 * directory or hide a file. */
static bool valid_name(const char *key, const char *suffix, char *why, size_t whylen) {
  size_t n = key ? strlen(key) : 0;
  bool ok = n > 0 && n <= 128;
  for (size_t i = 0; ok && i < n; i++)
    ok = (key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f');
  if (!ok)
    return tg_why(why, whylen, "bad cache key '%s': want lower-case hex digits", key ? key : "");
  if (!suffix) suffix = "";
  ok = !*suffix || (suffix[0] == '.' && suffix[1] && strlen(suffix) <= 32);
  for (size_t i = 1; ok && *suffix && suffix[i]; i++) {
    char c = suffix[i];
    ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
  }
  if (!ok) return tg_why(why, whylen, "bad cache suffix '%s'", suffix);
  return true;
}

/* The directory for reading: an existing one is used as it is, writable
 * or not (a read-only cache that holds every entry a run needs is fine);
 * a missing one is created, as for writing. */
static bool reading_dir(char *buf, size_t buflen, char *why, size_t whylen) {
  const char *from = "";
  if (!choose_dir(buf, buflen, &from, why, whylen)) return false;
  struct stat st;
  if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) return true;
  return make_dirs(buf, from, why, whylen);
}

bool tg_cache_path(const char *key, const char *suffix, char *buf, size_t buflen, char *why,
                   size_t whylen) {
  if (!valid_name(key, suffix, why, whylen) || !reading_dir(buf, buflen, why, whylen))
    return false;
  size_t n = strlen(buf);
  int m = snprintf(buf + n, buflen - n, "/%s%s", key, suffix ? suffix : "");
  if (m < 0 || (size_t)m >= buflen - n) return tg_why(why, whylen, "cache path too long");
  return true;
}

/* ---- entries ------------------------------------------------------------- */

bool tg_cache_get(const char *key, const char *suffix, void **data, size_t *size, bool *found,
                  char *why, size_t whylen) {
  *data = NULL, *size = 0, *found = false;
  char path[4096];
  if (!tg_cache_path(key, suffix, path, sizeof path, why, whylen)) return false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return true;
    return tg_why(why, whylen, "cannot open '%s': %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return tg_why(why, whylen, "cache entry '%s' is not a regular file", path);
  }
  size_t n = (size_t)st.st_size;
  unsigned char *buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return tg_why(why, whylen, "out of memory reading '%s' (%zu bytes)", path, n);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      close(fd);
      free(buf);
      return tg_why(why, whylen, "cannot read '%s': %s", path, strerror(e));
    }
    got += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *data = buf, *size = n, *found = true;
  return true;
}

bool tg_cache_tmp(const char *key, const char *suffix, char *buf, size_t buflen, char *why,
                  size_t whylen) {
  /* writing needs a writable directory: tg_cache_dir says so clearly */
  if (!tg_cache_dir(buf, buflen, why, whylen) || !tg_cache_path(key, suffix, buf, buflen, why, whylen)) return false;
  size_t n = strlen(buf);
  if (buflen - n < sizeof ".tmp.XXXXXX") return tg_why(why, whylen, "cache path too long");
  memcpy(buf + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
  int fd = mkstemp(buf);
  if (fd < 0)
    return tg_why(why, whylen, "cannot create a file in the cache: '%s': %s", buf, strerror(errno));
  /* mkstemp makes 0600; entries are ordinary files like a compiler's. */
  (void)fchmod(fd, 0644);
  close(fd);
  return true;
}

/* Makes the rename durable.  Best effort: the entry is complete and in
 * place already, and some file systems cannot sync a directory at all. */
bool tg_cache_install(const char *tmp, const char *key, const char *suffix, char *why,
                      size_t whylen) {
  char path[4096];
  bool ok = tg_cache_path(key, suffix, path, sizeof path, why, whylen);
  if (ok) {
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
      ok = tg_why(why, whylen, "cannot sync '%s': %s", tmp, strerror(errno));
    if (fd >= 0) close(fd);
  }
  if (ok && rename(tmp, path) != 0)
    ok = tg_why(why, whylen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
  if (!ok) unlink(tmp);
  else tg_sync_parent_dir(path);
  return ok;
}

static bool write_all(int fd, const void *data, size_t size) {
  const unsigned char *p = data;
  while (size) {
    ssize_t w = write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w, size -= (size_t)w;
  }
  return true;
}

bool tg_cache_put(const char *key, const char *suffix, const void *data, size_t size, char *why,
                  size_t whylen) {
  char tmp[4096];
  if (!tg_cache_tmp(key, suffix, tmp, sizeof tmp, why, whylen)) return false;
  int fd = open(tmp, O_WRONLY | O_CLOEXEC);
  bool ok = fd >= 0 && write_all(fd, data, size);
  int e = errno;
  if (fd >= 0 && close(fd) != 0 && ok) ok = false, e = errno;
  if (!ok) {
    unlink(tmp);
    return tg_why(why, whylen, "cannot write '%s': %s", tmp, strerror(e));
  }
  return tg_cache_install(tmp, key, suffix, why, whylen);
}

/* ---- seals: size and hash, checked before use ------------------------------- */

/* The seal's suffix: SUFFIX-sum (".so" -> ".so-sum"). */
static bool seal_suffix(const char *suffix, char *buf, size_t n, char *why, size_t whylen) {
  int m = snprintf(buf, n, "%s-sum", suffix && *suffix ? suffix : ".entry");
  if (m < 0 || (size_t)m >= n) return tg_why(why, whylen, "bad cache suffix '%s'", suffix ? suffix : "");
  return true;
}

static void seal_text(const void *data, size_t size, char *out, size_t n) {
  char hex[TG_SHA256_HEX];
  tg_sha256 h;
  tg_sha256_init(&h);
  tg_sha256_update(&h, data, size);
  tg_sha256_final(&h, NULL, hex);
  snprintf(out, n, "tg-cache-seal-1 %zu %s\n", size, hex);
}

bool tg_cache_seal(const char *key, const char *suffix, char *why, size_t whylen) {
  char ss[48], text[160];
  void *data;
  size_t size;
  bool found;
  if (!seal_suffix(suffix, ss, sizeof ss, why, whylen) || !tg_cache_get(key, suffix, &data, &size, &found, why, whylen))
    return false;
  if (!found) return tg_why(why, whylen, "cache entry %s%s vanished before it was sealed", key, suffix);
  seal_text(data, size, text, sizeof text);
  free(data);
  return tg_cache_put(key, ss, text, strlen(text), why, whylen);
}

bool tg_cache_put_sealed(const char *key, const char *suffix, const void *data, size_t size, char *why,
                         size_t whylen) {
  char ss[48], text[160];
  if (!seal_suffix(suffix, ss, sizeof ss, why, whylen)) return false;
  seal_text(data, size, text, sizeof text);
  return tg_cache_put(key, suffix, data, size, why, whylen) && tg_cache_put(key, ss, text, strlen(text), why, whylen);
}

bool tg_cache_get_sealed(const char *key, const char *suffix, void **data, size_t *size, bool *found,
                         char *damaged, size_t damagedlen, char *why, size_t whylen) {
  char ss[48], text[160];
  if (damaged && damagedlen) damaged[0] = 0;
  if (!seal_suffix(suffix, ss, sizeof ss, why, whylen) || !tg_cache_get(key, suffix, data, size, found, why, whylen))
    return false;
  if (!*found) return true;
  void *seal;
  size_t n;
  bool has_seal;
  if (!tg_cache_get(key, ss, &seal, &n, &has_seal, why, whylen)) {
    free(*data);
    *data = NULL, *size = 0, *found = false;
    return false;
  }
  seal_text(*data, *size, text, sizeof text);
  const char *cause = !has_seal ? "it has no seal (its writer stopped before sealing it)"
                    : strcmp(seal, text) ? "its size or SHA-256 differs from its seal (it was damaged after it was written)"
                                         : NULL;
  free(seal);
  if (cause) {
    if (damaged && damagedlen) snprintf(damaged, damagedlen, "cache entry %s%s: %s", key, suffix, cause);
    free(*data);
    *data = NULL, *size = 0, *found = false;
  }
  return true;
}
