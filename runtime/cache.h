/* cache.h: the on-disk cache of compiled code, and the SHA-256 that keys it.
 *
 * Both backends JIT-compile generated source (CUDA with NVRTC, C with the
 * system compiler), which takes seconds; the result depends only on the
 * source, the compiler and its options, so it is kept on disk under the
 * SHA-256 of all of those and reused by every later run.
 *
 * Where: $TG_CACHE if set, else $XDG_CACHE_HOME/tg, else $HOME/.cache/tg,
 * created (mkdir -p) on first use.  An entry is one file, KEY SUFFIX, where
 * KEY is a lower-case hex digest and SUFFIX says what it holds (".cubin",
 * ".so", ".c", ".log").  Entries are written atomically (a temporary file in
 * the same directory, fsync, rename), so several processes may share the
 * cache: a reader sees either no entry or a whole one, and two writers of
 * the same key write the same bytes.  Nothing is ever evicted; removing the
 * directory is always safe.
 *
 * Errors come back as text in (err, errlen); nothing here prints or exits. */
#ifndef TG_CACHE_H
#define TG_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- SHA-256 (FIPS 180-4) ------------------------------------------------ */

typedef struct tg_sha256 {
  uint32_t h[8];
  uint64_t nbytes;          /* message length so far */
  unsigned char block[64];  /* a partial block waiting for more input */
  size_t nblock;
} tg_sha256;

enum { TG_SHA256_HEX = 65 }; /* 64 hex digits and the terminating NUL */

void tg_sha256_init(tg_sha256 *s);
void tg_sha256_update(tg_sha256 *s, const void *data, size_t n);
/* Finishes the digest: 32 bytes into out (may be NULL) and, as lower-case
 * hex, into hex (may be NULL).  s must be initialised again to reuse it. */
void tg_sha256_final(tg_sha256 *s, unsigned char out[32], char hex[TG_SHA256_HEX]);
/* Hashes one field of a cache key: its length (8 bytes, little-endian),
 * then its bytes.  Keys built from fields this way cannot collide by
 * shifting bytes between neighbours ("ab","c" vs "a","bc").  NULL hashes
 * like "". */
void tg_sha256_field(tg_sha256 *s, const char *str);

/* ---- the cache ----------------------------------------------------------- */

/* The cache directory, created if missing, into buf.  False with a message
 * naming the directory, the variable it came from and the reason when it
 * cannot be found or created. */
bool tg_cache_dir(char *buf, size_t buflen, char *err, size_t errlen);

/* The path of entry KEY SUFFIX (which need not exist) into buf; creates the
 * directory like tg_cache_dir.  key must be hex digits; suffix must be
 * empty or "." followed by letters, digits, '_' or '-'. */
bool tg_cache_path(const char *key, const char *suffix, char *buf, size_t buflen, char *err,
                   size_t errlen);

/* Reads entry KEY SUFFIX into a malloc'ed buffer (with a NUL after the last
 * byte, so text entries can be used as strings; *size excludes it).  A
 * missing entry is not an error: true with *found false and *data NULL. */
bool tg_cache_get(const char *key, const char *suffix, void **data, size_t *size, bool *found,
                  char *err, size_t errlen);

/* Writes entry KEY SUFFIX atomically, replacing any earlier one. */
bool tg_cache_put(const char *key, const char *suffix, const void *data, size_t size, char *err,
                  size_t errlen);

/* For files that another program writes (a compiler's output): a fresh,
 * empty, uniquely named file for entry KEY SUFFIX in the cache directory,
 * whose path goes into buf.  Give it to tg_cache_install when it is
 * complete, or unlink it. */
bool tg_cache_tmp(const char *key, const char *suffix, char *buf, size_t buflen, char *err,
                  size_t errlen);
/* Syncs the finished file at tmp and renames it to entry KEY SUFFIX; on
 * failure tmp is removed. */
bool tg_cache_install(const char *tmp, const char *key, const char *suffix, char *err,
                      size_t errlen);

#endif
