/* pipeline.c: the compiler's passes, in order, in one visible place.
 *
 * Reading the table below tells what a compilation does after the frontend.
 * Every pass is one file with one entry point; after each, the graph is
 * verified (a broken rewrite is caught at the pass that made it) and, when
 * asked, printed in the IR text form (`tgc --dump-after PASS`). */
#include <string.h>
#include <time.h>

#include "passes.h"

/* Each pass's entry point, called the same way; findings is where it
 * records what it decided (findings.h), or NULL. */
typedef void run_fn(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings);

static void run_pad_vocab(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)findings;
  tg_pad_vocab(ctx, g, o->pad_multiple);
}

static void run_flash_attn(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o;
  tg_flash_attn(ctx, g, findings);
}

static void run_gelu(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o;
  tg_gelu(ctx, g, findings);
}

static void run_decode(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)findings;
  tg_decode(ctx, g, o->decode_positions);
}

static void run_precision(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  tg_apply_precision(ctx, g, o->precision, findings);
}

static void run_weight_copies(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o, (void)findings;
  tg_hoist_param_copies(ctx, g, NULL);
}

static void run_narrow_saved(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o, (void)findings;
  tg_narrow_saved(ctx, g);
}

static void run_shard_tensor(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  if (o->decode && tg_tensor_degree(g) > 1)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "a decode step with a tensor axis (mesh tensor > 1) is not supported yet");
  if (!o->no_tensor_split) tg_shard_tensor(ctx, g, o->tensor_rank, findings);
}

static void run_drop_replicates(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o, (void)findings;
  tg_drop_replicates(ctx, g);
}

static void run_autodiff(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o, (void)findings;
  tg_autodiff(ctx, g);
}

static void run_shard_params(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)findings;
  if (o->step)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "ZeRO stage 3's graphs have their optimizer apart: shard the "
                                             "gradient graph or a forward graph, not the whole step");
  tg_shard_params(ctx, g, o->shard_ranks);
}

static void run_adamw(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)findings;
  tg_append_adamw(ctx, g, &o->adamw, NULL);
}

static void run_split_sums(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o, (void)findings;
  tg_split_sums(ctx, g);
}

static void run_fuse(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o;
  tg_fuse(ctx, g, findings);
}

static void run_memplan(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o;
  tg_memplan(ctx, g, findings);
}

static void run_schedule(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o, tg_findings *findings) {
  (void)o;
  tg_schedule_allreduce(ctx, g, 0, findings);
}

typedef struct pass {
  tg_pass_info info;
  run_fn *run;
} pass;

#define ALWAYS TG_PASS_ALWAYS
#define FOR_GRAD TG_PASS_FOR_GRAD
#define FOR_STEP TG_PASS_FOR_STEP
#define FOR_DECODE TG_PASS_FOR_DECODE
#define FOR_KERNELS TG_PASS_FOR_KERNELS
#define FOR_SHARDS TG_PASS_FOR_SHARDS

/* name, when it runs, the report it writes, what it does; its entry point */
static const pass passes[] = {
    {{"pad_vocab", ALWAYS, NULL, "pads vocabulary dims (--pad-multiple, 64 by default), masks the extra logits"}, run_pad_vocab},
    {{"flash_attn", ALWAYS, TG_REPORT_FLASH_ATTN, "causal self-attention from primitives -> one flash_attention op"}, run_flash_attn},
    {{"gelu", ALWAYS, TG_REPORT_GELU, "GELU's tanh form from primitives -> one gelu op (its derivative: one gelu_grad)"}, run_gelu},
    {{"decode", FOR_DECODE, NULL, "the forward as one decode step with a key/value cache (tgc --decode)"}, run_decode},
    {{"precision", ALWAYS, TG_REPORT_PRECISION, "the mixed-precision policy (--precision bf16; --report precision)"}, run_precision},
    {{"shard_tensor", ALWAYS, TG_REPORT_SHARDING, "tensor parallelism: the forward cut to one rank's parts of the \"shard\" params, with its collectives (--report sharding)"}, run_shard_tensor},
    {{"autodiff", FOR_GRAD, NULL, "the gradient of '" TG_OUTPUT_LOSS "' w.r.t. every parameter"}, run_autodiff},
    {{"replicas", ALWAYS, NULL, "shard_tensor's replicate markers dropped once autodiff has summed their gradients"}, run_drop_replicates},
    {{"weight_copies", ALWAYS, NULL, "precision's bf16 weight casts as copies the optimizer writes once a step"}, run_weight_copies},
    {{"narrow_saved", FOR_GRAD, NULL, "the backward widens the bf16 values it reads, so they are saved bf16"}, run_narrow_saved},
    {{"shard_params", FOR_SHARDS, NULL, "ZeRO stage 3: weights read from shards, all-gathered before use; gradients reduce-scattered"}, run_shard_params},
    {{"adamw", FOR_STEP, NULL, "global-norm clipping and an AdamW step"}, run_adamw},
    {{"split_sums", FOR_GRAD, NULL, "a sum over several axes as two sums (over T, then B), for GPU parallelism"}, run_split_sums},
    {{"fuse", FOR_KERNELS, TG_REPORT_FUSION, "groups the ops into kernels (--report fusion)"}, run_fuse},
    {{"memplan", FOR_KERNELS, TG_REPORT_MEMPLAN, "gives each kernel output a buffer by liveness, reusing memory (--report memplan)"}, run_memplan},
    /* FOR_GRAD, not FOR_KERNELS: a forward graph has no gradients to reduce */
    {{"schedule", FOR_GRAD, TG_REPORT_SCHEDULE, "buckets of gradients, each all-reduced right after its last gradient (--report schedule)"}, run_schedule},
};
enum { N_PASSES = sizeof passes / sizeof passes[0] };

const tg_pass_info *tg_pass_at(int i) { return i >= 0 && i < N_PASSES ? &passes[i].info : NULL; }

const tg_pass_info *tg_pass_named(const char *name) {
  for (int i = 0; i < N_PASSES; i++)
    if (!strcmp(passes[i].info.name, name)) return &passes[i].info;
  return NULL;
}

const tg_pass_info *tg_pass_writing(const char *report) {
  for (int i = 0; i < N_PASSES; i++)
    if (passes[i].info.report && !strcmp(passes[i].info.report, report)) return &passes[i].info;
  return NULL;
}

bool tg_pass_for_training(const tg_pass_info *p) {
  return p->when == FOR_GRAD || p->when == FOR_STEP || p->when == FOR_KERNELS;
}

static bool runs(const tg_pass_info *p, const tg_pipeline_opts *o) {
  switch (p->when) {
  case FOR_GRAD: return o->grad;
  case FOR_STEP: return o->step;
  case FOR_DECODE: return o->decode;
  case FOR_KERNELS: return o->grad || o->kernels;
  case FOR_SHARDS: return o->shard_ranks > 1;
  default: return true;
  }
}

void tg_run_pipeline(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *o) {
  if (o->decode && o->grad)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "a decode step has no gradient: ask for one or the other");
  for (int i = 0; i < N_PASSES; i++) {
    const tg_pass_info *p = &passes[i].info;
    if (!runs(p, o)) continue;
    /* the report asked for is printed as soon as its pass is done (a later
     * pass that fails leaves it printed); its findings go to a sink of
     * their own when no one collects them all */
    bool asked = p->report && o->report && o->report_name && !strcmp(o->report_name, p->report);
    tg_findings *findings = o->findings ? o->findings : asked ? tg_findings_new(ctx->arena) : NULL;
    /* logged before it runs, finished after: a pass that bails stays last, unfinished */
    bool logged = o->log && o->log->n < TG_PASS_LOG_MAX;
    struct timespec t0, t1;
    if (logged) {
      o->log->at[o->log->n++] = (tg_pass_record){p->name, g->n_nodes, 0, 0, -1};
      clock_gettime(CLOCK_MONOTONIC, &t0);
    }
    passes[i].run(ctx, g, o, findings);
    if (!tg_verify(ctx, g))
      tg_error(ctx, (tg_loc){g->source, 1, 1}, "the graph is broken after the %s pass", p->name);
    if (asked) tg_findings_print(o->report, findings, p->name);
    if (logged) {
      clock_gettime(CLOCK_MONOTONIC, &t1);
      tg_pass_record *r = &o->log->at[o->log->n - 1];
      r->nodes_after = g->n_nodes;
      r->kernels_after = g->n_kernels;
      r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    if (o->after_pass) o->after_pass(o->after_arg, p, g); /* not in the pass's time */
    if (o->dump_after && !strcmp(o->dump_after, p->name) && o->dump) {
      /* The dump reads back with tgc; the comment goes last, since the first
       * line must be the IR header. */
      tg_print_ir(o->dump, g);
      fprintf(o->dump, "# the IR above is after the %s pass: %s\n", p->name, p->what);
    }
  }
}
