/* test_memplan.c: the memory plan of a fused training step.
 *
 * Soundness: tg_memplan_check (every kernel output has a buffer alive from
 * its writer through its last reader, to the end for outputs and assigns;
 * every buffer aligned and inside the arena; no two buffers live together
 * share a byte) holds for the full 12-layer gpt2.tg step and a tiny one,
 * and reuse pays: the arena is smaller than the buffers' sum.
 *
 * Numerics: the tiny step run kernel by kernel as the plan has it
 * (tg_interp_run_planned: a buffer is filled with NaN when its planned life
 * ends and when a buffer placed over it is written) gives exactly the
 * results of the plain kernel-by-kernel run.
 *
 * Broken plans: a shortened lifetime and two live buffers placed on the
 * same bytes are each refused by the checker and each poison the planned
 * run's results (or stop it), so both checks can fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "interp.h"
#include "passes.h"
#include "testutil.h"

/* gpt2.tg with the -D overrides through the whole pipeline of a training
 * step (fuse and memplan included). */
static tg_graph *compile_step(tg_ctx *ctx, int n_defs, const char *const *defs) {
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), n_defs, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.grad = true, .step = true, .adamw = tg_adamw_defaults,
                         .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(ctx, g, &po);
  ck_assert_ptr_nonnull(g->memplan);
  /* the pass finds and checks lifetimes; placing (buffers squared) waits
   * until something asks for the offsets */
  ck_assert(!g->memplan->placed);
  ck_assert_int_gt(g->memplan->live_bytes, 0);
  ck_assert_ptr_eq(tg_memplan_placed(ctx, g), g->memplan);
  ck_assert(g->memplan->placed);
  ctx->bail = NULL; /* this frame's jmp_buf dies with it */
  return g;
}

static const char *const tiny[] = {"n_layer=2", "n_embd=16", "n_head=2", "vocab=50", "block_size=8", "B=2", "T=8"};
enum { N_TINY = sizeof tiny / sizeof tiny[0] };

static void assert_sound(const tg_graph *g, const tg_mem_plan *p) {
  char why[256];
  ck_assert_msg(tg_memplan_check(g, p, why, sizeof why), "plan refused: %s", why);
  ck_assert_int_ge(p->arena_bytes, p->live_bytes);
  ck_assert_int_gt(p->n_buffers, 0);
}

/* A copy of g's plan to break by hand. */
static tg_mem_plan *copy_plan(const tg_graph *g) {
  tg_mem_plan *p = tg_alloc(g->arena, sizeof *p);
  *p = *g->memplan;
  p->buffers = tg_alloc(g->arena, sizeof *p->buffers * (size_t)p->n_buffers);
  memcpy(p->buffers, g->memplan->buffers, sizeof *p->buffers * (size_t)p->n_buffers);
  return p;
}

START_TEST(test_gpt2_plan) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_step(ctx, 0, NULL); /* the config's B=8, T=1024 */
  const tg_mem_plan *p = g->memplan;
  assert_sound(g, p);
  ck_assert_msg(p->arena_bytes < p->sum_bytes,
                "gpt2: peak %lld bytes is not below %lld without reuse", (long long)p->arena_bytes,
                (long long)p->sum_bytes);
  fprintf(stderr,
          "test_memplan: gpt2.tg step: %d buffers, peak %lld bytes (most live at once %lld) vs %lld "
          "without reuse; persistent %lld\n",
          p->n_buffers, (long long)p->arena_bytes, (long long)p->live_bytes, (long long)p->sum_bytes,
          (long long)p->persistent_bytes);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_tiny_plan) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_step(ctx, N_TINY, tiny);
  assert_sound(g, g->memplan);
  ck_assert_int_lt(g->memplan->arena_bytes, g->memplan->sum_bytes);
  /* the plan is a function of the kernels: made again, it is the same */
  tg_mem_plan *again = tg_memplan_compute(g);
  ck_assert_int_eq(again->n_buffers, g->memplan->n_buffers);
  ck_assert(!memcmp(again->buffers, g->memplan->buffers, sizeof *again->buffers * (size_t)again->n_buffers));
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* ---- numerics ------------------------------------------------------------ */

static void fill_leaves(const tg_graph *g, tg_interp *it) {
  uint64_t s = 7;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_input) continue;
    double *v = tg_interp_leaf(it, n);
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v[k] = n->type.dtype == TG_I32 ? (double)((k * 7 + 3) % 50) : (double)(s >> 11) / 9007199254740992.0 - 0.5;
    }
    if (!strcmp(n->name, TG_INPUT_LR)) v[0] = 1e-2;
    if (!strcmp(n->name, TG_INPUT_STEP)) v[0] = 1;
  }
}

/* Runs g's tiny step kernel by kernel, with plan p (NULL: plain); false
 * when the run stopped with an error. */
static bool run(tg_ctx *ctx, tg_interp *it, const tg_mem_plan *p) {
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) return false;
  if (p) tg_interp_run_planned(ctx, it, p);
  else tg_interp_run_kernels(ctx, it);
  return true;
}

/* The results: outputs (loss, gradients, grad norm), then updated leaves;
 * the number of values that differ from a's (NaN differs from all). */
static int64_t differences(const tg_graph *g, tg_interp *a, tg_interp *b) {
  int64_t diff = 0;
  for (int o = 0; o < g->n_outputs; o++) {
    const tg_node *n = g->outputs[o].node;
    const double *x = tg_interp_value(a, n), *y = tg_interp_value(b, n);
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++) diff += !(x[k] == y[k]);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_state) continue;
    const double *x = tg_interp_leaf(a, n), *y = tg_interp_leaf(b, n);
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++) diff += !(x[k] == y[k]);
  }
  return diff;
}

/* Runs plain and with plan p; returns the differing values, -1 when the
 * planned run stopped. */
static int64_t planned_vs_plain(tg_ctx *ctx, tg_graph *g, const tg_mem_plan *p) {
  tg_interp *plain = tg_interp_new(g, TG_PREC_F64), *planned = tg_interp_new(g, TG_PREC_F64);
  fill_leaves(g, plain);
  fill_leaves(g, planned);
  ck_assert_msg(run(ctx, plain, NULL), "plain run failed: %s", tu_errors(ctx));
  int64_t d = run(ctx, planned, p) ? differences(g, plain, planned) : -1;
  tg_interp_free(plain);
  tg_interp_free(planned);
  return d;
}

START_TEST(test_planned_run_agrees) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_step(ctx, N_TINY, tiny);
  ck_assert_int_eq(planned_vs_plain(ctx, g, g->memplan), 0);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* ---- broken plans are caught --------------------------------------------- */

/* A buffer read by a kernel after the one that writes it, not needed after
 * the step, that dies right after its writer instead. */
START_TEST(test_short_lifetime_caught) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_step(ctx, N_TINY, tiny);
  tg_mem_plan *p = copy_plan(g);
  int b = 0;
  while (b < p->n_buffers && !(p->buffers[b].last > p->buffers[b].first + 1 && p->buffers[b].last < g->n_kernels)) b++;
  ck_assert_int_lt(b, p->n_buffers);
  p->buffers[b].last = p->buffers[b].first;
  char why[256];
  ck_assert(!tg_memplan_check(g, p, why, sizeof why));
  ck_assert_msg(strstr(why, "after its buffer's last kernel"), "%s", why);
  int64_t d = planned_vs_plain(ctx, g, p);
  ck_assert_msg(d != 0, "a value read after its planned death went unnoticed");
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* Two buffers live together, the later one placed on the earlier's bytes. */
START_TEST(test_overlap_caught) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_step(ctx, N_TINY, tiny);
  tg_mem_plan *p = copy_plan(g);
  int x = -1, y = -1; /* y written while x is live, and x read after that */
  for (int a = 0; a < p->n_buffers && y < 0; a++)
    for (int b = 0; b < p->n_buffers && y < 0; b++) {
      const tg_buffer *X = &p->buffers[a], *Y = &p->buffers[b];
      if (X->first < Y->first && Y->first < X->last && X->last < g->n_kernels) x = a, y = b;
    }
  ck_assert_int_ge(y, 0);
  p->buffers[y].offset = p->buffers[x].offset;
  if (p->buffers[y].offset + p->buffers[y].bytes > p->arena_bytes)
    p->arena_bytes = p->buffers[y].offset + p->buffers[y].bytes;
  char why[256];
  ck_assert(!tg_memplan_check(g, p, why, sizeof why));
  ck_assert_msg(strstr(why, "live together and share memory"), "%s", why);
  int64_t d = planned_vs_plain(ctx, g, p);
  ck_assert_msg(d != 0, "a buffer overwritten while live went unnoticed");
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("memplan");
  TCase *tc = tcase_create("memplan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpt2_plan);
  tcase_add_test(tc, test_tiny_plan);
  tcase_add_test(tc, test_planned_run_agrees);
  tcase_add_test(tc, test_short_lifetime_caught);
  tcase_add_test(tc, test_overlap_caught);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
