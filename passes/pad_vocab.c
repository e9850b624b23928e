/* pad_vocab.c: pads every vocabulary dim to a multiple of 64 (50257 -> 50304).
 *
 * Why: matmuls and softmaxes over a dim of 50257 run on awkward tiles;
 * 50304 = 786 * 64 keeps every kernel on whole tiles, which is worth the
 * 0.1% of extra work (nanoGPT does the same by hand).
 *
 * What changes:
 *   - every dim whose symbol is "vocab" and whose size is the config's vocab
 *     grows to the padded size; the types of leaves and of ops whose type is
 *     given (reshape, expand, scatter_add) are padded directly, the rest are
 *     inferred again in graph order;
 *   - after every matmul whose result has a padded vocab axis, the padded
 *     positions are set to -inf: where(iota < vocab, x, -inf), and the
 *     matmul's users read the masked value instead.
 * The config keeps vocab at its true value: that is how weights files,
 * tgrun's gradients and --stats know which dims are padded
 * (tg_dim_unpadded).
 *
 * Why the loss and the real gradients do not change: the padded rows of the
 * vocab-shaped params start at zero (runtime/formats/weights.c pads on load and
 * init) and get a zero gradient, so AdamW keeps them at zero.  A padded
 * logit is -inf, so it adds exp(-inf) = 0 to the softmax's sum, is never
 * the max, and is never a target (targets are checked against the true
 * vocab); where's derivative sends no gradient through the masked
 * positions, so the matmul's padded outputs, and through them the padded
 * rows, get exactly zero.
 *
 * The assumption this rests on: the vocabulary axis enters the model only
 * through vocab-shaped params (embedding tables) and iotas, and every value
 * with a padded axis that is reduced over that axis comes from a masked
 * matmul or selects by a comparison against real ids (as cross_entropy's
 * where does).  GPT-2 is written that way; the tests compare padded and
 * unpadded graphs to hold us to it.
 *
 * The pass is idempotent: on a graph that is already padded (IR read back
 * after this pass) no dim has the unpadded size and nothing is done.  A
 * graph that already has a backward part is not padded either. */
#include <math.h>
#include <string.h>

#include "passes.h"

static bool is_vocab_dim(const tg_dim *d, int64_t size) {
  return d->sym && !strcmp(d->sym, TG_VOCAB_SYM) && d->size == size;
}

/* Whether any node has an unpadded vocab dim, i.e. there is work to do. */
static bool has_dim(const tg_graph *g, int64_t size) {
  for (int i = 0; i < g->n_nodes; i++)
    for (int d = 0; d < g->nodes[i]->type.rank; d++)
      if (is_vocab_dim(&g->nodes[i]->type.dim[d], size)) return true;
  return false;
}

/* A graph read back with its gradient already in it is left as it is:
 * padding it now would mask logits its backward part knows nothing of. */
static bool has_backward(const tg_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->phase != TG_PHASE_FORWARD) return true;
  return false;
}

/* Sets n's type from its inputs, or reports why the padded graph is
 * ill-typed at n's location. */
static void infer(tg_ctx *ctx, tg_node *n) {
  char why[600];
  tg_type t;
  if (!tg_infer_type(n, &t, why, sizeof why))
    tg_error(ctx, n->loc, "pad_vocab: padding the vocabulary breaks this %s: %s",
             tg_ops[n->op].name, why);
  n->type = t;
}

/* Grows every vocab dim in place, in graph order, so each node's inputs are
 * already padded when its type is inferred again.  Given types (leaves,
 * reshape, expand, scatter_add) are padded here; for the other ops the
 * padded type stored before inference is simply overwritten by it. */
static void pad_types(tg_ctx *ctx, tg_graph *g, int64_t vocab, int64_t padded) {
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *n = g->nodes[i];
    for (int d = 0; d < n->type.rank; d++)
      if (is_vocab_dim(&n->type.dim[d], vocab)) n->type.dim[d].size = padded;
    infer(ctx, n);
  }
}

/* A new node of the forward graph, next to `at` in the source. */
static tg_node *leaf(tg_graph *g, tg_op op, const tg_node *at, tg_type t) {
  tg_node *n = tg_node_new(g, op, at->loc);
  n->phase = at->phase;
  n->type = t;
  tg_node_set_inputs(g, n, 0, NULL);
  return n;
}

static tg_node *op3(tg_ctx *ctx, tg_graph *g, tg_op op, const tg_node *at, tg_node *a,
                    tg_node *b, tg_node *c) {
  tg_node *in[3] = {a, b, c};
  tg_node *n = tg_node_new(g, op, at->loc);
  n->phase = at->phase;
  tg_node_set_inputs(g, n, c ? 3 : 2, in);
  infer(ctx, n);
  return n;
}

typedef struct builder {
  tg_node **nodes; /* the new node order */
  int n;
} builder;

static tg_node *push(builder *b, tg_node *n) {
  b->nodes[b->n++] = n;
  return n;
}

/* Appends where(iota < vocab, x, -inf) along `axis` of x; returns it.  The
 * iota is [padded, 1, ...] so that it broadcasts against x's trailing axes. */
static tg_node *mask(tg_ctx *ctx, tg_graph *g, builder *b, tg_node *x, int axis,
                     int64_t vocab) {
  tg_type it = {.dtype = TG_I32, .rank = x->type.rank - axis};
  it.dim[0] = x->type.dim[axis];
  for (int d = 1; d < it.rank; d++) it.dim[d] = (tg_dim){1, NULL};
  tg_node *iota = push(b, leaf(g, TG_OP_iota, x, it));
  iota->axis = 0;
  infer(ctx, iota);
  tg_node *limit = push(b, leaf(g, TG_OP_const, x, (tg_type){.dtype = TG_I32}));
  limit->value = (double)vocab;
  infer(ctx, limit);
  tg_node *real = push(b, op3(ctx, g, TG_OP_lt, x, iota, limit, NULL));
  tg_node *ninf = push(b, leaf(g, TG_OP_const, x, (tg_type){.dtype = x->type.dtype}));
  ninf->value = -INFINITY;
  infer(ctx, ninf);
  return push(b, op3(ctx, g, TG_OP_where, x, real, x, ninf));
}

static int padded_axes(const tg_node *n, int64_t padded) {
  int k = 0;
  if (n->op == TG_OP_matmul)
    for (int d = 0; d < n->type.rank; d++) k += is_vocab_dim(&n->type.dim[d], padded);
  return k;
}

/* Rebuilds the node order with a mask after each matmul that has a padded
 * vocab axis, and points every later use (and output) of the matmul at the
 * masked value.  Masks go right after their matmul, so the order stays
 * topological. */
static void mask_matmuls(tg_ctx *ctx, tg_graph *g, int64_t vocab, int64_t padded) {
  enum { NODES_PER_MASK = 5 };
  int extra = 0;
  for (int i = 0; i < g->n_nodes; i++) extra += NODES_PER_MASK * padded_axes(g->nodes[i], padded);
  if (!extra) return;
  int old_n = g->n_nodes;
  builder b = {tg_alloc(g->arena, sizeof *b.nodes * (size_t)(old_n + extra)), 0};
  tg_node **repl = tg_alloc(g->arena, sizeof *repl * (size_t)old_n); /* by old id */
  for (int i = 0; i < old_n; i++) {
    tg_node *n = g->nodes[i];
    for (int k = 0; k < n->nin; k++)
      if (repl[n->in[k]->id]) n->in[k] = repl[n->in[k]->id];
    push(&b, n);
    if (!padded_axes(n, padded)) continue;
    tg_node *x = n;
    for (int d = 0; d < n->type.rank; d++)
      if (is_vocab_dim(&n->type.dim[d], padded)) x = mask(ctx, g, &b, x, d, vocab);
    repl[i] = x;
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (repl[g->outputs[i].node->id]) g->outputs[i].node = repl[g->outputs[i].node->id];
  for (int i = 0; i < b.n; i++) b.nodes[i]->id = i;
  g->nodes = b.nodes;
  g->n_nodes = g->cap_nodes = b.n;
}

void tg_pad_vocab(tg_ctx *ctx, tg_graph *g, int multiple) {
  double v;
  if (multiple <= 1 || !tg_graph_get_config(g, TG_VOCAB_SYM, &v) || !(v >= 1 && v < 1e15))
    return;
  int64_t vocab = (int64_t)v, padded = (vocab + multiple - 1) / multiple * multiple;
  if (padded == vocab || !has_dim(g, vocab) || has_backward(g)) return;
  pad_types(ctx, g, vocab, padded);
  mask_matmuls(ctx, g, vocab, padded);
}
