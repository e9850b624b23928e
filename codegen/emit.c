/* emit.c: a nest's statements (emit.h), shared by both renderers.
 *
 * Each value the nest computes is emitted once, as a `const` temporary, at
 * the loop depth its shape calls for: depth 0 (before every loop) when it
 * varies along no axis of the domain, depth 1 (once per outer point) when
 * it varies only along outer axes or needs a finished reduction, depth 2
 * (inside a sweep's loop) when it varies along an inner axis.  A value read
 * at its natural coordinates (its shape broadcast into the domain) is
 * memoised at its depth; one read elsewhere (through a transposing view, a
 * gather's table) is recomputed in place.  Values of other steps and
 * kernels are loads at strided offsets (lower.h: tg_layout). */
#include "emit.h"

#include "half.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A construct lowering should have refused: a bug in tg, not in the model. */
static _Noreturn void internal(const tg_node *n, const char *what) {
  fprintf(stderr, "tg: internal error in code generation at %%%d %s: %s\n", n->id, tg_ops[n->op].name, what);
  exit(70);
}

void tg_emit_float(tg_sbuf *b, double v) {
  float f = (float)v;
  if (f != f) tg_sb_printf(b, "(tg_inf() - tg_inf())");
  else if (f == (float)INFINITY) tg_sb_printf(b, "tg_inf()");
  else if (f == -(float)INFINITY) tg_sb_printf(b, "(-tg_inf())");
  else {
    char buf[64];
    snprintf(buf, sizeof buf, "%.9g", (double)f);
    /* shortest text that reads back to the same float */
    for (int prec = 1; prec <= 9; prec++) {
      char t[64];
      snprintf(t, sizeof t, "%.*g", prec, (double)f);
      if (strtof(t, NULL) == f) {
        memcpy(buf, t, sizeof t);
        break;
      }
    }
    bool has_dot = strpbrk(buf, ".en") != NULL;
    tg_sb_printf(b, f < 0 ? "(%s%sf)" : "%s%sf", buf, has_dot ? "" : ".0");
  }
}

/* ---- the emitter state ---------------------------------------------------- */

enum { MAXD = 3 };

typedef struct emitter {
  const tg_program *p;
  const tg_graph *g;
  const tg_lkernel *lk;
  const tg_step *st;
  int step;
  tg_dialect d;
  tg_arena *arena;       /* strings live until the nest code is printed */
  tg_sbuf buf[MAXD];     /* depth 0 (uniform), 1 (pending outer), 2 (loop body) */
  const char **memo[MAXD];
  signed char *dep_red;  /* per node: depends on a reduction of this step (-1 unknown) */
  int tmp;               /* counter for unnamed temporaries */
  bool in_loop;          /* emitting a sweep's body (depth 2 exists) */
  /* CUDA elementwise nests: each thread computes `vec` consecutive points of
   * the last axis (lanes), so that contiguous f32 loads are float4s */
  int vec, lane, vec_axis;
  const char **vkeys, **vnames; /* lane 0's vector loads: offset text -> name */
  int n_v;
  int sweep;             /* the sweep being emitted, from 1; 0 outside */
  tg_nest_code *out;     /* where the accesses are noted */
  /* the row cache (emit.h): per node, the sweep that defined it at depth 2
   * (0: none) and its slot in the cache (-1: not cached); per sweep, the
   * segment holding its loop body, where the cache's stores are appended */
  int *def_sweep, *cache_slot, *seg_of_sweep;
  int n_slots;
  tg_dtype shared_type;
  tg_sbuf decl;
} emitter;

/* ---- per-node scratch ------------------------------------------------------
 * The emitter keeps a few arrays indexed by node (memos, marks).  A graph
 * of a 192-layer model has tens of thousands of nodes and thousands of
 * nests, so allocating and clearing them per nest would cost nodes x nests;
 * they live instead in one scratch per thread, grown to the largest graph
 * seen, and each use clears only the entries it set (listed in `set`). */
typedef struct id_list {
  int *v;
  int n, cap;
} id_list;

static void list_push(id_list *l, int id) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 256;
    l->v = tg_xrealloc(l->v, sizeof *l->v * (size_t)l->cap);
  }
  l->v[l->n++] = id;
}

static _Thread_local struct {
  int size;                 /* entries each array has */
  const char **memo[MAXD];  /* NULL when unset */
  signed char *dep_red;     /* -1 when unset */
  int *def_sweep;           /* 0 when unset */
  int *cache_slot;          /* -1 when unset */
  id_list set[MAXD + 3];    /* ids set in memo[0..2], dep_red, def_sweep, cache_slot */
} scratch;

static void scratch_reserve(int n) {
  if (n <= scratch.size) return;
  for (int k = 0; k < MAXD; k++) {
    scratch.memo[k] = tg_xrealloc(scratch.memo[k], sizeof(char *) * (size_t)n);
    memset(scratch.memo[k] + scratch.size, 0, sizeof(char *) * (size_t)(n - scratch.size));
  }
  scratch.dep_red = tg_xrealloc(scratch.dep_red, (size_t)n);
  memset(scratch.dep_red + scratch.size, -1, (size_t)(n - scratch.size));
  scratch.def_sweep = tg_xrealloc(scratch.def_sweep, sizeof(int) * (size_t)n);
  memset(scratch.def_sweep + scratch.size, 0, sizeof(int) * (size_t)(n - scratch.size));
  scratch.cache_slot = tg_xrealloc(scratch.cache_slot, sizeof(int) * (size_t)n);
  for (int i = scratch.size; i < n; i++) scratch.cache_slot[i] = -1;
  scratch.size = n;
}

static void memo_set(emitter *e, int d, int id, const char *v) {
  if (!e->memo[d][id]) list_push(&scratch.set[d], id);
  e->memo[d][id] = v;
}

/* Forgets memo level d (a sweep's values, when the next sweep starts). */
static void memo_clear(emitter *e, int d) {
  for (int i = 0; i < scratch.set[d].n; i++) e->memo[d][scratch.set[d].v[i]] = NULL;
  scratch.set[d].n = 0;
}

/* Leaves the scratch as it was found: every entry unset. */
static void scratch_release(void) {
  for (int k = 0; k < MAXD; k++) {
    for (int i = 0; i < scratch.set[k].n; i++) scratch.memo[k][scratch.set[k].v[i]] = NULL;
    scratch.set[k].n = 0;
  }
  for (int i = 0; i < scratch.set[MAXD].n; i++) scratch.dep_red[scratch.set[MAXD].v[i]] = -1;
  for (int i = 0; i < scratch.set[MAXD + 1].n; i++) scratch.def_sweep[scratch.set[MAXD + 1].v[i]] = 0;
  for (int i = 0; i < scratch.set[MAXD + 2].n; i++) scratch.cache_slot[scratch.set[MAXD + 2].v[i]] = -1;
  for (int k = MAXD; k < MAXD + 3; k++) scratch.set[k].n = 0;
}

/* Notes a load or store of a view of base value `base` (strides in its
 * elements, type t) made at depth d. */
static void note_elements(emitter *e, int base, int64_t offset, int64_t elements, int sweep, bool write) {
  tg_nest_code *c = e->out;
  for (int k = 0; k < c->n_access; k++) {
    const tg_access *a = &c->access[k];
    if (a->base == base && a->offset == offset && a->elements == elements && a->sweep == sweep && a->write == write)
      return;
  }
  c->access = tg_xrealloc(c->access, sizeof *c->access * (size_t)(c->n_access + 1));
  c->access[c->n_access++] =
      (tg_access){base, offset, elements, elements * tg_dtype_size(e->g->nodes[base]->type.dtype), sweep, write};
}

static void note_access(emitter *e, int base, int64_t offset, const int64_t *stride, const tg_type *t, int d,
                        bool write) {
  int64_t elements = 1;
  for (int i = 0; i < t->rank; i++)
    if (stride[i] != 0 && t->dim[i].size > 1) elements *= t->dim[i].size;
  note_elements(e, base, offset, elements, d == 2 ? e->sweep : 0, write);
}

static const tg_type *dom(const emitter *e) { return &e->st->nest.dom; }

/* Computed by this step (or recomputed in it): in this kernel and not owned
 * by another step; leaves and views are never computed. */
static bool computed_here(const emitter *e, const tg_node *n) {
  if (tg_ops[n->op].kind == TG_KIND_LEAF || tg_is_view(n)) return false;
  if (e->p->remat[n->id]) return true; /* recomputed by every reader */
  if (n->kernel != e->lk->kernel) return false;
  int s = e->p->step_of[n->id];
  return s == e->step || s == -1; /* TG_STEP_ELSEWHERE: in memory already */
}

static bool in_memory(const emitter *e, const tg_node *n) {
  return e->p->store[n->id].place != TG_PLACE_NONE && !computed_here(e, n);
}

/* The coordinates a value of shape t takes at the nest's current point. */
static const char **canon(emitter *e, const tg_type *t) {
  const char **c = tg_alloc(e->arena, sizeof(char *) * (size_t)(t->rank + 1));
  int off = dom(e)->rank - t->rank;
  for (int i = 0; i < t->rank; i++)
    c[i] = t->dim[i].size == 1 || off + i < 0 ? "0"
           : off + i == e->vec_axis && e->lane > 0 ? tg_sprintf(e->arena, "(i%d + %d)", off + i, e->lane)
                                                  : tg_sprintf(e->arena, "i%d", off + i);
  return c;
}

/* A name for value %id: lanes after the first have their own. */
static const char *tname(emitter *e, int id, int depth) {
  return depth == 2 && e->lane > 0 ? tg_sprintf(e->arena, "t%d_%d", id, e->lane) : tg_sprintf(e->arena, "t%d", id);
}

static bool same_coords(const char **a, const char **b, int rank) {
  for (int i = 0; i < rank; i++)
    if (strcmp(a[i], b[i])) return false;
  return true;
}

static bool is_canonical(emitter *e, const tg_node *n, const char **c) {
  return tg_type_fits(&n->type, dom(e)) && same_coords(c, canon(e, &n->type), n->type.rank);
}

static int shape_depth(const emitter *e, const tg_type *t) {
  const tg_nest *N = &e->st->nest;
  int d = 0;
  for (int a = 0; a < N->dom.rank; a++)
    if (tg_varies(t, &N->dom, a)) d = (N->inner >> a & 1) ? 2 : (d > 1 ? d : 1);
  return d;
}

static bool depends_on_reduction(emitter *e, const tg_node *n) {
  n = tg_kernel_base(n);
  if (!computed_here(e, n)) return false;
  if (e->dep_red[n->id] >= 0) return e->dep_red[n->id];
  bool r = n->op == TG_OP_sum || n->op == TG_OP_max;
  for (int i = 0; i < n->nin && !r; i++) r = depends_on_reduction(e, n->in[i]);
  list_push(&scratch.set[MAXD], n->id);
  e->dep_red[n->id] = r;
  return r;
}

static int depth_of(emitter *e, const tg_node *n) {
  int d = shape_depth(e, &n->type);
  if (d < 1 && depends_on_reduction(e, n)) d = 1;
  if ((n->op == TG_OP_sum || n->op == TG_OP_max) && computed_here(e, n)) d = 1;
  return d;
}

/* ---- indices --------------------------------------------------------------- */

/* offset + sum(c[i] * stride[i]) as C text, dropping zero strides. */
static const char *affine(emitter *e, int64_t offset, const int64_t *stride, const char **c, int rank) {
  tg_sbuf b = {0};
  tg_sb_printf(&b, "%lld", (long long)offset);
  for (int i = 0; i < rank; i++) {
    if (!stride[i] || !strcmp(c[i], "0")) continue;
    if (stride[i] == 1) tg_sb_printf(&b, " + %s", c[i]);
    else tg_sb_printf(&b, " + (tg_idx)%s * %lld", c[i], (long long)stride[i]);
  }
  const char *r = tg_strdup(e->arena, b.s);
  tg_sb_free(&b);
  return r;
}

/* The coordinates of a reshape's input at output coordinates c: dims are
 * matched in groups of equal element count, and within a group the
 * coordinates are linearised and split again. */
static const char **reshape_coords(emitter *e, const tg_type *out, const char **c, const tg_type *in) {
  const char **r = tg_alloc(e->arena, sizeof(char *) * (size_t)(in->rank + 1));
  int io = 0, ii = 0;
  while (io < out->rank || ii < in->rank) {
    /* size-1 dims are coordinate 0 on either side */
    if (ii < in->rank && in->dim[ii].size == 1) {
      r[ii++] = "0";
      continue;
    }
    if (io < out->rank && out->dim[io].size == 1) {
      io++;
      continue;
    }
    int o0 = io, i0 = ii;
    int64_t po = out->dim[io].size, pi = in->dim[ii].size;
    io++, ii++;
    while (po != pi) {
      if (po < pi) po *= out->dim[io++].size;
      else pi *= in->dim[ii++].size;
    }
    /* linear index of the group, in the output's coordinates */
    tg_sbuf b = {0};
    if (io - o0 == 1) tg_sb_printf(&b, "%s", c[o0]);
    else {
      tg_sb_printf(&b, "(");
      for (int k = o0; k < io; k++) {
        int64_t s = 1;
        for (int m = k + 1; m < io; m++) s *= out->dim[m].size;
        tg_sb_printf(&b, k > o0 ? " + (tg_idx)%s * %lld" : "(tg_idx)%s * %lld", c[k], (long long)s);
      }
      tg_sb_printf(&b, ")");
    }
    const char *lin = tg_strdup(e->arena, b.s);
    tg_sb_free(&b);
    if (ii - i0 == 1) r[i0] = lin;
    else
      for (int k = i0; k < ii; k++) {
        int64_t s = 1;
        for (int m = k + 1; m < ii; m++) s *= in->dim[m].size;
        r[k] = in->dim[k].size == 1 ? "0"
               : k == i0            ? tg_sprintf(e->arena, "(%s / %lld)", lin, (long long)s)
                                    : tg_sprintf(e->arena, "(%s / %lld %% %lld)", lin, (long long)s,
                                                 (long long)in->dim[k].size);
      }
  }
  return r;
}

/* The coordinates of view n's input at n's coordinates c. */
static const char **view_coords(emitter *e, const tg_node *n, const char **c) {
  const tg_type *it = &n->in[0]->type, *ot = &n->type;
  const char **r = tg_alloc(e->arena, sizeof(char *) * (size_t)(it->rank + 1));
  switch (n->op) {
  case TG_OP_transpose:
    for (int i = 0; i < ot->rank; i++) r[n->perm[i]] = c[i];
    return r;
  case TG_OP_slice:
    for (int i = 0; i < ot->rank; i++) r[i] = c[i];
    r[n->axis] = n->start ? tg_sprintf(e->arena, "(%s + %lld)", c[n->axis], (long long)n->start) : c[n->axis];
    return r;
  case TG_OP_expand:
    for (int j = 0; j < it->rank; j++) r[j] = it->dim[j].size == 1 ? "0" : c[j + ot->rank - it->rank];
    return r;
  default: return reshape_coords(e, ot, c, it);
  }
}

/* ---- values ---------------------------------------------------------------- */

typedef struct val {
  const char *s;
  tg_dtype t;
} val;

static val value_at(emitter *e, const tg_node *n, const char **c, int ctx_depth);

static const char *new_tmp(emitter *e) { return tg_sprintf(e->arena, "u%d", e->tmp++); }

/* A load of element `offset` of array `arr` in dtype t, as a computed value. */
static const char *load_from(emitter *e, tg_dtype t, const char *arr, const char *offset) {
  switch (t) {
  case TG_BF16: return tg_sprintf(e->arena, "tg_bf16_load(%s[%s])", arr, offset);
  case TG_F16: return tg_sprintf(e->arena, "tg_f16_load(%s[%s])", arr, offset);
  case TG_BOOL: return tg_sprintf(e->arena, "(int)%s[%s]", arr, offset);
  default: return tg_sprintf(e->arena, "%s[%s]", arr, offset);
  }
}

static const char *load_expr(emitter *e, tg_dtype t, int base, const char *offset) {
  return load_from(e, t, tg_sprintf(e->arena, "b%d", base), offset);
}

/* In a vectorised nest, an f32 load contiguous along the lanes' axis and
 * 16-byte aligned (offset and every other stride multiples of 4 elements;
 * the lanes start at multiples of 4) is one float4 load in lane 0 that the
 * other lanes take their component of.  NULL when it is not such a load. */
static const char *vector_load(emitter *e, const tg_node *n, const char **c, const tg_layout *lay) {
  if (e->vec < 2 || n->type.dtype != TG_F32) return NULL;
  int j = e->vec_axis - (dom(e)->rank - n->type.rank);
  if (j < 0 || j >= n->type.rank || lay->stride[j] != 1 || lay->offset % e->vec) return NULL;
  const char *want = e->lane ? tg_sprintf(e->arena, "(i%d + %d)", e->vec_axis, e->lane) : tg_sprintf(e->arena, "i%d", e->vec_axis);
  if (strcmp(c[j], want)) return NULL;
  for (int i = 0; i < n->type.rank; i++)
    if (i != j && lay->stride[i] % e->vec) return NULL;
  const char **c0 = tg_alloc(e->arena, sizeof(char *) * (size_t)(n->type.rank + 1));
  for (int i = 0; i < n->type.rank; i++) c0[i] = c[i];
  c0[j] = tg_sprintf(e->arena, "i%d", e->vec_axis);
  const char *key = tg_sprintf(e->arena, "b%d[%s]", lay->base, affine(e, lay->offset, lay->stride, c0, n->type.rank));
  static const char comp[4] = {'x', 'y', 'z', 'w'};
  for (int k = 0; k < e->n_v; k++)
    if (!strcmp(e->vkeys[k], key)) return tg_sprintf(e->arena, "%s.%c", e->vnames[k], comp[e->lane]);
  if (e->lane) return NULL; /* lane 0 did not load it: read it plainly */
  const char *name = new_tmp(e);
  /* TG_LD4 (flash_cuda.h: tg_cuda_emit_memory_macros): one float4 load on the
   * GPU, a checked one on the emulated device (vectors are CUDA-only) */
  tg_sb_printf(&e->buf[2], "const float4 %s = TG_LD4(b%d, %s);\n", name, lay->base,
               affine(e, lay->offset, lay->stride, c0, n->type.rank));
  e->vkeys = realloc(e->vkeys, sizeof(char *) * (size_t)(e->n_v + 1));
  e->vnames = realloc(e->vnames, sizeof(char *) * (size_t)(e->n_v + 1));
  if (!e->vkeys || !e->vnames) exit(1);
  e->vkeys[e->n_v] = key;
  e->vnames[e->n_v++] = name;
  return tg_sprintf(e->arena, "%s.x", name);
}

/* A value in memory read through views at coordinates c, at depth d. */
static const char *load(emitter *e, const tg_node *n, const char **c, int d) {
  tg_layout lay;
  if (tg_layout_of(e->p, n, &lay)) {
    note_access(e, lay.base, lay.offset, lay.stride, &n->type, d, false);
    const char *v = vector_load(e, n, c, &lay);
    if (v) return v;
    return load_expr(e, n->type.dtype, lay.base, affine(e, lay.offset, lay.stride, c, n->type.rank));
  }
  /* a reshape that strides cannot express: walk the views by coordinates */
  while (tg_is_view(n)) {
    c = view_coords(e, n, c);
    n = n->in[0];
  }
  tg_layout_of(e->p, n, &lay);
  note_access(e, lay.base, lay.offset, lay.stride, &n->type, d, false);
  return load_expr(e, n->type.dtype, lay.base, affine(e, lay.offset, lay.stride, c, n->type.rank));
}

/* The function that rounds an f32 register to dtype t, or "". */
static const char *narrow_round(tg_dtype t) {
  return t == TG_BF16 ? "tg_bf16_round" : t == TG_F16 ? "tg_f16_round" : "";
}

static bool holds_bf16(const tg_node *n, int depth);

/* Whether op n makes a bf16 value from inputs that hold bf16 values (a
 * constant: whether it is one): a select, a negation, the larger of two,
 * a widening. */
static bool keeps_bf16(const tg_node *n, int depth) {
  switch (n->op) {
  case TG_OP_const: {
    float f = (float)n->value;
    return f == n->value && tg_bf16_to_f32(tg_f32_to_bf16(f)) == f; /* not NaN: NaN != NaN */
  }
  case TG_OP_cast:
  case TG_OP_neg:
  case TG_OP_max: return holds_bf16(n->in[0], depth + 1);
  case TG_OP_maximum: return holds_bf16(n->in[0], depth + 1) && holds_bf16(n->in[1], depth + 1);
  case TG_OP_where: return holds_bf16(n->in[1], depth + 1) && holds_bf16(n->in[2], depth + 1);
  default: return false;
  }
}

/* Whether n's value is always a bf16 value (exactly representable in
 * bf16): a bf16 value (every one is rounded, or is such a value already),
 * or an f32 value that keeps_bf16 makes, or a view of one.  Rounding such
 * a value to bf16 changes no bit, so it is left out (the cross-entropy's
 * row kernel rounded six values an element: its walks are issue-bound),
 * and storing it to bf16 keeps its top half (tg_bf16_bits).  Its NaNs are
 * bf16 NaNs widened, whose payload is in the top half. */
static bool holds_bf16(const tg_node *n, int depth) {
  if (n->type.dtype == TG_BF16) return true;
  if (n->type.dtype != TG_F32 || depth > 8) return false;
  if (tg_is_view(n)) return holds_bf16(n->in[0], depth + 1);
  return keeps_bf16(n, depth);
}

/* The statement defining `name` at depth d. */
static void define(emitter *e, int d, tg_dtype t, const char *name, const char *expr) {
  tg_sb_printf(&e->buf[d], "const %s %s = %s;\n", tg_compute_ctype(t), name, expr);
}

static const char *cast_to(emitter *e, val v, tg_dtype to) {
  if (tg_dtype_is_float(to)) {
    if (tg_dtype_is_float(v.t)) return v.s;
    return tg_sprintf(e->arena, "(float)%s", v.s);
  }
  if (to == TG_I32) return tg_sprintf(e->arena, "(int)%s", v.s); /* C truncates, as the interpreter does */
  return tg_sprintf(e->arena, "(%s != 0)", v.s);
}

static const char *unary(emitter *e, const char *f, const char *x) { return tg_sprintf(e->arena, "%s(%s)", f, x); }

/* The expression of op n over its inputs' values x. */
static const char *op_expr(emitter *e, const tg_node *n, const val *x) {
  tg_arena *A = e->arena;
  switch (n->op) {
  case TG_OP_neg: return tg_sprintf(A, "(-%s)", x[0].s);
  case TG_OP_exp: return unary(e, "tg_exp", x[0].s);
  case TG_OP_gelu: return unary(e, "tg_gelu", x[0].s);
  case TG_OP_gelu_grad: return unary(e, "tg_gelu_grad", x[0].s);
  case TG_OP_log: return unary(e, "logf", x[0].s);
  case TG_OP_sqrt: return unary(e, "sqrtf", x[0].s);
  case TG_OP_rsqrt: return tg_sprintf(A, "(1.0f / sqrtf(%s))", x[0].s);
  case TG_OP_tanh: return unary(e, "tg_tanh", x[0].s);
  case TG_OP_cast: return cast_to(e, x[0], n->type.dtype);
  case TG_OP_add: return tg_sprintf(A, "(%s + %s)", x[0].s, x[1].s);
  case TG_OP_sub: return tg_sprintf(A, "(%s - %s)", x[0].s, x[1].s);
  case TG_OP_mul: return tg_sprintf(A, "(%s * %s)", x[0].s, x[1].s);
  case TG_OP_div:
    if (n->type.dtype == TG_I32) return tg_sprintf(A, "(%s != 0 ? %s / %s : 0)", x[1].s, x[0].s, x[1].s);
    return tg_sprintf(A, "(%s / %s)", x[0].s, x[1].s);
  case TG_OP_maximum: /* nan wins, as in the interpreter */
    return tg_sprintf(A, "((%s > %s || %s != %s) ? %s : %s)", x[0].s, x[1].s, x[0].s, x[0].s, x[0].s, x[1].s);
  case TG_OP_lt: return tg_sprintf(A, "(%s < %s)", x[0].s, x[1].s);
  case TG_OP_le: return tg_sprintf(A, "(%s <= %s)", x[0].s, x[1].s);
  case TG_OP_gt: return tg_sprintf(A, "(%s > %s)", x[0].s, x[1].s);
  case TG_OP_ge: return tg_sprintf(A, "(%s >= %s)", x[0].s, x[1].s);
  case TG_OP_eq: return tg_sprintf(A, "(%s == %s)", x[0].s, x[1].s);
  case TG_OP_ne: return tg_sprintf(A, "(%s != %s)", x[0].s, x[1].s);
  case TG_OP_where: return tg_sprintf(A, "(%s ? %s : %s)", x[0].s, x[1].s, x[2].s);
  default: return NULL;
  }
}

static const char *const_text(emitter *e, const tg_node *n) {
  if (tg_dtype_is_float(n->type.dtype)) {
    tg_sbuf b = {0};
    tg_emit_float(&b, n->value);
    const char *r = tg_strdup(e->arena, b.s);
    tg_sb_free(&b);
    return r;
  }
  return tg_sprintf(e->arena, "%lld", (long long)n->value);
}

/* Coordinates c of an elementwise node's result as coordinates of its
 * input in (broadcast dims read at 0), as an elementwise op reads its inputs. */
static const char **input_coords(emitter *e, const tg_node *n, const tg_node *in, const char **c) {
  const tg_type *it = &in->type;
  const char **ic = tg_alloc(e->arena, sizeof(char *) * (size_t)(it->rank + 1));
  for (int j = 0; j < it->rank; j++) ic[j] = it->dim[j].size == 1 ? "0" : c[j + n->type.rank - it->rank];
  return ic;
}

/* n's value (computed here) at coordinates c, emitted at depth d. */
static const char *compute(emitter *e, const tg_node *n, const char **c, int d) {
  const tg_type *t = &n->type;
  if (n->op == TG_OP_sum || n->op == TG_OP_max) {
    internal(n, "a reduction read before its sweep finished");
  }
  /* x's buffer holds gelu_grad(x) (lower.c: store_gelu_grads) */
  if (n->op == TG_OP_gelu_grad && e->p->holds_gelu_grad && e->p->holds_gelu_grad[n->in[0]->id] &&
      in_memory(e, n->in[0]))
    return value_at(e, n->in[0], input_coords(e, n, n->in[0], c), d).s;
  if (tg_ops[n->op].kind == TG_KIND_ELEMENTWISE) {
    val x[3];
    for (int i = 0; i < n->nin; i++) x[i] = value_at(e, n->in[i], input_coords(e, n, n->in[i], c), d);
    return op_expr(e, n, x);
  }
  switch (n->op) {
  case TG_OP_gather: {
    const tg_node *table = n->in[0], *idx = n->in[1];
    int ir = idx->type.rank;
    val iv = value_at(e, idx, c, d);
    const char **tc = tg_alloc(e->arena, sizeof(char *) * (size_t)(table->type.rank + 1));
    tc[0] = tg_sprintf(e->arena, "(tg_idx)%s", iv.s);
    for (int j = 1; j < table->type.rank; j++) tc[j] = c[ir + j - 1];
    return value_at(e, table, tc, d).s;
  }
  case TG_OP_pad: {
    /* the input at clamped coordinates (always a valid read), then chosen */
    const tg_node *in = n->in[0];
    int64_t len = in->type.dim[n->axis].size;
    const char **ic = tg_alloc(e->arena, sizeof(char *) * (size_t)(t->rank + 1));
    for (int j = 0; j < t->rank; j++) ic[j] = c[j];
    const char *cc = c[n->axis];
    ic[n->axis] = tg_sprintf(e->arena, "(%s < %lld ? 0 : %s >= %lld ? %lld : %s - %lld)", cc, (long long)n->start, cc,
                             (long long)(n->start + len), (long long)(len - 1), cc, (long long)n->start);
    val v = value_at(e, in, ic, d);
    /* the zero in the value's type: a bare 0 would make the conditional an
     * int where the read is a checked reference (the emulated device) */
    return tg_sprintf(e->arena, "((%s >= %lld && %s < %lld) ? %s : (%s)0)", cc, (long long)n->start, cc,
                      (long long)(n->start + len), v.s, tg_compute_ctype(n->type.dtype));
  }
  case TG_OP_concat: {
    tg_sbuf b = {0};
    int64_t at = 0;
    const char *cc = c[n->axis];
    for (int k = 0; k < n->nin; k++) {
      const tg_node *in = n->in[k];
      int64_t len = in->type.dim[n->axis].size;
      const char **ic = tg_alloc(e->arena, sizeof(char *) * (size_t)(t->rank + 1));
      for (int j = 0; j < t->rank; j++) ic[j] = c[j];
      ic[n->axis] = tg_sprintf(e->arena, "(%s < %lld ? 0 : %s >= %lld ? %lld : %s - %lld)", cc, (long long)at, cc,
                               (long long)(at + len), (long long)(len - 1), cc, (long long)at);
      val v = value_at(e, in, ic, d);
      if (k < n->nin - 1) tg_sb_printf(&b, "(%s < %lld ? %s : ", cc, (long long)(at + len), v.s);
      else tg_sb_printf(&b, "%s", v.s);
      at += len;
    }
    for (int k = 0; k < n->nin - 1; k++) tg_sb_printf(&b, ")");
    const char *r = tg_strdup(e->arena, b.s);
    tg_sb_free(&b);
    return r;
  }
  case TG_OP_assign: return value_at(e, n->in[1], c, d).s;
  default:
    internal(n, "this op cannot be emitted inside a nest");
  }
}

/* ---- the row cache (emit.h) --------------------------------------------------- */

static const char *store_conv(emitter *e, tg_dtype t, const char *v);
static const char *store_conv_of(emitter *e, const tg_node *n, tg_dtype t, const char *v);

static void defined_in_sweep(emitter *e, const tg_node *n, int d) {
  if (d == 2 && e->sweep > 0 && e->out->row_cache && !e->def_sweep[n->id]) {
    list_push(&scratch.set[MAXD + 1], n->id);
    e->def_sweep[n->id] = e->sweep;
  }
}

/* Appends a statement to the loop body of sweep `sweep` (already emitted). */
static void append_to_sweep(emitter *e, int sweep, const char *stmt) {
  tg_segment *sg = &e->out->seg[e->seg_of_sweep[sweep]];
  size_t a = strlen(sg->text), b = strlen(stmt);
  sg->text = tg_xrealloc(sg->text, a + b + 1);
  memcpy(sg->text + a, stmt, b + 1);
}

/* The value of n kept by the row cache from the sweep that computed it,
 * or NULL (not cached: compute or load it again).  A widening cast is
 * not kept itself: its input is, in the narrower type, and the cast is
 * redone from it for free. */
static const char *cached(emitter *e, const tg_node *n) {
  tg_nest_code *c = e->out;
  int from = e->def_sweep[n->id];
  if (!c->row_cache || !from || from >= e->sweep) return NULL;
  if (n->op == TG_OP_cast && tg_dtype_is_float(n->type.dtype) && tg_dtype_is_float(n->in[0]->type.dtype) &&
      tg_dtype_size(n->in[0]->type.dtype) <= tg_dtype_size(n->type.dtype))
    return NULL;
  tg_dtype t = n->type.dtype;
  int64_t row = e->st->nest.inner_count;
  const char *arr = tg_sprintf(e->arena, "tg_row_k%d_s%d", e->lk->kernel, e->step);
  int slot = e->cache_slot[n->id];
  if (slot < 0) {
    if (c->row_cache == TG_ROW_CACHE_REGS) {
      if ((e->n_slots + 1) * c->row_regs > TG_ROW_CACHE_MAX_REGS) return NULL;
      tg_sb_printf(&e->decl, "%s r%d[%d];\n", tg_compute_ctype(t), n->id, c->row_regs);
      append_to_sweep(e, from, tg_sprintf(e->arena, "r%d[u] = t%d;\n", n->id, n->id));
    } else {
      if (!tg_dtype_is_float(t) || (e->n_slots && t != e->shared_type)) return NULL;
      int64_t bytes = (int64_t)(e->n_slots + 1) * row * tg_dtype_size(t);
      if (bytes > TG_ROW_CACHE_MAX_SHARED) return NULL;
      if (!e->n_slots) {
        e->shared_type = t;
        tg_sb_printf(&e->decl, "TG_SHARED_DYNAMIC(%s, %s);\n", tg_storage_ctype(t), arr);
      }
      c->shared_bytes = bytes;
      append_to_sweep(e, from, tg_sprintf(e->arena, "%s[%lld + j] = %s;\n", arr, (long long)(e->n_slots * row),
                                          store_conv_of(e, n, t, tg_sprintf(e->arena, "t%d", n->id))));
    }
    list_push(&scratch.set[MAXD + 2], n->id);
    slot = e->cache_slot[n->id] = e->n_slots++;
  }
  if (c->row_cache == TG_ROW_CACHE_REGS) return tg_sprintf(e->arena, "r%d[u]", n->id);
  return load_from(e, t, arr, tg_sprintf(e->arena, "%lld + j", (long long)(slot * row)));
}

static val value_at(emitter *e, const tg_node *n, const char **c, int ctx_depth) {
  tg_dtype t = n->type.dtype;
  if (n->op == TG_OP_const) return (val){const_text(e, n), t};
  if (n->op == TG_OP_iota) return (val){tg_sprintf(e->arena, "(int)%s", c[n->axis]), t};
  const tg_node *b = tg_kernel_base(n);
  bool canonical = is_canonical(e, n, c);
  if (canonical && e->memo[0][n->id]) return (val){e->memo[0][n->id], t};
  if (canonical && e->memo[1][n->id]) return (val){e->memo[1][n->id], t};
  if (canonical && e->memo[2][n->id] && e->in_loop) return (val){e->memo[2][n->id], t};
  int d = canonical ? depth_of(e, n) : ctx_depth;
  if (d == 2 && !e->in_loop) internal(n, "a value varying along the inner axes read outside the sweeps");
  if (canonical && d == 2) {
    const char *x = cached(e, n);
    if (x) {
      const char *name = tname(e, n->id, d);
      define(e, d, t, name, x);
      memo_set(e, d, n->id, name);
      return (val){name, t};
    }
  }
  if (in_memory(e, b)) {
    const char *x = load(e, n, c, d);
    if (!canonical) return (val){x, t};
    const char *name = tname(e, n->id, d);
    define(e, d, t, name, x);
    memo_set(e, d, n->id, name);
    defined_in_sweep(e, n, d);
    return (val){name, t};
  }
  if (tg_is_view(n)) {
    /* a view of a value computed here: follow it by coordinates */
    val v = value_at(e, n->in[0], view_coords(e, n, c), d);
    if (canonical && d >= 0) memo_set(e, d, n->id, v.s);
    return v;
  }
  if (!computed_here(e, n))
    internal(n, "neither in memory nor computed in its reader's kernel");
  const char *x = compute(e, n, c, d);
  /* a bf16 value is computed in f32 and rounded, as the interpreter
   * rounds each value to its dtype, whether it is stored or not */
  if (*narrow_round(t) && !(t == TG_BF16 && keeps_bf16(n, 0))) x = tg_sprintf(e->arena, "%s(%s)", narrow_round(t), x);
  const char *name = canonical ? tname(e, n->id, d) : new_tmp(e);
  define(e, d, t, name, x);
  if (canonical) {
    memo_set(e, d, n->id, name);
    defined_in_sweep(e, n, d);
  }
  return (val){name, t};
}

/* ---- stores ------------------------------------------------------------------ */

/* The conversion storing node n's value v as dtype t: a bf16 value's
 * top half (holds_bf16), else store_conv's. */
static const char *store_conv_of(emitter *e, const tg_node *n, tg_dtype t, const char *v) {
  if (t == TG_BF16 && holds_bf16(n, 0)) return tg_sprintf(e->arena, "tg_bf16_bits(%s)", v);
  return store_conv(e, t, v);
}

static const char *store_conv(emitter *e, tg_dtype t, const char *v) {
  switch (t) {
  case TG_BF16: return tg_sprintf(e->arena, "tg_bf16_store(%s)", v);
  case TG_F16: return tg_sprintf(e->arena, "tg_f16_store(%s)", v);
  case TG_BOOL: return tg_sprintf(e->arena, "(unsigned char)(%s != 0)", v);
  default: return v;
  }
}

/* An in-place update of a state leaf where a condition holds,
 * assign(s, where(cond, x, s)) with s read whole at the point it is
 * written (the decode step's key/value cache row: cond is "this row is
 * pos"), stored only where cond holds: the rows it keeps are neither read
 * nor written back, which was a fifth of a GPT-2 decode step (the caches
 * rewritten whole for one row).  The same values land in memory.  C only:
 * the CUDA nests store per lane, and their traffic count reads the load. */
static bool conditional_update(const emitter *e, const tg_node *n) {
  if (e->d != TG_DIALECT_C || n->op != TG_OP_assign || e->vec > 1) return false;
  const tg_node *w = n->in[1], *s = n->in[0];
  if (w->op != TG_OP_where || w->in[2] != s || !computed_here(e, w) || s->type.rank != w->type.rank) return false;
  for (int i = 0; i < s->type.rank; i++)
    if (s->type.dim[i].size != w->type.dim[i].size) return false;
  return true;
}

/* The store of such an update into target, guard (or "") the store's own
 * condition. */
static void conditional_store(emitter *e, const tg_node *n, const char **c, int d, tg_sbuf *to, const char *guard,
                              const char *target) {
  const tg_node *w = n->in[1];
  val cond = value_at(e, w->in[0], input_coords(e, w, w->in[0], c), d);
  val x = value_at(e, w->in[1], input_coords(e, w, w->in[1], c), d);
  tg_sb_printf(to, "if (%s%s(%s)) %s = %s;\n", guard, *guard ? " && " : "", cond.s, target,
               store_conv(e, n->in[0]->type.dtype, x.s));
}

/* Stores n's value at its natural coordinates into its place; where n does
 * not vary along a domain axis, only the point at coordinate 0 of that axis
 * stores (the others would write the same value to the same place).  The
 * value's statements go to depth d, the store itself to `to`. */
static void store(emitter *e, const tg_node *n, int d, tg_sbuf *to) {
  const char **c = canon(e, &n->type);
  bool update = conditional_update(e, n);
  val v = update ? (val){NULL, n->type.dtype} : value_at(e, n, c, d);
  int base = n->op == TG_OP_assign ? tg_kernel_base(n->in[0])->id : n->id;
  const tg_node *bn = e->g->nodes[base];
  tg_layout lay;
  lay.offset = 0;
  int64_t s = 1;
  for (int i = bn->type.rank - 1; i >= 0; i--) {
    lay.stride[i] = bn->type.dim[i].size == 1 ? 0 : s;
    s *= bn->type.dim[i].size;
  }
  const char *off = affine(e, 0, lay.stride, c, n->type.rank);
  note_access(e, base, 0, lay.stride, &bn->type, d, true);
  tg_sbuf g = {0};
  const tg_nest *N = &e->st->nest;
  for (int a = 0; a < N->dom.rank; a++) {
    bool inner = N->inner >> a & 1;
    if (inner && d < 2) continue; /* outside the loop the inner coordinates do not exist */
    if (N->dom.dim[a].size > 1 && !tg_varies(&n->type, &N->dom, a)) tg_sb_printf(&g, "%si%d == 0", g.n ? " && " : "", a);
  }
  if (update) {
    conditional_store(e, n, c, d, to, g.n ? g.s : "", tg_sprintf(e->arena, "b%d[%s]", base, off));
    tg_sb_free(&g);
    return;
  }
  /* f32 only (lower.c: store_gelu_grads), so no conversion to wrap */
  bool derivative = e->p->holds_gelu_grad && e->p->holds_gelu_grad[n->id];
  const char *stmt =
      derivative ? tg_sprintf(e->arena, "b%d[%s] = tg_gelu_grad(%s); /* %%%d as its GELU's derivative */", base, off, v.s, n->id)
                 : tg_sprintf(e->arena, "b%d[%s] = %s;", base, off, store_conv_of(e, n, bn->type.dtype, v.s));
  if (g.n) tg_sb_printf(to, "if (%s) %s\n", g.s, stmt);
  else tg_sb_printf(to, "%s\n", stmt);
  tg_sb_free(&g);
}

/* ---- segments -------------------------------------------------------------- */

static void push_seg(tg_nest_code *c, tg_segment s) {
  c->seg = tg_xrealloc(c->seg, sizeof *c->seg * (size_t)(c->n_seg + 1));
  c->seg[c->n_seg++] = s;
}

/* Moves the pending outer statements into a segment of their own. */
static void flush_outer(emitter *e, tg_nest_code *c) {
  if (!e->buf[1].n) return;
  push_seg(c, (tg_segment){.loop = false, .text = tg_sb_take(&e->buf[1])});
}

static void coords_text(emitter *e, tg_sbuf *b, const int *axes, int n, const char *var) {
  const tg_type *D = dom(e);
  for (int k = 0; k < n; k++) {
    int a = axes[k];
    int64_t s = 1;
    for (int m = k + 1; m < n; m++) s *= D->dim[axes[m]].size;
    if (D->dim[a].size == 1) tg_sb_printf(b, "const tg_idx i%d = 0;\n", a);
    else if (k == 0 && s == 1) tg_sb_printf(b, "const tg_idx i%d = %s;\n", a, var);
    else if (k == 0) tg_sb_printf(b, "const tg_idx i%d = %s / %lld;\n", a, var, (long long)s);
    else if (s == 1) tg_sb_printf(b, "const tg_idx i%d = %s %% %lld;\n", a, var, (long long)D->dim[a].size);
    else tg_sb_printf(b, "const tg_idx i%d = %s / %lld %% %lld;\n", a, var, (long long)s, (long long)D->dim[a].size);
  }
  /* not every statement list reads every coordinate; say that is fine */
  for (int k = 0; k < n; k++) tg_sb_printf(b, "(void)i%d;\n", axes[k]);
}

static void scatter_code(emitter *e, tg_nest_code *c) {
  const tg_node *n = e->g->nodes[e->st->node];
  const tg_node *src = n->in[0], *idx = n->in[1];
  int ir = idx->type.rank;
  e->in_loop = true;
  const char **sc = canon(e, &src->type);
  val iv = value_at(e, idx, sc, 2);
  val sv = value_at(e, src, sc, 2);
  int64_t row = 1;
  for (int j = 1; j < n->type.rank; j++) row *= n->type.dim[j].size;
  tg_sbuf off = {0};
  /* CUDA, an f32 table whose block rows fit: the block adds into its rows
   * in shared memory (cuda_kernels.c: scatter_body), row v0 first */
  c->scatter_shared = e->d == TG_DIALECT_CUDA && n->type.dtype == TG_F32 &&
                      tg_cuda_scatter_rows(e->st) * row <= TG_SCATTER_SHARED_FLOATS;
  if (c->scatter_shared) tg_sb_printf(&off, "((tg_idx)%s - v0) * %lld", iv.s, (long long)row);
  else tg_sb_printf(&off, "(tg_idx)%s * %lld", iv.s, (long long)row);
  int64_t s = 1;
  for (int j = src->type.rank - 1; j >= ir; j--) {
    tg_sb_printf(&off, " + i%d * %lld", j, (long long)s);
    s *= src->type.dim[j].size;
  }
  if (c->scatter_shared) { /* the adds are cuda_kernels.c's, after the loads */
    c->scatter_value = tg_strdup(e->arena, sv.s);
    c->scatter_offset = tg_strdup(e->arena, off.s);
  } else {
    tg_sb_printf(&e->buf[2], "b%d[%s] += %s;\n", n->id, off.s, sv.s);
  }
  tg_sb_free(&off);
  /* the table zeroed or copied from the initial table (an in-place one is
   * the initial table: lower.c, find_in_place_scatters), then one read and
   * one write of it per source element */
  const char *init = NULL; /* the initial table at (v, the outer point) */
  if (n->nin == 3 && !e->st->in_place) {
    const char **tc = tg_alloc(e->arena, sizeof(char *) * (size_t)(n->type.rank + 1));
    tc[0] = "v";
    for (int j = 1; j < n->type.rank; j++) tc[j] = sc[ir + j - 1];
    init = load(e, n->in[2], tc, 1);
  }
  if (c->scatter_shared) {
    /* summed in shared memory: the table read (in place) and written once */
    if (e->st->in_place) note_elements(e, n->id, 0, tg_type_numel(&n->type), 1, false);
    note_elements(e, n->id, 0, tg_type_numel(&n->type), 1, true);
  } else {
    if (!e->st->in_place) note_elements(e, n->id, 0, tg_type_numel(&n->type), 0, true);
    note_elements(e, n->id, 0, tg_type_numel(&src->type), 1, false);
    note_elements(e, n->id, 0, tg_type_numel(&src->type), 1, true);
  }
  if (e->d == TG_DIALECT_CUDA) {
    /* the index of row j on its own, for the blocks' walk over the indices
     * (tg_cuda_scatter_rows), each of which reads every index once */
    char *body = tg_sb_take(&e->buf[2]);
    memo_clear(e, 2);
    int n_access = c->n_access;
    val ix = value_at(e, idx, sc, 2);
    c->n_access = n_access; /* counted below, once per block */
    c->index_code = tg_sb_take(&e->buf[2]);
    c->index_value = tg_strdup(e->arena, ix.s);
    int64_t rows = tg_cuda_scatter_rows(e->st), blocks = (n->type.dim[0].size + rows - 1) / rows;
    note_elements(e, tg_kernel_base(idx)->id, 0, blocks * tg_type_numel(&idx->type), 1, false);
    tg_sb_printf(&e->buf[2], "%s", body);
    free(body);
    /* each block zeroes, or fills, its own rows (cuda_kernels.c): not here */
    c->init_value = init ? tg_strdup(e->arena, init) : NULL;
    char *body2 = tg_sb_take(&e->buf[2]);
    flush_outer(e, c);
    push_seg(c, (tg_segment){.loop = true, .text = body2, .ordered = true});
    return;
  }
  /* each outer point owns one column of the table: it zeroes it (or fills
   * it from the initial table), then adds the rows in order, so the sums
   * are deterministic without atomics */
  tg_sbuf col = {0};
  s = 1;
  for (int j = src->type.rank - 1; j >= ir; j--) {
    tg_sb_printf(&col, " + i%d * %lld", j, (long long)s);
    s *= src->type.dim[j].size;
  }
  if (!e->st->in_place)
    tg_sb_printf(&e->buf[1], "for (tg_idx v = 0; v < %lld; v++) b%d[v * %lld%s] = %s;\n",
                 (long long)n->type.dim[0].size, n->id, (long long)row, col.s ? col.s : "", init ? init : "0");
  tg_sb_free(&col);
  char *body = tg_sb_take(&e->buf[2]);
  flush_outer(e, c);
  push_seg(c, (tg_segment){.loop = true, .text = body, .ordered = true});
}

/* The row cache: CUDA nests that reduce a row (one block a row) and walk
 * it more than once keep it in registers, or in shared memory when it is
 * long. */
static void choose_row_cache(const emitter *e, tg_nest_code *out) {
  const tg_nest *N = &e->st->nest;
  bool reduces = false;
  for (int w = 0; w < N->n_sweeps; w++) reduces |= N->sweeps[w].n_reduce > 0;
  if (e->d == TG_DIALECT_CUDA && e->st->kind == TG_STEP_NEST && reduces && N->n_sweeps > 1 &&
      !tg_cuda_column_nest(e->st)) {
    int64_t steps = (N->inner_count + 255) / 256;
    out->row_cache = steps <= TG_ROW_CACHE_MAX_STEPS ? TG_ROW_CACHE_REGS : TG_ROW_CACHE_SHARED;
    out->row_regs = out->row_cache == TG_ROW_CACHE_REGS ? (int)steps : 0;
  }
}

/* The reductions sweep S folds in, each with the value it folds (NULL
 * when none). */
static tg_reduction *sweep_reductions(emitter *e, const tg_sweep *S) {
  const tg_nest *N = &e->st->nest;
  tg_reduction *red = S->n_reduce ? calloc((size_t)S->n_reduce, sizeof *red) : NULL;
  for (int r = 0; r < S->n_reduce; r++) {
    const tg_node *rn = e->g->nodes[S->reduce[r]];
    const tg_node *in = rn->in[0];
    val v = value_at(e, in, canon(e, &in->type), 2);
    /* inner axes along which the input is broadcast: count it once */
    tg_sbuf g = {0};
    for (int a = 0; a < N->dom.rank; a++)
      if ((N->inner >> a & 1) && N->dom.dim[a].size > 1 && !tg_varies(&in->type, &N->dom, a))
        tg_sb_printf(&g, "%si%d == 0", g.n ? " && " : "", a);
    bool is_max = rn->op == TG_OP_max;
    const char *x = v.s;
    if (g.n) x = tg_sprintf(e->arena, "((%s) ? %s : %s)", g.s, v.s, is_max ? "(-tg_inf())" : "0.0f");
    tg_sb_free(&g);
    red[r] = (tg_reduction){rn->id, is_max, x, tg_compute_ctype(rn->type.dtype), narrow_round(rn->type.dtype)};
  }
  return red;
}

/* A row-group nest's column sums folded in sweep w (lower.h), *n_col of
 * them (NULL when none). */
static tg_reduction *sweep_column_sums(emitter *e, int w, int *n_col) {
  const tg_nest *N = &e->st->nest;
  *n_col = 0;
  for (int k = 0; k < N->n_colsum; k++) *n_col += N->colsum_sweep[k] == w + 1;
  tg_reduction *col = *n_col ? calloc((size_t)*n_col, sizeof *col) : NULL;
  for (int k = 0, m = 0; k < N->n_colsum; k++) {
    if (N->colsum_sweep[k] != w + 1) continue;
    const tg_node *cn = e->g->nodes[N->colsum[k]], *x = cn->in[0]->in[0];
    val v = value_at(e, x, canon(e, &x->type), 2);
    col[m++] = (tg_reduction){cn->id, false, v.s, tg_compute_ctype(cn->type.dtype), narrow_round(cn->type.dtype)};
  }
  return col;
}

/* Sweep w as a loop segment after the outer statements it needs; its
 * reductions are then t<N> at the outer level. */
static void sweep_code(emitter *e, tg_nest_code *out, int w) {
  const tg_sweep *S = &e->st->nest.sweeps[w];
  e->in_loop = true;
  e->sweep = w + 1;
  memo_clear(e, 2);
  tg_reduction *red = sweep_reductions(e, S);
  int n_col;
  tg_reduction *col = sweep_column_sums(e, w, &n_col);
  for (e->lane = 0; e->lane < e->vec; e->lane++) {
    if (e->lane) memo_clear(e, 2);
    for (int k = 0; k < S->n_store; k++) store(e, e->g->nodes[S->store[k]], 2, &e->buf[2]);
  }
  e->lane = 0;
  e->n_v = 0;
  e->in_loop = false;
  e->sweep = 0;
  char *body = tg_sb_take(&e->buf[2]);
  flush_outer(e, out);
  e->seg_of_sweep[w + 1] = out->n_seg;
  push_seg(out, (tg_segment){.loop = true, .text = body, .red = red, .n_red = S->n_reduce, .col = col, .n_col = n_col});
  for (int r = 0; r < S->n_reduce; r++) memo_set(e, 1, S->reduce[r], tg_sprintf(e->arena, "t%d", S->reduce[r]));
}

/* After the sweeps: the post stores, whose values join the outer
 * statements (every thread computes them) while the stores themselves go
 * to post_only (one does), and a row-group nest's column sums, stored
 * once per group at [tg_g, j]. */
static void post_code(emitter *e, tg_nest_code *out) {
  const tg_nest *N = &e->st->nest;
  e->in_loop = false;
  tg_sbuf post = {0};
  for (int k = 0; k < N->n_post; k++) store(e, e->g->nodes[N->post[k]], 1, &post);
  flush_outer(e, out);
  out->post_only = tg_sb_take(&post);
  tg_sbuf cs = {0};
  for (int k = 0; k < N->n_colsum; k++) {
    const tg_node *cn = e->g->nodes[N->colsum[k]];
    tg_sb_printf(&cs, "b%d[(tg_idx)tg_g * %lld + j] = %s;\n", cn->id, (long long)N->inner_count,
                 store_conv(e, cn->type.dtype, tg_sprintf(e->arena, "col%d[j]", cn->id)));
    note_elements(e, cn->id, 0, tg_type_numel(&cn->type), 0, true);
  }
  out->col_store = tg_sb_take(&cs);
}

void tg_emit_nest(const tg_program *p, const tg_lkernel *lk, int s, tg_dialect d, tg_nest_code *out) {
  memset(out, 0, sizeof *out);
  emitter e = {.p = p, .g = p->g, .lk = lk, .st = &lk->steps[s], .step = s, .d = d, .out = out};
  e.vec = tg_nest_vec_width(&lk->steps[s], d);
  e.vec_axis = e.vec > 1 ? lk->steps[s].nest.inner_axes[0] : -1;
  out->vec = e.vec;
  e.arena = p->g->arena;
  scratch_reserve(p->g->n_nodes + 1);
  for (int k = 0; k < MAXD; k++) e.memo[k] = scratch.memo[k];
  e.dep_red = scratch.dep_red;
  const tg_nest *N = &e.st->nest;
  choose_row_cache(&e, out);
  e.def_sweep = scratch.def_sweep;
  e.cache_slot = scratch.cache_slot;
  e.seg_of_sweep = tg_xcalloc((size_t)N->n_sweeps + 2, sizeof *e.seg_of_sweep);
  tg_sbuf oc = {0}, ic = {0};
  coords_text(&e, &oc, N->outer_axes, N->n_outer, "o");
  coords_text(&e, &ic, N->inner_axes, N->n_inner, "j");
  out->outer_coords = tg_sb_take(&oc);
  out->inner_coords = tg_sb_take(&ic);
  if (N->n_outer) {
    tg_sbuf lc = {0}, cc = {0};
    coords_text(&e, &lc, N->outer_axes, N->n_outer - 1, "lead");
    coords_text(&e, &cc, &N->outer_axes[N->n_outer - 1], 1, "c");
    out->lead_coords = tg_sb_take(&lc);
    out->last_coord = tg_sb_take(&cc);
  }
  if (e.st->kind == TG_STEP_SCATTER) {
    scatter_code(&e, out);
  } else {
    for (int w = 0; w < N->n_sweeps; w++) sweep_code(&e, out, w);
    post_code(&e, out);
  }
  out->uniform = tg_sb_take(&e.buf[0]);
  out->cache_decl = tg_sb_take(&e.decl);
  if (!e.n_slots) out->row_cache = TG_ROW_CACHE_NONE, out->row_regs = 0; /* nothing was worth keeping */
  free(e.seg_of_sweep);
  for (int k = 0; k < MAXD; k++) tg_sb_free(&e.buf[k]);
  scratch_release();
  free(e.vkeys);
  free(e.vnames);
}

int64_t tg_cuda_scatter_rows(const tg_step *st) {
  int64_t rows = st->table_rows / (4 * 132), cols = st->nest.outer_count;
  rows = rows < 1 ? 1 : rows > 64 ? 64 : rows;
  /* rows short enough to be summed in shared memory */
  if (cols >= 1 && cols <= TG_SCATTER_SHARED_FLOATS && rows * cols > TG_SCATTER_SHARED_FLOATS)
    rows = TG_SCATTER_SHARED_FLOATS / cols;
  return rows;
}

bool tg_cuda_column_nest(const tg_step *st) {
  const tg_nest *N = &st->nest;
  if (st->kind != TG_STEP_NEST || N->n_outer < 1 || N->n_inner < 1 || N->inner_count < 2) return false;
  bool reduces = false;
  for (int w = 0; w < N->n_sweeps; w++) reduces |= N->sweeps[w].n_reduce > 0;
  int last = N->dom.rank - 1;
  return reduces && N->outer_axes[N->n_outer - 1] == last && N->dom.dim[last].size > 1 &&
         N->outer_count % TG_COLUMN_TILE == 0;
}

int tg_nest_vec_width(const tg_step *st, tg_dialect d) {
  const tg_nest *N = &st->nest;
  if (d != TG_DIALECT_CUDA || st->kind != TG_STEP_NEST || N->n_inner != 1 || N->inner_count % 4) return 1;
  for (int w = 0; w < N->n_sweeps; w++)
    if (N->sweeps[w].n_reduce) return 1;
  return N->n_sweeps == 1 ? 4 : 1;
}

void tg_nest_code_free(tg_nest_code *c) {
  free(c->uniform);
  free(c->outer_coords);
  free(c->inner_coords);
  free(c->lead_coords);
  free(c->last_coord);
  for (int i = 0; i < c->n_seg; i++) {
    free(c->seg[i].text);
    free(c->seg[i].red);
    free(c->seg[i].col);
  }
  free(c->seg);
  free(c->post_only);
  free(c->col_store);
  free(c->access);
  free(c->cache_decl);
  free(c->index_code);
  memset(c, 0, sizeof *c);
}

void tg_emit_lines(FILE *out, const char *text, const char *indent) {
  for (const char *l = text; l && *l;) {
    const char *nl = strchr(l, '\n');
    size_t len = nl ? (size_t)(nl - l) : strlen(l);
    fprintf(out, "%s%.*s\n", indent, (int)len, l);
    l = nl ? nl + 1 : NULL;
  }
}

/* ---- parameters and comments ------------------------------------------------ */

/* The type of a parameter: CUDA's TG_ARG(T) is T *__restrict__ on the GPU
 * and a checked pointer on the emulated device (flash.h:
 * tg_cuda_emit_memory_macros); inputs are const. */
static void put_param_type(tg_sbuf *b, tg_dialect d, bool written, tg_dtype dtype) {
  if (d == TG_DIALECT_CUDA) tg_sb_printf(b, "TG_ARG(%s%s)", written ? "" : "const ", tg_storage_ctype(dtype));
  else tg_sb_printf(b, "%s%s *restrict", written ? "" : "const ", tg_storage_ctype(dtype));
}

void tg_emit_params(tg_sbuf *b, const tg_program *p, const tg_lkernel *lk, tg_dialect d) {
  for (int a = 0; a < lk->n_args; a++) {
    const tg_node *n = p->g->nodes[lk->args[a]];
    if (a) tg_sb_puts(b, ", ");
    put_param_type(b, d, lk->arg_written[a], n->type.dtype);
    tg_sb_printf(b, " b%d", n->id);
  }
  if (!lk->n_args) tg_sb_printf(b, "void");
}

const char *tg_emit_param_decl(void *ctx, long node) {
  const tg_param_ctx *x = ctx;
  int i = tg_lkernel_arg(x->lk, node);
  if (i < 0) return NULL;
  tg_sbuf b = {0};
  put_param_type(&b, x->d, x->lk->arg_written[i], x->p->g->nodes[node]->type.dtype);
  const char *decl = tg_strdup(x->a, tg_sb_text(&b));
  tg_sb_free(&b);
  return decl;
}

static const char *short_file(const char *f) {
  const char *s = f ? strrchr(f, '/') : NULL;
  return s ? s + 1 : f ? f : "?";
}

void tg_emit_kernel_comment(tg_sbuf *b, const tg_program *p, const tg_lkernel *lk) {
  const tg_graph *g = p->g;
  const tg_kernel *K = &g->kernels[lk->kernel];
  tg_sb_printf(b, "/* k%d %s \"%s\": %d ops\n", lk->kernel, tg_kernel_kind_name(K->kind), K->name, K->n_nodes);
  /* the ops by source line, in first-seen order, as the fusion report lists them */
  for (int a = 0; a < K->n_nodes; a++) {
    const tg_node *n = g->nodes[K->nodes[a]];
    bool seen = false;
    for (int x = 0; x < a && !seen; x++) {
      const tg_node *m = g->nodes[K->nodes[x]];
      seen = m->loc.line == n->loc.line && !strcmp(short_file(m->loc.file), short_file(n->loc.file));
    }
    if (seen) continue;
    tg_sb_printf(b, " *   %s:%d:", short_file(n->loc.file), n->loc.line);
    for (int x = a; x < K->n_nodes; x++) {
      const tg_node *m = g->nodes[K->nodes[x]];
      if (m->loc.line == n->loc.line && !strcmp(short_file(m->loc.file), short_file(n->loc.file)))
        tg_sb_printf(b, " %s%%%d", tg_ops[m->op].name, m->id);
    }
    tg_sb_printf(b, "\n");
  }
  tg_sb_printf(b, " */\n");
}
