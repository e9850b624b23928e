/* stats.c: counts what a graph holds and prints a short summary.
 *
 * `tgc --stats` uses this to answer the first questions about a model
 * (how many parameters, how big, how many nodes of which kind) without
 * reading the IR, and tests use the counts to check that a pass removed or
 * added what it should.  Numbers get thousands separators by hand: the C
 * locale has none and setting another would change how doubles print. */
#include "ir.h"
#include "names.h"

#include <math.h>
#include <string.h>

enum { WIDTH = 80, INDENT = 9 };

/* The elements a param really has: padded dims (pad_vocab) count at their
 * true size, since their extra rows are zeros that are never trained. */
static int64_t unpadded_numel(const tg_graph *g, const tg_type *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= tg_dim_unpadded(g, &t->dim[d]);
  return n;
}

void tg_graph_stats(const tg_graph *g, tg_stats *s) {
  memset(s, 0, sizeof *s);
  s->n_nodes = g->n_nodes;
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (!n || (unsigned)n->op >= TG_NOPS) continue;
    s->by_op[n->op]++;
    s->by_kind[tg_ops[n->op].kind]++;
    if ((unsigned)n->phase < TG_NPHASES) s->by_phase[n->phase]++;
    if (n->op == TG_OP_param && (unsigned)n->type.dtype < TG_NDTYPES) {
      int64_t e = unpadded_numel(g, &n->type);
      s->n_params++;
      s->param_elems += e;
      s->param_bytes += e * tg_dtype_size(n->type.dtype);
    }
  }
}

/* "124,439,808" */
static char *fmt_count(int64_t v, char *buf, size_t n) {
  char digits[24];
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  int k = snprintf(digits, sizeof digits, "%llu", (unsigned long long)u);
  size_t j = 0;
  if (v < 0 && j + 1 < n) buf[j++] = '-';
  for (int i = 0; i < k && j + 1 < n; i++) {
    if (i > 0 && (k - i) % 3 == 0 && j + 2 < n) buf[j++] = ',';
    buf[j++] = digits[i];
  }
  buf[j] = 0;
  return buf;
}

/* "474.7 MiB" */
static char *fmt_bytes(int64_t b, char *buf, size_t n) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (b < 1024) {
    snprintf(buf, n, "%lld bytes", (long long)b);
    return buf;
  }
  double v = (double)b / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, u++;
  snprintf(buf, n, "%.1f %s", v, units[u]);
  return buf;
}

/* Config values are mostly sizes: show integers as integers. */
static char *fmt_config(double v, char *buf, size_t n) {
  if (isfinite(v) && v == floor(v) && fabs(v) < 1e15)
    snprintf(buf, n, "%lld", (long long)v);
  else
    tg_fmt_double(v, buf, n);
  return buf;
}

/* One labelled line of items, wrapped under the label when too long. */
typedef struct line {
  FILE *out;
  size_t col;
  int items;
} line;

static line line_start(FILE *out, const char *label) {
  fprintf(out, "%-*s", INDENT, label);
  return (line){out, INDENT, 0};
}

/* Appends text after sep (", " or " "); a wrapped line keeps sep's
 * punctuation at the end of the line it leaves. */
static void line_item(line *l, const char *sep, const char *text) {
  size_t len = strlen(text), slen = l->items ? strlen(sep) : 0;
  if (l->items && l->col + slen + len > WIDTH) {
    size_t keep = slen;
    while (keep > 0 && sep[keep - 1] == ' ') keep--;
    fprintf(l->out, "%.*s\n%*s", (int)keep, sep, INDENT, "");
    l->col = INDENT;
  } else if (l->items) {
    fputs(sep, l->out);
    l->col += slen;
  }
  fputs(text, l->out);
  l->col += len;
  l->items++;
}

static void line_end(line *l) { fputc('\n', l->out); }

static void print_config(FILE *out, const tg_graph *g) {
  if (g->n_config == 0) return;
  line l = line_start(out, "config");
  char num[40], item[600];
  for (int i = 0; i < g->n_config; i++) {
    snprintf(item, sizeof item, "%s=%s", g->config[i].name,
             fmt_config(g->config[i].value, num, sizeof num));
    line_item(&l, " ", item);
  }
  line_end(&l);
}

/* Whether some node has a dim of symbol sym padded beyond its config size;
 * that padded size in *padded. */
static bool find_padded(const tg_graph *g, const char *sym, int64_t *padded) {
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (!n || n->type.rank < 0 || n->type.rank > TG_MAX_RANK) continue;
    for (int d = 0; d < n->type.rank; d++) {
      const tg_dim *dim = &n->type.dim[d];
      if (dim->sym && !strcmp(dim->sym, sym) && tg_dim_unpadded(g, dim) != dim->size) {
        *padded = dim->size;
        return true;
      }
    }
  }
  return false;
}

/* "vocab    50257 → 50304 (padded)" for each config constant that a pass
 * padded (pad_vocab): the config keeps the true size. */
static void print_padded(FILE *out, const tg_graph *g) {
  char a[40], b[40];
  for (int i = 0; i < g->n_config; i++) {
    int64_t padded = 0;
    if (!find_padded(g, g->config[i].name, &padded)) continue;
    fprintf(out, "%-*s%s → %s (padded)\n", INDENT, g->config[i].name,
            fmt_config(g->config[i].value, a, sizeof a), fmt_config((double)padded, b, sizeof b));
  }
}

/* The params' one dtype, or -1 when they mix dtypes or there are none. */
static int param_dtype(const tg_graph *g) {
  int dt = -1;
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (!n || n->op != TG_OP_param) continue;
    if (dt >= 0 && dt != (int)n->type.dtype) return -1;
    dt = (int)n->type.dtype;
  }
  return dt;
}

static void print_params(FILE *out, const tg_graph *g, const tg_stats *s) {
  char a[32], b[32], c[32];
  fprintf(out, "%-*s%s in %s tensor%s", INDENT, "params", fmt_count(s->param_elems, a, sizeof a),
          fmt_count(s->n_params, b, sizeof b), s->n_params == 1 ? "" : "s");
  if (s->n_params > 0) {
    int dt = param_dtype(g);
    fprintf(out, " (%s", fmt_bytes(s->param_bytes, c, sizeof c));
    if (dt >= 0) fprintf(out, " at %s", tg_dtype_name((tg_dtype)dt));
    fputc(')', out);
  }
  fputc('\n', out);
}

static void print_nodes(FILE *out, const tg_stats *s) {
  char num[32], item[64];
  line l = line_start(out, "nodes");
  fmt_count(s->n_nodes, num, sizeof num);
  snprintf(item, sizeof item, "%s%s", num, s->n_nodes ? ":" : "");
  line_item(&l, "", item);
  int shown = 0;
  for (int k = 0; k < TG_NKINDS; k++) {
    if (!s->by_kind[k]) continue;
    snprintf(item, sizeof item, "%s %s", fmt_count(s->by_kind[k], num, sizeof num),
             tg_kind_name((tg_kind)k));
    line_item(&l, shown++ ? ", " : " ", item);
  }
  line_end(&l);
}

/* Forward, backward and optimizer node counts, once there is more than the
 * forward graph. */
static void print_phases(FILE *out, const tg_stats *s) {
  if (s->by_phase[TG_PHASE_FORWARD] == s->n_nodes) return;
  char num[32], item[64];
  line l = line_start(out, "phases");
  int shown = 0;
  for (int p = 0; p < TG_NPHASES; p++) {
    snprintf(item, sizeof item, "%s %s", fmt_count(s->by_phase[p], num, sizeof num),
             tg_phase_name((tg_phase)p));
    line_item(&l, shown++ ? ", " : "", item);
  }
  line_end(&l);
}

/* Every op that occurs, most frequent first, ties in op-table order. */
static void print_ops(FILE *out, const tg_stats *s) {
  int order[TG_NOPS], n = 0;
  for (int op = 0; op < TG_NOPS; op++) {
    if (!s->by_op[op]) continue;
    int j = n++;
    while (j > 0 && s->by_op[order[j - 1]] < s->by_op[op]) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = op;
  }
  if (n == 0) return;
  line l = line_start(out, "ops");
  char num[32], item[64];
  for (int i = 0; i < n; i++) {
    snprintf(item, sizeof item, "%s %s", tg_ops[order[i]].name,
             fmt_count(s->by_op[order[i]], num, sizeof num));
    line_item(&l, ", ", item);
  }
  line_end(&l);
}

static void print_outputs(FILE *out, const tg_graph *g) {
  if (g->n_outputs == 0) return;
  line l = line_start(out, "outputs");
  char ts[TG_TYPE_STR_MAX], item[TG_TYPE_STR_MAX + 256];
  /* One gradient per parameter would drown the rest: count them instead. */
  int grads = 0;
  for (int i = 0; i < g->n_outputs; i++) {
    const tg_output *o = &g->outputs[i];
    if (o->name && !strncmp(o->name, TG_GRAD_PREFIX, strlen(TG_GRAD_PREFIX))) {
      grads++;
      continue;
    }
    const tg_type *t = o->node ? &o->node->type : NULL;
    bool ok = t && t->rank >= 0 && t->rank <= TG_MAX_RANK;
    snprintf(item, sizeof item, "%.200s %s", o->name ? o->name : "?",
             ok ? tg_type_str(t, ts, sizeof ts) : "?");
    line_item(&l, ", ", item);
  }
  if (grads) {
    snprintf(item, sizeof item, "%d gradient%s (grad:NAME)", grads, grads == 1 ? "" : "s");
    line_item(&l, ", ", item);
  }
  line_end(&l);
}

void tg_print_stats(FILE *out, const tg_graph *g) {
  tg_stats s;
  tg_graph_stats(g, &s);
  if (g->source) fprintf(out, "%-*s%s\n", INDENT, "model", g->source);
  print_config(out, g);
  print_padded(out, g);
  print_params(out, g, &s);
  print_nodes(out, &s);
  print_phases(out, &s);
  print_ops(out, &s);
  print_outputs(out, g);
}
