/* verify.c: checks a graph's structural and type invariants.
 *
 * Passes rewrite the graph in place; running the verifier after each one
 * catches a broken rewrite at the pass that made it, instead of as a wrong
 * gradient or a crash in code generation much later.  Types are checked by
 * re-running tg_infer_type, the same rule the frontend and the reader use.
 * It reports the first problem and returns false rather than bailing, so a
 * caller can add context (which pass ran last) before giving up. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* Reports a problem with node k; always returns false. */
static bool bad(tg_ctx *ctx, const tg_node *n, int k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool bad(tg_ctx *ctx, const tg_node *n, int k, const char *fmt, ...) {
  char msg[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *op = n && (unsigned)n->op < TG_NOPS ? tg_ops[n->op].name : "?";
  tg_report(ctx, "error", n ? n->loc : (tg_loc){0}, "verify: %%%d (%s): %s", k, op, msg);
  return false;
}

/* Is n a node of g standing at the position its id claims? */
static bool in_graph(const tg_graph *g, const tg_node *n) {
  return n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n;
}

static bool verify_inputs(tg_ctx *ctx, const tg_graph *g, const tg_node *n, int k) {
  const tg_op_info *info = &tg_ops[n->op];
  if (info->arity >= 0 && n->nin != info->arity)
    return bad(ctx, n, k, "%s takes %d input%s, got %d", info->name, info->arity,
               info->arity == 1 ? "" : "s", n->nin);
  if (info->arity < 0 && n->nin < 1)
    return bad(ctx, n, k, "%s needs at least one input", info->name);
  if (n->nin > 0 && !n->in) return bad(ctx, n, k, "its input array is missing");
  for (int i = 0; i < n->nin; i++) {
    const tg_node *in = n->in[i];
    if (!in) return bad(ctx, n, k, "input %d is missing", i);
    if (!in_graph(g, in)) return bad(ctx, n, k, "input %d is not a node of this graph", i);
    if (in->id >= k)
      return bad(ctx, n, k, "input %d is %%%d, which does not come before it", i, in->id);
  }
  return true;
}

static bool verify_type(tg_ctx *ctx, const tg_node *n, int k) {
  if (n->type.rank < 0 || n->type.rank > TG_MAX_RANK)
    return bad(ctx, n, k, "its type has rank %d, outside 0..%d", n->type.rank, TG_MAX_RANK);
  if ((unsigned)n->type.dtype >= TG_NDTYPES)
    return bad(ctx, n, k, "its type has an unknown dtype (%d)", (int)n->type.dtype);
  if (n->op == TG_OP_param && (unsigned)n->init.kind > TG_INIT_NORMAL)
    return bad(ctx, n, k, "unknown initialiser kind %d", (int)n->init.kind);
  char why[600], sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
  tg_type t;
  if (!tg_infer_type(n, &t, why, sizeof why)) return bad(ctx, n, k, "%s", why);
  if (!tg_type_equal(&t, &n->type))
    return bad(ctx, n, k, "its type says %s but %s of its inputs gives %s",
               tg_type_str(&n->type, sa, sizeof sa), tg_ops[n->op].name,
               tg_type_str(&t, sb, sizeof sb));
  return true;
}

static bool verify_node(tg_ctx *ctx, const tg_graph *g, int k) {
  const tg_node *n = g->nodes[k];
  if (!n) return bad(ctx, n, k, "the node is missing");
  if ((unsigned)n->op >= TG_NOPS) return bad(ctx, n, k, "unknown op %d", (int)n->op);
  if (!verify_inputs(ctx, g, n, k) || !verify_type(ctx, n, k)) return false;
  if (n->id != k) return bad(ctx, n, k, "its id is %d but it stands at position %d", n->id, k);
  return true;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names that others look things up by must be there and unique: inputs,
 * params and states (weights files and batches are matched by name), and
 * outputs.  Sorting finds duplicates in n log n even in huge graphs. */
static bool unique_names(tg_ctx *ctx, const tg_graph *g) {
  int n = 0;
  const char **names = tg_alloc(ctx->arena, sizeof *names * (size_t)(g->n_nodes + g->n_outputs + 1));
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *nd = g->nodes[k];
    if (nd->op != TG_OP_input && nd->op != TG_OP_param && nd->op != TG_OP_state) continue;
    if (!nd->name || !*nd->name) {
      tg_report(ctx, "error", nd->loc, "verify: %%%d (%s) has no name", k, tg_ops[nd->op].name);
      return false;
    }
    names[n++] = nd->name;
  }
  qsort(names, (size_t)n, sizeof *names, cmp_name);
  for (int i = 1; i < n; i++)
    if (!strcmp(names[i - 1], names[i])) {
      tg_report(ctx, "error", (tg_loc){g->source, 1, 1}, "verify: two leaves are named '%s'",
                names[i]);
      return false;
    }
  n = 0;
  for (int i = 0; i < g->n_outputs; i++) names[n++] = g->outputs[i].name ? g->outputs[i].name : "";
  qsort(names, (size_t)n, sizeof *names, cmp_name);
  for (int i = 1; i < n; i++)
    if (!strcmp(names[i - 1], names[i])) {
      tg_report(ctx, "error", (tg_loc){g->source, 1, 1}, "verify: two outputs are named '%s'",
                names[i]);
      return false;
    }
  return true;
}

/* After the fuse pass: leaves and views are in no kernel, every other
 * node is in a kernel of the table, and the kernels in index order are a
 * valid schedule: what a node reads from outside its kernel (through
 * views) is a leaf or a value of an earlier kernel. */
static bool verify_kernels(tg_ctx *ctx, const tg_graph *g) {
  if (g->n_kernels == 0) {
    for (int k = 0; k < g->n_nodes; k++)
      if (g->nodes[k]->kernel != -1) return bad(ctx, g->nodes[k], k, "it names kernel k%d but the graph has no kernels", g->nodes[k]->kernel);
    return true;
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    bool loose = tg_ops[n->op].kind == TG_KIND_LEAF || tg_is_view(n);
    if (loose && n->kernel != -1)
      return bad(ctx, n, k, "a leaf or a view is in kernel k%d; they are in none", n->kernel);
    if (loose) continue;
    if (n->kernel < 0 || n->kernel >= g->n_kernels)
      return bad(ctx, n, k, "it is in no kernel (k%d) though the graph is fused", n->kernel);
    for (int i = 0; i < n->nin; i++) {
      const tg_node *b = tg_kernel_base(n->in[i]);
      if (b->kernel > n->kernel)
        return bad(ctx, n, k, "it is in kernel k%d but reads %%%d of the later kernel k%d", n->kernel,
                   b->id, b->kernel);
    }
  }
  return true;
}

bool tg_verify(tg_ctx *ctx, const tg_graph *g) {
  if (g->n_nodes < 0 || (g->n_nodes > 0 && !g->nodes)) {
    tg_report(ctx, "error", (tg_loc){0}, "verify: the graph's node array is missing");
    return false;
  }
  for (int k = 0; k < g->n_nodes; k++)
    if (!verify_node(ctx, g, k)) return false;
  for (int i = 0; i < g->n_outputs; i++) {
    const tg_output *o = &g->outputs[i];
    const char *name = o->name ? o->name : "?";
    if (!o->node || !in_graph(g, o->node)) {
      tg_report(ctx, "error", (tg_loc){0}, "verify: output '%s' refers to a node not in the graph",
                name);
      return false;
    }
  }
  return unique_names(ctx, g) && verify_kernels(ctx, g);
}
