/* test_flash_attn.c: the flash_attn pass and the flash attention ops.
 *
 * What must hold: every causal self-attention of gpt2.tg is replaced, and
 * so are the other spellings of it the pass accepts; look-alikes that are
 * not causal attention are left alone with the reason in the report; and
 * the substituted graph computes what the unsubstituted one does, forward
 * and backward (the interpreter runs flash_attention with the tiled online
 * softmax, tiles of 4 keys, so the sequences here cross several tiles).
 *
 * Tolerances of the numeric comparison (float64 interpreter): both graphs
 * compute the same real numbers in a different order (a running max and
 * rescaled sums against max-subtract-exp-sum; the backward from the
 * recomputed P against the chain of primitive rules).  Each value is a
 * sum of at most a few hundred rounded terms of size O(1) per layer, so
 * the two differ by some hundreds of ulps, ~1e-14 relative; the loss is
 * checked to 1e-12 and the gradients to 1e-10 (relative to max(1, |g|)),
 * while a wrong formula (a missed scale, a mask off by one key) is off by
 * O(1e-3) or more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "interp.h"
#include "passes.h"
#include "testutil.h"

/* Runs the pass, returning its report (malloc'ed) and checking the graph. */
static char *run_pass(tg_ctx *ctx, tg_graph *g) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("flash_attn failed: %s", tu_errors(ctx));
  tg_findings *findings = tg_findings_new(ctx->arena);
  tg_flash_attn(ctx, g, findings);
  tg_findings_print(f, findings, "flash_attn");
  fclose(f);
  ck_assert_msg(tg_verify(ctx, g), "graph broken: %s", tu_errors(ctx));
  for (int i = 0; i < g->n_nodes; i++) ck_assert_int_eq(g->nodes[i]->id, i);
  return text;
}

static int count_op(const tg_graph *g, tg_op op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->op == op;
  return n;
}

static int count_lines(const char *text, const char *prefix) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, prefix)); p++) n++;
  return n;
}

/* ---- gpt2.tg at full size -------------------------------------------------- */

START_TEST(test_gpt2_all_layers) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), 0, NULL);
  int before = g->n_nodes;
  char *report = run_pass(ctx, g);
  ck_assert_int_eq(count_lines(report, "std.tg:38:23: "
                                       "q f32[B=8, n_head=12, T=1024, 64], scale 0.125"), 12);
  ck_assert_int_eq(count_lines(report, "not matched"), 0);
  ck_assert_ptr_nonnull(strstr(report, "q from h.0.attn.c_attn.bias\n"));
  ck_assert_ptr_nonnull(strstr(report, "q from h.11.attn.c_attn.bias\n"));
  ck_assert_int_eq(count_op(g, TG_OP_flash_attention), 12);
  ck_assert_int_eq(count_op(g, TG_OP_flash_attention_lse), 12);
  /* nothing of the written-out attention is left: no exp (the loss's
   * logsumexp has one), no [T, T] tensor at all */
  ck_assert_int_eq(count_op(g, TG_OP_exp), 1);
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_type *t = &g->nodes[i]->type;
    ck_assert(!(t->rank >= 2 && t->dim[t->rank - 1].size == 1024 && t->dim[t->rank - 2].size == 1024));
  }
  /* per layer, 15 nodes (kᵀ, q @ kᵀ, the scale and its mul, 2 iotas, ge,
   * -inf, where, max, sub, exp, sum, div, P @ v) became 2 */
  ck_assert_int_eq(g->n_nodes, before - 12 * (15 - 2));
  /* the attention's output keeps P @ v's name, and feeds the projection */
  const tg_node *o = NULL;
  for (int i = 0; i < g->n_nodes && !o; i++)
    if (g->nodes[i]->op == TG_OP_flash_attention) o = g->nodes[i];
  ck_assert_str_eq(o->name, "y");
  ck_assert_int_eq(o->in[3]->op, TG_OP_flash_attention_lse);
  ck_assert_int_eq(o->in[3]->id, o->id - 1);
  free(report);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* ---- other spellings, and look-alikes ---------------------------------------- */

/* A model around one attention: loss = sum(ATT(q, k, v) * r), with the
 * attention block written as the case says. */
static char *attention_model(const char *body) {
  static char buf[4096];
  snprintf(buf, sizeof buf,
           "config { T = 10  D = 4 }\n"
           "param q: [2, 2, T, D] = normal(1)\nparam k: [2, 2, T, D] = normal(1)\n"
           "param v: [2, 2, T, D] = normal(1)\ninput r: f32[2, 2, T, D]\n"
           "block att(q: f32[B, H, T, D], k: f32[B, H, T, D], v: f32[B, H, T, D]) {\n"
           "  causal = iota([T, T], 0) >= iota([T, T], 1)\n"
           "%s\n"
           "}\n"
           "output loss = sum(att(q, k, v) * r)\n",
           body);
  return buf;
}

static const struct {
  const char *name, *body;
} spellings[] = {
    {"the reference spelling (std.tg)",
     "  s = where(causal, (q @ transpose(k, 2, 3)) * (1 / sqrt(D)), -inf)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v"},
    {"the scale on q",
     "  s = where(causal, (q * (1 / sqrt(D))) @ transpose(k, 2, 3), -inf)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v"},
    {"the mask added as -inf",
     "  s = 0.5 * (q @ transpose(k, 2, 3)) + where(causal, 0, -inf)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v"},
    {"division by sqrt(D), the mask first in the sum, key <= query",
     "  s = where(iota([T, T], 1) <= iota([T, T], 0), 0, -inf) + (q @ transpose(k, 2, 3)) / sqrt(D)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v"},
    {"the scale on q by division, a [1, 1, T, T] mask",
     "  s = where(reshape(causal, [1, 1, T, T]), (q / 2) @ transpose(k, 2, 3), -inf)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v"},
};

static const struct {
  const char *name, *body, *reason;
} lookalikes[] = {
    {"an anti-causal mask (query <= key)",
     "  s = where(iota([T, T], 0) <= iota([T, T], 1), (q @ transpose(k, 2, 3)) * 0.5, -inf)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v",
     "the mask is not causal"},
    {"a strict mask (query > key: a row with no key at all)",
     "  s = where(iota([T, T], 0) > iota([T, T], 1), (q @ transpose(k, 2, 3)) * 0.5, -inf)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v",
     "the mask is not causal"},
    {"no mask (full attention)",
     "  s = (q @ transpose(k, 2, 3)) * 0.5\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v",
     "the scores are not masked"},
    {"softmax over the query axis",
     "  s = where(causal, (q @ transpose(k, 2, 3)) * 0.5, -inf)\n"
     "  e = exp(s - max(s, -2))\n  return e / sum(e, -2) @ v",
     "the softmax sums over axes 0x4, not the last (key) axis 3"},
    {"no scale",
     "  s = where(causal, q @ transpose(k, 2, 3), -inf)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v",
     "no scale: the scores q @ transpose(k) are not multiplied by a constant"},
    {"a softmax without the max subtracted",
     "  s = where(causal, (q @ transpose(k, 2, 3)) * 0.5, -inf)\n"
     "  e = exp(s)\n  return e / sum(e, -1) @ v",
     "the softmax does not subtract the row max"},
    {"k not transposed (q @ k of a square head)",
     "  s = where(causal, (q @ reshape(k, [B, H, D, T])) * 0.5, -inf)\n"
     "  e = exp(s - max(s, -1))\n  return e / sum(e, -1) @ v",
     "other than a transpose of k's last two axes"},
};

START_TEST(test_spellings_match) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tu_compile(ctx, "case.tg", attention_model(spellings[_i].body), 0, NULL);
  char *report = run_pass(ctx, g);
  ck_assert_msg(count_lines(report, "flash_attn: matched causal attention at case.tg:") == 1 &&
                    count_op(g, TG_OP_flash_attention) == 1 && count_op(g, TG_OP_exp) == 0,
                "%s: not replaced; report:\n%s", spellings[_i].name, report);
  free(report);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_lookalikes_do_not_match) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tu_compile(ctx, "case.tg", attention_model(lookalikes[_i].body), 0, NULL);
  int before = g->n_nodes;
  char *report = run_pass(ctx, g);
  ck_assert_msg(count_op(g, TG_OP_flash_attention) == 0 && g->n_nodes == before,
                "%s was replaced", lookalikes[_i].name);
  ck_assert_msg(strstr(report, "flash_attn: not matched at case.tg:") &&
                    strstr(report, lookalikes[_i].reason),
                "%s: the report does not say '%s':\n%s", lookalikes[_i].name, lookalikes[_i].reason,
                report);
  free(report);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* Scores that something else also uses stay: replacing the attention would
 * not remove them. */
START_TEST(test_shared_scores_not_matched) {
  tg_ctx *ctx = tu_ctx();
  const char *text = "param q: [1, 2, 6, 4] = normal(1)\nparam k: [1, 2, 6, 4] = normal(1)\n"
                     "param v: [1, 2, 6, 4] = normal(1)\n"
                     "s = where(iota([6, 6], 0) >= iota([6, 6], 1), (q @ transpose(k, 2, 3)) * 0.5, -inf)\n"
                     "e = exp(s - max(s, -1))\n"
                     "output loss = sum(e / sum(e, -1) @ v)\noutput probs = e\n";
  tg_graph *g = tu_compile(ctx, "case.tg", text, 0, NULL);
  char *report = run_pass(ctx, g);
  ck_assert_int_eq(count_op(g, TG_OP_flash_attention), 0);
  ck_assert_msg(strstr(report, "flash_attn: not matched at case.tg:6:") &&
                    strstr(report, "the exp node") && strstr(report, "is also used elsewhere"),
                "%s", report);
  free(report);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* ---- numerics: with and without the pass ---------------------------------------- */

static uint64_t rng_state;
static double uniform(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1;
}

static const tg_node *leaf_named(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if ((n->op == TG_OP_param || n->op == TG_OP_input) && !strcmp(n->name, name)) return n;
  }
  ck_abort_msg("no leaf %s", name);
  return NULL;
}

static const tg_node *output_named(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, name)) return g->outputs[i].node;
  ck_abort_msg("no output %s", name);
  return NULL;
}

/* Compiles text twice, runs flash_attn on one copy (expecting `want`
 * matches), differentiates both, gives both the same random leaves and
 * compares the loss and every gradient. */
static void compare_with_reference(const char *text, int n_defs, const char *const *defs,
                                   int64_t vocab, int want) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *ref = tu_compile(ctx, "case.tg", text, n_defs, defs);
  tg_graph *fa = tu_compile(ctx, "case.tg", text, n_defs, defs);
  free(run_pass(ctx, fa));
  ck_assert_int_eq(count_op(fa, TG_OP_flash_attention), want);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("failed: %s", tu_errors(ctx));
  tg_autodiff(ctx, ref);
  tg_autodiff(ctx, fa);
  ck_assert(tg_verify(ctx, fa));
  ck_assert_int_eq(count_op(fa, TG_OP_flash_attention_dq), want);
  tg_interp *ir = tg_interp_new(ref, TG_PREC_F64), *ifa = tg_interp_new(fa, TG_PREC_F64);
  rng_state = 2024;
  for (int i = 0; i < ref->n_nodes; i++) {
    const tg_node *n = ref->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_input) continue;
    double *a = tg_interp_leaf(ir, n), *b = tg_interp_leaf(ifa, leaf_named(fa, n->name));
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++)
      a[k] = b[k] = n->type.dtype == TG_I32 ? (double)((k * 7 + 3) % vocab) : 0.7 * uniform();
  }
  tg_interp_run(ctx, ir);
  tg_interp_run(ctx, ifa);
  for (int o = 0; o < ref->n_outputs; o++) {
    const tg_node *nr = ref->outputs[o].node, *nf = output_named(fa, ref->outputs[o].name);
    const double *a = tg_interp_value(ir, nr), *b = tg_interp_value(ifa, nf);
    double tol = o == 0 ? 1e-12 : 1e-10, biggest = 0;
    for (int64_t k = 0; k < tg_type_numel(&nr->type); k++) {
      ck_assert_msg(fabs(a[k] - b[k]) <= tol * fmax(1, fabs(a[k])), "%s[%lld]: %.17g vs %.17g",
                    ref->outputs[o].name, (long long)k, a[k], b[k]);
      biggest = fmax(biggest, fabs(a[k]));
    }
    ck_assert_msg(biggest > 0 || strstr(ref->outputs[o].name, "bias"), "%s is all zeros",
                  ref->outputs[o].name);
  }
  ck_assert_str_eq(ref->outputs[0].name, TG_OUTPUT_LOSS);
  tg_interp_free(ir);
  tg_interp_free(ifa);
  tg_graph_free(ref);
  tg_graph_free(fa);
  tu_ctx_free(ctx);
}

START_TEST(test_tiny_gpt2_agrees) {
  static const char *const t8[] = {"n_layer=2", "n_embd=16", "n_head=2", "vocab=50",
                                   "block_size=8", "B=2", "T=8"};
  static const char *const t20[] = {"n_layer=1", "n_embd=12", "n_head=3", "vocab=30",
                                    "block_size=20", "B=1", "T=20"};
  compare_with_reference(tu_read("models/gpt2.tg"), 7, t8, 50, 2);
  compare_with_reference(tu_read("models/gpt2.tg"), 7, t20, 30, 1);
}
END_TEST

/* Every accepted spelling computes the same as written, forward and back. */
START_TEST(test_spellings_agree) {
  compare_with_reference(attention_model(spellings[_i].body), 0, NULL, 1, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("flash_attn");
  TCase *tc = tcase_create("flash_attn");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpt2_all_layers);
  tcase_add_loop_test(tc, test_spellings_match, 0, (int)(sizeof spellings / sizeof *spellings));
  tcase_add_loop_test(tc, test_lookalikes_do_not_match, 0,
                      (int)(sizeof lookalikes / sizeof *lookalikes));
  tcase_add_test(tc, test_shared_scores_not_matched);
  tcase_add_test(tc, test_tiny_gpt2_agrees);
  tcase_add_loop_test(tc, test_spellings_agree, 0, (int)(sizeof spellings / sizeof *spellings));
  suite_add_tcase(s, tc);
  return tu_run(s);
}
