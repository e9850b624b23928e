/* dot.c: writes a graph for Graphviz (`tgc --emit dot | dot -Tsvg`).
 *
 * A picture is the quickest way to see what the frontend or a pass made of
 * a model, so node shapes and fills say at a glance what each node is:
 * parameters are ellipses, inputs parallelograms, constants small plain
 * text, matmuls stand out in red, and elementwise, reduction and movement
 * ops each have their own fill.  Output is deterministic (graph order, no
 * pointers) so two dumps can be diffed. */
#include "ir.h"

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

static void put_node(FILE *out, const tg_node *n, int k) {
  char ts[TG_TYPE_STR_MAX], num[40];
  fprintf(out, "  n%d [label=\"%s", k, tg_ops[n->op].name);
  if (n->op == TG_OP_const) fprintf(out, " %s", tg_fmt_double(n->value, num, sizeof num));
  if (n->name) {
    fputs("\\n", out);
    put_escaped(out, n->name);
  }
  fputs("\\n", out);
  if (n->type.rank >= 0 && n->type.rank <= TG_MAX_RANK)
    put_escaped(out, tg_type_str(&n->type, ts, sizeof ts));
  fprintf(out, "\", %s];\n", node_style(n));
}

void tg_print_dot(FILE *out, const tg_graph *g) {
  fputs(
      "digraph tg {\n"
      "  rankdir=TB;\n"
      "  node [fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [color=\"#555555\"];\n",
      out);
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (n && (unsigned)n->op < TG_NOPS) put_node(out, n, k);
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (!n || (unsigned)n->op >= TG_NOPS) continue;
    for (int i = 0; i < n->nin; i++) {
      int from = node_pos(g, n->in[i]);
      if (from >= 0) fprintf(out, "  n%d -> n%d;\n", from, k);
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
}
