/* test_zero_plan.c: the per-rank memory of ZeRO's stages (passes/zero_plan.c).
 *
 * On a tiny GPT-2 training step, at bf16 and f32:
 *   - stage 0 is today's totals: the parameters, their bf16 copies and
 *     AdamW's moments as the graph's leaves have them, every other leaf
 *     once (together memplan's "parameters and state"), gradients as the
 *     parameters; activations the part of memplan's plan that dies within
 *     the step, no more than its whole arena, and the rest (the buffers
 *     that outlive the step) reported apart;
 *   - one rank is stage 0, whatever stage is asked for, and stage 0's
 *     bytes do not depend on the ranks;
 *   - on N ranks, stage 1 cuts the optimizer state to 1/N of stage 0's
 *     within the shards' padding (under TG_ZERO_SHARD_ALIGN elements per
 *     parameter per rank), stage 2 the gradients too, stage 3 the
 *     parameters too, besides the two layers it keeps gathered;
 *   - what is not sharded at a stage stays whole;
 *   - with more ranks than elements in any parameter, every shard is one
 *     TG_ZERO_SHARD_ALIGN block: the padding is counted, not approximated;
 *   - a stage outside 0..3, no ranks, or a graph without the optimizer
 *     are refused with why.
 * And the collectives of a step (passes/collectives.c), on the GPT-2 that
 * tests/cli/run_zero.sh reports on, at 2 and 8 ranks:
 *   - stages 1 and 2 send exactly stage 0's bytes, stage 3 1.4 to 1.6
 *     times as many;
 *   - stage 0's all-reduces are 2(N - 1) shards of every parameter, counted
 *     here from the parameters, not the buckets;
 *   - every bucket has one collective, at its point; stages 1 and 2 gather
 *     every parameter after the last kernel; stage 3 gathers every
 *     parameter for the forward and less for the backward (no biases);
 *   - at bf16, stages 1 and 2 gather what the forward reads (bf16 copies,
 *     f32 weights), as stage 3 does for the forward;
 *   - collectives come in step order, each within the step;
 *   - one rank sends nothing; a bad stage, no ranks, or a graph without
 *     buckets are refused with why. */
#include <stdio.h>
#include <string.h>

#include "frontend.h"
#include "passes.h"
#include "testutil.h"

static const char *const tiny[] = {"n_layer=2", "n_embd=16", "n_head=2", "vocab=50", "block_size=8", "B=2", "T=8"};
enum { N_TINY = sizeof tiny / sizeof tiny[0] };

/* gpt2.tg with n_defs config overrides through the pipeline: the training
 * step (step) or the gradient alone. */
static tg_graph *compile_with(tg_ctx *ctx, int n_defs, const char *const *defs, tg_precision_policy precision,
                              bool step) {
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), n_defs, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.precision = precision, .grad = true, .step = step, .adamw = tg_adamw_defaults,
                         .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL;
  return g;
}

/* The tiny gpt2.tg. */
static tg_graph *compile(tg_ctx *ctx, tg_precision_policy precision, bool step) {
  return compile_with(ctx, N_TINY, tiny, precision, step);
}

static tg_zero_plan plan(tg_ctx *ctx, tg_graph *g, int ranks, int stage) {
  tg_zero_plan p;
  char why[256] = "";
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the plan bailed: %s", tu_errors(ctx));
  ck_assert_msg(tg_zero_plan_make(ctx, g, ranks, stage, &p, why, sizeof why), "refused: %s", why);
  ctx->bail = NULL;
  ck_assert_int_eq(p.peak_bytes, p.master_bytes + p.copy_bytes + p.gathered_bytes + p.grad_bytes + p.optimizer_bytes +
                                     p.other_bytes + p.activation_bytes);
  return p;
}

static int64_t bytes_of(const tg_node *n) { return tg_type_numel(&n->type) * tg_dtype_size(n->type.dtype); }

/* The graph's own sums: parameters, and state leaves by name prefix. */
static int64_t param_bytes(const tg_graph *g) {
  int64_t b = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param) b += bytes_of(g->nodes[i]);
  return b;
}

static int64_t state_bytes(const tg_graph *g, const char *prefix) {
  int64_t b = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op == TG_OP_state && n->name && !strncmp(n->name, prefix, strlen(prefix))) b += bytes_of(n);
  }
  return b;
}

static bool same_bytes(const tg_zero_plan *a, const tg_zero_plan *b) {
  return a->master_bytes == b->master_bytes && a->copy_bytes == b->copy_bytes && a->gathered_bytes == b->gathered_bytes &&
         a->grad_bytes == b->grad_bytes && a->optimizer_bytes == b->optimizer_bytes && a->other_bytes == b->other_bytes &&
         a->activation_bytes == b->activation_bytes && a->peak_bytes == b->peak_bytes;
}

/* per_rank is whole / ranks within the padding of n_params shards of
 * elem_bytes-byte elements: at least a fair share, less than one padding
 * block per parameter more. */
static void assert_share(const char *what, int64_t per_rank, int64_t whole, int ranks, int n_params, int elem_bytes) {
  int64_t padding = per_rank * ranks - whole;
  ck_assert_msg(padding >= 0, "%s: %lld bytes a rank x %d ranks is less than the whole %lld", what, (long long)per_rank,
                ranks, (long long)whole);
  ck_assert_msg(padding < (int64_t)n_params * ranks * TG_ZERO_SHARD_ALIGN * elem_bytes,
                "%s: %lld bytes of padding on %d ranks is more than the shards' alignment allows", what, (long long)padding,
                ranks);
  ck_assert_int_lt(per_rank, whole);
}

START_TEST(test_stage0_is_todays_totals) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, TG_PRECISION_BF16, true);
  tg_zero_plan p = plan(ctx, g, 8, 0);
  ck_assert_int_eq(p.stage, 0);
  ck_assert_int_eq(p.master_bytes, param_bytes(g));
  ck_assert_int_eq(p.grad_bytes, param_bytes(g)); /* f32 accumulators, as the training loop keeps them */
  ck_assert_int_eq(p.optimizer_bytes, state_bytes(g, TG_ADAM_M_PREFIX) + state_bytes(g, TG_ADAM_V_PREFIX));
  ck_assert_int_eq(p.optimizer_bytes, 2 * param_bytes(g));
  ck_assert_int_eq(p.copy_bytes, state_bytes(g, TG_BF16_COPY_PREFIX));
  ck_assert_int_gt(p.copy_bytes, 0);
  ck_assert_int_eq(p.gathered_bytes, 0);
  ck_assert_int_eq(p.master_bytes + p.copy_bytes + p.optimizer_bytes + p.other_bytes, g->memplan->persistent_bytes);
  const tg_mem_plan *mp = tg_memplan_placed(ctx, g);
  ck_assert_int_eq(p.step_arena_bytes, mp->arena_bytes);
  ck_assert_int_gt(p.activation_bytes, 0);
  ck_assert_int_le(p.activation_bytes, mp->arena_bytes);
  int64_t outlive = 0;
  for (int b = 0; b < mp->n_buffers; b++)
    if (mp->buffers[b].last == g->n_kernels) outlive += mp->buffers[b].bytes;
  ck_assert_int_eq(p.step_outputs_bytes, outlive);
  ck_assert_int_ge(p.step_outputs_bytes, p.grad_bytes); /* the step's gradients and new values */
  /* the same on any number of ranks, and one rank is stage 0 at any stage */
  tg_zero_plan one = plan(ctx, g, 1, 0);
  ck_assert(same_bytes(&one, &p));
  for (int s = 1; s <= TG_ZERO_MAX_STAGE; s++) {
    tg_zero_plan q = plan(ctx, g, 1, s);
    ck_assert_int_eq(q.stage, 0);
    ck_assert_msg(same_bytes(&q, &one), "stage %d on one rank differs from stage 0", s);
  }
  tu_ctx_free(ctx);
}
END_TEST

/* Each stage on ranks ranks against stage 0, at precision prec. */
static void check_stages(tg_precision_policy prec, int ranks) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, prec, true);
  tg_zero_plan z0 = plan(ctx, g, ranks, 0), z1 = plan(ctx, g, ranks, 1), z2 = plan(ctx, g, ranks, 2),
               z3 = plan(ctx, g, ranks, 3);
  int n = z0.n_params;
  ck_assert_int_gt(n, 0);
  /* stage 1: the moments */
  assert_share("stage 1 optimizer state", z1.optimizer_bytes, z0.optimizer_bytes, ranks, n, 8);
  ck_assert_int_eq(z1.grad_bytes, z0.grad_bytes);
  ck_assert_int_eq(z1.copy_bytes, z0.copy_bytes);
  if (prec == TG_PRECISION_F32) ck_assert_int_eq(z1.master_bytes, z0.master_bytes); /* the forward's weights */
  else ck_assert_int_lt(z1.master_bytes, z0.master_bytes);                           /* the optimizer's alone */
  /* stage 2: and the gradients */
  ck_assert_int_eq(z2.optimizer_bytes, z1.optimizer_bytes);
  assert_share("stage 2 gradients", z2.grad_bytes, z0.grad_bytes, ranks, n, 4);
  ck_assert_int_eq(z2.master_bytes, z1.master_bytes);
  ck_assert_int_eq(z2.copy_bytes, z0.copy_bytes);
  /* stage 3: and the parameters, but for the two layers gathered */
  ck_assert_int_eq(z3.optimizer_bytes, z1.optimizer_bytes);
  ck_assert_int_eq(z3.grad_bytes, z2.grad_bytes);
  assert_share("stage 3 f32 parameters", z3.master_bytes, z0.master_bytes, ranks, n, 4);
  if (prec == TG_PRECISION_BF16) assert_share("stage 3 bf16 copies", z3.copy_bytes, z0.copy_bytes, ranks, n, 2);
  else ck_assert_int_eq(z3.copy_bytes, 0);
  ck_assert_ptr_nonnull(z3.gathered[0]);
  ck_assert_ptr_nonnull(z3.gathered[1]);
  ck_assert_str_ne(z3.gathered[0], z3.gathered[1]);
  ck_assert_int_gt(z3.gathered_bytes, 0);
  /* the forward's weights of two layers out of two blocks and wte, wpe, ln_f */
  int64_t forward_weights = prec == TG_PRECISION_BF16 ? z0.copy_bytes + (z0.master_bytes - 2 * z0.copy_bytes)
                                                       : z0.master_bytes;
  ck_assert_int_lt(z3.gathered_bytes, forward_weights);
  /* the rest is the same at every stage */
  const tg_zero_plan *zs[] = {&z1, &z2, &z3};
  for (int s = 0; s < 3; s++) {
    ck_assert_int_eq(zs[s]->activation_bytes, z0.activation_bytes);
    ck_assert_int_eq(zs[s]->other_bytes, z0.other_bytes);
    ck_assert_int_lt(zs[s]->peak_bytes, z0.peak_bytes);
  }
  ck_assert_int_lt(z2.peak_bytes, z1.peak_bytes);
  tu_ctx_free(ctx);
}

START_TEST(test_stages_bf16) {
  check_stages(TG_PRECISION_BF16, 2);
  check_stages(TG_PRECISION_BF16, 3);
  check_stages(TG_PRECISION_BF16, 8);
}
END_TEST

START_TEST(test_stages_f32) { check_stages(TG_PRECISION_F32, 8); }
END_TEST

/* More ranks than any parameter has elements: every rank holds exactly one
 * padded block of every parameter. */
START_TEST(test_padding_counted) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile(ctx, TG_PRECISION_BF16, true);
  int64_t largest = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param && tg_type_numel(&g->nodes[i]->type) > largest)
      largest = tg_type_numel(&g->nodes[i]->type);
  int ranks = (int)largest + 1;
  tg_zero_plan z3 = plan(ctx, g, ranks, 3);
  int64_t block = (int64_t)z3.n_params * TG_ZERO_SHARD_ALIGN;
  ck_assert_int_eq(z3.master_bytes, block * 4);
  ck_assert_int_eq(z3.grad_bytes, block * 4);
  ck_assert_int_eq(z3.optimizer_bytes, block * 8);
  ck_assert_int_eq(z3.copy_bytes % (TG_ZERO_SHARD_ALIGN * 2), 0);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_refused) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *step = compile(ctx, TG_PRECISION_BF16, true);
  tg_zero_plan p;
  char why[256] = "";
  ck_assert(!tg_zero_plan_make(ctx, step, 8, 4, &p, why, sizeof why));
  ck_assert_msg(strstr(why, "stage 4"), "%s", why);
  ck_assert(!tg_zero_plan_make(ctx, step, 8, -1, &p, why, sizeof why));
  ck_assert(!tg_zero_plan_make(ctx, step, 0, 1, &p, why, sizeof why));
  ck_assert_msg(strstr(why, "ranks"), "%s", why);
  tg_graph *grad_only = compile(ctx, TG_PRECISION_BF16, false);
  why[0] = 0;
  ck_assert(!tg_zero_plan_make(ctx, grad_only, 8, 1, &p, why, sizeof why));
  ck_assert_msg(strstr(why, "AdamW moments"), "%s", why);
  /* the collectives ask the same of the stage and the ranks, and buckets */
  tg_collective_plan c;
  ck_assert(!tg_collectives_plan(step, 8, 4, &c, why, sizeof why));
  ck_assert_msg(strstr(why, "stage 4"), "%s", why);
  ck_assert(!tg_collectives_plan(step, 0, 1, &c, why, sizeof why));
  ck_assert_msg(strstr(why, "ranks"), "%s", why);
  tg_graph *forward = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), N_TINY, tiny);
  ck_assert(!tg_collectives_plan(forward, 8, 1, &c, why, sizeof why));
  ck_assert_msg(strstr(why, "buckets"), "%s", why);
  tu_ctx_free(ctx);
}
END_TEST

/* The GPT-2 tests/cli/run_zero.sh and docs/parallel.md's small example
 * use: f32, tgc's default for reports. */
static const char *const small[] = {"n_layer=2", "n_embd=64", "n_head=4", "B=2", "T=64"};

static tg_collective_plan collectives(const tg_graph *g, int ranks, int stage) {
  tg_collective_plan p;
  char why[256] = "";
  ck_assert_msg(tg_collectives_plan(g, ranks, stage, &p, why, sizeof why), "refused: %s", why);
  ck_assert_int_eq(p.ranks, ranks);
  /* step order, each collective within the step, and the total its sum */
  int64_t sum = 0;
  for (int i = 0; i < p.n_collectives; i++) {
    const tg_collective *c = &p.collectives[i];
    if (i) ck_assert_int_le(p.collectives[i - 1].start, c->start);
    ck_assert_int_ge(c->start, 0);
    ck_assert_int_le(c->start, c->needed);
    ck_assert_int_le(c->needed, g->n_kernels);
    ck_assert_int_gt(c->bytes_in, 0);
    if (c->what != TG_COLLECTIVE_NORM) sum += c->bytes_sent;
  }
  ck_assert_int_eq(p.bytes_sent, sum);
  return p;
}

/* How many collectives of p are of kind `what` (and of bucket b, for
 * buckets; -1: any). */
static int count(const tg_collective_plan *p, tg_collective_what what, int b) {
  int n = 0;
  for (int i = 0; i < p->n_collectives; i++)
    n += p->collectives[i].what == what && (b < 0 || p->collectives[i].bucket == b);
  return n;
}

static int64_t sent(const tg_collective_plan *p, tg_collective_what what) {
  int64_t b = 0;
  for (int i = 0; i < p->n_collectives; i++)
    if (p->collectives[i].what == what) b += p->collectives[i].bytes_sent;
  return b;
}

static int64_t bytes_in(const tg_collective_plan *p, tg_collective_what what) {
  int64_t b = 0;
  for (int i = 0; i < p->n_collectives; i++)
    if (p->collectives[i].what == what) b += p->collectives[i].bytes_in;
  return b;
}

static void check_collectives(const tg_graph *g, int ranks) {
  tg_collective_plan p[TG_ZERO_MAX_STAGE + 1];
  for (int s = 0; s <= TG_ZERO_MAX_STAGE; s++) {
    p[s] = collectives(g, ranks, s);
    ck_assert_int_eq(p[s].stage, s);
  }
  /* stage 0 from the parameters: an all-reduce is a reduce-scatter and an
   * all-gather, 2(N - 1) shards of each gradient, a parameter's size */
  int64_t shards = 0, params = 0;
  int n_params = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param) {
      shards += tg_shard_elements(tg_type_numel(&g->nodes[i]->type), ranks) * 4;
      params += bytes_of(g->nodes[i]);
      n_params++;
    }
  ck_assert_int_eq(p[0].bytes_sent, 2 * (int64_t)(ranks - 1) * shards);
  /* ZeRO's claim: a reduce-scatter and an all-gather are an all-reduce cut
   * in two, so stages 1 and 2 move exactly what DDP moves */
  ck_assert_int_eq(p[1].bytes_sent, p[0].bytes_sent);
  ck_assert_int_eq(p[2].bytes_sent, p[0].bytes_sent);
  /* stage 3 gathers the weights twice (forward, backward) besides the
   * gradients' reduce-scatter: 3 passes over the parameters where DDP
   * makes 2 (the ZeRO paper, section 7: 1.5x); a little less here, as the
   * backward reads no bias and no position table */
  double ratio = (double)p[3].bytes_sent / (double)p[0].bytes_sent;
  ck_assert_msg(ratio >= 1.4 && ratio <= 1.6, "stage 3 sends %.3f times stage 0's bytes on %d ranks", ratio, ranks);
  ck_assert_msg(ratio < 1.5, "the backward gathers less than the forward: %.4f", ratio);
  /* every bucket once, right after the kernel that closes it */
  const tg_allreduce_plan *ar = g->allreduce;
  ck_assert_int_gt(ar->n_buckets, 1);
  for (int s = 0; s <= TG_ZERO_MAX_STAGE; s++) {
    ck_assert_int_eq(count(&p[s], TG_COLLECTIVE_BUCKET, -1), ar->n_buckets);
    for (int b = 0; b < ar->n_buckets; b++) ck_assert_int_eq(count(&p[s], TG_COLLECTIVE_BUCKET, b), 1);
    for (int i = 0; i < p[s].n_collectives; i++) {
      const tg_collective *c = &p[s].collectives[i];
      if (c->what != TG_COLLECTIVE_BUCKET) continue;
      ck_assert_int_eq(c->kind, s == 0 ? TG_ALL_REDUCE : TG_REDUCE_SCATTER);
      ck_assert_int_eq(c->start, ar->buckets[c->bucket].after_kernel + 1);
      ck_assert_int_eq(c->bytes_in, ar->buckets[c->bucket].bytes);
    }
    ck_assert_int_eq(count(&p[s], TG_COLLECTIVE_NORM, -1), s > 0); /* sharded gradients' norm */
  }
  ck_assert_int_eq(sent(&p[1], TG_COLLECTIVE_BUCKET), sent(&p[0], TG_COLLECTIVE_BUCKET) / 2);
  /* stages 1 and 2: every parameter gathered once the step is done */
  for (int s = 1; s <= 2; s++) {
    ck_assert_int_eq(count(&p[s], TG_COLLECTIVE_PARAMETERS, -1), 1);
    const tg_collective *last = &p[s].collectives[p[s].n_collectives - 1];
    ck_assert_int_eq(last->what, TG_COLLECTIVE_PARAMETERS);
    ck_assert_int_eq(last->start, g->n_kernels);
    ck_assert_int_eq(last->n_tensors, n_params);
    ck_assert_int_eq(last->bytes_in, params);
    ck_assert_int_eq(last->bytes_sent, (int64_t)(ranks - 1) * shards);
  }
  /* stage 3: no gather after the step; each layer for the forward, whole
   * (the forward reads every parameter, f32 here), and less for the
   * backward */
  ck_assert_int_eq(count(&p[3], TG_COLLECTIVE_PARAMETERS, -1), 0);
  ck_assert_int_eq(bytes_in(&p[3], TG_COLLECTIVE_LAYER_FORWARD), params);
  ck_assert_int_eq(sent(&p[3], TG_COLLECTIVE_LAYER_FORWARD), (int64_t)(ranks - 1) * shards);
  ck_assert_int_gt(sent(&p[3], TG_COLLECTIVE_LAYER_BACKWARD), 0);
  ck_assert_int_lt(bytes_in(&p[3], TG_COLLECTIVE_LAYER_BACKWARD), params);
  /* a layer per block, and wte, wpe and ln_f's two parameters one each */
  double n_layer = 0;
  ck_assert(tg_graph_get_config(g, "n_layer", &n_layer));
  ck_assert_int_eq(count(&p[3], TG_COLLECTIVE_LAYER_FORWARD, -1), (int)n_layer + 4);
  /* h.1's forward gather is in flight while h.0 computes */
  for (int i = 0; i < p[3].n_collectives; i++) {
    const tg_collective *c = &p[3].collectives[i];
    if (c->what == TG_COLLECTIVE_LAYER_FORWARD && !strcmp(c->layer, "h.1")) ck_assert_int_gt(c->needed, c->start);
  }
}

START_TEST(test_collectives) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_with(ctx, sizeof small / sizeof small[0], small, TG_PRECISION_F32, true);
  check_collectives(g, 2);
  check_collectives(g, 8);
  /* one rank: stage 0 whatever is asked, and nothing sent */
  tg_collective_plan one = collectives(g, 1, 3);
  ck_assert_int_eq(one.stage, 0);
  ck_assert_int_eq(one.bytes_sent, 0);
  /* bf16: the gradients stay f32 but the gathers move what the forward
   * reads, bf16 copies where it reads them: stages 1 and 2's one gather is
   * what stage 3 gathers for the forward layer by layer.  (Not fewer bytes
   * than the f32 weights here: wte, most of this small model, is read as
   * f32 by the embedding and as bf16 by the logits, and gathered both.) */
  tg_graph *bf = compile_with(ctx, sizeof small / sizeof small[0], small, TG_PRECISION_BF16, true);
  tg_collective_plan b0 = collectives(bf, 8, 0), b1 = collectives(bf, 8, 1), b3 = collectives(bf, 8, 3);
  ck_assert_int_eq(sent(&b1, TG_COLLECTIVE_BUCKET), sent(&b0, TG_COLLECTIVE_BUCKET) / 2);
  ck_assert_int_eq(sent(&b1, TG_COLLECTIVE_PARAMETERS), sent(&b3, TG_COLLECTIVE_LAYER_FORWARD));
  ck_assert(b1.bf16_copies);
  ck_assert_int_eq(b1.collectives[b1.n_collectives - 1].dtypes, (1u << TG_BF16) | (1u << TG_F32));
  tu_ctx_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("zero_plan");
  TCase *tc = tcase_create("zero_plan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_stage0_is_todays_totals);
  tcase_add_test(tc, test_stages_bf16);
  tcase_add_test(tc, test_stages_f32);
  tcase_add_test(tc, test_padding_counted);
  tcase_add_test(tc, test_refused);
  tcase_add_test(tc, test_collectives);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
