/* gelu.c: finds GELU written from primitive ops and replaces it by one
 * gelu op.
 *
 * Why: written out, GELU's tanh form is eleven ops, and its derivative by
 * the chain rule a dozen more that read the forward's intermediates.  As
 * one op, its derivative is one op too (gelu_grad, written by autodiff),
 * and on a GPU both fold into the matmuls around them as cuBLASLt
 * epilogues (codegen/lower.c): GELU(x @ W + b) is one GEMM that also keeps
 * x @ W + b for the backward (GELU_AUX_BIAS), and dY @ Wᵀ · gelu'(x @ W + b)
 * is one GEMM too (DGELU): the backward never writes dY @ Wᵀ to memory to
 * read it back.
 *
 * What is matched (models/std.tg's gelu is the reference spelling):
 *   0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x * x * x)))
 * with any order of the operands of each + and *, the constants within
 * 1e-6 of their value, every x the same node, and the result of x's type.
 * Other spellings (x ** 3, erf's exact GELU) are left as they are: they
 * stay correct, only slower.
 *
 * The rewrite turns the pattern's root into gelu(x) in place (its users
 * and outputs keep pointing at it) and removes the pattern's nodes that
 * nothing else uses. */
#include <math.h>

#include "gelu.h"
#include "passes.h"

typedef struct gelu_pat {
  char kind; /* 'x' the variable, 'c' a constant, '*', '+', 't' tanh */
  double c;
  const struct gelu_pat *a, *b;
} gelu_pat;

typedef struct matcher {
  const tg_node *x;   /* the variable, once bound */
  tg_node *seen[24];  /* the pattern's nodes, to remove when unused */
  int n_seen;
} matcher;

static bool match(const gelu_pat *pt, tg_node *n, matcher *m) {
  switch (pt->kind) {
  case 'x':
    if (!m->x) m->x = n;
    return m->x == n;
  case 'c':
    if (n->op != TG_OP_const || fabs(n->value - pt->c) > 1e-6 * fabs(pt->c)) return false;
    break;
  case 't':
    if (n->op != TG_OP_tanh || !match(pt->a, n->in[0], m)) return false;
    break;
  default: {
    if (n->op != (pt->kind == '*' ? TG_OP_mul : TG_OP_add) || n->nin != 2) return false;
    matcher saved = *m;
    if (!(match(pt->a, n->in[0], m) && match(pt->b, n->in[1], m))) {
      *m = saved;
      if (!(match(pt->a, n->in[1], m) && match(pt->b, n->in[0], m))) {
        *m = saved;
        return false;
      }
    }
  }
  }
  if (m->n_seen < (int)(sizeof m->seen / sizeof m->seen[0])) m->seen[m->n_seen++] = n;
  return true;
}

/* The x of h = GELU(x) when h is GELU's root, else NULL; m->seen gets the
 * pattern's nodes. */
static const tg_node *gelu_input(tg_node *h, matcher *m) {
  static const gelu_pat X = {'x', 0, NULL, NULL}, half = {'c', 0.5, NULL, NULL}, one = {'c', 1, NULL, NULL},
                        k3 = {'c', TG_GELU_CUBIC, NULL, NULL}, s2pi = {'c', TG_GELU_SQRT_2_OVER_PI, NULL, NULL};
  static const gelu_pat kx = {'*', 0, &k3, &X}, kxx = {'*', 0, &kx, &X}, kxxx = {'*', 0, &kxx, &X};
  static const gelu_pat inner = {'+', 0, &X, &kxxx}, scaled = {'*', 0, &s2pi, &inner}, th = {'t', 0, &scaled, NULL};
  static const gelu_pat onep = {'+', 0, &one, &th}, hx = {'*', 0, &half, &X}, gelu = {'*', 0, &hx, &onep};
  *m = (matcher){0};
  return match(&gelu, h, m) ? m->x : NULL;
}

void tg_gelu(tg_ctx *ctx, tg_graph *g, tg_findings *findings) {
  int n = g->n_nodes;
  int *uses = tg_alloc(ctx->arena, sizeof *uses * ((size_t)n + 1));
  bool *candidate = tg_alloc(ctx->arena, (size_t)n + 1);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++) uses[g->nodes[i]->in[k]->id]++;
  for (int i = 0; i < g->n_outputs; i++) uses[g->outputs[i].node->id]++;
  int matched = 0;
  for (int i = 0; i < n; i++) {
    tg_node *h = g->nodes[i];
    matcher m;
    const tg_node *x;
    if (h->phase != TG_PHASE_FORWARD || h->op != TG_OP_mul || !(x = gelu_input(h, &m))) continue;
    if (!tg_type_equal(&x->type, &h->type)) continue;
    for (int s = 0; s < m.n_seen; s++)
      if (m.seen[s] != h) candidate[m.seen[s]->id] = true;
    for (int k = 0; k < h->nin; k++) uses[h->in[k]->id]--;
    uses[x->id]++;
    tg_node *in = (tg_node *)x;
    h->op = TG_OP_gelu;
    tg_node_set_inputs(g, h, 1, &in);
    matched++;
    tg_finding_num(findings, tg_find(findings, "gelu", "matched", h->id, h->loc, NULL), "input", x->id);
  }
  if (matched) {
    /* the pattern's nodes nobody uses any more; walking backwards sees a
     * node's inputs after the node */
    int out = 0;
    bool *dead = tg_alloc(ctx->arena, (size_t)n + 1);
    for (int i = n - 1; i >= 0; i--) {
      if (!candidate[i] || uses[i] > 0) continue;
      dead[i] = true;
      for (int k = 0; k < g->nodes[i]->nin; k++) uses[g->nodes[i]->in[k]->id]--;
    }
    for (int i = 0; i < n; i++)
      if (!dead[i]) g->nodes[out++] = g->nodes[i];
    for (int i = 0; i < out; i++) g->nodes[i]->id = i;
    g->n_nodes = out;
  }
  tg_finding_num(findings, tg_find(findings, "gelu", "summary", -1, (tg_loc){0}, NULL), "replaced", matched);
}
