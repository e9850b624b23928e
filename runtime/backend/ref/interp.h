/* interp.h: the reference interpreter.
 *
 * Runs any IR graph op by op on the CPU with nothing but libc and libm.  It
 * is the oracle for autodiff, for every pass and for the backends, so it is
 * written to be obviously right, not fast: every node's value is kept, all
 * arithmetic is in double, and in float32 mode every node's result is
 * rounded to float, as a float32 machine would store it.
 *
 * Every tensor, whatever its dtype, is held as doubles (i32 and bool values
 * are exact in a double).  After all nodes are computed, each assign node
 * copies its value into its target leaf, so running again performs the
 * next training step. */
#ifndef TG_INTERP_H
#define TG_INTERP_H

#include "backend.h" /* tg_precision */
#include "ir.h"

typedef struct tg_interp tg_interp;

/* The most values (sum of every node's numel) a graph may hold: each is
 * a double kept for the whole run, so this is 16 GiB. */
#define TG_INTERP_MAX_VALUES ((int64_t)1 << 31)

/* Whether tg_interp_new can take g: false, with a message in why, when the
 * graph holds more than TG_INTERP_MAX_VALUES values (naming the size), or
 * has a collective whose ranks is not this run's tg_comm_size() (naming
 * the node: run it under mpirun -np ranks). */
bool tg_interp_check(const tg_graph *g, char *why, size_t whylen);

/* NULL when tg_interp_check refuses g (ask it why) or memory runs out.
 * The graph must not change while the interpreter exists. */
tg_interp *tg_interp_new(const tg_graph *g, tg_precision prec);
void tg_interp_free(tg_interp *it);

/* The storage of a leaf (input, param, state): numel doubles to fill in
 * before running; params and states start as their initialiser's zeros or
 * ones (normal-initialised params start at zero: fill them with
 * tg_param_init from init.h). */
double *tg_interp_leaf(tg_interp *it, const tg_node *leaf); /* NULL if not a leaf of the graph */
/* Makes leaf read and write mem (numel doubles the caller owns and keeps
 * alive) instead of its own storage: graphs share parameters this way.
 * False if leaf is not a leaf of the graph. */
bool tg_interp_bind_leaf(tg_interp *it, const tg_node *leaf, double *mem);

/* Evaluates every node in order, then applies the assigns.  A run-time
 * error (a gather or scatter_add index out of range, an i32 result that
 * is not an i32: overflow, division by zero, a cast of nan) is reported
 * through ctx at the node's location, naming the node, and bails.  Float
 * inf and nan are not errors; they propagate as IEEE arithmetic says. */
void tg_interp_run(tg_ctx *ctx, tg_interp *it);

/* Runs a fused graph (after the fuse pass) the way generated code will:
 * kernel by kernel in g->kernels order, each kernel's nodes in graph
 * order, views when a kernel reads them; then the assigns.  Every value a
 * kernel reads from outside itself must be a leaf or an output of an
 * earlier kernel (g->kernels[k].outputs): reading anything else, a value
 * fusion did not write to memory, is reported through ctx and bails.  The
 * results are those of tg_interp_run: the same ops on the same values. */
void tg_interp_run_kernels(tg_ctx *ctx, tg_interp *it);

/* tg_interp_run_kernels as memory plan `plan` (ir.h) would have it: after
 * each kernel, every buffer sharing bytes with one the kernel wrote, and
 * every buffer whose planned life ends there, is filled with NaN; views
 * are recomputed at each read.  A sound plan gives exactly the results of
 * tg_interp_run_kernels; a value read after its planned death, or clobbered
 * by a buffer placed over it, shows up as NaN in the results (or as a
 * run-time error, for an index). */
void tg_interp_run_planned(tg_ctx *ctx, tg_interp *it, const tg_mem_plan *plan);

/* A node's value from the last run (numel doubles, row-major); NULL if n
 * is not in the graph. */
const double *tg_interp_value(const tg_interp *it, const tg_node *n);

#endif
