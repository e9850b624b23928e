/* print.c: writes a graph in the IR text form.
 *
 * The text form is what tests compare, what `tgc --emit ir` shows and what
 * tg_read_ir (read.c) reads back; printing, reading and printing again must
 * give the same bytes, so every field is written in one canonical spelling:
 *
 *   # tg IR 1
 *   source "models/gpt2.tg"
 *   config n_layer = 12
 *   %0 = input : i32[B=8, T=1024] "idx" @ models/gpt2.tg:14:7
 *   %5 = sum %2 {axes=[2]} : f32[B=8, T=1024, 1] "m" @ models/std.tg:8:7
 *   output "loss" = %123
 *
 * After the fuse pass, "kernel k3 row \"NAME\"" lines follow the config and
 * each node in a kernel says " in k3" before its location.
 *
 * Nodes are numbered by their position in g->nodes, not by node->id, so the
 * text stays readable even for a graph whose ids a pass has left stale. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* Quoted string: '"' and '\' escaped, bytes outside printable ASCII as \xNN
 * so the text stays one line of plain ASCII whatever a name contains. */
static void print_quoted(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f)
      fprintf(out, "\\x%02x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

/* Position of n in g, or -1.  The id is the fast path; the scan covers a
 * graph whose ids are stale. */
static int node_pos(const tg_graph *g, const tg_node *n) {
  if (n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n) return n->id;
  for (int i = 0; n && i < g->n_nodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

static void print_ref(FILE *out, const tg_graph *g, const tg_node *n) {
  int k = node_pos(g, n);
  if (k >= 0)
    fprintf(out, "%%%d", k);
  else
    fputs("%?", out); /* not in the graph: unreadable on purpose */
}

/* tg_type_str into a buffer big enough for any symbol names, so long
 * names are never cut short (that would break the round trip). */
static void print_type(FILE *out, const tg_type *t) {
  if (t->rank < 0 || t->rank > TG_MAX_RANK) {
    fprintf(out, "%s[<rank %d>]", tg_dtype_name(t->dtype), t->rank);
    return;
  }
  size_t need = 16;
  for (int i = 0; i < t->rank; i++) need += 24 + (t->dim[i].sym ? strlen(t->dim[i].sym) + 1 : 0);
  char small[TG_TYPE_STR_MAX];
  char *buf = need <= sizeof small ? small : malloc(need);
  if (!buf) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  fputs(tg_type_str(t, buf, need), out);
  if (buf != small) free(buf);
}

static void print_list(FILE *out, const char *key, const int *v, int n) {
  fprintf(out, " {%s=[", key);
  for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", v[i]);
  fputs("]}", out);
}

/* The " {...}" part, for the ops whose tg_ops[op].attr needs one. */
static void print_attr(FILE *out, const tg_node *n) {
  char num[40];
  switch (tg_ops[n->op].attr) {
  case TG_ATTR_INIT:
    if (n->init.kind == TG_INIT_ZEROS)
      fputs(" {init=zeros", out);
    else if (n->init.kind == TG_INIT_ONES)
      fputs(" {init=ones", out);
    else if (n->init.kind == TG_INIT_NORMAL)
      fprintf(out, " {init=normal(%s)", tg_fmt_double(n->init.std, num, sizeof num));
    else
      fprintf(out, " {init=<kind %d>", (int)n->init.kind);
    if (n->init.split != TG_SPLIT_NONE) {
      fprintf(out, ", split=%s", tg_split_name(n->init.split));
      if (n->init.split_groups > 1) fprintf(out, "/%d", n->init.split_groups);
    }
    fputc('}', out);
    break;
  case TG_ATTR_VALUE: fprintf(out, " {value=%s}", tg_fmt_double(n->value, num, sizeof num)); break;
  case TG_ATTR_AXIS: fprintf(out, " {axis=%d}", n->axis); break;
  case TG_ATTR_RANKS: fprintf(out, " {ranks=%d%s}", n->ranks, n->over_tensor ? ", over=tensor" : ""); break;
  case TG_ATTR_AXES: {
    int v[32], k = 0;
    for (int i = 0; i < 32; i++)
      if (n->axes >> i & 1) v[k++] = i;
    print_list(out, "axes", v, k);
    break;
  }
  case TG_ATTR_PERM: {
    /* One entry per input dim: that is how many entries are meaningful. */
    int rank = n->nin > 0 && n->in[0] ? n->in[0]->type.rank : n->type.rank;
    if (rank < 0 || rank > TG_MAX_RANK) rank = TG_MAX_RANK;
    print_list(out, "perm", n->perm, rank);
    break;
  }
  case TG_ATTR_SLICE:
    fprintf(out, " {axis=%d, start=%lld, len=%lld}", n->axis, (long long)n->start,
            (long long)n->len);
    break;
  case TG_ATTR_NONE:
  case TG_ATTR_NAME:
  case TG_ATTR_DTYPE: break;
  }
}

static void print_node(FILE *out, const tg_graph *g, int k) {
  const tg_node *n = g->nodes[k];
  if (!n) {
    fprintf(out, "%%%d = <null>\n", k);
    return;
  }
  if ((unsigned)n->op >= TG_NOPS) {
    fprintf(out, "%%%d = <op %d>\n", k, (int)n->op);
    return;
  }
  fprintf(out, "%%%d = %s", k, tg_ops[n->op].name);
  for (int i = 0; i < n->nin; i++) {
    fputs(i ? ", " : " ", out);
    print_ref(out, g, n->in[i]);
  }
  print_attr(out, n);
  fputs(" : ", out);
  print_type(out, &n->type);
  if (n->name) {
    fputc(' ', out);
    print_quoted(out, n->name);
  }
  /* before the location, which the reader takes from the line's end */
  if (n->kernel >= 0) fprintf(out, " in k%d", n->kernel);
  if (n->loc.file) fprintf(out, " @ %s:%d:%d", n->loc.file, n->loc.line, n->loc.col);
  fputc('\n', out);
}

void tg_print_ir(FILE *out, const tg_graph *g) {
  char num[40];
  fputs("# tg IR 1\n", out);
  if (g->source) {
    fputs("source ", out);
    print_quoted(out, g->source);
    fputc('\n', out);
  }
  for (int i = 0; i < g->n_config; i++)
    fprintf(out, "config %s = %s\n", g->config[i].name,
            tg_fmt_double(g->config[i].value, num, sizeof num));
  /* Kernels (after the fuse pass) are declared before the nodes, in run
   * order; a node names its kernel with " in kN", since a kernel's nodes
   * need not be contiguous in graph order. */
  for (int k = 0; k < g->n_kernels; k++) {
    fprintf(out, "kernel k%d %s ", k, tg_kernel_kind_name(g->kernels[k].kind));
    print_quoted(out, g->kernels[k].name ? g->kernels[k].name : "");
    fputc('\n', out);
  }
  tg_phase phase = TG_PHASE_FORWARD;
  for (int k = 0; k < g->n_nodes; k++) {
    /* A phase line starts each run of backward or optimizer nodes. */
    if (g->nodes[k]->phase != phase) {
      phase = g->nodes[k]->phase;
      fprintf(out, "phase %s\n", tg_phase_name(phase));
    }
    print_node(out, g, k);
  }
  for (int i = 0; i < g->n_outputs; i++) {
    fputs("output ", out);
    print_quoted(out, g->outputs[i].name ? g->outputs[i].name : "");
    fputs(" = ", out);
    print_ref(out, g, g->outputs[i].node);
    fputc('\n', out);
  }
}
