/* split_sums.c: a sum over several axes as two sums, so that a GPU can
 * run it on many blocks.
 *
 * The gradient of a bias broadcast over [B, T, C] is a sum over B and T:
 * C outputs, each the sum of B·T = 16,384 values.  Done in one step, a GPU
 * gets one block (or a few) per output, each walking thousands of rows.
 * Summed over T first (stage 1: B·C outputs, each of T values) and then
 * over B (stage 2: C outputs of B values each), the first stage has
 * parallelism to spare and the second is tiny.  Generally, a sum over
 * axes A becomes a sum over A without its first axis, then over that axis
 * (outside the forward, whose sums over several axes are the loss: small).
 * The result is the same sum in another order (floating-point addition is
 * not associative, so it may differ in the last bits; every backend runs
 * the same graph, so they agree with each other).
 *
 * Where stage 2 goes: a stage 2 reads the finished stage 1, which in a GPU
 * kernel means a kernel boundary.  Left in place, each would be a small
 * kernel of its own.  So every stage 2 (and the views of its result) is
 * moved down to just before the first node that reads any of them or the
 * end of the backward (in a training step: the optimizer; in a gradient
 * graph: the end), where they
 * form one multi-tensor kernel of small sums (fuse.c).  Views of them and
 * widening casts (bf16 -> f32, computed by whichever kernel reads them)
 * move with them. */
#include <string.h>

#include "passes.h"

static int popcount(unsigned x) {
  int n = 0;
  for (; x; x &= x - 1) n++;
  return n;
}

/* The axes of n's input that a sum over n->axes really reduces (size > 1). */
static unsigned real_axes(const tg_node *n) {
  unsigned a = 0;
  const tg_type *t = &n->in[0]->type;
  for (int i = 0; i < t->rank; i++)
    if ((n->axes >> i & 1) && t->dim[i].size > 1) a |= 1u << i;
  return a;
}

int tg_split_sums(tg_ctx *ctx, tg_graph *g) {
  int n = g->n_nodes, split = 0;
  /* per node id: moved down (a stage 2, or a view of something moved) */
  bool *moved = tg_alloc(g->arena, sizeof *moved * (size_t)(2 * n + 1));
  memset(moved, 0, sizeof *moved * (size_t)(2 * n + 1));
  tg_node **out = tg_alloc(g->arena, sizeof *out * (size_t)(2 * n + 1));
  tg_node **held = tg_alloc(g->arena, sizeof *held * (size_t)(n + 1));
  int k = 0, n_held = 0;
  for (int i = 0; i < n; i++) {
    tg_node *s = g->nodes[i];
    bool reads_moved = false;
    for (int j = 0; j < s->nin; j++) reads_moved |= moved[s->in[j]->id];
    if (reads_moved && (tg_is_view(s) || tg_is_widening(s))) {
      /* a view of a stage 2 goes down with it, and so does a widening cast
       * (fusion computes those in the kernel that reads them) */
      moved[s->id] = true;
      held[n_held++] = s;
      continue;
    }
    if (reads_moved || (n_held && s->phase != TG_PHASE_BACKWARD)) {
      /* the first reader of a stage 2, or the end of the backward: every
       * stage 2 comes down here (before the optimizer, which keeps its
       * kernels to itself) */
      for (int h = 0; h < n_held; h++) out[k++] = held[h];
      n_held = 0;
      memset(moved, 0, sizeof *moved * (size_t)(2 * n + 1));
    }
    /* the backward's sums: the forward's are the loss (small), the optimizer's its own */
    unsigned axes = s->op == TG_OP_sum && s->phase == TG_PHASE_BACKWARD ? real_axes(s) : 0;
    if (popcount(axes) < 2) {
      out[k++] = s;
      continue;
    }
    unsigned first = axes & -axes;
    tg_node *stage1 = tg_node_new(g, TG_OP_sum, s->loc);
    stage1->phase = s->phase;
    tg_node_set_inputs(g, stage1, 1, &s->in[0]);
    stage1->axes = axes & ~first;
    stage1->id = n + split; /* numbered for `moved` until the end renumbers */
    char why[256];
    if (!tg_infer_type(stage1, &stage1->type, why, sizeof why))
      tg_error(ctx, s->loc, "internal: split_sums: %s", why);
    out[k++] = stage1;
    s->in[0] = stage1;
    s->axes = first;
    moved[s->id] = true;
    held[n_held++] = s;
    split++;
  }
  for (int h = 0; h < n_held; h++) out[k++] = held[h];
  for (int i = 0; i < k; i++) out[i]->id = i;
  g->nodes = out;
  g->n_nodes = g->cap_nodes = k;
  if (!tg_verify(ctx, g)) tg_error(ctx, (tg_loc){g->source, 1, 1}, "internal: the graph is broken after split_sums");
  return split;
}
