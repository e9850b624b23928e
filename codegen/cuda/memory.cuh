/* memory.cuh: the macros generated CUDA spells memory with (TG_ARG,
 * TG_PTR, TG_SHARED, TG_SHARED_DYNAMIC, TG_LD4, TG_TABLE_PTR; flash_cuda.h:
 * tg_cuda_emit_memory_macros).  On the GPU they are plain pointers and
 * arrays; the emulated device (runtime/cuda/emu/cuda_emu.h) defines its
 * checked versions first.  Guarded, so a file may hold them more than once.
 * Embedded at build time (cmake/embed.cmake, without this comment). */

// Memory is spelled with these so that the emulated device (runtime/cuda/emu/
// cuda_emu.h, put in front of this file when it is built for the host) can check every
// access against its buffer; on the GPU they are plain pointers.
#ifndef TG_MEMORY_MACROS
#define TG_MEMORY_MACROS
#ifdef __CUDA_ARCH__
#define TG_ARG(T) T *__restrict__                   // a kernel's pointer argument
#define TG_PTR(T) T *                               // a pointer into global or shared memory
#define TG_SHARED(T, name, count) __shared__ T name[count]  // a block's shared array
#define TG_SHARED_DYNAMIC(T, name) extern __shared__ __align__(16) T name[]
#define TG_LD4(p, i) (*(const float4 *)&(p)[i])    // p[i..i+3] as one 16-byte load
#define TG_TABLE_PTR(T, name, buf) T *__restrict__ const name = (T *)(buf).addr  // a table's buffer
#elif !defined(TG_CUDA_EMU_H)
#error "compile this with NVRTC, or for the emulated device after cuda_emu.h"
#endif
#endif

