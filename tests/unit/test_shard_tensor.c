/* test_shard_tensor.c: tensor parallelism derived from the model's
 * annotations (passes/shard_tensor.c), on a tiny gpt2.tg.
 *
 * - at tp = 2, each rank's graph holds its parts of the split parameters
 *   (c_attn by columns in 3 groups, c_fc by columns, both c_proj by rows,
 *   wte by vocabulary rows) and the rest whole, on both ranks;
 *   tg_tensor_degree says 2;
 * - the forward has Megatron's collectives, all over the tensor axis: an
 *   all_reduce after the embedding's lookup and after each row-parallel
 *   product, two for the cross-entropy's sums and one all_max for its
 *   shift; the replicate markers are gone after the pipeline, and the
 *   backward has an all_reduce for each (the gradients of the layer norms'
 *   outputs, the final norm's and the shift);
 * - the pass is a no-op at tp = 1 (the graph is the unannotated model's,
 *   node for node) and on a graph it split already;
 * - the split lowers to C and CUDA, bf16 included;
 * - a split the degree does not divide, a reshape that would cut a rank's
 *   part and a tensor rank past the axis are refused, naming the place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "lower.h"
#include "passes.h"
#include "testutil.h"

static const char *const tiny[] = {"n_layer=2", "n_embd=16", "n_head=2", "vocab=50", "block_size=8", "B=2", "T=8"};
enum { N_TINY = sizeof tiny / sizeof tiny[0] };

static tg_graph *compile(tg_ctx *ctx, const char *tp, int rank, bool grad, tg_precision_policy precision) {
  const char *defs[N_TINY + 1];
  memcpy(defs, tiny, sizeof tiny);
  defs[N_TINY] = tp;
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), N_TINY + 1, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.precision = precision, .grad = grad, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT,
                         .tensor_rank = rank};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL;
  return g;
}

static int64_t dim_of(const tg_graph *g, const char *param, int axis) {
  const tg_node *p = tg_graph_leaf(g, TG_OP_param, param);
  ck_assert_msg(p, "no parameter %s", param);
  return p->type.dim[axis].size;
}

static int count(const tg_graph *g, tg_op op, tg_phase phase) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *x = g->nodes[i];
    if (x->op != op || x->phase != phase) continue;
    if (tg_op_is_collective(op)) ck_assert_msg(x->over_tensor && x->ranks == 2, "%%%d is not over the tensor axis", i);
    n++;
  }
  return n;
}

START_TEST(parts_and_collectives) {
  for (int rank = 0; rank < 2; rank++) {
    tg_ctx *ctx = tu_ctx();
    tg_graph *g = compile(ctx, "tp=2", rank, true, TG_PRECISION_F32);
    ck_assert_int_eq(tg_tensor_degree(g), 2);
    ck_assert_int_eq(dim_of(g, "h.0.attn.c_attn.weight", 1), 3 * 16 / 2);
    ck_assert_int_eq(dim_of(g, "h.1.attn.c_attn.bias", 0), 3 * 16 / 2);
    ck_assert_int_eq(dim_of(g, "h.0.attn.c_proj.weight", 0), 16 / 2);
    ck_assert_int_eq(dim_of(g, "h.0.attn.c_proj.bias", 0), 16);
    ck_assert_int_eq(dim_of(g, "h.1.mlp.c_fc.weight", 1), 4 * 16 / 2);
    ck_assert_int_eq(dim_of(g, "h.1.mlp.c_proj.weight", 0), 4 * 16 / 2);
    ck_assert_int_eq(dim_of(g, "wte.weight", 0), 64 / 2); /* 50 padded to 64 */
    ck_assert_int_eq(dim_of(g, "wpe.weight", 0), 8);
    ck_assert_int_eq(dim_of(g, "ln_f.weight", 0), 16);
    /* the embedding, 2 a layer, the cross-entropy's two sums */
    ck_assert_int_eq(count(g, TG_OP_all_reduce, TG_PHASE_FORWARD), 1 + 2 * 2 + 2);
    ck_assert_int_eq(count(g, TG_OP_all_max, TG_PHASE_FORWARD), 1);
    ck_assert_int_eq(count(g, TG_OP_replicate, TG_PHASE_FORWARD), 0);
    /* ln_1 and ln_2 of each layer, ln_f, the shift; and the all_max's tie count */
    ck_assert_int_eq(count(g, TG_OP_all_reduce, TG_PHASE_BACKWARD), 2 * 2 + 1 + 1 + 1);
    tu_ctx_free(ctx);
  }
}
END_TEST

/* gpt2.tg without its annotations: no "shard ...", no mesh section */
static char *unannotated(void) {
  const char *text = tu_read("models/gpt2.tg");
  char *s = strdup(text);
  char *tail = strstr(s, "# Tensor parallelism");
  ck_assert_ptr_nonnull(tail);
  *tail = 0;
  for (char *at; (at = strstr(s, " shard "));) {
    char *eol = strchr(at, '\n');
    memmove(at, eol, strlen(eol) + 1);
  }
  return s;
}

START_TEST(one_rank_is_the_model) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *a = compile(ctx, "tp=1", 0, true, TG_PRECISION_F32);
  char *plain = unannotated();
  tg_graph *b = tu_compile(ctx, "models/gpt2.tg", plain, N_TINY, tiny);
  free(plain);
  jmp_buf bail0;
  ctx->bail = &bail0;
  if (setjmp(bail0)) ck_abort_msg("%s", tu_errors(ctx));
  tg_pipeline_opts po = {.grad = true, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(ctx, b, &po);
  ctx->bail = NULL;
  ck_assert_int_eq(tg_tensor_degree(a), 1);
  ck_assert_int_eq(a->n_nodes, b->n_nodes);
  for (int i = 0; i < a->n_nodes; i++) {
    ck_assert_int_eq(a->nodes[i]->op, b->nodes[i]->op);
    ck_assert(tg_type_equal(&a->nodes[i]->type, &b->nodes[i]->type));
    ck_assert(!tg_op_is_collective(a->nodes[i]->op) && a->nodes[i]->op != TG_OP_replicate);
  }
  /* a graph split already is left as it is */
  tg_graph *g = compile(ctx, "tp=2", 0, false, TG_PRECISION_F32);
  int n = g->n_nodes;
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_shard_tensor(ctx, g, 1, NULL);
  ctx->bail = NULL;
  ck_assert_int_eq(g->n_nodes, n);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(lowers) {
  for (int p = 0; p < 2; p++) {
    tg_ctx *ctx = tu_ctx();
    tg_graph *g = compile(ctx, "tp=2", 1, true, p ? TG_PRECISION_BF16 : TG_PRECISION_F32);
    jmp_buf bail;
    ctx->bail = &bail;
    if (setjmp(bail)) ck_abort_msg("lowering failed: %s", tu_errors(ctx));
    ck_assert_ptr_nonnull(tg_lower(ctx, g));
    ctx->bail = NULL;
    tu_ctx_free(ctx);
  }
}
END_TEST

/* The error of compiling `text` split 2 ways at rank `rank`. */
static void refused(const char *text, int rank, const char *want) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tu_compile(ctx, "t.tg", text, 0, NULL);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) {
    ctx->bail = NULL;
    ck_assert_msg(strstr(tu_errors(ctx), want), "wanted '%s', got: %s", want, tu_errors(ctx));
    tu_ctx_free(ctx);
    return;
  }
  tg_pipeline_opts po = {.tensor_rank = rank};
  tg_run_pipeline(ctx, g, &po);
  ck_abort_msg("not refused: %s", want);
}

START_TEST(bad_splits) {
  refused("config { tp = 2 }\nmesh tensor = tp\ninput x: f32[4, 6]\nparam w: [6, 5] = normal(0.02) shard columns\n"
          "output y = sum(x @ w, -1)\n",
          0, "t.tg:4:7: error: 'w' is split by columns over the mesh's tensor axis of 2 ranks, but its last axis of 5");
  refused("config { tp = 2 }\nmesh tensor = tp\ninput x: f32[4, 6]\nparam w: [6, 6] = normal(0.02) shard columns\n"
          "output y = sum(reshape(x @ w, [4, 3, 2]), -1)\n",
          0, "this reshape of");
  refused("config { tp = 2 }\nmesh tensor = tp\ninput x: f32[4, 6]\nparam w: [6, 6] = normal(0.02) shard columns\n"
          "output y = sum(x @ w, -1)\n",
          2, "tensor rank 2 is not among the mesh's 2 tensor ranks");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("shard_tensor");
  TCase *t = tcase_create("shard_tensor");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, parts_and_collectives);
  tcase_add_test(t, one_rank_is_the_model);
  tcase_add_test(t, lowers);
  tcase_add_test(t, bad_splits);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(suite()); }
