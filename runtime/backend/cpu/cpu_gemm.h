/* cpu_gemm.h: which library the CPU backend's generated C multiplies
 * matrices with, chosen once per process.
 *
 * The generated C calls tg_sgemm (codegen/c/prelude.h), compiled to
 * oneDNN's dnnl_sgemm or to OpenBLAS's cblas_sgemm by a flag.  oneDNN picks
 * its kernels by the CPU's features (cpuid), so a CPU newer than the
 * library still gets its AVX-512 kernels; OpenBLAS's DYNAMIC_ARCH builds up
 * to 0.3.24 (Debian 12 has 0.3.21) pick theirs by the model number and fall
 * back to the SSE3 "Prescott" kernels on one they do not know, five times
 * slower on the Xeons of 2023 (docs/performance.md).  OpenBLAS stays linked
 * either way: the one-row products (sgemv) and the bf16 ones (sbgemm) are
 * its.
 *
 * TG_CPU_GEMM chooses: "onednn", "openblas", or "auto" (the default:
 * oneDNN where libdnnl.so.2 loads, else OpenBLAS; OpenBLAS in a sanitizer
 * build, whose LeakSanitizer cannot walk the thread-local storage of
 * oneDNN's OpenMP threads).  oneDNN's f32 GEMM kernels before 3.11.2 point
 * the stack pointer into the heap while they run (uxlfoundation/oneDNN
 * #4845), so a signal handled on a thread running them corrupts the heap:
 * training takes its stop signals on a thread of their own
 * (runtime/train/stop_signals.h). */
#ifndef TG_CPU_GEMM_H
#define TG_CPU_GEMM_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { TG_CPU_GEMM_OPENBLAS, TG_CPU_GEMM_ONEDNN } tg_cpu_gemm_library;

typedef struct tg_cpu_gemm {
  tg_cpu_gemm_library library;
  const char *flag;     /* the compile flag that selects it, or NULL */
  char link[4096];      /* the library's file for the linker, or "" (OpenBLAS: always linked) */
  char name[256];       /* "oneDNN 2.6.3 (avx512_core_bf16 kernels)", "OpenBLAS 0.3.21 (Haswell kernels)" */
  void *handle;         /* dlopen's, kept open for the timing */
} tg_cpu_gemm;

/* Chooses the library (TG_CPU_GEMM) and loads it.  False, with why, for a
 * TG_CPU_GEMM that names no library or one that cannot be loaded. */
bool tg_cpu_gemm_choose(tg_cpu_gemm *g, char *why, size_t whylen);

/* The chosen library's sgemm on one core, in FLOP/s: 512 x 512 x 512
 * products for about 0.2 s.  0 with why where it cannot be timed. */
double tg_cpu_gemm_flops_one_core(const tg_cpu_gemm *g, char *why, size_t whylen);

void tg_cpu_gemm_close(tg_cpu_gemm *g);

#endif
