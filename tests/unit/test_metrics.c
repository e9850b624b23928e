/* test_metrics.c: MFU, the metrics file and the console log.
 *
 * The metrics file is what survives a run (and a crash of it), so the
 * tests dwell on reading back what an interrupted or resumed run leaves. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"

static char dir[64], path[128];
static char why[256];

static void setup(void) {
  strcpy(dir, "/tmp/tg_metrics_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
}

static void teardown(void) {
  unlink(path);
  rmdir(dir);
}

static void append_raw(const char *text) {
  FILE *f = fopen(path, "ab");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static tg_metrics_row step_row(int64_t step, double loss) {
  tg_metrics_row r = tg_metrics_row_blank(TG_METRICS_STEP, step);
  r.loss = loss, r.lr = 1e-3, r.grad_norm = 0.5, r.dt_ms = 40, r.tok_per_s = 19200;
  return r;
}

static tg_metrics_row eval_row(int64_t step, double train, double val) {
  tg_metrics_row r = tg_metrics_row_blank(TG_METRICS_EVAL, step);
  r.train_loss = train, r.val_loss = val;
  return r;
}

START_TEST(test_mfu) {
  /* nanoGPT's GPT-2 124M: N = 124,439,808 parameters less wpe's 786,432;
   * L = H = 12, Q = 64, T = 1024: 6N + 12LHQT = 741,920,256 + 113,246,208. */
  tg_mfu_model m = {124439808 - 786432, 12, 12, 64, 1024};
  ck_assert(tg_flops_per_token(&m) == 855166464.0);
  /* Its step: batch 12, 40 micro-steps, 1024 tokens = 491,520 tokens. */
  double flops = tg_flops_per_step(&m, 12 * 40 * 1024);
  ck_assert(flops == 855166464.0 * 491520);
  /* On an A100 (312 TFLOP/s bf16, nanoGPT's figure) in 4.5 s a step. */
  double mfu = tg_mfu(flops, 4.5, 312e12);
  ck_assert(fabs(mfu - 855166464.0 * 491520 / 4.5 / 312e12) < 1e-15);
  ck_assert(mfu > 0.29 && mfu < 0.30);
  ck_assert(isnan(tg_mfu(flops, 4.5, 0)));  /* peak unknown */
  ck_assert(isnan(tg_mfu(flops, 0, 312e12))); /* no time measured */
  ck_assert(isnan(tg_mfu(flops, -1, 312e12)));
}
END_TEST

START_TEST(test_json_lines) {
  char buf[512];
  tg_metrics_row r = step_row(10, 2.5131);
  r.lr = 1e-4, r.grad_norm = 0.812, r.dt_ms = 41.2, r.tok_per_s = 15872, r.mfu = 0.031;
  tg_metrics_json(buf, sizeof buf, &r);
  ck_assert_str_eq(buf, "{\"step\":10,\"loss\":2.5131,\"lr\":0.0001,\"grad_norm\":0.812,"
                        "\"dt_ms\":41.2,\"tok_per_s\":15872,\"mfu\":0.031}");
  r.fwd_ms = 12, r.bwd_ms = 27.1, r.mfu = NAN, r.loss = INFINITY;
  tg_metrics_json(buf, sizeof buf, &r);
  ck_assert_str_eq(buf, "{\"step\":10,\"loss\":null,\"lr\":0.0001,\"grad_norm\":0.812,"
                        "\"dt_ms\":41.2,\"fwd_ms\":12,\"bwd_ms\":27.1,\"tok_per_s\":15872,"
                        "\"mfu\":null}");
  r = eval_row(250, 2.1234, NAN);
  tg_metrics_json(buf, sizeof buf, &r);
  ck_assert_str_eq(buf, "{\"step\":250,\"train_loss\":2.1234,\"val_loss\":null}");
  /* Both kinds carry the time (unix seconds, to the millisecond: %.9g
   * would round a 2026 time to 10 s) and the seconds since the start. */
  r.time = 1795766400.1234, r.elapsed_s = 312.5;
  tg_metrics_json(buf, sizeof buf, &r);
  ck_assert_str_eq(buf, "{\"step\":250,\"train_loss\":2.1234,\"val_loss\":null,\"time\":1795766400.123,"
                        "\"elapsed_s\":312.500}");
  r = step_row(10, 2.5);
  r.time = 1795766400.5, r.elapsed_s = 12.25, r.eta_s = 99; /* eta: the console's, not the file's */
  tg_metrics_json(buf, sizeof buf, &r);
  ck_assert_ptr_nonnull(strstr(buf, ",\"mfu\":null,\"time\":1795766400.500,\"elapsed_s\":12.250}"));
  ck_assert_ptr_null(strstr(buf, "eta"));
  /* A float32 loss survives the 9 digits exactly. */
  r = step_row(1, (double)1.23456789f);
  tg_metrics_json(buf, sizeof buf, &r);
  ck_assert_ptr_nonnull(strstr(buf, "\"loss\":1.23456788,"));
  ck_assert((float)strtod(strstr(buf, "\"loss\":") + 7, NULL) == 1.23456789f);
  /* snprintf's contract: the length it needs, the text cut to fit. */
  int full = tg_metrics_json(buf, sizeof buf, &r);
  ck_assert_int_eq(full, (int)strlen(buf));
  ck_assert_int_eq(tg_metrics_json(buf, 5, &r), full);
  ck_assert_str_eq(buf, "{\"st");
}
END_TEST

START_TEST(test_write_read) {
  tg_metrics_file *f = tg_metrics_open(path, false, why, sizeof why);
  ck_assert_msg(f, "%s", why);
  tg_metrics_row r = step_row(1, 4.2);
  r.fwd_ms = 10, r.bwd_ms = 20, r.mfu = 0.05;
  ck_assert(tg_metrics_append(f, &r, why, sizeof why));
  /* Each line is in the file as soon as it is written, before any close:
   * what a crash right now would leave. */
  tg_metrics_log log;
  ck_assert(tg_metrics_read(path, &log, why, sizeof why));
  ck_assert_int_eq(log.n, 1);
  tg_metrics_log_free(&log);
  for (int i = 2; i <= 5; i++) {
    r = step_row(i, 4.2 - 0.1 * i);
    ck_assert(tg_metrics_append(f, &r, why, sizeof why));
  }
  r = eval_row(5, 3.6, 3.7);
  r.time = 1795766400.5, r.elapsed_s = 7.25;
  r.hellaswag_acc = 0.5, r.hellaswag_acc_norm = 2.0 / 3, r.hellaswag_n = 6;
  ck_assert(tg_metrics_append(f, &r, why, sizeof why));
  ck_assert(tg_metrics_close(f, why, sizeof why));

  ck_assert(tg_metrics_read(path, &log, why, sizeof why));
  ck_assert_int_eq(log.n, 6);
  ck_assert_int_eq(log.n_bad, 0);
  const tg_metrics_row *a = &log.rows[0];
  ck_assert_int_eq(a->kind, TG_METRICS_STEP);
  ck_assert_int_eq(a->step, 1);
  ck_assert(isnan(a->time) && isnan(a->elapsed_s)); /* absent: a file of a tg before them */
  ck_assert(log.rows[5].time == 1795766400.5 && log.rows[5].elapsed_s == 7.25);
  ck_assert(a->loss == 4.2 && a->lr == 1e-3 && a->grad_norm == 0.5 && a->dt_ms == 40);
  ck_assert(a->fwd_ms == 10 && a->bwd_ms == 20 && a->tok_per_s == 19200 && a->mfu == 0.05);
  ck_assert(isnan(a->val_loss) && isnan(a->train_loss));
  ck_assert(isnan(log.rows[1].fwd_ms) && isnan(log.rows[1].mfu)); /* absent, null */
  ck_assert(log.rows[4].loss == 4.2 - 0.5);
  const tg_metrics_row *e = &log.rows[5];
  ck_assert_int_eq(e->kind, TG_METRICS_EVAL);
  ck_assert_int_eq(e->step, 5);
  ck_assert(e->train_loss == 3.6 && e->val_loss == 3.7 && isnan(e->loss));
  /* HellaSwag's accuracies back as written (9 digits), absent from the rows without them */
  ck_assert(e->hellaswag_acc == 0.5 && fabs(e->hellaswag_acc_norm - 2.0 / 3) < 1e-9 && e->hellaswag_n == 6);
  ck_assert(isnan(a->hellaswag_acc) && a->hellaswag_n == 0);
  tg_metrics_log_free(&log);

  /* A new run starts the file afresh. */
  f = tg_metrics_open(path, false, why, sizeof why);
  ck_assert(tg_metrics_close(f, why, sizeof why));
  ck_assert(tg_metrics_read(path, &log, why, sizeof why));
  ck_assert_int_eq(log.n, 0);
  tg_metrics_log_free(&log);
}
END_TEST

START_TEST(test_torn_line_and_resume) {
  /* A run died in the middle of writing step 4's line. */
  append_raw("{\"step\":1,\"loss\":4.1}\n{\"step\":2,\"loss\":4.0}\n"
             "{\"step\":3,\"loss\":3.9}\n{\"step\":4,\"lo");
  /* It resumes from its checkpoint at step 2: the torn line is cut off
   * (every line stays JSON, for jq and pandas), and steps 3.. come again. */
  tg_metrics_file *f = tg_metrics_open(path, true, why, sizeof why);
  ck_assert_msg(f, "%s", why);
  for (int i = 3; i <= 5; i++) {
    tg_metrics_row r = step_row(i, 5.0 + i);
    ck_assert(tg_metrics_append(f, &r, why, sizeof why));
  }
  tg_metrics_row e = eval_row(5, 1, 2);
  ck_assert(tg_metrics_append(f, &e, why, sizeof why));
  ck_assert(tg_metrics_close(f, why, sizeof why));

  FILE *raw = fopen(path, "r");
  char text[1024];
  size_t tn = fread(text, 1, sizeof text - 1, raw);
  fclose(raw);
  text[tn] = 0;
  ck_assert_ptr_null(strstr(text, "\"lo\n"));
  ck_assert_ptr_null(strstr(text, "\"lo{"));
  tg_metrics_log log;
  ck_assert(tg_metrics_read(path, &log, why, sizeof why));
  ck_assert_int_eq(log.n_bad, 0);
  ck_assert_int_eq(log.n_replaced, 1); /* the first step 3 */
  ck_assert_int_eq(log.n, 6);
  int64_t steps[] = {1, 2, 3, 4, 5, 5};
  double losses[] = {4.1, 4.0, 8, 9, 10};
  for (int i = 0; i < 6; i++) ck_assert_int_eq(log.rows[i].step, steps[i]);
  for (int i = 0; i < 5; i++) ck_assert(log.rows[i].loss == losses[i]);
  ck_assert_int_eq(log.rows[5].kind, TG_METRICS_EVAL);
  tg_metrics_log_free(&log);
}
END_TEST

START_TEST(test_read_tolerates) {
  append_raw("\n"
             "{\"step\":1,\"loss\":3,\"extra\":\"a later field\",\"mfu\":null}\r\n"
             "not json\n"
             "{\"step\":-1,\"loss\":3}\n"                 /* no negative steps */
             "{\"step\":2.5,\"loss\":3}\n"                /* nor fractional ones */
             "{\"loss\":3}\n"                             /* nor none */
             "{\"step\":2,\"loss\":\"3\"}\n"              /* a string for a number */
             "[1,2]\n"
             "{\"step\":2,\"val_loss\":2.5}\n"            /* eval rows need no train_loss */
             "{\"step\":3,\"loss\":2.9}\n");
  tg_metrics_log log;
  ck_assert(tg_metrics_read(path, &log, why, sizeof why));
  ck_assert_int_eq(log.n, 3);
  ck_assert_int_eq(log.n_bad, 6);
  ck_assert_int_eq(log.first_bad, 3);
  ck_assert(log.rows[0].loss == 3 && isnan(log.rows[0].mfu));
  ck_assert_int_eq(log.rows[1].kind, TG_METRICS_EVAL);
  ck_assert(log.rows[1].val_loss == 2.5 && isnan(log.rows[1].train_loss));
  ck_assert_int_eq(log.rows[2].step, 3);
  tg_metrics_log_free(&log);

  ck_assert(!tg_metrics_read("/nonexistent/m.jsonl", &log, why, sizeof why));
  ck_assert_str_eq(why, "cannot open '/nonexistent/m.jsonl': No such file or directory");
  ck_assert_ptr_null(tg_metrics_open("/nonexistent/m.jsonl", false, why, sizeof why));
  ck_assert_str_eq(why, "cannot open '/nonexistent/m.jsonl': No such file or directory");
}
END_TEST

START_TEST(test_console) {
  char buf[256];
  tg_log_columns c = {2000, true, false};
  tg_metrics_row r = step_row(10, 2.5131);
  r.lr = 1e-4, r.grad_norm = 0.812, r.dt_ms = 41.2, r.fwd_ms = 12, r.bwd_ms = 27.1;
  r.tok_per_s = 15872, r.mfu = 0.031;
  tg_log_step_line(buf, sizeof buf, &c, &r);
  ck_assert_str_eq(buf, "step   10/2000 | loss  2.5131 | lr 1.00e-04 | norm  0.812 | dt   41.2 ms "
                        "(fwd  12.0, bwd  27.1) |    15,872 tok/s | mfu  3.1%");
  /* The time since the start and the time left, as a person reads them. */
  const struct {
    double elapsed, eta;
    const char *text;
  } spans[] = {{12, 82.4, " |    12s, eta  1m22s"},         {3599.6, 7260, " |  1h00m, eta  2h01m"},
               {90061, NAN, " |  1d01h, eta      -"},           {0.2, 4e9, " |     0s, eta      -"}};
  for (size_t i = 0; i < sizeof spans / sizeof *spans; i++) {
    r.elapsed_s = spans[i].elapsed, r.eta_s = spans[i].eta;
    tg_log_step_line(buf, sizeof buf, &c, &r);
    const char *tail = strstr(buf, "mfu  3.1%");
    ck_assert_msg(tail && !strcmp(tail + 9, spans[i].text), "%s", buf);
  }
  r.elapsed_s = NAN;
  tg_log_step_line(buf, sizeof buf, &c, &r);
  size_t width = strlen(buf);
  /* Other values, the same columns: GPT-2's first step, an unknown MFU. */
  r.step = 1, r.loss = 10.9876, r.grad_norm = 12.5, r.dt_ms = 1234.5, r.tok_per_s = 1543210;
  r.mfu = NAN, r.fwd_ms = NAN, r.bwd_ms = NAN;
  tg_log_step_line(buf, sizeof buf, &c, &r);
  ck_assert_str_eq(buf, "step    1/2000 | loss 10.9876 | lr 1.00e-04 | norm 12.500 | dt 1234.5 ms "
                        "(fwd     -, bwd     -) | 1,543,210 tok/s | mfu     -");
  ck_assert_uint_eq(strlen(buf), width);
  r.step = 2000, r.loss = NAN, r.mfu = 0.456;
  tg_log_step_line(buf, sizeof buf, &c, &r);
  ck_assert_ptr_nonnull(strstr(buf, "step 2000/2000 | loss     nan |"));
  ck_assert_ptr_nonnull(strstr(buf, "| mfu 45.6%"));
  ck_assert_uint_eq(strlen(buf), width);
  /* A backend without separate timings has no such column. */
  c.fwd_bwd = false;
  tg_log_step_line(buf, sizeof buf, &c, &r);
  ck_assert_ptr_null(strstr(buf, "fwd"));
  ck_assert_ptr_nonnull(strstr(buf, "| dt 1234.5 ms | 1,543,210 tok/s |"));
  r.tok_per_s = 999;
  tg_log_step_line(buf, sizeof buf, &c, &r);
  ck_assert_ptr_nonnull(strstr(buf, "|       999 tok/s |"));
  r.tok_per_s = 1000;
  tg_log_step_line(buf, sizeof buf, &c, &r);
  ck_assert_ptr_nonnull(strstr(buf, "|     1,000 tok/s |"));

  tg_metrics_row e = eval_row(250, 2.1234, 2.2345);
  tg_log_eval_line(buf, sizeof buf, &c, &e);
  ck_assert_str_eq(buf, "step  250/2000 | eval | train loss  2.1234 | val loss  2.2345");
  /* snprintf's contract: the length it needs, the text cut to fit. */
  int need = tg_log_eval_line(buf, 11, &c, &e);
  ck_assert_int_eq(need, (int)strlen("step  250/2000 | eval | train loss  2.1234 | val loss  2.2345"));
  ck_assert_str_eq(buf, "step  250/");
  /* HellaSwag's numbers end the line when it was scored */
  e.hellaswag_acc = 0.2859, e.hellaswag_acc_norm = 0.2955, e.hellaswag_n = 10042;
  tg_log_eval_line(buf, sizeof buf, &c, &e);
  ck_assert_str_eq(buf, "step  250/2000 | eval | train loss  2.1234 | val loss  2.2345 | hellaswag acc 0.2859 "
                        "acc_norm 0.2955 (10042 examples)");
}
END_TEST

START_TEST(test_legend) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  tg_log_columns c = {2000, true, false};
  tg_log_legend(f, &c);
  fclose(f);
  const char *cols[] = {"\n  step ", "\n  loss ", "\n  lr ", "\n  norm ", "\n  dt ", "\n  tok/s ",
                        "\n  mfu ", "fwd and bwd", "peak_flops", "measured sgemm", "\n  eta ", "eval_batches"};
  for (size_t i = 0; i < sizeof cols / sizeof *cols; i++)
    ck_assert_msg(strstr(text, cols[i]), "legend lacks '%s':\n%s", cols[i], text);
  free(text);
  text = NULL;
  f = open_memstream(&text, &len);
  c.fwd_bwd = false;
  tg_log_legend(f, &c);
  fclose(f);
  ck_assert_ptr_null(strstr(text, "fwd"));
  ck_assert_ptr_null(strstr(text, "HellaSwag")); /* only for a run that scores it */
  free(text);
  text = NULL;
  f = open_memstream(&text, &len);
  c.hellaswag = true;
  tg_log_legend(f, &c);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(text, "HellaSwag's acc and acc_norm"));
  free(text);
}
END_TEST

int main(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_mfu);
  tcase_add_test(tc, test_json_lines);
  tcase_add_test(tc, test_write_read);
  tcase_add_test(tc, test_torn_line_and_resume);
  tcase_add_test(tc, test_read_tolerates);
  tcase_add_test(tc, test_console);
  tcase_add_test(tc, test_legend);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
