/* test_precision.c: the mixed-precision policy (passes/precision.c) on
 * GPT-2, rule by rule, and what the later passes keep of it.
 *
 * Forward graph, after tg_apply_precision(bf16): every matmul multiplies
 * bf16 operands into a bf16 result; flash attention takes bf16 q, k, v and
 * keeps its row statistics f32; every reduction (layernorm's sums,
 * softmax's max and sum, the loss) reads and gives f32; parameters stay
 * f32, and each one a bf16 op reads is read through one bf16 copy (a
 * state leaf "bf16.NAME"); the residual stream is bf16 from the embedding on; the
 * loss is f32.  With f32 the graph is untouched, and applying bf16 twice
 * changes nothing.
 *
 * Training step: every parameter's gradient and the AdamW moments are f32;
 * the weight copies are state leaves "bf16.NAME" that the step's AdamW
 * writes; no backward op reads a forward f32 widening (narrow_saved); no
 * kernel stores a widening (the fuser leaves it to the kernel that reads
 * it); and `--report precision` names each value's rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "testutil.h"

static const char *const tiny[] = {"n_layer=2", "n_embd=32", "n_head=2", "vocab=50", "block_size=16", "B=2", "T=16"};
enum { N_TINY = sizeof tiny / sizeof tiny[0] };

static tg_graph *forward(tg_ctx *ctx) { return tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), N_TINY, tiny); }

/* The pipeline with the policy; grad adds autodiff, step AdamW and the
 * kernels. */
static tg_graph *compiled(tg_ctx *ctx, tg_precision_policy p, bool grad, bool step, FILE *report) {
  tg_graph *g = forward(ctx);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.precision = p, .grad = grad, .step = step, .adamw = tg_adamw_defaults,
                         .pad_multiple = TG_PAD_MULTIPLE_DEFAULT, .report_name = report ? TG_REPORT_PRECISION : NULL,
                         .report = report};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL;
  return g;
}

START_TEST(test_forward_rules) {
  tg_ctx *c = tu_ctx();
  tg_graph *g = compiled(c, TG_PRECISION_BF16, false, false, NULL);
  int matmuls = 0, reductions = 0, copies = 0, flash = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op == TG_OP_matmul) {
      matmuls++;
      ck_assert_msg(n->type.dtype == TG_BF16 && n->in[0]->type.dtype == TG_BF16 && n->in[1]->type.dtype == TG_BF16,
                    "matmul %%%d is not bf16 @ bf16 -> bf16", n->id);
    }
    if (n->op == TG_OP_sum || n->op == TG_OP_max) {
      reductions++;
      ck_assert_msg(n->type.dtype == TG_F32 && n->in[0]->type.dtype == TG_F32, "reduction %%%d is not f32", n->id);
    }
    if (n->op == TG_OP_flash_attention_lse) ck_assert(n->type.dtype == TG_F32);
    if (n->op == TG_OP_flash_attention) {
      flash++;
      for (int k = 0; k < 3; k++) ck_assert(n->in[k]->type.dtype == TG_BF16);
      ck_assert(n->type.dtype == TG_BF16);
    }
    if (n->op == TG_OP_param) {
      ck_assert_msg(n->type.dtype == TG_F32, "parameter %s is not f32", n->name);
      int casts = 0;
      for (int j = 0; j < g->n_nodes; j++) {
        const tg_node *r = g->nodes[j];
        for (int k = 0; k < r->nin; k++)
          if (r->in[k] == n && r->op == TG_OP_cast) casts++;
      }
      ck_assert_msg(casts <= 1, "parameter %s is cast %d times", n->name, casts);
    }
    /* weight copies: hoisted by the weight_copies pass into state leaves */
    if (n->op == TG_OP_state && !strncmp(n->name, TG_BF16_COPY_PREFIX, strlen(TG_BF16_COPY_PREFIX))) {
      copies++;
      ck_assert(n->type.dtype == TG_BF16);
      ck_assert_ptr_nonnull(tg_graph_leaf(g, TG_OP_param, n->name + strlen(TG_BF16_COPY_PREFIX)));
    }
    /* the residual stream: every add of two full [B, T, C] activations is bf16 */
    if (n->op == TG_OP_add && n->type.rank == 3 && n->type.dim[2].size == 32 && n->in[0]->type.rank == 3 &&
        n->in[1]->type.rank == 3 && n->in[0]->type.dim[0].size == 2 && n->in[1]->type.dim[0].size == 2)
      ck_assert_msg(n->type.dtype == TG_BF16, "residual add %%%d is %s", n->id, tg_dtype_name(n->type.dtype));
  }
  ck_assert_int_eq(matmuls, 2 * 4 + 1); /* qkv, proj, fc, proj per layer; the head */
  ck_assert_int_eq(flash, 2);
  ck_assert_int_gt(reductions, 10);
  ck_assert_int_eq(copies, 2 * 8 + 1); /* 4 weights and 4 biases a layer feed bf16 ops; the tied head */
  ck_assert(tg_graph_output(g, TG_OUTPUT_LOSS)->type.dtype == TG_F32);
  ck_assert(tg_verify(c, g));
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_f32_leaves_the_graph_alone) {
  tg_ctx *c = tu_ctx();
  tg_graph *a = forward(c), *b = compiled(c, TG_PRECISION_F32, false, false, NULL);
  char *ta = tu_print_ir(a), *tb = tu_print_ir(b);
  /* pad_vocab and flash_attn still run: compare with both and no policy */
  tg_graph *p = forward(c);
  tg_pipeline_opts po = {.pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  jmp_buf bail;
  c->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(c));
  tg_run_pipeline(c, p, &po);
  c->bail = NULL;
  char *tp = tu_print_ir(p);
  ck_assert_str_eq(tb, tp);
  ck_assert_str_ne(ta, tb);
  for (int i = 0; i < b->n_nodes; i++) ck_assert(b->nodes[i]->type.dtype != TG_BF16 || tg_op_is_flash_attention(b->nodes[i]->op));
  free(ta), free(tb), free(tp);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_applying_twice_changes_nothing) {
  tg_ctx *c = tu_ctx();
  tg_graph *g = compiled(c, TG_PRECISION_BF16, false, false, NULL);
  char *once = tu_print_ir(g);
  tg_apply_precision(c, g, TG_PRECISION_BF16, NULL);
  char *twice = tu_print_ir(g);
  ck_assert_str_eq(once, twice);
  free(once), free(twice);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_training_step) {
  tg_ctx *c = tu_ctx();
  tg_graph *g = compiled(c, TG_PRECISION_BF16, true, true, NULL);
  int params = 0, copies = 0, copy_writes = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op == TG_OP_param) {
      params++;
      const tg_node *grad = tg_gradient_of(g, n);
      ck_assert_ptr_nonnull(grad);
      ck_assert_msg(grad->type.dtype == TG_F32, "the gradient of %s is %s", n->name, tg_dtype_name(grad->type.dtype));
    }
    if (n->op == TG_OP_state) {
      bool copy = !strncmp(n->name, TG_BF16_COPY_PREFIX, strlen(TG_BF16_COPY_PREFIX));
      copies += copy;
      ck_assert_msg(n->type.dtype == (copy ? TG_BF16 : TG_F32), "state %s", n->name);
    }
    if (n->op == TG_OP_assign && n->in[0]->op == TG_OP_state && n->in[0]->type.dtype == TG_BF16) {
      copy_writes++;
      ck_assert_int_eq(n->phase, TG_PHASE_OPTIMIZER);
    }
    /* narrow_saved: the backward widens what it reads itself */
    if (n->phase != TG_PHASE_FORWARD)
      for (int k = 0; k < n->nin; k++) {
        const tg_node *w = n->in[k];
        ck_assert_msg(!(w->phase == TG_PHASE_FORWARD && w->op == TG_OP_cast && w->type.dtype == TG_F32 &&
                        w->in[0]->type.dtype == TG_BF16),
                      "backward %%%d reads the forward widening %%%d", n->id, w->id);
      }
  }
  ck_assert_int_gt(params, 20);
  ck_assert_int_eq(copies, 2 * 8 + 1);
  ck_assert_int_eq(copy_writes, copies);
  /* no kernel stores a widening: the bf16 value crosses, its reader widens;
   * except for a reader that reads memory itself (the embedding's
   * scatter-add, which adds f32 rows) and a parameter's gradient, which the
   * step outputs in f32 */
  int stored_widenings = 0;
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    for (int o = 0; o < K->n_outputs; o++) {
      const tg_node *n = g->nodes[K->outputs[o]];
      if (!(n->op == TG_OP_cast && n->type.dtype == TG_F32 && n->in[0]->type.dtype == TG_BF16)) continue;
      bool needed = false; /* by a scatter-add, or as a gradient the step outputs */
      for (int j = 0; j < g->n_nodes; j++)
        for (int x = 0; x < g->nodes[j]->nin; x++)
          needed |= tg_kernel_base(g->nodes[j]->in[x]) == n && g->nodes[j]->op == TG_OP_scatter_add;
      for (int j = 0; j < g->n_outputs; j++) needed |= tg_kernel_base(g->outputs[j].node) == n;
      if (needed) continue;
      stored_widenings++;
      ck_assert_msg(false, "kernel k%d stores the widening %%%d", k, n->id);
    }
  }
  ck_assert_int_eq(stored_widenings, 0);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_report) {
  tg_ctx *c = tu_ctx();
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  tg_graph *g = compiled(c, TG_PRECISION_BF16, false, false, f);
  fclose(f);
  /* one line per value, then the rules with their counts */
  int lines = 0;
  for (const char *p = text; (p = strstr(p, "precision: %")); p++) lines++;
  ck_assert_int_eq(lines, g->n_nodes);
  ck_assert_ptr_nonnull(strstr(text, "matmul     bf16["));
  ck_assert_ptr_nonnull(strstr(text, "weight copy"));
  ck_assert_ptr_nonnull(strstr(text, "precision:   reduction"));
  ck_assert_ptr_nonnull(strstr(text, "parameters stay f32"));
  free(text);
  /* f32 says so */
  text = NULL;
  f = open_memstream(&text, &len);
  compiled(c, TG_PRECISION_F32, false, false, f);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(text, "precision: f32: every value keeps its declared dtype"));
  free(text);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_policy_names) {
  tg_precision_policy p;
  ck_assert(tg_precision_parse("bf16", &p) && p == TG_PRECISION_BF16);
  ck_assert(tg_precision_parse("f32", &p) && p == TG_PRECISION_F32);
  ck_assert(!tg_precision_parse("fp16", &p));
  ck_assert(!tg_precision_parse("", &p));
  ck_assert_str_eq(tg_precision_name(TG_PRECISION_BF16), "bf16");
}
END_TEST

int main(void) {
  Suite *s = suite_create("precision");
  TCase *t = tcase_create("core");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, test_forward_rules);
  tcase_add_test(t, test_f32_leaves_the_graph_alone);
  tcase_add_test(t, test_applying_twice_changes_nothing);
  tcase_add_test(t, test_training_step);
  tcase_add_test(t, test_report);
  tcase_add_test(t, test_policy_names);
  suite_add_tcase(s, t);
  return tu_run(s);
}
