/* cuda_kernels.h: the step's CUDA kernels, each distinct one once
 * (cuda_kernels.c).
 *
 * GPT-2's step launches some 300 kernels, most of them twelve copies of
 * one layer's kernel that differ only in the buffers they are given.  Each
 * launched function (a wave of a fused kernel, or a flash attention step's
 * kernels) is rendered alone, its names made positional (the buffers b<N>
 * and values t<N>, r<N>, acc<N> numbered by first appearance), and
 * functions identical up to those names are one *unit*: one function,
 * launched for every place with that place's buffers as arguments.  A unit
 * is named by a hash of its text (f_<10 hex>), so its name, and its cache
 * entry, do not change when other kernels do.
 *
 * Within a wave, steps that differ only in their buffers and integer sizes
 * (the optimizer's update of every parameter, the gradient norm's sums) are
 * one __device__ function each shape of step has, and a table of those
 * steps (cuda_plan.h: tg_cuda_table) that the runtime fills with their
 * buffers' addresses: one branch per shape finds its block's entry and
 * runs the function once.  The multi-tensor launch stays one launch, its
 * branches do not grow with the tensors, and the assembler sees each shape
 * once instead of ~150 inlined copies.
 *
 * Every unit compiles on its own after the prelude (NVRTC: one program per
 * unit, compiled in parallel and cached each under its own hash); the .cu
 * for a person (render_cuda.h: tg_render_cuda) is the prelude then every unit,
 * each headed by the places it is launched for. */
#ifndef TG_CUDA_KERNELS_H
#define TG_CUDA_KERNELS_H

#include <stdio.h>

#include "cuda_plan.h"

typedef struct tg_cuda_unit {
  const char *name;     /* "f_0123456789": the wave's function, or the flash kernels' prefix */
  const char *code;     /* its text for a person, from its "// tg kernel:" marker on,
                         * headed by every place it is launched for */
  const char *body;     /* what is compiled: code without the comment that heads
                         * it (the places and their graph numbers), so that its
                         * cache entry outlives changes elsewhere in the graph */
  const char **globals; /* the __global__ functions it defines */
  int n_globals;
  int n_places;         /* how many launched functions of the program it is */
} tg_cuda_unit;

typedef struct tg_cuda_kernels {
  const char *prelude;  /* what every unit needs before it: macros, conversions, block reductions */
  tg_cuda_unit *units;  /* in order of first launch */
  int n_units;
} tg_cuda_kernels;

/* The units of p; renames every launch of plan (made from p) to its unit's
 * function, and gives each wave launch with tables its buffer parameters
 * and its tables (tg_cuda_launch).  Allocated in a. */
tg_cuda_kernels *tg_cuda_kernels_make(tg_arena *a, const tg_program *p, tg_cuda_plan *plan);

/* The source NVRTC compiles for unit u: the prelude, then the unit's
 * body (malloc'ed). */
char *tg_cuda_unit_source(const tg_cuda_kernels *ks, int u);

/* The prelude's helpers, for tg_render_cuda: the memory macros, index
 * type, conversions and block reductions. */
void tg_cuda_print_prelude(FILE *out);

#endif
