/* cpu_gemm.c: the CPU backend's matmul library (cpu_gemm.h). */
#define _GNU_SOURCE /* dlinfo: where the loaded library is */
#include "cpu_gemm.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diag.h"

typedef void cblas_sgemm_fn(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                            float *, int);
typedef int dnnl_sgemm_fn(char, char, long, long, long, float, const float *, long, const float *, long, float,
                          float *, long);
typedef struct { int major, minor, patch; const char *hash; unsigned cpu_runtime, gpu_runtime; } dnnl_version_info;

static const char onednn_soname[] = "libdnnl.so.2";

/* oneDNN's dnnl_cpu_isa_t (dnnl_types.h) as its documentation names them */
static const char *onednn_isa_name(int isa) {
  switch (isa) {
  case 0x1: return "sse41";
  case 0x3: return "avx";
  case 0x7: return "avx2";
  case 0x407: return "avx2_vnni";
  case 0x27: return "avx512_core";
  case 0x67: return "avx512_core_vnni";
  case 0xe7: return "avx512_core_bf16";
  case 0x3e7: return "avx512_core_amx";
  default: return NULL;
  }
}

static bool load_onednn(tg_cpu_gemm *g, char *why, size_t whylen) {
  g->handle = dlopen(onednn_soname, RTLD_NOW | RTLD_LOCAL);
  if (!g->handle) return tg_why(why, whylen, "cannot load oneDNN (%s): %s", onednn_soname, dlerror());
  const dnnl_version_info *(*version)(void) = (const dnnl_version_info *(*)(void))dlsym(g->handle, "dnnl_version");
  int (*isa)(void) = (int (*)(void))dlsym(g->handle, "dnnl_get_effective_cpu_isa");
  if (!dlsym(g->handle, "dnnl_sgemm") || !version || !isa) {
    dlclose(g->handle);
    g->handle = NULL;
    return tg_why(why, whylen, "%s has no dnnl_sgemm, dnnl_version or dnnl_get_effective_cpu_isa", onednn_soname);
  }
  const dnnl_version_info *v = version();
  const char *isa_name = onednn_isa_name(isa());
  g->library = TG_CPU_GEMM_ONEDNN;
  g->flag = "-DTG_GEMM_ONEDNN";
  /* the generated object links the very file loaded here, found where
   * dlopen found it (LD_LIBRARY_PATH included, which the linker's -l
   * would not search) */
  struct link_map *map = NULL;
  if (dlinfo(g->handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0] == '/')
    snprintf(g->link, sizeof g->link, "%s", map->l_name);
  else
    snprintf(g->link, sizeof g->link, "-l:%s", onednn_soname);
  if (isa_name) snprintf(g->name, sizeof g->name, "oneDNN %d.%d.%d (%s kernels)", v->major, v->minor, v->patch, isa_name);
  else snprintf(g->name, sizeof g->name, "oneDNN %d.%d.%d (kernels 0x%x)", v->major, v->minor, v->patch, (unsigned)isa());
  return true;
}

/* Whether OpenBLAS chose kernels from before AVX2 on a CPU that has it:
 * its fallback for a model it does not know (cpu_gemm.h), a fifth of the
 * speed it could have. */
static bool older_than_cpu(const char *kernels) {
#if defined(__x86_64__) || defined(__i386__)
  static const char *const pre_avx2[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                         "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias"};
  for (size_t i = 0; i < sizeof pre_avx2 / sizeof *pre_avx2; i++)
    if (!strcmp(kernels, pre_avx2[i])) return __builtin_cpu_supports("avx2");
#endif
  (void)kernels;
  return false;
}

static bool load_openblas(tg_cpu_gemm *g, char *why, size_t whylen) {
  g->handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!g->handle) g->handle = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
  if (!g->handle) return tg_why(why, whylen, "cannot load OpenBLAS (libopenblas.so.0): %s", dlerror());
  char *(*core)(void) = (char *(*)(void))dlsym(g->handle, "openblas_get_corename");
  char *(*config)(void) = (char *(*)(void))dlsym(g->handle, "openblas_get_config");
  g->library = TG_CPU_GEMM_OPENBLAS;
  g->flag = NULL;
  g->link[0] = 0;
  /* its config begins "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words */
  char library[16] = "OpenBLAS", version[24] = "";
  if (config) sscanf(config(), "%15s %23s", library, version);
  const char *kernels = core ? core() : "unknown";
  snprintf(g->name, sizeof g->name, "%s%s%s (%s kernels%s)", library, *version ? " " : "", version, kernels,
           older_than_cpu(kernels) ? ": this OpenBLAS does not know this CPU, which has AVX2; install libdnnl2 "
                                     "for oneDNN's, or set OPENBLAS_CORETYPE=Haswell, or SkylakeX where it has "
                                     "AVX-512" /* no parentheses: the name sits in the mfu line's */
                                   : "");
  return true;
}

bool tg_cpu_gemm_choose(tg_cpu_gemm *g, char *why, size_t whylen) {
  *g = (tg_cpu_gemm){0};
  const char *want = getenv("TG_CPU_GEMM");
  if (!want || !*want || !strcmp(want, "auto")) {
#ifdef TG_SANITIZE
    return load_openblas(g, why, whylen);
#else
    char ignored[200];
    return load_onednn(g, ignored, sizeof ignored) || load_openblas(g, why, whylen);
#endif
  }
  if (!strcmp(want, "onednn")) {
    if (load_onednn(g, why, whylen)) return true;
    size_t n = strlen(why);
    if (n < whylen) snprintf(why + n, whylen - n, " (TG_CPU_GEMM=onednn; install Debian's libdnnl2, or unset it)");
    return false;
  }
  if (!strcmp(want, "openblas")) return load_openblas(g, why, whylen);
  return tg_why(why, whylen, "TG_CPU_GEMM=%s names no matmul library: use onednn, openblas or auto", want);
}

typedef struct {
  const tg_cpu_gemm *g;
  double flops;
} timing;

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* On a thread of its own: oneDNN's sgemm runs on as many OpenMP threads as
 * the calling thread's OpenMP settings allow, and omp_set_num_threads(1)
 * there leaves the kernels' own threads as they are (libgomp keeps a
 * thread outside any team its own settings). */
static void *time_one_core(void *arg) {
  timing *t = arg;
  const tg_cpu_gemm *g = t->g;
  enum { N = 512, ROW_MAJOR = 101, NO_TRANS = 111 };
  cblas_sgemm_fn *blas = NULL;
  dnnl_sgemm_fn *dnnl = NULL;
  if (g->library == TG_CPU_GEMM_ONEDNN) {
    dnnl = (dnnl_sgemm_fn *)dlsym(g->handle, "dnnl_sgemm");
    void (*omp_threads)(int) = (void (*)(int))dlsym(g->handle, "omp_set_num_threads");
    if (omp_threads) omp_threads(1);
  } else {
    blas = (cblas_sgemm_fn *)dlsym(g->handle, "cblas_sgemm");
    void (*blas_threads)(int) = (void (*)(int))dlsym(g->handle, "openblas_set_num_threads");
    if (blas_threads) blas_threads(1);
  }
  if (!blas && !dnnl) return NULL;
  float *a = calloc(3 * (size_t)N * N, sizeof(float));
  if (!a) return NULL;
  float *b = a + N * N, *c = b + N * N;
  for (int i = 0; i < 2 * N * N; i++) a[i] = (float)(i % 7) * 0.25f - 0.75f;
  struct timespec t0;
  double secs = 0;
  int calls = -1; /* the first call warms pages, caches, the clock and oneDNN's kernels */
  do {
    if (calls == 0) clock_gettime(CLOCK_MONOTONIC, &t0);
    if (dnnl) dnnl('N', 'N', N, N, N, 1, a, N, b, N, 0, c, N);
    else blas(ROW_MAJOR, NO_TRANS, NO_TRANS, N, N, N, 1, a, N, b, N, 0, c, N);
    calls++;
    if (calls > 0) secs = seconds_since(&t0);
  } while (calls < 1 || secs < 0.2);
  free(a);
  t->flops = 2.0 * N * N * N * calls / secs;
  return NULL;
}

double tg_cpu_gemm_flops_one_core(const tg_cpu_gemm *g, char *why, size_t whylen) {
  timing t = {g, 0};
  pthread_t thread;
  if (!g->handle) return tg_why(why, whylen, "no matmul library loaded"), 0;
  if (pthread_create(&thread, NULL, time_one_core, &t)) return tg_why(why, whylen, "cannot start a thread"), 0;
  pthread_join(thread, NULL);
  if (!(t.flops > 0)) tg_why(why, whylen, "cannot time %s's sgemm", g->name);
  return t.flops;
}

void tg_cpu_gemm_close(tg_cpu_gemm *g) {
  if (g->handle) dlclose(g->handle);
  g->handle = NULL;
}
