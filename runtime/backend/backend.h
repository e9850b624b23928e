/* backend.h: the one interface every backend implements.
 *
 * Glossary (one word for each, everywhere in tg):
 *   backend  a way of running graphs, chosen by name (--backend, backend =):
 *            ref, cpu, cuda, cuda-emu; tg_backend is its table of functions.
 *   device   a backend opened for use (tg_device): its memory and context.
 *   exec     one graph compiled for a device (tg_exec), run step by step.
 *
 * The reference interpreter (backend/ref), the CPU backend (backend/cpu:
 * generated C) and the CUDA backend with its emulated device
 * (backend/cuda) all implement it; the training loop and every tgrun
 * command use only what is declared here, and choose a backend once, by
 * name (backend/registry/backends.h).  The pieces, as tinygrad's Compiled
 * device has them (allocator, compiler, runtime):
 *
 *   tg_device  an opened backend: its memory and whatever it keeps for
 *              all the graphs it runs (a CUDA context, a pack buffer);
 *   tg_exec    one graph compiled for a device, for the shapes in the
 *              graph (B and T are bound when the model is compiled);
 *   tg_tensor  device memory holding one value: a leaf's (parameter,
 *              input, optimizer state), or the caller's own (a gradient
 *              accumulator).  Graphs share a tensor by binding their
 *              leaves to it: the four graphs of a training run read one
 *              copy of the parameters.
 *
 * Leaves are named by their nodes (identity), never by rebuilt names.
 * Values cross between host and device only through tensor_write,
 * tensor_read and read, as f32, f64 or i32 host arrays, whatever the
 * device keeps them as.
 *
 * Errors in compiling or running are reported through the tg_ctx given
 * (file, place, what to change) and bail, like the rest of tg. */
#ifndef TG_BACKEND_H
#define TG_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir.h"

/* How the reference interpreter rounds (its only choice; the compiled
 * backends compute in f32): TG_PREC_F64 keeps every f32 value as an
 * exact double, TG_PREC_F32 rounds each to float as a float32 machine
 * stores it. */
typedef enum tg_precision { TG_PREC_F64, TG_PREC_F32 } tg_precision;

/* The element type of a host array given to or taken from a device. */
typedef enum tg_host_type { TG_HOST_F32, TG_HOST_F64, TG_HOST_I32 } tg_host_type;

typedef struct tg_backend tg_backend; /* a backend: its table of functions */
typedef struct tg_device tg_device;
typedef struct tg_exec tg_exec;
typedef struct tg_tensor tg_tensor;

typedef struct tg_device_opts {
  tg_precision precision; /* ref: f32 or f64; the others accept f32 only */
  int local_rank;         /* which of the machine's devices (cuda), 0 otherwise */
} tg_device_opts;

typedef struct tg_exec_opts {
  const char *name;        /* "grad", "eval", ...: for messages and profiles */
  const char *source_path; /* write the generated source here; NULL: nowhere */
  int remat;               /* lowering: recompute matmul epilogue values in
                            * their readers (1) or store them (0); -1: the
                            * backend's choice (the CPU's: recompute only
                            * what adds and multiplies remake, lower.h) */
} tg_exec_opts;

/* How long compiling a graph took and what it compiled (for tgrun's
 * "compile:" line): the front end here is the backend's part of it
 * (lowering and rendering; parsing and the passes are the caller's), the
 * back end the compiler (NVRTC, cc); kernels distinct kernels, units the
 * programs the compiler ran on (a GPU: one per kernel), cached of them
 * taken from the cache. */
typedef struct tg_compile_stats {
  double front_seconds, back_seconds;
  const char *compiler; /* "NVRTC", "cc", ...; NULL: nothing was compiled */
  int kernels, units, cached;
} tg_compile_stats;

/* ---- devices ---------------------------------------------------------------- */

/* Opens backend x; errors (no GPU, a precision it lacks) are reported
 * through ctx and bail. */
tg_device *tg_device_open(tg_ctx *ctx, const tg_backend *x, const tg_device_opts *o);
void tg_device_close(tg_device *d);

/* What the device x would open on this machine is, asked without opening
 * it (no context, nothing compiled): the accelerator's name as its driver
 * reports it ("NVIDIA H200") and its memory in bytes, for the parallel
 * planner before a run.  False, with why, for a backend that runs on the
 * host (ref, cpu) or when the driver cannot answer. */
typedef struct tg_device_facts {
  char name[128];
  double memory_bytes;
} tg_device_facts;
bool tg_backend_probe(const tg_backend *x, int local_rank, tg_device_facts *out, char *why, size_t whylen);
const char *tg_device_name(const tg_device *d); /* the backend's name: "cpu" */
/* A line saying what runs it: "the reference interpreter, f32" */
const char *tg_device_describe(const tg_device *d);
/* The file suffix of the source the backend generates (".c", ".cu"), or
 * NULL when it generates none: what to name tg_exec_opts.source_path. */
const char *tg_device_source_suffix(const tg_device *d);

/* The device's peak FLOP/s for dense matmuls at the run's precision (bf16:
 * the GPU's tensor cores; else f32), the denominator of MFU, with in *what
 * where the figure comes from (a datasheet, a measurement); 0 when the
 * backend cannot tell (the reference interpreter, the emulated GPU, a GPU
 * missing from the table), *what then saying why.  The CPU backend times
 * OpenBLAS once (tenths of a second) and keeps the figure. */
double tg_device_peak_flops(tg_device *d, bool bf16, const char **what);

/* The bytes of memory free on d for its tensors, and in *what where that
 * figure comes from ("cuMemGetInfo on GPU 0"), for a device with memory
 * of its own; -1 for a device whose tensors are host memory (the caller
 * asks the host).  For the memory check before a run. */
int64_t tg_device_memory_free(tg_device *d, const char **what);

/* Averages the tensors over the ranks of a data-parallel run (runtime/comm):
 * one all-reduce for all of them, then one division, the same bits on
 * every rank.  Nothing to do on one rank. */
void tg_device_allreduce_average(tg_device *d, tg_tensor *const *ts, int n);

/* ---- tensors ------------------------------------------------------------------ */

/* A zeroed tensor of type t (its dtype and shape) on d; free it before d. */
tg_tensor *tg_tensor_new(tg_device *d, const tg_type *t);
void tg_tensor_free(tg_tensor *t);
const tg_type *tg_tensor_type(const tg_tensor *t);
/* The whole tensor from or to a host array of numel elements of ht,
 * converted (to bf16 rounding to nearest even); i32 only to or from i32. */
void tg_tensor_write(tg_tensor *t, const void *src, tg_host_type ht);
void tg_tensor_read(const tg_tensor *t, void *dst, tg_host_type ht);
/* A 64-bit hash of the tensor's bytes as the device keeps them: equal
 * hashes on every rank mean bit-identical replicas. */
uint64_t tg_tensor_hash(const tg_tensor *t);

/* ---- compiled graphs ---------------------------------------------------------- */

/* Compiles g (after the pipeline; fused and planned for the compiled
 * backends) for d.  g must outlive the result. */
tg_exec *tg_exec_compile(tg_device *d, tg_ctx *ctx, const tg_graph *g, const tg_exec_opts *o);
/* Compiles n graphs at once (o[i] for g[i]), into out: as n calls of
 * tg_exec_compile, except that a backend may run their compilers in
 * parallel (the CPU backend: one cc a graph, one per core). */
void tg_exec_compile_all(tg_device *d, tg_ctx *ctx, const tg_graph *const *g, const tg_exec_opts *o, int n,
                         tg_exec **out);
void tg_exec_free(tg_exec *e);
const tg_graph *tg_exec_graph(const tg_exec *e);
/* Whether the compiled code came from the on-disk cache (for progress lines). */
bool tg_exec_from_cache(const tg_exec *e);
/* What compiling e took (all zero for a backend that compiles nothing). */
tg_compile_stats tg_exec_compile_stats(const tg_exec *e);

/* The tensor leaf (an input, param or state of the graph) reads and the
 * step's assigns update: its own, zeroed (ones for a `ones` initialiser),
 * unless bound; for a leaf the compiled step never reads (the lowering
 * gives it no memory), a tensor apart that nothing reads.  NULL when leaf
 * is not a leaf of the graph. */
tg_tensor *tg_exec_leaf(tg_exec *e, const tg_node *leaf);
/* Makes leaf use t, which must be of leaf's type and outlive e. */
void tg_exec_bind(tg_exec *e, const tg_node *leaf, tg_tensor *t);

/* Runs the graph once: every kernel in order, then the assigns update
 * their leaves.  Run-time errors (an index out of range in the
 * interpreter) are reported through ctx and bail. */
void tg_exec_run(tg_ctx *ctx, tg_exec *e);
/* The value of n after a run as numel host elements: a graph output, a
 * leaf, or anything else the step still holds at its end.  False when n
 * is not in memory then. */
bool tg_exec_read(tg_exec *e, const tg_node *n, void *dst, tg_host_type ht);

/* The f32 value of e's scalar output `name` after a run (the loss, the
 * gradient norm); false when the graph has no such output in memory. */
bool tg_exec_read_scalar(tg_exec *e, const char *name, float *v);

/* ---- gradients, bucket by bucket ----------------------------------------------- */

/* Called during each run for each bucket of gradients (g->allreduce,
 * passes/schedule.c) as soon as the kernels have produced all of it, in
 * bucket order; NULL: none.  The hook may call tg_exec_accumulate and
 * tg_device_allreduce_average: on a GPU these are queued in order with
 * the rest of the step. */
typedef void (*tg_bucket_hook)(tg_exec *e, int bucket, void *ctx);
void tg_exec_on_bucket(tg_exec *e, tg_bucket_hook fn, void *ctx);
/* acc = (first ? 0 : acc) + scale * n, elementwise in f32, for a value n
 * of e's graph that is in memory now (a gradient in its bucket hook). */
void tg_exec_accumulate(tg_exec *e, const tg_node *n, tg_tensor *acc, float scale, bool first);

/* ---- ZeRO: shards and their collectives ------------------------------------------ */

/* Whether d's backend has what ZeRO's stages need: tensor views and the
 * collectives below (a run asks before any work). */
bool tg_device_can_shard(const tg_device *d);
/* A view of elements [offset, offset + numel(type)) of t, as a tensor of
 * type `type` (of t's dtype): it shares t's memory, so a write through
 * either shows in both.  Free it (before t) with tg_tensor_free, which
 * frees none of t's memory. */
tg_tensor *tg_tensor_view(tg_tensor *t, int64_t offset, const tg_type *type);
/* The memory that holds value n of e's graph (a gradient, in its bucket
 * hook), as a view like tg_tensor_view's: it holds n from when the kernels
 * produce it until they overwrite it in the next run.  n must be f32 and
 * contiguous in memory (a gradient is); free it before e. */
tg_tensor *tg_exec_value(tg_exec *e, const tg_node *n);
/* ZeRO's gradient reduce-scatter, one collective for all n: src[i] is a
 * whole f32 tensor (this rank's gradient), dst[i] this rank's shard of it
 * (base/shard.h: tg_shard_extent's elements, of any shape; NULL where the
 * rank holds none of it), and
 *   dst[i] = (accumulate ? dst[i] : 0) + scale * (the average over the ranks of their src[i] in this shard),
 * the average computed as tg_device_allreduce_average computes it.  In a
 * bucket hook it is queued in order with the step, as the all-reduce is. */
void tg_device_reduce_scatter(tg_device *d, tg_tensor *const *src, tg_tensor *const *dst, int n, float scale,
                              bool accumulate);
/* ZeRO's all-gather, in place: each rank's shard of every whole tensor
 * ts[i] (base/shard.h) to every rank. */
void tg_device_all_gather(tg_device *d, tg_tensor *const *ts, int n);

/* ---- profiling ------------------------------------------------------------------- */

/* What a run measures: nothing; the time of each phase (cheap enough for
 * every step of training: on a GPU a few events inside the captured
 * step); or every kernel's time (on a GPU: the step runs launch by
 * launch, without a CUDA graph, to time each). */
typedef enum tg_profile_level { TG_PROFILE_OFF, TG_PROFILE_PHASES, TG_PROFILE_KERNELS } tg_profile_level;
void tg_exec_profile(tg_exec *e, tg_profile_level level);
/* The top kernels by time, one line each (TG_PROFILE_KERNELS). */
void tg_exec_profile_print(const tg_exec *e, FILE *out, int top);
/* Seconds spent so far in the kernels of each phase (forward, backward,
 * optimizer; a kernel's phase is its first op's), while profiling was on
 * (TG_PROFILE_PHASES or more). */
void tg_exec_phase_seconds(const tg_exec *e, double out[TG_NPHASES]);

#endif
