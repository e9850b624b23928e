/* cache.h: the on-disk cache of compiled code, and the SHA-256 that keys it.
 *
 * Both backends JIT-compile generated source (CUDA with NVRTC, C with the
 * system compiler), which takes seconds; the result depends only on the
 * source, the compiler and its options, so it is kept on disk under the
 * SHA-256 of all of those and reused by every later run.
 *
 * Where: $TG_CACHE if set, else $XDG_CACHE_HOME/tg, else $HOME/.cache/tg,
 * created (mkdir -p) on first use.  Reading needs only an existing
 * directory: a read-only cache that holds every entry a run needs serves
 * it; only writing a new entry needs the directory writable.  An entry is one file, KEY SUFFIX, where
 * KEY is a lower-case hex digest and SUFFIX says what it holds (".cubin",
 * ".so", ".c", ".log").  Entries are written atomically (a temporary file in
 * the same directory, fsync, rename), so several processes may share the
 * cache: a reader sees either no entry or a whole one, and two writers of
 * the same key write the same bytes.  Nothing is ever evicted; removing the
 * directory is always safe.
 *
 * Keys are SHA-256 digests (base/sha256.h).
 *
 * Errors come back as text in (why, whylen); nothing here prints or exits. */
#ifndef TG_CACHE_H
#define TG_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

/* ---- the cache ----------------------------------------------------------- */

/* The cache directory, created if missing, into buf.  False with a message
 * naming the directory, the variable it came from and the reason when it
 * cannot be found or created. */
bool tg_cache_dir(char *buf, size_t buflen, char *why, size_t whylen);

/* The path of entry KEY SUFFIX (which need not exist) into buf; creates the
 * directory like tg_cache_dir.  key must be hex digits; suffix must be
 * empty or "." followed by letters, digits, '_' or '-'. */
bool tg_cache_path(const char *key, const char *suffix, char *buf, size_t buflen, char *why,
                   size_t whylen);

/* Reads entry KEY SUFFIX into a malloc'ed buffer (with a NUL after the last
 * byte, so text entries can be used as strings; *size excludes it).  A
 * missing entry is not an error: true with *found false and *data NULL. */
bool tg_cache_get(const char *key, const char *suffix, void **data, size_t *size, bool *found,
                  char *why, size_t whylen);

/* Writes entry KEY SUFFIX atomically, replacing any earlier one. */
bool tg_cache_put(const char *key, const char *suffix, const void *data, size_t size, char *why,
                  size_t whylen);

/* For files that another program writes (a compiler's output): a fresh,
 * empty, uniquely named file for entry KEY SUFFIX in the cache directory,
 * whose path goes into buf.  Give it to tg_cache_install when it is
 * complete, or unlink it. */
bool tg_cache_tmp(const char *key, const char *suffix, char *buf, size_t buflen, char *why,
                  size_t whylen);
/* Syncs the finished file at tmp and renames it to entry KEY SUFFIX; on
 * failure tmp is removed. */
bool tg_cache_install(const char *tmp, const char *key, const char *suffix, char *why,
                      size_t whylen);

/* ---- seals: entries checked before use ---------------------------------- */

/* A file in the cache can be damaged after it was written (a disk, a copy
 * cut short, a person): a truncated shared object crashes dlopen's caller
 * with SIGBUS, altered code with SIGILL.  So every entry that is run is
 * sealed: entry KEY SUFFIX-sum holds its size and SHA-256, and is checked
 * before the entry is used; one that does not match is rebuilt. */

/* Writes entry KEY SUFFIX and then its seal. */
bool tg_cache_put_sealed(const char *key, const char *suffix, const void *data, size_t size, char *why,
                         size_t whylen);
/* Seals entry KEY SUFFIX as it is now (a file another program wrote and
 * tg_cache_install put in place). */
bool tg_cache_seal(const char *key, const char *suffix, char *why, size_t whylen);
/* tg_cache_get for a sealed entry: an entry without a seal, or one that
 * does not match it, comes back as not found (so the caller rebuilds it),
 * with the reason in damaged when that is not NULL ("" otherwise). */
bool tg_cache_get_sealed(const char *key, const char *suffix, void **data, size_t *size, bool *found,
                         char *damaged, size_t damagedlen, char *why, size_t whylen);

#endif
