/* nvrtc.h: CUDA C++ source to CUBIN with NVRTC, cached on disk.
 *
 * NVRTC is loaded with dlopen on first use, never linked: tgc and tgrun
 * must start, and the CPU backend must run, on machines without CUDA.  It
 * is looked for as libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so (the
 * loader's search path), then in $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
 * NVRTC needs no GPU, so every generated kernel can be compiled in CI.
 *
 * Options: --gpu-architecture=ARCH (a real architecture, so the output is
 * CUBIN for exactly that GPU), -std=c++17, then the caller's.  Warnings.
 * NVRTC prints all of its warnings by default (only -w silences them) and,
 * as of 13.0, rejects -Wall, -Werror and --Werror=all-warnings; it can only
 * promote warnings one by one (--diag-error=177,549,...).  So the compile
 * log is returned even on success: a test that wants "compiles with no
 * warnings" checks that the log is empty.
 *
 * Kernel names in errors.  Generated sources put a line
 *     // tg kernel: NAME
 * before each kernel.  When compilation fails, the error names, for every
 * line of the source that NVRTC's log mentions (as "SRC_NAME(LINE): ..."),
 * the kernel whose section holds that line (the last marker at or before
 * it), so a codegen bug points at the kernel that has it.
 *
 * The cache (cache.h) key is the SHA-256 of the source, its name, the
 * architecture, NVRTC's version and every option; an entry is KEY.cubin
 * with its log in KEY.log.  A hit returns both, from_cache set.
 *
 * Loading NVRTC is thread safe; compiling from several threads at once is
 * too, as far as NVRTC itself is. */
#ifndef TG_NVRTC_H
#define TG_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tg_cubin {
  void *data;      /* the CUBIN image (malloc'ed) */
  size_t size;
  char *log;       /* NVRTC's log, "" when it had nothing to say (malloc'ed) */
  bool from_cache; /* true when found in the cache and not compiled */
} tg_cubin;

/* Compiles src (NUL-terminated CUDA C++) for arch ("sm_80", "sm_90a", ...).
 * src_name is the file name NVRTC uses in its messages (NULL: "tg.cu").
 * opts are extra NVRTC options (nopts of them, may be NULL when 0).  On
 * success fills *out, which the caller frees with tg_cubin_free.  On
 * failure *out is left empty (freeing it is harmless) and why holds why:
 * NVRTC's whole log and the kernels its lines point into, or, when NVRTC
 * cannot be loaded, every place that was tried.  A cache that cannot be
 * read or written is an error too, not a silent recompile. */
bool tg_nvrtc_compile(const char *src, const char *src_name, const char *arch,
                      const char *const *opts, int nopts, tg_cubin *out, char *why,
                      size_t whylen);

void tg_cubin_free(tg_cubin *c);

/* Many programs compiled at once, `threads` at a time (<= 0: one per core,
 * tg_nvrtc_threads), each cached under its own key as tg_nvrtc_compile
 * caches one: changing one program recompiles only it.  Every job gets
 * its result (ok, out, why); false with the first failure's message when
 * any failed.  The caller frees each job's out. */
typedef struct tg_nvrtc_job {
  const char *src, *name; /* the source and its name (in messages and the cache key) */
  tg_cubin out;
  bool ok;
  char why[8192];
} tg_nvrtc_job;

bool tg_nvrtc_compile_all(tg_nvrtc_job *jobs, int n, const char *arch, const char *const *opts, int nopts,
                          int threads, char *why, size_t whylen);

/* The compile threads: $TG_COMPILE_THREADS, else the cores online. */
int tg_nvrtc_threads(void);

/* NVRTC's version (loading NVRTC if need be). */
bool tg_nvrtc_version(int *major, int *minor, char *why, size_t whylen);

#endif
