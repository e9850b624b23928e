/* test_hellaswag.c: HellaSwag's scoring rule on logits made by hand (the
 * shift by one, the sum and the average over the ending's tokens only, the
 * padded vocabulary columns left out, ties to the first ending), and the
 * reading of tests/data/hellaswag_tiny.jsonl with GPT-2's BPE (rows of
 * context then " " + ending, labels, lines, blank lines, the limit).  That
 * the scores equal llm.c's under transformers is tests/torch's. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hellaswag.h"

enum { T = 5, V = 3, VP = 4 };

/* logits [4, T, VP]: every real column 0 (a uniform softmax: each token
 * costs ln 3), the padded column huge, which must not count */
static void uniform(float *logits) {
  for (int i = 0; i < 4 * T; i++) {
    for (int v = 0; v < V; v++) logits[i * VP + v] = 0;
    logits[i * VP + V] = 1e4f;
  }
}

START_TEST(test_score_rule) {
  /* context of 2 tokens; endings of 1, 2, 1 and 3 tokens */
  int32_t r0[] = {0, 1, 2}, r1[] = {0, 1, 2, 0}, r2[] = {0, 1, 1}, r3[] = {0, 1, 2, 1, 0};
  tg_hellaswag_example ex = {.line = 1, .label = 3, .ctx_len = 2, .len = {3, 4, 3, 5}, .rows = {r0, r1, r2, r3}};
  float logits[4 * T * VP];
  uniform(logits);
  tg_hellaswag_scores s;
  tg_hellaswag_score(&ex, logits, T, VP, V, &s);
  double l3 = log(3.0);
  for (int b = 0; b < 4; b++) {
    ck_assert_int_eq(s.tokens[b], ex.len[b] - 2);
    ck_assert_double_eq_tol(s.sum[b], l3 * (double)s.tokens[b], 1e-9);
    ck_assert_double_eq_tol(s.avg[b], l3, 1e-9);
  }
  /* sums ln3, 2 ln3, ln3, 3 ln3: a tie between 0 and 2 goes to 0; all
   * averages tie: 0 */
  ck_assert_int_eq(s.pred, 0);
  ck_assert_int_eq(s.pred_norm, 0);

  /* ending 3's tokens made likely where they are predicted: the logits
   * one position before each (positions 1, 2, 3 for tokens 2, 1, 0) */
  for (int t = 1; t <= 3; t++) logits[(3 * T + t) * VP + r3[t + 1]] = 10;
  tg_hellaswag_score(&ex, logits, T, VP, V, &s);
  double small = log(2.0 + exp(10.0)) - 10; /* each of its tokens now */
  ck_assert_double_eq_tol(s.sum[3], 3 * small, 1e-5);
  ck_assert_int_eq(s.pred_norm, 3);
  ck_assert_int_eq(s.pred, 3);
  /* the same logits at the tokens' own positions (no shift) would score
   * nothing: the context's last position predicts the first ending token */
  uniform(logits);
  for (int t = 2; t <= 4; t++) logits[(3 * T + t) * VP + r3[t]] = 10;
  tg_hellaswag_score(&ex, logits, T, VP, V, &s);
  ck_assert(s.sum[3] > 3 * l3); /* each boost went to a token that is not the one predicted */
  ck_assert_int_ne(s.pred_norm, 3);
  /* a context token's logit is never scored */
  uniform(logits);
  logits[(1 * T + 0) * VP + 1] = -50;
  tg_hellaswag_score(&ex, logits, T, VP, V, &s);
  ck_assert_double_eq_tol(s.sum[1], 2 * l3, 1e-9);
}
END_TEST

START_TEST(test_load_tiny) {
  char why[512];
  tg_tokenizer *tok = tg_tok_gpt2_load(tu_data_path("gpt2/encoder.json"), tu_data_path("gpt2/vocab.bpe"), why,
                                       sizeof why);
  ck_assert_msg(tok, "%s", why);
  tg_ctx *ctx = tg_ctx_new(stderr);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("tests/data/hellaswag_tiny.jsonl was refused");
  const char *path = TG_SOURCE_DIR "/tests/data/hellaswag_tiny.jsonl";
  const tg_hellaswag *h = tg_hellaswag_load(ctx, path, tok, 0, "test");
  ck_assert_int_eq(h->n, 6);
  const int labels[6] = {0, 2, 1, 0, 3, 0};
  for (int i = 0; i < 6; i++) {
    ck_assert_int_eq(h->ex[i].line, i + 1);
    ck_assert_int_eq(h->ex[i].label, labels[i]);
  }
  /* example 1's row 2: its ctx's tokens, then " scrubs the doors ..."'s */
  const char *ctx_text = "A man sprays soapy water over a red car in his driveway. he";
  const char *ending = " scrubs the doors with a large yellow sponge.";
  int32_t *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  ck_assert(tg_tok_encode(tok, ctx_text, strlen(ctx_text), &a, &na, why, sizeof why));
  ck_assert(tg_tok_encode(tok, ending, strlen(ending), &b, &nb, why, sizeof why));
  const tg_hellaswag_example *ex = &h->ex[1];
  ck_assert_int_eq(ex->ctx_len, (int64_t)na);
  ck_assert_int_eq(ex->len[2], (int64_t)(na + nb));
  ck_assert(!memcmp(ex->rows[2], a, na * sizeof *a) && !memcmp(ex->rows[2] + na, b, nb * sizeof *b));
  int64_t longest = 0;
  for (int i = 0; i < 6; i++)
    for (int e = 0; e < 4; e++) longest = h->ex[i].len[e] > longest ? h->ex[i].len[e] : longest;
  ck_assert_int_eq(h->longest, longest);
  free(a);
  free(b);
  /* the limit, and the longest row of what it kept */
  const tg_hellaswag *two = tg_hellaswag_load(ctx, path, tok, 2, "test");
  ck_assert_int_eq(two->n, 2);
  ck_assert(two->longest <= longest);
  tg_ctx_free(ctx);
  tg_tok_free(tok);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hellaswag");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_score_rule);
  tcase_add_test(tc, test_load_tiny);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
