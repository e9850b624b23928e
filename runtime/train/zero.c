/* zero.c: the gradients, optimizer state and optimizer step of a
 * data-parallel run at ZeRO stage 0, 1, 2 or 3 (zero.h).
 *
 * What each rank of N keeps and what moves, per parameter of Ψ elements
 * (base/shard.h cuts it: rank q owns elements [q·S, q·S + S)):
 *
 *   stage 0 (DDP)  accumulator, moments whole; at each bucket of the last
 *                  micro-step an all-reduce averages the accumulators;
 *                  every rank runs AdamW on everything.
 *   stage 1        accumulator whole, moments for the shard only; at each
 *                  bucket of the last micro-step a reduce-scatter leaves
 *                  each rank the average of its shard (in its own part of
 *                  the accumulator); AdamW on the shard; then an all-gather
 *                  of the updated f32 weights (and bf16 copies).
 *   stage 2        as 1, and no whole accumulator: at each bucket of every
 *                  micro-step the grad graph's gradients are reduce-
 *                  scattered straight into the shard's accumulator.
 *   stage 3        as 2, and no whole weights between uses: the model's
 *                  graphs read each weight (f32 master, bf16 copy) from
 *                  this rank's shard, all-gathered inside the graph before
 *                  its readers, and give each gradient as this rank's
 *                  block of the sum over the ranks (passes/shard_params.c:
 *                  the collectives are IR ops, placed by the compiler);
 *                  after each micro-step it is added into the shard's
 *                  accumulator, scaled by 1 / (ranks x micro-steps).  No
 *                  all-gather after the optimizer: the next forward
 *                  gathers what it reads.
 *
 * The shards' optimizer is tg's adamw pass on a graph whose parameters are
 * the shards, flattened (rank 1; the decayed ones named), bound to views
 * of the whole tensors, so that each element gets the very arithmetic
 * stage 0 gives it.  Clipping needs the norm of all the gradients: the
 * optimizer graph sums the squares of this rank's shards and adds the
 * ranks' sums with an all_reduce of the IR (one scalar; the adamw pass's
 * norm_ranks), so the norm is computed inside the graph as at stage 0.
 *
 * Where the summation order is the same, stages 1 and 2 give stage 0's
 * bits: on 2 ranks the reduce-scatter's a + b is the all-reduce's, and
 * with grad_clip = 0 the norm (whose partial sums are grouped by shard
 * rather than by tensor) is only reported.  Otherwise they differ in the
 * last bits (tests/cli/run_zero_train.sh says by how much). */
#include "zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "comm.h"
#include "shard.h"

typedef struct zparam {
  tg_zero_param p;
  int64_t numel, first, len;       /* this rank's shard: len elements from first (stage 0: all) */
  int64_t padded;                  /* stage 3: the shard with its padding (tg_shard_elements) */
  tg_tensor *shard_value, *shard_copy; /* stage 3: the model graphs' shard leaves, [padded] f32 and bf16 */
  tg_tensor *grad_padded;          /* stage 3: the accumulator, [padded]; grad_shard is its first len */
  tg_tensor *grad_acc;             /* whole accumulator (stages 0, 1) */
  tg_tensor *grad_shard;           /* the averaged shard the optimizer reads: a view of grad_acc (1), own (2) */
  tg_tensor *m, *v;                /* whole (0) or the shard's (1, 2); NULL where len is 0 */
  bool master_sharded;             /* its f32 master is this rank's shard only (value_view, own) */
  tg_tensor *value_view, *copy_view; /* the shard of the whole value and copy, for the shard optimizer */
  tg_tensor *grad_value;           /* stage 2: the grad graph's memory of the gradient */
  const tg_adamw_slot *slot;       /* in the graph the device runs */
} zparam;

struct tg_zero {
  tg_ctx *ctx;
  tg_device *dev;
  int stage, rank, ranks;
  const tg_graph *g_grad;
  zparam *ps;
  int n;
  int *param_of_node;     /* per grad graph node: the parameter whose gradient it is, or -1 */
  tg_graph *g_whole;      /* the whole optimizer: stage 0 runs it; checkpoints are laid out by it */
  tg_adamw_slot *whole_slots;
  tg_graph *g_shard;      /* stages 1 to 3: the optimizer of this rank's shards */
  tg_exec *e_opt;
  tg_tensor *lr_in, *step_in;
  int micro, accum;
  tg_exec *e_grad;
  tg_tensor **src, **dst;  /* a bucket's, for the collectives */
  tg_tensor **gather;      /* every whole value and copy, for the all-gather */
};

/* A graph for the optimizer: config and source from the model. */
static tg_graph *new_graph(tg_ctx *ctx, const tg_graph *model) {
  tg_graph *g = tg_graph_new(ctx->arena);
  g->source = model->source;
  g->mesh_sym = model->mesh_sym;
  for (int i = 0; i < model->n_config; i++) tg_graph_set_config(g, model->config[i].name, model->config[i].value);
  return g;
}

static tg_node *add_leaf(tg_ctx *ctx, tg_graph *g, tg_op op, const char *name, const tg_type *t, const tg_node *like) {
  tg_node *q = tg_node_new(g, op, like->loc);
  q->type = *t;
  q->name = name;
  q->init = like->init;
  if (op == TG_OP_input) q->phase = TG_PHASE_OPTIMIZER;
  const char *why = tg_graph_add(g, q);
  if (why) tg_error(ctx, like->loc, "cannot build the optimizer graph: %s", why);
  return q;
}

/* Parameters (whole, or flattened shards of len[i] elements; 0: none) and
 * their gradients as inputs "grad:NAME", for the adamw pass or the norm. */
static void add_params(tg_zero *z, tg_graph *g, const int64_t *len, bool with_params, tg_node **grads) {
  for (int i = 0; i < z->n; i++) {
    const tg_node *p = z->ps[i].p.node;
    tg_type t = p->type;
    if (len) {
      if (!len[i]) continue;
      t = (tg_type){.dtype = p->type.dtype, .rank = 1, .dim = {{.size = len[i]}}};
    }
    if (with_params) add_leaf(z->ctx, g, TG_OP_param, p->name, &t, p);
    tg_node *gr = add_leaf(z->ctx, g, TG_OP_input, tg_sprintf(z->ctx->arena, TG_GRAD_PREFIX "%s", p->name), &t, p);
    tg_graph_add_output(g, gr->name, gr);
    if (grads) grads[i] = gr;
  }
}

/* Only the norm (or nothing) is an output; the gradients were outputs
 * only for the adamw pass to find them. */
static void drop_grad_outputs(tg_graph *g) {
  int k = 0;
  for (int i = 0; i < g->n_outputs; i++)
    if (strncmp(g->outputs[i].name, TG_GRAD_PREFIX, strlen(TG_GRAD_PREFIX))) g->outputs[k++] = g->outputs[i];
  g->n_outputs = k;
}

static tg_graph *optimizer_graph(tg_zero *z, const tg_adamw_opts *o, const int64_t *len, tg_adamw_slot **slots,
                                 int *n_slots) {
  tg_graph *g = new_graph(z->ctx, z->g_grad);
  add_params(z, g, len, true, NULL);
  *slots = tg_append_adamw(z->ctx, g, o, n_slots);
  drop_grad_outputs(g);
  if (!tg_verify(z->ctx, g)) tg_bail(z->ctx);
  return g;
}

static tg_tensor *flat(tg_tensor *whole, int64_t first, int64_t len) {
  tg_type t = {.dtype = tg_tensor_type(whole)->dtype, .rank = 1, .dim = {{.size = len}}};
  return tg_tensor_view(whole, first, &t);
}

static tg_tensor *own_of(tg_zero *z, int64_t len, tg_dtype dt) {
  tg_type t = {.dtype = dt, .rank = 1, .dim = {{.size = len}}};
  return tg_tensor_new(z->dev, &t);
}

static tg_tensor *own(tg_zero *z, int64_t len) { return own_of(z, len, TG_F32); }

/* Whether a rank keeps only its shard of p's f32 master at stage s: from
 * stage 1 on, where the model's graphs read only its bf16 copy. */
static bool shards_master(const tg_zero_param *p, int s) {
  return s >= 3 || (s >= 1 && p->has_copy && !p->read_as_f32);
}

/* This rank's shard of each parameter: all of it at stage 0. */
static void cut(tg_zero *z) {
  for (int i = 0; i < z->n; i++) {
    zparam *q = &z->ps[i];
    q->numel = tg_type_numel(&q->p.node->type);
    if (z->stage == 0) q->first = 0, q->len = q->numel;
    else q->len = tg_shard_extent(q->numel, z->ranks, z->rank, &q->first);
    q->padded = tg_shard_elements(q->numel, z->ranks);
    /* the master is the optimizer's alone where the model's graphs read
     * only its bf16 copy: then this rank keeps its shard, and the copies
     * are what the all-gather moves */
    q->master_sharded = shards_master(&q->p, z->stage);
  }
}

void tg_zero_allocate(tg_zero *z, tg_tensor *const *values, tg_tensor *const *copies) {
  for (int i = 0; i < z->n; i++) {
    zparam *q = &z->ps[i];
    const tg_type *t = &q->p.node->type;
    q->p.value = values[i], q->p.copy = copies[i];
    if (z->stage == 0) {
      q->grad_acc = tg_tensor_new(z->dev, t);
      q->m = tg_tensor_new(z->dev, t);
      q->v = tg_tensor_new(z->dev, t);
      continue;
    }
    if (z->stage == 1) q->grad_acc = tg_tensor_new(z->dev, t);
    if (z->stage == 3) { /* the shards the model's graphs read, padding and all (the all-gather moves it) */
      q->shard_value = own(z, q->padded);
      if (q->p.has_copy) q->shard_copy = own_of(z, q->padded, TG_BF16);
      q->grad_padded = own(z, q->padded);
    }
    if (!q->len) continue;
    q->grad_shard = z->stage == 1   ? flat(q->grad_acc, q->first, q->len)
                    : z->stage == 3 ? flat(q->grad_padded, 0, q->len)
                                    : own(z, q->len);
    q->m = own(z, q->len);
    q->v = own(z, q->len);
    q->value_view = z->stage == 3       ? flat(q->shard_value, 0, q->len)
                    : q->master_sharded ? own(z, q->len)
                                        : flat(q->p.value, q->first, q->len);
    if (z->stage == 3 && q->shard_copy) q->copy_view = flat(q->shard_copy, 0, q->len);
    else if (q->p.copy) q->copy_view = flat(q->p.copy, q->first, q->len);
  }
}

tg_zero *tg_zero_new(tg_ctx *ctx, tg_device *dev, int stage, const tg_graph *g_grad, const tg_zero_param *ps, int n,
                     const tg_adamw_opts *o) {
  tg_zero *z = tg_xcalloc(1, sizeof *z);
  z->ctx = ctx, z->dev = dev, z->g_grad = g_grad, z->n = n;
  z->rank = tg_comm_rank(), z->ranks = tg_comm_size();
  z->stage = z->ranks > 1 ? stage : 0;
  z->ps = tg_xcalloc((size_t)n + 1, sizeof *z->ps);
  z->param_of_node = tg_xcalloc((size_t)g_grad->n_nodes + 1, sizeof *z->param_of_node);
  for (int i = 0; i < g_grad->n_nodes; i++) z->param_of_node[i] = -1;
  for (int i = 0; i < n; i++) {
    z->ps[i].p = ps[i];
    if (ps[i].grad) z->param_of_node[tg_kernel_base(ps[i].grad)->id] = i;
  }
  z->src = tg_xcalloc((size_t)n + 1, sizeof *z->src);
  z->dst = tg_xcalloc((size_t)n + 1, sizeof *z->dst);
  z->gather = tg_xcalloc(2 * (size_t)n + 1, sizeof *z->gather);
  cut(z);

  /* the whole optimizer writes the copies the forward reads */
  const char **copies = tg_alloc(ctx->arena, sizeof *copies * (size_t)(n + 1));
  const char **decayed = tg_alloc(ctx->arena, sizeof *decayed * (size_t)(n + 1));
  int n_copies = 0, n_decayed = 0;
  for (int i = 0; i < n; i++) {
    if (ps[i].has_copy) copies[n_copies++] = ps[i].node->name;
    if (ps[i].node->type.rank >= 2) decayed[n_decayed++] = ps[i].node->name;
  }
  copies[n_copies] = decayed[n_decayed] = NULL;
  tg_adamw_opts whole = *o;
  whole.copies = copies;
  int n_slots = 0;
  z->g_whole = optimizer_graph(z, &whole, NULL, &z->whole_slots, &n_slots);
  if (n_slots != n) tg_error(ctx, (tg_loc){g_grad->source, 1, 1}, "internal: the optimizer has %d parameters, not %d", n_slots, n);
  if (z->stage == 0) {
    tg_pipeline_opts pk = {.kernels = true, .no_tensor_split = true}; /* its params are the model graph's parts already */
    tg_run_pipeline(ctx, z->g_whole, &pk);
    for (int i = 0; i < n; i++) z->ps[i].slot = &z->whole_slots[i];
    return z;
  }

  /* every rank has one, even one that holds no element (more ranks than
   * shards): the norm's all_reduce needs every rank */
  int64_t *len = tg_alloc(ctx->arena, sizeof *len * (size_t)(n + 1));
  for (int i = 0; i < n; i++) len[i] = z->ps[i].len;
  tg_adamw_opts shard = *o;
  shard.copies = copies;
  shard.decayed = decayed;
  shard.norm_ranks = z->ranks;
  tg_adamw_slot *slots;
  z->g_shard = optimizer_graph(z, &shard, len, &slots, &n_slots);
  for (int i = 0, k = 0; i < n; i++)
    if (len[i]) z->ps[i].slot = &slots[k++];
  tg_pipeline_opts pk = {.kernels = true, .no_tensor_split = true};
  tg_run_pipeline(ctx, z->g_shard, &pk);
  return z;
}

void tg_zero_free(tg_zero *z) {
  if (!z) return;
  for (int i = 0; i < z->n; i++) {
    zparam *q = &z->ps[i];
    tg_tensor *ts[] = {q->grad_value, q->copy_view, q->value_view, q->grad_shard, q->grad_acc, q->m, q->v,
                       q->shard_value, q->shard_copy, q->grad_padded};
    for (size_t k = 0; k < sizeof ts / sizeof *ts; k++) tg_tensor_free(ts[k]);
  }
  free(z->ps), free(z->param_of_node), free(z->src), free(z->dst), free(z->gather);
  free(z);
}

int tg_zero_stage(const tg_zero *z) { return z->stage; }

int tg_zero_graphs(tg_zero *z, tg_graph **gs, const char **names) {
  if (z->stage == 0) {
    gs[0] = z->g_whole, names[0] = "optimizer";
    return 1;
  }
  gs[0] = z->g_shard, names[0] = "optimizer";
  return 1;
}

void tg_zero_bind(tg_zero *z, tg_exec *const *es) {
  z->e_opt = es[0];
  const tg_graph *g = tg_exec_graph(z->e_opt);
  for (int i = 0; i < z->n; i++) {
    zparam *q = &z->ps[i];
    const tg_adamw_slot *s = q->slot;
    if (!s) continue;
    bool whole = z->stage == 0;
    tg_exec_bind(z->e_opt, s->param, whole ? q->p.value : q->value_view);
    tg_exec_bind(z->e_opt, s->grad, whole ? q->grad_acc : q->grad_shard);
    tg_exec_bind(z->e_opt, s->m, q->m);
    tg_exec_bind(z->e_opt, s->v, q->v);
    if (!s->copy != !q->p.has_copy || (z->stage < 3 && !q->p.has_copy != !q->p.copy))
      tg_error(z->ctx, s->param->loc, "internal: the optimizer's bf16 copy of '%s' and the step's disagree", s->param->name);
    if (s->copy) tg_exec_bind(z->e_opt, s->copy, whole ? q->p.copy : q->copy_view);
  }
  z->lr_in = tg_exec_leaf(z->e_opt, tg_graph_leaf(g, TG_OP_input, TG_INPUT_LR));
  z->step_in = tg_exec_leaf(z->e_opt, tg_graph_leaf(g, TG_OP_input, TG_INPUT_STEP));
}

/* ---- gradients, bucket by bucket ----------------------------------------------- */

/* Called by the grad graph's step after each bucket of gradients is
 * complete; what it asks of the device is queued in order with the step. */
static void on_bucket(tg_exec *e, int bucket, void *ctx) {
  tg_zero *z = ctx;
  const tg_bucket *B = &z->g_grad->allreduce->buckets[bucket];
  const float scale = 1.0f / (float)z->accum;
  bool last = z->micro == z->accum - 1;
  int n = 0;
  for (int i = 0; i < B->n_grads; i++) {
    int pi = z->param_of_node[B->grads[i]];
    if (pi < 0) continue;
    zparam *q = &z->ps[pi];
    if (z->stage < 2) {
      tg_exec_accumulate(e, q->p.grad, q->grad_acc, scale, z->micro == 0);
      z->src[n] = q->grad_acc;
    } else
      z->src[n] = q->grad_value;
    z->dst[n++] = q->grad_shard;
  }
  if (z->ranks == 1) return;
  if (z->stage == 0 && last) tg_device_allreduce_average(z->dev, z->src, n);
  if (z->stage == 1 && last) tg_device_reduce_scatter(z->dev, z->src, z->dst, n, 1.0f, false);
  /* stage 2 communicates every micro-step: nothing whole is kept between them */
  if (z->stage == 2) tg_device_reduce_scatter(z->dev, z->src, z->dst, n, scale, z->micro > 0);
}

void tg_zero_attach(tg_zero *z, tg_exec *e_grad, int accum) {
  z->accum = accum;
  z->e_grad = e_grad;
  if (z->stage == 3) return; /* the graph reduce-scatters its gradients itself */
  if (z->stage == 2)
    for (int i = 0; i < z->n; i++)
      if (z->ps[i].p.grad) z->ps[i].grad_value = tg_exec_value(e_grad, z->ps[i].p.grad);
  tg_exec_on_bucket(e_grad, on_bucket, z);
}

void tg_zero_micro_step(tg_zero *z, int micro) { z->micro = micro; }

void tg_zero_micro_step_done(tg_zero *z) {
  if (z->stage != 3) return;
  /* the graph's gradients are this rank's blocks of the sums over the
   * ranks: the average over ranks and micro-steps is 1 / (ranks x accum) */
  const float scale = 1.0f / ((float)z->ranks * (float)z->accum);
  for (int i = 0; i < z->n; i++)
    if (z->ps[i].p.grad) tg_exec_accumulate(z->e_grad, z->ps[i].p.grad, z->ps[i].grad_padded, scale, z->micro == 0);
}

/* ---- the step -------------------------------------------------------------------- */

static float read_scalar(tg_zero *z, tg_exec *e, const char *name) {
  float v = 0;
  if (!tg_exec_read_scalar(e, name, &v))
    tg_error(z->ctx, (tg_loc){z->g_grad->source, 1, 1}, "internal: the optimizer's output '%s' is missing", name);
  return v;
}

float tg_zero_step(tg_zero *z, double lr, int64_t step) {
  float lr_f = (float)lr, step_f = (float)step;
  tg_tensor_write(z->lr_in, &lr_f, TG_HOST_F32);
  tg_tensor_write(z->step_in, &step_f, TG_HOST_F32);
  /* clipping by the global norm: at stages 1 to 3 the graph sums the
   * ranks' squares with an all_reduce of its own */
  tg_exec_run(z->ctx, z->e_opt);
  float norm = read_scalar(z, z->e_opt, TG_OUTPUT_GRAD_NORM);
  if (z->stage == 0) return norm;
  /* every rank's updated shards to every rank: the next forward reads them
   * whole (at stage 3 it gathers them itself) */
  if (z->stage == 3) return norm;
  int n = 0;
  for (int i = 0; i < z->n; i++) {
    if (!z->ps[i].master_sharded) z->gather[n++] = z->ps[i].p.value;
    if (z->ps[i].p.copy) z->gather[n++] = z->ps[i].p.copy;
  }
  tg_device_all_gather(z->dev, z->gather, n);
  return norm;
}

/* ---- checkpoints ------------------------------------------------------------------ */

const tg_graph *tg_zero_state_graph(const tg_zero *z) { return z->g_whole; }

/* A shard's tensor (a moment, a master) gathered whole on rank 0:
 * malloc'ed there, NULL elsewhere. */
static float *gather_shard(tg_zero *z, const zparam *q, tg_tensor *shard) {
  float *whole = z->rank == 0 ? tg_xmalloc(sizeof(float) * (size_t)(q->numel + 1)) : NULL;
  if (z->stage == 0) {
    if (whole) tg_tensor_read(shard, whole, TG_HOST_F32);
    return whole;
  }
  int64_t *counts = tg_xcalloc((size_t)z->ranks, sizeof *counts), *displs = tg_xcalloc((size_t)z->ranks, sizeof *displs);
  for (int r = 0; r < z->ranks; r++) counts[r] = tg_shard_extent(q->numel, z->ranks, r, &displs[r]);
  float *mine = tg_xmalloc(sizeof(float) * (size_t)(q->len + 1));
  if (q->len) tg_tensor_read(shard, mine, TG_HOST_F32);
  tg_comm_gather_to_root(mine, whole, counts, displs);
  free(mine), free(counts), free(displs);
  return whole;
}

float **tg_zero_state_values(tg_zero *z) {
  float **v = tg_xcalloc((size_t)z->g_whole->n_nodes + 1, sizeof(float *));
  for (int i = 0; i < z->n; i++) {
    const tg_adamw_slot *s = &z->whole_slots[i];
    zparam *q = &z->ps[i];
    v[s->m->id] = gather_shard(z, q, q->m);
    v[s->v->id] = gather_shard(z, q, q->v);
    if (q->master_sharded)
      v[s->param->id] = gather_shard(z, q, q->value_view);
    else if (z->rank == 0) {
      v[s->param->id] = tg_xmalloc(sizeof(float) * (size_t)q->numel);
      tg_tensor_read(q->p.value, v[s->param->id], TG_HOST_F32);
    }
  }
  return v;
}

void tg_zero_free_state_values(const tg_zero *z, float **v) {
  if (!v) return;
  for (int i = 0; i < z->g_whole->n_nodes; i++) free(v[i]);
  free(v);
}

void tg_zero_load(tg_zero *z, const tg_weights *w, bool with_state) {
  for (int i = 0; i < z->n; i++) {
    const tg_adamw_slot *s = &z->whole_slots[i];
    zparam *q = &z->ps[i];
    if (w->values[s->param->id]) tg_zero_set_value(z, i, w->values[s->param->id]);
    if (!with_state || !q->m) continue;
    const float *m = w->values[s->m->id], *v = w->values[s->v->id];
    if (m) tg_tensor_write(q->m, m + q->first, TG_HOST_F32);
    if (v) tg_tensor_write(q->v, v + q->first, TG_HOST_F32);
  }
}

void tg_zero_set_value(tg_zero *z, int i, const float *whole) {
  zparam *q = &z->ps[i];
  if (!q->master_sharded) {
    tg_tensor_write(q->p.value, whole, TG_HOST_F32);
    return;
  }
  if (q->len) tg_tensor_write(q->value_view, whole + q->first, TG_HOST_F32);
  /* the copy rounded to bf16 as the optimizer's cast rounds */
  if (z->stage == 3 && q->copy_view) tg_tensor_write(q->copy_view, whole + q->first, TG_HOST_F32);
  else if (q->p.copy) tg_tensor_write(q->p.copy, whole, TG_HOST_F32);
}

bool tg_zero_master_sharded(const tg_zero *z, int i) { return z->ps[i].master_sharded; }

tg_tensor *tg_zero_shard(const tg_zero *z, int i, bool copy) { return copy ? z->ps[i].shard_copy : z->ps[i].shard_value; }

int64_t tg_zero_state_bytes(const tg_zero *z) { return tg_zero_state_bytes_at(z, z->stage); }

int64_t tg_zero_state_bytes_at(const tg_zero *z, int stage) {
  int64_t b = 0;
  for (int i = 0; i < z->n; i++) {
    int64_t numel = z->ps[i].numel, len = stage ? tg_shard_extent(numel, z->ranks, z->rank, NULL) : numel;
    int64_t padded = stage == 3 ? tg_shard_elements(numel, z->ranks) : len;
    b += 4 * ((stage < 2 ? numel : padded) + 2 * len); /* the accumulator, whole or this rank's; the moments */
    b += 4 * (shards_master(&z->ps[i].p, stage) ? padded : numel); /* the f32 master, its shard or whole */
    if (z->ps[i].p.has_copy) b += 2 * (stage == 3 ? padded : numel); /* the bf16 copy, likewise */
  }
  return b;
}

const char *tg_zero_describe(const tg_zero *z) {
  if (z->stage == 0)
    return z->ranks > 1 ? "zero 0: every rank keeps every gradient and AdamW moment; the gradients are all-reduced"
                        : "zero 0: one rank";
  int sharded = 0;
  for (int i = 0; i < z->n; i++) sharded += z->ps[i].master_sharded;
  const char *masters = sharded ? tg_sprintf(z->ctx->arena, ", and the f32 master weights of the %d (of %d) the model "
                                             "reads only as bf16 copies", sharded, z->n)
                                : "";
  if (z->stage == 3)
    return tg_sprintf(z->ctx->arena,
                      "zero 3: each rank keeps its shard of every parameter, of its bf16 copy, of the gradients and "
                      "of AdamW's moments; the model's graphs all-gather each layer's weights before use (again "
                      "for the backward) and reduce-scatter the gradients (passes/shard_params.c)");
  return tg_sprintf(z->ctx->arena,
                    "zero %d: each rank keeps %s of its shard of every parameter%s; the gradients are "
                    "reduce-scattered%s, the updated weights all-gathered",
                    z->stage, z->stage == 1 ? "AdamW's moments" : "the gradients and AdamW's moments", masters,
                    z->stage == 2 ? " every micro-step" : "");
}
