/* test_shard_params.c: ZeRO stage 3 placed in the graph
 * (passes/shard_params.c), on a tiny gpt2.tg at f32 and bf16, 2 and 3 ranks.
 *
 * - every weight leaf the model read (each parameter at f32; at bf16 the
 *   bf16 copies, and the parameters read as f32) is read by nothing now,
 *   and has a shard leaf "shard:NAME" of tg_shard_elements elements;
 * - every shard leaf feeds all_gathers of the run's group size, at most
 *   two (the forward's and the backward's), each before all of its
 *   readers in graph order; nothing of the backward reads the forward's
 *   gather (through views either: the tied wte's transpose), so the
 *   whole weight is not kept from the forward to the backward;
 * - every "grad:NAME" output is a reduce_scatter to [S] f32, S the
 *   parameter's shard, placed after the gradient it scatters;
 * - GPT-2's width at bf16 on 4 ranks lowers (C and CUDA);
 * - lowering gives the unread whole leaves no memory (no program leaf),
 *   and the collectives a step of their own;
 * - fusion is not broken up by the gathers placed between a matmul and its
 *   epilogue: the sharded step has as many matmul kernels, and at bf16 as
 *   many with a bias add folded, as the unsharded one;
 * - asking for the whole step with the optimizer is refused, by name. */
#include <stdio.h>
#include <string.h>

#include "frontend.h"
#include "lower.h"
#include "passes.h"
#include "shard.h"
#include "testutil.h"

static const char *const tiny[] = {"n_layer=2", "n_embd=16", "n_head=2", "vocab=50", "block_size=8", "B=2", "T=8"};
enum { N_TINY = sizeof tiny / sizeof tiny[0] };

static tg_graph *compile_with(tg_ctx *ctx, int n_defs, const char *const *defs, tg_precision_policy precision,
                              int ranks) {
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), n_defs, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.precision = precision, .grad = true, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT,
                         .shard_ranks = ranks};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL;
  return g;
}

static tg_graph *compile(tg_ctx *ctx, tg_precision_policy precision, int ranks) {
  return compile_with(ctx, N_TINY, tiny, precision, ranks);
}

static bool reads(const tg_graph *g, const tg_node *x) {
  for (int i = 0; i < g->n_nodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == x) return true;
  return false;
}

static int matmul_kernels(const tg_graph *g) {
  int n = 0;
  for (int k = 0; k < g->n_kernels; k++) n += g->kernels[k].kind == TG_KERNEL_MATMUL;
  return n;
}

static void check(tg_precision_policy precision, int ranks) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, precision, ranks);
  tg_graph *whole = compile(ctx, precision, 0);
  int shards = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *x = g->nodes[i];
    if (x->op != TG_OP_input || !x->name || strncmp(x->name, TG_SHARD_PREFIX, strlen(TG_SHARD_PREFIX))) continue;
    shards++;
    const char *wname = x->name + strlen(TG_SHARD_PREFIX);
    const tg_node *W = NULL;
    for (int j = 0; j < g->n_nodes && !W; j++)
      if (g->nodes[j] != x && g->nodes[j]->name && !strcmp(g->nodes[j]->name, wname)) W = g->nodes[j];
    ck_assert_msg(W, "%s shards no weight", x->name);
    ck_assert_msg(!reads(g, W), "%s is still read whole", wname);
    ck_assert_int_eq(x->type.rank, 1);
    ck_assert_int_eq(x->type.dim[0].size, tg_shard_elements(tg_type_numel(&W->type), ranks));
    ck_assert_int_eq(x->type.dtype, W->type.dtype);
    int gathers = 0;
    for (int j = 0; j < g->n_nodes; j++) {
      const tg_node *a = g->nodes[j];
      if (!a->nin || a->in[0] != x) continue;
      ck_assert_msg(a->op == TG_OP_all_gather && a->ranks == ranks, "%s is read by %s", x->name, tg_ops[a->op].name);
      gathers++;
      /* every reader of the gathered value (through its views) comes after
       * it, and is of the gather's phase */
      for (int r = 0; r < g->n_nodes; r++)
        for (int q = 0; q < g->nodes[r]->nin; q++)
          if (tg_kernel_base(g->nodes[r]->in[q]) == a && !tg_is_view(g->nodes[r])) {
            ck_assert_int_gt(r, j);
            ck_assert_msg((g->nodes[r]->phase == TG_PHASE_FORWARD) == (a->phase == TG_PHASE_FORWARD),
                          "%%%d (%s) reads the %s gather of %s", r, tg_ops[g->nodes[r]->op].name,
                          a->phase == TG_PHASE_FORWARD ? "forward's" : "backward's", wname);
          }
    }
    ck_assert_msg(gathers >= 1 && gathers <= 2, "%s: %d gathers", x->name, gathers);
  }
  ck_assert_int_gt(shards, 0);
  int grads = 0;
  for (int o = 0; o < g->n_outputs; o++) {
    const char *name = tg_gradient_param_name(g->outputs[o].name);
    if (!name) continue;
    grads++;
    const tg_node *rs = g->outputs[o].node, *P = tg_graph_leaf(g, TG_OP_param, name);
    ck_assert_ptr_nonnull(P);
    ck_assert_msg(rs->op == TG_OP_reduce_scatter && rs->ranks == ranks, "grad:%s is %s", name, tg_ops[rs->op].name);
    ck_assert_int_eq(rs->type.dtype, TG_F32);
    ck_assert_int_eq(tg_type_numel(&rs->type), tg_shard_elements(tg_type_numel(&P->type), ranks));
    ck_assert_int_gt(rs->id, tg_kernel_base(rs->in[0])->id);
  }
  ck_assert_int_eq(grads, 28);
  ck_assert_int_eq(matmul_kernels(g), matmul_kernels(whole));

  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("lowering failed: %s", tu_errors(ctx));
  tg_program *p = tg_lower_ex(ctx, g, TG_REMAT_ALL), *pw = tg_lower_ex(ctx, whole, TG_REMAT_ALL);
  ctx->bail = NULL;
  for (int i = 0; i < p->n_leaves; i++) ck_assert(reads(g, g->nodes[p->leaves[i]]));
  int collectives = 0;
  for (int k = 0; k < p->n_kernels; k++) collectives += tg_kernel_collective(p, k) != NULL;
  int want = 0;
  for (int i = 0; i < g->n_nodes; i++) want += tg_op_is_collective(g->nodes[i]->op);
  ck_assert_int_eq(collectives, want);
  /* the same cuBLASLt epilogues: a bias folded into as many GEMMs */
  int bias = 0, bias_whole = 0;
  for (int k = 0; k < p->n_kernels; k++)
    for (int s = 0; s < p->kernels[k].n_steps; s++)
      bias += p->kernels[k].steps[s].kind == TG_STEP_GEMM && p->kernels[k].steps[s].gemm.bias >= 0;
  for (int k = 0; k < pw->n_kernels; k++)
    for (int s = 0; s < pw->kernels[k].n_steps; s++)
      bias_whole += pw->kernels[k].steps[s].kind == TG_STEP_GEMM && pw->kernels[k].steps[s].gemm.bias >= 0;
  ck_assert_int_gt(bias_whole, 0);
  ck_assert_int_eq(bias, bias_whole);
  tu_ctx_free(ctx);
}

START_TEST(f32_on_2_ranks) { check(TG_PRECISION_F32, 2); }
END_TEST

START_TEST(bf16_on_3_ranks) { check(TG_PRECISION_BF16, 3); }
END_TEST

/* GPT-2's own width (768) at bf16 on 4 ranks: the biases' gradients are
 * bf16 sums widened, padded and reduce-scattered (a widening recomputed
 * in its reader once made the reduce-scatter's input vanish from memory);
 * both lowerings (C, and CUDA's with recomputation) take the graph. */
START_TEST(gpt2_width_lowers) {
  static const char *const defs[] = {"n_layer=2", "B=2", "T=64"};
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_with(ctx, 3, defs, TG_PRECISION_BF16, 4);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("lowering failed: %s", tu_errors(ctx));
  tg_program *c = tg_lower_ex(ctx, g, TG_REMAT_NONE), *cuda = tg_lower_ex(ctx, g, TG_REMAT_ALL);
  ctx->bail = NULL;
  ck_assert_int_gt(c->n_kernels, 0);
  ck_assert_int_eq(c->n_kernels, cuda->n_kernels);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(the_whole_step_is_refused) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), N_TINY, tiny);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) {
    ctx->bail = NULL;
    ck_assert_msg(strstr(tu_errors(ctx), "ZeRO stage 3's graphs have their optimizer apart"), "%s", tu_errors(ctx));
    tu_ctx_free(ctx);
    return;
  }
  tg_pipeline_opts po = {.grad = true, .step = true, .adamw = tg_adamw_defaults, .shard_ranks = 2};
  tg_run_pipeline(ctx, g, &po);
  ck_abort_msg("the whole step was sharded");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("shard_params");
  TCase *t = tcase_create("shard_params");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, f32_on_2_ranks);
  tcase_add_test(t, bf16_on_3_ranks);
  tcase_add_test(t, gpt2_width_lowers);
  tcase_add_test(t, the_whole_step_is_refused);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(suite()); }
