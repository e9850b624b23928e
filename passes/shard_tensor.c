/* shard_tensor.c: tensor parallelism (Megatron-LM's) derived from the
 * model's annotations: each rank of the mesh's tensor axis runs the model on
 * its part of every split parameter, and the collectives that make the parts
 * add up are placed here, in the forward, as IR ops whose derivative rules
 * (passes/autodiff.c) give the backward's (docs/parallel.md).
 *
 * The model declares "mesh tensor = N" and marks params "shard columns"
 * (the last axis), "shard rows" (the first) or "shard vocab" (the first, of
 * an embedding that is also the head); "(g)" cuts the axis into g equal
 * parts first and splits each (a fused q, k, v projection).  Rank r holds
 * part r of each: the axis seen as [g, N, n / (g N)], the rank's [:, r, :].
 *
 * The pass walks the forward in order and gives each value a layout,
 * replicated (every rank holds all of it, alike) or split along one axis
 * (with its groups), rebuilding each op on the rank's local shapes:
 *   - elementwise ops keep their split input's layout; a replicated input
 *     that is whole along the split axis is cut to the rank's part (an
 *     iota and index arithmetic on it are rebuilt on the part; anything
 *     else is sliced);
 *   - a reduction over the split axis sums (all_reduce) or takes the
 *     largest (all_max) of the ranks' parts: the softmax's sum and shift
 *     over a vocabulary split across ranks, never gathering the logits;
 *   - views move the split axis (a reshape keeps it when the axis maps to
 *     one output axis whose parts stay whole);
 *   - x @ W with W split by columns gives columns split; with x split by
 *     its last axis and W by rows, each rank's product is a partial sum,
 *     all_reduce'd at once (Megatron's row-parallel layer: the bias is
 *     added after the sum, once);
 *   - a lookup in a table split by vocabulary rows reads the rows the rank
 *     holds, zeroes the others and sums over the ranks (Megatron's
 *     vocabulary-parallel embedding);
 *   - a replicated value that enters a split computation goes through
 *     replicate (Megatron's f): the identity, whose gradient is summed over
 *     the ranks, since each rank's part of the backward gives only its share.
 * So autodiff writes the backward's collectives from these ops' rules, and
 * with the loss replicated every gradient is either a split parameter's
 * own part or the same on every rank.
 *
 * What it cannot split it refuses, naming the op's place and what to
 * change: a split axis that the tensor degree does not divide (heads not a
 * multiple of N), a reshape that would cut a rank's part, two differently
 * split inputs.  Every graph of one model is cut the same way, so the
 * forward, the gradient and the sampler agree on each rank's parts. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct layout {
  int axis;   /* the split axis, or -1: replicated */
  int groups; /* its groups, when split */
} layout;

static const layout REPLICATED = {-1, 0};

typedef struct sharder {
  tg_ctx *ctx;
  tg_graph *g;        /* the graph being rebuilt (its node list is new) */
  int tp, rank;
  tg_node **nw;       /* per old node: its value on this rank */
  layout *lay;        /* per old node: its layout */
  bool *trained;      /* per old node: a float value that depends on a param */
  tg_node **rep;      /* per old node: replicate of it, made once */
  tg_findings *findings;
  int n_collectives;
  double bytes;       /* the forward's collectives' bytes sent per rank (ring) */
} sharder;

static tg_node *add(sharder *s, tg_node *n, const char *what) {
  n->phase = TG_PHASE_FORWARD;
  const char *why = tg_graph_add(s->g, n);
  if (why) tg_error(s->ctx, n->loc, "shard_tensor: internal error building %s: %s", what, why);
  return n;
}

static tg_node *node(sharder *s, tg_op op, tg_loc loc, int nin, tg_node *a, tg_node *b, tg_node *c) {
  tg_node *in[3] = {a, b, c};
  tg_node *n = tg_node_new(s->g, op, loc);
  tg_node_set_inputs(s->g, n, nin, in);
  return n;
}

static tg_node *cst(sharder *s, double v, tg_dtype dt, tg_loc loc) {
  tg_node *n = node(s, TG_OP_const, loc, 0, NULL, NULL, NULL);
  n->value = v;
  n->type = (tg_type){.dtype = dt};
  return add(s, n, "a constant");
}

static tg_node *op2(sharder *s, tg_op op, tg_node *a, tg_node *b, tg_loc loc) {
  return add(s, node(s, op, loc, 2, a, b, NULL), tg_ops[op].name);
}

static tg_node *op3(sharder *s, tg_op op, tg_node *a, tg_node *b, tg_node *c, tg_loc loc) {
  return add(s, node(s, op, loc, 3, a, b, c), tg_ops[op].name);
}

static tg_node *reshaped(sharder *s, tg_node *x, const tg_type *t, tg_loc loc) {
  if (tg_type_same_shape(&x->type, t)) return x;
  tg_node *r = node(s, TG_OP_reshape, loc, 1, x, NULL, NULL);
  r->type = *t;
  r->type.dtype = x->type.dtype;
  return add(s, r, "a reshape");
}

/* The type of one rank's part: the split axis divided by the degree (its
 * symbol dropped: the part is no config constant's size). */
static tg_type local_type(const sharder *s, tg_type t, layout l) {
  if (l.axis >= 0) t.dim[l.axis] = (tg_dim){t.dim[l.axis].size / s->tp, NULL};
  return t;
}

static const char *what_of(const tg_node *n) {
  return n->name ? n->name : tg_ops[n->op].name;
}

/* ---- collectives ------------------------------------------------------- */

/* x's parts combined over the tensor ranks (op all_reduce or all_max),
 * flattened around the collective; a bf16 value is combined in f32, as
 * code generation combines. */
static tg_node *combine(sharder *s, tg_op op, tg_node *x, tg_loc loc) {
  tg_type shape = x->type;
  int64_t numel = tg_type_numel(&shape);
  tg_node *v = x;
  if (v->type.dtype != TG_F32) {
    tg_node *c = node(s, TG_OP_cast, loc, 1, v, NULL, NULL);
    c->type = v->type, c->type.dtype = TG_F32;
    v = add(s, c, "a cast");
  }
  tg_type flat = {.dtype = TG_F32, .rank = 1, .dim = {{.size = numel}}};
  v = reshaped(s, v, &flat, loc);
  tg_node *c = node(s, op, loc, 1, v, NULL, NULL);
  c->ranks = s->tp, c->over_tensor = true;
  v = add(s, c, tg_ops[op].name);
  s->n_collectives++;
  /* a ring all-reduce sends 2 (N - 1) / N of the buffer (collectives.c);
   * all_max the same */
  double sent = 2.0 * (s->tp - 1) / s->tp * 4.0 * (double)numel;
  s->bytes += sent;
  tg_finding *f = tg_find(s->findings, "shard_tensor", "collective", v->id, loc, NULL);
  tg_finding_text(s->findings, f, "op", tg_ops[op].name);
  tg_finding_num(s->findings, f, "numel", (double)numel);
  tg_finding_num(s->findings, f, "sent", sent);
  v = reshaped(s, v, &shape, loc);
  if (x->type.dtype != TG_F32) {
    tg_node *b = node(s, TG_OP_cast, loc, 1, v, NULL, NULL);
    b->type = x->type;
    v = add(s, b, "a cast");
  }
  return v;
}

/* Old node x as a replicated input of a split computation: through
 * replicate when it carries a gradient (made once per value). */
static tg_node *entering(sharder *s, const tg_node *x) {
  if (!s->trained[x->id]) return s->nw[x->id];
  if (!s->rep[x->id]) {
    tg_node *r = node(s, TG_OP_replicate, x->loc, 1, s->nw[x->id], NULL, NULL);
    r->ranks = s->tp, r->over_tensor = true;
    s->rep[x->id] = add(s, r, "a replicate");
  }
  return s->rep[x->id];
}

/* ---- a replicated value cut to this rank's part ------------------------ */

static bool pure_index(const sharder *s, const tg_node *x) {
  if (s->trained[x->id]) return false;
  if (x->op == TG_OP_iota || x->op == TG_OP_const || x->op == TG_OP_input) return true;
  if (tg_ops[x->op].kind != TG_KIND_ELEMENTWISE && x->op != TG_OP_reshape) return false;
  for (int i = 0; i < x->nin; i++)
    if (!pure_index(s, x->in[i])) return false;
  return true;
}

/* The part along axis a (groups 1) of replicated old node x: an index
 * computation (iota, comparisons) rebuilt on the part, so that no whole
 * tensor is made to be sliced; anything else sliced, through replicate. */
static tg_node *part_of(sharder *s, const tg_node *x, int a, int groups) {
  int64_t n = x->type.dim[a].size, part = n / s->tp;
  if (groups != 1)
    tg_error(s->ctx, x->loc, "shard_tensor: '%s' (replicated) meets a value split in %d groups along the same axis; "
                             "split '%s' the same way", what_of(x), groups, what_of(x));
  if (x->op == TG_OP_iota) {
    tg_node *i = node(s, TG_OP_iota, x->loc, 0, NULL, NULL, NULL);
    i->axis = x->axis;
    i->type = local_type(s, x->type, (layout){a, 1});
    add(s, i, "an iota");
    return x->axis == a ? op2(s, TG_OP_add, i, cst(s, (double)(s->rank * part), TG_I32, x->loc), x->loc) : i;
  }
  if (tg_ops[x->op].kind == TG_KIND_ELEMENTWISE && pure_index(s, x)) {
    tg_node *in[3];
    for (int i = 0; i < x->nin; i++) {
      const tg_node *u = x->in[i];
      int ua = a - (x->type.rank - u->type.rank);
      in[i] = ua >= 0 && u->type.dim[ua].size == n ? part_of(s, u, ua, 1) : s->nw[u->id];
    }
    tg_node *e = node(s, x->op, x->loc, x->nin, in[0], x->nin > 1 ? in[1] : NULL, x->nin > 2 ? in[2] : NULL);
    e->type = local_type(s, x->type, (layout){a, 1});
    e->value = x->value;
    return add(s, e, tg_ops[x->op].name);
  }
  tg_node *sl = node(s, TG_OP_slice, x->loc, 1, entering(s, x), NULL, NULL);
  sl->axis = a, sl->start = (int64_t)s->rank * part, sl->len = part;
  return add(s, sl, "a slice");
}

/* ---- one op ---------------------------------------------------------------- */

/* old node n rebuilt on its new inputs in[], its attributes kept; the type
 * given for the ops whose type is not inferred */
static tg_node *rebuilt(sharder *s, const tg_node *n, tg_node **in, const tg_type *given) {
  tg_node *c = tg_node_new(s->g, n->op, n->loc);
  tg_node_set_inputs(s->g, c, n->nin, in);
  c->name = n->name, c->value = n->value, c->axis = n->axis, c->axes = n->axes;
  memcpy(c->perm, n->perm, sizeof c->perm);
  c->start = n->start, c->len = n->len, c->init = n->init, c->ranks = n->ranks, c->over_tensor = n->over_tensor;
  c->type = given ? *given : n->type;
  return add(s, c, tg_ops[n->op].name);
}

static void param_leaf(sharder *s, const tg_node *n) {
  layout l = REPLICATED;
  if (n->init.split != TG_SPLIT_NONE) {
    l.axis = n->init.split == TG_SPLIT_COLUMNS ? n->type.rank - 1 : 0;
    l.groups = n->init.split_groups > 0 ? n->init.split_groups : 1;
    int64_t size = n->type.dim[l.axis].size, unit = (int64_t)s->tp * l.groups;
    if (size % unit)
      tg_error(s->ctx, n->loc, "'%s' is split by %s%s over the mesh's tensor axis of %d ranks, but its %s axis of %lld "
                               "is not a multiple of %lld: choose a tensor degree that divides %lld%s",
               n->name, tg_split_name(n->init.split), l.groups > 1 ? " in groups" : "", s->tp,
               l.axis == 0 ? "first" : "last", (long long)size, (long long)unit,
               (long long)(size / l.groups), l.groups > 1 ? " (one group's size)" : "");
  }
  tg_type t = local_type(s, n->type, l);
  s->nw[n->id] = rebuilt(s, n, NULL, &t);
  s->lay[n->id] = l;
  if (l.axis >= 0) {
    tg_finding *f = tg_find(s->findings, "shard_tensor", "param", n->id, n->loc, NULL);
    tg_finding_text(s->findings, f, "name", n->name);
    tg_finding_text(s->findings, f, "split", tg_split_name(n->init.split));
    tg_finding_num(s->findings, f, "groups", l.groups);
    tg_finding_num(s->findings, f, "part", (double)t.dim[l.axis].size);
    tg_finding_num(s->findings, f, "whole", (double)n->type.dim[l.axis].size);
    tg_finding_num(s->findings, f, "axis", l.axis);
  }
}

/* An elementwise op: its split inputs agree on the (right-aligned) axis; the
 * replicated ones are broadcast along it (kept, through replicate) or
 * whole (cut to the part). */
static void elementwise(sharder *s, const tg_node *n) {
  layout out = REPLICATED;
  for (int i = 0; i < n->nin; i++) {
    const tg_node *u = n->in[i];
    layout l = s->lay[u->id];
    if (l.axis < 0) continue;
    layout here = {l.axis + (n->type.rank - u->type.rank), l.groups};
    if (out.axis >= 0 && (out.axis != here.axis || out.groups != here.groups))
      tg_error(s->ctx, n->loc, "shard_tensor: %s combines values split along different axes (%d and %d); annotate "
                               "the parameters feeding it so that they split alike", tg_ops[n->op].name, out.axis,
               here.axis);
    out = here;
  }
  tg_node *in[3];
  for (int i = 0; i < n->nin; i++) {
    const tg_node *u = n->in[i];
    int ua = out.axis - (n->type.rank - u->type.rank);
    if (out.axis < 0 || s->lay[u->id].axis >= 0) in[i] = s->nw[u->id];
    else if (ua < 0 || u->type.dim[ua].size == 1) in[i] = entering(s, u);
    else in[i] = part_of(s, u, ua, out.groups);
  }
  tg_type t = local_type(s, n->type, out);
  s->nw[n->id] = rebuilt(s, n, in, &t);
  s->lay[n->id] = out;
}

/* A reduction: over the split axis, the ranks' partial results combined. */
static void reduction(sharder *s, const tg_node *n) {
  layout l = s->lay[n->in[0]->id];
  tg_node *x = s->nw[n->in[0]->id];
  tg_node *r = rebuilt(s, n, &x, NULL);
  s->nw[n->id] = r, s->lay[n->id] = l;
  if (l.axis >= 0 && (n->axes >> l.axis & 1)) {
    s->nw[n->id] = combine(s, n->op == TG_OP_max ? TG_OP_all_max : TG_OP_all_reduce, r, n->loc);
    s->lay[n->id] = REPLICATED;
  }
}

/* The output axis a reshape carries input axis a's split to, or -1: the
 * one whose elements before it are as many as before a, and whose parts
 * (a group's N parts) stay whole: either it holds a and what follows (a
 * merge: a is its leading factor) or a holds it and what follows (a cut:
 * a rank's part is made of whole rows of it). */
static int reshape_axis(const tg_type *in, int a, const tg_type *out, int groups, int tp) {
  int64_t before = 1, after_in = 1;
  for (int i = 0; i < a; i++) before *= in->dim[i].size;
  for (int i = a + 1; i < in->rank; i++) after_in *= in->dim[i].size;
  int64_t acc = 1;
  for (int b = 0; b < out->rank; b++) {
    if (acc == before) {
      int64_t m = out->dim[b].size, after_out = 1;
      for (int i = b + 1; i < out->rank; i++) after_out *= out->dim[i].size;
      int64_t n = in->dim[a].size, unit = (int64_t)groups * tp;
      if (m % unit == 0 && ((m >= n && m % n == 0 && after_out * (m / n) == after_in) ||
                            (n >= m && n % m == 0 && (n / m) * after_in == after_out && (n / unit) % (n / m) == 0)))
        return b;
    }
    acc *= out->dim[b].size;
  }
  return -1;
}

static void view(sharder *s, const tg_node *n) {
  const tg_node *u = n->in[0];
  layout l = s->lay[u->id];
  tg_node *x = s->nw[u->id];
  if (l.axis < 0) {
    s->nw[n->id] = rebuilt(s, n, &x, NULL), s->lay[n->id] = REPLICATED;
    return;
  }
  layout out = l;
  tg_node *c;
  switch (n->op) {
  case TG_OP_reshape: {
    out.axis = reshape_axis(&u->type, l.axis, &n->type, l.groups, s->tp);
    if (out.axis < 0)
      tg_error(s->ctx, n->loc, "shard_tensor: this reshape of '%s' would cut a rank's part of its axis %d (split over "
                               "%d ranks): reshape along other axes, or change the tensor degree",
               what_of(u), l.axis, s->tp);
    tg_type t = local_type(s, n->type, out);
    c = rebuilt(s, n, &x, &t);
    break;
  }
  case TG_OP_transpose:
    for (int i = 0; i < n->type.rank; i++)
      if (n->perm[i] == l.axis) out.axis = i;
    c = rebuilt(s, n, &x, NULL);
    break;
  case TG_OP_slice:
    if (n->axis != l.axis) {
      c = rebuilt(s, n, &x, NULL);
      break;
    }
    /* a whole group: q, k or v of a fused projection */
    int64_t size = u->type.dim[l.axis].size, group = size / l.groups;
    if (n->len != group || n->start % group)
      tg_error(s->ctx, n->loc, "shard_tensor: this slice of '%s' [%lld, %lld) along its split axis is not one of its "
                               "%d groups; split '%s' in groups that match its slices (shard columns(%lld))",
               what_of(u), (long long)n->start, (long long)(n->start + n->len), l.groups, what_of(u),
               (long long)(size / (n->len ? n->len : 1)));
    tg_node *sl = tg_node_new(s->g, TG_OP_slice, n->loc);
    tg_node_set_inputs(s->g, sl, 1, &x);
    sl->name = n->name, sl->axis = n->axis, sl->start = n->start / s->tp, sl->len = n->len / s->tp;
    c = add(s, sl, "a slice");
    out.groups = 1;
    break;
  default:
    tg_error(s->ctx, n->loc, "shard_tensor: %s of a value split over the tensor ranks is not supported yet",
             tg_ops[n->op].name);
  }
  s->nw[n->id] = c, s->lay[n->id] = out;
}

/* gather(table, idx): a table split by vocabulary rows is read where this
 * rank holds the row, zero elsewhere, and the ranks' rows summed. */
static void lookup(sharder *s, const tg_node *n) {
  const tg_node *T = n->in[0], *I = n->in[1];
  layout l = s->lay[T->id];
  if (s->lay[I->id].axis >= 0)
    tg_error(s->ctx, n->loc, "shard_tensor: a lookup with split indices is not supported");
  tg_node *in[2] = {s->nw[T->id], s->nw[I->id]};
  if (l.axis < 0) {
    s->nw[n->id] = rebuilt(s, n, in, NULL), s->lay[n->id] = REPLICATED;
    return;
  }
  if (l.axis > 0) {
    s->nw[n->id] = rebuilt(s, n, in, NULL);
    s->lay[n->id] = (layout){l.axis + I->type.rank - 1, l.groups};
    return;
  }
  if (l.groups != 1) tg_error(s->ctx, n->loc, "shard_tensor: a lookup in a table split in groups is not supported");
  int64_t rows = in[0]->type.dim[0].size;
  tg_loc at = n->loc;
  /* the index arithmetic at [..., 1], so that it broadcasts into the
   * lookup's kernel (its rows' axis) when fused with it */
  tg_type it = I->type;
  it.dim[it.rank++] = (tg_dim){1, NULL};
  tg_node *local = op2(s, TG_OP_sub, reshaped(s, in[1], &it, at), cst(s, (double)(s->rank * rows), TG_I32, at), at);
  tg_node *lo = op2(s, TG_OP_ge, local, cst(s, 0, TG_I32, at), at);
  tg_node *hi = op2(s, TG_OP_lt, local, cst(s, (double)rows, TG_I32, at), at);
  tg_node *safe = op3(s, TG_OP_where, lo, op3(s, TG_OP_where, hi, local, cst(s, 0, TG_I32, at), at), cst(s, 0, TG_I32, at), at);
  tg_dtype dt = in[0]->type.dtype;
  tg_node *mine = op3(s, TG_OP_where, lo, op3(s, TG_OP_where, hi, cst(s, 1, dt, at), cst(s, 0, dt, at), at), cst(s, 0, dt, at), at);
  tg_node *g2[2] = {in[0], reshaped(s, safe, &I->type, at)};
  tg_node *rowsv = rebuilt(s, n, g2, NULL);
  tg_node *part = op2(s, TG_OP_mul, rowsv, mine, at);
  s->nw[n->id] = combine(s, TG_OP_all_reduce, part, at);
  s->lay[n->id] = REPLICATED;
}

/* a [..., M, K] @ b [..., K, N]. */
static void matmul(sharder *s, const tg_node *n) {
  const tg_node *A = n->in[0], *B = n->in[1];
  layout la = s->lay[A->id], lb = s->lay[B->id];
  int ra = A->type.rank, rb = B->type.rank, ro = n->type.rank;
  tg_node *in[2] = {s->nw[A->id], s->nw[B->id]};
  layout out = REPLICATED;
  bool partial = false;
  bool a_k = la.axis == ra - 1, b_k = lb.axis == rb - 2;
  if (la.axis < 0 && lb.axis < 0) {
    /* nothing split */
  } else if (a_k || b_k) { /* the contracted axis: each rank's product is a partial sum */
    if (!a_k) in[0] = part_of(s, A, ra - 1, lb.groups);
    if (!b_k) in[1] = part_of(s, B, rb - 2, la.groups);
    if (a_k && b_k && la.groups != lb.groups)
      tg_error(s->ctx, n->loc, "shard_tensor: this product's operands split their shared axis in different groups");
    if ((a_k && lb.axis >= 0 && !b_k) || (b_k && la.axis >= 0 && !a_k))
      tg_error(s->ctx, n->loc, "shard_tensor: this product's operands are split along different axes");
    partial = true;
  } else if (la.axis < 0 && lb.axis == rb - 1) { /* columns */
    in[0] = entering(s, A);
    out = (layout){ro - 1, lb.groups};
  } else if (lb.axis < 0 && la.axis == ra - 2) { /* rows of a */
    in[1] = entering(s, B);
    out = (layout){ro - 2, la.groups};
  } else { /* batch axes, aligned from the right */
    int oa = la.axis >= 0 ? la.axis + ro - ra : -1, ob = lb.axis >= 0 ? lb.axis + ro - rb : -1;
    if (la.axis == ra - 2 || lb.axis == rb - 1 || (oa >= 0 && ob >= 0 && oa != ob))
      tg_error(s->ctx, n->loc, "shard_tensor: this product's operands are split along axes that do not match");
    if (oa < 0) in[0] = entering(s, A);
    if (ob < 0) in[1] = entering(s, B);
    out = (layout){oa >= 0 ? oa : ob, oa >= 0 ? la.groups : lb.groups};
  }
  tg_type t = local_type(s, n->type, out);
  tg_node *m = rebuilt(s, n, in, &t);
  s->nw[n->id] = partial ? combine(s, TG_OP_all_reduce, m, n->loc) : m;
  s->lay[n->id] = out;
}

/* Flash attention's ops: heads (a batch axis) split alike in every input. */
static void attention(sharder *s, const tg_node *n) {
  layout out = REPLICATED;
  for (int i = 0; i < n->nin; i++)
    if (s->lay[n->in[i]->id].axis >= 0) out = s->lay[n->in[i]->id];
  tg_node *in[6];
  for (int i = 0; i < n->nin; i++) {
    const tg_node *u = n->in[i];
    layout l = s->lay[u->id];
    if (out.axis >= 0 && (l.axis != out.axis || out.axis >= u->type.rank - 2))
      tg_error(s->ctx, n->loc, "shard_tensor: attention's inputs must be split alike along a batch axis (the heads)");
    in[i] = s->nw[u->id];
  }
  tg_type t = local_type(s, n->type, out);
  s->nw[n->id] = rebuilt(s, n, in, n->op == TG_OP_flash_attention_lse ? NULL : &t);
  s->lay[n->id] = out;
}

static void one(sharder *s, const tg_node *n) {
  if (n->op == TG_OP_param) return param_leaf(s, n);
  if (tg_ops[n->op].kind == TG_KIND_LEAF) {
    s->nw[n->id] = rebuilt(s, n, NULL, NULL), s->lay[n->id] = REPLICATED;
    return;
  }
  if (tg_ops[n->op].kind == TG_KIND_ELEMENTWISE) return elementwise(s, n);
  if (tg_ops[n->op].kind == TG_KIND_REDUCTION) return reduction(s, n);
  if (n->op == TG_OP_matmul) return matmul(s, n);
  if (n->op == TG_OP_gather) return lookup(s, n);
  if (tg_op_is_flash_attention(n->op)) return attention(s, n);
  if (n->op == TG_OP_reshape || n->op == TG_OP_transpose || n->op == TG_OP_slice) return view(s, n);
  tg_node *in[8];
  if (n->nin > 8) tg_error(s->ctx, n->loc, "shard_tensor: %s has too many inputs", tg_ops[n->op].name);
  for (int i = 0; i < n->nin; i++) {
    if (s->lay[n->in[i]->id].axis >= 0)
      tg_error(s->ctx, n->loc, "shard_tensor: %s of a value split over the tensor ranks is not supported yet",
               tg_ops[n->op].name);
    in[i] = s->nw[n->in[i]->id];
  }
  s->nw[n->id] = rebuilt(s, n, in, NULL), s->lay[n->id] = REPLICATED;
}

/* An output split over the ranks, gathered whole: the parts flattened and
 * gathered rank after rank, then the rank axis put back before the split
 * axis's part. */
static tg_node *gathered(sharder *s, const tg_node *n) {
  layout l = s->lay[n->id];
  tg_node *x = s->nw[n->id];
  if (l.groups != 1) tg_error(s->ctx, n->loc, "shard_tensor: an output split in groups cannot be gathered yet");
  tg_type flat = {.dtype = x->type.dtype, .rank = 1, .dim = {{.size = tg_type_numel(&x->type)}}};
  tg_node *ag = node(s, TG_OP_all_gather, n->loc, 1, reshaped(s, x, &flat, n->loc), NULL, NULL);
  ag->ranks = s->tp, ag->over_tensor = true;
  add(s, ag, "an all_gather");
  tg_type ranked = {.dtype = x->type.dtype, .rank = x->type.rank + 1};
  ranked.dim[0] = (tg_dim){s->tp, NULL};
  for (int i = 0; i < x->type.rank; i++) ranked.dim[i + 1] = x->type.dim[i];
  tg_node *r = reshaped(s, ag, &ranked, n->loc);
  tg_node *t = node(s, TG_OP_transpose, n->loc, 1, r, NULL, NULL);
  /* result axis i: the rank axis sits just before the split axis */
  for (int i = 0, k = 1; i <= x->type.rank; i++) t->perm[i] = i == l.axis ? 0 : k++;
  add(s, t, "a transpose");
  /* an output is read from memory: the transposed view made a value of
   * its own by an exact elementwise op (x + 0 is x, -inf included) */
  tg_node *whole = op2(s, TG_OP_add, reshaped(s, t, &n->type, n->loc), cst(s, 0, n->type.dtype, n->loc), n->loc);
  whole->name = n->name;
  return whole;
}

int tg_tensor_degree(const tg_graph *g) {
  double degree = 1;
  return tg_graph_get_config(g, TG_CONFIG_MESH_TENSOR, &degree) && degree > 1 ? (int)degree : 1;
}

void tg_shard_tensor(tg_ctx *ctx, tg_graph *g, int rank, tg_findings *findings) {
  double degree = 1;
  if (!tg_graph_get_config(g, TG_CONFIG_MESH_TENSOR, &degree) || degree <= 1) {
    tg_finding_text(findings, tg_find(findings, "shard_tensor", "no_axis", -1, (tg_loc){0}, NULL), "declares",
                    tg_graph_get_config(g, TG_CONFIG_MESH_TENSOR, &degree) ? "mesh tensor = 1" : "no mesh");
    return;
  }
  int tp = (int)degree;
  if (rank < 0 || rank >= tp)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "tensor rank %d is not among the mesh's %d tensor ranks", rank, tp);
  /* a graph split already (IR text read back after this pass) is left as
   * it is: its collectives over the tensor axis say so */
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->over_tensor || g->nodes[i]->op == TG_OP_replicate) {
      tg_find(findings, "shard_tensor", "split_already", -1, (tg_loc){0}, NULL);
      return;
    }
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->phase != TG_PHASE_FORWARD)
      tg_error(ctx, g->nodes[i]->loc, "shard_tensor: the graph already has a backward; split the forward");
  int n_old = g->n_nodes;
  tg_node **old = g->nodes;
  sharder s = {.ctx = ctx, .g = g, .tp = tp, .rank = rank, .findings = findings};
  /* in the arena: an error (tg_error) leaves the pass from anywhere */
  s.nw = tg_alloc(ctx->arena, sizeof *s.nw * ((size_t)n_old + 1));
  s.lay = tg_alloc(ctx->arena, sizeof *s.lay * ((size_t)n_old + 1));
  s.trained = tg_alloc(ctx->arena, sizeof *s.trained * ((size_t)n_old + 1));
  s.rep = tg_alloc(ctx->arena, sizeof *s.rep * ((size_t)n_old + 1));
  for (int i = 0; i < n_old; i++) {
    const tg_node *n = old[i];
    bool t = n->op == TG_OP_param;
    for (int k = 0; k < n->nin; k++) t |= s.trained[n->in[k]->id];
    s.trained[i] = t && tg_dtype_is_float(n->type.dtype);
  }
  tg_finding *f = tg_find(findings, "shard_tensor", "axis", -1, (tg_loc){0}, NULL);
  tg_finding_num(findings, f, "ranks", tp);
  tg_finding_num(findings, f, "rank", rank);
  /* the graph is rebuilt from its first node: new nodes get new ids, the
   * old ones are read through old[] */
  g->nodes = NULL, g->n_nodes = 0, g->cap_nodes = 0;
  for (int i = 0; i < n_old; i++) {
    one(&s, old[i]);
    const tg_node *n = old[i];
    if (findings && n->op != TG_OP_param && s.lay[i].axis >= 0) {
      char t[TG_TYPE_STR_MAX];
      f = tg_find(findings, "shard_tensor", "value", n->id, n->loc, NULL);
      tg_finding_text(findings, f, "op", tg_ops[n->op].name);
      tg_finding_text(findings, f, "name", n->name);
      tg_finding_text(findings, f, "type", tg_type_str(&s.nw[i]->type, t, sizeof t));
      tg_finding_num(findings, f, "axis", s.lay[i].axis);
      tg_finding_num(findings, f, "groups", s.lay[i].groups);
    }
  }
  for (int o = 0; o < g->n_outputs; o++) {
    const tg_node *n = g->outputs[o].node;
    g->outputs[o].node = s.lay[n->id].axis >= 0 ? gathered(&s, n) : s.nw[n->id];
  }
  if (findings) {
    int reps = 0;
    for (int i = 0; i < n_old; i++) reps += s.rep[i] != NULL;
    f = tg_find(findings, "shard_tensor", "summary", -1, (tg_loc){0}, NULL);
    tg_finding_num(findings, f, "collectives", s.n_collectives);
    tg_finding_num(findings, f, "bytes", s.bytes);
    tg_finding_num(findings, f, "replicated", reps);
  }
}

/* Every replicate, once autodiff has read it: its readers read its input. */
void tg_drop_replicates(tg_ctx *ctx, tg_graph *g) {
  (void)ctx;
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *n = g->nodes[i];
    for (int x = 0; x < n->nin; x++)
      while (n->in[x]->op == TG_OP_replicate) n->in[x] = n->in[x]->in[0];
    if (n->op != TG_OP_replicate) g->nodes[k] = n, n->id = k++;
  }
  g->n_nodes = k;
  for (int o = 0; o < g->n_outputs; o++)
    while (g->outputs[o].node->op == TG_OP_replicate) g->outputs[o].node = g->outputs[o].node->in[0];
}
