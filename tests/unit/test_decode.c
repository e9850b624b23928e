/* test_decode.c: the decode pass (passes/decode.c).
 *
 * The decode step's logits at every position of a sequence must equal the
 * full forward's logits for that sequence (causal attention: position t
 * sees tokens 0 .. t only), on the reference interpreter (f32 rounding)
 * on the CPU backend (generated C) and on the emulated CUDA device, for a 2-layer GPT-2 model with
 * the vocabulary padded (11 -> 64) and the whole context used (12 of
 * block_size 12), and with caches of 7 rows (tgrun sample's, sized to the
 * prompt and the new tokens) at positions 0 .. 6.  The weights are the initialiser's times 20, so that
 * logits are O(1) and attention far from uniform (a wrong mask or a
 * cache row off by one changes them by 1e-2 or more).
 *
 * Tolerance: both sides compute in f32; what differs is the order of the
 * sums (the forward's flash attention sums a tile of keys at a time with
 * an online softmax, the step one row with a plain softmax; matmuls of
 * T rows vs one row may block differently).  Each logit is a chain of
 * sums of at most 4 * n_embd = 128 terms through 2 layers; f32 rounding
 * (u = 6e-8) over such sums stays within ~100 u of the largest value, so
 * max |decode - full| / max |full| per row is allowed 1e-5.
 *
 * And the pass's refusals: a model compiled at T > 1, an attention that
 * flash_attn does not recognise (its mask's iota is over positions), a
 * model without a position table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backends.h"
#include "passes.h"
#include "testutil.h"
#include "weights.h"

enum { NL = 12, VOCAB = 11 };
static const char *const full_defs[] = {"n_layer=2", "n_head=2", "n_embd=32", "vocab=11", "block_size=12", "B=1",
                                        "T=12"};
static const char *const step_defs[] = {"n_layer=2", "n_head=2", "n_embd=32", "vocab=11", "block_size=12", "B=1",
                                        "T=1"};

static tg_graph *model(tg_ctx *ctx, const char *const *defs, bool decode, int64_t positions) {
  tg_graph *g = tu_compile(ctx, "gpt2.tg", tu_read("models/gpt2.tg"), 7, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("pipeline: %s", tu_errors(ctx));
  if (!decode) {
    tg_node *logits = NULL;
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i]->name && !strcmp(g->nodes[i]->name, TG_OUTPUT_LOGITS)) logits = g->nodes[i];
    ck_assert_ptr_nonnull(logits);
    tg_graph_add_output(g, TG_OUTPUT_LOGITS, logits);
  }
  tg_pipeline_opts po = {.decode = decode, .kernels = true, .pad_multiple = 64, .decode_positions = positions};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL;
  return g;
}

static void set_params(tg_ctx *ctx, tg_exec *e, const tg_graph *g, const tg_weights *w, const tg_graph *wg) {
  (void)ctx;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *p = g->nodes[i];
    if (p->op != TG_OP_param) continue;
    const tg_node *q = tg_graph_leaf(wg, TG_OP_param, p->name);
    ck_assert_ptr_nonnull(q);
    tg_tensor_write(tg_exec_leaf(e, p), w->values[q->id], TG_HOST_F32);
  }
}

/* positions > 0: the step's caches hold that many rows (fewer than the
 * context), and the first that many positions are checked. */
static void check_backend(const char *backend, const char *full_backend, int64_t positions) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *full = model(ctx, full_defs, false, 0);
  tg_graph *step = model(ctx, step_defs, true, positions);
  const int n_pos = positions > 0 ? (int)positions : NL;
  const tg_node *cache = tg_graph_leaf(step, TG_OP_state, TG_DECODE_V_PREFIX "1");
  ck_assert_ptr_nonnull(cache);
  ck_assert_int_eq(cache->type.dim[cache->type.rank - 2].size, n_pos);
  ck_assert_int_eq(tg_decode_context(step), NL);
  tg_weights *w = tg_weights_init(full, 7);
  for (int i = 0; i < full->n_nodes; i++)
    if (w->values[i] && full->nodes[i]->op == TG_OP_param)
      for (int64_t k = 0; k < tg_type_numel(&full->nodes[i]->type); k++) w->values[i][k] *= 20;

  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s: %s", backend, tu_errors(ctx));
  tg_device_opts dopts = {.precision = TG_PREC_F32};
  tg_device *dev = tg_device_open_named(ctx, backend, &dopts);
  tg_device *fdev = strcmp(full_backend, backend) ? tg_device_open_named(ctx, full_backend, &dopts) : dev;
  tg_exec_opts eo = {.name = "full", .remat = -1};
  tg_exec *ef = tg_exec_compile(fdev, ctx, full, &eo);
  eo.name = "decode";
  tg_exec *es = tg_exec_compile(dev, ctx, step, &eo);
  set_params(ctx, ef, full, w, full);
  set_params(ctx, es, step, w, full);

  int32_t tokens[NL], targets[NL];
  for (int t = 0; t < NL; t++) tokens[t] = (t * 7 + 3) % VOCAB, targets[t] = 0;
  tg_tensor_write(tg_exec_leaf(ef, tg_graph_leaf(full, TG_OP_input, TG_INPUT_IDX)), tokens, TG_HOST_I32);
  tg_tensor_write(tg_exec_leaf(ef, tg_graph_leaf(full, TG_OP_input, TG_INPUT_TARGETS)), targets, TG_HOST_I32);
  tg_exec_run(ctx, ef);
  const tg_node *lf = tg_graph_output(full, TG_OUTPUT_LOGITS), *ls = tg_graph_output(step, TG_OUTPUT_LOGITS);
  ck_assert_ptr_nonnull(ls);
  int64_t Vp = lf->type.dim[2].size;
  ck_assert_int_eq(ls->type.rank, 3);
  ck_assert_int_eq(ls->type.dim[1].size, 1);
  ck_assert_int_eq(ls->type.dim[2].size, Vp);
  float *want = malloc(sizeof(float) * (size_t)(NL * Vp)), *got = malloc(sizeof(float) * (size_t)Vp);
  ck_assert(tg_exec_read(ef, lf, want, TG_HOST_F32));

  tg_tensor *idx = tg_exec_leaf(es, tg_graph_leaf(step, TG_OP_input, TG_INPUT_IDX));
  tg_tensor *pos = tg_exec_leaf(es, tg_graph_leaf(step, TG_OP_input, TG_INPUT_POS));
  ck_assert_ptr_nonnull(pos);
  double worst = 0, spread = 0;
  for (int t = 0; t < n_pos; t++) {
    int32_t p = t;
    tg_tensor_write(idx, &tokens[t], TG_HOST_I32);
    tg_tensor_write(pos, &p, TG_HOST_I32);
    tg_exec_run(ctx, es);
    ck_assert(tg_exec_read(es, ls, got, TG_HOST_F32));
    double big = 0, diff = 0, lo = INFINITY, hi = -INFINITY;
    for (int v = 0; v < VOCAB; v++) {
      double r = want[t * Vp + v];
      big = fmax(big, fabs(r));
      diff = fmax(diff, fabs(got[v] - r));
      lo = fmin(lo, r), hi = fmax(hi, r);
    }
    ck_assert_msg(diff <= 1e-5 * big, "%s: position %d: max |decode - full| = %g, max |full| = %g", backend, t, diff,
                  big);
    worst = fmax(worst, diff / big);
    spread = fmax(spread, hi - lo);
  }
  /* the comparison means something: the logits differ by position and id */
  ck_assert_msg(spread > 0.1, "%s: logits nearly constant (spread %g): the test would not see a wrong mask", backend,
                spread);
  printf("test_decode: %s: %d positions (caches of %d), worst relative difference %.2e\n", backend, n_pos, n_pos,
         worst);
  free(want);
  free(got);
  tg_exec_free(es);
  tg_exec_free(ef);
  if (fdev != dev) tg_device_close(fdev);
  tg_device_close(dev);
  tg_weights_free(w);
  ctx->bail = NULL;
  tu_ctx_free(ctx);
}

START_TEST(decode_matches_forward_ref) { check_backend("ref", "ref", 0); }
END_TEST

START_TEST(decode_matches_forward_cpu) { check_backend("cpu", "cpu", 0); }

/* caches of 7 rows of the 12 the position table has (tgrun sample's: the
 * prompt and the new tokens): the same logits at positions 0 .. 6 */
START_TEST(decode_with_short_caches_matches_forward) {
  check_backend("ref", "ref", 7);
  check_backend("cpu", "cpu", 7);
}
END_TEST

/* the generated CUDA, every kernel run on the emulated device, against the
 * interpreter's forward: the CUDA flash attention kernel rounds q, k, v and
 * the probabilities to bf16 for its tensor-core products even in f32
 * (docs/precision.md), 3e-3 off, while the decode step's attention is
 * plain f32 matmuls and softmax */
/* the model's context and the caches' rows, at f32 and at bf16 precision */
START_TEST(context_of_a_decode_step) {
  for (int bf16 = 0; bf16 < 2; bf16++) {
    tg_ctx *ctx = tu_ctx();
    tg_graph *g = tu_compile(ctx, "gpt2.tg", tu_read("models/gpt2.tg"), 7, step_defs);
    jmp_buf bail;
    ctx->bail = &bail;
    if (setjmp(bail)) ck_abort_msg("pipeline: %s", tu_errors(ctx));
    tg_pipeline_opts po = {.decode = true, .kernels = true, .pad_multiple = 64, .decode_positions = 5,
                           .precision = bf16 ? TG_PRECISION_BF16 : TG_PRECISION_F32};
    tg_run_pipeline(ctx, g, &po);
    ctx->bail = NULL;
    ck_assert_int_eq(tg_decode_context(g), NL);
    const tg_node *cache = tg_graph_leaf(g, TG_OP_state, TG_DECODE_K_PREFIX "0");
    ck_assert_int_eq(cache->type.dim[cache->type.rank - 2].size, 5);
    tu_ctx_free(ctx);
  }
}
END_TEST

START_TEST(decode_matches_forward_cuda_emu) { check_backend("cuda-emu", "ref", 0); }
END_TEST

/* The pass's error for graph text, compiled with defs. */
static const char *decode_error(const char *text, int n_defs, const char *const *defs) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = tu_compile(ctx, "m.tg", text, n_defs, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  bool failed = false;
  if (setjmp(bail)) failed = true;
  else {
    tg_pipeline_opts po = {.decode = true, .pad_multiple = 1};
    tg_run_pipeline(ctx, g, &po);
  }
  ck_assert_msg(failed, "the decode pass accepted a graph it should refuse");
  static char msg[2048];
  snprintf(msg, sizeof msg, "%s", tu_errors(ctx));
  tu_ctx_free(ctx);
  return msg;
}

START_TEST(refuses_long_T) {
  const char *e = decode_error(tu_read("models/gpt2.tg"), 7, full_defs);
  ck_assert_msg(strstr(e, "m.tg:75:50") && strstr(e, "compiled with T = 1"), "%s", e);
}
END_TEST

/* attention masked with -1e9 instead of -inf: flash_attn leaves it, and its
 * mask is an iota over positions */
static const char unrecognised[] =
    "config { V = 5  C = 4  S = 8  T = 1 }\n"
    "input idx: i32[1, T]\n"
    "param wte: [V, C] = normal(1)\n"
    "param wpe: [S, C] = normal(1)\n"
    "x = gather(wte, idx) + gather(wpe, iota([T], 0))\n"
    "att = x @ transpose(x, 1, 2)\n"
    "causal = iota([T, T], 0) >= iota([T, T], 1)\n"
    "att = where(causal, att, -1e9)\n"
    "e = exp(att - max(att, -1))\n"
    "y = (e / sum(e, -1)) @ x\n"
    "logits = y @ transpose(wte)\n"
    "output out = sum(logits)\n";

START_TEST(refuses_unrecognised_attention) {
  const char *e = decode_error(unrecognised, 0, NULL);
  ck_assert_msg(strstr(e, "m.tg:7:") && strstr(e, "iota over the positions"), "%s", e);
}
END_TEST

static const char no_positions[] =
    "config { V = 5  C = 4  T = 1 }\n"
    "input idx: i32[1, T]\n"
    "param wte: [V, C] = normal(1)\n"
    "logits = gather(wte, idx) @ transpose(wte)\n"
    "output out = sum(logits)\n";

START_TEST(refuses_no_position_table) {
  const char *e = decode_error(no_positions, 0, NULL);
  ck_assert_msg(strstr(e, "no position embedding"), "%s", e);
}
END_TEST

int main(void) {
  Suite *s = suite_create("decode");
  TCase *tc = tcase_create("decode");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, decode_matches_forward_ref);
  tcase_add_test(tc, decode_matches_forward_cpu);
  tcase_add_test(tc, decode_with_short_caches_matches_forward);
  tcase_add_test(tc, context_of_a_decode_step);
  tcase_add_test(tc, decode_matches_forward_cuda_emu);
  tcase_add_test(tc, refuses_long_T);
  tcase_add_test(tc, refuses_unrecognised_attention);
  tcase_add_test(tc, refuses_no_position_table);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
