/* adamw.c: the optimizer step, appended to the graph as ordinary ops.
 *
 * After autodiff, one training step is then one graph: forward, backward,
 * global-norm clipping and AdamW with decoupled weight decay.  The update
 * follows torch.optim.AdamW's single-tensor code expression for expression,
 * so that float32 results agree with PyTorch's:
 *
 *   norm  = sqrt(sum over all grads of g²);  g *= min(1, clip / (norm + 1e-6))
 *   p    *= 1 - lr·wd                          (wd only for params of rank ≥ 2)
 *   m     = β1·m + (1 - β1)·g
 *   v     = β2·v + (1 - β2)·g²
 *   p    -= lr / (1 - β1^t) · m / (sqrt(v) / sqrt(1 - β2^t) + eps)
 *
 * lr and t (the 1-based step) are run-time inputs, so that a schedule needs
 * no recompilation.  A ZeRO optimizer's gradients are a rank's shards
 * (norm_ranks): its sum of squares goes through an all_reduce of the IR
 * before the square root, so the global norm is computed in the graph.  Parameters and moments change through assign nodes,
 * which take effect when the whole step has been computed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

const tg_adamw_opts tg_adamw_defaults = {0.9, 0.95, 1e-8, 0.1, 1.0, NULL, NULL, 0, 0};

typedef struct opt {
  tg_ctx *ctx;
  tg_graph *g;
  tg_loc loc;
} opt;

static tg_node *add(opt *O, tg_node *n) {
  n->phase = TG_PHASE_OPTIMIZER;
  const char *why = tg_graph_add(O->g, n);
  if (why) tg_error(O->ctx, O->loc, "adamw: internal error: %s", why);
  return n;
}

static tg_node *op2(opt *O, tg_op op, tg_node *a, tg_node *b) {
  tg_node *n = tg_node_new(O->g, op, O->loc);
  tg_node_set_inputs(O->g, n, 2, (tg_node *[]){a, b});
  return add(O, n);
}

static tg_node *op1(opt *O, tg_op op, tg_node *a) {
  tg_node *n = tg_node_new(O->g, op, O->loc);
  tg_node_set_inputs(O->g, n, 1, &a);
  return add(O, n);
}

static tg_node *where(opt *O, tg_node *c, tg_node *a, tg_node *b) {
  tg_node *n = tg_node_new(O->g, TG_OP_where, O->loc);
  tg_node_set_inputs(O->g, n, 3, (tg_node *[]){c, a, b});
  return add(O, n);
}

static tg_node *cst(opt *O, double v) {
  tg_node *n = tg_node_new(O->g, TG_OP_const, O->loc);
  n->value = v;
  n->type = (tg_type){.dtype = TG_F32};
  return add(O, n);
}

static tg_node *leaf(opt *O, tg_op op, const char *name, const tg_type *t) {
  tg_node *n = tg_node_new(O->g, op, O->loc);
  n->name = name;
  n->type = *t;
  n->init = (tg_init){.kind = TG_INIT_ZEROS};
  return add(O, n);
}

static tg_node *sum_over(opt *O, tg_node *x, unsigned axes) {
  tg_node *s = tg_node_new(O->g, TG_OP_sum, O->loc);
  tg_node_set_inputs(O->g, s, 1, &x);
  s->axes = axes;
  return add(O, s);
}

/* Σ x² over every element of a tensor in two stages.  A matrix is summed
 * row by row first (stage 1), then the row sums (stage 2): on a GPU each
 * row is a block, so even the 155 MB embedding table's gradient is summed
 * by 50,304 blocks rather than one, and no thread adds a chain longer
 * than a row or the number of rows over the block (docs/codegen.md,
 * "parallelism").  Every tensor's stage 1 is made before any stage 2, so
 * that fusion keeps the stage 1 sums in one multi-tensor kernel. */
static tg_node *squares_stage1(opt *O, tg_node *x) {
  tg_node *sq = op2(O, TG_OP_mul, x, x);
  if (x->type.rank < 2) return sq;
  return sum_over(O, sq, ((1u << x->type.rank) - 1) & ~1u);
}

static tg_node *reshape_to(opt *O, tg_node *x, const tg_type *t) {
  tg_node *r = tg_node_new(O->g, TG_OP_reshape, O->loc);
  tg_node_set_inputs(O->g, r, 1, &x);
  r->type = *t;
  return add(O, r);
}

static tg_node *squares_stage2(opt *O, tg_node *part) {
  if (part->type.rank == 0) return part;
  tg_node *s = sum_over(O, part, (1u << part->type.rank) - 1);
  tg_node *r = tg_node_new(O->g, TG_OP_reshape, O->loc);
  tg_node_set_inputs(O->g, r, 1, &s);
  r->type = (tg_type){.dtype = s->type.dtype};
  return add(O, r);
}

/* Σ x² over every element of xs (locs: whose location each part gets;
 * NULL: the xs'), or the constant 0. */
static tg_node *square_sum(opt *O, tg_node *const *locs, tg_node *const *xs, int n) {
  tg_node *total = NULL;
  tg_node **part = tg_alloc(O->g->arena, sizeof *part * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    O->loc = (locs ? locs[i] : xs[i])->loc;
    part[i] = squares_stage1(O, xs[i]);
  }
  for (int i = 0; i < n; i++) {
    O->loc = (locs ? locs[i] : xs[i])->loc;
    tg_node *s = squares_stage2(O, part[i]);
    total = total ? op2(O, TG_OP_add, total, s) : s;
  }
  O->loc = (tg_loc){O->g->source, 1, 1};
  return total ? total : cst(O, 0);
}


/* A scalar's sum over a group of ranks (the data ranks, or the tensor
 * axis's), through a [1] vector: collectives take 1-D values. */
static tg_node *summed_over(opt *O, tg_node *x, int ranks, bool over_tensor) {
  const tg_type one = {.dtype = TG_F32, .rank = 1, .dim = {{.size = 1}}}, scalar = {.dtype = TG_F32};
  tg_node *v = reshape_to(O, x, &one);
  tg_node *all = tg_node_new(O->g, TG_OP_all_reduce, O->loc);
  tg_node_set_inputs(O->g, all, 1, &v);
  all->ranks = ranks, all->over_tensor = over_tensor;
  return reshape_to(O, add(O, all), &scalar);
}

/* The squares of every gradient under tensor parallelism: the split
 * parameters' summed over the tensor ranks (each holds a part), the
 * replicated ones' counted once (each rank holds all of it); each first
 * summed over the data ranks when these are ZeRO shards. */
static tg_node *tensor_square_sum(opt *O, const tg_adamw_opts *o, tg_node *const *params, tg_node *const *grads,
                                  int n) {
  tg_node **sp = tg_alloc(O->g->arena, sizeof *sp * (size_t)(2 * n + 2)), **sg = sp + n + 1;
  tg_node **rp = tg_alloc(O->g->arena, sizeof *rp * (size_t)(2 * n + 2)), **rg = rp + n + 1;
  int ns = 0, nr = 0;
  for (int i = 0; i < n; i++) {
    if (params[i]->init.split != TG_SPLIT_NONE) sp[ns] = params[i], sg[ns++] = grads[i];
    else rp[nr] = params[i], rg[nr++] = grads[i];
  }
  tg_node *split = square_sum(O, sp, sg, ns), *rep = square_sum(O, rp, rg, nr);
  if (o->norm_ranks > 1) {
    split = summed_over(O, split, o->norm_ranks, false);
    rep = summed_over(O, rep, o->norm_ranks, false);
  }
  return op2(O, TG_OP_add, summed_over(O, split, o->tensor_ranks, true), rep);
}

/* The global norm of the gradients: this rank's squares, summed over the
 * data ranks when these are ZeRO shards (norm_ranks) and over the tensor
 * axis for split parameters (tensor_ranks). */
static tg_node *global_norm(opt *O, const tg_adamw_opts *o, tg_node *const *params, tg_node *const *grads,
                            int nparams) {
  const tg_type scalar = {.dtype = TG_F32};
  tg_node *norm;
  if (o->tensor_ranks > 1) {
    norm = op1(O, TG_OP_sqrt, tensor_square_sum(O, o, params, grads, nparams));
  } else if (o->norm_ranks > 1) {
    /* this rank's sum of squares (a leaf of zeros where it holds no
     * element: every rank takes part in the all_reduce), summed over the
     * ranks: the collective's operand is a [1] vector */
    const tg_type one = {.dtype = TG_F32, .rank = 1, .dim = {{.size = 1}}};
    tg_node *mine = nparams ? reshape_to(O, square_sum(O, params, grads, nparams), &one)
                            : leaf(O, TG_OP_input, TG_INPUT_NO_SQUARES, &one);
    tg_node *all = tg_node_new(O->g, TG_OP_all_reduce, O->loc);
    tg_node_set_inputs(O->g, all, 1, &mine);
    all->ranks = o->norm_ranks;
    norm = op1(O, TG_OP_sqrt, reshape_to(O, add(O, all), &scalar));
  } else {
    norm = op1(O, TG_OP_sqrt, square_sum(O, params, grads, nparams));
  }
  return norm;
}

/* Whether p's update decays it: by name when the caller lists them, else
 * matrices and higher (not biases, gains or other vectors). */
static bool decays(const tg_adamw_opts *o, const tg_node *p) {
  if (!o->decayed) return p->type.rank >= 2;
  for (int i = 0; o->decayed[i]; i++)
    if (!strcmp(o->decayed[i], p->name)) return true;
  return false;
}

static int by_name(const void *x, const void *y) {
  return strcmp((*(tg_node *const *)x)->name, (*(tg_node *const *)y)->name);
}

/* The copy "bf16.NAME" of parameter NAME among the sorted copies, or NULL. */
static tg_node *copy_of(tg_node **copies, int n, const char *name) {
  size_t np = strlen(TG_BF16_COPY_PREFIX);
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int c = strcmp(copies[mid]->name + np, name);
    if (!c) return copies[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

tg_adamw_slot *tg_append_adamw(tg_ctx *ctx, tg_graph *g, const tg_adamw_opts *o, int *n_slots) {
  opt O = {ctx, g, {g->source, 1, 1}};
  if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1 && o->eps > 0 &&
        o->weight_decay >= 0 && o->grad_clip >= 0))
    tg_error(ctx, O.loc, "adamw: need 0 <= beta < 1, eps > 0, weight decay >= 0, clip >= 0");

  /* The parameters and their gradients, as autodiff left them. */
  int nparams = 0;
  for (int i = 0; i < g->n_nodes; i++) nparams += g->nodes[i]->op == TG_OP_param;
  tg_node **params = tg_alloc(ctx->arena, sizeof *params * (size_t)(nparams + 1));
  tg_node **grads = tg_alloc(ctx->arena, sizeof *grads * (size_t)(nparams + 1));
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *p = g->nodes[i];
    if (p->op != TG_OP_param) continue;
    if (p->type.dtype != TG_F32)
      tg_error(ctx, p->loc, "adamw: parameter '%s' must be f32 (the master weights)", p->name);
    params[k] = p;
    grads[k] = tg_gradient_of(g, p);
    if (!grads[k]) tg_error(ctx, p->loc, "adamw: no gradient for '%s': run autodiff first", p->name);
    k++;
  }

  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->name && (n->op == TG_OP_input || n->op == TG_OP_param) &&
        (!strcmp(n->name, TG_INPUT_LR) || !strcmp(n->name, TG_INPUT_STEP)))
      tg_error(ctx, n->loc, "adamw: the model's own %s '%s' would clash with the optimizer's input "
               "of that name; rename it", tg_ops[n->op].name, n->name);
  }
  tg_type scalar = {.dtype = TG_F32};
  tg_node *lr = leaf(&O, TG_OP_input, TG_INPUT_LR, &scalar);
  tg_node *t = leaf(&O, TG_OP_input, TG_INPUT_STEP, &scalar);

  /* the parameters' bf16 copies (precision.c's weight_copies) by name, sorted:
   * found in log time (tg_param_copy_of walks the graph for each) */
  int n_copies = 0;
  tg_node **copies = tg_alloc(g->arena, sizeof *copies * (size_t)(g->n_nodes + 1));
  size_t np = strlen(TG_BF16_COPY_PREFIX);
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *s = g->nodes[i];
    if (s->op == TG_OP_state && s->name && !strncmp(s->name, TG_BF16_COPY_PREFIX, np)) copies[n_copies++] = s;
  }
  qsort(copies, (size_t)n_copies, sizeof *copies, by_name);

  /* Global norm over all gradients, then one clipping factor for all. */
  tg_node *norm = global_norm(&O, o, params, grads, nparams);
  O.loc = (tg_loc){g->source, 1, 1};
  tg_graph_add_output(g, TG_OUTPUT_GRAD_NORM, norm);
  tg_node *coef = NULL;
  if (o->grad_clip > 0) {
    tg_node *c = op2(&O, TG_OP_div, cst(&O, o->grad_clip), op2(&O, TG_OP_add, norm, cst(&O, 1e-6)));
    coef = where(&O, op2(&O, TG_OP_lt, c, cst(&O, 1)), c, cst(&O, 1));
  }

  /* Bias corrections 1 - β^t, as exp(t·log β) since t is a tensor. */
  tg_node *bc1 = op2(&O, TG_OP_sub, cst(&O, 1),
                     op1(&O, TG_OP_exp, op2(&O, TG_OP_mul, t, cst(&O, log(o->beta1)))));
  tg_node *bc2 = op2(&O, TG_OP_sub, cst(&O, 1),
                     op1(&O, TG_OP_exp, op2(&O, TG_OP_mul, t, cst(&O, log(o->beta2)))));
  tg_node *step_size = op2(&O, TG_OP_div, lr, bc1);
  tg_node *bc2_sqrt = op1(&O, TG_OP_sqrt, bc2);

  tg_adamw_slot *slots = tg_alloc(ctx->arena, sizeof *slots * (size_t)(nparams + 1));
  for (int i = 0; i < nparams; i++) {
    tg_node *p = params[i], *gr = grads[i];
    O.loc = p->loc;
    if (coef) gr = op2(&O, TG_OP_mul, gr, coef);
    tg_node *m = leaf(&O, TG_OP_state, tg_sprintf(ctx->arena, TG_ADAM_M_PREFIX "%s", p->name), &p->type);
    tg_node *v = leaf(&O, TG_OP_state, tg_sprintf(ctx->arena, TG_ADAM_V_PREFIX "%s", p->name), &p->type);
    tg_node *pd = p;
    if (o->weight_decay > 0 && decays(o, p)) {
      tg_node *keep = op2(&O, TG_OP_sub, cst(&O, 1), op2(&O, TG_OP_mul, lr, cst(&O, o->weight_decay)));
      pd = op2(&O, TG_OP_mul, p, keep);
    }
    tg_node *m2 = op2(&O, TG_OP_add, op2(&O, TG_OP_mul, m, cst(&O, o->beta1)),
                      op2(&O, TG_OP_mul, gr, cst(&O, 1 - o->beta1)));
    tg_node *v2 = op2(&O, TG_OP_add, op2(&O, TG_OP_mul, v, cst(&O, o->beta2)),
                      op2(&O, TG_OP_mul, op2(&O, TG_OP_mul, gr, gr), cst(&O, 1 - o->beta2)));
    tg_node *denom = op2(&O, TG_OP_add, op2(&O, TG_OP_div, op1(&O, TG_OP_sqrt, v2), bc2_sqrt),
                         cst(&O, o->eps));
    tg_node *p2 = op2(&O, TG_OP_sub, pd, op2(&O, TG_OP_mul, op2(&O, TG_OP_div, m2, denom), step_size));
    p2->name = tg_sprintf(ctx->arena, "new:%s", p->name);
    op2(&O, TG_OP_assign, p, p2);
    op2(&O, TG_OP_assign, m, m2);
    op2(&O, TG_OP_assign, v, v2);
    /* the bf16 copy the forward reads (precision.c's weight_copies), or one
     * the caller asks for: rewritten here, once per optimizer step */
    tg_node *copy = copy_of(copies, n_copies, p->name);
    for (int c = 0; o->copies && o->copies[c] && !copy; c++)
      if (!strcmp(o->copies[c], p->name)) {
        tg_type bt = p->type;
        bt.dtype = TG_BF16;
        copy = leaf(&O, TG_OP_state, tg_sprintf(ctx->arena, "%s%s", TG_BF16_COPY_PREFIX, p->name), &bt);
      }
    if (copy) {
      tg_node *c = tg_node_new(g, TG_OP_cast, O.loc);
      c->type = copy->type;
      tg_node_set_inputs(g, c, 1, &p2);
      op2(&O, TG_OP_assign, copy, add(&O, c));
    }
    slots[i] = (tg_adamw_slot){p, grads[i], m, v, copy};
  }
  if (n_slots) *n_slots = nparams;
  return slots;
}
