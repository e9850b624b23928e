/* render_cuda.h: the CUDA target's entry points (render_cuda.c,
 * render_cuda_runtime.c).
 *
 * The file is self-contained for a whole program (every kernel of a
 * training step, in order), each kernel headed by a comment listing the ops
 * it fuses and their .tg lines.  The output depends only on the program:
 * the same graph gives the same bytes. */
#ifndef TG_RENDER_CUDA_H
#define TG_RENDER_CUDA_H

#include <stdio.h>

#include "cuda_kernels.h"
#include "lower.h"

/* CUDA C++ for NVRTC, with no #include: one extern "C" __global__ function
 * per wave of each kernel (a multi-tensor kernel's tensors share a launch),
 * plus the flash attention kernels.  Matmuls are cuBLASLt calls made by the
 * runtime; the manifest describes them. */
void tg_render_cuda(FILE *out, const tg_program *p);

/* tg_render_cuda's file from a plan and its units made already (the
 * backend and tgc have them; making them again costs as much as the
 * rendering). */
void tg_render_cuda_from(FILE *out, const tg_program *p, const tg_cuda_plan *plan, const tg_cuda_kernels *ks);

/* The CUDA backend's own kernels (render_cuda_runtime.c): tg_accumulate
 * (float *acc, const float *g, float scale, int first, long long n), the
 * bucket hooks' acc = (first ? 0 : acc) + scale * g, any grid; and
 * cuBLASLt's epilogues as kernels for a matmul whose epilogue cuBLASLt has
 * no algorithm for: tg_lt_epilogue_{f32,bf16} (bias, GELU with its aux,
 * GELU's derivative on a column-major D) and tg_lt_bgrad_{f32,bf16} (a
 * bias gradient: sums over k of op(A)'s rows or op(B)'s columns); and
 * ZeRO's tg_shard_pack_b{32,16,8} (T *pack, const T *t, long long numel,
 * s, block, at, q0, nq) and tg_shard_unpack_b{32,16,8} (T *t, const T
 * *pack, numel, s, block, at), which move shards of s elements between a
 * tensor and NCCL's staging buffer of `block` elements a rank. */
void tg_render_cuda_runtime(FILE *out);

/* The manifest (codegen/manifest.h) of the .cu file named file: every
 * launch (function, grid, block, shared bytes), the cuBLASLt matmuls and
 * the all-reduce points, each kernel's arguments saying which value they
 * are and where it lives. */
void tg_render_cuda_manifest(FILE *out, const tg_program *p, const char *file);

/* tg_render_cuda_manifest from a plan whose kernels tg_cuda_kernels_make
 * has made already (tgc has it: making them again doubled tgc's time). */
void tg_render_cuda_manifest_from(FILE *out, const tg_program *p, const tg_cuda_plan *plan, const char *file);

#endif
