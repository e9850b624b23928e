/* interp.c: the reference interpreter (see interp.h).
 *
 * This is the oracle every other part of tg is checked against, so it is
 * written to be obviously right rather than fast:
 *
 *  - Every node gets its own buffer of numel doubles, allocated once in
 *    tg_interp_new and kept, so any node's value can be inspected after a
 *    run.  Graphs holding more than TG_INTERP_MAX_VALUES values in all are
 *    refused: tg_interp_check says why, tg_interp_new returns NULL.
 *  - Elements are located by plain index arithmetic: a flat index is
 *    unravelled into coordinates, the coordinates are mapped to the
 *    input's, and raveled back.  Broadcasting is a stride of 0 on the dims
 *    an input stretches along; one helper does this for every elementwise
 *    op (and for expand, which is the same thing materialised).
 *  - Sums and matmul dot products accumulate in double, in index order.
 *
 * Precision.  Every value is computed in double.  Then, per node:
 *   TG_PREC_F64: f32 nodes keep the exact double (in this mode "f32" means
 *                "as exact as we can"); bf16 and f16 nodes are rounded to
 *                their format, since that rounding is part of the program.
 *   TG_PREC_F32: f32 nodes are rounded to float, as a float32 machine
 *                stores them; bf16 and f16 nodes are rounded to float and
 *                then to their format, as such a machine would convert.
 * The rounding is to nearest, ties to even, with gradual underflow and
 * overflow to infinity.  Only each node's result is rounded: a reduction
 * or a matmul accumulates in double and rounds once, so F32 mode models
 * what a float32 machine stores, not its order of additions.  Leaves
 * (inputs, params, states) go through the same step: in F32 mode the
 * caller's doubles are rounded to float in place, before any use.
 *
 * Integers.  i32 values must be integers in [-2^31, 2^31): every i32
 * node's result is checked, and a value that is not (an overflow, a cast
 * of nan or of 3e10, a division by zero) is reported, never wrapped.  i32
 * division truncates toward zero, as C does.  cast to i32 truncates toward
 * zero, as C's conversion does; cast to bool gives 1 for any nonzero value
 * (nan included); comparisons give 1 or 0; where picks a when cond != 0.
 * Non-finite floats (inf, nan) are not errors: they propagate as IEEE says.
 *
 * Assigns.  Each assign node's value is its input's value; once every node
 * of the run is computed, each assign's value is copied into its target
 * leaf's storage, in graph order (so if two assigns target one leaf, the
 * later wins), and the next run sees the updated params and states.
 *
 * The graph must not change while an interpreter made for it exists. */
#include "interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "gelu.h"

struct tg_interp {
  const tg_graph *g;
  tg_precision prec;
  int n;          /* g->n_nodes when the interpreter was made */
  double **val;   /* val[i]: node i's numel values, row-major */
  int64_t *numel; /* numel[i]: node i's element count */
  bool *bound;    /* bound[i]: val[i] is the caller's memory (tg_interp_bind_leaf) */
};

/* ---- rounding to narrower float formats --------------------------------- */

/* v rounded to the nearest value of a binary floating-point format with p
 * significand bits (counting the implicit one) and normal exponents
 * emin..emax; ties to even, gradual underflow, overflow to +-inf.  The
 * quantum (the format's spacing at v) is a power of two, so scaling v by
 * it is exact and rounding to an integer there is the whole conversion. */
static double round_to_format(double v, int p, int emin, int emax) {
  if (v == 0 || !isfinite(v)) return v;
  int e;
  frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
  int lead = e - 1 < emin ? emin : e - 1; /* below emin: subnormal spacing */
  int q = lead - (p - 1);                 /* the quantum is 2^q */
  double r = ldexp(nearbyint(ldexp(v, -q)), q);
  double largest = ldexp(2 - ldexp(1, 1 - p), emax);
  return fabs(r) > largest ? copysign(INFINITY, v) : r;
}

static double round_f32(double v) { return round_to_format(v, 24, -126, 127); }
static double round_bf16(double v) { return round_to_format(v, 8, -126, 127); }
static double round_f16(double v) { return round_to_format(v, 11, -14, 15); }

/* ---- index arithmetic --------------------------------------------------- */

/* Row-major coordinates of flat index i in a tensor of type t. */
static void unravel(int64_t i, const tg_type *t, int64_t *coord) {
  for (int d = t->rank - 1; d >= 0; d--) {
    coord[d] = i % t->dim[d].size;
    i /= t->dim[d].size;
  }
}

/* Flat row-major index of coord in a tensor of type t. */
static int64_t ravel(const int64_t *coord, const tg_type *t) {
  int64_t i = 0;
  for (int d = 0; d < t->rank; d++) i = i * t->dim[d].size + coord[d];
  return i;
}

/* Row-major strides of t, except 0 for each dim of size 1: an input that
 * is broadcast along a dim is then read at the same place for every
 * coordinate of the result along it. */
static void broadcast_strides(const tg_type *t, int64_t *stride) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    stride[d] = t->dim[d].size == 1 ? 0 : s;
    s *= t->dim[d].size;
  }
}

/* Offset of the element that coordinates coord[0..nc) select in a tensor
 * whose first nd dims have the given strides, dims aligned from the right
 * (numpy's rule: the input's last dim meets the result's last dim). */
static int64_t aligned_offset(const int64_t *stride, int nd, const int64_t *coord, int nc) {
  int64_t off = 0;
  for (int d = 0; d < nd; d++) off += coord[nc - nd + d] * stride[d];
  return off;
}

/* ---- errors ------------------------------------------------------------- */

static const char *op_name(tg_op op) { return op < TG_NOPS ? tg_ops[op].name : "?"; }

/* "%12, gather": how messages name the node at position i. */
static const char *node_ref(const tg_interp *it, int i, char *buf, size_t n) {
  snprintf(buf, n, "%%%d, %s", i, op_name(it->g->nodes[i]->op));
  return buf;
}

/* ---- elementwise -------------------------------------------------------- */

/* One element of an elementwise op (or expand) from its inputs' elements
 * x[0..nin).  Adding an elementwise op is one case here. */
static double scalar(const tg_node *n, const double *x) {
  tg_dtype dt = n->type.dtype;
  switch (n->op) {
  case TG_OP_expand: return x[0];
  case TG_OP_neg: return -x[0];
  case TG_OP_exp: return exp(x[0]);
  case TG_OP_log: return log(x[0]);
  case TG_OP_sqrt: return sqrt(x[0]);
  case TG_OP_rsqrt: return 1 / sqrt(x[0]);
  case TG_OP_tanh: return tanh(x[0]);
  /* in double: the reference the generated tg_gelu and tg_gelu_grad (codegen) are held to */
  case TG_OP_gelu: return tg_gelu_tanh(x[0]);
  case TG_OP_gelu_grad: return tg_gelu_tanh_grad(x[0]);
  case TG_OP_cast:
    /* Float targets round afterwards like any node (see finish_node). */
    if (dt == TG_I32) return trunc(x[0]);
    if (dt == TG_BOOL) return x[0] != 0;
    return x[0];
  case TG_OP_add: return x[0] + x[1];
  case TG_OP_sub: return x[0] - x[1];
  case TG_OP_mul: return x[0] * x[1];
  case TG_OP_div:
    if (dt == TG_I32) {
      /* C's truncating division on exact integers; a zero divisor gives
       * nan, which the i32 check then reports. */
      if (x[1] == 0) return NAN;
      return (double)((int64_t)x[0] / (int64_t)x[1]);
    }
    return x[0] / x[1];
  case TG_OP_maximum: return x[0] > x[1] || isnan(x[0]) ? x[0] : x[1]; /* nan wins */
  case TG_OP_lt: return x[0] < x[1];
  case TG_OP_le: return x[0] <= x[1];
  case TG_OP_gt: return x[0] > x[1];
  case TG_OP_ge: return x[0] >= x[1];
  case TG_OP_eq: return x[0] == x[1];
  case TG_OP_ne: return x[0] != x[1];
  case TG_OP_where: return x[0] != 0 ? x[1] : x[2];
  default: return NAN; /* not reached: eval sends only the ops above here */
  }
}

/* out[i] = scalar(inputs at the element i selects, broadcasting). */
static void elementwise(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  enum { MAX_IN = 3 };
  int64_t stride[MAX_IN][TG_MAX_RANK];
  const double *in[MAX_IN];
  for (int k = 0; k < n->nin; k++) {
    broadcast_strides(&n->in[k]->type, stride[k]);
    in[k] = it->val[n->in[k]->id];
  }
  double *out = it->val[i];
  int64_t coord[TG_MAX_RANK];
  double x[MAX_IN];
  for (int64_t e = 0; e < it->numel[i]; e++) {
    unravel(e, &n->type, coord);
    for (int k = 0; k < n->nin; k++)
      x[k] = in[k][aligned_offset(stride[k], n->in[k]->type.rank, coord, n->type.rank)];
    out[e] = scalar(n, x);
  }
}

/* ---- reductions --------------------------------------------------------- */

/* sum or max over n->axes; reduced axes are kept with size 1, so an input
 * element's result is at its own coordinates with those axes set to 0. */
static void reduce(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  const tg_type *ti = &n->in[0]->type;
  const double *in = it->val[n->in[0]->id];
  double *out = it->val[i];
  bool is_max = n->op == TG_OP_max;
  for (int64_t e = 0; e < it->numel[i]; e++) out[e] = is_max ? -INFINITY : 0;
  int64_t coord[TG_MAX_RANK];
  for (int64_t e = 0; e < tg_type_numel(ti); e++) {
    unravel(e, ti, coord);
    for (int d = 0; d < ti->rank; d++)
      if (n->axes >> d & 1) coord[d] = 0;
    double *acc = &out[ravel(coord, &n->type)];
    if (!is_max) *acc += in[e];
    else if (in[e] > *acc || isnan(in[e])) *acc = in[e]; /* a nan, once in, stays */
  }
}

/* ---- movement ----------------------------------------------------------- */

static void transpose(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  const double *in = it->val[n->in[0]->id];
  int64_t oc[TG_MAX_RANK], ic[TG_MAX_RANK];
  for (int64_t e = 0; e < it->numel[i]; e++) {
    unravel(e, &n->type, oc);
    for (int d = 0; d < n->type.rank; d++) ic[n->perm[d]] = oc[d]; /* result dim d is input dim perm[d] */
    it->val[i][e] = in[ravel(ic, &n->in[0]->type)];
  }
}

static void slice(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  const double *in = it->val[n->in[0]->id];
  int64_t c[TG_MAX_RANK];
  for (int64_t e = 0; e < it->numel[i]; e++) {
    unravel(e, &n->type, c);
    c[n->axis] += n->start;
    it->val[i][e] = in[ravel(c, &n->in[0]->type)];
  }
}

/* Copies src (of type ts) into out (of type to) shifted by `shift` along
 * axis: what pad and each part of a concat do. */
static void place(double *out, const tg_type *to, const double *src, const tg_type *ts, int axis,
                  int64_t shift) {
  int64_t c[TG_MAX_RANK];
  for (int64_t e = 0; e < tg_type_numel(ts); e++) {
    unravel(e, ts, c);
    c[axis] += shift;
    out[ravel(c, to)] = src[e];
  }
}

static void pad(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  for (int64_t e = 0; e < it->numel[i]; e++) it->val[i][e] = 0;
  place(it->val[i], &n->type, it->val[n->in[0]->id], &n->in[0]->type, n->axis, n->start);
}

static void concat(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  int64_t at = 0;
  for (int k = 0; k < n->nin; k++) {
    place(it->val[i], &n->type, it->val[n->in[k]->id], &n->in[k]->type, n->axis, at);
    at += n->in[k]->type.dim[n->axis].size;
  }
}

/* The row an index selects, after checking it names one of V rows. */
static int64_t row_index(tg_ctx *ctx, const tg_interp *it, int i, double v, int64_t V) {
  if (!(v >= 0 && v < (double)V && v == floor(v))) {
    char num[32], ref[64];
    tg_error(ctx, it->g->nodes[i]->loc, "%s index %s is outside [0, %lld) (node %s)",
             op_name(it->g->nodes[i]->op), tg_fmt_double(v, num, sizeof num), (long long)V,
             node_ref(it, i, ref, sizeof ref));
  }
  return (int64_t)v;
}

/* table [V, rest...] picked by idx [I...] gives [I..., rest...]: result
 * row j (of the rest's size) is table row idx[j]. */
static void gather(tg_ctx *ctx, tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  const tg_node *table = n->in[0], *idx = n->in[1];
  int64_t V = table->type.dim[0].size, row = it->numel[table->id] / V;
  for (int64_t j = 0; j < it->numel[idx->id]; j++) {
    int64_t r = row_index(ctx, it, i, it->val[idx->id][j], V);
    for (int64_t k = 0; k < row; k++) it->val[i][j * row + k] = it->val[table->id][r * row + k];
  }
}

/* The reverse of gather: src row j is added to result row idx[j], in
 * order of j, onto the initial table (zeros when there is none). */
static void scatter_add(tg_ctx *ctx, tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  const tg_node *src = n->in[0], *idx = n->in[1];
  int64_t V = n->type.dim[0].size, row = it->numel[i] / V;
  for (int64_t e = 0; e < it->numel[i]; e++) it->val[i][e] = n->nin == 3 ? it->val[n->in[2]->id][e] : 0;
  for (int64_t j = 0; j < it->numel[idx->id]; j++) {
    int64_t r = row_index(ctx, it, i, it->val[idx->id][j], V);
    for (int64_t k = 0; k < row; k++) it->val[i][r * row + k] += it->val[src->id][j * row + k];
  }
}

/* ---- matmul ------------------------------------------------------------- */

/* a [..., M, K] @ b [..., K, N]: for each batch coordinate of the result,
 * the batch dims of a and b (broadcast, aligned from the right) pick one
 * M x K and one K x N matrix, multiplied by the textbook triple loop. */
static void matmul(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  const tg_type *ta = &n->in[0]->type, *tb = &n->in[1]->type, *to = &n->type;
  const double *a = it->val[n->in[0]->id], *b = it->val[n->in[1]->id];
  int64_t M = to->dim[to->rank - 2].size, N = to->dim[to->rank - 1].size;
  int64_t K = ta->dim[ta->rank - 1].size;
  int64_t sa[TG_MAX_RANK], sb[TG_MAX_RANK];
  broadcast_strides(ta, sa); /* only the batch dims' strides are used */
  broadcast_strides(tb, sb);
  tg_type batch = *to;
  batch.rank -= 2;
  int64_t coord[TG_MAX_RANK];
  for (int64_t bi = 0; bi < tg_type_numel(&batch); bi++) {
    unravel(bi, &batch, coord);
    const double *A = a + aligned_offset(sa, ta->rank - 2, coord, batch.rank);
    const double *B = b + aligned_offset(sb, tb->rank - 2, coord, batch.rank);
    double *C = it->val[i] + bi * M * N;
    for (int64_t m = 0; m < M; m++)
      for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += A[m * K + k] * B[k * N + j];
        C[m * N + j] = acc;
      }
  }
}

/* ---- flash attention ---------------------------------------------------- */

/* Keys per tile of the online softmax.  Small on purpose: the interpreter
 * is checked against the unsubstituted graph on short sequences, and a
 * small tile makes those cross several tiles, so the running max and the
 * rescaling are exercised.  The result does not depend on it beyond
 * rounding. */
enum { FLASH_TILE = 4 };

/* One [T, D] matrix of each of q, k, v, o, do and the T values of lse, for
 * one batch coordinate (the leading dims, flattened). */
typedef struct flash_mats {
  int64_t T, D;
  const double *q, *k, *v, *o, *lse, *dout;
} flash_mats;

static double dot(const double *a, const double *b, int64_t n) {
  double acc = 0;
  for (int64_t d = 0; d < n; d++) acc += a[d] * b[d];
  return acc;
}

/* The forward of causal attention for query row i, FlashAttention's way:
 * keys are visited a tile at a time, keeping the running max m, the
 * running sum l of exp(s - m) and the accumulator acc = sum exp(s - m) v;
 * when a tile raises the max, l and acc are rescaled by exp(m_old - m_new).
 * Writes the row's output (acc / l) into o_row when non-NULL and returns
 * the row's log-sum-exp m + log l. */
static double flash_row(const flash_mats *M, double scale, int64_t i, double *o_row) {
  double m = -INFINITY, l = 0;
  if (o_row)
    for (int64_t d = 0; d < M->D; d++) o_row[d] = 0;
  for (int64_t j0 = 0; j0 <= i; j0 += FLASH_TILE) {
    int64_t j1 = j0 + FLASH_TILE < i + 1 ? j0 + FLASH_TILE : i + 1;
    double s[FLASH_TILE], tile_max = -INFINITY;
    for (int64_t j = j0; j < j1; j++) {
      s[j - j0] = scale * dot(M->q + i * M->D, M->k + j * M->D, M->D);
      if (s[j - j0] > tile_max) tile_max = s[j - j0];
    }
    double m_new = tile_max > m ? tile_max : m;
    double rescale = m == -INFINITY ? 0 : exp(m - m_new); /* nothing kept yet: 0 */
    l *= rescale;
    if (o_row)
      for (int64_t d = 0; d < M->D; d++) o_row[d] *= rescale;
    for (int64_t j = j0; j < j1; j++) {
      double p = exp(s[j - j0] - m_new);
      l += p;
      if (o_row)
        for (int64_t d = 0; d < M->D; d++) o_row[d] += p * M->v[j * M->D + d];
    }
    m = m_new;
  }
  if (o_row)
    for (int64_t d = 0; d < M->D; d++) o_row[d] /= l;
  return m + log(l);
}

/* The backward for one batch matrix, from the formulas with P recomputed
 * from the saved lse: P_ij = exp(s_ij - lse_i) (j <= i), Drow_i = do_i.o_i,
 * dS_ij = P_ij (do_i.v_j - Drow_i); then dq = scale dS k, dk = scale dSᵀ q,
 * dv = Pᵀ do.  Accumulates the gradient op asks for into out (zeroed). */
static void flash_backward(const flash_mats *M, double scale, tg_op op, double *out) {
  int64_t T = M->T, D = M->D;
  for (int64_t e = 0; e < T * D; e++) out[e] = 0;
  for (int64_t i = 0; i < T; i++) {
    const double *qi = M->q + i * D, *doi = M->dout + i * D;
    double drow = dot(doi, M->o + i * D, D);
    for (int64_t j = 0; j <= i; j++) {
      const double *kj = M->k + j * D;
      double p = exp(scale * dot(qi, kj, D) - M->lse[i]);
      double ds = p * (dot(doi, M->v + j * D, D) - drow);
      for (int64_t d = 0; d < D; d++) {
        if (op == TG_OP_flash_attention_dq) out[i * D + d] += scale * ds * kj[d];
        else if (op == TG_OP_flash_attention_dk) out[j * D + d] += scale * ds * qi[d];
        else out[j * D + d] += p * doi[d];
      }
    }
  }
}

/* Every flash attention op: loops over the batch coordinates (all dims but
 * the last two, which the type rule makes the same for every input).
 * flash_attention computes its output afresh with the online softmax; its
 * lse input is there to make the saved statistic part of the forward (a
 * kernel writes both at once), not to be read. */
static void flash_attention(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  const tg_type *tq = &n->in[0]->type;
  int64_t T = tq->dim[tq->rank - 2].size, D = tq->dim[tq->rank - 1].size;
  int64_t batches = tg_type_numel(tq) / (T * D);
  bool bwd = n->op != TG_OP_flash_attention_lse && n->op != TG_OP_flash_attention;
  for (int64_t b = 0; b < batches; b++) {
    const double *in[6] = {0};
    for (int k = 0; k < n->nin; k++) {
      int64_t per = it->numel[n->in[k]->id] / batches; /* T*D, or T for lse */
      in[k] = it->val[n->in[k]->id] + b * per;
    }
    flash_mats M = {T, D, in[0], in[1], in[2], NULL, NULL, NULL};
    if (bwd) {
      M.o = in[3], M.lse = in[4], M.dout = in[5];
      flash_backward(&M, n->value, n->op, it->val[i] + b * T * D);
      continue;
    }
    for (int64_t r = 0; r < T; r++) {
      if (n->op == TG_OP_flash_attention_lse) it->val[i][b * T + r] = flash_row(&M, n->value, r, NULL);
      else flash_row(&M, n->value, r, it->val[i] + (b * T + r) * D);
    }
  }
}

/* ---- leaves ------------------------------------------------------------- */

static void iota(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  int64_t c[TG_MAX_RANK];
  for (int64_t e = 0; e < it->numel[i]; e++) {
    unravel(e, &n->type, c);
    it->val[i][e] = (double)c[n->axis];
  }
}

/* ---- collectives ---------------------------------------------------------- */

/* tg_comm_sum_doubles takes an int count: a long value goes in pieces. */
static void sum_over_ranks(double *v, int64_t n) {
  for (int64_t at = 0; at < n; at += 1 << 30) tg_comm_sum_doubles(v + at, (int)(n - at < (1 << 30) ? n - at : 1 << 30));
}

/* all_reduce: every rank's x summed; all_gather: rank q's [S] at [q*S, q*S+S)
 * of the [N*S] result; reduce_scatter: this rank's block of the sum of the
 * [N*S] inputs.  The sums are plain (not averaged) and the same bits on every
 * rank; tg_interp_check has made sure the graph's ranks is tg_comm_size(). */
static void collective(tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  const double *x = it->val[n->in[0]->id];
  int64_t in_n = it->numel[n->in[0]->id];
  bool was = tg_comm_use_tensor(n->over_tensor);
  int me = n->over_tensor ? tg_comm_tensor_rank() : tg_comm_rank(), ranks = n->ranks;
  if (n->op == TG_OP_all_reduce) {
    memcpy(it->val[i], x, sizeof(double) * (size_t)in_n);
    sum_over_ranks(it->val[i], in_n);
  } else if (n->op == TG_OP_all_max) {
    memcpy(it->val[i], x, sizeof(double) * (size_t)in_n);
    tg_comm_max_doubles(it->val[i], in_n);
  } else if (n->op == TG_OP_all_gather) {
    int64_t *counts = tg_xcalloc((size_t)ranks, sizeof *counts), *displs = tg_xcalloc((size_t)ranks, sizeof *displs);
    for (int q = 0; q < ranks; q++) counts[q] = in_n, displs[q] = (int64_t)q * in_n;
    memcpy(it->val[i] + displs[me], x, sizeof(double) * (size_t)in_n);
    if (ranks > 1) tg_comm_all_gather_in_place(it->val[i], counts, displs, (int)sizeof(double));
    free(counts);
    free(displs);
  } else { /* reduce_scatter: the whole sum, then this rank's block (exact, unlike average-and-multiply) */
    double *all = tg_xcalloc((size_t)in_n, sizeof *all);
    memcpy(all, x, sizeof(double) * (size_t)in_n);
    sum_over_ranks(all, in_n);
    int64_t block = in_n / ranks;
    memcpy(it->val[i], all + (int64_t)me * block, sizeof(double) * (size_t)block);
    free(all);
  }
  tg_comm_use_tensor(was);
}

/* ---- one node ----------------------------------------------------------- */

/* Computes node i into its buffer.  Adding an op is one case here (and,
 * for an elementwise op, one in scalar()). */
static void eval(tg_ctx *ctx, tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  switch (n->op) {
  case TG_OP_input:
  case TG_OP_param:
  case TG_OP_state:
    return; /* the caller's values (or the initialiser's), kept in place */
  case TG_OP_const: it->val[i][0] = n->value; return;
  case TG_OP_iota: iota(it, i); return;

  case TG_OP_neg: case TG_OP_exp: case TG_OP_log: case TG_OP_sqrt: case TG_OP_rsqrt:
  case TG_OP_tanh: case TG_OP_gelu: case TG_OP_gelu_grad: case TG_OP_cast:
  case TG_OP_add: case TG_OP_sub: case TG_OP_mul: case TG_OP_div: case TG_OP_maximum:
  case TG_OP_lt: case TG_OP_le: case TG_OP_gt: case TG_OP_ge: case TG_OP_eq: case TG_OP_ne:
  case TG_OP_where:
  case TG_OP_expand:
    elementwise(it, i);
    return;

  case TG_OP_sum:
  case TG_OP_max: reduce(it, i); return;

  case TG_OP_reshape: /* row-major order is unchanged: the same numbers */
    memcpy(it->val[i], it->val[n->in[0]->id], sizeof(double) * (size_t)it->numel[i]);
    return;
  case TG_OP_transpose: transpose(it, i); return;
  case TG_OP_slice: slice(it, i); return;
  case TG_OP_pad: pad(it, i); return;
  case TG_OP_concat: concat(it, i); return;
  case TG_OP_gather: gather(ctx, it, i); return;
  case TG_OP_scatter_add: scatter_add(ctx, it, i); return;
  case TG_OP_matmul: matmul(it, i); return;
  case TG_OP_flash_attention_lse: case TG_OP_flash_attention:
  case TG_OP_flash_attention_dq: case TG_OP_flash_attention_dk: case TG_OP_flash_attention_dv:
    flash_attention(it, i);
    return;
  case TG_OP_all_reduce: case TG_OP_all_gather: case TG_OP_reduce_scatter: case TG_OP_all_max: collective(it, i); return;
  case TG_OP_assign: /* gives its value; the leaf is updated after the run */
    memcpy(it->val[i], it->val[n->in[1]->id], sizeof(double) * (size_t)it->numel[i]);
    return;
  default: {
    char ref[64];
    if (n->op < TG_NOPS)
      tg_error(ctx, n->loc, "the interpreter has no rule for op %s (node %s)", op_name(n->op),
               node_ref(it, i, ref, sizeof ref));
    tg_error(ctx, n->loc, "the interpreter has no rule for op number %d (node %%%d)", (int)n->op, i);
  }
  }
}

/* Brings node i's values to its dtype: rounds floats as the precision mode
 * says (see the top of this file) and checks integers and booleans. */
static void finish_node(tg_ctx *ctx, tg_interp *it, int i) {
  const tg_node *n = it->g->nodes[i];
  double *v = it->val[i];
  bool f32 = it->prec == TG_PREC_F32;
  for (int64_t e = 0; e < it->numel[i]; e++) {
    switch (n->type.dtype) {
    case TG_F32: if (f32) v[e] = round_f32(v[e]); break;
    case TG_BF16: v[e] = round_bf16(f32 ? round_f32(v[e]) : v[e]); break;
    case TG_F16: v[e] = round_f16(f32 ? round_f32(v[e]) : v[e]); break;
    case TG_I32:
    case TG_BOOL: {
      bool ok = n->type.dtype == TG_I32
                    ? v[e] == floor(v[e]) && v[e] >= -2147483648.0 && v[e] <= 2147483647.0
                    : v[e] == 0 || v[e] == 1;
      if (!ok) {
        char num[32], ref[64];
        tg_error(ctx, n->loc, "element %lld is %s, which %s cannot hold (node %s)", (long long)e,
                 tg_fmt_double(v[e], num, sizeof num), tg_dtype_name(n->type.dtype),
                 node_ref(it, i, ref, sizeof ref));
      }
      break;
    }
    default: break;
    }
  }
}

/* ---- the interface ------------------------------------------------------ */

bool tg_interp_check(const tg_graph *g, char *why, size_t whylen) {
  int64_t total = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    total += tg_type_numel(&g->nodes[i]->type); /* each <= 2^48: no overflow */
    if (total > TG_INTERP_MAX_VALUES) {
      snprintf(why, whylen,
               "the graph holds more than %lld values (%lld by node %%%d); the reference "
               "interpreter keeps every node's value as doubles and allows at most %lld",
               (long long)TG_INTERP_MAX_VALUES, (long long)total, i,
               (long long)TG_INTERP_MAX_VALUES);
      return false;
    }
    const tg_node *n = g->nodes[i];
    int group = n->over_tensor ? tg_comm_tensor_size() : tg_comm_size();
    if (tg_op_is_collective(n->op) && n->ranks != group) {
      snprintf(why, whylen,
               "node %%%d (%s) is a collective over %d %sranks, but this run has %d; "
               "run it under mpirun -np %d",
               i, tg_ops[n->op].name, n->ranks, n->over_tensor ? "tensor " : "", group, n->ranks);
      return false;
    }
  }
  return true;
}

tg_interp *tg_interp_new(const tg_graph *g, tg_precision prec) {
  char why[256];
  if (!tg_interp_check(g, why, sizeof why)) return NULL;
  tg_interp *it = calloc(1, sizeof *it);
  if (!it) return NULL;
  it->g = g;
  it->prec = prec;
  it->n = g->n_nodes;
  it->val = calloc((size_t)it->n + 1, sizeof *it->val);
  it->numel = calloc((size_t)it->n + 1, sizeof *it->numel);
  it->bound = calloc((size_t)it->n + 1, sizeof *it->bound);
  if (!it->val || !it->numel || !it->bound) return tg_interp_free(it), NULL;
  for (int i = 0; i < it->n; i++) {
    const tg_node *n = g->nodes[i];
    it->numel[i] = tg_type_numel(&n->type);
    it->val[i] = calloc((size_t)it->numel[i], sizeof(double)); /* zeros */
    if (!it->val[i]) return tg_interp_free(it), NULL;
    bool ones = (n->op == TG_OP_param || n->op == TG_OP_state) && n->init.kind == TG_INIT_ONES;
    for (int64_t e = 0; ones && e < it->numel[i]; e++) it->val[i][e] = 1;
  }
  return it;
}

void tg_interp_free(tg_interp *it) {
  if (!it) return;
  for (int i = 0; it->val && i < it->n; i++)
    if (!it->bound || !it->bound[i]) free(it->val[i]);
  free(it->val);
  free(it->numel);
  free(it->bound);
  free(it);
}

/* n's position in the graph, or -1.  n->id is the fast path; the scan
 * covers a graph whose ids a pass has left stale. */
static int node_pos(const tg_interp *it, const tg_node *n) {
  if (n && n->id >= 0 && n->id < it->n && it->g->nodes[n->id] == n) return n->id;
  for (int i = 0; n && i < it->n; i++)
    if (it->g->nodes[i] == n) return i;
  return -1;
}

double *tg_interp_leaf(tg_interp *it, const tg_node *leaf) {
  int i = node_pos(it, leaf);
  if (i < 0) return NULL;
  tg_op op = leaf->op;
  return op == TG_OP_input || op == TG_OP_param || op == TG_OP_state ? it->val[i] : NULL;
}

bool tg_interp_bind_leaf(tg_interp *it, const tg_node *leaf, double *mem) {
  if (!tg_interp_leaf(it, leaf)) return false;
  int i = node_pos(it, leaf);
  if (!it->bound[i]) free(it->val[i]);
  it->val[i] = mem;
  it->bound[i] = true;
  return true;
}

const double *tg_interp_value(const tg_interp *it, const tg_node *n) {
  int i = node_pos(it, n);
  return i < 0 ? NULL : it->val[i];
}

void tg_interp_run(tg_ctx *ctx, tg_interp *it) {
  const tg_graph *g = it->g;
  if (g->n_nodes != it->n)
    tg_error(ctx, (tg_loc){g->source, 1, 1},
             "the graph has %d nodes but had %d when its interpreter was made", g->n_nodes, it->n);
  /* The kernels find inputs by id; make sure ids are positions. */
  for (int i = 0; i < it->n; i++)
    if (g->nodes[i]->id != i)
      tg_error(ctx, g->nodes[i]->loc,
               "node %%%d has id %d: the interpreter needs ids equal to graph positions", i,
               g->nodes[i]->id);
  for (int i = 0; i < it->n; i++) {
    eval(ctx, it, i);
    finish_node(ctx, it, i);
  }
  for (int i = 0; i < it->n; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_assign) continue;
    memcpy(it->val[n->in[0]->id], it->val[i], sizeof(double) * (size_t)it->numel[i]);
  }
}

/* ---- running kernel by kernel (fused graphs) ------------------------------ */

typedef struct kernel_run {
  tg_ctx *ctx;
  tg_interp *it;
  bool *done;   /* the node's value is computed */
  bool *stored; /* the value is in memory: a leaf or an earlier kernel's output */
  const tg_mem_plan *plan; /* when checking a plan: poison what it lets die */
} kernel_run;

static void compute(kernel_run *r, int i) {
  eval(r->ctx, r->it, i);
  finish_node(r->ctx, r->it, i);
  r->done[i] = true;
}

/* Makes input `in` of a node in kernel k readable: its source must be in
 * memory or computed earlier in kernel k; a view over it is computed here
 * (generated code folds it into the reader's indexing). */
static void ensure_input(kernel_run *r, const tg_node *in, int k) {
  if (r->done[in->id] && !tg_is_view(in)) {
    if (r->stored[in->id] || in->kernel == k) return;
  }
  if (tg_is_view(in)) {
    ensure_input(r, in->in[0], k);
    /* with a plan, a view shows its source as it is now, poison included */
    if (!r->done[in->id] || r->plan) compute(r, in->id);
    return;
  }
  char ref[64];
  if (in->kernel == k)
    tg_error(r->ctx, in->loc, "kernel k%d reads %s before computing it", k,
             node_ref(r->it, in->id, ref, sizeof ref));
  tg_error(r->ctx, in->loc,
           "kernel k%d reads %s, which kernel k%d computes but does not write to memory", k,
           node_ref(r->it, in->id, ref, sizeof ref), in->kernel);
}

static void poison(tg_interp *it, int node) {
  for (int64_t e = 0; e < it->numel[node]; e++) it->val[node][e] = NAN;
}

/* After kernel k: the bytes of every buffer that k's outputs share are
 * overwritten (harmless when the plan is right: those buffers are dead or
 * not yet written), and every buffer whose planned life ends at k dies. */
static void poison_after(kernel_run *r, int k) {
  const tg_mem_plan *p = r->plan;
  for (int a = 0; a < p->n_buffers; a++) {
    const tg_buffer *x = &p->buffers[a];
    if (x->last == k) poison(r->it, x->node);
    if (x->first != k) continue;
    for (int b = 0; b < p->n_buffers; b++) {
      const tg_buffer *y = &p->buffers[b];
      if (b != a && y->first != k && x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes)
        poison(r->it, y->node);
    }
  }
}

static void run_kernels(tg_ctx *ctx, tg_interp *it, const tg_mem_plan *plan) {
  const tg_graph *g = it->g;
  if (g->n_nodes != it->n)
    tg_error(ctx, (tg_loc){g->source, 1, 1},
             "the graph has %d nodes but had %d when its interpreter was made", g->n_nodes, it->n);
  /* In the arena: an error below bails without a chance to free. */
  kernel_run r = {ctx, it, tg_alloc(ctx->arena, (size_t)it->n + 1),
                  tg_alloc(ctx->arena, (size_t)it->n + 1), plan};
  /* Leaves first: the same values in every kernel that reads them. */
  for (int i = 0; i < it->n; i++)
    if (g->nodes[i]->id != i || tg_ops[g->nodes[i]->op].kind == TG_KIND_LEAF) {
      if (g->nodes[i]->id != i)
        tg_error(ctx, g->nodes[i]->loc, "node %%%d has id %d: ids must be graph positions", i,
                 g->nodes[i]->id);
      compute(&r, i);
      r.stored[i] = true;
    }
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    for (int a = 0; a < K->n_nodes; a++) {
      const tg_node *n = g->nodes[K->nodes[a]];
      for (int j = 0; j < n->nin; j++) ensure_input(&r, n->in[j], k);
      compute(&r, n->id);
    }
    for (int a = 0; a < K->n_outputs; a++) r.stored[K->outputs[a]] = true;
    if (plan) poison_after(&r, k);
  }
  /* What is left: views no kernel reads (a gradient output that is a
   * reshape); their sources must be in memory too. */
  for (int i = 0; i < it->n; i++)
    if (!r.done[i]) {
      if (!tg_is_view(g->nodes[i]))
        tg_error(ctx, g->nodes[i]->loc, "node %%%d is in no kernel of the fused graph", i);
      ensure_input(&r, g->nodes[i], -1);
    }
  for (int i = 0; i < it->n; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_assign) continue;
    memcpy(it->val[n->in[0]->id], it->val[i], sizeof(double) * (size_t)it->numel[i]);
  }
}

void tg_interp_run_kernels(tg_ctx *ctx, tg_interp *it) { run_kernels(ctx, it, NULL); }

void tg_interp_run_planned(tg_ctx *ctx, tg_interp *it, const tg_mem_plan *plan) {
  run_kernels(ctx, it, plan);
}
