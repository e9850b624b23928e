/* test_lr_schedule.c: the learning-rate schedule against nanoGPT's get_lr.
 *
 * The expected values below were computed with Python 3.11 by nanoGPT's
 * get_lr (train.py), copied verbatim apart from taking its settings as
 * arguments, and printed with repr (17 significant digits), then pasted in:
 *
 *   def get_lr(it, learning_rate, min_lr, warmup_iters, lr_decay_iters):
 *       if it < warmup_iters:
 *           return learning_rate * (it + 1) / (warmup_iters + 1)
 *       if it > lr_decay_iters:
 *           return min_lr
 *       decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
 *       assert 0 <= decay_ratio <= 1
 *       coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
 *       return min_lr + coeff * (learning_rate - min_lr)
 *
 * Each case visits the boundaries: the first step, the last warmup step,
 * the peak at it = warmup, the step after it, the middle of the cosine, the
 * last step before decay_steps, decay_steps itself and beyond. */
#include "testutil.h"

#include <math.h>

#include "lr_schedule.h"

typedef struct point {
  int64_t it;
  double lr;
} point;

typedef struct lr_case {
  double lr, min_lr;
  int64_t warmup, decay;
  point at[16];
} lr_case;

static const lr_case cases[] = {
    /* configs/baby_shakespeare_char.cfg */
    {0.001, 0.0001, 100, 2000, {
      {0, 9.900990099009901e-06},
      {1, 1.9801980198019803e-05},
      {50, 0.000504950495049505},
      {98, 0.0009801980198019802},
      {99, 0.0009900990099009901},
      {100, 0.001},
      {101, 0.0009999993848585915},
      {500, 0.0009051132292283772},
      {1000, 0.0005871607054625496},
      {1050, 0.00055},
      {1999, 0.00010000061514140841},
      {2000, 0.0001},
      {2001, 0.0001},
      {5000, 0.0001}}},
    /* no warmup: the cosine starts at step 0 */
    {0.0006, 6e-05, 0, 10, {
      {0, 0.0006},
      {1, 0.0005867852593996914},
      {2, 0.0005484345884812357},
      {3, 0.0004887020181189677},
      {4, 0.00041343458848123576},
      {5, 0.00032999999999999994},
      {6, 0.0002465654115187642},
      {7, 0.00017129798188103226},
      {8, 0.00011156541151876421},
      {9, 7.321474060030854e-05},
      {10, 6e-05},
      {11, 6e-05}}},
    /* nanoGPT's GPT-2 124M run */
    {0.0006, 6e-05, 2000, 600000, {
      {0, 2.998500749625187e-07},
      {1999, 0.0005997001499250374},
      {2000, 0.0006},
      {2001, 0.0005999999999962741},
      {301000, 0.00032999999999999994},
      {599999, 6.00000000037259e-05},
      {600000, 6e-05},
      {600001, 6e-05}}},
    /* min_lr == lr: constant after the warmup */
    {0.01, 0.01, 5, 20, {
      {0, 0.0016666666666666668},
      {4, 0.008333333333333333},
      {5, 0.01},
      {12, 0.01},
      {20, 0.01},
      {21, 0.01}}},
    /* a short decay down to 0 */
    {0.0003, 0.0, 1, 3, {
      {0, 0.00015},
      {1, 0.0003},
      {2, 0.00015},
      {3, 0.0},
      {4, 0.0}}},
};

START_TEST(test_against_python) {
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    const lr_case *C = &cases[c];
    tg_lr_schedule s = {C->lr, C->min_lr, C->warmup, C->decay};
    for (int i = 0; i < 16 && (i == 0 || C->at[i].it); i++) {
      double got = tg_lr_at(&s, C->at[i].it), want = C->at[i].lr;
      /* Same formula, same order of operations, the same libm cos: a few
       * ulps at most. */
      ck_assert_msg(fabs(got - want) <= 4e-16 * fabs(want),
                    "case %zu, it %lld: got %.17g, want %.17g", c, (long long)C->at[i].it, got,
                    want);
    }
  }
}
END_TEST

START_TEST(test_shape) {
  tg_lr_schedule s = {1e-3, 1e-4, 100, 2000};
  /* The warmup rises, the decay falls, and nothing leaves [min_lr, lr]
   * after the warmup or (0, lr] during it. */
  double prev = 0;
  for (int64_t it = 0; it < 100; it++) {
    double lr = tg_lr_at(&s, it);
    ck_assert(lr > prev && lr < 1e-3);
    prev = lr;
  }
  ck_assert(tg_lr_at(&s, 100) == 1e-3);
  prev = 1e-3;
  for (int64_t it = 101; it <= 2100; it++) {
    double lr = tg_lr_at(&s, it);
    ck_assert(lr <= prev && lr >= 1e-4 && lr <= 1e-3);
    prev = lr;
  }
}
END_TEST

START_TEST(test_degenerate) {
  /* decay_steps == warmup: nanoGPT divides by zero at it == warmup; the
   * decay has length zero, so it is over. */
  tg_lr_schedule s = {1e-3, 1e-4, 10, 10};
  ck_assert(tg_lr_at(&s, 9) == 1e-3 * 10 / 11);
  ck_assert(tg_lr_at(&s, 10) == 1e-4);
  ck_assert(tg_lr_at(&s, 11) == 1e-4);
  /* decay_steps before the warmup ends, as nanoGPT: min_lr right after. */
  tg_lr_schedule t = {1e-3, 1e-4, 10, 5};
  ck_assert(tg_lr_at(&t, 9) == 1e-3 * 10 / 11);
  ck_assert(tg_lr_at(&t, 10) == 1e-4);
  /* Step counts far beyond int32 and into the cosine's middle. */
  tg_lr_schedule u = {2.0, 0.0, 0, (int64_t)1 << 40};
  ck_assert(fabs(tg_lr_at(&u, (int64_t)1 << 39) - 1.0) < 1e-12);
  ck_assert(tg_lr_at(&u, INT64_MAX) == 0.0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lr_schedule");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_against_python);
  tcase_add_test(tc, test_shape);
  tcase_add_test(tc, test_degenerate);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
