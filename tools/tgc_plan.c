/* tgc_plan.c: `tgc MODEL --plan-parallel --devices N`: which parallel
 * layout trains a model fastest on N devices, and why (docs/parallel.md's
 * "The planner").
 *
 * It enumerates the layouts: a tensor degree t dividing N (the model's
 * "mesh tensor = tp"; t = 1 for a model without one), the data ranks N / t,
 * a ZeRO stage 0 to 3 over them, and a micro-batch b with the
 * accumulation that keeps the step's tokens those of plain data
 * parallelism at the model's B (B x T x N).  For each (t, b) it compiles
 * the model's training step as one rank of it runs it and reads off what
 * the compiler counts:
 *   - memory per rank: the ZeRO plan of that step (parameters, copies,
 *     gradients, moments at the stage, over N / t ranks, and the planned
 *     activations: passes/zero_plan.c), plus 1 GiB for the CUDA context
 *     and cuBLASLt's workspace; a layout over the device's memory is
 *     refused, with its need;
 *   - compute: the traffic report's roofline of one micro-step on the GPU
 *     (codegen/cuda/traffic.c), times the accumulation;
 *   - communication, from the bytes a rank sends on a ring (the schedule
 *     report's counts) over a link's one-direction bandwidth: the tensor
 *     axis's all-reduces every micro-step, on the critical path (each
 *     result is the next kernel's input); the data ranks' collectives once
 *     a step (stages 2 and 3: every micro-step), overlapping the last
 *     micro-step's backward (two thirds of its compute).
 * The tensor axis sits within a node (Megatron's placement) on NVLink
 * when t <= --devices-per-node; the data axis crosses nodes on --link
 * unless all N devices are one node on NVLink.  The link bandwidths are
 * public figures: NVLink 4 (H100 SXM) 450 GB/s a direction, InfiniBand
 * NDR 400 Gb/s = 50 GB/s a GPU (one HCA each, as in a DGX H100), 100 GbE
 * 12.5 GB/s.
 *
 * The layouts are ranked by estimated step time; ties (within 1%) go to
 * the simpler one (less tensor parallelism, a lower stage). */
#include "tgc_plan.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "cuda_plan.h"
#include "frontend.h"
#include "lower.h"
#include "passes.h"
#include "traffic.h"

enum { MAX_ROWS = 512 };
#define GIB (1024.0 * 1024.0 * 1024.0)
#define CONTEXT_BYTES GIB /* the CUDA context and cuBLASLt's workspace */

static const tgc_plan_link links[] = {
    {"nvlink", "NVLink 4 (H100 SXM), 450 GB/s a direction", 450e9},
    {"ib", "InfiniBand NDR, 400 Gb/s = 50 GB/s a GPU", 50e9},
    {"ethernet", "100 GbE, 12.5 GB/s a device", 12.5e9},
};

typedef struct row {
  int tp, dp, stage, micro, accum;
  double mem, compute, tensor_comm, data_comm, exposed, step;
  const char *refused; /* why it cannot run, or NULL */
} row;

/* One rank's training step at tensor degree tp and micro-batch b, compiled
 * as tgrun compiles it; NULL with the compiler's message in *why. */
static tg_graph *compile_step(tg_ctx *ctx, const tgc_plan_opts *o, int tp, int b, bool mesh) {
  tg_define *d = tg_alloc(ctx->arena, sizeof *d * (size_t)(o->n_defines + 2));
  int n = 0;
  for (int i = 0; i < o->n_defines; i++) d[n++] = o->defines[i];
  d[n++] = (tg_define){"B", (double)b, true, "the planner's micro-batch"};
  if (mesh) d[n++] = (tg_define){"tp", (double)tp, true, "the planner's tensor degree"};
  tg_compile_opts co = {d, n, o->include_dirs, o->n_include_dirs};
  tg_graph *g = tg_compile_file(ctx, o->model, &co);
  if (!tg_verify(ctx, g)) tg_bail(ctx);
  tg_pipeline_opts po = {.precision = o->precision, .grad = true, .step = true, .adamw = tg_adamw_defaults,
                         .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(ctx, g, &po);
  return g;
}

static double roofline_seconds(tg_ctx *ctx, tg_graph *g, const tg_gpu_spec *gpu) {
  const tg_program *p = tg_lower_ex(ctx, g, TG_REMAT_ALL);
  tg_cuda_plan *plan = tg_cuda_plan_make(g->arena, p);
  tg_cuda_kernels_make(g->arena, p, plan);
  return tg_traffic_count(g->arena, plan, gpu)->seconds;
}

/* The rows of one compiled (tp, micro-batch) step: one per ZeRO stage.
 * Errors bail through ctx. */
static int fill_rows(tg_ctx *ctx, const tgc_plan_opts *o, int tp, int b, int accum, bool mesh, row *out) {
  int n = 0, dp = o->devices / tp;
  tg_graph *g = compile_step(ctx, o, tp, b, mesh);
  double compute = roofline_seconds(ctx, g, o->gpu);
  int ntc;
  double tensor_bytes = tg_tensor_collective_bytes(g, &ntc);
  double tensor_bw = tp <= o->devices_per_node ? links[0].bytes_per_s : o->link->bytes_per_s;
  double data_bw = o->devices <= o->devices_per_node && o->link == &links[0] ? links[0].bytes_per_s
                                                                              : o->link->bytes_per_s;
  char why[256];
  for (int stage = 0; stage <= 3; stage++) {
    if (dp == 1 && stage > 0) break;
    tg_zero_plan zp;
    tg_collective_plan cp;
    if (!tg_zero_plan_make(ctx, g, dp, stage, &zp, why, sizeof why) ||
        !tg_collectives_plan(g, dp, stage, &cp, why, sizeof why))
      tg_error(ctx, (tg_loc){o->model, 1, 1}, "the planner: %s", why);
    row *r = &out[n++];
    *r = (row){.tp = tp, .dp = dp, .stage = stage, .micro = b, .accum = accum};
    r->mem = (double)zp.peak_bytes + CONTEXT_BYTES;
    r->compute = compute * accum;
    r->tensor_comm = tensor_bytes / tensor_bw * accum;
    r->data_comm = (double)cp.bytes_sent / data_bw * (stage >= 2 ? accum : 1);
    double overlap = compute * 2.0 / 3.0;
    r->exposed = r->data_comm > overlap ? r->data_comm - overlap : 0;
    r->step = r->compute + r->tensor_comm + r->exposed;
    if (r->mem > o->device_bytes)
      r->refused = tg_sprintf(o->arena, "does not fit: needs %.1f GB a device, over its %g GB", r->mem / 1e9,
                              o->device_bytes / 1e9);
  }
  return n;
}

/* The rows of one (tp, micro-batch); a model that cannot be split tp ways
 * (or does not compile) adds one refused row with the compiler's message. */
static int rows_of(const tgc_plan_opts *o, int tp, int b, int accum, bool mesh, row *out) {
  tg_ctx *ctx = tg_ctx_new(NULL);
  char *msg = NULL;
  size_t msg_len = 0;
  ctx->err = open_memstream(&msg, &msg_len);
  jmp_buf bail;
  ctx->bail = &bail;
  int n = 0;
  if (!setjmp(bail)) {
    n = fill_rows(ctx, o, tp, b, accum, mesh, out);
  } else {
    fflush(ctx->err);
    char *nl = msg ? strchr(msg, '\n') : NULL;
    if (nl) *nl = 0;
    const char *at = msg && strstr(msg, "error: ") ? strstr(msg, "error: ") + 7 : "the model does not compile";
    out[0] = (row){.tp = tp, .dp = o->devices / tp, .micro = b, .accum = accum, .refused = tg_strdup(o->arena, at)};
    n = 1;
  }
  fclose(ctx->err);
  ctx->err = NULL;
  free(msg);
  tg_ctx_free(ctx);
  return n;
}

static int by_step(const void *pa, const void *pb) {
  const row *a = pa, *b = pb;
  if (!!a->refused != !!b->refused) return a->refused ? 1 : -1;
  if (a->refused) return 0;
  if (a->step < b->step * 0.99 || a->step > b->step * 1.01) return a->step < b->step ? -1 : 1;
  if (a->tp != b->tp) return a->tp - b->tp;
  if (a->stage != b->stage) return a->stage - b->stage;
  return b->micro - a->micro;
}

/* Why a layout is slower than the best, by the largest of its costs. */
static const char *reason(const tgc_plan_opts *o, const row *r, const row *best) {
  if (r->refused) return r->refused;
  if (r == best) return "the fastest estimate";
  if (r->step <= best->step * 1.01)
    return r->stage > best->stage ? "as fast, a higher ZeRO stage: memory the choice does not need"
           : r->tp > best->tp     ? "as fast, with tensor parallelism the choice does without"
                                  : "as fast, more micro-steps";
  double d_compute = r->compute - best->compute, d_tensor = r->tensor_comm - best->tensor_comm,
         d_data = r->exposed - best->exposed;
  const char *what = d_tensor >= d_compute && d_tensor >= d_data ? "the tensor axis's all-reduces, every micro-step"
                     : d_data >= d_compute ? "the data ranks' collectives, not hidden by the backward"
                                           : "compute: smaller matmuls or more micro-steps";
  return tg_sprintf(o->arena, "+%.0f%%: %s", (r->step / best->step - 1) * 100, what);
}

int tgc_plan_parallel(const tgc_plan_opts *o, tgc_plan_choice *choice) {
  /* the model as given: its B, its mesh */
  tg_ctx *ctx = tg_ctx_new(stderr);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) {
    tg_ctx_free(ctx);
    return 1;
  }
  tg_compile_opts co = {o->defines, o->n_defines, o->include_dirs, o->n_include_dirs};
  tg_graph *g = tg_compile_file(ctx, o->model, &co);
  double B = 0, T = 0;
  tg_graph_get_config(g, "B", &B);
  tg_graph_get_config(g, "T", &T);
  bool mesh = tg_graph_get_config(g, TG_CONFIG_MESH_TENSOR, &(double){0});
  tg_ctx_free(ctx);
  if (B < 1) {
    fprintf(stderr, "tgc: error: %s has no batch constant B to plan micro-batches from\n", o->model);
    return 1;
  }
  FILE *out = o->out ? o->out : fopen("/dev/null", "w");
  if (!out) return 1;
  row *rows = tg_alloc(o->arena, sizeof *rows * MAX_ROWS);
  int n = 0, compiled = 0;
  for (int tp = 1; tp <= o->devices; tp++) {
    if (o->devices % tp || (!mesh && tp > 1)) continue;
    /* each data rank trains B x tp sequences a step: micro-batches of that,
     * its half and its quarter */
    int64_t per_rank = (int64_t)B * tp;
    for (int64_t b = per_rank; b >= 1 && b * 4 >= per_rank && n < MAX_ROWS - 4; b /= 2) {
      if (per_rank % b) continue;
      if (o->out) fprintf(stderr, "\rplan: compiling data %d x tensor %d, micro-batch %lld (%d so far) ", o->devices / tp, tp,
              (long long)b, ++compiled);
      n += rows_of(o, tp, (int)b, (int)(per_rank / b), mesh, rows + n);
      if (b == 1) break;
    }
  }
  if (compiled && o->out) fprintf(stderr, "\n");
  qsort(rows, (size_t)n, sizeof *rows, by_step);
  /* the table: the best micro-batch of each (tensor degree, stage) that
   * fits, and of what does not fit one line a tensor degree */
  int shown = 0;
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int j = 0; j < shown && !seen; j++)
      seen = rows[j].tp == rows[i].tp && (rows[i].refused ? !!rows[j].refused : rows[j].stage == rows[i].stage && !rows[j].refused);
    if (!seen) rows[shown++] = rows[i];
  }
  int all = n;
  n = shown;
  const row *best = n && !rows[0].refused ? &rows[0] : NULL;
  const char *device = o->device_name && *o->device_name
                           ? tg_sprintf(o->arena, "%s (%.0f GB; the roofline of an %s)", o->device_name,
                                        o->device_bytes / 1e9, o->gpu->description)
                           : tg_sprintf(o->arena, "%s (%.0f GB)", o->gpu->description, o->device_bytes / 1e9);
  fprintf(out, "plan: %s on %d x %s, %s%s; %lld tokens a step (B %g x T %g x %d devices), precision %s\n",
         o->model, o->devices, device, o->link->what,
         o->devices > o->devices_per_node ? tg_sprintf(o->arena, " between nodes of %d", o->devices_per_node) : "",
         (long long)(B * T * o->devices), B, T, o->devices, o->precision == TG_PRECISION_BF16 ? "bf16" : "f32");
  fprintf(out, "plan: %-13s %-4s %-13s %10s %10s %10s %10s %10s %11s  %s\n", "data x tensor", "zero", "micro x accum",
         "GB a rank", "compute", "tensor", "data", "step", "tokens/s", "why");
  for (int i = 0; i < n; i++) {
    const row *r = &rows[i];
    char layout[32], micro[32];
    snprintf(layout, sizeof layout, "%d x %d", r->dp, r->tp);
    snprintf(micro, sizeof micro, "%d x %d", r->micro, r->accum);
    if (r->refused && !r->mem) {
      fprintf(out, "plan: %-13s %-4s %-13s %10s %10s %10s %10s %10s %11s  %s\n", layout, "-", micro, "-", "-", "-", "-", "-",
             "-", reason(o, r, best));
      continue;
    }
    char tok[32] = "-";
    if (!r->refused) snprintf(tok, sizeof tok, "%.0f", B * T * o->devices / r->step);
    fprintf(out, "plan: %-13s %-4d %-13s %10.2f %8.2fms %8.2fms %8.2fms %8.2fms %11s  %s\n", layout, r->stage, micro,
           r->mem / 1e9, r->compute * 1e3, r->tensor_comm * 1e3, r->exposed * 1e3, r->step * 1e3, tok,
           reason(o, r, best));
  }
  if (!best) {
    fprintf(out, "plan: no layout fits %d devices of %.0f GB: more devices, or a smaller micro-batch (-D B=...)\n",
           o->devices, o->device_bytes / 1e9);
    if (out != o->out) fclose(out);
    return 1;
  }
  fprintf(out, "plan: %d layouts estimated (%d shown: each tensor degree and stage at its best micro-batch); the model: "
         "a roofline of the compiled step on the GPU, the bytes the schedule counts over the link (docs/parallel.md)\n",
         all, n);
  fprintf(out, "plan: choice: data %d x tensor %d, zero %d, micro-batch %d x %d accumulated\n", best->dp, best->tp,
         best->stage, best->micro, best->accum);
  if (choice) *choice = (tgc_plan_choice){best->tp, best->stage, best->micro, best->accum};
  if (out != o->out) fclose(out);
  return 0;
}

const tgc_plan_link *tgc_plan_find_link(const char *name) {
  for (size_t i = 0; i < sizeof links / sizeof *links; i++)
    if (!strcmp(links[i].name, name)) return &links[i];
  return NULL;
}
