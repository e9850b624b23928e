/* type.c: the op table, dtypes, and type inference.
 *
 * tg_infer_type is the single statement of what type each op produces; the
 * frontend, the IR reader and the verifier all go through it, so a graph
 * that one accepts the others accept too. */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const tg_op_info tg_ops[TG_NOPS] = {
#define X(name, arity, kind, attr, deriv, doc) {#name, arity, TG_KIND_##kind, TG_ATTR_##attr, doc},
#include "ops.def"
#undef X
};

static const char *const kind_names[TG_NKINDS] = {
    "leaf", "elementwise", "reduction", "movement", "matmul", "special"};

static const char *const phase_names[TG_NPHASES] = {"forward", "backward", "optimizer"};

const char *tg_phase_name(tg_phase p) { return p < TG_NPHASES ? phase_names[p] : "?"; }

bool tg_phase_parse(const char *s, size_t n, tg_phase *out) {
  for (int i = 0; i < TG_NPHASES; i++)
    if (strlen(phase_names[i]) == n && memcmp(phase_names[i], s, n) == 0) {
      *out = (tg_phase)i;
      return true;
    }
  return false;
}

const char *tg_kind_name(tg_kind k) { return k < TG_NKINDS ? kind_names[k] : "?"; }

bool tg_op_lookup(const char *name, size_t n, tg_op *out) {
  for (int i = 0; i < TG_NOPS; i++)
    if (strlen(tg_ops[i].name) == n && memcmp(tg_ops[i].name, name, n) == 0) {
      *out = (tg_op)i;
      return true;
    }
  return false;
}

bool tg_op_is_flash_attention(tg_op op) {
  return op == TG_OP_flash_attention_lse || op == TG_OP_flash_attention || op == TG_OP_flash_attention_dq ||
         op == TG_OP_flash_attention_dk || op == TG_OP_flash_attention_dv;
}

bool tg_op_is_collective(tg_op op) {
  return op == TG_OP_all_reduce || op == TG_OP_all_gather || op == TG_OP_reduce_scatter || op == TG_OP_all_max;
}

static const struct {
  const char *name;
  int size;
  bool is_float;
} dtypes[TG_NDTYPES] = {
    [TG_F32] = {"f32", 4, true}, [TG_BF16] = {"bf16", 2, true}, [TG_F16] = {"f16", 2, true},
    [TG_I32] = {"i32", 4, false}, [TG_BOOL] = {"bool", 1, false},
};

const char *tg_dtype_name(tg_dtype t) { return t < TG_NDTYPES ? dtypes[t].name : "?"; }
int tg_dtype_size(tg_dtype t) { return t < TG_NDTYPES ? dtypes[t].size : 0; }
bool tg_dtype_is_float(tg_dtype t) { return t < TG_NDTYPES && dtypes[t].is_float; }

bool tg_dtype_parse(const char *s, size_t n, tg_dtype *out) {
  for (int i = 0; i < TG_NDTYPES; i++)
    if (strlen(dtypes[i].name) == n && memcmp(dtypes[i].name, s, n) == 0) {
      *out = (tg_dtype)i;
      return true;
    }
  return false;
}

static const char *const split_names[TG_NSPLITS] = {
    [TG_SPLIT_NONE] = "replicated", [TG_SPLIT_COLUMNS] = "columns", [TG_SPLIT_ROWS] = "rows", [TG_SPLIT_VOCAB] = "vocab"};

const char *tg_split_name(tg_split s) { return s >= 0 && s < TG_NSPLITS ? split_names[s] : "?"; }

bool tg_split_parse(const char *s, size_t n, tg_split *out) {
  for (int i = 0; i < TG_NSPLITS; i++)
    if (strlen(split_names[i]) == n && memcmp(split_names[i], s, n) == 0) {
      *out = (tg_split)i;
      return true;
    }
  return false;
}

int64_t tg_type_numel(const tg_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dim[i].size;
  return n;
}

bool tg_type_same_shape(const tg_type *a, const tg_type *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i].size != b->dim[i].size) return false;
  return true;
}

bool tg_type_equal(const tg_type *a, const tg_type *b) {
  return a->dtype == b->dtype && tg_type_same_shape(a, b);
}

bool tg_type_fits(const tg_type *a, const tg_type *b) {
  if (a->rank > b->rank) return false;
  for (int i = 1; i <= a->rank; i++) {
    int64_t x = a->dim[a->rank - i].size, y = b->dim[b->rank - i].size;
    if (x != y && x != 1) return false;
  }
  return true;
}

char *tg_type_str(const tg_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", tg_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && k < n; i++) {
    const char *sep = i ? ", " : "";
    if (t->dim[i].sym)
      k += (size_t)snprintf(buf + k, n - k, "%s%s=%lld", sep, t->dim[i].sym,
                            (long long)t->dim[i].size);
    else
      k += (size_t)snprintf(buf + k, n - k, "%s%lld", sep, (long long)t->dim[i].size);
  }
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

const char *tg_fmt_int(long long v, char *buf, size_t *len) {
  char *p = buf + TG_FMT_INT_MAX;
  unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  do *--p = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0) *--p = '-';
  *len = (size_t)(buf + TG_FMT_INT_MAX - p);
  return p;
}

char *tg_fmt_double(double d, char *buf, size_t n) {
  if (isnan(d)) return snprintf(buf, n, "nan"), buf;
  if (isinf(d)) return snprintf(buf, n, d < 0 ? "-inf" : "inf"), buf;
  /* Sizes and counts read best as plain integers: 50257, not 5.0257e+04. */
  if (d == floor(d) && fabs(d) < 9007199254740992.0) {
    /* "%.0f" by hand but for -0 (which it spells "-0"): the IR's
     * constants are mostly integers, and printf's float path is slow */
    if (d == 0 && signbit(d)) {
      snprintf(buf, n, "%.0f", d);
      return buf;
    }
    char digits[24], *p = digits + sizeof digits;
    long long v = (long long)d;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    *--p = 0;
    do *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0) *--p = '-';
    snprintf(buf, n, "%s", p);
    return buf;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) break;
  }
  return buf;
}

/* ---- inference ---------------------------------------------------------- */

#define FAIL(...) \
  do { \
    snprintf(why, whylen, __VA_ARGS__); \
    return false; \
  } while (0)

static bool check_shape(const tg_type *t, char *why, size_t whylen) {
  if (t->rank < 0 || t->rank > TG_MAX_RANK) FAIL("rank %d is outside 0..%d", t->rank, TG_MAX_RANK);
  if (t->dtype >= TG_NDTYPES) FAIL("unknown dtype");
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    int64_t d = t->dim[i].size;
    if (d < 1) FAIL("dim %d has size %lld; sizes must be at least 1", i, (long long)d);
    if (d > TG_MAX_ELEMS || n > TG_MAX_ELEMS / d)
      FAIL("tensor too large (more than 2^48 elements)");
    n *= d;
  }
  return true;
}

/* numpy broadcasting of a and b's shapes into out (dtype not set). */
static bool broadcast(const tg_type *a, const tg_type *b, tg_type *out, char *why, size_t whylen) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    tg_dim da = ia >= 0 ? a->dim[ia] : (tg_dim){1, NULL};
    tg_dim db = ib >= 0 ? b->dim[ib] : (tg_dim){1, NULL};
    if (da.size == db.size) out->dim[i] = (tg_dim){da.size, da.sym ? da.sym : db.sym};
    else if (da.size == 1) out->dim[i] = db;
    else if (db.size == 1) out->dim[i] = da;
    else {
      char sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
      /* Count from the right: that is how broadcasting aligns the dims. */
      char which[32] = "the last dim";
      if (r - i > 1) snprintf(which, sizeof which, "dim -%d", r - i);
      FAIL("shapes do not broadcast: %s and %s differ in %s (%lld vs %lld)",
           tg_type_str(a, sa, sizeof sa), tg_type_str(b, sb, sizeof sb), which,
           (long long)da.size, (long long)db.size);
    }
  }
  return true;
}

static bool is_compare(tg_op op) {
  return op == TG_OP_lt || op == TG_OP_le || op == TG_OP_gt || op == TG_OP_ge ||
         op == TG_OP_eq || op == TG_OP_ne;
}

/* The shapes the flash attention ops share: q, k, v (the first three
 * inputs) float [..., T, D] of one type; the lse input (at lse_at, or -1)
 * [..., T, 1]; the o and do inputs (at o_at and o_at + 2, or -1) like q;
 * and a finite scale. */
static bool check_flash(const tg_node *n, int nqkv, int lse_at, int o_at, char *why,
                        size_t whylen) {
  const char *opn = tg_ops[n->op].name;
  const tg_type *q = &n->in[0]->type;
  char sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
  if (q->rank < 2 || !tg_dtype_is_float(q->dtype))
    FAIL("%s needs float q of rank at least 2 ([..., T, D]), not %s", opn,
         tg_type_str(q, sa, sizeof sa));
  if (!isfinite(n->value)) FAIL("%s needs a finite scale", opn);
  for (int i = 1; i < nqkv; i++)
    if (!tg_type_equal(&n->in[i]->type, q))
      FAIL("%s: %s differs from q %s", opn, tg_type_str(&n->in[i]->type, sa, sizeof sa),
           tg_type_str(q, sb, sizeof sb));
  if (o_at >= 0)
    for (int i = o_at; i <= o_at + 2; i += 2)
      if (!tg_type_equal(&n->in[i]->type, q))
        FAIL("%s: %s %s differs from q %s", opn, i == o_at ? "o" : "do",
             tg_type_str(&n->in[i]->type, sa, sizeof sa), tg_type_str(q, sb, sizeof sb));
  if (lse_at >= 0) {
    tg_type want = *q;
    want.dim[want.rank - 1] = (tg_dim){1, NULL};
    want.dtype = TG_F32; /* the row statistics stay f32 whatever q is */
    if (!tg_type_equal(&n->in[lse_at]->type, &want))
      FAIL("%s: lse %s is not %s", opn, tg_type_str(&n->in[lse_at]->type, sa, sizeof sa),
           tg_type_str(&want, sb, sizeof sb));
  }
  return true;
}

/* The ops with no tensor inputs: their type is the node's own, checked. */
static bool infer_leaf(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  switch (n->op) {
  case TG_OP_input:
  case TG_OP_param:
  case TG_OP_state:
    *out = n->type;
    if (n->op != TG_OP_input && !tg_dtype_is_float(out->dtype))
      FAIL("parameters must have a float dtype, not %s", tg_dtype_name(out->dtype));
    if (n->op != TG_OP_input && n->init.kind == TG_INIT_NORMAL &&
        !(n->init.std >= 0 && isfinite(n->init.std)))
      FAIL("normal() needs a finite standard deviation >= 0");
    return check_shape(out, why, whylen);
  case TG_OP_const:
    *out = n->type;
    if (out->rank != 0) FAIL("const must be a scalar");
    if (out->dtype == TG_I32 && !(n->value == floor(n->value) && fabs(n->value) <= 2147483647.0))
      FAIL("an i32 const must hold an integer, not %g", n->value);
    if (out->dtype == TG_BOOL && n->value != 0 && n->value != 1)
      FAIL("a bool const must be 0 or 1, not %g", n->value);
    return true;
  case TG_OP_iota:
    *out = n->type;
    if (out->dtype != TG_I32) FAIL("iota gives i32, not %s", tg_dtype_name(out->dtype));
    if (out->rank < 1) FAIL("iota needs a shape of rank at least 1");
    if (n->axis < 0 || n->axis >= out->rank)
      FAIL("iota axis %d is outside 0..%d", n->axis, out->rank - 1);
    if (!check_shape(out, why, whylen)) return false;
    if (out->dim[n->axis].size > INT32_MAX) FAIL("iota along an axis longer than 2^31-1");
    return true;
  default:
    FAIL("op %s has no leaf type rule", tg_ops[n->op].name);
  }
}

/* Elementwise ops: the operands' broadcast shape; a dtype rule per op. */
static bool infer_elementwise(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  const char *opn = tg_ops[n->op].name;
  const tg_type *a = &n->in[0]->type;
  const tg_type *b = n->nin > 1 ? &n->in[1]->type : NULL;
  char sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
  switch (n->op) {
  case TG_OP_neg:
    if (a->dtype == TG_BOOL) FAIL("neg of a bool tensor");
    *out = *a;
    return true;
  case TG_OP_exp:
  case TG_OP_log:
  case TG_OP_sqrt:
  case TG_OP_rsqrt:
  case TG_OP_tanh:
  case TG_OP_gelu:
  case TG_OP_gelu_grad:
    if (!tg_dtype_is_float(a->dtype))
      FAIL("%s needs a float tensor, not %s", opn, tg_type_str(a, sa, sizeof sa));
    *out = *a;
    return true;
  case TG_OP_cast:
    *out = *a;
    out->dtype = n->type.dtype;
    if (out->dtype >= TG_NDTYPES) FAIL("cast to an unknown dtype");
    return true;

  case TG_OP_add: case TG_OP_sub: case TG_OP_mul: case TG_OP_div: case TG_OP_maximum:
  case TG_OP_lt: case TG_OP_le: case TG_OP_gt: case TG_OP_ge: case TG_OP_eq: case TG_OP_ne:
    if (a->dtype != b->dtype)
      FAIL("%s of different dtypes: %s and %s", opn, tg_type_str(a, sa, sizeof sa),
           tg_type_str(b, sb, sizeof sb));
    if (a->dtype == TG_BOOL && n->op != TG_OP_eq && n->op != TG_OP_ne)
      FAIL("%s of bool tensors", opn);
    if (!broadcast(a, b, out, why, whylen)) return false;
    out->dtype = is_compare(n->op) ? TG_BOOL : a->dtype;
    return true;
  case TG_OP_where: {
    const tg_type *c = &n->in[2]->type;
    if (a->dtype != TG_BOOL)
      FAIL("where's condition must be bool, not %s", tg_type_str(a, sa, sizeof sa));
    if (b->dtype != c->dtype)
      FAIL("where's branches differ in dtype: %s and %s", tg_type_str(b, sa, sizeof sa),
           tg_type_str(c, sb, sizeof sb));
    tg_type t;
    if (!broadcast(a, b, &t, why, whylen) || !broadcast(&t, c, out, why, whylen)) return false;
    out->dtype = b->dtype;
    return true;
  }
  default:
    FAIL("op %s has no elementwise type rule", tg_ops[n->op].name);
  }
}

/* Reductions keep the rank: each reduced axis becomes 1. */
static bool infer_reduction(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  const char *opn = tg_ops[n->op].name;
  const tg_type *a = &n->in[0]->type;
  switch (n->op) {
  case TG_OP_sum:
  case TG_OP_max:
    if (a->dtype == TG_BOOL) FAIL("%s of a bool tensor", opn);
    if (n->axes == 0) FAIL("%s over no axes", opn);
    if (a->rank < 32 && (n->axes >> a->rank) != 0)
      FAIL("%s over an axis beyond the input's rank %d", opn, a->rank);
    *out = *a;
    for (int i = 0; i < a->rank; i++)
      if (n->axes >> i & 1) out->dim[i] = (tg_dim){1, NULL};
    return true;
  default:
    FAIL("op %s has no reduction type rule", tg_ops[n->op].name);
  }
}

/* Ops that move or resize elements without computing: the shape follows the op's fields. */
static bool infer_layout(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  const tg_type *a = &n->in[0]->type;
  char sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
  switch (n->op) {
  case TG_OP_reshape:
    *out = n->type;
    out->dtype = a->dtype;
    if (!check_shape(out, why, whylen)) return false;
    if (tg_type_numel(out) != tg_type_numel(a))
      FAIL("reshape of %s (%lld elements) to %s (%lld elements)", tg_type_str(a, sa, sizeof sa),
           (long long)tg_type_numel(a), tg_type_str(out, sb, sizeof sb),
           (long long)tg_type_numel(out));
    return true;
  case TG_OP_transpose: {
    unsigned seen = 0;
    for (int i = 0; i < a->rank; i++) {
      int p = n->perm[i];
      if (p < 0 || p >= a->rank || (seen >> p & 1))
        FAIL("transpose: perm is not a permutation of 0..%d", a->rank - 1);
      seen |= 1u << p;
    }
    *out = *a;
    for (int i = 0; i < a->rank; i++) out->dim[i] = a->dim[n->perm[i]];
    return true;
  }
  case TG_OP_slice:
    if (n->axis < 0 || n->axis >= a->rank)
      FAIL("slice axis %d is outside 0..%d", n->axis, a->rank - 1);
    if (n->start < 0 || n->len < 1 || n->start > a->dim[n->axis].size - n->len)
      FAIL("slice of length %lld from %lld is outside dim %d of %s", (long long)n->len,
           (long long)n->start, n->axis, tg_type_str(a, sa, sizeof sa));
    *out = *a;
    out->dim[n->axis] = (tg_dim){n->len, NULL};
    return true;
  case TG_OP_concat: {
    if (n->axis < 0 || n->axis >= a->rank)
      FAIL("concat axis %d is outside 0..%d", n->axis, a->rank - 1);
    *out = *a;
    int64_t total = 0;
    for (int i = 0; i < n->nin; i++) {
      const tg_type *t = &n->in[i]->type;
      bool ok = t->dtype == a->dtype && t->rank == a->rank;
      for (int d = 0; ok && d < a->rank; d++)
        ok = d == n->axis || t->dim[d].size == a->dim[d].size;
      if (!ok)
        FAIL("concat along axis %d of %s and %s: other dims and dtype must agree", n->axis,
             tg_type_str(a, sa, sizeof sa), tg_type_str(t, sb, sizeof sb));
      total += t->dim[n->axis].size;
      if (total > TG_MAX_ELEMS) FAIL("concat result too large");
    }
    out->dim[n->axis] = (tg_dim){total, NULL};
    return check_shape(out, why, whylen);
  }
  case TG_OP_expand: {
    *out = n->type;
    out->dtype = a->dtype;
    if (!check_shape(out, why, whylen)) return false;
    bool ok = a->rank <= out->rank;
    for (int i = 0; ok && i < a->rank; i++) {
      int64_t d = a->dim[a->rank - 1 - i].size;
      ok = d == 1 || d == out->dim[out->rank - 1 - i].size;
    }
    if (!ok)
      FAIL("expand: %s does not broadcast to %s", tg_type_str(a, sa, sizeof sa),
           tg_type_str(out, sb, sizeof sb));
    return true;
  }
  case TG_OP_pad:
    if (n->axis < 0 || n->axis >= a->rank)
      FAIL("pad axis %d is outside 0..%d", n->axis, a->rank - 1);
    if (n->start < 0 || n->len > TG_MAX_ELEMS || n->start > n->len - a->dim[n->axis].size)
      FAIL("pad of dim %d of %s to length %lld at %lld does not fit", n->axis,
           tg_type_str(a, sa, sizeof sa), (long long)n->len, (long long)n->start);
    *out = *a;
    out->dim[n->axis] = (tg_dim){n->len, NULL};
    return check_shape(out, why, whylen);
  default:
    FAIL("op %s has no layout type rule", tg_ops[n->op].name);
  }
}

/* Gather and scatter_add: a table indexed by i32 indices. */
static bool infer_indexing(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  const tg_type *a = &n->in[0]->type;
  const tg_type *b = n->nin > 1 ? &n->in[1]->type : NULL; /* scatter_add checks its count */
  char sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
  switch (n->op) {
  case TG_OP_gather:
    if (a->rank < 1) FAIL("gather from a scalar");
    if (b->dtype != TG_I32)
      FAIL("gather indices must be i32, not %s", tg_type_str(b, sb, sizeof sb));
    if (b->rank + a->rank - 1 > TG_MAX_RANK) FAIL("gather result has rank above %d", TG_MAX_RANK);
    out->dtype = a->dtype;
    out->rank = b->rank + a->rank - 1;
    for (int i = 0; i < b->rank; i++) out->dim[i] = b->dim[i];
    for (int i = 1; i < a->rank; i++) out->dim[b->rank + i - 1] = a->dim[i];
    return check_shape(out, why, whylen);
  case TG_OP_scatter_add: {
    /* src [idx dims..., rest...], idx i32 [idx dims...] -> [V, rest...];
     * an initial table init, when given, is of the result's type */
    if (n->nin != 2 && n->nin != 3) FAIL("scatter_add takes 2 or 3 inputs, got %d", n->nin);
    *out = n->type;
    out->dtype = a->dtype;
    if (!check_shape(out, why, whylen)) return false;
    if (n->nin == 3) {
      const tg_type *t = &n->in[2]->type;
      if (t->dtype != out->dtype || !tg_type_same_shape(t, out)) {
        char sc[TG_TYPE_STR_MAX];
        FAIL("scatter_add's initial table %s is not of its result's type %s", tg_type_str(t, sa, sizeof sa),
             tg_type_str(out, sc, sizeof sc));
      }
    }
    if (b->dtype != TG_I32) FAIL("scatter_add indices must be i32, not %s", tg_type_str(b, sb, sizeof sb));
    bool ok = out->rank >= 1 && a->rank == b->rank + out->rank - 1;
    for (int i = 0; ok && i < b->rank; i++) ok = a->dim[i].size == b->dim[i].size;
    for (int i = 1; ok && i < out->rank; i++) ok = a->dim[b->rank + i - 1].size == out->dim[i].size;
    if (!ok) {
      char sc[TG_TYPE_STR_MAX];
      FAIL("scatter_add of %s at indices %s cannot give %s", tg_type_str(a, sa, sizeof sa),
           tg_type_str(b, sb, sizeof sb), tg_type_str(&n->type, sc, sizeof sc));
    }
    return true;
  }
  default:
    FAIL("op %s has no indexing type rule", tg_ops[n->op].name);
  }
}

/* assign writes a param or state of exactly its type. */
static bool infer_assign(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  const tg_type *a = &n->in[0]->type;
  const tg_type *b = &n->in[1]->type;
  char sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
  if (n->in[0]->op != TG_OP_param && n->in[0]->op != TG_OP_state)
    FAIL("assign's target must be a param or state, not %s", tg_ops[n->in[0]->op].name);
  if (!tg_type_equal(a, b))
    FAIL("assign of %s to %s", tg_type_str(b, sb, sizeof sb), tg_type_str(a, sa, sizeof sa));
  *out = *b;
  return true;
}

/* Flash attention ops: check_flash's shapes; the result is q's, or f32 statistics. */
/* Collectives: 1-D values only, as base/shard.h's flat shards are; the
 * group size is the node's ranks attribute. */
static bool infer_collective(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  const char *opn = tg_ops[n->op].name;
  const tg_type *a = &n->in[0]->type;
  char sa[TG_TYPE_STR_MAX];
  if (n->ranks < 1) FAIL("%s needs ranks >= 1, got %d", opn, n->ranks);
  if (a->rank != 1)
    FAIL("%s takes a 1-D value, not %s (flatten it first)", opn, tg_type_str(a, sa, sizeof sa));
  *out = *a;
  int64_t size = a->dim[0].size;
  if (n->op == TG_OP_all_gather) {
    if (size > TG_MAX_ELEMS / n->ranks)
      FAIL("all_gather of %s over %d ranks is too large", tg_type_str(a, sa, sizeof sa), n->ranks);
    out->dim[0] = (tg_dim){size * n->ranks, NULL};
  } else if (n->op == TG_OP_reduce_scatter) {
    if (size % n->ranks != 0)
      FAIL("reduce_scatter of %s: %lld elements do not split into %d equal blocks",
           tg_type_str(a, sa, sizeof sa), (long long)size, n->ranks);
    out->dim[0] = (tg_dim){size / n->ranks, NULL};
  }
  return check_shape(out, why, whylen);
}

static bool infer_flash(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  const tg_type *a = &n->in[0]->type;
  switch (n->op) {
  case TG_OP_flash_attention_lse:
    if (!check_flash(n, 2, -1, -1, why, whylen)) return false;
    *out = *a;
    out->dim[out->rank - 1] = (tg_dim){1, NULL};
    out->dtype = TG_F32; /* log-sum-exp of scores: f32 even for bf16 q, k */
    return true;
  case TG_OP_flash_attention:
    if (!check_flash(n, 3, 3, -1, why, whylen)) return false;
    *out = *a;
    return true;
  case TG_OP_flash_attention_dq:
  case TG_OP_flash_attention_dk:
  case TG_OP_flash_attention_dv:
    if (!check_flash(n, 3, 4, 3, why, whylen)) return false;
    *out = n->in[n->op - TG_OP_flash_attention_dq]->type; /* q's, k's or v's */
    return true;
  default:
    FAIL("op %s has no flash type rule", tg_ops[n->op].name);
  }
}

/* matmul: batch dims broadcast, [.., M, K] @ [.., K, N] -> [.., M, N]. */
static bool infer_matmul(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  const tg_type *a = &n->in[0]->type;
  const tg_type *b = &n->in[1]->type;
  char sa[TG_TYPE_STR_MAX], sb[TG_TYPE_STR_MAX];
  if (a->rank < 2 || b->rank < 2)
    FAIL("matmul needs operands of rank at least 2: %s @ %s", tg_type_str(a, sa, sizeof sa),
         tg_type_str(b, sb, sizeof sb));
  if (!tg_dtype_is_float(a->dtype) || a->dtype != b->dtype)
    FAIL("matmul needs float operands of one dtype: %s @ %s", tg_type_str(a, sa, sizeof sa),
         tg_type_str(b, sb, sizeof sb));
  int64_t k1 = a->dim[a->rank - 1].size, k2 = b->dim[b->rank - 2].size;
  if (k1 != k2)
    FAIL("matmul: inner dimensions differ: %s @ %s (%lld vs %lld)",
         tg_type_str(a, sa, sizeof sa), tg_type_str(b, sb, sizeof sb), (long long)k1,
         (long long)k2);
  tg_type ba = *a, bb = *b;
  ba.rank -= 2;
  bb.rank -= 2;
  if (!broadcast(&ba, &bb, out, why, whylen)) {
    char inner[256];
    snprintf(inner, sizeof inner, "%s", why);
    FAIL("matmul: batch dims: %s", inner);
  }
  out->dtype = a->dtype;
  out->dim[out->rank] = a->dim[a->rank - 2];
  out->dim[out->rank + 1] = b->dim[b->rank - 1];
  out->rank += 2;
  return check_shape(out, why, whylen);
}

bool tg_infer_type(const tg_node *n, tg_type *out, char *why, size_t whylen) {
  if (n->op >= TG_NOPS) FAIL("op number %d is not in the op table", (int)n->op);
  const tg_op_info *info = &tg_ops[n->op];
  const char *opn = info->name;
  if (info->arity >= 0 && n->nin != info->arity)
    FAIL("%s takes %d input%s, got %d", opn, info->arity, info->arity == 1 ? "" : "s", n->nin);
  if (info->arity < 0 && n->nin < 1) FAIL("%s needs at least one input", opn);
  for (int i = 0; i < n->nin; i++)
    if (!n->in[i]) FAIL("%s: input %d is missing", opn, i);

  switch (n->op) {
  case TG_OP_input: case TG_OP_param: case TG_OP_state: case TG_OP_const: case TG_OP_iota:
    return infer_leaf(n, out, why, whylen);
  case TG_OP_neg: case TG_OP_exp: case TG_OP_log: case TG_OP_sqrt: case TG_OP_rsqrt:
  case TG_OP_tanh: case TG_OP_gelu: case TG_OP_gelu_grad: case TG_OP_cast: case TG_OP_add:
  case TG_OP_sub: case TG_OP_mul: case TG_OP_div: case TG_OP_maximum: case TG_OP_lt: case TG_OP_le:
  case TG_OP_gt: case TG_OP_ge: case TG_OP_eq: case TG_OP_ne: case TG_OP_where:
    return infer_elementwise(n, out, why, whylen);
  case TG_OP_sum: case TG_OP_max:
    return infer_reduction(n, out, why, whylen);
  case TG_OP_reshape: case TG_OP_transpose: case TG_OP_slice: case TG_OP_concat: case TG_OP_expand:
  case TG_OP_pad:
    return infer_layout(n, out, why, whylen);
  case TG_OP_gather: case TG_OP_scatter_add:
    return infer_indexing(n, out, why, whylen);
  case TG_OP_assign:
    return infer_assign(n, out, why, whylen);
  case TG_OP_flash_attention_lse: case TG_OP_flash_attention: case TG_OP_flash_attention_dq:
  case TG_OP_flash_attention_dk: case TG_OP_flash_attention_dv:
    return infer_flash(n, out, why, whylen);
  case TG_OP_all_reduce: case TG_OP_all_gather: case TG_OP_reduce_scatter: case TG_OP_all_max:
    return infer_collective(n, out, why, whylen);
  case TG_OP_replicate:
    if (n->ranks < 1) FAIL("replicate needs ranks >= 1, got %d", n->ranks);
    *out = n->in[0]->type;
    return true;
  case TG_OP_matmul:
    return infer_matmul(n, out, why, whylen);
  default:
    FAIL("op %s has no type rule", opn);
  }
}
