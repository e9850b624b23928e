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

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The text goes through a buffer of its own, written out in large
 * pieces: the IR is many short pieces (a ref, a comma, a type), and
 * stdio's per-call cost was most of printing it (tgc --report html prints
 * it after every pass). */
typedef struct writer {
  FILE *out;
  size_t n;
  char buf[1 << 15];
} writer;

static void w_flush(writer *w) {
  if (w->n) fwrite(w->buf, 1, w->n, w->out);
  w->n = 0;
}

static void w_put(writer *w, const char *s, size_t n) {
  if (w->n + n > sizeof w->buf) {
    w_flush(w);
    if (n > sizeof w->buf) {
      fwrite(s, 1, n, w->out);
      return;
    }
  }
  memcpy(w->buf + w->n, s, n);
  w->n += n;
}

static void w_puts(writer *w, const char *s) { w_put(w, s, strlen(s)); }

static void w_putc(writer *w, char c) {
  if (w->n == sizeof w->buf) w_flush(w);
  w->buf[w->n++] = c;
}

static void w_printf(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_printf(writer *w, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  if ((size_t)k < sizeof small) {
    w_put(w, small, (size_t)k);
    return;
  }
  char *big = malloc((size_t)k + 1);
  if (!big) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)k + 1, fmt, ap);
  va_end(ap);
  w_put(w, big, (size_t)k);
  free(big);
}

/* An integer in decimal, as "%lld" writes it: the IR is mostly numbers,
 * and tgc --report html prints it after every pass, where fprintf's
 * parsing of its format is most of the time. */
static void put_int(writer *out, long long v) {
  char buf[24], *p = buf + sizeof buf;
  unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  do *--p = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0) *--p = '-';
  w_put(out, p, (size_t)(buf + sizeof buf - p));
}

/* Quoted string: '"' and '\' escaped, bytes outside printable ASCII as \xNN
 * so the text stays one line of plain ASCII whatever a name contains. */
static void print_quoted(writer *out, const char *s) {
  w_putc(out, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      w_printf(out, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f)
      w_printf(out, "\\x%02x", *p);
    else
      w_putc(out, *p);
  }
  w_putc(out, '"');
}

/* Position of n in g, or -1.  The id is the fast path; the scan covers a
 * graph whose ids are stale. */
static int node_pos(const tg_graph *g, const tg_node *n) {
  if (n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n) return n->id;
  for (int i = 0; n && i < g->n_nodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

static void print_ref(writer *out, const tg_graph *g, const tg_node *n) {
  int k = node_pos(g, n);
  if (k >= 0) {
    w_putc(out, '%');
    put_int(out, k);
  } else
    w_puts(out, "%?"); /* not in the graph: unreadable on purpose */
}

/* As tg_type_str spells it ("f32[B=8, T=1024, 64]"), written straight
 * out: no symbol name is ever cut short (that would break the round trip). */
static void print_type(writer *out, const tg_type *t) {
  if (t->rank < 0 || t->rank > TG_MAX_RANK) {
    w_printf(out, "%s[<rank %d>]", tg_dtype_name(t->dtype), t->rank);
    return;
  }
  w_puts(out, tg_dtype_name(t->dtype));
  w_putc(out, '[');
  for (int i = 0; i < t->rank; i++) {
    if (i) w_puts(out, ", ");
    if (t->dim[i].sym) {
      w_puts(out, t->dim[i].sym);
      w_putc(out, '=');
    }
    put_int(out, (long long)t->dim[i].size);
  }
  w_putc(out, ']');
}

static void print_list(writer *out, const char *key, const int *v, int n) {
  w_printf(out, " {%s=[", key);
  for (int i = 0; i < n; i++) w_printf(out, "%s%d", i ? ", " : "", v[i]);
  w_puts(out, "]}");
}

/* The " {...}" part, for the ops whose tg_ops[op].attr needs one. */
/* The spellings of the constants printed so far, by value: a graph holds
 * a few constants many times (a layer's scales and epsilons, once per
 * layer), and finding a double's shortest spelling (tg_fmt_double) costs
 * more than the rest of its line. */
enum { SPELLED = 64 };
typedef struct spelled {
  double value[SPELLED];
  char text[SPELLED][40];
  bool used[SPELLED];
} spelled;

static const char *spell(spelled *c, double d) {
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  unsigned slot = (unsigned)((bits * 0x9E3779B97F4A7C15ULL) >> 58); /* 6 bits: SPELLED slots */
  if (!c->used[slot] || memcmp(&c->value[slot], &d, sizeof d)) {
    c->value[slot] = d;
    c->used[slot] = true;
    tg_fmt_double(d, c->text[slot], sizeof c->text[slot]);
  }
  return c->text[slot];
}

static void print_attr(writer *out, const tg_node *n, spelled *sp) {
  switch (tg_ops[n->op].attr) {
  case TG_ATTR_INIT:
    if (n->init.kind == TG_INIT_ZEROS)
      w_puts(out, " {init=zeros");
    else if (n->init.kind == TG_INIT_ONES)
      w_puts(out, " {init=ones");
    else if (n->init.kind == TG_INIT_NORMAL)
      w_printf(out, " {init=normal(%s)", spell(sp, n->init.std));
    else
      w_printf(out, " {init=<kind %d>", (int)n->init.kind);
    if (n->init.split != TG_SPLIT_NONE) {
      w_printf(out, ", split=%s", tg_split_name(n->init.split));
      if (n->init.split_groups > 1) w_printf(out, "/%d", n->init.split_groups);
    }
    w_putc(out, '}');
    break;
  case TG_ATTR_VALUE:
    w_puts(out, " {value=");
    w_puts(out, spell(sp, n->value));
    w_putc(out, '}');
    break;
  case TG_ATTR_AXIS: w_printf(out, " {axis=%d}", n->axis); break;
  case TG_ATTR_RANKS: w_printf(out, " {ranks=%d%s}", n->ranks, n->over_tensor ? ", over=tensor" : ""); break;
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
    w_printf(out, " {axis=%d, start=%lld, len=%lld}", n->axis, (long long)n->start,
            (long long)n->len);
    break;
  case TG_ATTR_NONE:
  case TG_ATTR_NAME:
  case TG_ATTR_DTYPE: break;
  }
}

static void print_node(writer *out, const tg_graph *g, int k, spelled *sp) {
  const tg_node *n = g->nodes[k];
  if (!n) {
    w_printf(out, "%%%d = <null>\n", k);
    return;
  }
  if ((unsigned)n->op >= TG_NOPS) {
    w_printf(out, "%%%d = <op %d>\n", k, (int)n->op);
    return;
  }
  w_putc(out, '%');
  put_int(out, k);
  w_puts(out, " = ");
  w_puts(out, tg_ops[n->op].name);
  for (int i = 0; i < n->nin; i++) {
    w_puts(out, i ? ", " : " ");
    print_ref(out, g, n->in[i]);
  }
  print_attr(out, n, sp);
  w_puts(out, " : ");
  print_type(out, &n->type);
  if (n->name) {
    w_putc(out, ' ');
    print_quoted(out, n->name);
  }
  /* before the location, which the reader takes from the line's end */
  if (n->kernel >= 0) {
    w_puts(out, " in k");
    put_int(out, n->kernel);
  }
  if (n->loc.file) {
    w_puts(out, " @ ");
    w_puts(out, n->loc.file);
    w_putc(out, ':');
    put_int(out, n->loc.line);
    w_putc(out, ':');
    put_int(out, n->loc.col);
  }
  w_putc(out, '\n');
}

static void print_graph(writer *out, const tg_graph *g) {
  char num[40];
  spelled sp;
  memset(sp.used, 0, sizeof sp.used);
  w_puts(out, "# tg IR 1\n");
  if (g->source) {
    w_puts(out, "source ");
    print_quoted(out, g->source);
    w_putc(out, '\n');
  }
  for (int i = 0; i < g->n_config; i++)
    w_printf(out, "config %s = %s\n", g->config[i].name,
            tg_fmt_double(g->config[i].value, num, sizeof num));
  /* Kernels (after the fuse pass) are declared before the nodes, in run
   * order; a node names its kernel with " in kN", since a kernel's nodes
   * need not be contiguous in graph order. */
  for (int k = 0; k < g->n_kernels; k++) {
    w_printf(out, "kernel k%d %s ", k, tg_kernel_kind_name(g->kernels[k].kind));
    print_quoted(out, g->kernels[k].name ? g->kernels[k].name : "");
    w_putc(out, '\n');
  }
  tg_phase phase = TG_PHASE_FORWARD;
  for (int k = 0; k < g->n_nodes; k++) {
    /* A phase line starts each run of backward or optimizer nodes. */
    if (g->nodes[k]->phase != phase) {
      phase = g->nodes[k]->phase;
      w_printf(out, "phase %s\n", tg_phase_name(phase));
    }
    print_node(out, g, k, &sp);
  }
  for (int i = 0; i < g->n_outputs; i++) {
    w_puts(out, "output ");
    print_quoted(out, g->outputs[i].name ? g->outputs[i].name : "");
    w_puts(out, " = ");
    print_ref(out, g, g->outputs[i].node);
    w_putc(out, '\n');
  }
}

void tg_print_ir(FILE *out, const tg_graph *g) {
  writer *w = malloc(sizeof *w);
  if (!w) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  w->out = out;
  w->n = 0;
  print_graph(w, g);
  w_flush(w);
  free(w);
}
