/* cpu_backend.h: runs a fused, planned training step as generated C.
 *
 * The graph is lowered (codegen/lower.h), rendered as C (codegen/render.h),
 * built into a shared object with the system compiler (runtime/ccjit.h,
 * cached on disk) and loaded with dlopen.  The backend owns the memory: one
 * buffer per leaf (params, inputs, optimizer state) in its dtype, the
 * arena memplan planned, and the scratch lowering asked for. */
#ifndef TG_CPU_BACKEND_H
#define TG_CPU_BACKEND_H

#include "ir.h"

typedef struct tg_cpu tg_cpu;

/* Builds and loads the step of g (after fuse and memplan; g must outlive
 * the backend).  When c_path is not NULL the generated C is also written
 * there.  Errors (a graph that cannot be lowered, a compiler failure with
 * its log) are reported through ctx and bail. */
tg_cpu *tg_cpu_new(tg_ctx *ctx, const tg_graph *g, const char *c_path);
/* The same from a program the caller lowered (codegen/lower.h), e.g. with
 * tg_lower_ex's options; p->g must outlive the backend. */
struct tg_program;
tg_cpu *tg_cpu_new_program(tg_ctx *ctx, struct tg_program *p, const char *c_path);
void tg_cpu_free(tg_cpu *c);

/* The storage of leaf n (numel elements of its dtype), NULL if n is not a
 * leaf of the graph.  Everything starts zeroed. */
void *tg_cpu_leaf(tg_cpu *c, const tg_node *n);
/* Points leaf n at memory the caller owns (numel elements of its dtype,
 * 256-byte aligned is best) instead of the backend's own: several graphs
 * share one copy of the parameters this way. */
void tg_cpu_bind_leaf(tg_cpu *c, const tg_node *n, void *mem);
/* The f32 elements of n where the step keeps them (a leaf, or a value in
 * the arena), when n is a contiguous view of them; else NULL.  Valid
 * during an all-reduce callback and after a run. */
float *tg_cpu_value(tg_cpu *c, const tg_node *n);
/* Called during each run with each bucket of gradients as soon as it is
 * complete (g->allreduce, passes/schedule.c); NULL: none. */
void tg_cpu_set_allreduce(tg_cpu *c, void (*fn)(int bucket, void *ctx), void *ctx);
/* Runs the step once: every kernel in order (assigns update the leaves). */
void tg_cpu_run(tg_cpu *c);
/* The value of n after a run, as floats (numel of n's type), for a graph
 * output or any value the step keeps in memory at its end; false when n
 * is not in memory then. */
bool tg_cpu_read(tg_cpu *c, const tg_node *n, float *dst);
/* Per-kernel timing: when on, each run adds every kernel's seconds to a
 * table; tg_cpu_profile_print writes the kernels that took longest. */
void tg_cpu_profile(tg_cpu *c, bool on);
void tg_cpu_profile_print(const tg_cpu *c, FILE *out, int top);
/* Seconds spent so far in the kernels of each phase (forward, backward,
 * optimizer; a kernel's phase is its first op's), while profiling is on. */
void tg_cpu_phase_seconds(const tg_cpu *c, double out[TG_NPHASES]);
/* The graph the backend runs. */
const tg_graph *tg_cpu_graph(const tg_cpu *c);
/* Whether the shared object came from the cache (for progress messages). */
bool tg_cpu_from_cache(const tg_cpu *c);

#endif
