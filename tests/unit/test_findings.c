/* test_findings.c: the sink of the passes' decisions and its text
 * renderer (passes/findings.h, findings.c, findings_text.c).
 *
 * GPT-2's fusion report rendered from the fuse pass's findings is
 * tests/golden/fusion_2layer.txt byte for byte (what `tgc --report fusion`
 * printed before the passes recorded findings); the sink keeps its
 * findings and fields in order, copies its strings, records nothing
 * without a sink; the renderers compute what the text shows from the
 * findings alone: the ten largest buffers, the tensor axis's heading and
 * total, a bucket's gradients. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "testutil.h"

/* The text the renderer writes for pass, malloc'ed. */
static char *render(const tg_findings *s, const char *pass) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert(tg_findings_print(f, s, pass));
  fclose(f);
  return text;
}

START_TEST(gpt2_fusion_findings_render_as_the_golden_report) {
  tg_ctx *ctx = tu_ctx();
  static const char *const defs[] = {"n_layer=2"};
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), 1, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  /* as tgc --report fusion compiles: the f32 training step */
  tg_findings *s = tg_findings_new(ctx->arena);
  tg_pipeline_opts po = {.grad = true, .step = true, .adamw = tg_adamw_defaults,
                         .pad_multiple = TG_PAD_MULTIPLE_DEFAULT, .findings = s};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL;
  /* every pass that explains itself recorded, in pipeline order */
  const char *order[] = {"flash_attn", "gelu", "precision", "shard_tensor", "fuse", "memplan", "schedule"};
  int at = 0;
  for (int i = 0; i < tg_findings_count(s); i++) {
    const tg_finding *f = tg_findings_at(s, i);
    while (at < 7 && strcmp(f->pass, order[at])) at++;
    ck_assert_msg(at < 7, "finding %d of pass %s is out of the pipeline's order", i, f->pass);
  }
  for (int p = 0; p < 7; p++) ck_assert_msg(tg_findings_of(s, order[p]), "%s recorded nothing", order[p]);
  char *text = render(s, "fuse");
  size_t size;
  char *golden = tu_slurp(tu_path("tests/golden/fusion_2layer.txt"), &size);
  ck_assert_ptr_nonnull(golden);
  size_t same = 0;
  while (text[same] && text[same] == golden[same]) same++;
  ck_assert_msg(!text[same] && !golden[same], "the fusion report differs from the golden one at byte %zu: \"%.80s\" "
                "where the golden has \"%.80s\"", same, text + same, golden + same);
  /* a kernel's finding holds the kernel as the graph has it */
  int kernels = 0;
  for (int i = 0; i < tg_findings_count(s); i++) {
    const tg_finding *f = tg_findings_at(s, i);
    if (strcmp(f->pass, "fuse") || strcmp(f->verdict, "kernel")) continue;
    const tg_kernel *K = &g->kernels[kernels];
    ck_assert_int_eq((int)tg_finding_number(f, "kernel"), kernels);
    ck_assert_str_eq(tg_finding_str(f, "name"), K->name);
    ck_assert_int_eq((int)tg_finding_number(f, "ops"), K->n_nodes);
    ck_assert_int_eq(f->node, K->nodes[0]);
    kernels++;
  }
  ck_assert_int_eq(kernels, g->n_kernels);
  free(golden);
  free(text);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(sink_keeps_findings_fields_and_copies) {
  tg_ctx *ctx = tu_ctx();
  /* no sink: nothing recorded, and the setters take the NULL */
  tg_finding *none = tg_find(NULL, "fuse", "stop", 1, (tg_loc){0}, "why");
  ck_assert_ptr_null(none);
  tg_finding_num(NULL, none, "kernel", 3);
  tg_finding_text(NULL, none, "op", "add");
  tg_findings *s = tg_findings_new(ctx->arena);
  char reason[32], name[32];
  /* past the first list (64 findings) and the first fields (8) */
  for (int i = 0; i < 200; i++) {
    snprintf(reason, sizeof reason, "reason %d", i);
    tg_finding *f = tg_find(s, "memplan", "buffer", i, (tg_loc){"m.tg", i + 1, 2}, reason);
    for (int k = 0; k < 12; k++) {
      snprintf(name, sizeof name, "n%d", k);
      tg_finding_num(s, f, name, i * 100 + k);
    }
    tg_finding_text(s, f, "op", i % 2 ? "add" : "mul");
    tg_finding_text(s, f, "absent", NULL);
    strcpy(reason, "overwritten");
  }
  ck_assert_int_eq(tg_findings_count(s), 200);
  ck_assert_ptr_null(tg_findings_at(s, 200));
  for (int i = 0; i < 200; i++) {
    const tg_finding *f = tg_findings_at(s, i);
    snprintf(reason, sizeof reason, "reason %d", i);
    ck_assert_str_eq(f->reason, reason);
    ck_assert_int_eq(f->node, i);
    ck_assert_int_eq(f->loc.line, i + 1);
    ck_assert_int_eq(f->n_fields, 13);
    ck_assert_int_eq((int)tg_finding_number(f, "n11"), i * 100 + 11);
    ck_assert_str_eq(tg_finding_str(f, "op"), i % 2 ? "add" : "mul");
    ck_assert(!tg_finding_has(f, "absent"));
    ck_assert_ptr_null(tg_finding_str(f, "n0")); /* a number, not a text */
  }
  ck_assert(tg_findings_of(s, "memplan"));
  ck_assert(!tg_findings_of(s, "fuse"));
  ck_assert(!tg_findings_print(stdout, s, "autodiff")); /* no report of its own */
  tu_ctx_free(ctx);
}
END_TEST

static tg_finding *buffer(tg_findings *s, int node, double bytes) {
  tg_finding *f = tg_find(s, "memplan", "buffer", node, (tg_loc){"models/x.tg", node, 1}, NULL);
  tg_finding_text(s, f, "op", "add");
  tg_finding_num(s, f, "bytes", bytes);
  tg_finding_num(s, f, "offset", 256.0 * node);
  tg_finding_num(s, f, "first", node);
  tg_finding_num(s, f, "last", node == 11 ? -1 : node + 1);
  return f;
}

START_TEST(renderers_compute_what_the_text_shows) {
  tg_ctx *ctx = tu_ctx();
  tg_findings *s = tg_findings_new(ctx->arena);
  tg_finding *sum = tg_find(s, "memplan", "summary", -1, (tg_loc){0}, NULL);
  tg_finding_num(s, sum, "buffers", 12);
  tg_finding_num(s, sum, "live_bytes", 20000);
  /* twelve buffers, sizes not in order: the ten largest, larger first */
  for (int i = 0; i < 12; i++) {
    tg_finding *f = buffer(s, i, 1000.0 + (i * 7 % 12));
    if (i == 11) tg_finding_text(s, f, "into", "w"); /* an assign's buffer, named by its leaf */
  }
  char *text = render(s, "memplan");
  ck_assert_ptr_nonnull(strstr(text, "memplan: 12 buffers; at most 20.0 kB live at once"));
  ck_assert_ptr_nonnull(strstr(text, "memplan: the 10 largest:\nmemplan:   1011 B  %5 add (x.tg:5)\n"
                                     "memplan:   1010 B  %10 add (x.tg:10)\n"));
  ck_assert_ptr_null(strstr(text, "memplan:   1000 B")); /* %0, the smallest, is not among them */
  ck_assert_ptr_nonnull(strstr(text, "memplan: %11 add into \"w\" (x.tg:11): 1005 B at 0xb00, live k11..end\n"));
  free(text);
  /* the tensor axis's collectives: a heading before the first, the total after the last */
  for (int i = 0; i < 2; i++) {
    tg_finding *c = tg_find(s, "schedule", "collective", 40 + i, (tg_loc){"models/x.tg", 7, 3}, NULL);
    tg_finding_num(s, c, "kernel", 3 + i);
    tg_finding_text(s, c, "phase", "forward");
    tg_finding_text(s, c, "op", "all_reduce");
    tg_finding_num(s, c, "numel", 8);
    tg_finding_text(s, c, "dtype", "f32");
    tg_finding_num(s, c, "sent", 16.0 * (i + 1));
    tg_finding_num(s, c, "ranks", 2);
  }
  text = render(s, "schedule");
  ck_assert_str_eq(text, "collective: tensor parallelism over 2 ranks (passes/shard_tensor.c): each collective of the "
                         "tensor axis in run order, the bytes a rank sends on a ring\n"
                         "collective: k3 forward all_reduce of 8 f32 values, 16 bytes sent per rank (models/x.tg:7)\n"
                         "collective: k4 forward all_reduce of 8 f32 values, 32 bytes sent per rank (models/x.tg:7)\n"
                         "collective: tensor axis total per micro-step per rank: 2 collectives, 48 bytes sent over 2 "
                         "ranks\n");
  free(text);
  tu_ctx_free(ctx);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("findings");
  TCase *tc = tcase_create("findings");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, gpt2_fusion_findings_render_as_the_golden_report);
  tcase_add_test(tc, sink_keeps_findings_fields_and_copies);
  tcase_add_test(tc, renderers_compute_what_the_text_shows);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run(suite()); }
