/* flash_cuda.h: flash attention as CUDA (flash_cuda.c), and the memory
 * macros every generated CUDA file spells memory with; what it computes
 * and the argument order are flash.h's. */
#ifndef TG_FLASH_CUDA_H
#define TG_FLASH_CUDA_H

#include <stdio.h>

#include "flash.h"

/* ---- CUDA --------------------------------------------------------------
 * Emits CUDA C++ with no #include (for NVRTC without include paths; it
 * also builds for the emulated device behind cuda_emu.h): the memory
 * macros (below), device helpers named PREFIX_* and extern "C" __global__ kernels named
 * PREFIX_fwd, or PREFIX_bwd_dkdv and PREFIX_bwd_dq, each after a line
 * `// tg kernel: NAME`.  Needs sm_80 or newer (bf16 mma.sync and ldmatrix).
 * q, k, v, do are staged in shared memory as bf16 (rounded to nearest even)
 * and multiplied on the tensor cores with f32 accumulation; the softmax
 * statistics and lse are f32.  The same shape gives the same bytes.
 * tg_flash_supported says why a shape is refused (D must be a multiple of 16
 * up to 128); an unsupported shape emits an #error line instead. */
bool tg_flash_supported(const tg_flash_shape *s, char *why, size_t n);
void tg_flash_emit_cuda(FILE *out, const char *fn_prefix, const tg_flash_shape *s, bool backward);
/* The same without the memory macros, for a file that defines them once
 * at its top (tg_render_cuda). */
void tg_flash_emit_cuda_kernels(FILE *out, const char *fn_prefix, const tg_flash_shape *s, bool backward);

/* The macros generated CUDA spells memory with (guarded, so a file may
 * hold them more than once): TG_ARG(T) for a kernel's pointer argument,
 * TG_PTR(T) for a pointer into global or shared memory, TG_SHARED(T,
 * name, count) for a shared array, TG_LD4(p, i) for a 16-byte load.  On
 * the GPU (__CUDA_ARCH__) they are plain pointers and arrays, T
 * *__restrict__ for arguments, so NVRTC sees the code it always did; the
 * emulated device (runtime/cuda/emu/cuda_emu.h) defines them as
 * checked pointers.  The text is codegen/cuda/memory.cuh's.  (Each PTX
 * instruction is a tg_ wrapper in codegen/cuda/ptx.cuh, with the
 * emulator's version under #ifndef __CUDA_ARCH__; tg_flash_emit_cuda
 * prints them, tg_flash_emit_cuda_kernels expects the prelude's.) */
void tg_cuda_emit_memory_macros(FILE *out);

/* One kernel launch.  The launches of a call site run in the order given,
 * on one stream, with the argument list described above.  All shared
 * memory is static and under 48 KiB, so shmem is 0 and no opt-in attribute
 * is needed. */
typedef struct tg_flash_launch {
  char name[128]; /* kernel function name: PREFIX_fwd, PREFIX_bwd_dkdv, ... */
  unsigned grid[3], block[3];
  size_t shmem; /* dynamic shared bytes */
} tg_flash_launch;

enum { TG_FLASH_MAX_LAUNCHES = 4 };

/* Fills out[0..n) and returns n (1 for the forward, 2 for the backward), or
 * 0 if the shape is unsupported or the prefix too long for name. */
int tg_flash_cuda_launches(const tg_flash_shape *s, const char *fn_prefix, bool backward,
                           tg_flash_launch *out);

#endif
