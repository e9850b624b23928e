/* cache.c: SHA-256 and the on-disk cache of compiled code (see cache.h).
 *
 * SHA-256 is written out here, from FIPS 180-4, rather than taken from a
 * crypto library: tg must build and start with nothing but libc, and the
 * cache needs only a digest of a few hundred kilobytes of source per run.
 *
 * Entries are replaced by rename(2) of a complete, fsynced file created in
 * the cache directory itself (rename is atomic only within one file
 * system), so a process that opens an entry never sees a partial one, even
 * if the writer crashes. */
#include "cache.h"
#include "ir.h" /* tg_why */

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

/* ---- SHA-256 ------------------------------------------------------------- */

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

void tg_sha256_init(tg_sha256 *s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->nbytes = 0;
  s->nblock = 0;
}

void tg_sha256_update(tg_sha256 *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->nbytes += n;
  if (s->nblock) {
    size_t take = 64 - s->nblock < n ? 64 - s->nblock : n;
    memcpy(s->block + s->nblock, p, take);
    s->nblock += take, p += take, n -= take;
    if (s->nblock < 64) return;
    compress(s->h, s->block);
    s->nblock = 0;
  }
  for (; n >= 64; p += 64, n -= 64) compress(s->h, p);
  if (n) memcpy(s->block, p, n);
  s->nblock = n;
}

void tg_sha256_final(tg_sha256 *s, unsigned char out[32], char hex[TG_SHA256_HEX]) {
  uint64_t bits = s->nbytes * 8;
  unsigned char pad[72] = {0x80};
  /* Pad to 56 mod 64, then the bit length, big-endian. */
  size_t npad = (s->nblock < 56 ? 56 : 120) - s->nblock;
  for (int i = 0; i < 8; i++) pad[npad + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
  tg_sha256_update(s, pad, npad + 8);
  unsigned char d[32];
  for (int i = 0; i < 32; i++) d[i] = (unsigned char)(s->h[i / 4] >> (24 - 8 * (i % 4)));
  if (out) memcpy(out, d, 32);
  if (hex) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) hex[2 * i] = digits[d[i] >> 4], hex[2 * i + 1] = digits[d[i] & 15];
    hex[64] = 0;
  }
}

void tg_sha256_field(tg_sha256 *s, const char *str) {
  size_t n = str ? strlen(str) : 0;
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  tg_sha256_update(s, len, 8);
  tg_sha256_update(s, str ? str : "", n);
}

/* ---- the cache directory ------------------------------------------------- */

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* Chooses the directory and says which variable chose it, for messages. */
static bool choose_dir(char *buf, size_t buflen, const char **from, char *err, size_t errlen) {
  const char *v;
  int n;
  /* The XDG spec says a relative XDG_CACHE_HOME is invalid and to be
   * ignored; TG_CACHE is ours, so a relative one is taken as given. */
  if ((v = env("TG_CACHE"))) *from = "$TG_CACHE", n = snprintf(buf, buflen, "%s", v);
  else if ((v = env("XDG_CACHE_HOME")) && v[0] == '/')
    *from = "$XDG_CACHE_HOME", n = snprintf(buf, buflen, "%s/tg", v);
  else if ((v = env("HOME"))) *from = "$HOME", n = snprintf(buf, buflen, "%s/.cache/tg", v);
  else
    return tg_why(err, errlen,
                "no directory for the compile cache: set TG_CACHE (neither XDG_CACHE_HOME nor "
                "HOME is set)");
  if (n < 0 || (size_t)n >= buflen)
    return tg_why(err, errlen, "the cache directory name (from %s) is too long", *from);
  return true;
}

/* mkdir -p: each missing component in turn, so that a first run on a fresh
 * account also creates ~/.cache. */
static bool make_dirs(const char *path, const char *from, char *err, size_t errlen) {
  size_t n = strlen(path);
  char *p = malloc(n + 1);
  if (!p) return tg_why(err, errlen, "out of memory");
  memcpy(p, path, n + 1);
  bool ok = true;
  for (size_t i = 1; ok && i <= n; i++) {
    if (p[i] != '/' && p[i] != 0) continue;
    char c = p[i];
    p[i] = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      ok = tg_why(err, errlen,
                "cannot create the cache directory '%s' (from %s): mkdir '%s': %s; set TG_CACHE "
                "to a writable directory",
                path, from, p, strerror(errno));
    p[i] = c;
  }
  free(p);
  if (!ok) return false;
  struct stat st;
  if (stat(path, &st) != 0)
    return tg_why(err, errlen, "cannot use the cache directory '%s' (from %s): %s", path, from,
                strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return tg_why(err, errlen,
                "cannot use the cache directory '%s' (from %s): it exists and is not a directory",
                path, from);
  if (access(path, W_OK | X_OK) != 0)
    return tg_why(err, errlen,
                "cannot use the cache directory '%s' (from %s): %s; set TG_CACHE to a writable "
                "directory",
                path, from, strerror(errno));
  return true;
}

bool tg_cache_dir(char *buf, size_t buflen, char *err, size_t errlen) {
  const char *from = "";
  return choose_dir(buf, buflen, &from, err, errlen) && make_dirs(buf, from, err, errlen);
}

/* Keys and suffixes become file names: allow nothing that could leave the
 * directory or hide a file. */
static bool valid_name(const char *key, const char *suffix, char *err, size_t errlen) {
  size_t n = key ? strlen(key) : 0;
  bool ok = n > 0 && n <= 128;
  for (size_t i = 0; ok && i < n; i++)
    ok = (key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f');
  if (!ok)
    return tg_why(err, errlen, "bad cache key '%s': want lower-case hex digits", key ? key : "");
  if (!suffix) suffix = "";
  ok = !*suffix || (suffix[0] == '.' && suffix[1] && strlen(suffix) <= 32);
  for (size_t i = 1; ok && *suffix && suffix[i]; i++) {
    char c = suffix[i];
    ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
  }
  if (!ok) return tg_why(err, errlen, "bad cache suffix '%s'", suffix);
  return true;
}

bool tg_cache_path(const char *key, const char *suffix, char *buf, size_t buflen, char *err,
                   size_t errlen) {
  if (!valid_name(key, suffix, err, errlen) || !tg_cache_dir(buf, buflen, err, errlen))
    return false;
  size_t n = strlen(buf);
  int m = snprintf(buf + n, buflen - n, "/%s%s", key, suffix ? suffix : "");
  if (m < 0 || (size_t)m >= buflen - n) return tg_why(err, errlen, "cache path too long");
  return true;
}

/* ---- entries ------------------------------------------------------------- */

bool tg_cache_get(const char *key, const char *suffix, void **data, size_t *size, bool *found,
                  char *err, size_t errlen) {
  *data = NULL, *size = 0, *found = false;
  char path[4096];
  if (!tg_cache_path(key, suffix, path, sizeof path, err, errlen)) return false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return true;
    return tg_why(err, errlen, "cannot open '%s': %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return tg_why(err, errlen, "cache entry '%s' is not a regular file", path);
  }
  size_t n = (size_t)st.st_size;
  unsigned char *buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return tg_why(err, errlen, "out of memory reading '%s' (%zu bytes)", path, n);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      close(fd);
      free(buf);
      return tg_why(err, errlen, "cannot read '%s': %s", path, strerror(e));
    }
    got += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *data = buf, *size = n, *found = true;
  return true;
}

bool tg_cache_tmp(const char *key, const char *suffix, char *buf, size_t buflen, char *err,
                  size_t errlen) {
  if (!tg_cache_path(key, suffix, buf, buflen, err, errlen)) return false;
  size_t n = strlen(buf);
  if (buflen - n < sizeof ".tmp.XXXXXX") return tg_why(err, errlen, "cache path too long");
  memcpy(buf + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
  int fd = mkstemp(buf);
  if (fd < 0)
    return tg_why(err, errlen, "cannot create a file in the cache: '%s': %s", buf, strerror(errno));
  /* mkstemp makes 0600; entries are ordinary files like a compiler's. */
  (void)fchmod(fd, 0644);
  close(fd);
  return true;
}

/* Makes the rename durable.  Best effort: the entry is complete and in
 * place already, and some file systems cannot sync a directory at all. */
static void sync_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  size_t n = slash ? (size_t)(slash - path) : 0;
  if (n == 0 || n >= sizeof dir) return;
  memcpy(dir, path, n);
  dir[n] = 0;
  int fd = open(dir, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

bool tg_cache_install(const char *tmp, const char *key, const char *suffix, char *err,
                      size_t errlen) {
  char path[4096];
  bool ok = tg_cache_path(key, suffix, path, sizeof path, err, errlen);
  if (ok) {
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
      ok = tg_why(err, errlen, "cannot sync '%s': %s", tmp, strerror(errno));
    if (fd >= 0) close(fd);
  }
  if (ok && rename(tmp, path) != 0)
    ok = tg_why(err, errlen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
  if (!ok) unlink(tmp);
  else sync_parent(path);
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

bool tg_cache_put(const char *key, const char *suffix, const void *data, size_t size, char *err,
                  size_t errlen) {
  char tmp[4096];
  if (!tg_cache_tmp(key, suffix, tmp, sizeof tmp, err, errlen)) return false;
  int fd = open(tmp, O_WRONLY | O_CLOEXEC);
  bool ok = fd >= 0 && write_all(fd, data, size);
  int e = errno;
  if (fd >= 0 && close(fd) != 0 && ok) ok = false, e = errno;
  if (!ok) {
    unlink(tmp);
    return tg_why(err, errlen, "cannot write '%s': %s", tmp, strerror(e));
  }
  return tg_cache_install(tmp, key, suffix, err, errlen);
}
