/* test_pad_vocab.c: the pad_vocab pass changes shapes, not results.
 *
 * A tiny GPT-2 (vocab 50) is compiled twice, unpadded and padded to 64, given
 * the same weights (the padded rows zero) and the same batch, and run on
 * the reference interpreter in float64 with its gradient and AdamW steps.
 *
 * Tolerances: padding only adds exact zeros to sums (exp(-inf) = 0 in the
 * softmax's sum, 0 * 0 products in the matmuls over the vocab), so the two
 * graphs do the same arithmetic and agree to the last bit in practice.  We
 * allow 1e-12 relative for the loss and gradients (double rounding is
 * 1.1e-16 per op; the tiny model's longest chains are a few hundred ops, so
 * any reordering would stay far below 1e-12) and 1e-9 absolute for the
 * weights after three AdamW steps (the update divides by sqrt(v) + eps,
 * which can amplify a 1e-16 difference in a tiny gradient by up to
 * lr / eps = 1e5, still far below 1e-9).  A wrong mask is off by O(1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend.h"
#include "interp.h"
#include "passes.h"
#include "testutil.h"
#include "weights.h"

static const char *const tiny[] = {"n_layer=2", "n_embd=16", "n_head=2", "vocab=50",
                                   "block_size=8", "B=2", "T=4"};
enum { N_TINY = sizeof tiny / sizeof *tiny };

static tg_graph *compile(tg_ctx *ctx, const char *const *defs, int n_defs, int multiple) {
  static tg_define d[16];
  static char names[16][64];
  for (int i = 0; i < n_defs; i++) ck_assert(tg_define_parse(defs[i], &d[i], names[i], sizeof names[i]));
  const char *inc[1] = {tu_path("models")};
  tg_compile_opts opts = {d, n_defs, inc, 1};
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("compile failed: %s", tu_errors(ctx));
  tg_graph *g = tg_compile_file(ctx, tu_path("models/gpt2.tg"), &opts);
  ck_assert(tg_verify(ctx, g));
  tg_pad_vocab(ctx, g, multiple);
  ck_assert_msg(tg_verify(ctx, g), "%s", tu_errors(ctx));
  return g;
}

static const tg_node *find(const tg_graph *g, tg_op op, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == op && g->nodes[i]->name && !strcmp(g->nodes[i]->name, name))
      return g->nodes[i];
  ck_abort_msg("no %s node '%s'", tg_ops[op].name, name);
  return NULL;
}

static const tg_node *output(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, name)) return g->outputs[i].node;
  ck_abort_msg("no output %s", name);
  return NULL;
}

START_TEST(test_gpt2_pads_50257_to_50304) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, NULL, 0, 64);
  const tg_node *wte = find(g, TG_OP_param, "wte.weight");
  ck_assert_int_eq(wte->type.dim[0].size, 50304);
  ck_assert_str_eq(wte->type.dim[0].sym, "vocab");
  ck_assert_int_eq(tg_dim_unpadded(g, &wte->type.dim[0]), 50257);
  ck_assert_int_eq(wte->type.dim[1].size, 768);
  const tg_node *logits = find(g, TG_OP_matmul, TG_OUTPUT_LOGITS);
  ck_assert_int_eq(logits->type.dim[2].size, 50304);
  double v;
  ck_assert(tg_graph_get_config(g, "vocab", &v));
  ck_assert(v == 50257);
  /* the logits' only users read the mask, never the raw matmul */
  int users = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++)
      if (g->nodes[i]->in[k] == logits) {
        users++;
        ck_assert_int_eq(g->nodes[i]->op, TG_OP_where);
      }
  ck_assert_int_eq(users, 1);
  /* the file shape is the unpadded one; stats say what was padded */
  tg_type ft;
  tg_file_type(g, &wte->type, &ft);
  ck_assert_int_eq(ft.dim[0].size, 50257);
  tg_stats s;
  tg_graph_stats(g, &s);
  ck_assert_int_eq(s.param_elems, 124439808);
  char *buf;
  size_t len;
  FILE *f = open_memstream(&buf, &len);
  tg_print_stats(f, g);
  fclose(f);
  ck_assert_msg(strstr(buf, "vocab    50257 → 50304 (padded)\n"), "%s", buf);
  free(buf);
  /* padding again changes nothing */
  char *once = tu_print_ir(g);
  tg_pad_vocab(ctx, g, 64);
  char *twice = tu_print_ir(g);
  ck_assert_str_eq(once, twice);
  free(once);
  free(twice);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_multiple_1_is_a_no_op) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, tiny, N_TINY, 0);
  char *before = tu_print_ir(g);
  for (int m = -1; m <= 1; m++) {
    tg_pad_vocab(ctx, g, m);
    char *after = tu_print_ir(g);
    ck_assert_str_eq(before, after);
    free(after);
  }
  /* a vocab that is already a multiple: nothing to pad */
  tg_pad_vocab(ctx, g, 25);
  char *after = tu_print_ir(g);
  ck_assert_str_eq(before, after);
  free(after);
  free(before);
  tu_ctx_free(ctx);
}
END_TEST

/* A reproducible stream of numbers in [-1, 1). */
static uint64_t rng_state;
static double uniform(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1;
}

/* Flat index in shape `big` of the element at flat index k of shape
 * `small` (same rank, each dim no larger). */
static int64_t box_index(const tg_type *small, const tg_type *big, int64_t k) {
  int64_t idx[TG_MAX_RANK], out = 0;
  for (int d = small->rank - 1; d >= 0; d--) {
    idx[d] = k % small->dim[d].size;
    k /= small->dim[d].size;
  }
  for (int d = 0; d < small->rank; d++) out = out * big->dim[d].size + idx[d];
  return out;
}

/* The padded graph's value of n restricted to the unpadded box equals the
 * unpadded graph's value of m within tol (relative to max(1, |x|)), and is
 * exactly zero outside the box. */
static void check_same(const tg_type *small, const double *a, const tg_type *big,
                       const double *b, double tol, const char *what) {
  int64_t n = tg_type_numel(big);
  char *inside = calloc((size_t)n, 1);
  for (int64_t k = 0; k < tg_type_numel(small); k++) {
    int64_t j = box_index(small, big, k);
    inside[j] = 1;
    double scale = fabs(a[k]) > 1 ? fabs(a[k]) : 1;
    ck_assert_msg(fabs(a[k] - b[j]) <= tol * scale, "%s[%lld]: %.17g unpadded vs %.17g padded",
                  what, (long long)k, a[k], b[j]);
  }
  for (int64_t j = 0; j < n; j++)
    ck_assert_msg(inside[j] || b[j] == 0, "%s: padded element %lld is %g, not 0", what,
                  (long long)j, b[j]);
  free(inside);
}

/* Same weights (random floats, padded rows zero) and batch in both. */
static void feed(const tg_graph *g, tg_interp *it, uint64_t seed) {
  rng_state = seed;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op == TG_OP_input && n->type.dtype == TG_I32) {
      double *v = tg_interp_leaf(it, n);
      for (int64_t k = 0; k < tg_type_numel(&n->type); k++)
        v[k] = (double)((uint64_t)((uniform() + 1) * 1e6) % 50);
    } else if (n->op == TG_OP_param) {
      tg_type ft;
      tg_file_type(g, &n->type, &ft);
      int64_t fn = tg_type_numel(&ft), gn = tg_type_numel(&n->type);
      float *real = malloc(sizeof *real * (size_t)fn), *all = malloc(sizeof *all * (size_t)gn);
      for (int64_t k = 0; k < fn; k++) real[k] = (float)(0.5 * uniform());
      tg_copy_box(real, &ft, all, &n->type);
      double *v = tg_interp_leaf(it, n);
      for (int64_t k = 0; k < gn; k++) v[k] = all[k];
      free(real);
      free(all);
    }
  }
}

START_TEST(test_same_loss_gradients_and_steps) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g[2] = {compile(ctx, tiny, N_TINY, 1), compile(ctx, tiny, N_TINY, 64)};
  ck_assert_int_eq(find(g[1], TG_OP_param, "wte.weight")->type.dim[0].size, 64);
  tg_interp *it[2];
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("autodiff/interp failed: %s", tu_errors(ctx));
  for (int k = 0; k < 2; k++) {
    tg_autodiff(ctx, g[k]);
    tg_append_adamw(ctx, g[k], &tg_adamw_defaults, NULL);
    ck_assert(tg_verify(ctx, g[k]));
    it[k] = tg_interp_new(g[k], TG_PREC_F64);
    ck_assert_ptr_nonnull(it[k]);
    feed(g[k], it[k], 12345);
  }
  for (int step = 1; step <= 3; step++) {
    for (int k = 0; k < 2; k++) {
      *tg_interp_leaf(it[k], find(g[k], TG_OP_input, "lr")) = 1e-2;
      *tg_interp_leaf(it[k], find(g[k], TG_OP_input, "step")) = step;
      tg_interp_run(ctx, it[k]);
    }
    if (step == 1) {
      const tg_node *l0 = output(g[0], TG_OUTPUT_LOSS), *l1 = output(g[1], TG_OUTPUT_LOSS);
      check_same(&l0->type, tg_interp_value(it[0], l0), &l1->type, tg_interp_value(it[1], l1),
                 1e-12, "loss");
      for (int i = 0; i < g[0]->n_outputs; i++) {
        const tg_output *o = &g[0]->outputs[i];
        if (strncmp(o->name, TG_GRAD_PREFIX, strlen(TG_GRAD_PREFIX))) continue;
        const tg_node *p = output(g[1], o->name);
        check_same(&o->node->type, tg_interp_value(it[0], o->node), &p->type,
                   tg_interp_value(it[1], p), 1e-12, o->name);
      }
    }
    /* after each step: the real weights agree, the padded rows stay zero */
    for (int i = 0; i < g[0]->n_nodes; i++) {
      const tg_node *p0 = g[0]->nodes[i];
      if (p0->op != TG_OP_param) continue;
      const tg_node *p1 = find(g[1], TG_OP_param, p0->name);
      check_same(&p0->type, tg_interp_leaf(it[0], p0), &p1->type, tg_interp_leaf(it[1], p1), 1e-9,
                 p0->name);
    }
  }
  tg_interp_free(it[0]);
  tg_interp_free(it[1]);
  tu_ctx_free(ctx);
}
END_TEST

/* tgrun init writes the unpadded model's initial weights, whatever the
 * graph's padding, and files read back into a padded graph with zeros. */
START_TEST(test_weights_keep_unpadded_shapes) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g0 = compile(ctx, tiny, N_TINY, 1), *g1 = compile(ctx, tiny, N_TINY, 64);
  tg_weights *w0 = tg_weights_init(g0, 7), *w1 = tg_weights_init(g1, 7);
  const tg_node *a = find(g0, TG_OP_param, "wte.weight"), *b = find(g1, TG_OP_param, "wte.weight");
  for (int64_t k = 0; k < 64 * 16; k++) {
    float want = k < 50 * 16 ? w0->values[a->id][k] : 0.0f;
    ck_assert_msg(w1->values[b->id][k] == want, "wte.weight[%lld]", (long long)k);
  }
  char path[] = "/tmp/test_pad_vocab_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  char why[512];
  ck_assert_msg(tg_weights_save(w1, path, false, why, sizeof why), "%s", why);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("load failed: %s", tu_errors(ctx));
  tg_weights *r0 = tg_weights_load(ctx, g0, path, false); /* the file is [50, 16] */
  tg_weights *r1 = tg_weights_load(ctx, g1, path, false);
  ck_assert(!memcmp(r0->values[a->id], w0->values[a->id], 50 * 16 * sizeof(float)));
  ck_assert(!memcmp(r1->values[b->id], w1->values[b->id], 64 * 16 * sizeof(float)));
  remove(path);
  tg_weights_free(w0);
  tg_weights_free(w1);
  tg_weights_free(r0);
  tg_weights_free(r1);
  tu_ctx_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pad_vocab");
  TCase *tc = tcase_create("pad_vocab");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpt2_pads_50257_to_50304);
  tcase_add_test(tc, test_multiple_1_is_a_no_op);
  tcase_add_test(tc, test_same_loss_gradients_and_steps);
  tcase_add_test(tc, test_weights_keep_unpadded_shapes);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
