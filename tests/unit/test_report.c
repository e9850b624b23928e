/* test_report.c: tgc --report html's page as written (report/report.h):
 * self-contained, under 5 MB for GPT-2 124M, every kernel and every CUDA
 * function of the step in it, the pass log filled, and text that could
 * close its <script> escaped; the IR after each pass as the page holds
 * it, and the fingerprint that spares printing it after a pass that
 * changed nothing.  The page in a browser is
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
  tg_program *p = tg_lower_ex(ctx, g, TG_REMAT_ALL);
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

/* The IR after each pass as the page holds it (report.h: tg_ir_history),
 * kept beside the text tg_print_ir prints then. */
typedef struct kept_and_printed {
  tg_ir_history *history;
  char *text[TG_PASS_LOG_MAX];
  uint64_t fingerprint[TG_PASS_LOG_MAX];
  const char *pass[TG_PASS_LOG_MAX];
  int n;
} kept_and_printed;

static void keep_and_print(void *arg, const tg_pass_info *pass, const tg_graph *g) {
  kept_and_printed *k = arg;
  tg_ir_history_keep(k->history, pass->name, g);
  ck_assert_int_lt(k->n, TG_PASS_LOG_MAX);
  k->text[k->n] = tu_print_ir(g);
  k->fingerprint[k->n] = tg_ir_fingerprint(g);
  k->pass[k->n++] = pass->name;
}

static int largest_id(const tg_report_ir *ir, int i) {
  int m = -1;
  for (int j = 0; j <= i; j++) {
    const tg_report_ir *e = &ir[j];
    for (int k = 0; k < e->n_order; k++) m = e->order[k] > m ? e->order[k] : m;
    for (int k = 0; k < e->n_changed; k++)
      for (int x = 0; x < e->changed[k].nin; x++) m = e->changed[k].in[x] > m ? e->changed[k].in[x] : m;
    for (int k = 0; k < e->n_outputs; k++) m = e->outputs[k].id > m ? e->outputs[k].id : m;
  }
  return m;
}

static void put_ref(FILE *f, const int *pos, int id) {
  if (id >= 0 && pos[id] >= 0) fprintf(f, "%%%d", pos[id]);
  else fputs("%?", f);
}

/* The text of the IR after pass i, joined from what the page holds as
 * the page's script joins it (page.js: irText). */
static char *joined(const tg_report_ir *ir, int i) {
  int ids = largest_id(ir, i) + 1, at = -1;
  const tg_report_ir_node **nodes = calloc((size_t)ids + 1, sizeof *nodes);
  int *pos = malloc(((size_t)ids + 1) * sizeof *pos);
  for (int j = 0; j <= i; j++) {
    if (ir[j].same) continue;
    at = j;
    for (int k = 0; k < ir[j].n_changed; k++) nodes[ir[j].changed[k].id] = &ir[j].changed[k];
  }
  ck_assert_int_ge(at, 0);
  const tg_report_ir *e = &ir[at];
  for (int id = 0; id < ids; id++) pos[id] = -1;
  for (int k = 0; k < e->n_order; k++)
    if (e->order[k] >= 0) pos[e->order[k]] = k;
  char *text;
  size_t n;
  FILE *f = open_memstream(&text, &n);
  fputs(e->head, f);
  int phase = 0;
  for (int k = 0; k < e->n_order; k++) {
    if (e->order[k] < 0) {
      fprintf(f, "%%%d = <null>\n", k);
      continue;
    }
    const tg_report_ir_node *c = nodes[e->order[k]];
    ck_assert_msg(c != NULL, "node %d of the IR after %s was never kept", e->order[k], ir[i].pass);
    if (c->phase != phase) fprintf(f, "phase %s\n", tg_phase_name((tg_phase)(phase = c->phase)));
    fprintf(f, "%%%d = %s", k, c->op);
    for (int x = 0; x < c->nin; x++) {
      fputs(x ? ", " : " ", f);
      put_ref(f, pos, c->in[x]);
    }
    fputs(c->middle, f);
    if (e->kernel[k] >= 0) fprintf(f, " in k%d", e->kernel[k]);
    fprintf(f, "%s\n", c->place);
  }
  for (int k = 0; k < e->n_outputs; k++) {
    fprintf(f, "output %s = ", e->outputs[k].name);
    put_ref(f, pos, e->outputs[k].id);
    fputc('\n', f);
  }
  fclose(f);
  free(nodes);
  free(pos);
  return text;
}

/* GPT-2 (2 layers) through every pass, at tp (-D tp=N) and precision:
 * the IR the page holds after each pass opens to what tg_print_ir printed
 * then, and a fingerprint is the last one's exactly when the text is. */
static void check_ir_after_each_pass(const char *tp, tg_precision_policy precision) {
  tg_ctx *ctx = tu_ctx();
  const char *defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "block_size=32", "B=2", "T=32", tp};
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), 7, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  kept_and_printed k = {.history = tg_ir_history_new()};
  tg_pipeline_opts po = {.precision = precision, .grad = true, .step = true, .adamw = tg_adamw_defaults,
                         .pad_multiple = 64, .after_pass = keep_and_print, .after_arg = &k};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL;
  int n;
  const tg_report_ir *ir = tg_ir_history_done(k.history, &n);
  ck_assert_int_eq(n, k.n);
  ck_assert_int_ge(n, 10);
  int unchanged = 0, kept_nodes = 0, printed_nodes = 0;
  for (int i = 0; i < n; i++) {
    ck_assert_str_eq(ir[i].pass, k.pass[i]);
    char *text = joined(ir, i);
    ck_assert_msg(!strcmp(text, k.text[i]), "the IR after %s does not join to what was printed", ir[i].pass);
    free(text);
    if (i > 0) {
      bool same_text = !strcmp(k.text[i], k.text[i - 1]);
      ck_assert_msg(same_text == (k.fingerprint[i] == k.fingerprint[i - 1]),
                    "after %s the text %s but the fingerprint %s", k.pass[i], same_text ? "is the same" : "changed",
                    same_text ? "changed" : "is the same");
      ck_assert_msg(ir[i].same == same_text, "after %s the text %s but the page keeps it %s", k.pass[i],
                    same_text ? "is the same" : "changed", ir[i].same ? "as the same" : "again");
      unchanged += same_text;
    }
    kept_nodes += ir[i].n_changed;
    printed_nodes += ir[i].n_order;
  }
  /* most passes change few nodes: far fewer kept than printed */
  ck_assert_int_lt(2 * kept_nodes, printed_nodes);
  ck_assert_int_ge(unchanged, 2); /* memplan and schedule at least: the fingerprints spared their printing */
  for (int i = 0; i < k.n; i++) free(k.text[i]);
  tg_ir_history_free(k.history);
  tu_ctx_free(ctx);
}

START_TEST(ir_after_each_pass_opens_to_the_text_printed) {
  check_ir_after_each_pass("tp=1", TG_PRECISION_F32);
  check_ir_after_each_pass("tp=1", TG_PRECISION_BF16);
  check_ir_after_each_pass("tp=2", TG_PRECISION_F32); /* shard_tensor splits, replicas adds collectives */
}
END_TEST

/* Each field the text shows changes the fingerprint (and a copy of a
 * graph printed the same has the same one). */
START_TEST(fingerprint_follows_every_printed_field) {
  tg_ctx *ctx = tu_ctx();
  const char *defs[] = {"n_layer=1", "n_embd=64", "n_head=4", "block_size=32", "B=2", "T=32"};
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), 6, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.grad = true, .step = true, .adamw = tg_adamw_defaults, .pad_multiple = 64};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL;
  const uint64_t before = tg_ir_fingerprint(g);
  ck_assert_uint_eq(tg_ir_fingerprint(g), before);
  tg_node *param = NULL, *reduce = NULL, *konst = NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *x = g->nodes[i];
    if (!param && x->op == TG_OP_param) param = x;
    if (!reduce && tg_ops[x->op].attr == TG_ATTR_AXES) reduce = x;
    if (!konst && x->op == TG_OP_const) konst = x;
  }
  ck_assert(param && reduce && konst);
  tg_node *last = g->nodes[g->n_nodes - 1];
  ck_assert_int_gt(last->nin, 0);
  /* one change at a time, each undone after: the text and the fingerprint both change */
#define CHANGES(field, value)                                                                                          \
  do {                                                                                                                 \
    char *text = tu_print_ir(g);                                                                                       \
    __typeof__(field) kept = field;                                                                                    \
    field = value;                                                                                                     \
    char *changed = tu_print_ir(g);                                                                                    \
    ck_assert_msg(strcmp(text, changed), "%s: the text did not change", #field);                                       \
    ck_assert_msg(tg_ir_fingerprint(g) != before, "%s changed the text, not the fingerprint", #field);              \
    field = kept;                                                                                                      \
    ck_assert_uint_eq(tg_ir_fingerprint(g), before);                                                                   \
    free(text);                                                                                                        \
    free(changed);                                                                                                     \
  } while (0)
  CHANGES(last->type.dim[0].size, last->type.dim[0].size + 1);
  CHANGES(last->type.dtype, last->type.dtype == TG_F32 ? TG_BF16 : TG_F32);
  CHANGES(last->loc.line, last->loc.line + 1);
  CHANGES(last->kernel, last->kernel + 1);
  CHANGES(last->phase, last->phase == TG_PHASE_FORWARD ? TG_PHASE_BACKWARD : TG_PHASE_FORWARD);
  CHANGES(reduce->axes, reduce->axes ^ 1u);
  CHANGES(konst->value, konst->value + 0.5);
  CHANGES(param->init.std, param->init.std + 0.01);
  CHANGES(param->name, "another name");
  CHANGES(last->in[0], last->in[last->nin - 1] == last->in[0] ? g->nodes[0] : last->in[last->nin - 1]);
  CHANGES(g->outputs[0].name, "another output");
  CHANGES(g->config[0].value, g->config[0].value + 1);
  CHANGES(g->kernels[0].kind, g->kernels[0].kind == TG_KERNEL_ROW ? TG_KERNEL_ELEMENTWISE : TG_KERNEL_ROW);
  CHANGES(g->n_outputs, g->n_outputs - 1);
#undef CHANGES
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
  tcase_add_test(tc, ir_after_each_pass_opens_to_the_text_printed);
  tcase_add_test(tc, fingerprint_follows_every_printed_field);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(suite()); }
