/* flash.h: code generation for the flash attention ops, in C and in CUDA.
 *
 * One call site of flash attention (a forward: flash_attention_lse and
 * flash_attention together; or a backward: flash_attention_dq, _dk and _dv
 * together) becomes one emitted C function or a few CUDA kernels with its
 * shapes, strides and scale baked in as constants, so that the compiler sees
 * constant trip counts and strides.
 *
 * What they compute (docs/ir.md, "The flash attention ops"), for each batch
 * b < nb and head h < nh, with q, k, v, o, do [T, D] matrices and
 * s_ij = scale * q_i . k_j for keys j <= i:
 *   forward   lse_i = log sum_{j<=i} exp(s_ij),  o_i = sum_{j<=i} exp(s_ij - lse_i) v_j
 *   backward  P_ij = exp(s_ij - lse_i),  D_i = do_i . o_i,
 *             dS = P .* (do v^T - D),  dq = scale dS k,  dk = scale dS^T q,  dv = P^T do
 * Both renderers use the tiled online softmax and never hold a [T, T]
 * matrix; the backward recomputes P from lse.  Both are deterministic: every
 * output element is summed by one thread in a fixed order (no atomics), so
 * the same inputs give the same bits whatever the thread schedule.
 *
 * Emitted function arguments, in this order, as pointers to each operand's
 * base (float * for an f32 operand, unsigned short * for a bf16 one, the
 * inputs const):
 *   forward   (q, k, v, o, lse)
 *   backward  (q, k, v, o, lse, do, dq, dk, dv)
 * Every backward CUDA kernel takes all nine; every forward kernel all five.
 * Outputs must not overlap each other or the inputs; the inputs may overlap
 * (q, k and v are usually views of one qkv buffer).
 */
#ifndef TG_FLASH_H
#define TG_FLASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Where one operand's elements are: element (b, h, t, d) is at
 * offset + b*stride[0] + h*stride[1] + t*stride[2] + d*stride[3] elements
 * from the argument pointer (lse uses stride[0..2]; it has no d). */
typedef struct tg_flash_operand {
  int64_t offset;
  int64_t stride[4];
  bool bf16; /* stored as bf16 (raw uint16 bits), else f32 */
} tg_flash_operand;

typedef struct tg_flash_shape {
  int64_t nb, nh, T, D;
  double scale;
  tg_flash_operand q, k, v, o, lse, dout, dq, dk, dv; /* dq, dk, dv: backward only */
} tg_flash_shape;

/* ---- C (CPU backend) ----------------------------------------------------
 * Each emits one C11 function `void fn(...)` with external linkage, for
 * `cc -O2 (or -O3) -fopenmp`.  It computes in f32, parallel with OpenMP
 * (`#pragma omp parallel for`), allocates nothing (its tiles are on the
 * stack, under 100 KiB a thread), and needs no header: it declares expf and
 * logf itself, which is compatible with <math.h> in the same file.  Link
 * with -lm.  Helpers it needs are emitted as static inline functions
 * named fn_*.  An unsupported shape emits an #error line with the reason. */
bool tg_flash_supported_c(const tg_flash_shape *s, char *why, size_t n);
void tg_flash_emit_c_fwd(FILE *out, const char *fn, const tg_flash_shape *s);
void tg_flash_emit_c_bwd(FILE *out, const char *fn, const tg_flash_shape *s);

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
 * checked pointers.  Each PTX instruction sits in a small device function
 * with the emulator's version under #ifndef __CUDA_ARCH__. */
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
