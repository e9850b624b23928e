/* ccjit.h: C source to a shared object with the system C compiler, cached.
 *
 * The CPU backend renders its kernels as C, builds them here and dlopens
 * the result.  The compiler is $CC if set (split at blanks, so "ccache gcc"
 * works; no quoting), else "cc".  It is run directly (posix_spawnp, no
 * shell) as
 *     CC -fPIC -shared FLAGS... -o TMP DIR/KEY.c LIBS...
 * with its stdout and stderr captured, where FLAGS are the caller's
 * (-O3 -march=native -fopenmp ...) and LIBS come after the source, where
 * the linker needs them (-lopenblas -lm).
 *
 * The cache key (cache.h) is the SHA-256 of the source, $CC, FLAGS, LIBS,
 * the compiler's `--version` output (run once per process and compiler)
 * and this CPU's identity from /proc/cpuinfo (the model name and the
 * feature flags, because -march=native makes code for exactly this CPU).
 * The source is kept as KEY.c in the cache directory, so that a failure or
 * a crash can be looked at; the object is KEY.so, written under a temporary
 * name and renamed when complete, with the compiler's output in KEY.log. */
#ifndef TG_CCJIT_H
#define TG_CCJIT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tg_so {
  char *path;      /* the cached shared object, ready for dlopen (malloc'ed) */
  char *log;       /* what the compiler printed, "" when nothing (malloc'ed) */
  bool from_cache; /* true when found in the cache and not compiled */
} tg_so;

/* Builds src into a shared object.  flags (nflags) and libs (nlibs) may be
 * NULL when their count is 0.  On success fills *out, which the caller
 * frees with tg_so_free.  On failure *out is left empty (freeing it is
 * harmless) and why holds why: for a failed compile, the compiler's exit
 * status and output, the path of the saved source and the command line. */
bool tg_ccjit_build(const char *src, const char *const *flags, int nflags,
                    const char *const *libs, int nlibs, tg_so *out, char *why, size_t whylen);

void tg_so_free(tg_so *so);

#endif
