/* pipeline.c: the compiler's passes, in order, in one visible place.
 *
 * Reading the table below tells what a compilation does after the frontend.
 * Every pass is one file with one entry point; after each, the graph is
 * verified (a broken rewrite is caught at the pass that made it) and, when
 * asked, printed in the IR text form (`tgc --dump-after PASS`). */
#include <string.h>

#include "passes.h"

static void run_pad_vocab(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  tg_pad_vocab(ctx, g, o->pad_multiple);
}

static void run_flash_attn(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  bool asked = o->report_pass && !strcmp(o->report_pass, "flash_attn");
  tg_flash_attn(ctx, g, asked ? o->report : NULL);
}

static void run_gelu(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  bool asked = o->report_pass && !strcmp(o->report_pass, "gelu");
  tg_gelu(ctx, g, asked ? o->report : NULL);
}

static void run_decode(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  (void)o;
  tg_decode(ctx, g);
}

static void run_precision(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  bool asked = o->report_pass && !strcmp(o->report_pass, "precision");
  tg_apply_precision(ctx, g, o->precision, asked ? o->report : NULL);
}

static void run_weight_copies(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  (void)o;
  tg_hoist_param_copies(ctx, g, NULL);
}

static void run_narrow_saved(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  (void)o;
  tg_narrow_saved(ctx, g);
}

static void run_autodiff(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  (void)o;
  tg_autodiff(ctx, g);
}

static void run_adamw(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  tg_append_adamw(ctx, g, &o->adamw, NULL);
}

static void run_split_sums(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  (void)o;
  tg_split_sums(ctx, g);
}

static void run_fuse(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  bool asked = o->report_pass && !strcmp(o->report_pass, "fusion");
  tg_fuse(ctx, g, asked ? o->report : NULL);
}

static void run_memplan(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  bool asked = o->report_pass && !strcmp(o->report_pass, "memplan");
  tg_memplan(ctx, g, asked ? o->report : NULL);
}

static void run_schedule(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  bool asked = o->report_pass && !strcmp(o->report_pass, "schedule");
  tg_schedule_allreduce(ctx, g, 0, asked ? o->report : NULL);
}

/* When a pass runs: always, only when the gradient (or the whole training
 * step) is asked for, or only for a decode step. */
typedef enum when { ALWAYS, FOR_GRAD, FOR_STEP, FOR_DECODE } when;

typedef struct pass {
  const char *name;
  when when;
  void (*run)(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o);
  const char *what;
} pass;

static const pass passes[] = {
    {"pad_vocab", ALWAYS, run_pad_vocab, "pads vocabulary dims (--pad-multiple, 64 by default), masks the extra logits"},
    {"flash_attn", ALWAYS, run_flash_attn, "causal self-attention from primitives -> one flash_attention op"},
    {"gelu", ALWAYS, run_gelu, "GELU's tanh form from primitives -> one gelu op (its derivative: one gelu_grad)"},
    {"decode", FOR_DECODE, run_decode, "the forward as one decode step with a key/value cache (tgc --decode)"},
    {"precision", ALWAYS, run_precision, "the mixed-precision policy (--precision bf16; --report precision)"},
    {"autodiff", FOR_GRAD, run_autodiff, "the gradient of 'loss' w.r.t. every parameter"},
    {"weight_copies", ALWAYS, run_weight_copies, "precision's bf16 weight casts as copies the optimizer writes once a step"},
    {"narrow_saved", FOR_GRAD, run_narrow_saved, "the backward widens the bf16 values it reads, so they are saved bf16"},
    {"adamw", FOR_STEP, run_adamw, "global-norm clipping and an AdamW step"},
    {"split_sums", FOR_GRAD, run_split_sums, "a sum over several axes as two sums (over T, then B), for GPU parallelism"},
    {"fuse", FOR_GRAD, run_fuse, "groups the ops into kernels (--report fusion)"},
    {"memplan", FOR_GRAD, run_memplan, "gives each kernel output a buffer by liveness, reusing memory (--report memplan)"},
    {"schedule", FOR_GRAD, run_schedule, "buckets of gradients, each all-reduced right after its last gradient (--report schedule)"},
};
enum { N_PASSES = sizeof passes / sizeof passes[0] };

const char *tg_pass_name(int i) { return i >= 0 && i < N_PASSES ? passes[i].name : NULL; }
const char *tg_pass_what(int i) { return i >= 0 && i < N_PASSES ? passes[i].what : NULL; }

bool tg_pass_known(const char *name) {
  for (int i = 0; i < N_PASSES; i++)
    if (!strcmp(passes[i].name, name)) return true;
  return false;
}

bool tg_pass_needs_decode(const char *name) {
  for (int i = 0; i < N_PASSES; i++)
    if (!strcmp(passes[i].name, name)) return passes[i].when == FOR_DECODE;
  return false;
}

bool tg_pass_needs_step(const char *name) {
  for (int i = 0; i < N_PASSES; i++)
    if (!strcmp(passes[i].name, name)) return passes[i].when == FOR_GRAD || passes[i].when == FOR_STEP;
  return false;
}

void tg_run_pipeline(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  if (o->decode && o->grad)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "a decode step has no gradient: ask for one or the other");
  for (int i = 0; i < N_PASSES; i++) {
    const pass *p = &passes[i];
    bool kernels = o->kernels && (!strcmp(p->name, "fuse") || !strcmp(p->name, "memplan"));
    if (!strcmp(p->name, "schedule") && !o->grad) continue; /* no gradients to reduce */
    if (p->when == FOR_DECODE && !o->decode) continue;
    if (!kernels && ((p->when == FOR_GRAD && !o->grad) || (p->when == FOR_STEP && !o->step))) continue;
    p->run(ctx, g, o);
    if (!tg_verify(ctx, g))
      tg_error(ctx, (tg_loc){g->source, 1, 1}, "the graph is broken after the %s pass", p->name);
    if (o->dump_after && !strcmp(o->dump_after, p->name) && o->dump) {
      /* The dump reads back with tgc; the comment goes last, since the first
       * line must be the IR header. */
      tg_print_ir(o->dump, g);
      fprintf(o->dump, "# the IR above is after the %s pass: %s\n", p->name, p->what);
    }
  }
}
