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

#include "ir.h"

typedef enum tg_precision { TG_PREC_F64, TG_PREC_F32 } tg_precision;

typedef struct tg_interp tg_interp;

tg_interp *tg_interp_new(const tg_graph *g, tg_precision prec);
void tg_interp_free(tg_interp *it);

/* The storage of a leaf (input, param, state): numel doubles to fill in
 * before running; params and states start as their initialiser's zeros or
 * ones (normal-initialised params start at zero: fill them with
 * tg_param_init from init.h). */
double *tg_interp_leaf(tg_interp *it, const tg_node *leaf);

/* Evaluates every node in order, then applies the assigns.  A run-time
 * error (a gather index out of range, a value that is not finite where
 * that is a bug) is reported through ctx at the node's location, naming
 * the node, and bails. */
void tg_interp_run(tg_ctx *ctx, tg_interp *it);

/* A node's value from the last run (numel doubles, row-major). */
const double *tg_interp_value(const tg_interp *it, const tg_node *n);

#endif
