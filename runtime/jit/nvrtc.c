/* nvrtc.c: compiling CUDA C++ to CUBIN with a dlopen'ed NVRTC (see nvrtc.h).
 *
 * NVRTC's header is not included: its few entry points are declared here
 * with the same ABI (nvrtcResult is an enum, so an int; nvrtcProgram an
 * opaque pointer), so tg builds on machines without the CUDA toolkit too.
 *
 * A failure to load NVRTC is not remembered, so a later call (after
 * CUDA_HOME has been set, or in a test) tries again; a success is kept for
 * the life of the process and the library is never closed. */
#include "nvrtc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* sysconf */

#include "cache.h"
#include "compile_log.h"
#include "diag.h" /* tg_why */
#include "dynlib.h"
#include "sbuf.h"

enum { NVRTC_SUCCESS = 0 };
typedef struct nvrtc_program_ *nvrtc_program;

static struct {
  bool loaded;
  int major, minor;
  int (*version)(int *major, int *minor);
  const char *(*error_string)(int result);
  int (*create)(nvrtc_program *prog, const char *src, const char *name, int nheaders,
                const char *const *headers, const char *const *include_names);
  int (*destroy)(nvrtc_program *prog);
  int (*compile)(nvrtc_program prog, int nopts, const char *const *opts);
  int (*log_size)(nvrtc_program prog, size_t *size);
  int (*log)(nvrtc_program prog, char *log);
  int (*cubin_size)(nvrtc_program prog, size_t *size);
  int (*cubin)(nvrtc_program prog, char *cubin);
} nv;
static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- messages ------------------------------------------------------------ */

/* ---- loading NVRTC ------------------------------------------------------- */

/* The entry points of a loaded NVRTC, and its version; false with why. */
static bool bind(void *lib, tg_sbuf *why) {
  bool ok = tg_dynlib_fn(lib, "nvrtcVersion", &nv.version, why) &&
            tg_dynlib_fn(lib, "nvrtcGetErrorString", &nv.error_string, why) &&
            tg_dynlib_fn(lib, "nvrtcCreateProgram", &nv.create, why) &&
            tg_dynlib_fn(lib, "nvrtcDestroyProgram", &nv.destroy, why) &&
            tg_dynlib_fn(lib, "nvrtcCompileProgram", &nv.compile, why) &&
            tg_dynlib_fn(lib, "nvrtcGetProgramLogSize", &nv.log_size, why) &&
            tg_dynlib_fn(lib, "nvrtcGetProgramLog", &nv.log, why) &&
            tg_dynlib_fn(lib, "nvrtcGetCUBINSize", &nv.cubin_size, why) &&
            tg_dynlib_fn(lib, "nvrtcGetCUBIN", &nv.cubin, why);
  if (ok && nv.version(&nv.major, &nv.minor) != NVRTC_SUCCESS) {
    tg_sb_printf(why, " (nvrtcVersion failed)");
    ok = false;
  }
  return ok;
}

static bool load(char *why, size_t whylen) {
  pthread_mutex_lock(&nv_lock);
  if (nv.loaded) {
    pthread_mutex_unlock(&nv_lock);
    return true;
  }
  /* The versioned names first: a bare libnvrtc.so exists only where the
   * development package is installed. */
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  tg_sbuf tried = {0};
  void *lib = tg_dynlib_open(names, 3, true, &tried);
  bool ok = lib && bind(lib, &tried);
  if (lib && !ok) dlclose(lib);
  nv.loaded = ok;
  pthread_mutex_unlock(&nv_lock);
  if (!ok)
    tg_why(why, whylen,
         "cannot load NVRTC, the CUDA runtime compiler: tried %s; install NVRTC (CUDA toolkit "
         "12 or 13) or set CUDA_HOME to the toolkit's directory",
         tg_sb_text(&tried));
  tg_sb_free(&tried);
  return ok;
}

bool tg_nvrtc_version(int *major, int *minor, char *why, size_t whylen) {
  if (!load(why, whylen)) return false;
  *major = nv.major, *minor = nv.minor;
  return true;
}

/* ---- kernel names for log lines ------------------------------------------ */

/* The distinct line numbers, in log order, of the log's lines
 * "NAME(LINE): ..." that point into this source (not into a header). */
static int log_lines(const char *log, const char *name, long *lines, int max) {
  size_t nl = strlen(name);
  int n = 0;
  for (const char *p = log; *p && n < max;) {
    const char *end = strchr(p, '\n');
    if (!end) end = p + strlen(p);
    if (!strncmp(p, name, nl) && p[nl] == '(') {
      char *after;
      long l = strtol(p + nl + 1, &after, 10);
      if (after != p + nl + 1 && *after == ')' && l > 0) {
        bool seen = false;
        for (int i = 0; i < n; i++) seen = seen || lines[i] == l;
        if (!seen) lines[n++] = l;
      }
    }
    p = *end ? end + 1 : end;
  }
  return n;
}

/* The message for a failed compile (compile_log.h). */
static void compile_error(const char *src, const char *name, const char *arch, int rc,
                          const char *log, char *why, size_t whylen) {
  enum { MAX_LINES = 64 };
  long lines[MAX_LINES];
  int n = log_lines(log, name, lines, MAX_LINES);
  char after[128];
  snprintf(after, sizeof after, " for %s (%s)", arch, nv.error_string(rc));
  tg_compile_error("NVRTC", src, name, after, log, lines, n, TG_LINES_PAREN, why, whylen);
}

/* ---- compiling ----------------------------------------------------------- */

/* "sm_" and digits, maybe with a feature suffix ("sm_90a", "sm_100f"):
 * CUBIN is for one real architecture, so "compute_XX" cannot be used. */
static bool valid_arch(const char *arch) {
  if (!arch || strncmp(arch, "sm_", 3) || !(arch[3] >= '0' && arch[3] <= '9')) return false;
  const char *p = arch + 3;
  while (*p >= '0' && *p <= '9') p++;
  while ((*p >= 'a' && *p <= 'z')) p++;
  return *p == 0 && p - arch < 16;
}

void tg_cubin_free(tg_cubin *c) {
  if (!c) return;
  free(c->data);
  free(c->log);
  *c = (tg_cubin){0};
}

static bool cache_lookup(const char *key, tg_cubin *out, char *why, size_t whylen) {
  void *log = NULL, *cubin = NULL;
  size_t nlog, ncubin;
  bool has_log = false, has_cubin = false;
  /* The log is written first, so a cubin without one is a crashed writer's
   * leftover (or tampering): compile again and overwrite. */
  /* and a cubin must match its seal (size and SHA-256, cache.h): a
   * damaged or emptied one is compiled again */
  if (!tg_cache_get_sealed(key, ".cubin", &cubin, &ncubin, &has_cubin, NULL, 0, why, whylen)) return false;
  if (has_cubin && ncubin == 0) {
    free(cubin);
    cubin = NULL;
    has_cubin = false;
  }
  if (has_cubin && !tg_cache_get(key, ".log", &log, &nlog, &has_log, why, whylen)) {
    free(cubin);
    return false;
  }
  if (has_cubin && has_log) {
    *out = (tg_cubin){cubin, ncubin, log, true};
    return true;
  }
  free(cubin);
  free(log);
  return true;
}

bool tg_nvrtc_compile(const char *src, const char *src_name, const char *arch,
                      const char *const *opts, int nopts, tg_cubin *out, char *why,
                      size_t whylen) {
  *out = (tg_cubin){0};
  if (!src_name || !*src_name) src_name = "tg.cu";
  if (!src) return tg_why(why, whylen, "NVRTC: no source to compile");
  if (!valid_arch(arch))
    return tg_why(why, whylen, "NVRTC: bad GPU architecture '%s': want sm_XX, as in sm_80 or sm_90",
                arch ? arch : "(null)");
  if (nopts < 0 || (nopts > 0 && !opts)) return tg_why(why, whylen, "NVRTC: bad option list");
  if (!load(why, whylen)) return false;

  int nall = nopts + 2;
  const char **all = malloc(sizeof *all * (size_t)nall);
  char archopt[64];
  if (!all) return tg_why(why, whylen, "out of memory");
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  all[0] = archopt, all[1] = "-std=c++17";
  for (int i = 0; i < nopts; i++) all[2 + i] = opts[i] ? opts[i] : "";

  tg_sha256 s;
  char key[TG_SHA256_HEX], version[32];
  snprintf(version, sizeof version, "%d.%d", nv.major, nv.minor);
  tg_sha256_init(&s);
  tg_sha256_field(&s, "tg nvrtc cubin 1");
  tg_sha256_field(&s, version);
  tg_sha256_field(&s, arch);
  tg_sha256_field(&s, src_name);
  tg_sha256_field(&s, src);
  for (int i = 0; i < nall; i++) tg_sha256_field(&s, all[i]);
  tg_sha256_final(&s, NULL, key);

  bool ok = cache_lookup(key, out, why, whylen);
  if (!ok || out->from_cache) {
    free(all);
    return ok;
  }

  nvrtc_program prog = NULL;
  int rc = nv.create(&prog, src, src_name, 0, NULL, NULL);
  if (rc != NVRTC_SUCCESS) {
    free(all);
    return tg_why(why, whylen, "NVRTC cannot create a program for %s: %s", src_name,
                nv.error_string(rc));
  }
  rc = nv.compile(prog, nall, all);
  free(all);
  size_t nlog = 0;
  char *log = NULL;
  if (nv.log_size(prog, &nlog) == NVRTC_SUCCESS && (log = malloc(nlog + 1))) {
    if (nv.log(prog, log) != NVRTC_SUCCESS) nlog = 0;
    log[nlog] = 0;
  }
  if (!log) {
    nv.destroy(&prog);
    return tg_why(why, whylen, "NVRTC: cannot get the log of %s", src_name);
  }
  /* nlog counts the NUL; what matters for "no warnings" is the text. */
  nlog = strlen(log);
  if (rc != NVRTC_SUCCESS) {
    compile_error(src, src_name, arch, rc, log, why, whylen);
    free(log);
    nv.destroy(&prog);
    return false;
  }
  size_t ncubin = 0;
  char *cubin = NULL;
  if ((rc = nv.cubin_size(prog, &ncubin)) != NVRTC_SUCCESS ||
      !(cubin = malloc(ncubin ? ncubin : 1)) || (rc = nv.cubin(prog, cubin)) != NVRTC_SUCCESS) {
    ok = tg_why(why, whylen, "NVRTC: cannot get the CUBIN of %s: %s", src_name,
              rc != NVRTC_SUCCESS ? nv.error_string(rc) : "out of memory");
  }
  nv.destroy(&prog);
  if (ok)
    ok = tg_cache_put(key, ".log", log, nlog, why, whylen) &&
         tg_cache_put_sealed(key, ".cubin", cubin, ncubin, why, whylen);
  if (!ok) {
    free(cubin);
    free(log);
    return false;
  }
  *out = (tg_cubin){cubin, ncubin, log, false};
  return true;
}

/* ---- many programs at once ------------------------------------------------ */

typedef struct pool {
  tg_nvrtc_job *jobs;
  int n, next;
  const char *arch;
  const char *const *opts;
  int nopts;
  pthread_mutex_t lock;
} pool;

/* Takes jobs until none is left: one nvrtcProgram per job, so threads
 * share nothing but the counter (NVRTC allows concurrent compiles of
 * distinct programs). */
static void *worker(void *arg) {
  pool *P = arg;
  for (;;) {
    pthread_mutex_lock(&P->lock);
    int i = P->next++;
    pthread_mutex_unlock(&P->lock);
    if (i >= P->n) return NULL;
    tg_nvrtc_job *J = &P->jobs[i];
    J->ok = tg_nvrtc_compile(J->src, J->name, P->arch, P->opts, P->nopts, &J->out, J->why, sizeof J->why);
  }
}

int tg_nvrtc_threads(void) {
  const char *env = getenv("TG_COMPILE_THREADS");
  long n = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

bool tg_nvrtc_compile_all(tg_nvrtc_job *jobs, int n, const char *arch, const char *const *opts, int nopts,
                          int threads, char *why, size_t whylen) {
  if (!load(why, whylen)) return false;
  pool P = {jobs, n, 0, arch, opts, nopts, PTHREAD_MUTEX_INITIALIZER};
  if (threads <= 0) threads = tg_nvrtc_threads();
  if (threads > n) threads = n;
  pthread_t *t = calloc((size_t)threads + 1, sizeof *t);
  if (!t) return tg_why(why, whylen, "out of memory");
  int started = 0;
  for (int i = 1; i < threads; i++, started++)
    if (pthread_create(&t[i], NULL, worker, &P) != 0) break;
  worker(&P); /* this thread works too */
  for (int i = 1; i <= started; i++) pthread_join(t[i], NULL);
  free(t);
  for (int i = 0; i < n; i++)
    if (!jobs[i].ok) return tg_why(why, whylen, "%s", jobs[i].why);
  return true;
}
