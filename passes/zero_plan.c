/* zero_plan.c: the per-rank memory of ZeRO's stages, from the training step.
 *
 * ZeRO (Rajbhandari et al., 2020) removes data parallelism's copies of the
 * same state on every rank.  Per parameter, the training loop keeps
 * (runtime/train/train.c): the f32 master value, with precision bf16 a bf16
 * copy the forward reads (precision.c's weight copies), an f32 gradient
 * accumulator (the parameter's type, whatever the precision) and AdamW's two
 * f32 moments.  What one rank of N keeps of each:
 *
 *   stage  f32 master   bf16 copy   gradients   moments
 *   0      whole        whole       whole       whole      (DDP)
 *   1      shard (*)    whole       whole       shard
 *   2      shard (*)    whole       shard       shard
 *   3      shard        shard       shard       shard      + gathered layers
 *
 * (*) only where a bf16 copy is all the step reads; a parameter the
 * forward or backward reads as f32 (all of them at precision f32; at bf16
 * the layernorms', wpe and wte, whose embedding gathers the f32 table) is
 * the step's weight and stays whole until stage 3.  runtime/train/zero.c
 * holds the same (its own test of what the model's graphs read).
 *
 * Shards (base/shard.h, the rule the runtime cuts by): each parameter is
 * flattened and cut into N shards of the same
 * number of elements, ceil(numel / N) rounded up to TG_ZERO_SHARD_ALIGN
 * (128).  Equal shards are what reduce-scatter and all-gather move (NCCL's
 * collectives take one count for every rank), so every rank holds the same
 * bytes, padding included: the last rank's shard ends in padding.  128
 * elements make every shard start on a 256-byte boundary for bf16 as for
 * f32 (512 bytes), TG_MEMPLAN_ALIGN and cudaMalloc's alignment, so a shard
 * can be a kernel's buffer and its 16-byte vector loads stay aligned; the
 * cost is under 128 elements per parameter per rank (GPT-2 124M on 8 ranks:
 * under 0.2 MB a rank).  Whole tensors balanced across ranks would need no
 * padding, but wte alone is a third of GPT-2 124M: no balance on 8 ranks.
 *
 * Stage 3's gathered weights: a layer's parameters (those whose names share
 * the prefix up to the first number, "h.3."; any other parameter, wte say,
 * is a layer of its own) are all-gathered, whole, in the dtype the forward
 * reads, just before the layer runs and dropped after; the model here
 * keeps two layers at once, the one computing and the next one's gather in
 * flight, and charges the two largest (an upper bound: the largest pair of
 * neighbours is no larger).
 *
 * Activations: memplan's buffers of the step's intermediates that die
 * within the step (the forward's saved values, the backward's), placed by
 * memplan's own best fit; the same at every stage.  The step's other
 * buffers, those that outlive it, are its gradients and the optimizer's
 * new weights, copies and moments before they become the leaves' values:
 * today's whole-step plan keeps all of them at once (18 bytes a parameter
 * at bf16, memplan's report), which a ZeRO step would not do: its
 * gradients are the accumulators counted above (a bucket's whole gradient
 * lives only until its reduce-scatter, a few MiB, not counted), and its
 * optimizer updates each shard in place.  They are reported apart
 * (step_outputs_bytes), outside the peak. */
#include <string.h>

#include "passes.h"

static int64_t bytes_of(const tg_node *n) { return tg_type_numel(&n->type) * tg_dtype_size(n->type.dtype); }

/* Whether a kernel of the forward or the backward reads n. */
static bool step_reads(const tg_graph *g, const tg_node *n) {
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *u = g->nodes[i];
    if (u->phase != TG_PHASE_FORWARD && u->phase != TG_PHASE_BACKWARD) continue;
    for (int k = 0; k < u->nin; k++)
      if (u->in[k] == n) return true;
  }
  return false;
}

/* A leaf's bytes on one rank: whole, or its shard. */
static int64_t held_bytes(const tg_node *n, bool sharded, int ranks) {
  if (!sharded) return bytes_of(n);
  return tg_shard_elements(tg_type_numel(&n->type), ranks) * tg_dtype_size(n->type.dtype);
}

/* The state leaf named prefix + name among states, or NULL. */
static tg_node *state_named(tg_node **states, int n, const char *prefix, const char *name) {
  size_t np = strlen(prefix);
  for (int i = 0; i < n; i++)
    if (!strncmp(states[i]->name, prefix, np) && !strcmp(states[i]->name + np, name)) return states[i];
  return NULL;
}

typedef struct layer {
  const char *name;
  size_t len;
  int64_t bytes; /* the forward's weights, whole */
} layer;

/* Adds a parameter's forward weight bytes to its layer (made if new). */
static void add_to_layer(layer *layers, int *n, const char *name, int64_t bytes) {
  size_t len = tg_param_layer_len(name);
  for (int i = 0; i < *n; i++)
    if (layers[i].len == len && !strncmp(layers[i].name, name, len)) {
      layers[i].bytes += bytes;
      return;
    }
  layers[(*n)++] = (layer){name, len, bytes};
}

/* The two largest layers into p->gathered and p->gathered_bytes. */
static void gather_two_largest(tg_graph *g, const layer *layers, int n, tg_zero_plan *p) {
  int top[2] = {-1, -1};
  for (int i = 0; i < n; i++) {
    if (top[0] < 0 || layers[i].bytes > layers[top[0]].bytes) top[1] = top[0], top[0] = i;
    else if (top[1] < 0 || layers[i].bytes > layers[top[1]].bytes) top[1] = i;
  }
  for (int k = 0; k < 2; k++) {
    if (top[k] < 0) continue;
    p->gathered_bytes += layers[top[k]].bytes;
    p->gathered[k] = tg_sprintf(g->arena, "%.*s", (int)layers[top[k]].len, layers[top[k]].name);
  }
}

/* The intermediates that die within the step, placed as memplan places
 * them: their arena's size. */
static int64_t within_step_peak(tg_ctx *ctx, tg_graph *g, int64_t *outlives) {
  const tg_mem_plan *all = tg_memplan_placed(ctx, g);
  tg_mem_plan *p = tg_alloc(g->arena, sizeof *p);
  p->buffers = tg_alloc(g->arena, sizeof *p->buffers * (size_t)(all->n_buffers + 1));
  *outlives = 0;
  for (int b = 0; b < all->n_buffers; b++) {
    if (all->buffers[b].last < g->n_kernels) p->buffers[p->n_buffers++] = all->buffers[b];
    else *outlives += all->buffers[b].bytes;
  }
  tg_memplan_place(p);
  return p->arena_bytes;
}

bool tg_zero_plan_make(tg_ctx *ctx, tg_graph *g, int ranks, int stage, tg_zero_plan *out, char *why, size_t whylen) {
  *out = (tg_zero_plan){0};
  if (!tg_zero_args_valid(ranks, stage, why, whylen)) return false;
  if (!g->memplan) {
    snprintf(why, whylen, "the graph has no memory plan: ZeRO's plan is of a fused training step");
    return false;
  }
  out->ranks = ranks;
  out->stage = ranks == 1 ? 0 : stage; /* one rank has nothing to shard */
  int n_states = 0, n_params = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    n_states += g->nodes[i]->op == TG_OP_state && g->nodes[i]->name;
    n_params += g->nodes[i]->op == TG_OP_param;
  }
  tg_node **states = tg_alloc(g->arena, sizeof *states * (size_t)(n_states + 1));
  layer *layers = tg_alloc(g->arena, sizeof *layers * (size_t)(n_params + 1));
  int n_layers = 0;
  n_states = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_state && g->nodes[i]->name) states[n_states++] = g->nodes[i];
  int64_t leaf_bytes = 0, counted = 0;
  const int s = out->stage;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op == TG_OP_param || n->op == TG_OP_input || n->op == TG_OP_state) leaf_bytes += bytes_of(n);
    if (n->op != TG_OP_param) continue;
    tg_node *m = state_named(states, n_states, TG_ADAM_M_PREFIX, n->name);
    tg_node *v = state_named(states, n_states, TG_ADAM_V_PREFIX, n->name);
    tg_node *copy = state_named(states, n_states, TG_BF16_COPY_PREFIX, n->name);
    if (!m || !v) {
      snprintf(why, whylen, "parameter '%s' has no AdamW moments: ZeRO shards the optimizer of a training step (--grad)",
               n->name);
      return false;
    }
    out->n_params++;
    out->n_elements += tg_type_numel(&n->type);
    /* the f32 master is the optimizer's alone where the forward reads a
     * copy and nothing but the optimizer reads the f32 (GPT-2's wte: the
     * embedding's gather reads it as f32, the logits the copy) */
    out->master_bytes += held_bytes(n, s >= 3 || (s >= 1 && copy && !step_reads(g, n)), ranks);
    if (copy) out->copy_bytes += held_bytes(copy, s >= 3, ranks);
    out->grad_bytes += held_bytes(n, s >= 2, ranks); /* the accumulator: the parameter's type */
    out->optimizer_bytes += held_bytes(m, s >= 1, ranks) + held_bytes(v, s >= 1, ranks);
    counted += bytes_of(n) + bytes_of(m) + bytes_of(v) + (copy ? bytes_of(copy) : 0);
    add_to_layer(layers, &n_layers, n->name, bytes_of(copy ? copy : n));
  }
  if (!out->n_params) {
    snprintf(why, whylen, "the graph has no parameters: nothing to shard");
    return false;
  }
  if (s >= 3) gather_two_largest(g, layers, n_layers, out);
  out->other_bytes = leaf_bytes - counted;
  out->activation_bytes = within_step_peak(ctx, g, &out->step_outputs_bytes);
  out->step_arena_bytes = g->memplan->arena_bytes;
  out->peak_bytes = out->master_bytes + out->copy_bytes + out->gathered_bytes + out->grad_bytes + out->optimizer_bytes +
                    out->other_bytes + out->activation_bytes;
  return true;
}

static const char *const stage_keeps[] = {
    "nothing sharded (plain data parallelism)",
    "AdamW's moments and the f32 master weights sharded",
    "AdamW's moments, the f32 master weights and the gradients sharded",
    "everything sharded; each layer's weights gathered when used",
};

static void row(FILE *out, const char *what, int64_t at_stage, int64_t at_ddp) {
  char a[32], b[32];
  tg_memplan_format_bytes(a, sizeof a, at_stage);
  tg_memplan_format_bytes(b, sizeof b, at_ddp);
  fprintf(out, "zero:   %-40s %12s %12s\n", what, a, b);
}

void tg_zero_plan_print(FILE *out, const tg_zero_plan *p, const tg_zero_plan *ddp) {
  fprintf(out, "zero: stage %d on %d rank%s: %s; %d parameters (%lld elements) cut in shards of a multiple of %d elements\n",
          p->stage, p->ranks, p->ranks == 1 ? "" : "s", stage_keeps[p->stage], p->n_params, (long long)p->n_elements,
          TG_ZERO_SHARD_ALIGN);
  char stage[16];
  snprintf(stage, sizeof stage, "stage %d", p->stage);
  fprintf(out, "zero:   %-40s %12s %12s\n", "per rank", stage, "stage 0");
  row(out, "parameters, f32 master", p->master_bytes, ddp->master_bytes);
  row(out, "parameters, bf16 copies", p->copy_bytes, ddp->copy_bytes);
  if (p->stage >= 3) {
    char what[96];
    snprintf(what, sizeof what, "parameters, gathered (%s, %s)", p->gathered[0], p->gathered[1] ? p->gathered[1] : "-");
    row(out, what, p->gathered_bytes, ddp->gathered_bytes);
  }
  row(out, "gradients (f32 accumulators)", p->grad_bytes, ddp->grad_bytes);
  row(out, "optimizer state (AdamW m, v)", p->optimizer_bytes, ddp->optimizer_bytes);
  row(out, "inputs and other state", p->other_bytes, ddp->other_bytes);
  row(out, "activations (memplan, within the step)", p->activation_bytes, ddp->activation_bytes);
  row(out, "peak", p->peak_bytes, ddp->peak_bytes);
  char a[32], b[32];
  tg_memplan_format_bytes(a, sizeof a, p->step_outputs_bytes);
  tg_memplan_format_bytes(b, sizeof b, p->step_arena_bytes);
  fprintf(out, "zero: not in the peak: the step's outputs in its arena (%s of memplan's %s: gradients, new weights "
          "and moments), which a ZeRO step keeps in the shards above\n", a, b);
  /* where tgrun holds other than the plan, the report says so */
  if (p->stage == 3)
    fprintf(out, "zero: tgrun gathers each weight, not each layer, ahead of its readers (passes/shard_params.c): "
                 "what is whole at once is the weights between a gather and its last reader, about the plan's "
                 "two layers\n");
}
