/* test_autodiff.c: every derivative rule against finite differences.
 *
 * Each case is a small graph whose loss is sum(f(params) * r), r a fixed
 * random tensor (so every element of f's result matters, with its own
 * weight).  The interpreter, in float64, gives the loss; autodiff's
 * gradient is compared with central differences
 *     (L(p + h) - L(p - h)) / 2h,  h = 1e-5.
 * Tolerance: |analytic - numeric| <= 1e-6 · max(1, |analytic|).  In double
 * precision the truncation error is O(h²·L''') ≈ 1e-10 and the rounding
 * error O(ε·|L| / h) ≈ 1e-11 for these sizes, so 1e-6 leaves a wide margin
 * while a wrong rule is off by O(1).  Inputs are kept away from the
 * points where an op is not differentiable (ties of max, 0 of sqrt/log). */
#include <math.h>
#include <stdlib.h>

#include "frontend.h"
#include "interp.h"
#include "passes.h"
#include "testutil.h"

enum { MAX_CHECKS_PER_PARAM = 24 };
static const double H = 1e-5, TOL = 1e-6;

/* A reproducible stream of numbers in [-1, 1). */
static uint64_t rng_state;
static uint64_t next(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return rng_state;
}
static double uniform(void) { return (double)(next() >> 11) / 9007199254740992.0 * 2 - 1; }
static double index_below(int64_t n) { return (double)((next() >> 33) % (uint64_t)n); }

static tg_graph *compile(tg_ctx *ctx, const char *text, int n_defs, const char *const *defs) {
  return tu_compile(ctx, "case.tg", text, n_defs, defs);
}

static const tg_node *output(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, name)) return g->outputs[i].node;
  ck_abort_msg("no output %s", name);
  return NULL;
}

static double run_loss(tg_ctx *ctx, tg_interp *it, const tg_node *loss) {
  tg_interp_run(ctx, it);
  return tg_interp_value(it, loss)[0];
}

/* Fills every param and float input with random values (ints get valid
 * indices below `vocab`), differentiates, and checks the gradient of up to
 * MAX_CHECKS_PER_PARAM elements of each param.  Returns how many checked. */
static int check_gradients(tg_ctx *ctx, tg_graph *g, int64_t vocab, double scale) {
  int nfwd = g->n_nodes;
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("autodiff/interp failed: %s", tu_errors(ctx));
  tg_autodiff(ctx, g);
  ck_assert(tg_verify(ctx, g));
  tg_interp *it = tg_interp_new(g, TG_PREC_F64);
  ck_assert_ptr_nonnull(it);
  for (int i = 0; i < nfwd; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_input) continue;
    double *v = tg_interp_leaf(it, n);
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++)
      v[k] = n->type.dtype == TG_I32 ? index_below(vocab) : scale * uniform();
  }
  const tg_node *loss = output(g, TG_OUTPUT_LOSS);
  run_loss(ctx, it, loss);
  /* Every gradient at the unperturbed point, before any finite difference
   * runs the graph again. */
  double **analytics = calloc((size_t)nfwd, sizeof *analytics);
  for (int i = 0; i < nfwd; i++) {
    const tg_node *p = g->nodes[i];
    if (p->op != TG_OP_param) continue;
    char gname[256];
    snprintf(gname, sizeof gname, TG_GRAD_PREFIX "%s", p->name);
    size_t bytes = sizeof(double) * (size_t)tg_type_numel(&p->type);
    analytics[i] = malloc(bytes);
    memcpy(analytics[i], tg_interp_value(it, output(g, gname)), bytes);
  }
  int checked = 0;
  for (int i = 0; i < nfwd; i++) {
    const tg_node *p = g->nodes[i];
    if (p->op != TG_OP_param) continue;
    int64_t numel = tg_type_numel(&p->type);
    const double *analytic = analytics[i];
    double *v = tg_interp_leaf(it, p);
    int64_t step = numel > MAX_CHECKS_PER_PARAM ? numel / MAX_CHECKS_PER_PARAM : 1;
    for (int64_t k = (int64_t)(rng_state % (uint64_t)step); k < numel; k += step) {
      double keep = v[k];
      v[k] = keep + H;
      double up = run_loss(ctx, it, loss);
      v[k] = keep - H;
      double down = run_loss(ctx, it, loss);
      v[k] = keep;
      double numeric = (up - down) / (2 * H);
      double tol = TOL * fmax(1, fabs(analytic[k]));
      ck_assert_msg(fabs(analytic[k] - numeric) <= tol,
                    "d loss / d %s[%lld]: autodiff %.12g, finite differences %.12g", p->name,
                    (long long)k, analytic[k], numeric);
      checked++;
    }
  }
  for (int i = 0; i < nfwd; i++) free(analytics[i]);
  free(analytics);
  tg_interp_free(it);
  return checked;
}

/* Each case: a .tg text whose params a, b (and inputs r, idx) feed loss. */
static const struct {
  const char *name, *text;
} cases[] = {
    {"add broadcast", "param a: [2, 3, 4] = zeros param b: [4] = zeros input r: f32[2, 3, 4]\n"
                      "output loss = sum((a + b) * r)"},
    {"sub both broadcast", "param a: [3, 1] = zeros param b: [1, 4] = zeros input r: f32[3, 4]\n"
                           "output loss = sum((a - b) * r)"},
    {"mul", "param a: [2, 3] = zeros param b: [2, 1] = zeros input r: f32[2, 3]\n"
            "output loss = sum(a * b * r)"},
    {"div", "param a: [2, 3] = zeros param b: [3] = zeros input r: f32[2, 3]\n"
            "output loss = sum(a / (b * b + 1) * r)"},
    {"maximum", "param a: [4, 5] = zeros param b: [5] = zeros input r: f32[4, 5]\n"
                "output loss = sum(maximum(a, b) * r)"},
    {"neg exp tanh", "param a: [3, 4] = zeros input r: f32[3, 4]\n"
                     "output loss = sum(tanh(exp(-a)) * r)"},
    {"log sqrt rsqrt", "param a: [3, 4] = zeros input r: f32[3, 4]\n"
                       "output loss = sum((log(a * a + 1) + sqrt(a * a + 2) + rsqrt(a * a + 0.5)) * r)"},
    {"where", "param a: [4, 4] = zeros param b: [4] = zeros input r: f32[4, 4]\n"
              "output loss = sum(where(iota([4, 4], 0) >= iota([4, 4], 1), a, b) * r)"},
    {"sum over axes", "param a: [2, 3, 4] = zeros input r: f32[2, 1, 4]\n"
                      "output loss = sum(sum(a, 1) * r) + sum(sum(a, [0, 2]) * 0.5)"},
    {"max over an axis", "param a: [3, 5] = zeros input r: f32[3, 1]\n"
                         "output loss = sum(max(a, -1) * r) + sum(max(a, 0))"},
    {"reshape transpose", "param a: [2, 3, 4] = zeros input r: f32[4, 6]\n"
                          "output loss = sum(reshape(transpose(a, 0, 2), [4, 6]) * r)"},
    {"slice split concat", "param a: [2, 6] = zeros input r: f32[2, 6]\n"
                           "x, y, z = split(a, 1, 3)\n"
                           "output loss = sum(concat([z * 2, x, slice(a, 1, 1, 2) * y], 1) * r)"},
    {"gather repeated", "param a: [5, 3] = zeros input idx: i32[2, 4] input r: f32[2, 4, 3]\n"
                        "output loss = sum(gather(a, idx) * r)"},
    {"matmul", "param a: [2, 3, 4] = zeros param b: [2, 4, 5] = zeros input r: f32[2, 3, 5]\n"
               "output loss = sum((a @ b) * r)"},
    {"matmul weight", "param a: [2, 3, 4] = zeros param b: [4, 5] = zeros input r: f32[2, 3, 5]\n"
                      "output loss = sum((a @ b) * r)"},
    {"matmul batch broadcast", "param a: [2, 1, 3, 4] = zeros param b: [5, 4, 2] = zeros\n"
                               "input r: f32[2, 5, 3, 2]\n"
                               "output loss = sum((a @ b) * r)"},
    {"matmul left shared", "param a: [3, 4] = zeros param b: [2, 4, 5] = zeros input r: f32[2, 3, 5]\n"
                           "output loss = sum((a @ b) * r)"},
    {"layernorm", "import \"std.tg\"\n"
                  "param a: [2, 3, 8] = zeros input r: f32[2, 3, 8]\n"
                  "output loss = sum(ln.layernorm(a) * r)"},
    {"gelu softmax", "import \"std.tg\"\n"
                     "param a: [3, 6] = zeros input r: f32[3, 6]\n"
                     "output loss = sum((gelu(a) + softmax(a * 3)) * r)"},
    {"attention", "import \"std.tg\"\n"
                  "param q: [1, 2, 4, 3] = zeros param k: [1, 2, 4, 3] = zeros\n"
                  "param v: [1, 2, 4, 3] = zeros input r: f32[1, 2, 4, 3]\n"
                  "output loss = sum(causal_attention(q, k, v) * r)"},
    {"cross entropy", "import \"std.tg\"\n"
                      "config { B = 2  T = 3 }\n"
                      "param logits: [B, T, 7] = zeros input targets: i32[B, T]\n"
                      "output loss = cross_entropy(logits * 3, targets)"},
};

START_TEST(test_op_rules) {
  rng_state = 12345 + (uint64_t)_i;
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, cases[_i].text, 0, NULL);
  int checked = check_gradients(ctx, g, 5, 1.0);
  ck_assert_msg(checked > 0, "%s: nothing checked", cases[_i].name);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* The output "loss": x summed over axes, as a scalar. */
static void add_loss(tg_graph *g, tg_node *x, uint32_t axes) {
  tg_loc loc = {"t.tg", 1, 1};
  tg_node *s = tg_node_new(g, TG_OP_sum, loc);
  tg_node_set_inputs(g, s, 1, &x);
  s->axes = axes;
  ck_assert_ptr_null(tg_graph_add(g, s));
  tg_node *loss = tg_node_new(g, TG_OP_reshape, loc);
  tg_node_set_inputs(g, loss, 1, &s);
  loss->type = (tg_type){.dtype = TG_F32};
  ck_assert_ptr_null(tg_graph_add(g, loss));
  tg_graph_add_output(g, TG_OUTPUT_LOSS, loss);
}

/* The rules for ops that only autodiff makes (expand, pad, scatter_add),
 * on graphs built directly. */
START_TEST(test_gradient_op_rules) {
  rng_state = 777;
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tg_graph_new(ctx->arena);
  tg_loc loc = {"built", 1, 1};
  tg_node *a = tg_node_new(g, TG_OP_param, loc);
  a->name = "a";
  a->type = (tg_type){TG_F32, 2, {{3, NULL}, {1, NULL}}};
  ck_assert_ptr_null(tg_graph_add(g, a));
  tg_node *ex = tg_node_new(g, TG_OP_expand, loc);
  tg_node_set_inputs(g, ex, 1, &a);
  ex->type = (tg_type){TG_F32, 3, {{2, NULL}, {3, NULL}, {4, NULL}}};
  ck_assert_ptr_null(tg_graph_add(g, ex));
  tg_node *pd = tg_node_new(g, TG_OP_pad, loc);
  tg_node_set_inputs(g, pd, 1, &ex);
  pd->axis = 2, pd->start = 1, pd->len = 7;
  ck_assert_ptr_null(tg_graph_add(g, pd));
  tg_node *idx = tg_node_new(g, TG_OP_input, loc);
  idx->name = TG_INPUT_IDX;
  idx->type = (tg_type){TG_I32, 1, {{2, NULL}}};
  ck_assert_ptr_null(tg_graph_add(g, idx));
  tg_node *sc = tg_node_new(g, TG_OP_scatter_add, loc);
  tg_node_set_inputs(g, sc, 2, (tg_node *[]){pd, idx});
  sc->type = (tg_type){TG_F32, 3, {{4, NULL}, {3, NULL}, {7, NULL}}};
  ck_assert_ptr_null(tg_graph_add(g, sc));
  tg_node *r = tg_node_new(g, TG_OP_input, loc);
  r->name = "r";
  r->type = sc->type;
  ck_assert_ptr_null(tg_graph_add(g, r));
  tg_node *m = tg_node_new(g, TG_OP_mul, loc);
  tg_node_set_inputs(g, m, 2, (tg_node *[]){sc, r});
  ck_assert_ptr_null(tg_graph_add(g, m));
  add_loss(g, m, 7);
  ck_assert_int_eq(check_gradients(ctx, g, 4, 1.0), 3);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* flash_attention's rule (its three backward ops recomputing P from the
 * saved lse), on std.tg's attention after the flash_attn pass.  T = 6
 * crosses the interpreter's tiles of 4 keys. */
START_TEST(test_flash_attention_rule) {
  rng_state = 4711;
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, "import \"std.tg\"\n"
                             "param q: [2, 2, 6, 3] = zeros param k: [2, 2, 6, 3] = zeros\n"
                             "param v: [2, 2, 6, 3] = zeros input r: f32[2, 2, 6, 3]\n"
                             "output loss = sum(causal_attention(q, k, v) * r)",
                        0, NULL);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("flash_attn failed: %s", tu_errors(ctx));
  tg_flash_attn(ctx, g, NULL);
  int found = 0;
  for (int i = 0; i < g->n_nodes; i++) found += g->nodes[i]->op == TG_OP_flash_attention;
  ck_assert_int_eq(found, 1);
  /* scale 1.5: sharper probabilities than uniform in [-1, 1) gives */
  ck_assert_int_eq(check_gradients(ctx, g, 5, 1.5), 3 * 24);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* The gelu op (the gelu pass's, from std.tg's tanh form) and its gelu_grad
 * rule against finite differences, at points spread over [-4, 4) where
 * the tanh bends (uniform in [-1, 1) times 4). */
START_TEST(test_gelu_rule) {
  rng_state = 1234;
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, "import \"std.tg\"\n"
                             "param a: [4, 6] = zeros input r: f32[4, 6]\n"
                             "output loss = sum(gelu(a) * r)",
                        0, NULL);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("gelu pass failed: %s", tu_errors(ctx));
  tg_gelu(ctx, g, NULL);
  int found = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    found += g->nodes[i]->op == TG_OP_gelu;
    ck_assert_int_ne(g->nodes[i]->op, TG_OP_tanh); /* the pattern's nodes are gone */
  }
  ck_assert_int_eq(found, 1);
  ck_assert_int_eq(check_gradients(ctx, g, 5, 4.0), 24);
  int grads = 0;
  for (int i = 0; i < g->n_nodes; i++) grads += g->nodes[i]->op == TG_OP_gelu_grad;
  ck_assert_int_eq(grads, 1);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

static const char *read_model(void) { return tu_read("models/gpt2.tg"); }

static const char *const tiny[] = {"n_layer=2", "n_embd=8", "n_head=2", "vocab=11",
                                   "block_size=5", "B=2",     "T=4"};

/* The whole 2-layer GPT: a sample of every parameter's elements. */
START_TEST(test_gpt2_whole_model) {
  rng_state = 99;
  tg_ctx *ctx = tu_ctx();
  const char *src = read_model();
  /* models/ is the import path: std.tg resolves as for the real file */
  tg_graph *g = compile(ctx, src, 7, tiny);
  /* scale 0.5: activations well inside tanh's and softmax's live range */
  int checked = check_gradients(ctx, g, 11, 0.5);
  ck_assert_int_ge(checked, 2 + 2 * 12 + 2); /* at least one element of each parameter */
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* Weight tying: wte's gradient is the sum of the gradient through the
 * embedding lookup and the gradient through the output head.  Untie the
 * model (a separate lm_head.weight holding the same values) and compare. */
START_TEST(test_tied_embedding_sums_both_uses) {
  const char *tied_line = "logits = x @ transpose(wte.weight)";
  const char *src = read_model();
  const char *at = strstr(src, tied_line);
  ck_assert_ptr_nonnull(at);
  char untied[1 << 16];
  snprintf(untied, sizeof untied, "%.*sparam lm_head.weight: [vocab, n_embd] = normal(0.02)\n"
                                  "logits = x @ transpose(lm_head.weight)%s",
           (int)(at - src), src, at + strlen(tied_line));

  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  tg_graph *gt = compile(ctx, src, 7, tiny), *gu = compile(ctx, untied, 7, tiny);
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("failed: %s", tu_errors(ctx));
  tg_autodiff(ctx, gt);
  tg_autodiff(ctx, gu);
  tg_interp *it = tg_interp_new(gt, TG_PREC_F64), *iu = tg_interp_new(gu, TG_PREC_F64);
  /* the same values for the same names; lm_head gets wte's values */
  rng_state = 4242;
  for (int i = 0; i < gt->n_nodes; i++) {
    const tg_node *n = gt->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_input) continue;
    const tg_node *m = NULL;
    for (int k = 0; k < gu->n_nodes && !m; k++)
      if ((gu->nodes[k]->op == n->op) && !strcmp(gu->nodes[k]->name, n->name)) m = gu->nodes[k];
    ck_assert_ptr_nonnull(m);
    double *vt = tg_interp_leaf(it, n), *vu = tg_interp_leaf(iu, m);
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++)
      vt[k] = vu[k] = n->type.dtype == TG_I32 ? (double)(k * 7 % 11) : 0.5 * uniform();
    if (!strcmp(n->name, "wte.weight")) {
      const tg_node *head = NULL;
      for (int k = 0; k < gu->n_nodes && !head; k++)
        if (gu->nodes[k]->name && !strcmp(gu->nodes[k]->name, "lm_head.weight")) head = gu->nodes[k];
      ck_assert_ptr_nonnull(head);
      memcpy(tg_interp_leaf(iu, head), vt, sizeof(double) * (size_t)tg_type_numel(&n->type));
    }
  }
  tg_interp_run(ctx, it);
  tg_interp_run(ctx, iu);
  ck_assert(fabs(tg_interp_value(it, output(gt, TG_OUTPUT_LOSS))[0] -
                 tg_interp_value(iu, output(gu, TG_OUTPUT_LOSS))[0]) < 1e-12);
  const double *dtied = tg_interp_value(it, output(gt, TG_GRAD_PREFIX "wte.weight"));
  const double *demb = tg_interp_value(iu, output(gu, TG_GRAD_PREFIX "wte.weight"));
  const double *dhead = tg_interp_value(iu, output(gu, TG_GRAD_PREFIX "lm_head.weight"));
  double both = 0, emb_only = 0;
  for (int64_t k = 0; k < 11 * 8; k++) {
    ck_assert_msg(fabs(dtied[k] - (demb[k] + dhead[k])) <= 1e-12 * fmax(1, fabs(dtied[k])),
                  "wte.weight[%lld]: tied %.15g, embedding %.15g + head %.15g", (long long)k,
                  dtied[k], demb[k], dhead[k]);
    both += fabs(dtied[k]);
    emb_only += fabs(dtied[k] - demb[k]);
  }
  /* and the head's share is not negligible: both uses really contribute */
  ck_assert(emb_only > 0.1 * both);
  tg_interp_free(it);
  tg_interp_free(iu);
  tg_graph_free(gt);
  tg_graph_free(gu);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_errors) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, "param a: [3] = zeros\noutput y = sum(a)", 0, NULL);
  jmp_buf bail;
  ctx->bail = &bail;
  if (!setjmp(bail)) {
    tg_autodiff(ctx, g);
    ck_abort_msg("a model without 'loss' was differentiated");
  }
  ck_assert_ptr_nonnull(strstr(ctx->message, "no output named 'loss'"));
  tg_graph_free(g);
  tu_ctx_free(ctx);

  ctx = tu_ctx();
  g = compile(ctx, "param a: [3] = zeros\noutput loss = a * 2", 0, NULL);
  ctx->bail = &bail;
  if (!setjmp(bail)) {
    tg_autodiff(ctx, g);
    ck_abort_msg("a non-scalar loss was differentiated");
  }
  ck_assert_ptr_nonnull(strstr(ctx->message, "loss must be a float scalar, not f32[3]"));
  ck_assert_ptr_nonnull(strstr(tu_errors(ctx), "case.tg:2:"));
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* A parameter the loss ignores gets zeros; one it uses twice, the sum. */
START_TEST(test_unused_and_reused) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, "param a: [3] = zeros\nparam unused: [2] = zeros\n"
                             "output loss = sum(a * a) + sum(a)", 0, NULL);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("failed: %s", tu_errors(ctx));
  tg_autodiff(ctx, g);
  tg_interp *it = tg_interp_new(g, TG_PREC_F64);
  double *a = tg_interp_leaf(it, g->nodes[0]);
  a[0] = 1, a[1] = -2, a[2] = 0.5;
  tg_interp_run(ctx, it);
  const double *da = tg_interp_value(it, output(g, TG_GRAD_PREFIX "a"));
  const double *du = tg_interp_value(it, output(g, TG_GRAD_PREFIX "unused"));
  ck_assert(da[0] == 3 && da[1] == -3 && da[2] == 2); /* 2a + 1 */
  ck_assert(du[0] == 0 && du[1] == 0);
  tg_interp_free(it);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* The collectives' rules, by structure (the interpreter runs them only
 * under mpirun): p [8] -> all_gather {ranks=4} [32] -> * r ->
 * reduce_scatter {ranks=2} [16] -> all_reduce {ranks=2} -> sum.  The
 * all_reduce's gradient is the incoming one itself, the reduce_scatter's an
 * all_gather over its 2 ranks, the all_gather's a reduce_scatter over its 4. */
static tg_node *collective_node(tg_graph *g, tg_op op, tg_node *x, int ranks) {
  tg_node *c = tg_node_new(g, op, (tg_loc){"t.tg", 1, 1});
  tg_node_set_inputs(g, c, 1, &x);
  c->ranks = ranks;
  ck_assert_ptr_null(tg_graph_add(g, c));
  return c;
}

START_TEST(test_collective_rules) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tg_graph_new(ctx->arena);
  tg_loc loc = {"t.tg", 1, 1};
  tg_node *p = tg_node_new(g, TG_OP_param, loc);
  p->name = "p";
  p->type = (tg_type){TG_F32, 1, {{8, NULL}}};
  ck_assert_ptr_null(tg_graph_add(g, p));
  tg_node *ag = collective_node(g, TG_OP_all_gather, p, 4);
  ck_assert_int_eq(ag->type.dim[0].size, 32);
  tg_node *r = tg_node_new(g, TG_OP_input, loc);
  r->name = "r";
  r->type = ag->type;
  ck_assert_ptr_null(tg_graph_add(g, r));
  tg_node *m = tg_node_new(g, TG_OP_mul, loc);
  tg_node_set_inputs(g, m, 2, (tg_node *[]){ag, r});
  ck_assert_ptr_null(tg_graph_add(g, m));
  tg_node *rs = collective_node(g, TG_OP_reduce_scatter, m, 2);
  ck_assert_int_eq(rs->type.dim[0].size, 16);
  tg_node *ar = collective_node(g, TG_OP_all_reduce, rs, 2);
  add_loss(g, ar, 1);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("autodiff failed: %s", tu_errors(ctx));
  int before = g->n_nodes;
  tg_autodiff(ctx, g);
  ctx->bail = NULL;
  ck_assert(tg_verify(ctx, g));

  const tg_node *dp = output(g, TG_GRAD_PREFIX "p");
  ck_assert_int_eq(dp->op, TG_OP_reduce_scatter);
  ck_assert_int_eq(dp->ranks, 4);
  ck_assert_int_eq(dp->type.dim[0].size, 8);
  const tg_node *dm = dp->in[0]; /* the gradient of ag: d(m) * r */
  ck_assert_int_eq(dm->op, TG_OP_mul);
  const tg_node *gathered = dm->in[0]->op == TG_OP_all_gather ? dm->in[0] : dm->in[1];
  ck_assert_int_eq(gathered->op, TG_OP_all_gather);
  ck_assert_int_eq(gathered->ranks, 2);
  ck_assert_int_eq(gathered->type.dim[0].size, 32);
  /* all_reduce's gradient passed through: no collective beneath */
  ck_assert(!tg_op_is_collective(gathered->in[0]->op));
  ck_assert_int_eq(gathered->in[0]->type.dim[0].size, 16);
  int collectives = 0, all_reduces = 0;
  for (int i = before; i < g->n_nodes; i++) {
    collectives += tg_op_is_collective(g->nodes[i]->op);
    all_reduces += g->nodes[i]->op == TG_OP_all_reduce;
  }
  ck_assert_int_eq(collectives, 2);
  ck_assert_int_eq(all_reduces, 0);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("autodiff");
  TCase *tc = tcase_create("autodiff");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_op_rules, 0, (int)(sizeof cases / sizeof *cases));
  tcase_add_test(tc, test_gradient_op_rules);
  tcase_add_test(tc, test_flash_attention_rule);
  tcase_add_test(tc, test_gelu_rule);
  tcase_add_test(tc, test_gpt2_whole_model);
  tcase_add_test(tc, test_tied_embedding_sums_both_uses);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_unused_and_reused);
  tcase_add_test(tc, test_collective_rules);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
