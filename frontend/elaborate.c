/* elaborate.c: gives a parsed .tg file its meaning, producing IR.
 *
 * Elaboration is evaluation at compile time.  Config constants and loop
 * counters are numbers; everything computed from inputs and parameters is a
 * tensor, i.e. an IR node.  Blocks are expanded inline at every call (so
 * each layer gets its own nodes and parameters), `for` loops are unrolled,
 * and arithmetic on numbers is folded.  The result is a flat forward graph
 * whose parameters carry hierarchical names such as h.3.attn.c_attn.weight.
 *
 * Scoping: a block body sees its arguments, its own assignments and
 * parameters, the names bound by its argument patterns, and then the top
 * level (top-level variables and parameters, config constants, builtins).
 * A call `ln_1.layernorm(x)` runs layernorm with parameter prefix "ln_1"
 * appended to the caller's; `h[i].layer(x)` appends "h.<i>". */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "elaborate.h"
#include "nearest.h"

typedef enum vkind { V_NONE, V_NUM, V_TENSOR, V_LIST } vkind;

typedef struct value {
  vkind kind;
  double num;        /* V_NUM */
  const char *sym;   /* V_NUM: the config constant it is, if it is one */
  tg_node *node;     /* V_TENSOR */
  struct value *items; /* V_LIST */
  int n;
} value;

typedef struct binding {
  const char *name;
  value v;
  tg_loc loc;
  struct binding *next;
  const char *given; /* config constants: where a value from outside the file
                        came from ("-D n_layer=-1"); NULL for the file's own */
} binding;

/* Names of one scope: a list (in order of definition, newest first, for
 * suggestions) and an open-addressing index over it, so that looking a name
 * up costs the same in a file of ten names or of a hundred thousand. */
typedef struct scope {
  binding *list;
  binding **slots; /* in the arena; NULL until the first name */
  int cap, n;
} scope;

typedef struct frame {
  scope vars;
  const char *prefix;    /* parameter name prefix, "" at top level */
  const tg_stmt *block;  /* the block being expanded; NULL at top level */
  const tg_arg *binding; /* the argument being bound, while binding */
  tg_loc call_loc;       /* where it was called from */
  struct frame *caller;
  bool returned;
  value ret;
} frame;

typedef struct param_entry {
  const char *name;
  tg_loc loc;
} param_entry;

typedef struct elab {
  tg_ctx *ctx;
  tg_graph *g;
  const tg_compile_opts *opts;
  const tg_stmt **blocks; /* every block definition, from every file */
  int n_blocks, cap_blocks;
  scope config;           /* config constants */
  scope outputs;          /* names declared with output */
  bool *define_used;      /* per -D: did a config entry take it? */
  tg_loc first_config;    /* where -D errors point */
  param_entry *params;    /* open-addressing hash of parameter names */
  int params_cap, n_params;
  const char **imported;  /* files already imported, by file_identity */
  int n_imported, cap_imported;
  frame top, *cur;
  int depth;
  int nesting;            /* calls of eval and exec in progress */
  int64_t steps;
} elab;

/* ---- errors -------------------------------------------------------------- */

static bool same_loc(tg_loc a, tg_loc b) {
  return a.line == b.line && a.col == b.col && a.file && b.file && !strcmp(a.file, b.file);
}

/* Prints a note for every block expansion that led to an error at loc
 * (innermost first); while an argument is being bound, also where the
 * block declares it. */
static void call_notes(elab *E, tg_loc loc) {
  for (frame *f = E->cur; f && f->block; f = f->caller) {
    if (f->binding)
      tg_report(E->ctx, "note", f->binding->loc, "block '%s' declares argument '%s' here",
                f->block->names[0], f->binding->name);
    if (!same_loc(loc, f->call_loc))
      tg_report(E->ctx, "note", f->call_loc, "in block '%s' called here", f->block->names[0]);
  }
}

/* Reports an error at loc with the call notes, then bails. */
__attribute__((format(printf, 3, 4))) _Noreturn static void fail(elab *E, tg_loc loc,
                                                                 const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tg_vreport(E->ctx, "error", loc, fmt, ap);
  va_end(ap);
  call_notes(E, loc);
  tg_bail(E->ctx);
}

/* The same, for a name defined twice: a note points at the first one. */
__attribute__((format(printf, 4, 5))) _Noreturn static void fail_twice(elab *E, tg_loc loc,
                                                                       tg_loc first,
                                                                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tg_vreport(E->ctx, "error", loc, fmt, ap);
  va_end(ap);
  tg_report(E->ctx, "note", first, "first defined here");
  call_notes(E, loc);
  tg_bail(E->ctx);
}

static void step(elab *E, tg_loc loc) {
  if (++E->steps > E->ctx->step_limit)
    fail(E, loc, "elaboration takes more than %lld steps; is a loop bound too large?",
         (long long)E->ctx->step_limit);
}

/* Every recursion of the elaborator passes through eval or exec, so bounding
 * how deeply they nest bounds the C stack.  Without it a deeply nested input
 * (a[a[a[...]]], exp(exp(...)), or a long chain of '+', which the parser
 * takes in a flat loop but which is a tree as deep as it is long) overflows
 * the stack and crashes instead of failing with a message. */
enum { MAX_NESTING = 1000 };

static void enter(elab *E, tg_loc loc) {
  if (++E->nesting > MAX_NESTING)
    fail(E, loc, "expressions and statements nested more than %d deep; split long "
         "expressions with assignments", MAX_NESTING);
}

static const char *value_kind_name(const value *v) {
  switch (v->kind) {
  case V_NUM: return "a number";
  case V_TENSOR: return "a tensor";
  case V_LIST: return "a list";
  default: return "nothing";
  }
}

/* ---- names ---------------------------------------------------------------- */

static void grow_array(void **p, int n, int *cap, size_t elem) {
  if (n < *cap) return;
  *cap = *cap ? 2 * *cap : 16;
  void *q = realloc(*p, (size_t)*cap * elem);
  if (!q) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  *p = q;
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static binding *find_in(const scope *s, const char *name) {
  if (!s->n) return NULL;
  size_t mask = (size_t)s->cap - 1;
  for (size_t j = hash_str(name) & mask; s->slots[j]; j = (j + 1) & mask)
    if (strcmp(s->slots[j]->name, name) == 0) return s->slots[j];
  return NULL;
}

/* Adds a binding the scope does not have yet. */
static void scope_add(elab *E, scope *s, binding *b) {
  if (2 * (s->n + 1) > s->cap) {
    int cap = s->cap ? 2 * s->cap : 16;
    binding **slots = tg_alloc(E->ctx->arena, sizeof *slots * (size_t)cap);
    for (binding *o = s->list; o; o = o->next) {
      size_t j = hash_str(o->name) & (size_t)(cap - 1);
      while (slots[j]) j = (j + 1) & (size_t)(cap - 1);
      slots[j] = o;
    }
    s->slots = slots;
    s->cap = cap;
  }
  b->next = s->list;
  s->list = b;
  size_t j = hash_str(b->name) & (size_t)(s->cap - 1);
  while (s->slots[j]) j = (j + 1) & (size_t)(s->cap - 1);
  s->slots[j] = b;
  s->n++;
}

static void bind(elab *E, frame *f, const char *name, value v, tg_loc loc) {
  binding *b = find_in(&f->vars, name);
  if (!b) {
    b = tg_alloc(E->ctx->arena, sizeof *b);
    b->name = name;
    scope_add(E, &f->vars, b);
  }
  b->v = v;
  b->loc = loc;
}

static const char *const builtin_consts[] = {"inf", "pi"};

static bool lookup(elab *E, const char *name, value *out) {
  binding *b = find_in(&E->cur->vars, name);
  if (!b && E->cur != &E->top) b = find_in(&E->top.vars, name);
  if (!b) b = find_in(&E->config, name);
  if (b) {
    *out = b->v;
    return true;
  }
  double c;
  if (strcmp(name, "inf") == 0) c = INFINITY;
  else if (strcmp(name, "pi") == 0) c = 3.14159265358979323846;
  else return false;
  *out = (value){.kind = V_NUM, .num = c};
  return true;
}

/* Collects every name visible from the current frame, for suggestions. */
static int visible_names(elab *E, const char **out, int max) {
  int n = 0;
  binding *lists[3] = {E->cur->vars.list, E->cur != &E->top ? E->top.vars.list : NULL,
                       E->config.list};
  for (int l = 0; l < 3; l++)
    for (binding *b = lists[l]; b && n < max; b = b->next) out[n++] = b->name;
  for (size_t i = 0; i < sizeof builtin_consts / sizeof *builtin_consts && n < max; i++)
    out[n++] = builtin_consts[i];
  return n;
}

static const char *did_you_mean(elab *E, const char *name, const char *const *known, int n) {
  const char *s = tg_nearest(name, known, n);
  return s ? tg_sprintf(E->ctx->arena, " (did you mean '%s'?)", s) : "";
}

/* ---- parameters' names ------------------------------------------------------ */


/* Registers a full parameter name; fails if it was declared before. */
static void claim_param_name(elab *E, const char *name, tg_loc loc) {
  if (2 * (E->n_params + 1) > E->params_cap) {
    int cap = E->params_cap ? 2 * E->params_cap : 256;
    param_entry *t = calloc((size_t)cap, sizeof *t);
    if (!t) {
      fprintf(stderr, "tg: out of memory\n");
      exit(1);
    }
    for (int i = 0; i < E->params_cap; i++)
      if (E->params[i].name) {
        size_t j = hash_str(E->params[i].name) & (size_t)(cap - 1);
        while (t[j].name) j = (j + 1) & (size_t)(cap - 1);
        t[j] = E->params[i];
      }
    free(E->params);
    E->params = t;
    E->params_cap = cap;
  }
  size_t mask = (size_t)E->params_cap - 1, j = hash_str(name) & mask;
  for (; E->params[j].name; j = (j + 1) & mask)
    if (strcmp(E->params[j].name, name) == 0) {
      fail_twice(E, loc, E->params[j].loc,
                 "parameter '%s' is declared twice; give each call of a block with "
                 "parameters its own scope, e.g. ln_1.layernorm(x)",
                 name);
    }
  E->params[j] = (param_entry){name, loc};
  E->n_params++;
}

/* ---- building nodes --------------------------------------------------------- */

static tg_node *add_node(elab *E, tg_node *n) {
  if (E->g->n_nodes >= E->ctx->node_limit)
    fail(E, n->loc, "the graph grows beyond %lld nodes; is a loop bound too large?",
         (long long)E->ctx->node_limit);
  const char *why = tg_graph_add(E->g, n);
  if (why) fail(E, n->loc, "%s", why);
  return n;
}

static tg_node *node1(elab *E, tg_op op, tg_loc loc, tg_node *a) {
  tg_node *n = tg_node_new(E->g, op, loc);
  tg_node_set_inputs(E->g, n, 1, &a);
  return n;
}

static tg_node *build(elab *E, tg_op op, tg_loc loc, int nin, tg_node **in) {
  tg_node *n = tg_node_new(E->g, op, loc);
  tg_node_set_inputs(E->g, n, nin, in);
  return add_node(E, n);
}

static tg_node *make_const(elab *E, double v, tg_dtype dtype, tg_loc loc) {
  if (dtype == TG_I32 && (v != floor(v) || fabs(v) > 2147483647.0))
    fail(E, loc, "the number %g cannot be combined with an i32 tensor (not an integer)", v);
  if (dtype == TG_BOOL) fail(E, loc, "a number cannot be combined with a bool tensor");
  tg_node *n = tg_node_new(E->g, TG_OP_const, loc);
  n->value = v;
  n->type.dtype = dtype;
  return add_node(E, n);
}

/* A value used as a tensor: numbers become constants of the given dtype. */
static tg_node *as_tensor(elab *E, value v, tg_dtype dtype, tg_loc loc, const char *what) {
  if (v.kind == V_TENSOR) return v.node;
  if (v.kind == V_NUM) return make_const(E, v.num, dtype, loc);
  fail(E, loc, "%s must be a tensor or a number, not %s", what, value_kind_name(&v));
}

static tg_node *need_tensor(elab *E, value v, tg_loc loc, const char *what) {
  if (v.kind != V_TENSOR) fail(E, loc, "%s must be a tensor, not %s", what, value_kind_name(&v));
  return v.node;
}

static double need_num(elab *E, value v, tg_loc loc, const char *what) {
  if (v.kind != V_NUM) fail(E, loc, "%s must be a number known at compile time, not %s", what,
                            value_kind_name(&v));
  return v.num;
}

static int64_t need_int(elab *E, value v, tg_loc loc, const char *what, int64_t lo, int64_t hi) {
  double d = need_num(E, v, loc, what);
  if (d != floor(d) || d < (double)lo || d > (double)hi)
    fail(E, loc, "%s must be an integer in %lld..%lld, not %g", what, (long long)lo,
         (long long)hi, d);
  return (int64_t)d;
}

static tg_dim need_dim(elab *E, value v, tg_loc loc) {
  int64_t size = need_int(E, v, loc, "a dimension", 1, TG_MAX_ELEMS);
  return (tg_dim){size, v.sym};
}

static int need_axis(elab *E, value v, int rank, tg_loc loc) {
  if (rank == 0) fail(E, loc, "a scalar has no axes");
  int64_t a = need_int(E, v, loc, "an axis", -rank, rank - 1);
  return (int)(a < 0 ? a + rank : a);
}

static tg_dtype need_dtype(elab *E, const char *name, tg_loc loc) {
  tg_dtype t;
  if (!name || !tg_dtype_parse(name, strlen(name), &t))
    fail(E, loc, "unknown dtype '%s' (expected f32, bf16, f16, i32 or bool)", name ? name : "");
  return t;
}

/* ---- expressions -------------------------------------------------------------- */

static value eval(elab *E, const tg_expr *e);
static value call(elab *E, const tg_expr *e);

/* "h.3.attn": a path's text with its indices evaluated. */
static const char *path_text(elab *E, const tg_path *p, int nsegs) {
  size_t cap = 64, len = 0;
  char *buf = tg_alloc(E->ctx->arena, cap);
  for (int i = 0; i < nsegs; i++) {
    const tg_seg *s = &p->segs[i];
    char idx[32] = "";
    if (s->index) {
      value v = eval(E, s->index);
      snprintf(idx, sizeof idx, ".%lld",
               (long long)need_int(E, v, s->index->loc, "an index", 0, 1 << 30));
    }
    size_t need = len + strlen(s->name) + strlen(idx) + 2;
    if (need > cap) {
      char *nb = tg_alloc(E->ctx->arena, 2 * need);
      memcpy(nb, buf, len);
      buf = nb;
      cap = 2 * need;
    }
    len += (size_t)sprintf(buf + len, "%s%s%s", i ? "." : "", s->name, idx);
  }
  return buf;
}

static value eval_name(elab *E, const tg_expr *e) {
  const char *name = path_text(E, &e->path, e->path.n);
  value v;
  if (lookup(E, name, &v)) return v;
  /* In the arena, not on the stack: eval_name recurses (a[b[c]]), and a
   * frame this big on every level would overflow the stack long before
   * MAX_NESTING is reached. */
  const char **known = tg_alloc(E->ctx->arena, 512 * sizeof *known);
  int n = visible_names(E, known, 512);
  fail(E, e->loc, "unknown name '%s'%s", name, did_you_mean(E, name, known, n));
}

static tg_op binary_op(int op) {
  switch (op) {
  case '+': return TG_OP_add;
  case '-': return TG_OP_sub;
  case '*': return TG_OP_mul;
  case '/': return TG_OP_div;
  case '@': return TG_OP_matmul;
  case '<': return TG_OP_lt;
  case '>': return TG_OP_gt;
  case TG_TOK_LE: return TG_OP_le;
  case TG_TOK_GE: return TG_OP_ge;
  case TG_TOK_EQ: return TG_OP_eq;
  default: return TG_OP_ne;
  }
}

static double fold_binary(tg_op op, double a, double b) {
  switch (op) {
  case TG_OP_add: return a + b;
  case TG_OP_sub: return a - b;
  case TG_OP_mul: return a * b;
  case TG_OP_div: return a / b;
  case TG_OP_maximum: return a > b ? a : b;
  case TG_OP_lt: return a < b;
  case TG_OP_le: return a <= b;
  case TG_OP_gt: return a > b;
  case TG_OP_ge: return a >= b;
  case TG_OP_eq: return a == b;
  default: return a != b;
  }
}

/* a op b on numbers or tensors; numbers take the other side's dtype. */
static value apply_binary(elab *E, tg_op op, value a, value b, tg_loc loc) {
  const char *opname = tg_ops[op].name;
  if (a.kind == V_NUM && b.kind == V_NUM) {
    if (op == TG_OP_matmul) fail(E, loc, "'@' needs tensors, not numbers");
    return (value){.kind = V_NUM, .num = fold_binary(op, a.num, b.num)};
  }
  if (op == TG_OP_matmul) {
    tg_node *in[2] = {need_tensor(E, a, loc, "the left side of '@'"),
                      need_tensor(E, b, loc, "the right side of '@'")};
    return (value){.kind = V_TENSOR, .node = build(E, op, loc, 2, in)};
  }
  if (a.kind != V_TENSOR && b.kind != V_TENSOR)
    fail(E, loc, "%s of %s and %s", opname, value_kind_name(&a), value_kind_name(&b));
  tg_dtype dt = (a.kind == V_TENSOR ? a.node : b.node)->type.dtype;
  tg_node *in[2] = {as_tensor(E, a, dt, loc, "an operand"), as_tensor(E, b, dt, loc, "an operand")};
  return (value){.kind = V_TENSOR, .node = build(E, op, loc, 2, in)};
}

/* a % b: numbers only, for the checks of config constants (n_embd % n_head
 * == 0, n_layer % 1 == 0); the IR has no remainder, and a tensor's would
 * have no gradient.  fmod's: the sign of a, and NaN for b = 0, which
 * compares unequal to everything, so an assert on it fails. */
static value remainder_of(elab *E, value a, value b, tg_loc loc) {
  if (a.kind != V_NUM || b.kind != V_NUM)
    fail(E, loc, "'%%' needs numbers known at compile time, not %s and %s", value_kind_name(&a),
         value_kind_name(&b));
  return (value){.kind = V_NUM, .num = fmod(a.num, b.num)};
}

static value eval_expr(elab *E, const tg_expr *e) {
  switch (e->kind) {
  case TG_E_NUM:
    return (value){.kind = V_NUM, .num = e->num};
  case TG_E_NAME:
    return eval_name(E, e);
  case TG_E_CALL:
    return call(E, e);
  case TG_E_UNARY: {
    value v = eval(E, e->lhs);
    if (v.kind == V_NUM) return (value){.kind = V_NUM, .num = -v.num};
    tg_node *x = need_tensor(E, v, e->loc, "the operand of '-'");
    return (value){.kind = V_TENSOR, .node = build(E, TG_OP_neg, e->loc, 1, &x)};
  }
  case TG_E_BINARY: {
    value a = eval(E, e->lhs), b = eval(E, e->rhs);
    if (e->op == '%') return remainder_of(E, a, b, e->loc);
    return apply_binary(E, binary_op(e->op), a, b, e->loc);
  }
  case TG_E_LIST: {
    value v = {.kind = V_LIST, .n = e->args.n};
    v.items = tg_alloc(E->ctx->arena, sizeof *v.items * (size_t)(e->args.n ? e->args.n : 1));
    for (int i = 0; i < e->args.n; i++) v.items[i] = eval(E, e->args.items[i]);
    return v;
  }
  }
  fail(E, e->loc, "internal error: unknown expression kind");
}

static value eval(elab *E, const tg_expr *e) {
  step(E, e->loc);
  enter(E, e->loc);
  value v = eval_expr(E, e);
  E->nesting--;
  return v;
}

/* ---- builtins ------------------------------------------------------------------- */

typedef struct builtin {
  const char *name;
  int min_args, max_args;
  value (*fn)(elab *E, const tg_expr *e, value *args, int n);
  const char *usage;
} builtin;

static tg_loc arg_loc(const tg_expr *e, int i) { return e->args.items[i]->loc; }

static value unary_math(elab *E, const tg_expr *e, value *args, tg_op op) {
  if (args[0].kind == V_NUM) {
    double x = args[0].num, r;
    switch (op) {
    case TG_OP_exp: r = exp(x); break;
    case TG_OP_log: r = log(x); break;
    case TG_OP_sqrt: r = sqrt(x); break;
    case TG_OP_rsqrt: r = 1.0 / sqrt(x); break;
    default: r = tanh(x); break;
    }
    return (value){.kind = V_NUM, .num = r};
  }
  tg_node *x = need_tensor(E, args[0], arg_loc(e, 0), "the argument");
  return (value){.kind = V_TENSOR, .node = build(E, op, e->loc, 1, &x)};
}

static value b_exp(elab *E, const tg_expr *e, value *a, int n) { (void)n; return unary_math(E, e, a, TG_OP_exp); }
static value b_log(elab *E, const tg_expr *e, value *a, int n) { (void)n; return unary_math(E, e, a, TG_OP_log); }
static value b_sqrt(elab *E, const tg_expr *e, value *a, int n) { (void)n; return unary_math(E, e, a, TG_OP_sqrt); }
static value b_rsqrt(elab *E, const tg_expr *e, value *a, int n) { (void)n; return unary_math(E, e, a, TG_OP_rsqrt); }
static value b_tanh(elab *E, const tg_expr *e, value *a, int n) { (void)n; return unary_math(E, e, a, TG_OP_tanh); }

static value b_maximum(elab *E, const tg_expr *e, value *a, int n) {
  (void)n;
  return apply_binary(E, TG_OP_maximum, a[0], a[1], e->loc);
}

static value b_where(elab *E, const tg_expr *e, value *a, int n) {
  (void)n;
  tg_node *c = need_tensor(E, a[0], arg_loc(e, 0), "where's condition");
  tg_dtype dt = a[1].kind == V_TENSOR ? a[1].node->type.dtype
                : a[2].kind == V_TENSOR ? a[2].node->type.dtype : TG_F32;
  tg_node *in[3] = {c, as_tensor(E, a[1], dt, arg_loc(e, 1), "where's second argument"),
                    as_tensor(E, a[2], dt, arg_loc(e, 2), "where's third argument")};
  return (value){.kind = V_TENSOR, .node = build(E, TG_OP_where, e->loc, 3, in)};
}

/* sum(x) / max(x) over everything gives a scalar; with an axis or a list of
 * axes the reduced axes stay, with size 1, so the result broadcasts back. */
static value reduce(elab *E, const tg_expr *e, value *a, int n, tg_op op) {
  tg_node *x = need_tensor(E, a[0], arg_loc(e, 0), "the argument");
  int rank = x->type.rank;
  uint32_t axes = 0;
  if (n == 1) {
    if (rank == 0) return a[0];
    axes = (1u << rank) - 1;
  } else if (a[1].kind == V_LIST) {
    for (int i = 0; i < a[1].n; i++) axes |= 1u << need_axis(E, a[1].items[i], rank, arg_loc(e, 1));
  } else {
    axes = 1u << need_axis(E, a[1], rank, arg_loc(e, 1));
  }
  if (!axes) fail(E, arg_loc(e, 1), "%s over an empty list of axes", tg_ops[op].name);
  tg_node *r = node1(E, op, e->loc, x);
  r->axes = axes;
  add_node(E, r);
  if (n == 1) { /* drop the kept axes: a scalar */
    tg_node *s = node1(E, TG_OP_reshape, e->loc, r);
    s->type = (tg_type){.dtype = r->type.dtype, .rank = 0};
    r = add_node(E, s);
  }
  return (value){.kind = V_TENSOR, .node = r};
}

static value b_sum(elab *E, const tg_expr *e, value *a, int n) { return reduce(E, e, a, n, TG_OP_sum); }
static value b_max(elab *E, const tg_expr *e, value *a, int n) { return reduce(E, e, a, n, TG_OP_max); }

/* Reads a list of dims ([B, T, C / n_head]); one entry may be -1, meaning
 * "whatever makes the element count match" (only when numel is given). */
static tg_type shape_from(elab *E, value v, tg_loc loc, tg_dtype dt, int64_t numel) {
  if (v.kind != V_LIST) fail(E, loc, "a shape must be a list such as [B, T, C], not %s",
                             value_kind_name(&v));
  if (v.n > TG_MAX_RANK) fail(E, loc, "rank %d exceeds the maximum of %d", v.n, TG_MAX_RANK);
  tg_type t = {.dtype = dt, .rank = v.n};
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < v.n; i++) {
    if (numel >= 0 && v.items[i].kind == V_NUM && v.items[i].num == -1 && infer < 0) {
      infer = i;
      continue;
    }
    t.dim[i] = need_dim(E, v.items[i], loc);
    if (known > TG_MAX_ELEMS / t.dim[i].size) fail(E, loc, "shape too large (over 2^48 elements)");
    known *= t.dim[i].size;
  }
  if (infer >= 0) {
    if (numel % known != 0)
      fail(E, loc, "cannot infer the -1 dim: %lld elements do not divide by %lld",
           (long long)numel, (long long)known);
    t.dim[infer] = (tg_dim){numel / known, NULL};
  }
  return t;
}

static value b_reshape(elab *E, const tg_expr *e, value *a, int n) {
  (void)n;
  tg_node *x = need_tensor(E, a[0], arg_loc(e, 0), "the argument");
  tg_node *r = node1(E, TG_OP_reshape, e->loc, x);
  r->type = shape_from(E, a[1], arg_loc(e, 1), x->type.dtype, tg_type_numel(&x->type));
  return (value){.kind = V_TENSOR, .node = add_node(E, r)};
}

static value b_transpose(elab *E, const tg_expr *e, value *a, int n) {
  tg_node *x = need_tensor(E, a[0], arg_loc(e, 0), "the argument");
  int rank = x->type.rank;
  if (rank < 2) fail(E, arg_loc(e, 0), "transpose needs rank 2 or more, not %d", rank);
  int i = rank - 2, j = rank - 1;
  if (n == 2) fail(E, e->loc, "transpose takes the tensor alone (the last two axes) or two axes: "
                              "transpose(x) or transpose(x, 1, 2)");
  if (n == 3) {
    i = need_axis(E, a[1], rank, arg_loc(e, 1));
    j = need_axis(E, a[2], rank, arg_loc(e, 2));
  }
  tg_node *t = node1(E, TG_OP_transpose, e->loc, x);
  for (int k = 0; k < rank; k++) t->perm[k] = k;
  t->perm[i] = j;
  t->perm[j] = i;
  return (value){.kind = V_TENSOR, .node = add_node(E, t)};
}

static tg_node *make_slice(elab *E, tg_loc loc, tg_node *x, int axis, int64_t start, int64_t len) {
  tg_node *s = node1(E, TG_OP_slice, loc, x);
  s->axis = axis;
  s->start = start;
  s->len = len;
  return add_node(E, s);
}

static value b_slice(elab *E, const tg_expr *e, value *a, int n) {
  (void)n;
  tg_node *x = need_tensor(E, a[0], arg_loc(e, 0), "the argument");
  int axis = need_axis(E, a[1], x->type.rank, arg_loc(e, 1));
  int64_t size = x->type.dim[axis].size;
  int64_t start = need_int(E, a[2], arg_loc(e, 2), "slice's start", 0, size - 1);
  int64_t len = need_int(E, a[3], arg_loc(e, 3), "slice's length", 1, size - start);
  return (value){.kind = V_TENSOR, .node = make_slice(E, e->loc, x, axis, start, len)};
}

/* split(x, axis, n): n equal parts along axis, as a list for `a, b = ...`. */
static value b_split(elab *E, const tg_expr *e, value *a, int n) {
  (void)n;
  tg_node *x = need_tensor(E, a[0], arg_loc(e, 0), "the argument");
  int axis = need_axis(E, a[1], x->type.rank, arg_loc(e, 1));
  int64_t size = x->type.dim[axis].size;
  int64_t parts = need_int(E, a[2], arg_loc(e, 2), "the number of parts", 1, 64);
  if (size % parts)
    fail(E, arg_loc(e, 2), "split: dim %d has size %lld, which does not divide into %lld parts",
         axis, (long long)size, (long long)parts);
  value v = {.kind = V_LIST, .n = (int)parts};
  v.items = tg_alloc(E->ctx->arena, sizeof *v.items * (size_t)parts);
  for (int i = 0; i < parts; i++)
    v.items[i] = (value){.kind = V_TENSOR,
                         .node = make_slice(E, e->loc, x, axis, i * (size / parts), size / parts)};
  return v;
}

static value b_concat(elab *E, const tg_expr *e, value *a, int n) {
  (void)n;
  if (a[0].kind != V_LIST || a[0].n < 1)
    fail(E, arg_loc(e, 0), "concat takes a non-empty list of tensors, e.g. concat([a, b], 0)");
  tg_node **in = tg_alloc(E->ctx->arena, sizeof *in * (size_t)a[0].n);
  for (int i = 0; i < a[0].n; i++) in[i] = need_tensor(E, a[0].items[i], arg_loc(e, 0), "each item");
  tg_node *c = tg_node_new(E->g, TG_OP_concat, e->loc);
  tg_node_set_inputs(E->g, c, a[0].n, in);
  c->axis = need_axis(E, a[1], in[0]->type.rank, arg_loc(e, 1));
  return (value){.kind = V_TENSOR, .node = add_node(E, c)};
}

static value b_gather(elab *E, const tg_expr *e, value *a, int n) {
  (void)n;
  tg_node *in[2] = {need_tensor(E, a[0], arg_loc(e, 0), "the table"),
                    need_tensor(E, a[1], arg_loc(e, 1), "the indices")};
  return (value){.kind = V_TENSOR, .node = build(E, TG_OP_gather, e->loc, 2, in)};
}

static value b_iota(elab *E, const tg_expr *e, value *a, int n) {
  (void)n;
  tg_node *t = tg_node_new(E->g, TG_OP_iota, e->loc);
  t->type = shape_from(E, a[0], arg_loc(e, 0), TG_I32, -1);
  t->axis = need_axis(E, a[1], t->type.rank, arg_loc(e, 1));
  return (value){.kind = V_TENSOR, .node = add_node(E, t)};
}

static value cast_to(elab *E, const tg_expr *e, value *a, tg_dtype dt) {
  tg_node *x = need_tensor(E, a[0], arg_loc(e, 0), "the argument");
  if (x->type.dtype == dt) return a[0];
  tg_node *c = node1(E, TG_OP_cast, e->loc, x);
  c->type.dtype = dt;
  return (value){.kind = V_TENSOR, .node = add_node(E, c)};
}

static value b_f32(elab *E, const tg_expr *e, value *a, int n) { (void)n; return cast_to(E, e, a, TG_F32); }
static value b_bf16(elab *E, const tg_expr *e, value *a, int n) { (void)n; return cast_to(E, e, a, TG_BF16); }
static value b_f16(elab *E, const tg_expr *e, value *a, int n) { (void)n; return cast_to(E, e, a, TG_F16); }
static value b_i32(elab *E, const tg_expr *e, value *a, int n) { (void)n; return cast_to(E, e, a, TG_I32); }

static const builtin builtins[] = {
    {"exp", 1, 1, b_exp, "exp(x)"},
    {"log", 1, 1, b_log, "log(x)"},
    {"sqrt", 1, 1, b_sqrt, "sqrt(x)"},
    {"rsqrt", 1, 1, b_rsqrt, "rsqrt(x)"},
    {"tanh", 1, 1, b_tanh, "tanh(x)"},
    {"maximum", 2, 2, b_maximum, "maximum(a, b)"},
    {"where", 3, 3, b_where, "where(cond, a, b)"},
    {"sum", 1, 2, b_sum, "sum(x) or sum(x, axis)"},
    {"max", 1, 2, b_max, "max(x) or max(x, axis)"},
    {"reshape", 2, 2, b_reshape, "reshape(x, [dims])"},
    {"transpose", 1, 3, b_transpose, "transpose(x) or transpose(x, axis1, axis2)"},
    {"slice", 4, 4, b_slice, "slice(x, axis, start, length)"},
    {"split", 3, 3, b_split, "split(x, axis, parts)"},
    {"concat", 2, 2, b_concat, "concat([a, b, ...], axis)"},
    {"gather", 2, 2, b_gather, "gather(table, indices)"},
    {"iota", 2, 2, b_iota, "iota([dims], axis)"},
    {"f32", 1, 1, b_f32, "f32(x)"},
    {"bf16", 1, 1, b_bf16, "bf16(x)"},
    {"f16", 1, 1, b_f16, "f16(x)"},
    {"i32", 1, 1, b_i32, "i32(x)"},
};
enum { N_BUILTINS = sizeof builtins / sizeof builtins[0] };

static const builtin *find_builtin(const char *name) {
  for (int i = 0; i < N_BUILTINS; i++)
    if (strcmp(builtins[i].name, name) == 0) return &builtins[i];
  return NULL;
}

/* ---- blocks ------------------------------------------------------------------ */

static const tg_stmt *find_block(elab *E, const char *name) {
  for (int i = 0; i < E->n_blocks; i++)
    if (strcmp(E->blocks[i]->names[0], name) == 0) return E->blocks[i];
  return NULL;
}

static void exec_list(elab *E, const tg_stmt_list *l);

/* Binds a block argument against its type pattern.  A bare name that is not
 * yet known binds to the size found there; any other dim (a known name, a
 * number, an expression) must equal it. */
static void bind_arg(elab *E, const tg_arg *arg, value v, tg_loc call_loc) {
  const tg_type_pat *pat = arg->type;
  if (pat) {
    if (v.kind != V_TENSOR)
      fail(E, call_loc, "argument '%s' must be a tensor, not %s", arg->name, value_kind_name(&v));
    const tg_type *t = &v.node->type;
    char ts[TG_TYPE_STR_MAX];
    tg_dtype want = need_dtype(E, pat->dtype, pat->dtype_loc);
    if (t->dtype != want)
      fail(E, call_loc, "argument '%s' must be %s, but is %s", arg->name, tg_dtype_name(want),
           tg_type_str(t, ts, sizeof ts));
    int np = pat->dims.n;
    if (pat->any_prefix ? t->rank < np : t->rank != np)
      fail(E, call_loc, "argument '%s' must have rank %s%d, but is %s", arg->name,
           pat->any_prefix ? "at least " : "", np, tg_type_str(t, ts, sizeof ts));
    for (int i = 0; i < np; i++) {
      const tg_expr *d = pat->dims.items[i];
      tg_dim actual = t->dim[t->rank - np + i];
      /* Only the block's own names and config constants count as known: a
       * block must mean the same whatever variables its caller has. */
      const char *pname = d->kind == TG_E_NAME && d->path.n == 1 && !d->path.segs[0].index
                              ? d->path.segs[0].name
                              : NULL;
      if (pname && !find_in(&E->cur->vars, pname) && !find_in(&E->config, pname)) {
        bind(E, E->cur, pname,
             (value){.kind = V_NUM, .num = (double)actual.size, .sym = actual.sym}, d->loc);
        continue;
      }
      value want_v = eval(E, d);
      int64_t want_size = need_dim(E, want_v, d->loc).size;
      if (want_size != actual.size)
        fail(E, call_loc, "argument '%s' is %s, but dim %d must be %lld", arg->name,
             tg_type_str(t, ts, sizeof ts), t->rank - np + i, (long long)want_size);
    }
  }
  bind(E, E->cur, arg->name, v, arg->loc);
}

static value expand_block(elab *E, const tg_stmt *b, const tg_expr *e, value *args, int nargs) {
  const char *name = b->names[0];
  for (frame *f = E->cur; f && f->block; f = f->caller)
    if (f->block == b)
      fail(E, e->loc, "block '%s' calls itself; blocks are expanded inline, so recursion is not allowed",
           name);
  if (nargs != b->n_args)
    fail(E, e->loc, "block '%s' takes %d argument%s, got %d", name, b->n_args,
         b->n_args == 1 ? "" : "s", nargs);
  const char *prefix = E->cur->prefix;
  if (e->path.n > 1) {
    const char *scope = path_text(E, &e->path, e->path.n - 1);
    prefix = *prefix ? tg_sprintf(E->ctx->arena, "%s.%s", prefix, scope) : scope;
  }
  frame f = {.prefix = prefix, .block = b, .call_loc = e->loc, .caller = E->cur};
  E->cur = &f;
  if (++E->depth > 200) fail(E, e->loc, "blocks nested more than 200 deep");
  for (int i = 0; i < nargs; i++) {
    f.binding = &b->args[i];
    bind_arg(E, &b->args[i], args[i], e->loc);
  }
  f.binding = NULL;
  exec_list(E, &b->body);
  if (!f.returned) fail(E, b->loc, "block '%s' ends without a return", name);
  E->cur = f.caller;
  E->depth--;
  return f.ret;
}

static value call(elab *E, const tg_expr *e) {
  const char *name = e->path.segs[e->path.n - 1].name;
  int n = e->args.n;
  value *args = tg_alloc(E->ctx->arena, sizeof *args * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) args[i] = eval(E, e->args.items[i]);
  const builtin *bi = find_builtin(name);
  if (bi) {
    if (e->path.n > 1) fail(E, e->loc, "'%s' is a builtin function and takes no scope", name);
    if (n < bi->min_args || n > bi->max_args)
      fail(E, e->loc, "wrong number of arguments to %s: got %d; usage: %s", name, n, bi->usage);
    return bi->fn(E, e, args, n);
  }
  const tg_stmt *b = find_block(E, name);
  if (b) return expand_block(E, b, e, args, n);
  if (!strcmp(name, "normal") || !strcmp(name, "zeros") || !strcmp(name, "ones"))
    fail(E, e->loc, "'%s' is an initialiser: it may only follow '=' in a param declaration", name);
  const char **known = tg_alloc(E->ctx->arena, (N_BUILTINS + 256) * sizeof *known); /* see eval_name */
  int nk = 0;
  for (int i = 0; i < N_BUILTINS; i++) known[nk++] = builtins[i].name;
  for (int i = 0; i < E->n_blocks && nk < N_BUILTINS + 256; i++) known[nk++] = E->blocks[i]->names[0];
  fail(E, e->loc, "unknown block or function '%s'%s", name, did_you_mean(E, name, known, nk));
}

/* ---- statements -------------------------------------------------------------- */

static tg_init param_init(elab *E, const tg_expr *e) {
  if (e->kind == TG_E_NAME && e->path.n == 1) {
    const char *n = e->path.segs[0].name;
    if (!strcmp(n, "zeros")) return (tg_init){.kind = TG_INIT_ZEROS};
    if (!strcmp(n, "ones")) return (tg_init){.kind = TG_INIT_ONES};
  }
  if (e->kind == TG_E_CALL && e->path.n == 1 && !strcmp(e->path.segs[0].name, "normal")) {
    if (e->args.n != 1)
      fail(E, e->loc, "normal takes one argument, the standard deviation: normal(0.02)");
    double std = need_num(E, eval(E, e->args.items[0]), e->args.items[0]->loc,
                          "normal's standard deviation");
    if (!(std >= 0 && isfinite(std)))
      fail(E, e->args.items[0]->loc, "normal's standard deviation must be finite and >= 0, not %g", std);
    return (tg_init){.kind = TG_INIT_NORMAL, .std = std};
  }
  fail(E, e->loc, "a parameter's initialiser must be zeros, ones or normal(std)");
}

static tg_type shape_of(elab *E, const tg_expr_list *dims, tg_dtype dt, tg_loc loc) {
  if (dims->n > TG_MAX_RANK) fail(E, loc, "rank %d exceeds the maximum of %d", dims->n, TG_MAX_RANK);
  tg_type t = {.dtype = dt, .rank = dims->n};
  int64_t numel = 1;
  for (int i = 0; i < dims->n; i++) {
    t.dim[i] = need_dim(E, eval(E, dims->items[i]), dims->items[i]->loc);
    if (numel > TG_MAX_ELEMS / t.dim[i].size) fail(E, loc, "shape too large (over 2^48 elements)");
    numel *= t.dim[i].size;
  }
  return t;
}

/* "shard columns|rows|vocab|replicated[(groups)]": how the param splits
 * over the mesh's tensor axis (passes/shard_tensor.c does the splitting;
 * docs/language.md). */
static void param_split(elab *E, const tg_stmt *s, tg_node *p) {
  if (!s->shard) return;
  tg_split split;
  if (!tg_split_parse(s->shard, strlen(s->shard), &split))
    fail(E, s->shard_loc, "unknown split '%s': a param is shard columns (its last axis), rows (its first), vocab "
                          "(its first, an embedding's vocabulary) or replicated", s->shard);
  if (split != TG_SPLIT_NONE && p->type.rank == 0)
    fail(E, s->shard_loc, "a scalar parameter cannot be split: drop 'shard %s'", s->shard);
  int64_t groups = 1;
  if (s->shard_groups) {
    if (split == TG_SPLIT_NONE) fail(E, s->shard_groups->loc, "a replicated parameter has no groups");
    groups = need_int(E, eval(E, s->shard_groups), s->shard_groups->loc, "a number of groups", 1, 4096);
    int axis = split == TG_SPLIT_COLUMNS ? p->type.rank - 1 : 0;
    if (p->type.dim[axis].size % groups)
      fail(E, s->shard_groups->loc, "%lld groups do not divide the split axis's %lld elements",
           (long long)groups, (long long)p->type.dim[axis].size);
  }
  p->init.split = split;
  p->init.split_groups = split == TG_SPLIT_NONE ? 0 : (int)groups;
}

/* "mesh tensor = N": the devices form a data x tensor mesh whose tensor
 * axis has N ranks (the data axis: the ranks left over, a run's choice). */
static void exec_mesh(elab *E, const tg_stmt *s) {
  if (E->cur != &E->top) fail(E, s->loc, "'mesh' is only allowed at the top level");
  if (strcmp(s->names[0], "tensor"))
    fail(E, s->name_locs[0], "the mesh's axes are data (the ranks a run has left over) and tensor: write 'mesh "
                             "tensor = N', not '%s'", s->names[0]);
  double old;
  if (tg_graph_get_config(E->g, TG_CONFIG_MESH_TENSOR, &old)) fail(E, s->loc, "the mesh is declared twice");
  int64_t n = need_int(E, eval(E, s->value), s->value->loc, "the tensor axis's ranks", 1, 4096);
  tg_graph_set_config(E->g, TG_CONFIG_MESH_TENSOR, (double)n);
  if (s->value->kind == TG_E_NAME && s->value->path.n == 1) E->g->mesh_sym = s->value->path.segs[0].name;
}

static void exec_param(elab *E, const tg_stmt *s) {
  const char *local = path_text(E, &s->path, s->path.n);
  const char *prefix = E->cur->prefix;
  const char *full = *prefix ? tg_sprintf(E->ctx->arena, "%s.%s", prefix, local) : local;
  tg_dtype dt = s->dtype ? need_dtype(E, s->dtype, s->dtype_loc) : TG_F32;
  if (!tg_dtype_is_float(dt)) fail(E, s->dtype_loc, "parameters must have a float dtype");
  tg_node *p = tg_node_new(E->g, TG_OP_param, s->loc);
  p->type = shape_of(E, &s->shape, dt, s->loc);
  p->init = param_init(E, s->value);
  param_split(E, s, p);
  p->name = full;
  claim_param_name(E, full, s->loc);
  add_node(E, p);
  bind(E, E->cur, local, (value){.kind = V_TENSOR, .node = p}, s->loc);
}

static void exec_assign(elab *E, const tg_stmt *s) {
  value v = eval(E, s->value);
  if (s->n_names == 1) {
    if (v.kind == V_NONE) fail(E, s->value->loc, "this expression has no value");
    if (v.kind == V_TENSOR && !v.node->name) v.node->name = s->names[0];
    bind(E, E->cur, s->names[0], v, s->name_locs[0]);
    return;
  }
  if (v.kind != V_LIST || v.n != s->n_names)
    fail(E, s->value->loc, "%d names on the left, but the right side gives %s%s", s->n_names,
         value_kind_name(&v),
         v.kind == V_LIST ? tg_sprintf(E->ctx->arena, " of %d", v.n) : "");
  for (int i = 0; i < s->n_names; i++) {
    if (v.items[i].kind == V_TENSOR && !v.items[i].node->name) v.items[i].node->name = s->names[i];
    bind(E, E->cur, s->names[i], v.items[i], s->name_locs[i]);
  }
}

static void exec_for(elab *E, const tg_stmt *s) {
  int64_t lo = need_int(E, eval(E, s->value), s->value->loc, "a loop bound", -(1 << 30), 1 << 30);
  int64_t hi = need_int(E, eval(E, s->hi), s->hi->loc, "a loop bound", -(1 << 30), 1 << 30);
  for (int64_t i = lo; i < hi && !E->cur->returned; i++) {
    step(E, s->loc);
    bind(E, E->cur, s->names[0], (value){.kind = V_NUM, .num = (double)i}, s->name_locs[0]);
    exec_list(E, &s->body);
  }
}

/* A number as it was written: 768, not 768.000000; 0.5; 1e+30. */
static const char *num_text(elab *E, double v) {
  if (v == floor(v) && fabs(v) < 1e15) return tg_sprintf(E->ctx->arena, "%lld", (long long)v);
  return tg_sprintf(E->ctx->arena, "%.17g", v);
}

enum { MAX_ASSERT_NOTES = 16 };

/* After a failed assert: a note for each config constant the expression
 * reads (directly or through a name bound to one, such as a block's C),
 * at its line in the config block, with the value it had and, when the
 * value came from outside the file (-D, tgrun's model.NAME, a weights
 * file's sizes), from where.  The assert's message says what the rule is;
 * these say which setting to change and where it is set. */
static void constant_notes(elab *E, const tg_expr *e, const char **noted, int *n_noted) {
  if (!e) return;
  if (e->kind == TG_E_NAME && e->path.n == 1 && !e->path.segs[0].index) {
    value v;
    binding *c;
    if (!lookup(E, e->path.segs[0].name, &v) || v.kind != V_NUM || !v.sym ||
        !(c = find_in(&E->config, v.sym)))
      return;
    for (int i = 0; i < *n_noted; i++)
      if (!strcmp(noted[i], v.sym)) return;
    if (*n_noted == MAX_ASSERT_NOTES) return;
    noted[(*n_noted)++] = v.sym;
    if (c->given)
      tg_report(E->ctx, "note", c->loc, "%s is %s, from %s", v.sym, num_text(E, c->v.num), c->given);
    else
      tg_report(E->ctx, "note", c->loc, "%s is %s, set here", v.sym, num_text(E, c->v.num));
    return;
  }
  constant_notes(E, e->lhs, noted, n_noted);
  constant_notes(E, e->rhs, noted, n_noted);
  for (int i = 0; i < e->args.n; i++) constant_notes(E, e->args.items[i], noted, n_noted);
}

static void exec_stmt(elab *E, const tg_stmt *s) {
  bool top = E->cur == &E->top;
  switch (s->kind) {
  case TG_S_ASSIGN:
    exec_assign(E, s);
    return;
  case TG_S_PARAM:
    exec_param(E, s);
    return;
  case TG_S_FOR:
    exec_for(E, s);
    return;
  case TG_S_RETURN:
    if (top) fail(E, s->loc, "'return' outside a block (use 'output name = ...' at the top level)");
    E->cur->ret = eval(E, s->value);
    E->cur->returned = true;
    return;
  case TG_S_ASSERT: {
    value v = eval(E, s->value);
    double ok = need_num(E, v, s->loc, "an assertion");
    if (ok == 0) {
      tg_report(E->ctx, "error", s->loc, "assertion failed%s%s", s->file ? ": " : "", s->file ? s->file : "");
      const char *noted[MAX_ASSERT_NOTES];
      int n_noted = 0;
      constant_notes(E, s->value, noted, &n_noted);
      call_notes(E, s->loc);
      tg_bail(E->ctx);
    }
    return;
  }
  case TG_S_OUTPUT: {
    if (!top) fail(E, s->loc, "'output' is only allowed at the top level, not inside a block");
    value v = eval(E, s->value);
    tg_node *n = need_tensor(E, v, s->value->loc, "an output");
    binding *prev = find_in(&E->outputs, s->names[0]);
    if (prev)
      fail_twice(E, s->name_locs[0], prev->loc, "output '%s' is declared twice", s->names[0]);
    binding *b = tg_alloc(E->ctx->arena, sizeof *b);
    *b = (binding){s->names[0], v, s->name_locs[0], NULL, NULL};
    scope_add(E, &E->outputs, b);
    if (!n->name) n->name = s->names[0];
    tg_graph_add_output(E->g, s->names[0], n);
    bind(E, E->cur, s->names[0], v, s->name_locs[0]);
    return;
  }
  case TG_S_INPUT: {
    if (!top) fail(E, s->loc, "'input' is only allowed at the top level");
    if (find_in(&E->top.vars, s->names[0]))
      fail(E, s->loc, "'%s' is already defined", s->names[0]);
    tg_node *n = tg_node_new(E->g, TG_OP_input, s->loc);
    n->type = shape_of(E, &s->shape, need_dtype(E, s->dtype, s->dtype_loc), s->loc);
    n->name = s->names[0];
    add_node(E, n);
    bind(E, E->cur, s->names[0], (value){.kind = V_TENSOR, .node = n}, s->loc);
    return;
  }
  case TG_S_MESH:
    exec_mesh(E, s);
    return;
  case TG_S_CONFIG:
  case TG_S_IMPORT:
  case TG_S_BLOCK:
    if (!top)
      fail(E, s->loc, "'%s' is only allowed at the top level of a file",
           s->kind == TG_S_CONFIG ? "config" : s->kind == TG_S_IMPORT ? "import" : "block");
    return; /* handled by declare() before the statements run */
  }
}

static void exec(elab *E, const tg_stmt *s) {
  step(E, s->loc);
  enter(E, s->loc);
  exec_stmt(E, s);
  E->nesting--;
}

static void exec_list(elab *E, const tg_stmt_list *l) {
  for (int i = 0; i < l->n && !E->cur->returned; i++) exec(E, l->items[i]);
}

/* ---- declarations: imports, blocks, config -------------------------------- */

static void declare_file(elab *E, const tg_ast *ast, bool is_import);

/* The path of `name` next to the file `from` ("models/std.tg" next to
 * "models/gpt2.tg"; just "std.tg" next to "gpt2.tg"). */
static const char *sibling(elab *E, const char *from, const char *name) {
  const char *slash = strrchr(from, '/');
  if (!slash) return name;
  return tg_sprintf(E->ctx->arena, "%.*s/%s", (int)(slash - from), from, name);
}

/* Asks stat, not fopen: opening a FIFO that an import happens to name
 * blocks until someone writes to it, and tgc would hang there.  Anything
 * not a regular file is passed over here and reported by tg_source_load. */
static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* What "imported already?" compares: the file itself (device and inode),
 * so that "a.tg", "./a.tg" and "lib/../a.tg" are one file.  Comparing the
 * text as written let a file that imports "./a.tg" from a.tg load itself as
 * "././a.tg", "./././a.tg", ... until the name grew too long.  A path that
 * names no file (a missing one, or a source held in memory) stands for
 * itself; the error, if any, comes when it is loaded. */
static const char *file_identity(elab *E, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return path;
  return tg_sprintf(E->ctx->arena, "<file %llu:%llu>", (unsigned long long)st.st_dev,
                    (unsigned long long)st.st_ino);
}

static void import_file(elab *E, const tg_stmt *s) {
  const char *name = s->file;
  if (!*name) fail(E, s->loc, "import of an empty file name");
  const char *path = NULL;
  if (name[0] == '/') path = name;
  else {
    const char *cand = sibling(E, s->loc.file, name);
    if (is_file(cand)) path = cand;
    for (int i = 0; !path && i < E->opts->n_include_dirs; i++) {
      cand = tg_sprintf(E->ctx->arena, "%s/%s", E->opts->include_dirs[i], name);
      if (is_file(cand)) path = cand;
    }
    if (!path) {
      struct stat st;
      path = sibling(E, s->loc.file, name);
      /* Something there that is not a file: tg_source_load says what. */
      if (stat(path, &st) != 0) {
        const char *dirs = "";
        for (int i = 0; i < E->opts->n_include_dirs; i++)
          dirs = tg_sprintf(E->ctx->arena, "%s, %s", dirs, E->opts->include_dirs[i]);
        fail(E, s->loc, "cannot find '%s': looked next to %s%s%s", name, s->loc.file,
             *dirs ? " and in " : "", *dirs ? dirs + 2 : "");
      }
    }
  }
  const char *id = file_identity(E, path);
  for (int i = 0; i < E->n_imported; i++)
    if (!strcmp(E->imported[i], id)) return; /* each file once; cycles end here */
  grow_array((void **)&E->imported, E->n_imported, &E->cap_imported, sizeof *E->imported);
  E->imported[E->n_imported++] = id;
  const tg_source *src = tg_source_load(E->ctx, path, s->loc);
  tg_source_check_text(E->ctx, src);
  declare_file(E, tg_parse(E->ctx, src), true);
}

static void declare_config(elab *E, const tg_stmt *s) {
  if (!E->first_config.file) E->first_config = s->loc;
  for (int i = 0; i < s->body.n; i++) {
    const tg_stmt *c = s->body.items[i];
    const char *name = c->names[0];
    binding *prev = find_in(&E->config, name);
    if (prev) fail_twice(E, c->loc, prev->loc, "config constant '%s' is defined twice", name);
    if (find_builtin(name) || !strcmp(name, "inf") || !strcmp(name, "pi"))
      fail(E, c->loc, "'%s' is a builtin name and cannot be a config constant", name);
    double v = 0;
    const tg_define *given = NULL;
    /* The last -D of a name wins, as with a C compiler's -D. */
    for (int d = 0; d < E->opts->n_defines; d++)
      if (!strcmp(E->opts->defines[d].name, name)) {
        given = &E->opts->defines[d];
        E->define_used[d] = true;
      }
    if (given) v = given->value;
    else v = need_num(E, eval(E, c->value), c->value->loc, "a config value");
    binding *b = tg_alloc(E->ctx->arena, sizeof *b);
    *b = (binding){name, {.kind = V_NUM, .num = v, .sym = name}, c->loc, NULL, NULL};
    if (given)
      b->given = given->origin ? given->origin
                               : tg_sprintf(E->ctx->arena, "-D %s=%s", name, num_text(E, v));
    scope_add(E, &E->config, b);
    tg_graph_set_config(E->g, name, v);
  }
}

/* Statements that only make sense at the top level are refused inside a
 * block (or a top-level loop) when the file is read, not only when (if
 * ever) the block is called.  Inputs and outputs may sit in a top-level
 * loop; declarations (config, import, block) may not sit in any. */
static void check_body(elab *E, const tg_stmt_list *body, bool in_block) {
  for (int i = 0; i < body->n; i++) {
    const tg_stmt *s = body->items[i];
    const char *what = s->kind == TG_S_CONFIG   ? "config"
                       : s->kind == TG_S_IMPORT ? "import"
                       : s->kind == TG_S_BLOCK  ? "a block definition"
                       : !in_block              ? NULL
                       : s->kind == TG_S_INPUT  ? "input"
                       : s->kind == TG_S_OUTPUT ? "output"
                       : s->kind == TG_S_MESH   ? "mesh"
                                                : NULL;
    if (what)
      fail(E, s->loc, "%s is only allowed at the top level, not inside %s", what,
           in_block ? "a block" : "a for loop");
    if (s->kind == TG_S_FOR) check_body(E, &s->body, in_block);
  }
}

static void declare_file(elab *E, const tg_ast *ast, bool is_import) {
  for (int i = 0; i < ast->items.n; i++) {
    const tg_stmt *s = ast->items.items[i];
    step(E, s->loc);
    switch (s->kind) {
    case TG_S_IMPORT:
      import_file(E, s);
      break;
    case TG_S_CONFIG:
      declare_config(E, s);
      break;
    case TG_S_BLOCK: {
      const char *name = s->names[0];
      if (find_builtin(name))
        fail(E, s->name_locs[0], "'%s' is a builtin function; choose another name for the block",
             name);
      const tg_stmt *prev = find_block(E, name);
      if (prev) fail_twice(E, s->name_locs[0], prev->name_locs[0], "block '%s' is defined twice", name);
      check_body(E, &s->body, true);
      for (int a = 0; a < s->n_args; a++)
        for (int b = 0; b < a; b++)
          if (!strcmp(s->args[a].name, s->args[b].name))
            fail(E, s->args[a].loc, "block '%s' has two arguments named '%s'", name, s->args[a].name);
      grow_array((void **)&E->blocks, E->n_blocks, &E->cap_blocks, sizeof *E->blocks);
      E->blocks[E->n_blocks++] = s;
      break;
    }
    default:
      if (is_import)
        fail(E, s->loc, "an imported file may only hold imports, config and blocks");
      if (s->kind == TG_S_FOR) check_body(E, &s->body, false);
      break;
    }
  }
}

/* ---- entry -------------------------------------------------------------------- */

static void elab_free(elab *E) {
  free(E->blocks);
  free(E->params);
  free(E->imported);
  free(E);
}

tg_graph *tg_elaborate(tg_ctx *ctx, const tg_ast *ast, const tg_compile_opts *opts) {
  static const tg_compile_opts no_opts;
  /* On the heap, so that it survives the longjmp of an error intact. */
  elab *const E = calloc(1, sizeof *E);
  if (!E) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  E->ctx = ctx;
  E->opts = opts ? opts : &no_opts;
  E->g = tg_graph_new(ctx->arena);
  E->g->source = ast->src->path;
  E->top.prefix = "";
  E->cur = &E->top;
  E->define_used = tg_alloc(ctx->arena, sizeof(bool) * (size_t)(E->opts->n_defines + 1));
  tg_loc start = {ast->src->path, 1, 1};

  /* The scratch arrays are malloc'ed: free them on the error path too. */
  jmp_buf here, *const outer = ctx->bail;
  ctx->bail = &here;
  if (setjmp(here)) {
    tg_graph_free(E->g);
    elab_free(E);
    ctx->bail = outer;
    tg_bail(ctx);
  }

  if (ast->items.n == 0) fail(E, start, "empty file: there is no model here");
  grow_array((void **)&E->imported, 0, &E->cap_imported, sizeof *E->imported);
  E->imported[E->n_imported++] = file_identity(E, ast->src->path);
  declare_file(E, ast, false);
  for (int d = 0; d < E->opts->n_defines; d++)
    if (!E->define_used[d] && !E->opts->defines[d].if_present) {
      const char *known[512];
      int n = 0;
      for (binding *b = E->config.list; b && n < 512; b = b->next) known[n++] = b->name;
      const char *name = E->opts->defines[d].name;
      fail(E, E->first_config.file ? E->first_config : start,
           "-D %s: no config constant named '%s'%s", name, name,
           did_you_mean(E, name, known, n));
    }
  for (int i = 0; i < ast->items.n; i++) exec(E, ast->items.items[i]);
  if (E->g->n_outputs == 0)
    fail(E, start, "nothing to compute: declare the result with 'output loss = ...'%s",
         E->n_blocks ? " (a file of blocks alone is a library: import it)" : "");

  ctx->bail = outer;
  tg_graph *g = E->g;
  elab_free(E);
  return g;
}
