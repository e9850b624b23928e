/* autodiff.c: reverse-mode differentiation of the IR.
 *
 * Walks the forward graph from the loss back to the parameters.  Each op's
 * derivative rule (named in ops.def's DERIV column) writes the gradients of
 * its inputs in ordinary IR ops, so the backward graph is a graph like any
 * other: the interpreter runs it, and the fusion pass will fuse it with the
 * same rules as the forward.  Gradients reaching a node by several paths
 * (weight tying: wte feeds both the embedding gather and the output head)
 * are summed.
 *
 * Broadcasting is undone by reduce_to: an input that was stretched along an
 * axis gets the sum of the gradient along that axis. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct ad {
  tg_ctx *ctx;
  tg_graph *g;
  tg_node **grad;     /* per forward node id: its gradient so far, or NULL */
  bool *wanted;       /* per forward node id: on a path from a param to the loss */
  tg_loc loc;         /* the forward node being differentiated */
  const tg_node *at;  /* ... and the node itself, for error messages */
} ad;

typedef void grad_rule(ad *A, const tg_node *n, const tg_node *g);

/* ---- building backward nodes ---------------------------------------------- */

static tg_node *add(ad *A, tg_node *n) {
  n->phase = TG_PHASE_BACKWARD;
  if (A->g->n_nodes >= A->ctx->node_limit)
    tg_error(A->ctx, A->loc, "autodiff: the graph grows beyond %lld nodes",
             (long long)A->ctx->node_limit);
  const char *why = tg_graph_add(A->g, n);
  if (why)
    tg_error(A->ctx, A->loc, "autodiff: internal error differentiating %%%d (%s): %s", A->at->id,
             tg_ops[A->at->op].name, why);
  return n;
}

static tg_node *mk(ad *A, tg_op op, int nin, const tg_node *a, const tg_node *b,
                   const tg_node *c) {
  tg_node *in[3] = {(tg_node *)a, (tg_node *)b, (tg_node *)c};
  tg_node *n = tg_node_new(A->g, op, A->loc);
  tg_node_set_inputs(A->g, n, nin, in);
  return n;
}

static tg_node *op1(ad *A, tg_op op, const tg_node *a) { return add(A, mk(A, op, 1, a, NULL, NULL)); }
static tg_node *op2(ad *A, tg_op op, const tg_node *a, const tg_node *b) {
  return add(A, mk(A, op, 2, a, b, NULL));
}
static tg_node *op3(ad *A, tg_op op, const tg_node *a, const tg_node *b, const tg_node *c) {
  return add(A, mk(A, op, 3, a, b, c));
}

static tg_node *cst(ad *A, double v, tg_dtype dt) {
  tg_node *n = mk(A, TG_OP_const, 0, NULL, NULL, NULL);
  n->value = v;
  n->type = (tg_type){.dtype = dt};
  return add(A, n);
}

static tg_node *reshape(ad *A, const tg_node *x, const tg_type *t) {
  if (tg_type_same_shape(&x->type, t)) return (tg_node *)x;
  /* a reshape back to what was reshaped (a collective's flattening, undone
   * in the gradient) is that value itself: no view of a view */
  if (x->op == TG_OP_reshape && tg_type_same_shape(&x->in[0]->type, t)) return x->in[0];
  tg_node *n = mk(A, TG_OP_reshape, 1, x, NULL, NULL);
  n->type = *t;
  return add(A, n);
}

static tg_node *expand(ad *A, const tg_node *x, const tg_type *t) {
  if (tg_type_same_shape(&x->type, t)) return (tg_node *)x;
  tg_node *n = mk(A, TG_OP_expand, 1, x, NULL, NULL);
  n->type = *t;
  return add(A, n);
}

static tg_node *transpose(ad *A, const tg_node *x, const int *perm) {
  tg_node *n = mk(A, TG_OP_transpose, 1, x, NULL, NULL);
  memcpy(n->perm, perm, sizeof n->perm);
  return add(A, n);
}

/* Swaps the last two axes (for the matmul rules). */
static tg_node *transpose_last2(ad *A, const tg_node *x) {
  int perm[TG_MAX_RANK], r = x->type.rank;
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  return transpose(A, x, perm);
}

/* The gradient g of a broadcast result, summed back to the shape t of the
 * input that was broadcast: over the leading axes t lacks, and over the
 * axes where t has size 1 and g does not. */
static tg_node *reduce_to(ad *A, const tg_node *g, const tg_type *t) {
  if (tg_type_same_shape(&g->type, t)) return (tg_node *)g;
  int lead = g->type.rank - t->rank;
  uint32_t axes = 0;
  for (int i = 0; i < g->type.rank; i++)
    if (i < lead || (t->dim[i - lead].size == 1 && g->type.dim[i].size != 1)) axes |= 1u << i;
  tg_node *s = (tg_node *)g;
  if (axes) {
    s = mk(A, TG_OP_sum, 1, g, NULL, NULL);
    s->axes = axes;
    add(A, s);
  }
  return reshape(A, s, t);
}

/* Adds a contribution to the gradient of node x (if x needs one). */
static void accumulate(ad *A, const tg_node *x, tg_node *contrib) {
  if (!A->wanted[x->id]) return;
  if (!tg_type_same_shape(&contrib->type, &x->type))
    tg_error(A->ctx, A->loc, "autodiff: internal error: gradient of %%%d has the wrong shape",
             x->id);
  tg_node **slot = &A->grad[x->id];
  *slot = *slot ? op2(A, TG_OP_add, *slot, contrib) : contrib;
}

/* ---- the derivative rules, one per DERIV name in ops.def ------------------ */
/* n is the forward node, g the gradient of its result (n's shape). */

#define IN(i) (n->in[i])
/* Binary and ternary rules build an input's gradient only if it is wanted
 * (x + 1 needs no gradient for the 1); a unary op's input always is. */
#define WANTED(i) (A->wanted[IN(i)->id])

static void grad_none(ad *A, const tg_node *n, const tg_node *g) { (void)A, (void)n, (void)g; }
static void grad_leaf(ad *A, const tg_node *n, const tg_node *g) { (void)A, (void)n, (void)g; }

static void grad_never(ad *A, const tg_node *n, const tg_node *g) {
  (void)g;
  tg_error(A->ctx, n->loc, "autodiff: %s cannot be differentiated", tg_ops[n->op].name);
}

static void grad_neg(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), op1(A, TG_OP_neg, g));
}

/* d exp(x) = exp(x) dx: reuses the forward result */
static void grad_exp(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), op2(A, TG_OP_mul, g, n));
}

static void grad_log(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), op2(A, TG_OP_div, g, IN(0)));
}

/* d sqrt(x) = dx / (2 sqrt(x)) */
static void grad_sqrt(ad *A, const tg_node *n, const tg_node *g) {
  tg_node *half = cst(A, 0.5, g->type.dtype);
  accumulate(A, IN(0), op2(A, TG_OP_div, op2(A, TG_OP_mul, g, half), n));
}

/* d x^(-1/2) = -1/2 x^(-3/2) dx = -1/2 y^3 dx */
static void grad_rsqrt(ad *A, const tg_node *n, const tg_node *g) {
  tg_node *y3 = op2(A, TG_OP_mul, op2(A, TG_OP_mul, n, n), n);
  tg_node *k = op2(A, TG_OP_mul, y3, cst(A, -0.5, g->type.dtype));
  accumulate(A, IN(0), op2(A, TG_OP_mul, g, k));
}

/* d tanh(x) = (1 - tanh(x)^2) dx */
static void grad_tanh(ad *A, const tg_node *n, const tg_node *g) {
  tg_node *one_minus = op2(A, TG_OP_sub, cst(A, 1, g->type.dtype), op2(A, TG_OP_mul, n, n));
  accumulate(A, IN(0), op2(A, TG_OP_mul, g, one_minus));
}

/* d gelu(x) = gelu_grad(x) dx: one op that a GPU matmul can apply as its
 * epilogue (cuBLASLt's DGELU), not the dozen of the tanh form's chain rule */
static void grad_gelu(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), op2(A, TG_OP_mul, g, op1(A, TG_OP_gelu_grad, IN(0))));
}

static void grad_cast(ad *A, const tg_node *n, const tg_node *g) {
  if (!tg_dtype_is_float(IN(0)->type.dtype)) return;
  tg_node *c = mk(A, TG_OP_cast, 1, g, NULL, NULL);
  c->type.dtype = IN(0)->type.dtype;
  accumulate(A, IN(0), add(A, c));
}

static void grad_add(ad *A, const tg_node *n, const tg_node *g) {
  if (WANTED(0)) accumulate(A, IN(0), reduce_to(A, g, &IN(0)->type));
  if (WANTED(1)) accumulate(A, IN(1), reduce_to(A, g, &IN(1)->type));
}

static void grad_sub(ad *A, const tg_node *n, const tg_node *g) {
  if (WANTED(0)) accumulate(A, IN(0), reduce_to(A, g, &IN(0)->type));
  if (WANTED(1)) accumulate(A, IN(1), reduce_to(A, op1(A, TG_OP_neg, g), &IN(1)->type));
}

static void grad_mul(ad *A, const tg_node *n, const tg_node *g) {
  if (WANTED(0))
    accumulate(A, IN(0), reduce_to(A, op2(A, TG_OP_mul, g, IN(1)), &IN(0)->type));
  if (WANTED(1))
    accumulate(A, IN(1), reduce_to(A, op2(A, TG_OP_mul, g, IN(0)), &IN(1)->type));
}

/* y = a / b: da = g / b, db = -g y / b */
static void grad_div(ad *A, const tg_node *n, const tg_node *g) {
  if (WANTED(0))
    accumulate(A, IN(0), reduce_to(A, op2(A, TG_OP_div, g, IN(1)), &IN(0)->type));
  if (WANTED(1)) {
    tg_node *t = op2(A, TG_OP_div, op2(A, TG_OP_mul, g, n), IN(1));
    accumulate(A, IN(1), reduce_to(A, op1(A, TG_OP_neg, t), &IN(1)->type));
  }
}

/* Where a and b tie, each gets half, as PyTorch's maximum does. */
static void grad_maximum(ad *A, const tg_node *n, const tg_node *g) {
  tg_dtype dt = g->type.dtype;
  tg_node *half = op2(A, TG_OP_mul, g, cst(A, 0.5, dt));
  tg_node *tie = op2(A, TG_OP_eq, IN(0), IN(1));
  tg_node *zero = cst(A, 0, dt);
  if (WANTED(0)) {
    tg_node *win = op3(A, TG_OP_where, op2(A, TG_OP_gt, IN(0), IN(1)), g, zero);
    accumulate(A, IN(0), reduce_to(A, op3(A, TG_OP_where, tie, half, win), &IN(0)->type));
  }
  if (WANTED(1)) {
    tg_node *win = op3(A, TG_OP_where, op2(A, TG_OP_lt, IN(0), IN(1)), g, zero);
    accumulate(A, IN(1), reduce_to(A, op3(A, TG_OP_where, tie, half, win), &IN(1)->type));
  }
}

static void grad_where(ad *A, const tg_node *n, const tg_node *g) {
  tg_node *zero = cst(A, 0, g->type.dtype);
  if (WANTED(1))
    accumulate(A, IN(1), reduce_to(A, op3(A, TG_OP_where, IN(0), g, zero), &IN(1)->type));
  if (WANTED(2))
    accumulate(A, IN(2), reduce_to(A, op3(A, TG_OP_where, IN(0), zero, g), &IN(2)->type));
}

static void grad_sum(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), expand(A, g, &IN(0)->type));
}

/* The maximum's gradient goes to the elements equal to it, shared evenly
 * among ties (as PyTorch's amax does). */
static void grad_max(ad *A, const tg_node *n, const tg_node *g) {
  tg_dtype dt = g->type.dtype;
  tg_node *is_max = op2(A, TG_OP_eq, IN(0), n);
  tg_node *ones = op3(A, TG_OP_where, is_max, cst(A, 1, dt), cst(A, 0, dt));
  tg_node *count = mk(A, TG_OP_sum, 1, ones, NULL, NULL);
  count->axes = n->axes;
  add(A, count);
  tg_node *share = op2(A, TG_OP_div, g, count);
  accumulate(A, IN(0), op3(A, TG_OP_where, is_max, share, cst(A, 0, dt)));
}

static void grad_reshape(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), reshape(A, g, &IN(0)->type));
}

static void grad_transpose(ad *A, const tg_node *n, const tg_node *g) {
  int inv[TG_MAX_RANK] = {0};
  for (int i = 0; i < n->type.rank; i++) inv[n->perm[i]] = i;
  /* g a transpose by n's own permutation (weight_grad): its input is the
   * answer, as it lies in memory */
  bool undo = g->op == TG_OP_transpose && g->type.rank == n->type.rank;
  for (int i = 0; undo && i < n->type.rank; i++) undo = g->perm[i] == n->perm[i];
  accumulate(A, IN(0), undo ? g->in[0] : transpose(A, g, inv));
}

static void grad_slice(ad *A, const tg_node *n, const tg_node *g) {
  tg_node *p = mk(A, TG_OP_pad, 1, g, NULL, NULL);
  p->axis = n->axis;
  p->start = n->start;
  p->len = IN(0)->type.dim[n->axis].size;
  accumulate(A, IN(0), add(A, p));
}

static void grad_pad(ad *A, const tg_node *n, const tg_node *g) {
  tg_node *s = mk(A, TG_OP_slice, 1, g, NULL, NULL);
  s->axis = n->axis;
  s->start = n->start;
  s->len = IN(0)->type.dim[n->axis].size;
  accumulate(A, IN(0), add(A, s));
}

static void grad_concat(ad *A, const tg_node *n, const tg_node *g) {
  int64_t at = 0;
  for (int i = 0; i < n->nin; i++) {
    int64_t len = IN(i)->type.dim[n->axis].size;
    if (WANTED(i)) {
      tg_node *s = mk(A, TG_OP_slice, 1, g, NULL, NULL);
      s->axis = n->axis;
      s->start = at;
      s->len = len;
      accumulate(A, IN(i), add(A, s));
    }
    at += len;
  }
}

static void grad_expand(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), reduce_to(A, g, &IN(0)->type));
}

/* table[idx]: each row's gradient is the sum over the places it was picked.
 * When the table already has a gradient G of the same type (a tied
 * embedding: the head's matmul, later in the forward, is differentiated
 * first), the rows are scattered onto G, scatter_add(g, idx, G), rather
 * than into a fresh zero table that is then added to G.  That is the same
 * sum, and it lets lowering update G's buffer in place (lower.c: no table
 * of zeros, no second pass over [V, C]).  It is done here, where the sum is
 * born and both terms are known to be read by nothing else, rather than as
 * a rewrite of add(G, scatter_add(...)) after autodiff, which would have to
 * prove that. */
static void grad_gather(ad *A, const tg_node *n, const tg_node *g) {
  if (!WANTED(0)) return;
  tg_node **slot = &A->grad[IN(0)->id];
  bool onto = *slot && (*slot)->type.dtype == g->type.dtype;
  tg_node *s = mk(A, TG_OP_scatter_add, onto ? 3 : 2, g, IN(1), onto ? *slot : NULL);
  s->type = IN(0)->type;
  s->type.dtype = g->type.dtype;
  if (onto) *slot = add(A, s);
  else accumulate(A, IN(0), add(A, s));
}

/* scatter_add(src, idx[, init]): src's gradient is g gathered at idx;
 * init's, when there is one, is g itself */
static void grad_scatter_add(ad *A, const tg_node *n, const tg_node *g) {
  if (WANTED(0)) accumulate(A, IN(0), op2(A, TG_OP_gather, g, IN(1)));
  if (n->nin == 3 && WANTED(2)) accumulate(A, IN(2), (tg_node *)g);
}

/* Collectives.  Each rank differentiates its own copy of the graph, so a
 * rule says what one rank's gradient is given the incoming gradient g it
 * holds.
 *
 * all_reduce -> identity: assumes every rank computes the same loss from
 * the reduced value, counted once (Megatron's g operator after a
 * row-parallel layer); the gradient of the sum with respect to each
 * addend is then g itself, already the same on every rank.
 *
 * all_gather -> reduce_scatter: assumes the objective is the sum of the
 * ranks' losses (each its own micro-batch, as under ZeRO); rank q's block
 * of the gathered value feeds every rank's loss, so its gradient is the
 * sum over ranks of their g's block q, which reduce_scatter gives.
 *
 * reduce_scatter -> all_gather: under the same sum, rank r's input x_r
 * reaches rank q's result through block q only, with weight one, so x_r's
 * gradient is every rank's g laid side by side. */
/* A collective over the group of n's (its ranks and its axis). */
static tg_node *collective(ad *A, tg_op op, const tg_node *g, const tg_node *n) {
  tg_node *c = mk(A, op, 1, g, NULL, NULL);
  c->ranks = n->ranks;
  c->over_tensor = n->over_tensor || n->op == TG_OP_replicate;
  return add(A, c);
}

static void grad_all_reduce(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), (tg_node *)g);
}

static void grad_all_gather(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), collective(A, TG_OP_reduce_scatter, g, n));
}

static void grad_reduce_scatter(ad *A, const tg_node *n, const tg_node *g) {
  accumulate(A, IN(0), collective(A, TG_OP_all_gather, g, n));
}

/* all_max -> each rank's share where its x is the largest: the gradient
 * of a max over an axis split across the ranks (max's own rule, grad_max,
 * shares g among the tied elements; here among the tied ranks, whose
 * count is itself summed over them).  Like all_reduce, assumes every rank
 * holds the same g (the loss counted once). */
static void grad_all_max(ad *A, const tg_node *n, const tg_node *g) {
  tg_dtype dt = g->type.dtype;
  tg_node *is_max = op2(A, TG_OP_eq, IN(0), n);
  tg_node *count = collective(A, TG_OP_all_reduce, op3(A, TG_OP_where, is_max, cst(A, 1, dt), cst(A, 0, dt)), n);
  accumulate(A, IN(0), op3(A, TG_OP_where, is_max, op2(A, TG_OP_div, g, count), cst(A, 0, dt)));
}

/* replicate -> all_reduce: x is one value every tensor-parallel rank holds
 * alike, and each rank's g is the gradient of its own part of the
 * computation that follows; x's is their sum (Megatron's f).  Flattened
 * around the collective, which takes 1-D values. */
static void grad_replicate(ad *A, const tg_node *n, const tg_node *g) {
  tg_type flat = {.dtype = TG_F32, .rank = 1, .dim = {{.size = tg_type_numel(&g->type)}}};
  /* summed in f32, as the backends sum (a bf16 gradient widened first) */
  const tg_node *x = g;
  if (g->type.dtype != TG_F32) {
    tg_node *c = mk(A, TG_OP_cast, 1, g, NULL, NULL);
    c->type = g->type, c->type.dtype = TG_F32;
    x = add(A, c);
  }
  tg_node *sum = reshape(A, collective(A, TG_OP_all_reduce, reshape(A, x, &flat), n), &x->type);
  if (g->type.dtype != TG_F32) {
    tg_node *c = mk(A, TG_OP_cast, 1, sum, NULL, NULL);
    c->type = g->type;
    sum = add(A, c);
  }
  accumulate(A, IN(0), sum);
}

/* The gradient aᵀ g of a weight b [K, N] (a [R, K], g [R, N]).  When b is
 * the transpose of a matrix W [N, K] (a tied head, x @ transpose(wte)), it
 * is made as (gᵀ a)ᵀ: the product lies in memory as W does, so W's
 * gradient is that product itself (grad_transpose), not a transposed
 * copy of it, and the embedding's rows can be scattered into it in place
 * (grad_gather). */
static tg_node *weight_grad(ad *A, const tg_node *b, tg_node *a, tg_node *g) {
  if (b->op != TG_OP_transpose || b->type.rank != 2 || a->type.rank != 2 || g->type.rank != 2)
    return op2(A, TG_OP_matmul, transpose_last2(A, a), g);
  return transpose_last2(A, op2(A, TG_OP_matmul, transpose_last2(A, g), a));
}

/* c = a @ b, a [..., M, K], b [..., K, N]:  da = g bᵀ,  db = aᵀ g, each
 * summed over the batch dims its operand was broadcast along.  The common
 * case of a weight matrix b [K, N] applied to a batch a [B, T, K] is done as
 * one [K, B·T] @ [B·T, N] product rather than a batch of products summed. */
static void grad_matmul(ad *A, const tg_node *n, const tg_node *g) {
  const tg_node *a = IN(0), *b = IN(1);
  if (A->wanted[a->id])
    accumulate(A, a, reduce_to(A, op2(A, TG_OP_matmul, g, transpose_last2(A, b)), &a->type));
  if (!A->wanted[b->id]) return;
  if (b->type.rank == 2 && a->type.rank > 2) {
    int64_t rows = tg_type_numel(&a->type) / a->type.dim[a->type.rank - 1].size;
    tg_type a2 = {.dtype = a->type.dtype, .rank = 2};
    a2.dim[0] = (tg_dim){rows, NULL};
    a2.dim[1] = a->type.dim[a->type.rank - 1];
    tg_type g2 = {.dtype = g->type.dtype, .rank = 2};
    g2.dim[0] = (tg_dim){rows, NULL};
    g2.dim[1] = g->type.dim[g->type.rank - 1];
    accumulate(A, b, weight_grad(A, b, reshape(A, a, &a2), reshape(A, g, &g2)));
    return;
  }
  accumulate(A, b, reduce_to(A, op2(A, TG_OP_matmul, transpose_last2(A, a), g), &b->type));
}

/* o = flash_attention(q, k, v, lse): the three backward ops recompute the
 * probabilities from the saved lse (none of the [T, T] matrices of the
 * unsubstituted graph is kept).  lse gets no gradient: it is the forward's
 * own saved statistic, and this rule already differentiates through it. */
static void grad_flash_attention(ad *A, const tg_node *n, const tg_node *g) {
  static const tg_op ops[3] = {TG_OP_flash_attention_dq, TG_OP_flash_attention_dk,
                               TG_OP_flash_attention_dv};
  tg_node *in[6] = {IN(0), IN(1), IN(2), (tg_node *)n, IN(3), (tg_node *)g};
  for (int i = 0; i < 3; i++) {
    if (!WANTED(i)) continue;
    tg_node *d = tg_node_new(A->g, ops[i], A->loc);
    tg_node_set_inputs(A->g, d, 6, in);
    d->value = n->value;
    accumulate(A, IN(i), add(A, d));
  }
}

#undef IN
#undef WANTED

static grad_rule *const rules[TG_NOPS] = {
#define X(name, arity, kind, attr, deriv, doc) [TG_OP_##name] = grad_##deriv,
#include "ops.def"
#undef X
};

/* ---- the pass ---------------------------------------------------------------- */

/* Marks the nodes whose gradient is needed: those that depend on a
 * parameter and on which the loss depends. */
static void mark_wanted(ad *A, const tg_node *loss, int nfwd) {
  bool *from_param = tg_alloc(A->ctx->arena, (size_t)nfwd + 1);
  bool *to_loss = tg_alloc(A->ctx->arena, (size_t)nfwd + 1);
  for (int i = 0; i < nfwd; i++) {
    const tg_node *n = A->g->nodes[i];
    from_param[i] = n->op == TG_OP_param;
    for (int k = 0; k < n->nin && !from_param[i]; k++) from_param[i] = from_param[n->in[k]->id];
  }
  to_loss[loss->id] = true;
  for (int i = loss->id; i >= 0; i--)
    if (to_loss[i])
      for (int k = 0; k < A->g->nodes[i]->nin; k++) to_loss[A->g->nodes[i]->in[k]->id] = true;
  for (int i = 0; i < nfwd; i++) A->wanted[i] = from_param[i] && to_loss[i];
}

void tg_autodiff(tg_ctx *ctx, tg_graph *g) {
  tg_loc file = {g->source, 1, 1};
  tg_node *loss = tg_graph_output(g, TG_OUTPUT_LOSS);
  if (!loss) tg_error(ctx, file, "autodiff: the model has no output named 'loss' to differentiate");
  if (loss->type.rank != 0 || !tg_dtype_is_float(loss->type.dtype)) {
    char t[TG_TYPE_STR_MAX];
    tg_error(ctx, loss->loc, "autodiff: the loss must be a float scalar, not %s",
             tg_type_str(&loss->type, t, sizeof t));
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->phase != TG_PHASE_FORWARD)
      tg_error(ctx, file, "autodiff: the graph already has a backward part");

  int nfwd = g->n_nodes;
  ad A = {.ctx = ctx, .g = g};
  /* In the arena, so an error's longjmp leaves nothing to free. */
  A.grad = tg_alloc(ctx->arena, sizeof *A.grad * (size_t)nfwd);
  A.wanted = tg_alloc(ctx->arena, sizeof *A.wanted * (size_t)nfwd);
  mark_wanted(&A, loss, nfwd);

  A.loc = loss->loc;
  A.at = loss;
  A.grad[loss->id] = cst(&A, 1.0, loss->type.dtype);
  for (int i = loss->id; i >= 0; i--) {
    const tg_node *n = g->nodes[i];
    if (!A.wanted[i] || !A.grad[i]) continue;
    A.loc = n->loc;
    A.at = n;
    rules[n->op](&A, n, A.grad[i]);
  }

  /* One gradient output per parameter, zeros for those the loss ignores. */
  for (int i = 0; i < nfwd; i++) {
    tg_node *p = g->nodes[i];
    if (p->op != TG_OP_param) continue;
    A.loc = p->loc;
    A.at = p;
    tg_node *d = A.grad[i] ? A.grad[i] : expand(&A, cst(&A, 0, p->type.dtype), &p->type);
    tg_graph_add_output(g, tg_sprintf(ctx->arena, TG_GRAD_PREFIX "%s", p->name), d);
  }
}

tg_node *tg_gradient_of(const tg_graph *g, const tg_node *param) {
  size_t n = strlen(TG_GRAD_PREFIX);
  for (int i = 0; i < g->n_outputs; i++)
    if (!strncmp(g->outputs[i].name, TG_GRAD_PREFIX, n) && param->name && !strcmp(g->outputs[i].name + n, param->name))
      return g->outputs[i].node;
  return NULL;
}

const char *tg_gradient_param_name(const char *output_name) {
  size_t n = strlen(TG_GRAD_PREFIX);
  return strncmp(output_name, TG_GRAD_PREFIX, n) ? NULL : output_name + n;
}
