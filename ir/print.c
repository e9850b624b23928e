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
enum { TYPED_SLOTS = 64 };
typedef struct typed_slot {
  tg_type type;
  size_t len; /* 0: empty */
  char text[120];
} typed_slot;

typedef struct writer {
  FILE *out;   /* or NULL: into *text */
  char **text; /* tg_ir_pieces's: grown with realloc */
  size_t *cap, len;
  size_t n;
  unsigned writes; /* of the buffer out (w_write): print_type's spelling is in buf while none happened */
  char buf[1 << 15];
  typed_slot types[TYPED_SLOTS]; /* print_type's spellings */
} writer;

static void w_write(writer *w, const char *s, size_t n) {
  w->writes++;
  if (w->out) {
    fwrite(s, 1, n, w->out);
    return;
  }
  if (w->len + n + 1 > *w->cap) {
    size_t cap = *w->cap ? *w->cap : 1 << 16;
    while (w->len + n + 1 > cap) cap *= 2;
    *w->text = tg_xrealloc(*w->text, cap);
    *w->cap = cap;
  }
  memcpy(*w->text + w->len, s, n);
  w->len += n;
  (*w->text)[w->len] = 0;
}

static void w_flush(writer *w) {
  if (w->n) w_write(w, w->buf, w->n);
  w->n = 0;
}

static void w_put(writer *w, const char *s, size_t n) {
  if (w->n + n > sizeof w->buf) {
    w_flush(w);
    if (n > sizeof w->buf) {
      w_write(w, s, n);
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
  char buf[TG_FMT_INT_MAX];
  size_t n;
  const char *p = tg_fmt_int(v, buf, &n);
  w_put(out, p, n);
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

static bool same_type(const tg_type *a, const tg_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i].size != b->dim[i].size || a->dim[i].sym != b->dim[i].sym) return false;
  return true;
}

/* As tg_type_str spells it ("f32[B=8, T=1024, 64]"), written straight
 * out: no symbol name is ever cut short (that would break the round trip).
 * A graph has a few dozen types on thousands of nodes: each is spelled
 * once, in the writer's cache, by its dtype, sizes and symbols. */
static void print_type(writer *out, const tg_type *t) {
  if (t->rank < 0 || t->rank > TG_MAX_RANK) {
    w_printf(out, "%s[<rank %d>]", tg_dtype_name(t->dtype), t->rank);
    return;
  }
  uint64_t h = (uint64_t)t->dtype * 31 + (uint64_t)t->rank;
  for (int i = 0; i < t->rank; i++) h = (h ^ (uint64_t)t->dim[i].size ^ (uint64_t)(uintptr_t)t->dim[i].sym) * 0x100000001b3ULL;
  typed_slot *c = &out->types[(h ^ h >> 29) % TYPED_SLOTS];
  if (c->len && same_type(&c->type, t)) {
    w_put(out, c->text, c->len);
    return;
  }
  /* spelled into the writer's buffer, with room for a slot's worth, and
   * kept when it fit (a longer one is written a piece at a time, as here,
   * and spelled again next time) */
  if (out->n + sizeof c->text > sizeof out->buf) w_flush(out);
  size_t start = out->n;
  unsigned writes = out->writes;
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
  size_t len = out->n - start;
  c->len = out->writes == writes && len < sizeof c->text ? len : 0;
  if (c->len) {
    c->type = *t;
    memcpy(c->text, out->buf + start, len);
  }
}

static void print_list(writer *out, const char *key, const int *v, int n) {
  w_puts(out, " {");
  w_puts(out, key);
  w_puts(out, "=[");
  for (int i = 0; i < n; i++) {
    if (i) w_puts(out, ", ");
    put_int(out, v[i]);
  }
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

/* A node's line after its inputs is its middle, " {attributes} : type
 * \"name\"", its kernel, " in kN", and its place, " @ file:line:col" (the
 * page's pieces keep the three apart: fuse changes only the kernels). */
static void print_middle(writer *out, const tg_node *n, spelled *sp) {
  print_attr(out, n, sp);
  w_puts(out, " : ");
  print_type(out, &n->type);
  if (n->name) {
    w_putc(out, ' ');
    print_quoted(out, n->name);
  }
}

static void print_place(writer *out, const tg_node *n) {
  if (n->loc.file) {
    w_puts(out, " @ ");
    w_puts(out, n->loc.file);
    w_putc(out, ':');
    put_int(out, n->loc.line);
    w_putc(out, ':');
    put_int(out, n->loc.col);
  }
}

static void print_tail(writer *out, const tg_node *n, spelled *sp) {
  print_middle(out, n, sp);
  /* before the location, which the reader takes from the line's end */
  if (n->kernel >= 0) {
    w_puts(out, " in k");
    put_int(out, n->kernel);
  }
  print_place(out, n);
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
  print_tail(out, n, sp);
  w_putc(out, '\n');
}

/* The lines before the nodes: the header, source, config and kernels. */
static void print_head(writer *out, const tg_graph *g) {
  char num[40];
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
}

static void print_graph(writer *out, const tg_graph *g) {
  spelled sp;
  memset(sp.used, 0, sizeof sp.used);
  print_head(out, g);
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

static size_t print_with(writer *w, const tg_graph *g) {
  w->n = 0;
  w->writes = 0;
  for (int i = 0; i < TYPED_SLOTS; i++) w->types[i].len = 0;
  w->len = 0;
  print_graph(w, g);
  w_flush(w);
  size_t len = w->len;
  free(w);
  return len;
}

void tg_print_ir(FILE *out, const tg_graph *g) {
  writer *w = tg_xmalloc(sizeof *w); /* its buffer is large for a stack */
  w->out = out;
  print_with(w, g);
}

/* ---- pieces of the text (ir.h: tg_ir_pieces) -------------------------- */

struct tg_ir_pieces {
  writer w;
  char *text;
  size_t cap;
  spelled sp;
};

tg_ir_pieces *tg_ir_pieces_new(void) {
  tg_ir_pieces *p = tg_xcalloc(1, sizeof *p);
  p->w.text = &p->text;
  p->w.cap = &p->cap;
  return p;
}

void tg_ir_pieces_free(tg_ir_pieces *p) {
  if (!p) return;
  free(p->text);
  free(p);
}

/* Each piece is printed from the buffer's start: the type spellings and
 * constants cached by earlier ones stay. */
static void piece_start(tg_ir_pieces *p) {
  p->w.n = 0;
  p->w.len = 0;
}

static const char *piece_end(tg_ir_pieces *p, size_t *n) {
  w_flush(&p->w);
  *n = p->w.len;
  return p->text && p->w.len ? p->text : "";
}

const char *tg_ir_head(tg_ir_pieces *p, const tg_graph *g, size_t *n) {
  piece_start(p);
  print_head(&p->w, g);
  return piece_end(p, n);
}

const char *tg_ir_node_op(tg_ir_pieces *p, const tg_node *n, size_t *len) {
  piece_start(p);
  if ((unsigned)n->op >= TG_NOPS) w_printf(&p->w, "<op %d>", (int)n->op);
  else w_puts(&p->w, tg_ops[n->op].name);
  return piece_end(p, len);
}

const char *tg_ir_node_middle(tg_ir_pieces *p, const tg_node *n, size_t *len) {
  piece_start(p);
  if ((unsigned)n->op < TG_NOPS) print_middle(&p->w, n, &p->sp);
  return piece_end(p, len);
}

const char *tg_ir_node_place(tg_ir_pieces *p, const tg_node *n, size_t *len) {
  piece_start(p);
  if ((unsigned)n->op < TG_NOPS) print_place(&p->w, n);
  return piece_end(p, len);
}

const char *tg_ir_quoted(tg_ir_pieces *p, const char *s, size_t *n) {
  piece_start(p);
  print_quoted(&p->w, s ? s : "");
  return piece_end(p, n);
}

/* ---- the fingerprint (ir.h) -------------------------------------------
 * Reads the fields print_graph prints, in its order: a field added to the
 * text must be added here too (test_report checks, pass by pass, that the
 * fingerprint changes exactly when the text does, and field by field). */

static uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x100000001b3ULL;
  return h ^ (h >> 31);
}

static uint64_t mix_ptr(uint64_t h, const void *p) { return mix(h, (uint64_t)(uintptr_t)p); }

static uint64_t mix_double(uint64_t h, double d) {
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  return mix(h, bits);
}

/* kernel: the node's, or a constant (tg_ir_node_fingerprint leaves it out) */
static uint64_t node_fields(uint64_t h, const tg_node *n, int kernel) {
  h = mix_ptr(h, n);
  if (!n) return h;
  h = mix(h, (uint64_t)n->op << 32 | (uint64_t)(uint32_t)n->phase);
  h = mix(h, (uint64_t)(uint32_t)n->nin << 32 | (uint32_t)kernel);
  for (int i = 0; i < n->nin; i++) h = mix_ptr(h, n->in[i]); /* with the order of g->nodes: the %refs */
  h = mix(h, (uint64_t)n->type.dtype << 32 | (uint32_t)n->type.rank);
  for (int i = 0; i < n->type.rank && i < TG_MAX_RANK; i++) h = mix_ptr(mix(h, (uint64_t)n->type.dim[i].size), n->type.dim[i].sym);
  h = mix_ptr(mix_ptr(h, n->name), n->loc.file);
  h = mix(h, (uint64_t)(uint32_t)n->loc.line << 32 | (uint32_t)n->loc.col);
  /* the attributes print_attr writes for the op (an op outside the
   * table prints as "<op N>": its number is mixed in above) */
  switch ((unsigned)n->op < TG_NOPS ? tg_ops[n->op].attr : TG_ATTR_NONE) {
  case TG_ATTR_INIT:
    h = mix_double(mix(h, (uint64_t)n->init.kind << 32 | (uint32_t)n->init.split), n->init.std);
    return mix(h, (uint32_t)n->init.split_groups);
  case TG_ATTR_VALUE: return mix_double(h, n->value);
  case TG_ATTR_AXIS: return mix(h, (uint32_t)n->axis);
  case TG_ATTR_RANKS: return mix(h, (uint64_t)(uint32_t)n->ranks << 1 | n->over_tensor);
  case TG_ATTR_AXES: return mix(h, n->axes);
  case TG_ATTR_PERM:
    for (int i = 0; i < TG_MAX_RANK; i++) h = mix(h, (uint32_t)n->perm[i]);
    return h;
  case TG_ATTR_SLICE: return mix(mix(mix(h, (uint32_t)n->axis), (uint64_t)n->start), (uint64_t)n->len);
  case TG_ATTR_NONE:
  case TG_ATTR_NAME:
  case TG_ATTR_DTYPE: break;
  }
  return h;
}

uint64_t tg_ir_node_fingerprint(const tg_node *n) {
  uint64_t h = node_fields(0xcbf29ce484222325ULL, n, 0);
  /* a transpose writes as many entries of its perm as its input has dims */
  if (n && (unsigned)n->op < TG_NOPS && tg_ops[n->op].attr == TG_ATTR_PERM && n->nin > 0 && n->in[0])
    h = mix(h, (uint32_t)n->in[0]->type.rank);
  return h;
}

uint64_t tg_ir_fingerprint(const tg_graph *g) { return tg_ir_fingerprint_nodes(g, NULL); }

/* The nodes count through their lines' fingerprints, which a reader
 * that keeps the lines that changed needs anyway (report/ir_history.c),
 * and their kernels. */
uint64_t tg_ir_fingerprint_nodes(const tg_graph *g, uint64_t *node_fingerprints) {
  uint64_t h = mix_ptr(0xcbf29ce484222325ULL, g->source);
  h = mix(h, (uint64_t)g->n_config);
  for (int i = 0; i < g->n_config; i++) h = mix_double(mix_ptr(h, g->config[i].name), g->config[i].value);
  h = mix(h, (uint64_t)g->n_kernels);
  for (int k = 0; k < g->n_kernels; k++) h = mix_ptr(mix(h, g->kernels[k].kind), g->kernels[k].name);
  h = mix(h, (uint64_t)g->n_nodes);
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    uint64_t line = tg_ir_node_fingerprint(n);
    if (node_fingerprints) node_fingerprints[k] = line;
    h = mix(mix(h, line), (uint64_t)(uint32_t)(n ? n->kernel : 0));
  }
  h = mix(h, (uint64_t)g->n_outputs);
  for (int i = 0; i < g->n_outputs; i++) h = mix_ptr(mix_ptr(h, g->outputs[i].name), g->outputs[i].node);
  return h;
}
