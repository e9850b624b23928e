/* test_report.c: tgc --report html's page as written (report/report.h):
 * self-contained, under 5 MB for GPT-2 124M, every kernel and every CUDA
 * function of the step in it, the pass log filled, and text that could
 * close its <script> escaped.  The page in a browser is
 * tests/report/check_page.py's. */
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "passes.h"
#include "report.h"
#include "testutil.h"
#include "traffic.h"

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *at = strstr(s, what); at; at = strstr(at + 1, what)) n++;
  return n;
}

/* GPT-2 at the given -D overrides, compiled as tgc --report html does:
 * bf16, the whole step with its pass log and every pass's findings,
 * lowered for CUDA, planned and its traffic counted; then the page,
 * written into a string. */
static char *gpt2_page(tg_ctx *ctx, int n_defs, const char *const *defs, tg_pass_log *log, size_t *size,
                       const tg_program **program) {
  tg_findings *findings = tg_findings_new(ctx->arena);
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), n_defs, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("compiling failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.precision = TG_PRECISION_BF16, .grad = true, .step = true, .adamw = tg_adamw_defaults,
                         .pad_multiple = 64, .log = log, .findings = findings};
  tg_run_pipeline(ctx, g, &po);
  tg_program *p = tg_lower_ex(ctx, g, true);
  tg_cuda_plan *plan = tg_cuda_plan_make(g->arena, p);
  const tg_cuda_kernels *ks = tg_cuda_kernels_make(g->arena, p, plan);
  ctx->bail = NULL;
  /* a reason that could close the data's <script> */
  tg_find(findings, "fuse", "stop", 0, (tg_loc){0}, "</script><b>");
  tg_report_page page = {.model = "models/gpt2.tg", .command = "tgc models/gpt2.tg --report html -o out",
                         .precision = "bf16", .sources = ctx->sources, .passes = log, .g = g, .p = p, .plan = plan,
                         .ks = ks, .traffic = tg_traffic_count(g->arena, plan, tg_gpu_find("h100")),
                         .findings = findings, .ir_pass = "fuse",
                         .ir_text = "# tg IR 1 </script>\n"};
  page.phases[page.n_phases++] = (tg_report_phase){"frontend", 0.01};
  char *s = NULL;
  FILE *f = open_memstream(&s, size);
  ck_assert_ptr_nonnull(f);
  tg_report_html(f, &page);
  fclose(f);
  *program = p;
  /* the step for Graphviz: GPT-2's 12 layers as runs drawn once */
  char *dot = NULL;
  size_t dot_size;
  f = open_memstream(&dot, &dot_size);
  int nodes = tg_report_step_dot(f, &page);
  fclose(f);
  ck_assert_int_lt(nodes, p->n_kernels / 4);
  ck_assert_int_ge(count(dot, "shape=box3d"), 2); /* the forward's and the backward's layers */
  ck_assert_int_ge(count(dot, "label=\"×12: k"), 2);
  ck_assert_int_eq(count(dot, "[id="), nodes);
  ck_assert_ptr_nonnull(strstr(dot, "k0 -> "));
  free(dot);
  return s;
}

START_TEST(gpt2_124m_page_is_whole_and_self_contained) {
  tg_ctx *ctx = tu_ctx();
  tg_pass_log log = {0};
  size_t size;
  const tg_program *p;
  char *page = gpt2_page(ctx, 0, NULL, &log, &size, &p);
  ck_assert_msg(size < 5u << 20, "the page of GPT-2 124M is %zu bytes, over 5 MB", size);
  ck_assert_uint_gt(size, 10000);
  /* nothing fetched at view time: the only URL is the SVG namespace, a name */
  ck_assert_int_eq(count(page, "http"), count(page, "http://www.w3.org/2000/svg"));
  ck_assert_int_eq(count(page, " src="), 0);
  ck_assert_int_eq(count(page, "url("), 0);
  ck_assert_int_eq(count(page, "@import"), 0);
  ck_assert_int_eq(count(page, "<link"), count(page, "<link rel=\"icon\" href=\"data:,\">"));
  /* the text given cannot close the data's <script>: two scripts, each closed once */
  ck_assert_int_eq(count(page, "</script>"), 2);
  ck_assert_int_eq(count(page, "<script"), 2);
  ck_assert_ptr_nonnull(strstr(page, "\"ir_pass\": \"fuse\", \"ir\": \"# tg IR 1 \\u003c/script>\\n\""));
  ck_assert_ptr_nonnull(strstr(page, "\"collectives\": []")); /* no ZeRO: the all-reduces are buckets */
  ck_assert_ptr_nonnull(strstr(page, "\"buckets\": [["));
  ck_assert_ptr_nonnull(strstr(page, "\"runs\": [[0, ")); /* from the first kernel (the layers: tg_report_step_dot's checks) */
  ck_assert_ptr_nonnull(strstr(page, "\"fuse\", \"stop\", 0, -1, 0, 0, \"\\u003c/script>\\u003cb>\", {}]"));
  /* the passes' findings: one per kernel, per buffer, per bucket, and
   * every value's precision (bf16) */
  const tg_graph *g = p->g;
  ck_assert_int_eq(count(page, "[\"fuse\", \"kernel\", "), g->n_kernels);
  ck_assert_int_eq(count(page, "[\"memplan\", \"buffer\", "), g->memplan->n_buffers);
  ck_assert_int_eq(count(page, "[\"schedule\", \"bucket\", "), g->allreduce->n_buckets);
  ck_assert_int_gt(count(page, "[\"precision\", \"value\", "), 500);
  ck_assert_int_eq(count(page, "[\"flash_attn\", \"matched\", "), 12);
  /* every kernel of the program, by number and name */
  for (int i = 0; i < p->n_kernels; i++) {
    char want[512];
    snprintf(want, sizeof want, "{\"id\": %d, \"name\": \"%s\"", p->kernels[i].kernel,
             p->g->kernels[p->kernels[i].kernel].name);
    ck_assert_msg(strstr(page, want), "kernel k%d is not on the page", p->kernels[i].kernel);
  }
  ck_assert_int_gt(p->n_kernels, 100);
  /* every pass that ran, logged with its sizes; the last is schedule */
  ck_assert_int_ge(log.n, 10);
  ck_assert_str_eq(log.at[log.n - 1].name, "schedule");
  for (int i = 0; i < log.n; i++) {
    ck_assert_msg(log.at[i].seconds >= 0, "pass %s did not finish in the log", log.at[i].name);
    char want[128];
    snprintf(want, sizeof want, "{\"name\": \"%s\"", log.at[i].name);
    ck_assert_msg(strstr(page, want), "pass %s is not on the page", log.at[i].name);
  }
  ck_assert_int_lt(log.at[0].nodes_before, log.at[log.n - 1].nodes_after); /* the gradient and optimizer grew it */
  ck_assert_int_gt(log.at[log.n - 1].kernels_after, 0);
  free(page);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(error_page_shows_the_error_escaped) {
  tg_ctx *ctx = tu_ctx();
  tg_pass_log log = {.n = 1, .at = {{"pad_vocab", 10, 10, 0, -1}}};
  tg_report_page page = {.model = "bad.tg", .command = "tgc bad.tg --report html -o out", .precision = "f32",
                         .sources = ctx->sources, .passes = &log,
                         .error = "bad.tg:2:14: error: unknown name '</script>'\n    2 | x\n      | ^\n"};
  char *s = NULL;
  size_t n;
  FILE *f = open_memstream(&s, &n);
  tg_report_html(f, &page);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(s, "bad.tg:2:14: error: unknown name '\\u003c/script>'"));
  ck_assert_ptr_nonnull(strstr(s, "{\"name\": \"pad_vocab\""));
  ck_assert_ptr_nonnull(strstr(s, "<title>tg: bad.tg (error)</title>"));
  ck_assert_int_eq(count(s, "</script>"), 2);
  ck_assert_ptr_null(strstr(s, "\"kernels\": [")); /* nothing of a step that was not made */
  free(s);
  tu_ctx_free(ctx);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("report");
  TCase *tc = tcase_create("page");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, gpt2_124m_page_is_whole_and_self_contained);
  tcase_add_test(tc, error_page_shows_the_error_escaped);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(suite()); }
