/* shard_params.c: ZeRO stage 3 (FSDP) placed in the graph: the
 * parameters stay sharded between uses (docs/parallel.md).
 *
 * Every weight leaf the model reads (a parameter's f32 value, a bf16 copy
 * of it: precision.c's weight_copies) is read instead from this rank's
 * shard, an input leaf "shard:NAME" of S elements (base/shard.h: the
 * tensor flattened, rank q holding [q·S, q·S + S)), through
 *
 *     reshape(slice(all_gather(shard:NAME) {ranks=N}, 0, numel))
 *
 * a whole tensor the kernels read as before (the slice and reshape are
 * views of the gathered buffer).  A weight gets one gather for its
 * forward readers and, where the backward reads it again, a second one for
 * those: memplan frees the forward's after its last forward reader, so a
 * layer's whole weights are in memory only around their uses.  Each gather
 * is placed LOOKAHEAD weights ahead of its first reader, in the order the
 * weights are first read: on the GPU it runs on the communication stream
 * while the kernels before its reader compute (the CUDA plan waits for it
 * only at its first reader).
 *
 * Each parameter's gradient output "grad:NAME" becomes this rank's block
 * of the sum over the ranks, [S] f32:
 *
 *     reduce_scatter(pad(reshape(grad, [numel]), 0, N·S)) {ranks=N}
 *
 * placed at the step's end: a kernel between a gradient's last ops would
 * split the kernels they fuse into (layernorm's column sums, finished
 * together: split_sums.c), and on the GPU the step waits for a
 * reduce-scatter at once anyway (its input's memory is reused).  So the
 * whole gradients live in the arena until the end, as the grad graph's
 * outputs do at stages 0 to 2: the peak is the start of the backward,
 * where the activations are, so that costs no peak (GPT-2 124M, bf16, B
 * = 8, 8 ranks: 4.10 GB of arena with the reduce-scatters at the end or
 * before the next matmul after each gradient; the latter 120 launches
 * more, the pads no longer fused).  The caller (runtime/train/zero.c) scales
 * it by 1 / (N · micro-steps) into its shard's accumulator.
 *
 * The whole leaves stay in the graph, read by nothing: they name the
 * parameters and their shapes (the checkpoint's layout), and code
 * generation gives a leaf nothing reads no memory. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "shard.h"

/* How many weights ahead of its first reader a gather is issued: about
 * one sublayer (a norm's weight and bias, a projection's weight and bias). */
enum { LOOKAHEAD = 4 };

typedef struct gather {
  int weight;    /* index into weights */
  int first_use; /* graph position of its first reader */
  int at;        /* the position it is placed before */
  tg_node *value; /* the whole tensor, as the readers take it */
  tg_node *chain[3];
  int n_chain;
} gather;

typedef struct sharder {
  tg_ctx *ctx;
  tg_graph *g;
  int ranks;
  int n_old;         /* the graph's nodes before the pass */
  tg_node **weights; /* the weight leaves read by the graph */
  tg_node **shards;  /* ... and their shard leaves */
  int n;
  tg_node ***before; /* per old position: nodes to place before it (NULL-terminated lists, grown) */
  int *n_before;
} sharder;

static tg_node *add(sharder *s, tg_node *n, tg_phase phase, const char *what) {
  n->phase = phase;
  const char *why = tg_graph_add(s->g, n);
  if (why) tg_error(s->ctx, n->loc, "shard_params: internal error building %s: %s", what, why);
  return n;
}

static tg_node *node1(sharder *s, tg_op op, tg_node *x, tg_loc loc) {
  tg_node *n = tg_node_new(s->g, op, loc);
  tg_node_set_inputs(s->g, n, 1, &x);
  return n;
}

static void place_before(sharder *s, int at, tg_node *n) {
  int k = s->n_before[at]++;
  s->before[at] = realloc(s->before[at], sizeof(tg_node *) * (size_t)(k + 1));
  if (!s->before[at]) tg_error(s->ctx, n->loc, "shard_params: out of memory");
  s->before[at][k] = n;
}

/* reshape(slice(all_gather(shard))): the whole weight, for the readers of
 * one phase. */
static tg_node *gathered(sharder *s, int w, tg_phase phase, gather *G) {
  tg_node *W = s->weights[w], *x = s->shards[w];
  int64_t numel = tg_type_numel(&W->type), S = x->type.dim[0].size;
  G->n_chain = 0;
  tg_node *ag = node1(s, TG_OP_all_gather, x, W->loc);
  ag->ranks = s->ranks;
  G->chain[G->n_chain++] = add(s, ag, phase, "an all_gather");
  tg_node *v = ag;
  if (S * s->ranks != numel) {
    tg_node *sl = node1(s, TG_OP_slice, v, W->loc);
    sl->axis = 0, sl->start = 0, sl->len = numel;
    G->chain[G->n_chain++] = v = add(s, sl, phase, "a slice");
  }
  if (W->type.rank != 1) {
    tg_node *r = node1(s, TG_OP_reshape, v, W->loc);
    r->type = W->type;
    G->chain[G->n_chain++] = v = add(s, r, phase, "a reshape");
  }
  G->value = v;
  return v;
}

/* The forward's view v of weight W (a transpose the backward's matmul
 * reads, say) rebuilt on the backward's gather, once (memo by id): the
 * backward must not keep the forward's gathered weight alive. */
static tg_node *view_on(sharder *s, tg_node *v, const tg_node *W, tg_node *gathered, int at, tg_node **memo) {
  if (v == W) return gathered;
  if (memo[v->id]) return memo[v->id];
  tg_node *in = view_on(s, v->in[0], W, gathered, at, memo);
  tg_node *c = node1(s, v->op, in, v->loc);
  c->type = v->type, c->axis = v->axis, c->start = v->start, c->len = v->len;
  memcpy(c->perm, v->perm, sizeof c->perm);
  place_before(s, at, add(s, c, TG_PHASE_BACKWARD, "a view"));
  return memo[v->id] = c;
}

/* Whether x reads weight W through views only. */
static bool views_of(const tg_node *x, const tg_node *W) {
  while (x != W && tg_is_view(x)) x = x->in[0];
  return x == W;
}

static int by_first_use(const void *a, const void *b) {
  const gather *x = a, *y = b;
  return (x->first_use > y->first_use) - (x->first_use < y->first_use);
}

/* The gathers of one phase's readers: one per weight read, each placed
 * LOOKAHEAD weights ahead of its first reader. */
static void gather_for(sharder *s, int n_old, bool forward) {
  tg_node **memo = tg_xcalloc((size_t)n_old + 1, sizeof *memo); /* per old view: its backward twin */
  gather *gs = tg_xcalloc((size_t)s->n + 1, sizeof *gs);
  int ng = 0;
  /* a backward reader may read the weight through the forward's views */
  for (int w = 0; w < s->n; w++) {
    int first = -1;
    for (int i = 0; i < n_old && first < 0; i++) {
      const tg_node *u = s->g->nodes[i];
      if ((u->phase == TG_PHASE_FORWARD) != forward) continue;
      for (int x = 0; x < u->nin && first < 0; x++)
        if (forward ? u->in[x] == s->weights[w] : views_of(u->in[x], s->weights[w])) first = i;
    }
    if (first >= 0) gs[ng++] = (gather){.weight = w, .first_use = first};
  }
  qsort(gs, (size_t)ng, sizeof *gs, by_first_use);
  for (int j = 0; j < ng; j++) {
    gather *G = &gs[j];
    G->at = gs[j < LOOKAHEAD ? 0 : j - LOOKAHEAD].first_use;
    gathered(s, G->weight, forward ? TG_PHASE_FORWARD : TG_PHASE_BACKWARD, G);
    for (int c = 0; c < G->n_chain; c++) place_before(s, G->at, G->chain[c]);
    tg_node *W = s->weights[G->weight];
    for (int i = 0; i < n_old; i++) {
      tg_node *u = s->g->nodes[i];
      if ((u->phase == TG_PHASE_FORWARD) != forward) continue;
      for (int x = 0; x < u->nin; x++)
        if (u->in[x] == W) u->in[x] = G->value;
        else if (!forward && u->in[x]->phase == TG_PHASE_FORWARD && views_of(u->in[x], W))
          u->in[x] = view_on(s, u->in[x], W, G->value, G->at, memo);
    }
  }
  /* an output that is a weight itself reads the forward's gather */
  for (int o = 0; forward && o < s->g->n_outputs; o++)
    for (int j = 0; j < ng; j++)
      if (s->g->outputs[o].node == s->weights[gs[j].weight]) s->g->outputs[o].node = gs[j].value;
  free(gs), free(memo);
}

/* "grad:NAME" as this rank's block of the sum over the ranks. */
static void scatter_gradients(sharder *s) {
  tg_graph *g = s->g;
  for (int o = 0; o < g->n_outputs; o++) {
    const char *name = tg_gradient_param_name(g->outputs[o].name);
    if (!name) continue;
    /* every parameter's, read as itself or only through its bf16 copy */
    const tg_node *P = tg_graph_leaf(g, TG_OP_param, name);
    if (!P) continue;
    tg_node *G = g->outputs[o].node;
    if (G->type.dtype != TG_F32)
      tg_error(s->ctx, G->loc, "shard_params: the gradient of '%s' is %s; the reduce-scatter sums f32", name,
               tg_dtype_name(G->type.dtype));
    int64_t numel = tg_type_numel(&G->type), S = tg_shard_elements(tg_type_numel(&P->type), s->ranks);
    /* at the step's end: a gradient's last kernels (layernorm's column
     * sums, split in groups and finished together: split_sums.c) fuse by
     * their order, which a kernel between them would break */
    int at = s->n_old;
    /* a bf16 gradient widened (a bias's sum at bf16) is padded before the
     * widening: the widening is recomputed where it is read (tg_is_widening),
     * and the reduce-scatter's input must be in memory */
    tg_node *v = tg_is_widening(G) ? G->in[0] : G;
    if (v->type.rank != 1) {
      tg_node *r = node1(s, TG_OP_reshape, v, G->loc);
      r->type = (tg_type){.dtype = v->type.dtype, .rank = 1, .dim = {{.size = numel}}};
      place_before(s, at, v = add(s, r, TG_PHASE_BACKWARD, "a reshape"));
    }
    if (S * s->ranks != numel) {
      tg_node *p = node1(s, TG_OP_pad, v, G->loc);
      p->axis = 0, p->start = 0, p->len = S * s->ranks;
      place_before(s, at, v = add(s, p, TG_PHASE_BACKWARD, "a pad"));
    }
    if (v->type.dtype != TG_F32) {
      tg_node *c = node1(s, TG_OP_cast, v, G->loc);
      c->type = (tg_type){.dtype = TG_F32, .rank = 1, .dim = {{.size = v->type.dim[0].size}}};
      place_before(s, at, v = add(s, c, TG_PHASE_BACKWARD, "a cast"));
    }
    tg_node *rs = node1(s, TG_OP_reduce_scatter, v, G->loc);
    rs->ranks = s->ranks;
    place_before(s, at, add(s, rs, TG_PHASE_BACKWARD, "a reduce_scatter"));
    g->outputs[o].node = rs;
  }
}

static bool is_weight(const tg_node *n) {
  return n->op == TG_OP_param ||
         (n->op == TG_OP_state && n->name && !strncmp(n->name, TG_BF16_COPY_PREFIX, strlen(TG_BF16_COPY_PREFIX)));
}

void tg_shard_params(tg_ctx *ctx, tg_graph *g, int ranks) {
  if (ranks < 2) return;
  sharder s = {.ctx = ctx, .g = g, .ranks = ranks, .n_old = g->n_nodes};
  int n_old = g->n_nodes;
  bool *read = tg_xcalloc((size_t)n_old + 1, sizeof *read);
  for (int i = 0; i < n_old; i++)
    for (int x = 0; x < g->nodes[i]->nin; x++) read[g->nodes[i]->in[x]->id] = true;
  for (int o = 0; o < g->n_outputs; o++) read[g->outputs[o].node->id] = true;
  s.weights = tg_xcalloc((size_t)n_old + 1, sizeof *s.weights);
  s.shards = tg_xcalloc((size_t)n_old + 1, sizeof *s.shards);
  s.before = tg_xcalloc((size_t)n_old + 2, sizeof *s.before);
  s.n_before = tg_xcalloc((size_t)n_old + 2, sizeof *s.n_before);
  for (int i = 0; i < n_old; i++) {
    tg_node *W = g->nodes[i];
    if (!is_weight(W) || !read[i]) continue;
    if (W->type.dtype != TG_F32 && W->type.dtype != TG_BF16)
      tg_error(ctx, W->loc, "shard_params: cannot shard '%s' of %s", W->name, tg_dtype_name(W->type.dtype));
    int64_t S = tg_shard_elements(tg_type_numel(&W->type), ranks);
    tg_node *x = tg_node_new(g, TG_OP_input, W->loc);
    x->type = (tg_type){.dtype = W->type.dtype, .rank = 1, .dim = {{.size = S}}};
    x->name = tg_sprintf(ctx->arena, TG_SHARD_PREFIX "%s", W->name);
    add(&s, x, TG_PHASE_FORWARD, "a shard leaf");
    s.weights[s.n] = W, s.shards[s.n++] = x;
  }
  /* first of all: a gather may be placed before its weight's own leaf */
  for (int w = 0; w < s.n; w++) place_before(&s, 0, s.shards[w]);
  /* the backward first: its readers may reach a weight through the
   * forward's views, which still show the weight itself until the
   * forward's gathers replace it */
  gather_for(&s, n_old, false);
  gather_for(&s, n_old, true);
  scatter_gradients(&s);

  /* the new order: each old node after what is placed before it */
  tg_node **order = tg_alloc(ctx->arena, sizeof *order * (size_t)(g->n_nodes + 1));
  int k = 0;
  for (int i = 0; i <= n_old; i++) {
    for (int j = 0; j < s.n_before[i]; j++) order[k++] = s.before[i][j];
    if (i < n_old) order[k++] = g->nodes[i];
    free(s.before[i]);
  }
  if (k != g->n_nodes) tg_error(ctx, (tg_loc){g->source, 1, 1}, "shard_params: internal error: %d of %d nodes placed", k, g->n_nodes);
  for (int i = 0; i < k; i++) g->nodes[i] = order[i], order[i]->id = i;
  free(read), free(s.weights), free(s.shards), free(s.before), free(s.n_before);
}

tg_node *tg_shard_of(const tg_graph *g, const tg_node *leaf) {
  size_t np = strlen(TG_SHARD_PREFIX);
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *x = g->nodes[i];
    if (x->op == TG_OP_input && x->name && !strncmp(x->name, TG_SHARD_PREFIX, np) && !strcmp(x->name + np, leaf->name))
      return x;
  }
  return NULL;
}
