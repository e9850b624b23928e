/* dot.c: writes a graph for Graphviz (`tgc --emit dot | dot -Tsvg`).
 *
 * A picture is the quickest way to see what the frontend or a pass made of
 * a model, so node shapes and fills say at a glance what each node is:
 * parameters are ellipses, inputs parallelograms, matmuls stand out in red,
 * and elementwise, reduction and movement ops each have their own fill.
 * A fused graph (`--grad`, or after the fuse pass) draws each kernel as a
 * cluster, labelled as the fusion report and the profile name it.
 * Constants are not nodes: a reader lists its constant inputs in its label
 * ("mul 0.5"), which takes a GPT-2 layer's 120 constants and their edges
 * out of the layout.  Output is deterministic (graph order, no pointers)
 * so two dumps can be diffed.
 *
 * Layout time.  dot's crossing minimisation grows quickly with the graph:
 * one GPT-2 layer of the training graph (700 nodes, 1,000 edges) took over
 * two minutes with the defaults.  A graph of more than LARGE nodes gets
 * limits on those iterations (mclimit, nslimit, searchsize) and straight
 * edges, which lay it out in a few seconds, a little less tidily. */
#include "ir.h"

#include <stdlib.h>

/* Shape and style attributes for one node, by what it is. */
static const char *node_style(const tg_node *n) {
  switch (n->op) {
  case TG_OP_param: return "shape=ellipse, style=filled, fillcolor=\"#fff2cc\"";
  case TG_OP_input: return "shape=parallelogram, style=filled, fillcolor=\"#dae8fc\"";
  case TG_OP_const: return "shape=plaintext, fontsize=8";
  default: break;
  }
  switch (tg_ops[n->op].kind) {
  case TG_KIND_LEAF: return "shape=box, style=filled, fillcolor=\"#eeeeee\"";
  case TG_KIND_ELEMENTWISE: return "shape=box, style=\"rounded,filled\", fillcolor=\"#d5e8d4\"";
  case TG_KIND_REDUCTION: return "shape=invtrapezium, style=filled, fillcolor=\"#e1d5e7\"";
  case TG_KIND_MOVEMENT: return "shape=box, style=filled, fillcolor=\"#ffe6cc\"";
  case TG_KIND_MATMUL: return "shape=box, style=\"filled,bold\", fillcolor=\"#f8cecc\"";
  default: return "shape=box, style=dashed";
  }
}

/* Text inside a dot "..." string: quotes and backslashes escaped (dot reads
 * "\n" and friends as label escapes), control bytes dropped. */
static void put_escaped(FILE *out, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p >= 0x20 && *p != 0x7f)
      fputc(*p, out);
    else
      fputc('?', out);
  }
}

static int node_pos(const tg_graph *g, const tg_node *n) {
  if (n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n) return n->id;
  for (int i = 0; n && i < g->n_nodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

enum { LARGE = 300 };

static bool is_const(const tg_node *n) { return n && n->op == TG_OP_const; }

static void put_node(FILE *out, const tg_node *n, int k, const char *indent) {
  char ts[TG_TYPE_STR_MAX], num[40];
  fprintf(out, "%sn%d [label=\"%s", indent, k, tg_ops[n->op].name);
  for (int i = 0; i < n->nin; i++) /* its constant inputs, in its label */
    if (is_const(n->in[i])) fprintf(out, " %s", tg_fmt_double(n->in[i]->value, num, sizeof num));
  if (n->name) {
    fputs("\\n", out);
    put_escaped(out, n->name);
  }
  fputs("\\n", out);
  if (n->type.rank >= 0 && n->type.rank <= TG_MAX_RANK)
    put_escaped(out, tg_type_str(&n->type, ts, sizeof ts));
  fprintf(out, "\", %s];\n", node_style(n));
}

/* Whether node n is drawn: every node but a constant some node reads (an
 * unread or output constant keeps its node). */
static bool drawn(const tg_graph *g, int k, const bool *read) {
  const tg_node *n = g->nodes[k];
  return n && (unsigned)n->op < TG_NOPS && (!is_const(n) || !read[k]);
}

void tg_print_dot(FILE *out, const tg_graph *g) {
  bool large = g->n_nodes > LARGE;
  fprintf(out,
          "digraph tg {\n"
          "  rankdir=TB;\n"
          "%s"
          "  node [fontname=\"Helvetica\", fontsize=10];\n"
          "  edge [color=\"#555555\"];\n",
          large ? "  mclimit=0.05; nslimit=1; nslimit1=1; searchsize=10; splines=false;\n" : "");
  bool *read = calloc((size_t)g->n_nodes + 1, sizeof *read);
  if (!read) return;
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    for (int i = 0; n && (unsigned)n->op < TG_NOPS && i < n->nin; i++) {
      int from = node_pos(g, n->in[i]);
      if (from >= 0) read[from] = true;
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    int from = node_pos(g, g->outputs[i].node);
    if (from >= 0) read[from] = false; /* an output constant is drawn */
  }
  /* each kernel's nodes in a cluster, then the nodes of none */
  for (int kk = 0; kk < g->n_kernels; kk++) {
    const tg_kernel *K = &g->kernels[kk];
    fprintf(out, "  subgraph cluster_k%d {\n    label=\"k%d %s ", kk, kk, tg_kernel_kind_name(K->kind));
    put_escaped(out, K->name ? K->name : "");
    fputs("\";\n    style=\"rounded,dashed\"; color=\"#888888\"; fontsize=9;\n", out);
    for (int k = 0; k < g->n_nodes; k++) {
      const tg_node *n = g->nodes[k];
      if (drawn(g, k, read) && n->kernel == kk) put_node(out, n, k, "    ");
    }
    fputs("  }\n", out);
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (drawn(g, k, read) && (n->kernel < 0 || n->kernel >= g->n_kernels)) put_node(out, n, k, "  ");
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (!n || (unsigned)n->op >= TG_NOPS) continue;
    for (int i = 0; i < n->nin; i++) {
      int from = node_pos(g, n->in[i]);
      if (from >= 0 && drawn(g, from, read)) fprintf(out, "  n%d -> n%d;\n", from, k);
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    fprintf(out, "  out%d [label=\"", i);
    put_escaped(out, g->outputs[i].name ? g->outputs[i].name : "");
    fputs("\", shape=doubleoctagon, style=filled, fillcolor=\"#ffffff\"];\n", out);
    int from = node_pos(g, g->outputs[i].node);
    if (from >= 0) fprintf(out, "  n%d -> out%d;\n", from, i);
  }
  fputs("}\n", out);
  free(read);
}
