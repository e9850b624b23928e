/* flash_attn.c: finds causal self-attention written from primitive ops and
 * replaces it by one flash_attention op.
 *
 * Why: written out, attention materialises the [T, T] scores, their mask,
 * exponentials and probabilities for every head, in the forward and again
 * in the backward.  flash_attention computes the same thing a tile of keys
 * at a time with an online softmax, saving only each row's log-sum-exp
 * (flash_attention_lse) for the backward, which recomputes the
 * probabilities from it.
 *
 * What is matched, from the matmul P @ v back (models/std.tg's
 * causal_attention is the reference spelling):
 *   P = e / sum(e, last axis),  e = exp(x - max(x, last axis))
 *   x = where(causal, s, -inf)   or   s + where(causal, 0, -inf)  (either order)
 *   causal = iota(query axis) >= iota(key axis)   (or key <= query)
 *   s = (q @ kᵀ) * c,  c * (q @ kᵀ),  (q @ kᵀ) / c,  or (q * c) @ kᵀ, (q / c) @ kᵀ
 *   kᵀ = transpose(k) of the last two axes; c a constant: the scale
 * with q, k, v of one float type [..., T, D] and none of the intermediate
 * nodes used by anything else.  A matmul whose left operand is a softmax
 * but which fails a check is a near miss: the report says which check.
 * Equivalent spellings beyond these are not recognised (a near miss says
 * so); nothing that is not causal attention is ever matched.
 *
 * The rewrite puts the two new nodes where the P @ v node was (so the
 * graph stays in topological order), points P @ v's users and outputs at
 * flash_attention, and removes the matched nodes left without users. */
#include <math.h>
#include <string.h>

#include "passes.h"

typedef struct fa {
  tg_ctx *ctx;
  tg_graph *g;
  tg_findings *findings;
  int *uses;       /* per node id: inputs of other nodes and outputs naming it */
  bool *candidate; /* per node id: part of a matched pattern, removed if unused */
  tg_node **lse;   /* per node id of a matched P @ v: the nodes replacing it */
  tg_node **attn;
} fa;

/* What a successful match found. */
typedef struct match {
  tg_node *q, *k, *v;
  double scale;
  tg_node *chain[24]; /* the matched nodes, to remove once unused */
  int nchain;
} match;

/* ---- small predicates ------------------------------------------------------ */

static bool is_op(const tg_node *n, tg_op op) { return n && n->op == op; }

static bool is_const(const tg_node *n, double v) {
  return is_op(n, TG_OP_const) && n->value == v;
}

static int last_axis_bit(const tg_node *n) { return (int)(1u << (n->type.rank - 1)); }

/* k's transpose swapping the last two axes only. */
static bool is_transpose_last2(const tg_node *n) {
  if (!is_op(n, TG_OP_transpose) || n->type.rank < 2) return false;
  int r = n->type.rank;
  for (int i = 0; i < r - 2; i++)
    if (n->perm[i] != i) return false;
  return n->perm[r - 2] == r - 1 && n->perm[r - 1] == r - 2;
}

/* An iota along the given axis of a [.., T, T] mask with leading 1s. */
static bool is_iota_axis(const tg_node *n, int axis_from_end) {
  return is_op(n, TG_OP_iota) && n->axis == n->type.rank - axis_from_end;
}

/* The mask keeps exactly the keys at or before the query: query >= key. */
static bool is_causal(const tg_node *c) {
  if (!c || c->nin != 2) return false;
  const tg_node *a = c->in[0], *b = c->in[1];
  if (c->op == TG_OP_ge) return is_iota_axis(a, 2) && is_iota_axis(b, 1);
  if (c->op == TG_OP_le) return is_iota_axis(a, 1) && is_iota_axis(b, 2);
  return false;
}

/* The mask broadcasts over the scores' leading dims only: [1.., T, T]. */
static bool mask_fits(const tg_node *c, const tg_node *scores) {
  int r = c->type.rank, rs = scores->type.rank;
  if (r < 2 || r > rs) return false;
  for (int i = 0; i < r - 2; i++)
    if (c->type.dim[i].size != 1) return false;
  return c->type.dim[r - 1].size == scores->type.dim[rs - 1].size &&
         c->type.dim[r - 2].size == scores->type.dim[rs - 2].size;
}

/* ---- matching ---------------------------------------------------------------- */

#define MISS(...) \
  do { \
    snprintf(why, whylen, __VA_ARGS__); \
    return false; \
  } while (0)

static void keep(match *m, tg_node *n) {
  if (m->nchain < (int)(sizeof m->chain / sizeof *m->chain)) m->chain[m->nchain++] = n;
}

/* Checks that node n (in the chain) has exactly `want` uses, so removing
 * the pattern loses nothing. */
static bool used_only_here(const fa *F, const tg_node *n, int want, char *why, size_t whylen) {
  if (F->uses[n->id] == want) return true;
  char where[64] = "";
  if (n->loc.file) snprintf(where, sizeof where, " (%s:%d:%d)", n->loc.file, n->loc.line, n->loc.col);
  MISS("the %s node %%%d%s of the pattern is also used elsewhere", tg_ops[n->op].name, n->id, where);
}

/* n = a * c, c * a or a / c with c a nonzero constant: sets *a and *scale
 * (and notes c, to be removed if left unused). */
static bool scaled_by_const(tg_node *n, tg_node **a, double *scale, match *m) {
  if (!is_op(n, TG_OP_mul) && !is_op(n, TG_OP_div)) return false;
  tg_node *x = n->in[0], *c = n->in[1];
  if (is_op(c, TG_OP_const) && c->value != 0) {
    *a = x, *scale = n->op == TG_OP_mul ? c->value : 1 / c->value;
    keep(m, c);
    return true;
  }
  if (n->op == TG_OP_mul && is_op(x, TG_OP_const)) {
    *a = c, *scale = x->value;
    keep(m, x);
    return true;
  }
  return false;
}

/* s = scale * (q @ kᵀ) in one of the accepted spellings: the scale on the
 * scores, or on q. */
static bool match_scores(const fa *F, tg_node *s, match *m, char *why, size_t whylen) {
  tg_node *qk = s;
  double scale = 0;
  if (!used_only_here(F, s, 1, why, whylen)) return false;
  bool scaled = scaled_by_const(s, &qk, &scale, m);
  if (scaled) {
    keep(m, s);
    if (!used_only_here(F, qk, 1, why, whylen)) return false;
  }
  if (!is_op(qk, TG_OP_matmul)) MISS("the scores are not a product q @ transpose(k)");
  keep(m, qk);
  tg_node *q = qk->in[0], *kt = qk->in[1];
  if (!is_transpose_last2(kt))
    MISS("the scores are q @ something other than a transpose of k's last two axes");
  keep(m, kt);
  if (!scaled && scaled_by_const(q, &q, &scale, m)) {
    scaled = true;
    keep(m, qk->in[0]);
  }
  if (!scaled) MISS("no scale: the scores q @ transpose(k) are not multiplied by a constant");
  if (!(isfinite(scale) && scale > 0)) MISS("the scale %g is not a positive finite number", scale);
  m->q = q;
  m->k = kt->in[0];
  m->scale = scale;
  return true;
}

/* x = scores masked by a causal mask; sets *scores. */
static bool match_mask(tg_node *x, tg_node **scores, match *m, char *why,
                       size_t whylen) {
  tg_node *cond = NULL;
  if (is_op(x, TG_OP_where)) {
    if (!is_const(x->in[2], -INFINITY))
      MISS("the scores are selected by a where whose fill is not -inf");
    cond = x->in[0], *scores = x->in[1];
    keep(m, x->in[2]);
  } else if (is_op(x, TG_OP_add)) {
    for (int side = 0; side < 2 && !cond; side++) {
      tg_node *w = x->in[side];
      if (is_op(w, TG_OP_where) && is_const(w->in[1], 0) && is_const(w->in[2], -INFINITY)) {
        cond = w->in[0], *scores = x->in[1 - side];
        keep(m, w), keep(m, w->in[1]), keep(m, w->in[2]);
      }
    }
    if (!cond) MISS("the scores are added to something that is not where(mask, 0, -inf)");
  } else {
    MISS("the scores are not masked: no where(mask, scores, -inf) or scores + where(mask, 0, -inf)");
  }
  /* reshape(mask, [1, 1, T, T]) is the same mask */
  while (is_op(cond, TG_OP_reshape) && cond->type.rank >= cond->in[0]->type.rank &&
         mask_fits(cond, *scores) && mask_fits(cond->in[0], *scores)) {
    keep(m, cond);
    cond = cond->in[0];
  }
  if (!mask_fits(cond, *scores)) MISS("the mask is not a [T, T] matrix over the scores' last two axes");
  keep(m, cond);
  if (!is_causal(cond))
    MISS("the mask is not causal: it is not iota(query axis) >= iota(key axis), so the keys it "
         "keeps are not exactly those at or before each query");
  keep(m, cond->in[0]), keep(m, cond->in[1]), keep(m, x);
  return true;
}

/* pv = P @ v with P a causal scaled softmax of q @ kᵀ.  False with a reason
 * in why when pv is a near miss, false with why empty when pv does not
 * even start like attention (its left operand is no softmax). */
static bool match_attention(const fa *F, tg_node *pv, match *m, char *why, size_t whylen) {
  why[0] = 0;
  if (!is_op(pv, TG_OP_matmul)) return false;
  tg_node *P = pv->in[0];
  if (!is_op(P, TG_OP_div) || !is_op(P->in[1], TG_OP_sum) || P->in[1]->in[0] != P->in[0] ||
      !is_op(P->in[0], TG_OP_exp))
    return false;
  tg_node *e = P->in[0], *S = P->in[1];
  if (S->axes != (uint32_t)last_axis_bit(S))
    MISS("the softmax sums over axes 0x%x, not the last (key) axis %d", (unsigned)S->axes,
         S->type.rank - 1);
  tg_node *d = e->in[0];
  if (!is_op(d, TG_OP_sub) || !is_op(d->in[1], TG_OP_max) || d->in[1]->in[0] != d->in[0])
    MISS("the softmax does not subtract the row max before exp");
  tg_node *x = d->in[0], *M = d->in[1];
  if (M->axes != (uint32_t)last_axis_bit(M))
    MISS("the softmax's max is over axes 0x%x, not the last (key) axis", (unsigned)M->axes);
  if (!used_only_here(F, P, 1, why, whylen) || !used_only_here(F, S, 1, why, whylen) ||
      !used_only_here(F, e, 2, why, whylen) || !used_only_here(F, d, 1, why, whylen) ||
      !used_only_here(F, M, 1, why, whylen) || !used_only_here(F, x, 2, why, whylen))
    return false;
  m->nchain = 0;
  keep(m, pv), keep(m, P), keep(m, S), keep(m, e), keep(m, d), keep(m, M);
  tg_node *scores;
  if (!match_mask(x, &scores, m, why, whylen)) return false;
  if (!match_scores(F, scores, m, why, whylen)) return false;
  m->v = pv->in[1];
  const tg_type *tq = &m->q->type;
  if (tq->rank < 2 || !tg_dtype_is_float(tq->dtype) || !tg_type_equal(&m->k->type, tq) ||
      !tg_type_equal(&m->v->type, tq))
    MISS("q, k and v are not of one float type [..., T, D]");
  if (!tg_type_same_shape(&pv->type, tq)) MISS("the result's shape is not q's");
  return true;
}

#undef MISS

/* ---- rewriting ---------------------------------------------------------------- */

static tg_node *new_node(fa *F, tg_op op, const tg_node *at, int nin, tg_node **in, double scale) {
  tg_node *n = tg_node_new(F->g, op, at->loc);
  tg_node_set_inputs(F->g, n, nin, in);
  n->value = scale;
  n->phase = at->phase;
  char why[600];
  if (!tg_infer_type(n, &n->type, why, sizeof why))
    tg_error(F->ctx, at->loc, "flash_attn: internal error: %s", why);
  return n;
}

/* Builds the replacement of pv and points every use of pv at it. */
static void replace(fa *F, tg_node *pv, const match *m) {
  tg_node *lse = new_node(F, TG_OP_flash_attention_lse, pv, 2, (tg_node *[]){m->q, m->k}, m->scale);
  tg_node *o = new_node(F, TG_OP_flash_attention, pv, 4,
                        (tg_node *[]){m->q, m->k, m->v, lse}, m->scale);
  o->name = pv->name;
  F->lse[pv->id] = lse;
  F->attn[pv->id] = o;
  /* pv's users are pointed at o in rebuild, all attentions in one walk
   * over the graph (a walk per attention grows with depth squared) */
  F->uses[pv->id] = 0;
  /* q, k, v have new users; nodes this pass made (id -1) are not counted */
  const tg_node *qkv[3] = {m->q, m->k, m->v};
  for (int i = 0; i < 3; i++)
    if (qkv[i]->id >= 0) F->uses[qkv[i]->id] += 2;
  for (int i = 0; i < m->nchain; i++) F->candidate[m->chain[i]->id] = true;
}

/* Points every user of a replaced P @ v at its flash_attention, removes
 * the candidates nobody uses any more (their inputs may then become
 * unused: walking backwards sees them after), puts each replacement where
 * its P @ v was, and renumbers. */
static void rebuild(fa *F) {
  tg_graph *g = F->g;
  int n = g->n_nodes;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++) {
      const tg_node *in = g->nodes[i]->in[k];
      if (in->id >= 0 && F->attn[in->id]) g->nodes[i]->in[k] = F->attn[in->id];
    }
  for (int i = 0; i < g->n_outputs; i++)
    if (F->attn[g->outputs[i].node->id]) g->outputs[i].node = F->attn[g->outputs[i].node->id];
  bool *dead = tg_alloc(F->ctx->arena, (size_t)n + 1);
  for (int i = n - 1; i >= 0; i--) {
    const tg_node *x = g->nodes[i];
    if (!F->candidate[i] || F->uses[i] > 0) continue;
    dead[i] = true;
    for (int k = 0; k < x->nin; k++)
      if (x->in[k]->id >= 0) F->uses[x->in[k]->id]--; /* a new node is never removed */
  }
  int cap = n + 2 * n; /* at most two new nodes per old one */
  tg_node **nodes = tg_alloc(F->ctx->arena, sizeof *nodes * (size_t)cap);
  int out = 0;
  for (int i = 0; i < n; i++) {
    if (F->attn[i]) nodes[out++] = F->lse[i], nodes[out++] = F->attn[i];
    if (!dead[i]) nodes[out++] = g->nodes[i];
  }
  for (int i = 0; i < out; i++) nodes[i]->id = i;
  g->nodes = nodes;
  g->n_nodes = out;
  g->cap_nodes = cap;
}

/* The first parameter upstream of n (depth-first, a few steps): names the
 * layer an attention belongs to in the report. */
static const char *nearest_param(const tg_node *n, int depth) {
  if (n->op == TG_OP_param) return n->name;
  if (depth == 0) return NULL;
  for (int k = n->nin - 1; k >= 0; k--) {
    const char *p = nearest_param(n->in[k], depth - 1);
    if (p) return p;
  }
  return NULL;
}

static void record_match(const fa *F, const tg_node *pv, const match *m) {
  char t[TG_TYPE_STR_MAX];
  tg_finding *x = tg_find(F->findings, "flash_attn", "matched", pv->id, pv->loc, NULL);
  tg_finding_text(F->findings, x, "q_type", tg_type_str(&m->q->type, t, sizeof t));
  tg_finding_num(F->findings, x, "scale", m->scale);
  tg_finding_text(F->findings, x, "q_from", nearest_param(m->q, 8));
}

void tg_flash_attn(tg_ctx *ctx, tg_graph *g, tg_findings *findings) {
  int n = g->n_nodes;
  fa F = {ctx, g, findings, NULL, NULL, NULL, NULL};
  F.uses = tg_alloc(ctx->arena, sizeof *F.uses * ((size_t)n + 1));
  F.candidate = tg_alloc(ctx->arena, (size_t)n + 1);
  F.lse = tg_alloc(ctx->arena, sizeof *F.lse * ((size_t)n + 1));
  F.attn = tg_alloc(ctx->arena, sizeof *F.attn * ((size_t)n + 1));
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++) F.uses[g->nodes[i]->in[k]->id]++;
  for (int i = 0; i < g->n_outputs; i++) F.uses[g->outputs[i].node->id]++;
  int matched = 0;
  for (int i = 0; i < n; i++) {
    tg_node *pv = g->nodes[i];
    if (pv->phase != TG_PHASE_FORWARD) continue; /* the model as written only */
    match m = {0};
    char why[300];
    if (match_attention(&F, pv, &m, why, sizeof why)) {
      if (findings) record_match(&F, pv, &m);
      replace(&F, pv, &m);
      matched++;
    } else if (why[0]) {
      tg_find(findings, "flash_attn", "not_matched", pv->id, pv->loc, why);
    }
  }
  if (matched) rebuild(&F);
  tg_finding_num(findings, tg_find(findings, "flash_attn", "summary", -1, (tg_loc){0}, NULL), "replaced", matched);
}
