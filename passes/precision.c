/* precision.c: the mixed-precision policy, chosen at compile time.
 *
 * With bf16, the forward graph (before autodiff, so that the backward
 * follows from it) gets explicit casts so that what dominates a GPT's
 * bytes and FLOPs is bf16, and what decides its accuracy stays f32, as
 * PyTorch's autocast and llm.c do:
 *
 *   - matmuls take bf16 operands and give a bf16 result (cuBLASLt and the
 *     CPU accumulate in f32): the activations the backward reads (a
 *     matmul's input, the MLP's hidden layer, q, k and v) are stored bf16;
 *   - flash attention takes bf16 q, k, v; its row statistics stay f32;
 *   - reductions read and give f32: layernorm's mean and variance,
 *     softmax and cross-entropy, the loss;
 *   - an elementwise op is bf16 only when every operand is: bf16 values,
 *     parameters (read as their bf16 copies) and constants that bf16
 *     holds exactly; anything f32 (the residual stream, a statistic, a
 *     constant like 0.044715) makes it f32, widening its bf16 operands;
 *   - parameters stay f32 (the master weights the optimizer updates, with
 *     f32 moments); a parameter read by a bf16 op is read through one
 *     cast, which tg_hoist_param_copies turns into a state leaf written
 *     once per optimizer step (adamw.c, and the training loop's separate
 *     optimizer graph);
 *   - movement ops keep their input's dtype; a gather gives its table's.
 *
 * Autodiff then gives each value's gradient the value's dtype (the
 * derivative of a cast is the cast back), so a parameter's gradient is
 * f32, accumulated and all-reduced in f32.  The rules are the table
 * below; `tgc --report precision` prints each value's dtype and the rule
 * that chose it. */
#include <math.h>
#include <string.h>

#include "half.h"
#include "passes.h"

typedef enum rule {
  R_INPUT, R_MASTER, R_COPY, R_MATMUL, R_ATTENTION, R_REDUCE, R_WIDE, R_NARROW, R_WIDEN, R_MOVE, R_EMBED,
  R_CONST, R_INDEX, R_CAST, N_RULES
} rule;

static const struct {
  const char *name, *why;
} rules[N_RULES] = {
    [R_INPUT] = {"input", "inputs keep their declared dtype"},
    [R_MASTER] = {"master", "parameters stay f32: the master weights the optimizer updates"},
    [R_COPY] = {"weight copy", "a parameter that a bf16 op reads, as bf16: made once per optimizer step"},
    [R_MATMUL] = {"matmul", "bf16 operands and result, f32 accumulation: the saved activation is bf16"},
    [R_ATTENTION] = {"attention", "bf16 q, k, v and output; the row statistics (lse) f32"},
    [R_REDUCE] = {"reduction", "sums and maxima read f32 and give f32: normalisation, softmax, cross-entropy, the loss"},
    [R_WIDE] = {"elementwise f32", "an f32 operand (the residual stream, a statistic, an inexact constant) makes it f32"},
    [R_NARROW] = {"elementwise bf16", "every operand bf16 (or a weight copy, or a constant bf16 holds): stored bf16"},
    [R_WIDEN] = {"widen", "a bf16 value an f32 op reads"},
    [R_MOVE] = {"movement", "reshapes, transposes, slices and concatenations keep their input's dtype"},
    [R_EMBED] = {"embedding", "the embedding (gathers and their sum) in f32, then cast to bf16: the residual stream is bf16"},
    [R_CONST] = {"constant", "constants and indices as written"},
    [R_INDEX] = {"index", "integer and boolean values (comparisons, masks) as computed"},
    [R_CAST] = {"cast", "a cast the model writes"},
};

/* The graph rebuilt in order: each node after the casts it needs.  The
 * per-node tables are indexed by the new ids (a node's inputs are always
 * pushed before it, so theirs are final when it is rewritten). */
typedef struct rewriter {
  tg_ctx *ctx;
  tg_graph *g;
  tg_node **out;        /* the new node order */
  rule *rule_of;        /* per new node: the rule that chose its dtype */
  tg_node **twin;       /* per new node: a param's bf16 copy, a const's bf16 twin */
  tg_node **wide;       /* per new node: its f32 widening, made once for every reader */
  tg_node **subst;      /* per new node: an embedding's bf16 cast, made once for every reader */
  bool *emb;            /* per new node: part of the embedding (f32 rows from a table, and sums of them) */
  int n, cap;
} rewriter;

static void *grown(tg_arena *a, const void *old, int n, int cap, size_t elem) {
  void *p = tg_alloc(a, elem * (size_t)cap);
  if (n) memcpy(p, old, elem * (size_t)n);
  return p;
}

static tg_node *push(rewriter *w, tg_node *n, rule r) {
  if (w->n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 256;
    w->out = grown(w->g->arena, w->out, w->n, cap, sizeof *w->out);
    w->rule_of = grown(w->g->arena, w->rule_of, w->n, cap, sizeof *w->rule_of);
    w->twin = grown(w->g->arena, w->twin, w->n, cap, sizeof *w->twin);
    w->wide = grown(w->g->arena, w->wide, w->n, cap, sizeof *w->wide);
    w->subst = grown(w->g->arena, w->subst, w->n, cap, sizeof *w->subst);
    w->emb = grown(w->g->arena, w->emb, w->n, cap, sizeof *w->emb);
    w->cap = cap;
  }
  n->id = w->n;
  w->rule_of[w->n] = r;
  w->twin[w->n] = NULL;
  w->wide[w->n] = NULL;
  w->subst[w->n] = NULL;
  w->emb[w->n] = false;
  w->out[w->n++] = n;
  return n;
}

/* Sets n's type from its inputs (n's given type kept for leaves and casts;
 * a reshape keeps its shape and takes its input's dtype). */
static void retype(rewriter *w, tg_node *n) {
  if (n->op == TG_OP_reshape || n->op == TG_OP_expand) n->type.dtype = n->in[0]->type.dtype;
  char why[600];
  tg_type t;
  if (!tg_infer_type(n, &t, why, sizeof why)) tg_error(w->ctx, n->loc, "precision: %s", why);
  n->type = t;
}

static tg_node *cast_to(rewriter *w, tg_node *x, tg_dtype dt, rule r) {
  tg_node *c = tg_node_new(w->g, TG_OP_cast, x->loc);
  c->phase = x->phase;
  c->type = x->type;
  c->type.dtype = dt;
  tg_node_set_inputs(w->g, c, 1, &x);
  retype(w, c);
  return push(w, c, r);
}

/* What a bf16 op reads for input x (already rewritten): a parameter's
 * copy (one per parameter), a constant's exact bf16 twin (one each), or a
 * cast. */
static tg_node *as_bf16(rewriter *w, tg_node *x, rule r) {
  if (x->type.dtype == TG_BF16 || !tg_dtype_is_float(x->type.dtype)) return x;
  int id = x->id;
  if (x->op == TG_OP_param) {
    if (!w->twin[id]) {
      tg_node *c = cast_to(w, x, TG_BF16, R_COPY);
      c->name = tg_sprintf(w->g->arena, "%s%s", TG_BF16_COPY_PREFIX, x->name);
      w->twin[id] = c;
    }
    return w->twin[id];
  }
  if (x->op == TG_OP_const) {
    if (!w->twin[id]) {
      tg_node *c = tg_node_new(w->g, TG_OP_const, x->loc);
      c->phase = x->phase;
      c->value = x->value;
      c->type = x->type;
      c->type.dtype = TG_BF16;
      retype(w, c);
      tg_node *t = push(w, c, R_CONST); /* (push may grow w->twin) */
      w->twin[id] = t;
    }
    return w->twin[id];
  }
  if (tg_is_view(x) && x->nin == 1 && (x->in[0]->op == TG_OP_param || tg_is_view(x->in[0]))) {
    /* a view of a parameter (the tied head's transpose(wte)): the same
     * view of its copy, so the copy stays one cast of the parameter */
    if (!w->twin[id]) {
      tg_node *in = as_bf16(w, x->in[0], r);
      tg_node *v = tg_node_new(w->g, x->op, x->loc);
      tg_node saved = *v;
      *v = *x;
      v->id = saved.id;
      v->in = NULL;
      v->nin = 0;
      v->name = NULL;
      tg_node_set_inputs(w->g, v, 1, &in);
      v->type.dtype = TG_BF16;
      retype(w, v);
      tg_node *t = push(w, v, R_MOVE);
      w->twin[id] = t;
    }
    return w->twin[id];
  }
  return cast_to(w, x, TG_BF16, r);
}

/* x (rewritten, bf16) as f32, one cast however many read it. */
static tg_node *widened(rewriter *w, tg_node *x) {
  if (!w->wide[x->id]) {
    tg_node *c = cast_to(w, x, TG_F32, R_WIDEN); /* (may grow w->wide) */
    w->wide[x->id] = c;
  }
  return w->wide[x->id];
}

static bool bf16_exact(double v) { return isnan(v) || (double)tg_bf16_to_f32(tg_f32_to_bf16((float)v)) == v; }

/* Whether an elementwise op over these inputs can stay bf16: some input
 * is bf16 and every float one is bf16, a parameter or a constant bf16
 * holds exactly. */
static bool narrow(const tg_node *const *in, int nin) {
  bool some = false;
  for (int k = 0; k < nin; k++) {
    const tg_node *x = in[k];
    if (!tg_dtype_is_float(x->type.dtype)) continue;
    if (x->type.dtype == TG_BF16) some = true;
    else if (x->op == TG_OP_param) continue;
    else if (x->op == TG_OP_const && bf16_exact(x->value)) continue;
    else return false;
  }
  return some;
}

/* The embedding x (complete) as bf16: the residual stream. */
static tg_node *embedded(rewriter *w, tg_node *x) {
  if (!w->subst[x->id]) {
    tg_node *c = cast_to(w, x, TG_BF16, R_EMBED); /* (may grow w->subst) */
    w->subst[x->id] = c;
  }
  return w->subst[x->id];
}

static void rewrite(rewriter *w, tg_node *n) {
  int nin = n->nin;
  tg_node *in[8] = {0};
  for (int k = 0; k < nin && k < 8; k++) in[k] = n->in[k];
  rule r;
  const tg_op_info *info = &tg_ops[n->op];
  /* The embedding stays f32 while its rows are gathered, moved and added
   * (token and position tables: the broadcast position rows' gradient is
   * then summed over the batch in f32); whatever else reads it reads it
   * as bf16. */
  bool any_emb = false, all_emb = true;
  for (int k = 0; k < nin; k++) {
    if (w->emb[in[k]->id]) any_emb = true;
    else if (tg_dtype_is_float(in[k]->type.dtype) && in[k]->op != TG_OP_const) all_emb = false;
  }
  bool extends = any_emb && all_emb && n->op != TG_OP_cast &&
                 (info->kind == TG_KIND_ELEMENTWISE || tg_is_view(n) || n->op == TG_OP_concat);
  if (extends) {
    for (int k = 0; k < nin; k++) n->in[k] = in[k];
    retype(w, n);
    push(w, n, R_EMBED);
    w->emb[n->id] = true;
    return;
  }
  for (int k = 0; k < nin; k++)
    if (w->emb[in[k]->id]) in[k] = embedded(w, in[k]);
  if (info->kind == TG_KIND_LEAF) {
    r = n->op == TG_OP_param ? R_MASTER : n->op == TG_OP_input || n->op == TG_OP_state ? R_INPUT : R_CONST;
  } else if (n->op == TG_OP_matmul) {
    for (int k = 0; k < nin; k++) in[k] = as_bf16(w, in[k], R_MATMUL);
    r = R_MATMUL;
  } else if (tg_op_is_flash_attention(n->op)) {
    for (int k = 0; k < nin; k++)
      if (!(n->op == TG_OP_flash_attention && k == 3)) in[k] = as_bf16(w, in[k], R_ATTENTION);
    r = R_ATTENTION;
  } else if (info->kind == TG_KIND_REDUCTION || tg_op_is_collective(n->op)) {
    /* collectives sum across ranks: in f32, as reductions */
    if (in[0]->type.dtype == TG_BF16) in[0] = widened(w, in[0]);
    r = R_REDUCE;
  } else if (n->op == TG_OP_cast) {
    r = R_CAST;
  } else if (info->kind == TG_KIND_ELEMENTWISE || n->op == TG_OP_concat) {
    /* where's condition is no operand of the arithmetic */
    int from = n->op == TG_OP_where ? 1 : 0;
    if (narrow((const tg_node *const *)(in + from), nin - from)) {
      for (int k = from; k < nin; k++)
        if (tg_dtype_is_float(in[k]->type.dtype)) in[k] = as_bf16(w, in[k], R_NARROW);
      r = info->kind == TG_KIND_ELEMENTWISE ? R_NARROW : R_MOVE;
    } else {
      for (int k = from; k < nin; k++)
        if (in[k]->type.dtype == TG_BF16) in[k] = widened(w, in[k]);
      r = info->kind == TG_KIND_ELEMENTWISE ? R_WIDE : R_MOVE;
    }
  } else if (n->op == TG_OP_gather) {
    r = R_EMBED;
  } else {
    r = R_MOVE; /* reshape, transpose, slice, expand, pad */
  }
  for (int k = 0; k < nin; k++) n->in[k] = in[k];
  if (info->kind != TG_KIND_LEAF) retype(w, n);
  if (r != R_MOVE && r != R_CONST && r != R_INPUT && !tg_dtype_is_float(n->type.dtype)) r = R_INDEX;
  push(w, n, r);
  if (r == R_EMBED && n->type.dtype == TG_F32) w->emb[n->id] = true;
}

static bool has_backward_or_bf16(const tg_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->phase != TG_PHASE_FORWARD || (n->op == TG_OP_matmul && n->type.dtype == TG_BF16)) return true;
  }
  return false;
}

void tg_apply_precision(tg_ctx *ctx, tg_graph *g, tg_precision_policy policy, tg_findings *findings) {
  if (policy == TG_PRECISION_F32 || has_backward_or_bf16(g)) {
    tg_finding *x = tg_find(findings, "precision", "unchanged", -1, (tg_loc){0}, "every value keeps its declared dtype");
    tg_finding_text(findings, x, "policy", policy == TG_PRECISION_F32 ? "f32" : "already applied");
    return;
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->nin > 8)
      tg_error(ctx, g->nodes[i]->loc, "precision: an op of %d inputs (at most 8)", g->nodes[i]->nin);
  int old_n = g->n_nodes;
  rewriter w = {ctx, g, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0};
  tg_node **old = tg_alloc(g->arena, sizeof *old * (size_t)(old_n + 1));
  memcpy(old, g->nodes, sizeof *old * (size_t)old_n);
  /* nodes are rewritten in place, in order: the outputs keep pointing at
   * them (the loss stays f32; a logits output is as the head made it) */
  for (int i = 0; i < old_n; i++) rewrite(&w, old[i]);
  g->nodes = w.out;
  g->n_nodes = g->cap_nodes = w.n;
  if (findings) {
    int count[N_RULES] = {0};
    for (int i = 0; i < g->n_nodes; i++) {
      const tg_node *n = g->nodes[i];
      char t[TG_TYPE_STR_MAX];
      count[w.rule_of[i]]++;
      tg_finding *x = tg_find(findings, "precision", "value", n->id, n->loc, NULL);
      tg_finding_text(findings, x, "op", tg_ops[n->op].name);
      tg_finding_text(findings, x, "type", tg_type_str(&n->type, t, sizeof t));
      tg_finding_text(findings, x, "rule", rules[w.rule_of[i]].name);
    }
    for (int r = 0; r < N_RULES; r++) {
      tg_finding *x = tg_find(findings, "precision", "rule", -1, (tg_loc){0}, rules[r].why);
      tg_finding_text(findings, x, "rule", rules[r].name);
      tg_finding_num(findings, x, "values", count[r]);
    }
  }
}

bool tg_precision_parse(const char *s, tg_precision_policy *out) {
  if (!strcmp(s, "f32")) *out = TG_PRECISION_F32;
  else if (!strcmp(s, "bf16")) *out = TG_PRECISION_BF16;
  else return false;
  return true;
}

const char *tg_precision_name(tg_precision_policy p) { return p == TG_PRECISION_BF16 ? "bf16" : "f32"; }

/* ---- the backward's reads --------------------------------------------------- */

int tg_narrow_saved(tg_ctx *ctx, tg_graph *g) {
  int n = g->n_nodes, made = 0;
  tg_node **clone = tg_alloc(g->arena, sizeof *clone * (size_t)(n + 1));
  tg_node **out = tg_alloc(g->arena, sizeof *out * (size_t)(2 * n + 1));
  int k = 0;
  for (int i = 0; i < n; i++) {
    tg_node *r = g->nodes[i];
    if (r->phase != TG_PHASE_FORWARD)
      for (int j = 0; j < r->nin; j++) {
        tg_node *w = r->in[j];
        if (w->phase != TG_PHASE_FORWARD || !tg_is_widening(w)) continue;
        if (!clone[w->id]) {
          tg_node *c = tg_node_new(g, TG_OP_cast, w->loc);
          c->phase = r->phase;
          c->type = w->type;
          tg_node_set_inputs(g, c, 1, &w->in[0]);
          out[k++] = clone[w->id] = c;
          made++;
        }
        r->in[j] = clone[w->id];
      }
    out[k++] = r;
  }
  for (int i = 0; i < k; i++) out[i]->id = i;
  g->nodes = out;
  g->n_nodes = g->cap_nodes = k;
  if (!tg_verify(ctx, g)) tg_error(ctx, (tg_loc){g->source, 1, 1}, "internal: the graph is broken after narrow_saved");
  return made;
}

/* ---- parameter copies ---------------------------------------------------------- */

tg_param_copy *tg_hoist_param_copies(tg_ctx *ctx, tg_graph *g, int *n_copies) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *c = g->nodes[i];
    n += c->op == TG_OP_cast && c->in[0]->op == TG_OP_param && c->phase == TG_PHASE_FORWARD;
  }
  tg_param_copy *copies = tg_alloc(g->arena, sizeof *copies * (size_t)(n + 1));
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *c = g->nodes[i];
    if (!(c->op == TG_OP_cast && c->in[0]->op == TG_OP_param && c->phase == TG_PHASE_FORWARD)) continue;
    /* the cast becomes a state leaf in place: same id, same users */
    tg_node *p = c->in[0];
    c->op = TG_OP_state;
    c->nin = 0;
    c->in = NULL;
    c->init = (tg_init){.kind = TG_INIT_ZEROS, .std = 0};
    c->name = tg_sprintf(g->arena, "%s%s", TG_BF16_COPY_PREFIX, p->name);
    copies[k++] = (tg_param_copy){p, c};
  }
  if (!tg_verify(ctx, g)) tg_error(ctx, (tg_loc){g->source, 1, 1}, "internal: the graph is broken after hoisting copies");
  if (n_copies) *n_copies = k;
  return copies;
}

tg_node *tg_param_copy_of(const tg_graph *g, const tg_node *param) {
  size_t np = strlen(TG_BF16_COPY_PREFIX);
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *s = g->nodes[i];
    if (s->op == TG_OP_state && s->name && !strncmp(s->name, TG_BF16_COPY_PREFIX, np) && !strcmp(s->name + np, param->name))
      return s;
  }
  return NULL;
}
