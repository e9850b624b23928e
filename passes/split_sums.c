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
 * move with them.
 *
 * Row groups.  A column sum of a value whose rows a backward row reduction
 * also walks (layernorm's dγ = Σ dy·x̂ and dβ = Σ dy, beside the row sums
 * of its dx) is split differently: the B·T rows are taken in groups of
 * TG_ROW_GROUP consecutive rows (a reshape to [B·T/G, G, C]), stage 1 sums
 * each group (axis 1) and stage 2 the groups (axis 0).  The fuse pass then
 * puts stage 1 in the row kernel itself (a row-group kernel: a block walks
 * G rows and keeps each column's running sum), so dy and x are read once
 * for dx, dγ and dβ together.  Stage 1 is placed just after the row
 * reduction it goes with, where that kernel is the latest one.  Only sums
 * of values that do not depend on a backward row reduction are grouped:
 * they are known in the row kernel's first sweep. */
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

static bool last_axis_sum(const tg_node *n) {
  const tg_type *t = n->nin ? &n->in[0]->type : NULL;
  return n->op == TG_OP_sum && n->phase == TG_PHASE_BACKWARD && t && t->rank >= 1 && n->axes == 1u << (t->rank - 1);
}

/* Elementwise ops (casts included) of x's own shape: the chains a row
 * kernel computes point by point. */
static bool same_shape_elementwise(const tg_node *n, const tg_node *x) {
  return tg_ops[n->op].kind == TG_KIND_ELEMENTWISE && tg_type_same_shape(&n->type, &x->type);
}

/* Does x, through elementwise ops of its shape, share a source with a
 * backward row reduction (fed[]), without itself depending on one (after[])? */
static bool shares_rows(const tg_node *x, const bool *fed, const bool *after, int depth) {
  if (fed[x->id]) return true;
  if (depth > 8 || !same_shape_elementwise(x, x)) return false;
  for (int i = 0; i < x->nin; i++)
    if (tg_type_same_shape(&x->in[i]->type, &x->type) && shares_rows(x->in[i], fed, after, depth + 1)) return true;
  return false;
}

/* A sum over the two leading axes of [R0, R1, C] whose rows (R0·R1) split
 * into groups, of a value that shares its rows with a row reduction. */
static bool row_group_sum(const tg_node *s, unsigned axes, const bool *fed, const bool *after) {
  const tg_node *x = s->in[0];
  const tg_type *t = &x->type;
  if (axes != 3u || t->rank != 3 || after[x->id]) return false;
  int64_t rows = t->dim[0].size * t->dim[1].size;
  return rows % TG_ROW_GROUP == 0 && rows >= 2 * TG_ROW_GROUP && shares_rows(x, fed, after, 0);
}

int tg_split_sums(tg_ctx *ctx, tg_graph *g) {
  int n = g->n_nodes, split = 0, fresh = 0; /* fresh: ids for new nodes until the end renumbers */
  /* fed: a value that, through elementwise ops of its shape, reaches a
   * backward row reduction; after: one that depends on such a reduction */
  bool *fed = tg_alloc(g->arena, sizeof *fed * (size_t)(n + 1));
  bool *after = tg_alloc(g->arena, sizeof *after * (size_t)(n + 1));
  memset(fed, 0, sizeof *fed * (size_t)(n + 1));
  memset(after, 0, sizeof *after * (size_t)(n + 1));
  for (int i = n - 1; i >= 0; i--) {
    tg_node *m = g->nodes[i];
    if (last_axis_sum(m)) fed[m->in[0]->id] = true;
    else if (fed[i] && tg_ops[m->op].kind == TG_KIND_ELEMENTWISE)
      for (int j = 0; j < m->nin; j++)
        if (tg_type_same_shape(&m->in[j]->type, &m->type)) fed[m->in[j]->id] = true;
  }
  for (int i = 0; i < n; i++) {
    tg_node *m = g->nodes[i];
    if (m->phase != TG_PHASE_BACKWARD) continue;
    if (last_axis_sum(m)) after[i] = true;
    else if (tg_ops[m->op].kind == TG_KIND_ELEMENTWISE || tg_is_view(m)) /* not through a matmul */
      for (int j = 0; j < m->nin; j++) after[i] = after[i] || after[m->in[j]->id];
  }
  /* grouped stage 1s (and their reshapes) waiting for their row reduction */
  tg_node **pending = tg_alloc(g->arena, sizeof *pending * (size_t)(2 * n + 1));
  int n_pending = 0;
  /* per node id: moved down (a stage 2, or a view of something moved) */
  bool *moved = tg_alloc(g->arena, sizeof *moved * (size_t)(3 * n + 1));
  memset(moved, 0, sizeof *moved * (size_t)(3 * n + 1));
  tg_node **out = tg_alloc(g->arena, sizeof *out * (size_t)(3 * n + 1));
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
      for (int h = 0; h < n_pending; h++) out[k++] = pending[h];
      n_pending = 0;
      for (int h = 0; h < n_held; h++) out[k++] = held[h];
      n_held = 0;
      memset(moved, 0, sizeof *moved * (size_t)(3 * n + 1));
    }
    /* the backward's sums: the forward's are the loss (small), the optimizer's its own */
    unsigned axes = s->op == TG_OP_sum && s->phase == TG_PHASE_BACKWARD ? real_axes(s) : 0;
    if (popcount(axes) < 2) {
      out[k++] = s;
      if (last_axis_sum(s) && n_pending) {
        /* the row reduction the grouped column sums go with: they follow it */
        for (int h = 0; h < n_pending; h++) out[k++] = pending[h];
        n_pending = 0;
      }
      continue;
    }
    if (row_group_sum(s, axes, fed, after)) {
      /* [R0, R1, C...] as [R0·R1/G, G, C...]: stage 1 sums each group of
       * G rows, stage 2 the groups */
      const tg_type *t = &s->in[0]->type;
      tg_node *r = tg_node_new(g, TG_OP_reshape, s->loc);
      r->phase = s->phase;
      tg_node_set_inputs(g, r, 1, &s->in[0]);
      r->type = *t;
      r->type.rank = t->rank;
      r->type.dim[0].size = t->dim[0].size * t->dim[1].size / TG_ROW_GROUP;
      r->type.dim[0].sym = NULL;
      r->type.dim[1].size = TG_ROW_GROUP;
      r->type.dim[1].sym = NULL;
      r->id = n + fresh++;
      tg_node *stage1 = tg_node_new(g, TG_OP_sum, s->loc);
      stage1->phase = s->phase;
      tg_node_set_inputs(g, stage1, 1, &r);
      stage1->axes = 2u;
      stage1->id = n + fresh++;
      split++;
      char why[256];
      if (!tg_infer_type(stage1, &stage1->type, why, sizeof why))
        tg_error(ctx, s->loc, "internal: split_sums: %s", why);
      pending[n_pending++] = r;
      pending[n_pending++] = stage1;
      s->in[0] = stage1;
      s->axes = 1u;
      moved[s->id] = true;
      held[n_held++] = s;
      continue;
    }
    unsigned first = axes & -axes;
    tg_node *stage1 = tg_node_new(g, TG_OP_sum, s->loc);
    stage1->phase = s->phase;
    tg_node_set_inputs(g, stage1, 1, &s->in[0]);
    stage1->axes = axes & ~first;
    stage1->id = n + fresh++; /* numbered for `moved` until the end renumbers */
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
  for (int h = 0; h < n_pending; h++) out[k++] = pending[h];
  for (int h = 0; h < n_held; h++) out[k++] = held[h];
  for (int i = 0; i < k; i++) out[i]->id = i;
  g->nodes = out;
  g->n_nodes = g->cap_nodes = k;
  if (!tg_verify(ctx, g)) tg_error(ctx, (tg_loc){g->source, 1, 1}, "internal: the graph is broken after split_sums");
  return split;
}
