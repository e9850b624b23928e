/* read.c: reads the IR text form (see print.c) back into a graph.
 *
 * Nodes are rebuilt through the same calls the frontend uses (tg_node_new,
 * tg_infer_type, tg_graph_add), so a graph read from text is held to the
 * same typing rules as one elaborated from a .tg file, and the type printed
 * on each line is checked against what inference gives.  The printed type
 * is then kept, symbols included, so that printing again gives the same
 * bytes.
 *
 * The input may be any bytes a user or a fuzzer hands us.  Every scan is
 * bounded by the end of the current line (never by a NUL), every integer is
 * range-checked before it is stored, and every error names the line and
 * column of the offending token and bails through tg_error's machinery. */
#include "ir.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Sections of the file, in the order they must appear. */
enum { AT_HEADER, AT_SOURCE, AT_CONFIG, AT_NODES, AT_OUTPUTS };

typedef struct reader {
  tg_ctx *ctx;
  const tg_source *src;
  tg_graph *g;
  int line;
  const char *bol, *eol; /* the current line, without its line ending */
  const char *p;         /* the cursor, bol <= p <= eol */
  int section;
  tg_node **args; /* scratch for one node's inputs, in the arena */
  int cap_args;
  const char *last_file; /* the previous loc's file, shared when it repeats */
  tg_phase phase;        /* set by "phase" lines, given to the nodes after them */
} reader;

/* ---- errors ------------------------------------------------------------- */

static _Noreturn void fail(reader *r, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static _Noreturn void fail(reader *r, const char *at, const char *fmt, ...) {
  ptrdiff_t off = at - r->bol;
  int col = off < 0 ? 1 : off >= INT_MAX ? INT_MAX : (int)off + 1;
  /* The graph's arrays are malloc'ed, not arena memory: free them before
   * unwinding past the only pointer to them. */
  tg_graph_free(r->g);
  va_list ap;
  va_start(ap, fmt);
  tg_vreport(r->ctx, "error", (tg_loc){r->src->path, r->line, col}, fmt, ap);
  va_end(ap);
  tg_bail(r->ctx);
}

/* The token at p, quoted and made printable, for "found ..." messages. */
static const char *describe(const reader *r, const char *p, char *buf, size_t n) {
  if (p >= r->eol) return "the end of the line";
  size_t k = 0;
  buf[k++] = '\'';
  for (const char *q = p; q < r->eol && *q != ' ' && *q != '\t' && q - p < 24 && k + 7 < n; q++) {
    unsigned char c = (unsigned char)*q;
    if (c >= 0x20 && c < 0x7f)
      buf[k++] = (char)c;
    else
      k += (size_t)snprintf(buf + k, n - k, "\\x%02x", c);
  }
  buf[k++] = '\'';
  buf[k] = 0;
  return buf;
}

/* ---- characters and tokens ------------------------------------------------ */

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_space(char c) { return c == ' ' || c == '\t'; }

static int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static void skip_space(reader *r) {
  while (r->p < r->eol && is_space(*r->p)) r->p++;
}

static bool at_eol(reader *r) {
  skip_space(r);
  return r->p >= r->eol;
}

static bool peek(reader *r, char c) {
  skip_space(r);
  return r->p < r->eol && *r->p == c;
}

static bool accept(reader *r, char c) {
  if (!peek(r, c)) return false;
  r->p++;
  return true;
}

static void expect(reader *r, char c, const char *where) {
  char buf[128];
  if (!accept(r, c))
    fail(r, r->p, "expected '%c' %s, found %s", c, where, describe(r, r->p, buf, sizeof buf));
}

/* Length of the identifier at the cursor ([A-Za-z_][A-Za-z0-9_]*), or 0. */
static size_t ident_len(reader *r) {
  skip_space(r);
  const char *q = r->p;
  if (q >= r->eol || !is_alpha(*q)) return 0;
  while (q < r->eol && (is_alpha(*q) || is_digit(*q))) q++;
  return (size_t)(q - r->p);
}

static bool ident_is(const char *s, size_t n, const char *word) {
  return strlen(word) == n && memcmp(s, word, n) == 0;
}

/* Decimal digits in [*pp, end) as a value in 0..max; `what` names it in
 * errors, which point at tok (where the token starts, sign included).
 * Overflow is caught before it happens. */
static int64_t digits(reader *r, const char **pp, const char *end, const char *tok, int64_t max,
                      const char *what) {
  const char *s = *pp, *q = s;
  char buf[128];
  if (q >= end || !is_digit(*q))
    fail(r, s, "expected %s, found %s", what, describe(r, s, buf, sizeof buf));
  int64_t v = 0;
  bool over = false;
  for (; q < end && is_digit(*q); q++) {
    int d = *q - '0';
    if (v > (max - d) / 10)
      over = true;
    else
      v = v * 10 + d;
  }
  if (over) {
    int n = q - tok > 24 ? 24 : (int)(q - tok);
    fail(r, tok, "%s %.*s%s is out of range (%s%lld..%lld)", what, n, tok,
         q - tok > 24 ? "..." : "", tok < s ? "-" : "", tok < s ? (long long)max : 0LL,
         (long long)max);
  }
  *pp = q;
  return v;
}

/* An integer at the cursor with magnitude at most max, negative only if
 * `sign` (then the type rule, not the reader, explains why it is wrong). */
static int64_t read_int(reader *r, bool sign, int64_t max, const char *what) {
  skip_space(r);
  const char *tok = r->p;
  bool neg = sign && r->p < r->eol && *r->p == '-';
  if (neg) r->p++;
  int64_t v = digits(r, &r->p, r->eol, tok, max, what);
  return neg ? -v : v;
}

/* A number as tg_fmt_double writes it ("0.02", "12", "-inf", "nan");
 * strtod does the conversion, so the token is copied to get its NUL. */
static double read_number(reader *r, const char *what) {
  skip_space(r);
  const char *s = r->p;
  while (r->p < r->eol &&
         (is_alpha(*r->p) || is_digit(*r->p) || *r->p == '.' || *r->p == '+' || *r->p == '-'))
    r->p++;
  char tok[64], buf[128];
  size_t n = (size_t)(r->p - s);
  if (n == 0) fail(r, s, "expected %s, found %s", what, describe(r, s, buf, sizeof buf));
  if (n >= sizeof tok) fail(r, s, "%s is too long to be a number", describe(r, s, buf, sizeof buf));
  memcpy(tok, s, n);
  tok[n] = 0;
  char *end;
  double d = strtod(tok, &end);
  if (end != tok + n) fail(r, s, "expected %s, found '%s'", what, tok);
  return d;
}

/* Decodes the body of a quoted string starting after its opening quote at
 * q0, into out when non-NULL; returns the decoded length and sets *endp
 * past the closing quote.  Run once to size, once to fill. */
static size_t decode_string(reader *r, const char *q0, char *out, const char **endp) {
  size_t n = 0;
  char buf[128];
  for (const char *p = q0 + 1;;) {
    if (p >= r->eol) fail(r, q0, "unterminated string");
    char c = *p;
    if (c == '"') {
      *endp = p + 1;
      return n;
    }
    if (c == '\\') {
      if (p + 1 >= r->eol) fail(r, q0, "unterminated string");
      char e = p[1];
      if (e == '"' || e == '\\') {
        c = e;
        p += 2;
      } else if (e == 'x') {
        int v = 0;
        for (int i = 2; i < 4; i++) {
          char h = p + i < r->eol ? p[i] : 0;
          int d = hex_value(h);
          if (d < 0) fail(r, p, "\\x must be followed by two hex digits");
          v = v * 16 + d;
        }
        if (v == 0) fail(r, p, "a string may not contain \\x00");
        c = (char)v;
        p += 4;
      } else {
        fail(r, p, "unknown escape %s in a string (only \\\", \\\\ and \\xNN)",
             describe(r, p, buf, sizeof buf));
      }
    } else if (c == 0) {
      fail(r, p, "a string may not contain a NUL byte");
    } else {
      p++;
    }
    if (out) out[n] = c;
    n++;
  }
}

static const char *read_string(reader *r, const char *what) {
  char buf[128];
  if (!peek(r, '"'))
    fail(r, r->p, "expected %s (a quoted string), found %s", what,
         describe(r, r->p, buf, sizeof buf));
  const char *end;
  size_t n = decode_string(r, r->p, NULL, &end);
  char *s = tg_alloc(r->ctx->arena, n + 1);
  decode_string(r, r->p, s, &end);
  r->p = end;
  return s;
}

static void expect_eol(reader *r, const char *what) {
  char buf[128];
  if (!at_eol(r))
    fail(r, r->p, "unexpected %s at the end of %s", describe(r, r->p, buf, sizeof buf), what);
}

/* ---- types ---------------------------------------------------------------- */

/* A dim's symbol, sharing the config entry's string when there is one. */
static const char *intern_sym(reader *r, const char *s, size_t n) {
  for (int i = 0; i < r->g->n_config; i++)
    if (ident_is(s, n, r->g->config[i].name)) return r->g->config[i].name;
  return tg_strndup(r->ctx->arena, s, n);
}

/* How many dims the list at p (inside "[...]") has, for the rank error. */
static int count_dims(const reader *r, const char *p, int seen) {
  int n = seen + 1;
  for (; p < r->eol && *p != ']'; p++)
    if (*p == ',' && n < INT_MAX) n++;
  return n;
}

static tg_dim read_dim(reader *r) {
  tg_dim d = {0, NULL};
  size_t k = ident_len(r);
  if (k) {
    d.sym = intern_sym(r, r->p, k);
    r->p += k;
    expect(r, '=', "after the dim's symbol");
  }
  skip_space(r);
  const char *at = r->p;
  d.size = read_int(r, false, TG_MAX_ELEMS, "a dim size");
  if (d.size < 1) fail(r, at, "dim size 0: sizes must be at least 1");
  return d;
}

/* "f32[B=8, T=1024, 768]" or "f32[]". */
static tg_type read_type(reader *r) {
  tg_type t = {0};
  char buf[128];
  size_t n = ident_len(r);
  const char *start = r->p;
  if (!n)
    fail(r, start, "expected a type such as f32[B=8, 768], found %s",
         describe(r, start, buf, sizeof buf));
  if (!tg_dtype_parse(start, n, &t.dtype))
    fail(r, start, "unknown dtype '%.*s' (expected f32, bf16, f16, i32 or bool)",
         n > 24 ? 24 : (int)n, start);
  r->p += n;
  expect(r, '[', "after the dtype");
  if (accept(r, ']')) return t;
  int64_t numel = 1;
  do {
    skip_space(r);
    const char *at = r->p;
    if (t.rank == TG_MAX_RANK)
      fail(r, start, "rank %d exceeds %d", count_dims(r, at, t.rank), TG_MAX_RANK);
    tg_dim d = read_dim(r);
    if (numel > TG_MAX_ELEMS / d.size) fail(r, at, "the type has more than 2^48 elements");
    numel *= d.size;
    t.dim[t.rank++] = d;
  } while (accept(r, ','));
  expect(r, ']', "after the dims");
  return t;
}

/* ---- attributes ----------------------------------------------------------- */

static void expect_key(reader *r, const char *op, const char *key) {
  char buf[128];
  size_t n = ident_len(r);
  if (!ident_is(r->p, n, key))
    fail(r, r->p, "expected '%s=' in %s's attributes, found %s", key, op,
         describe(r, r->p, buf, sizeof buf));
  r->p += n;
  expect(r, '=', "after the attribute name");
}

static void read_init(reader *r, tg_node *n) {
  size_t k = ident_len(r);
  const char *at = r->p;
  if (ident_is(at, k, "zeros"))
    n->init.kind = TG_INIT_ZEROS;
  else if (ident_is(at, k, "ones"))
    n->init.kind = TG_INIT_ONES;
  else if (ident_is(at, k, "normal"))
    n->init.kind = TG_INIT_NORMAL;
  else {
    char buf[128];
    fail(r, at, "unknown initialiser %s (expected zeros, ones or normal(STD))",
         describe(r, at, buf, sizeof buf));
  }
  r->p += k;
  if (n->init.kind == TG_INIT_NORMAL) {
    expect(r, '(', "after normal");
    n->init.std = read_number(r, "a standard deviation");
    expect(r, ')', "after the standard deviation");
  }
  if (!accept(r, ',')) return;
  expect_key(r, "param", "split");
  size_t s = ident_len(r);
  char buf[128];
  if (!tg_split_parse(r->p, s, &n->init.split) || n->init.split == TG_SPLIT_NONE)
    fail(r, r->p, "unknown split %s (expected columns, rows or vocab)", describe(r, r->p, buf, sizeof buf));
  r->p += s;
  n->init.split_groups = accept(r, '/') ? (int)read_int(r, false, 4096, "a number of groups") : 1;
  if (n->init.split_groups < 1) fail(r, r->p, "a split needs at least 1 group");
}

/* "[a, b, ...]" of axis numbers below TG_MAX_RANK; returns the count. */
static int read_axis_list(reader *r, int *v, const char *what) {
  char buf[128];
  int n = 0;
  expect(r, '[', "to open the list");
  if (accept(r, ']')) return 0;
  do {
    skip_space(r);
    const char *at = r->p;
    if (n == TG_MAX_RANK) fail(r, at, "%s has more than %d entries", what, TG_MAX_RANK);
    if (!(at < r->eol && is_digit(*at)))
      fail(r, at, "expected an axis number in %s, found %s", what,
           describe(r, at, buf, sizeof buf));
    int64_t a = read_int(r, false, INT_MAX, "an axis");
    if (a >= TG_MAX_RANK) fail(r, at, "axis %lld is outside 0..%d", (long long)a, TG_MAX_RANK - 1);
    v[n++] = (int)a;
  } while (accept(r, ','));
  expect(r, ']', "to close the list");
  return n;
}

static void read_axes(reader *r, tg_node *n) {
  int v[TG_MAX_RANK];
  const char *at = (skip_space(r), r->p);
  int k = read_axis_list(r, v, "axes");
  for (int i = 1; i < k; i++)
    if (v[i] <= v[i - 1]) fail(r, at, "axes must be listed in increasing order without repeats");
  for (int i = 0; i < k; i++) n->axes |= 1u << v[i];
}

static void read_perm(reader *r, tg_node *n) {
  const char *at = (skip_space(r), r->p);
  int k = read_axis_list(r, n->perm, "perm");
  int rank = n->in[0]->type.rank;
  if (k != rank)
    fail(r, at, "perm has %d entr%s but the input has rank %d", k, k == 1 ? "y" : "ies", rank);
}

static int read_axis(reader *r) { return (int)read_int(r, true, INT_MAX, "an axis"); }

/* The "{...}" part: present exactly when the op's attribute kind needs it. */
static void read_attrs(reader *r, tg_node *n) {
  const char *op = tg_ops[n->op].name;
  tg_attr_kind kind = tg_ops[n->op].attr;
  static const char *const forms[] = {
      [TG_ATTR_INIT] = "{init=...}",   [TG_ATTR_VALUE] = "{value=...}",
      [TG_ATTR_AXIS] = "{axis=...}",   [TG_ATTR_AXES] = "{axes=[...]}",
      [TG_ATTR_PERM] = "{perm=[...]}", [TG_ATTR_SLICE] = "{axis=..., start=..., len=...}",
      [TG_ATTR_RANKS] = "{ranks=...}"};
  bool needs = kind != TG_ATTR_NONE && kind != TG_ATTR_NAME && kind != TG_ATTR_DTYPE;
  bool has = peek(r, '{');
  char buf[128];
  if (!needs && has) fail(r, r->p, "%s takes no attributes", op);
  if (!needs) return;
  if (!has)
    fail(r, r->p, "expected %s's attributes %s, found %s", op, forms[kind],
         describe(r, r->p, buf, sizeof buf));
  r->p++;
  switch (kind) {
  case TG_ATTR_INIT:
    expect_key(r, op, "init");
    read_init(r, n);
    break;
  case TG_ATTR_VALUE:
    expect_key(r, op, "value");
    n->value = read_number(r, "a value");
    break;
  case TG_ATTR_AXIS:
    expect_key(r, op, "axis");
    n->axis = read_axis(r);
    break;
  case TG_ATTR_RANKS:
    expect_key(r, op, "ranks");
    n->ranks = (int)read_int(r, false, INT_MAX, "a rank count");
    if (accept(r, ',')) {
      expect_key(r, op, "over");
      size_t k = ident_len(r);
      char buf[128];
      if (!ident_is(r->p, k, "tensor"))
        fail(r, r->p, "expected over=tensor (a collective of the mesh's tensor axis), found %s",
             describe(r, r->p, buf, sizeof buf));
      r->p += k;
      n->over_tensor = true;
    }
    break;
  case TG_ATTR_AXES:
    expect_key(r, op, "axes");
    read_axes(r, n);
    break;
  case TG_ATTR_PERM:
    expect_key(r, op, "perm");
    read_perm(r, n);
    break;
  case TG_ATTR_SLICE:
    expect_key(r, op, "axis");
    n->axis = read_axis(r);
    expect(r, ',', "after the axis");
    expect_key(r, op, "start");
    n->start = read_int(r, true, TG_MAX_ELEMS, "a start");
    expect(r, ',', "after the start");
    expect_key(r, op, "len");
    n->len = read_int(r, true, TG_MAX_ELEMS, "a length");
    break;
  default: break;
  }
  expect(r, '}', "to close the attributes");
}

/* ---- lines ---------------------------------------------------------------- */

/* "%K" naming an existing node. */
static tg_node *read_ref(reader *r) {
  char buf[128];
  skip_space(r);
  const char *at = r->p;
  if (!accept(r, '%'))
    fail(r, at, "expected a node such as %%3, found %s", describe(r, at, buf, sizeof buf));
  int64_t k = digits(r, &r->p, r->eol, r->p, INT_MAX, "a node number");
  if (k >= r->g->n_nodes) fail(r, at, "%%%lld is not defined yet", (long long)k);
  return r->g->nodes[k];
}

static void push_arg(reader *r, int i, tg_node *n) {
  if (i == r->cap_args) {
    int cap = r->cap_args ? r->cap_args * 2 : 16;
    tg_node **a = tg_alloc(r->ctx->arena, sizeof *a * (size_t)cap);
    if (i) memcpy(a, r->args, sizeof *a * (size_t)i);
    r->args = a;
    r->cap_args = cap;
  }
  r->args[i] = n;
}

/* "@ FILE:LINE:COL" to the end of the line.  The file is everything before
 * the last two ":N" groups, so it may hold colons and spaces itself. */
static tg_loc read_loc(reader *r) {
  const char *at = r->p;
  r->p++;
  skip_space(r);
  const char *s = r->p, *e = r->eol;
  while (e > s && is_space(e[-1])) e--;
  const char *q = e;
  while (q > s && is_digit(q[-1])) q--;
  const char *colp = q;
  if (colp == e || q == s || q[-1] != ':')
    fail(r, at, "expected a location FILE:LINE:COL after '@'");
  const char *lend = --q;
  while (q > s && is_digit(q[-1])) q--;
  const char *linep = q;
  if (linep == lend || q == s || q[-1] != ':')
    fail(r, at, "expected a location FILE:LINE:COL after '@'");
  size_t flen = (size_t)(q - 1 - s);
  if (flen == 0) fail(r, s, "the location has no file name");
  /* The printer writes the path raw, so it must be plain text. */
  for (const char *c = s; c < s + flen; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f)
      fail(r, c, "control byte 0x%02x in the location's file name", (unsigned char)*c);
  tg_loc loc;
  loc.line = (int)digits(r, &linep, lend, linep, INT_MAX, "a line number");
  loc.col = (int)digits(r, &colp, e, colp, INT_MAX, "a column number");
  if (!r->last_file || !ident_is(s, flen, r->last_file))
    r->last_file = tg_strndup(r->ctx->arena, s, flen);
  loc.file = r->last_file;
  r->p = r->eol;
  return loc;
}

/* The optional " in kN" that puts a node in a declared kernel. */
static void read_kernel_ref(reader *r, tg_node *n) {
  skip_space(r);
  const char *at = r->p;
  size_t k = ident_len(r);
  if (!ident_is(at, k, "in")) return;
  r->p += k;
  skip_space(r);
  const char *kp = r->p;
  if (!accept(r, 'k')) fail(r, kp, "expected a kernel kN after 'in'");
  int64_t id = digits(r, &r->p, r->eol, r->p, INT_MAX, "a kernel number");
  if (id >= r->g->n_kernels)
    fail(r, kp, "kernel k%lld is not declared (kernel lines come before the nodes)", (long long)id);
  n->kernel = (int)id;
}

/* kernel kN KIND "NAME": declares the next kernel. */
static void read_kernel_decl(reader *r) {
  char buf[128];
  skip_space(r);
  const char *kp = r->p;
  if (!accept(r, 'k')) fail(r, kp, "expected kN after 'kernel'");
  int64_t id = digits(r, &r->p, r->eol, r->p, INT_MAX, "a kernel number");
  if (id != r->g->n_kernels)
    fail(r, kp, "expected k%d, found k%lld (kernels are numbered in order)", r->g->n_kernels,
         (long long)id);
  skip_space(r);
  const char *at = r->p;
  size_t m = ident_len(r);
  tg_kernel_kind kind;
  if (!tg_kernel_kind_parse(at, m, &kind))
    fail(r, at, "unknown kernel kind %s", describe(r, at, buf, sizeof buf));
  r->p += m;
  skip_space(r);
  const char *name = read_string(r, "the kernel's name");
  tg_graph_add_kernel(r->g, name, kind);
  expect_eol(r, "the kernel line");
}

static void read_node(reader *r) {
  tg_graph *g = r->g;
  char buf[128], sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
  const char *idp = r->p++;
  int64_t id = digits(r, &r->p, r->eol, r->p, INT_MAX, "a node number");
  if (id != g->n_nodes)
    fail(r, idp, "expected %%%d, found %%%lld (nodes are numbered in order)", g->n_nodes,
         (long long)id);
  if (g->n_nodes >= r->ctx->node_limit)
    fail(r, idp, "the graph has more than %lld nodes, the limit", (long long)r->ctx->node_limit);
  expect(r, '=', "after the node number");

  size_t k = ident_len(r);
  const char *opp = r->p;
  tg_op op;
  if (!k)
    fail(r, opp, "expected an op name after '=', found %s", describe(r, opp, buf, sizeof buf));
  if (!tg_op_lookup(opp, k, &op)) fail(r, opp, "unknown op '%.*s'", k > 24 ? 24 : (int)k, opp);
  r->p += k;
  tg_node *n = tg_node_new(g, op, (tg_loc){0});
  n->phase = r->phase;

  int nin = 0;
  if (peek(r, '%')) {
    do {
      if (nin == INT_MAX) fail(r, r->p, "too many inputs");
      push_arg(r, nin, read_ref(r));
      nin++;
    } while (accept(r, ','));
  }
  int arity = tg_ops[op].arity;
  if (arity >= 0 && nin != arity)
    fail(r, opp, "%s takes %d input%s, got %d", tg_ops[op].name, arity, arity == 1 ? "" : "s", nin);
  if (arity < 0 && nin < 1) fail(r, opp, "%s needs at least one input", tg_ops[op].name);
  tg_node_set_inputs(g, n, nin, r->args);
  read_attrs(r, n);

  skip_space(r);
  if (!accept(r, ':'))
    fail(r, r->p, "expected ':' before the type, found %s", describe(r, r->p, buf, sizeof buf));
  skip_space(r);
  const char *typep = r->p;
  tg_type t = read_type(r);
  if (peek(r, '"')) n->name = read_string(r, "a name");
  read_kernel_ref(r, n);
  if (peek(r, '@')) n->loc = read_loc(r);
  expect_eol(r, "the node line");

  n->type = t;
  tg_type inferred;
  char why[600];
  if (!tg_infer_type(n, &inferred, why, sizeof why)) fail(r, opp, "%s", why);
  if (!tg_type_equal(&inferred, &t))
    fail(r, typep, "type says %s but %s of its inputs gives %s", tg_type_str(&t, sa, sizeof sa),
         tg_ops[op].name, tg_type_str(&inferred, sb, sizeof sb));
  if (!n->name && (op == TG_OP_input || op == TG_OP_param || op == TG_OP_state))
    fail(r, opp, "%s needs a name: weights and batches are matched by it", tg_ops[op].name);
  const char *err = tg_graph_add(g, n);
  if (err) fail(r, opp, "%s", err);
  n->type = t; /* the printed type, with its symbols */
}

static void read_config(reader *r) {
  char buf[128];
  size_t k = ident_len(r);
  const char *at = r->p;
  if (!k) fail(r, at, "expected a config name, found %s", describe(r, at, buf, sizeof buf));
  char *name = tg_strndup(r->ctx->arena, at, k);
  double old;
  if (tg_graph_get_config(r->g, name, &old)) fail(r, at, "config '%s' is set twice", name);
  r->p += k;
  expect(r, '=', "after the config name");
  double v = read_number(r, "a number");
  expect_eol(r, "the config line");
  tg_graph_set_config(r->g, name, v);
}

static void read_output(reader *r) {
  const char *name = read_string(r, "the output's name");
  expect(r, '=', "after the output's name");
  tg_node *n = read_ref(r);
  expect_eol(r, "the output line");
  tg_graph_add_output(r->g, name, n);
}

/* Moves to section s, refusing to go back to an earlier one. */
static void enter(reader *r, int s, const char *at, const char *rule) {
  if (r->section > s) fail(r, at, "%s", rule);
  r->section = s;
}

static void read_line(reader *r) {
  char buf[128];
  skip_space(r);
  const char *at = r->p;
  if (r->p >= r->eol || *r->p == '#') return;
  if (*r->p == '%') {
    enter(r, AT_NODES, at, "nodes must come before the output lines");
    read_node(r);
    return;
  }
  size_t k = ident_len(r);
  if (ident_is(at, k, "source")) {
    enter(r, AT_SOURCE, at, "the source line must come before config lines and nodes");
    if (r->g->source) fail(r, at, "a second source line");
    r->p += k;
    r->g->source = read_string(r, "the source file name");
    expect_eol(r, "the source line");
  } else if (ident_is(at, k, "config")) {
    enter(r, AT_CONFIG, at, "config lines must come before the nodes");
    r->p += k;
    read_config(r);
  } else if (ident_is(at, k, "phase")) {
    enter(r, AT_NODES, at, "phase lines must come before the output lines");
    r->p += k;
    skip_space(r);
    const char *name = r->p;
    size_t m = ident_len(r);
    if (!tg_phase_parse(name, m, &r->phase))
      fail(r, name, "unknown phase %s (forward, backward or optimizer)",
           describe(r, name, buf, sizeof buf));
    r->p += m;
    expect_eol(r, "the phase line");
  } else if (ident_is(at, k, "kernel")) {
    enter(r, AT_CONFIG, at, "kernel lines must come before the nodes");
    r->p += k;
    read_kernel_decl(r);
  } else if (ident_is(at, k, "output")) {
    enter(r, AT_OUTPUTS, at, "");
    r->p += k;
    read_output(r);
  } else {
    fail(r, at, "expected a node (%%N = ...), 'source', 'config', 'phase' or 'output' line, found %s",
         describe(r, at, buf, sizeof buf));
  }
}

static void read_header(reader *r) {
  static const char magic[] = "# tg IR ";
  while (r->eol > r->bol && is_space(r->eol[-1])) r->eol--;
  size_t n = (size_t)(r->eol - r->bol), m = sizeof magic - 1;
  if (n >= m && memcmp(r->bol, magic, m) == 0) {
    if (n == m + 1 && r->bol[m] == '1') return;
    char buf[128];
    fail(r, r->bol + m, "unsupported IR version %s (this reader knows version 1)",
         describe(r, r->bol + m, buf, sizeof buf));
  }
  fail(r, r->bol, "expected '# tg IR 1' on the first line: this is not tg IR text");
}

tg_graph *tg_read_ir(tg_ctx *ctx, const tg_source *src) {
  reader r = {.ctx = ctx, .src = src, .g = tg_graph_new(ctx->arena), .section = AT_HEADER};
  const char *p = src->text ? src->text : "", *end = p + (src->text ? src->len : 0);
  do {
    const char *nl = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
    r.line++;
    r.bol = r.p = p;
    r.eol = nl ? nl : end;
    if (r.eol > r.bol && r.eol[-1] == '\r') r.eol--;
    if (r.line == 1)
      read_header(&r);
    else
      read_line(&r);
    p = nl ? nl + 1 : end;
  } while (p < end);
  if (r.g->n_kernels) tg_kernels_derive(r.g);
  /* What the reader accepts, the verifier accepts: it alone knows the
   * rules about the graph as a whole (unique names). */
  if (!tg_verify(ctx, r.g)) {
    tg_graph_free(r.g);
    tg_bail(ctx);
  }
  return r.g;
}
