/* zero.h: the gradients, optimizer state and optimizer step of a
 * data-parallel run, at ZeRO stage 0, 1, 2 or 3 (zero.c; docs/parallel.md).
 *
 * The training loop (train.c) keeps the parameters' whole values (and bf16
 * copies) that its graphs read; everything from the gradients on is here:
 * the accumulators, the collectives at each bucket of gradients, the
 * optimizer's graphs and their state, the step, and the optimizer state's
 * way into and out of a checkpoint (one file in today's format whatever
 * the stage and the number of ranks). */
#ifndef TG_ZERO_H
#define TG_ZERO_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "passes.h"
#include "weights.h"

typedef struct tg_zero tg_zero;

/* One parameter as the training loop holds it. */
typedef struct tg_zero_param {
  const tg_node *node;  /* the grad graph's parameter */
  const tg_node *grad;  /* its gradient output in the grad graph; NULL: none */
  bool has_copy;        /* the forward reads a bf16 copy of it */
  bool read_as_f32;     /* a model graph (grad, eval, sample) reads the f32 value itself */
  /* set by tg_zero_allocate: */
  tg_tensor *value;     /* the whole f32 weights the model's graphs read; NULL where
                         * tg_zero_master_sharded (zero.c keeps the shard) */
  tg_tensor *copy;      /* the whole bf16 copy the forward reads, or NULL */
} tg_zero_param;

/* Builds stage `stage`'s optimizer graphs (fused and planned) for this
 * rank of the job (runtime/comm), allocating nothing yet;
 * g_grad is the grad graph after the pipeline (its schedule's buckets).
 * Stages above 0 on a backend without the collectives are the caller's
 * to refuse (tg_device_can_shard); one rank is stage 0.  At stage 3 the
 * model's graphs must have been sharded (tg_shard_params) and read the
 * shards tg_zero_shard gives. */
tg_zero *tg_zero_new(tg_ctx *ctx, tg_device *dev, int stage, const tg_graph *g_grad, const tg_zero_param *ps, int n,
                     const tg_adamw_opts *o);
/* After the memory check: the state on the device, for the parameters'
 * whole values and copies (copies[i] NULL where it has none), in the
 * order given to tg_zero_new. */
void tg_zero_allocate(tg_zero *z, tg_tensor *const *values, tg_tensor *const *copies);
void tg_zero_free(tg_zero *z);
int tg_zero_stage(const tg_zero *z);

/* The graphs to compile for the device, with their names (for the
 * kernels' files): into gs and names, at most TG_ZERO_MAX_GRAPHS; returns
 * how many.  Then tg_zero_bind with their execs, in the same order. */
enum { TG_ZERO_MAX_GRAPHS = 1 };
int tg_zero_graphs(tg_zero *z, tg_graph **gs, const char **names);
void tg_zero_bind(tg_zero *z, tg_exec *const *es);
/* Hooks the grad graph's buckets, for steps of `accum` micro-steps. */
void tg_zero_attach(tg_zero *z, tg_exec *e_grad, int accum);
/* Before each micro-step's run of the grad graph: which one it is. */
void tg_zero_micro_step(tg_zero *z, int micro);
/* After it: at stage 3, the graph's gradient shards into the accumulators. */
void tg_zero_micro_step_done(tg_zero *z);
/* Stage 3: the tensor a model graph's shard leaf of parameter i reads
 * (passes/shard_params.c: "shard:NAME", or with copy "shard:bf16.NAME"):
 * this rank's shard with its padding; NULL at other stages. */
tg_tensor *tg_zero_shard(const tg_zero *z, int i, bool copy);
/* After a step's micro-steps: clipping and AdamW at learning rate lr for
 * the 1-based step `step`, and at stages 1 and 2 the updated parameters
 * gathered to every rank.  Returns the global gradient norm. */
float tg_zero_step(tg_zero *z, double lr, int64_t step);

/* The whole optimizer graph, whose leaves lay out a checkpoint. */
const tg_graph *tg_zero_state_graph(const tg_zero *z);
/* Every parameter's value and moments, whole, into v[node id of the state
 * graph] (malloc'ed arrays) on rank 0; every rank must call it (the
 * shards are gathered).  Free with tg_zero_free_state_values. */
float **tg_zero_state_values(tg_zero *z);
void tg_zero_free_state_values(const tg_zero *z, float **v);
/* The parameters' values and, with_state, moments from w (loaded against
 * the state graph): each rank takes its shards. */
void tg_zero_load(tg_zero *z, const tg_weights *w, bool with_state);
/* Whether this rank keeps only its shard of parameter i's f32 master (ZeRO
 * stage 1 on, where the model's graphs read only the bf16 copy): then it
 * has no whole value, and its copy is what the step and the checks read.
 * Known from tg_zero_new on, so that the caller allocates accordingly. */
bool tg_zero_master_sharded(const tg_zero *z, int i);
/* Parameter i's weights from a whole host array (initial weights): its
 * value (whole, or this rank's shard and the bf16 copy from the whole). */
void tg_zero_set_value(tg_zero *z, int i, const float *whole);
/* The bytes this rank holds per parameter, at this stage: the weights
 * (whole values and bf16 copies, or their shards), the gradients'
 * accumulators and AdamW's moments: for the memory check. */
int64_t tg_zero_state_bytes(const tg_zero *z);
/* ... as they would be at another stage (for advice when they do not fit). */
int64_t tg_zero_state_bytes_at(const tg_zero *z, int stage);
/* One line on what each rank keeps and moves (for the log). */
const char *tg_zero_describe(const tg_zero *z);

#endif
