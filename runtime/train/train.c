/* train.c: `tgrun train.cfg`, the training loop (train.h).
 *
 * One run compiles the model four times, each graph run by the backend
 * the config names (runtime/backend: the CPU backend's generated C, or the
 * reference interpreter), all four sharing one copy of the parameters
 * (tensors on the device, bound to each graph's parameter leaves):
 *
 *   grad      forward and backward of one micro-batch: the loss and every
 *             parameter's gradient; the schedule pass (passes/schedule.c)
 *             calls back after each bucket of gradients is complete, and
 *             there the backend adds the gradients into the accumulators
 *             and, on a step's last micro-batch, averages them over the
 *             ranks;
 *   optimizer clipping and AdamW on the accumulated gradients (tg's adamw
 *             pass on a graph whose gradients are inputs);
 *   eval      the forward of one batch: the loss on train and val batches;
 *   sample    the forward of one sequence with its logits, for text samples;
 *   hellaswag (with the `hellaswag` key) the forward of 4 sequences with
 *             their logits, T the longest example's tokens: an example's
 *             4 endings, scored at each evaluation (hellaswag.c).
 *
 * Rank 0 evaluates, samples, logs and writes checkpoints; every rank takes
 * the same steps on its own slice of each batch (dataloader.h), so the
 * replicas stay bit-identical, which is checked every step. */
#include "train.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "dataloader.h"
#include "backend.h"
#include "backends.h"
#include "host_cores.h"
#include "program_dir.h"
#include "file.h"
#include "frontend.h"
#include "hellaswag.h"
#include "hf.h"
#include "host_memory.h"
#include "loss_plot.h"
#include "run_page.h"
#include "lr_schedule.h"
#include "metrics.h"
#include "passes.h"
#include "prepare.h"
#include "rng.h"
#include "sampler.h"
#include "tensor_parts.h"
#include "tokenizer.h"
#include "corpus.h"
#include "stop_signals.h"
#include "train_config.h"
#include "weights.h"
#include "zero.h"

#define TG_TRAIN_VERSION "tgrun 0.1.0"

/* ---- stopping on a signal -------------------------------------------------------- */

/* stop_signals.h records the first stopping signal; the loop reads it
 * after each step. */
static const char *signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Unix seconds (UTC), for the metrics' time stamps: the wall clock, which
 * may jump, so durations come from now() instead. */
static double unix_time(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- the run ---------------------------------------------------------------- */

/* One parameter, shared by every graph: tensors on the device. */
typedef struct param {
  const char *name;
  tg_type type;      /* the graph's (padded) shape */
  int64_t numel;
  const tg_node *grad; /* its gradient output in the grad graph (NULL: none) */
  tg_tensor *value;
  const tg_node *copy_node; /* the grad graph's bf16 copy of it, or NULL */
  tg_tensor *copy;   /* its bf16 copy (precision bf16: passes/precision.c), or NULL */
} param;

typedef struct run {
  tg_ctx *ctx;
  tg_train_config cfg;
  int rank, nranks;   /* in the world: rank 0 speaks and writes */
  /* the mesh (tp > 1: tensor parallelism, passes/shard_tensor.c): this
   * rank's place among the data-parallel ranks (which read different
   * batches and average gradients) and on the tensor axis; without a
   * tensor axis drank, dranks are rank, nranks */
  int drank, dranks, trank, tp;
  tg_graph *g_whole;  /* tp > 1: the model unsplit (weights files and checkpoints hold whole tensors) */
  tg_graph *g_whole_state; /* ... and the optimizer state's leaves at their whole shapes */
  int threads; /* the CPU backend's threads a rank (0: OMP_NUM_THREADS decides) */
  /* Ranks other than 0, until training starts: their messages, held
   * (hold_setup_errors). */
  FILE *held;
  char *held_text;
  size_t held_len;
  FILE *log;         /* out_dir/train.log (rank 0) */
  int lock_fd;       /* out_dir/tgrun.lock, held (flock) for the whole run (rank 0); -1: none */
  tg_tokenizer *tok;
  int32_t vocab;
  tg_corpus *train, *val; /* the splits' shards (corpus.h) */
  tg_data_order order;    /* data_order */
  tg_device *dev;
  tg_graph *g_grad, *g_eval, *g_sample;
  tg_exec *e_grad, *e_eval, *e_sample;
  const tg_hellaswag *hella; /* the `hellaswag` key's examples, or NULL */
  tg_graph *g_hella;         /* ... their forward, B = 4 */
  tg_exec *e_hella;
  float *hella_logits;       /* its logits, [4, T, vocab padded] */
  tg_zero *zero;       /* the gradients, the optimizer and its state, at the run's ZeRO stage (zero.h) */
  tg_graph *g_zero[TG_ZERO_MAX_GRAPHS]; /* its graphs ... */
  tg_exec *e_zero[TG_ZERO_MAX_GRAPHS];  /* ... compiled with the others */
  int n_zero;
  param *params;
  int n_params;
  int32_t *idx, *tgt;  /* a batch staged on the host, B x T each */
  int32_t *sample_in;  /* a sample's context, T */
  float *logits;       /* the sample graph's logits, [1, T, vocab padded] */
  int accum;          /* micro-steps a step */
  bool stopped;       /* a signal stopped the run (TG_TRAIN_STOPPED) */
  tg_loader **loaders; /* one per micro-step; freed by tg_train, also after an error */
  int n_loaders;
  tg_metrics_file *mf; /* rank 0's metrics file */
  tg_hf_dims init_dims; /* the model's sizes in init_from's file (hf.h); n = 0: none */
  double started;      /* now() when tg_train began: the metrics' elapsed_s counts from it */
} run;

/* Prints to stdout and, on rank 0, to the log file. */
static void say(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(run *r, const char *fmt, ...) {
  if (r->rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
  if (r->log) {
    va_start(ap, fmt);
    vfprintf(r->log, fmt, ap);
    va_end(ap);
    if (fflush(r->log) != 0 || ferror(r->log)) {
      int e = errno;
      fclose(r->log);
      r->log = NULL; /* the error below must not write to it again */
      tg_error(r->ctx, (tg_loc){r->cfg.out_dir, 0, 0}, "cannot write %s/train.log: %s (free some space or choose another out_dir)",
               r->cfg.out_dir, strerror(e));
    }
  }
}

static const char *path_in(run *r, const char *dir, const char *file) {
  return tg_sprintf(r->ctx->arena, "%s/%s", dir, file);
}

static tg_loc key_loc(const run *r, const char *key);

/* out_dir, or a folder in it: a failure is the out_dir setting's, so the
 * message points at where out_dir was set and names it. */
static void mkdirs(run *r, const char *dir) {
  char why[1024];
  if (!tg_make_dirs(dir, why, sizeof why))
    tg_error(r->ctx, key_loc(r, "out_dir"), "out_dir \"%s\": %s; set out_dir to a directory, or to a path where one can be made",
             r->cfg.out_dir, why);
}

/* ---- graphs -------------------------------------------------------------------- */

/* The model with the run's config: the train.cfg's model.NAME values, the
 * tokenizer's vocabulary, and B, T of the batch. */
static const char *origin_text(run *r, tg_cfg_origin o, const char *what);
static tg_cfg_origin key_origin(const tg_train_config *c, const char *key);

/* The model file as this rank reads it: model = "models/gpt2.tg" run from
 * elsewhere is the installed models/. */
static const char *model_path(run *r) {
  const char *path = r->cfg.model;
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  const char *models = tg_program_models_dir();
  const char *installed = models ? tg_sprintf(r->ctx->arena, "%s/%s", models, base) : NULL;
  if (access(path, F_OK) != 0 && path[0] != '/' && installed && access(installed, F_OK) == 0) path = installed;
  return path;
}

/* B and T the graph's; T below block_size for HellaSwag (its longest
 * example).  with_logits: the model's logits an output too. */
static tg_graph *compile_model(run *r, int64_t B, int64_t T, bool with_logits) {
  const tg_train_config *c = &r->cfg;
  tg_define *d = tg_alloc(r->ctx->arena, sizeof *d * (size_t)(c->n_defines + 5 + r->init_dims.n));
  int n = 0;
  /* init_from's sizes first: explicit model.NAME values come after (the
   * last of a name wins), and check_init_dims made sure they agree.  Each
   * says where it was set, for the model's asserts to name. */
  for (int i = 0; i < r->init_dims.n; i++)
    d[n++] = (tg_define){r->init_dims.d[i].name, r->init_dims.d[i].value, true, r->init_dims.d[i].from};
  bool block_given = tg_hf_dims_get(&r->init_dims, "block_size") != NULL;
  for (int i = 0; i < c->n_defines; i++) {
    d[n++] = (tg_define){c->defines[i].name, c->defines[i].value, false,
                         origin_text(r, c->defines[i].origin, tg_sprintf(r->ctx->arena, "model.%s", c->defines[i].name))};
    block_given |= !strcmp(c->defines[i].name, "block_size");
  }
  const char *block_from = origin_text(r, key_origin(c, "block_size"), "block_size");
  d[n++] = (tg_define){"vocab", (double)r->vocab, true,
                       tg_sprintf(r->ctx->arena, "%s/tokenizer.json (the tokenizer's vocabulary)", c->data_dir)};
  d[n++] = (tg_define){"B", (double)B, true, "the run's batch (batch_size)"};
  if (c->tp > 1) d[n++] = (tg_define){"tp", (double)c->tp, true, origin_text(r, key_origin(c, "tp"), "tp")};
  d[n++] = (tg_define){"T", (double)T, true, T == c->block_size ? block_from : "the longest HellaSwag example"};
  if (!block_given) d[n++] = (tg_define){"block_size", (double)c->block_size, true, block_from};
  const char *incs[1] = {tg_program_models_dir()};
  tg_compile_opts co = {d, n, incs, incs[0] ? 1 : 0};
  tg_graph *g = tg_compile_file(r->ctx, model_path(r), &co);
  if (!tg_verify(r->ctx, g)) tg_bail(r->ctx);
  /* the head's output, named `logits` in the model, is what sampling and HellaSwag read */
  if (with_logits) tg_hellaswag_expose_logits(r->ctx, g, c->model);
  return g;
}

/* ZeRO stage 3 on more than one rank: the model's graphs read their
 * weights from this rank's shards (passes/shard_params.c, zero.c). */
static bool sharded_weights(const run *r) { return r->cfg.zero == 3 && r->dranks > 1; }

/* Whether this rank runs the evaluations, samples and the checkpoint's
 * check: rank 0, with its tensor peers (their graphs talk to each other),
 * or every rank at stage 3 (their graphs gather the weights). */
static bool evaluates(const run *r) { return r->drank == 0 || sharded_weights(r); }

/* Compiles the run's graphs for its device, their compilers running in
 * parallel where the backend can (the CPU: one cc a graph, one per core);
 * their generated sources kept in out_dir/kernels/NAME.c or .cu for the
 * reader; every parameter leaf bound to the shared copy.  Returns the
 * wall time of it all. */
static double compile_for_device(run *r, tg_graph *const *gs, const char *const *names, int n, tg_exec **out) {
  /* the model's graphs (grad, eval, sample, and hellaswag if any) read the
   * whole parameters; the optimizer's (zero.c) bind their own */
  const int n_model = r->g_hella ? 4 : 3;
  const char *kdir = path_in(r, r->cfg.out_dir, "kernels");
  const char *suffix = tg_device_source_suffix(r->dev);
  tg_exec_opts *eo = tg_alloc(r->ctx->arena, sizeof *eo * (size_t)n);
  const char **src = tg_alloc(r->ctx->arena, sizeof *src * (size_t)n);
  for (int i = 0; i < n; i++) {
    src[i] = r->rank == 0 && suffix ? path_in(r, kdir, tg_sprintf(r->ctx->arena, "%s%s", names[i], suffix)) : NULL;
    eo[i] = (tg_exec_opts){.name = names[i], .source_path = src[i], .remat = -1};
  }
  double t0 = now();
  tg_exec_compile_all(r->dev, r->ctx, (const tg_graph *const *)gs, eo, n, out);
  double wall = now() - t0;
  for (int k = 0; k < n; k++) {
    tg_exec *e = out[k];
    const tg_graph *g = gs[k];
    tg_compile_stats st = tg_exec_compile_stats(e);
    say(r, "built %-9s %3d kernels  %s%s (%.1f s)\n", names[k], g->n_kernels, src[k] ? src[k] : "",
        tg_exec_from_cache(e) ? ", from the cache" : "", st.front_seconds + st.back_seconds);
    for (int i = 0; k < n_model && i < r->n_params; i++) {
      const tg_node *p = tg_graph_leaf(g, TG_OP_param, r->params[i].name);
      if (sharded_weights(r)) { /* stage 3: the graph reads this rank's shards */
        const tg_node *copy = p ? tg_param_copy_of(g, p) : NULL;
        const tg_node *xs[2] = {p ? tg_shard_of(g, p) : NULL, copy ? tg_shard_of(g, copy) : NULL};
        for (int c = 0; c < 2; c++)
          if (xs[c]) tg_exec_bind(e, xs[c], tg_zero_shard(r->zero, i, c == 1));
        continue;
      }
      /* a master zero.c shards is read by no model graph: nothing to bind */
      if (p && r->params[i].value) tg_exec_bind(e, p, r->params[i].value);
      const tg_node *copy = p ? tg_param_copy_of(g, p) : NULL;
      if (copy && !r->params[i].copy)
        tg_error(r->ctx, copy->loc, "internal: graph '%s' reads a bf16 copy of '%s' that the training step has not",
                 names[k], p->name);
      if (copy) tg_exec_bind(e, copy, r->params[i].copy);
    }
  }
  return wall;
}

/* One line for the run's graphs: the front end (parsing, the passes, and
 * the backends' lowering and rendering) and the back end (the compilers:
 * the wall time of compiling less the backends' front ends, the
 * compilers having run in parallel), and whether the compilers' results
 * came from the cache. */
static void say_compile_time(run *r, double front, double wall) {
  tg_exec *es[4 + TG_ZERO_MAX_GRAPHS] = {r->e_grad, r->e_eval, r->e_sample};
  int n = 3;
  if (r->e_hella) es[n++] = r->e_hella;
  for (int i = 0; i < r->n_zero; i++) es[n++] = r->e_zero[i];
  tg_compile_stats t = {0};
  for (int i = 0; i < n; i++) {
    tg_compile_stats s = tg_exec_compile_stats(es[i]);
    t.front_seconds += s.front_seconds, t.back_seconds += s.back_seconds;
    t.kernels += s.kernels, t.units += s.units, t.cached += s.cached;
    if (s.compiler) t.compiler = s.compiler;
  }
  front += t.front_seconds;
  t.back_seconds = wall - t.front_seconds;
  if (!t.compiler) {
    say(r, "compile: front end %.2f s (the %s backend compiles nothing)\n", front, r->cfg.backend);
    return;
  }
  const char *state = t.cached == t.units ? "warm" : t.cached ? "partly warm" : "cold";
  /* NVRTC compiles each distinct kernel as its own program; cc and the
   * emulated device's compiler one program a graph */
  say(r, "compile: front end %.2f s, back end %.2f s (%s, %s: %d %s, %d compiled, %d cached)\n", front,
      t.back_seconds, t.compiler, state, t.units, !strcmp(t.compiler, "NVRTC") ? "kernels" : "programs",
      t.units - t.cached, t.cached);
}

/* Each parameter's bf16 copy from its value, rounded to nearest even as
 * the optimizer's cast does: after the weights are set from outside the
 * step (initialised, loaded, resumed); the optimizer keeps them after. */
static void refresh_copies(run *r) {
  float *host = NULL;
  int64_t cap = 0;
  for (int i = 0; i < r->n_params; i++) {
    param *p = &r->params[i];
    if (!p->copy || !p->value) continue; /* no value whole: zero.c wrote the copy */
    if (p->numel > cap) {
      free(host);
      host = tg_xmalloc(sizeof *host * (size_t)p->numel);
      cap = p->numel;
    }
    tg_tensor_read(p->value, host, TG_HOST_F32);
    tg_tensor_write(p->copy, host, TG_HOST_F32);
  }
  free(host);
}


/* ---- memory: the plan against the machine, before anything big is allocated ---- */

/* The planned peak of g's intermediates (placed here: nothing before the
 * memory check needs the offsets). */
static int64_t arena_of(tg_ctx *ctx, tg_graph *g) {
  const tg_mem_plan *p = g ? tg_memplan_placed(ctx, g) : NULL;
  return p ? p->arena_bytes : 0;
}

/* The planned peak (the graphs' arenas, and the weights, gradients and
 * optimizer state this rank keeps at its ZeRO stage: zero.c) against the memory free where the tensors live: a GPU's
 * own (tg_device_memory_free), or the host's, shared by the ranks on it.
 * Refuses a plan that cannot fit, with the largest batch_size that would
 * and a ZeRO stage that would. */
static void check_memory(run *r) {
  const tg_train_config *c = &r->cfg;
  int64_t state = tg_zero_state_bytes(r->zero);
  int64_t fixed = arena_of(r->ctx, r->g_sample) + arena_of(r->ctx, r->g_hella) + state;
  for (int i = 0; i < r->n_zero; i++) fixed += arena_of(r->ctx, r->g_zero[i]);
  int64_t per_batch = arena_of(r->ctx, r->g_grad) + arena_of(r->ctx, r->g_eval);
  /* a device with memory of its own (a GPU, one a rank) is asked for
   * it; otherwise the ranks on this machine share its memory */
  const char *what;
  int64_t avail = tg_device_memory_free(r->dev, &what);
  int local = 1;
  if (avail < 0) {
    local = tg_comm_local_size();
    char host_what[512];
    avail = tg_host_memory_available(tg_host_runtime_reserve(r->threads), host_what, sizeof host_what);
    what = tg_strdup(r->ctx->arena, host_what);
  }
  int64_t peak = (fixed + per_batch) * local;
  if (avail < 0 || peak <= avail) return;
  double gib = 1024.0 * 1024.0 * 1024.0;
  int64_t per_seq = per_batch / (c->batch_size > 0 ? c->batch_size : 1);
  int64_t fit = per_seq > 0 && avail / local > fixed ? (avail / local - fixed) / per_seq : 0;
  /* a higher ZeRO stage that would fit, if any */
  const char *zero_hint = "";
  for (int s = tg_zero_stage(r->zero) + 1; r->dranks > 1 && s <= 3 && !*zero_hint; s++) {
    int64_t at_s = tg_zero_state_bytes_at(r->zero, s);
    if ((fixed - state + at_s + per_batch) * local <= avail)
      zero_hint = tg_sprintf(r->ctx->arena, "; or zero = %d, at which a rank keeps %.2f GiB of weights, gradients and "
                             "optimizer state instead of %.2f GiB, and the run would fit", s, (double)at_s / gib,
                             (double)state / gib);
  }
  const char *ranks = local == 1 ? "" : tg_sprintf(r->ctx->arena, " for each of the %d ranks on this machine", local);
  tg_loc at = key_loc(r, "batch_size");
  if (fit > 0)
    tg_error(r->ctx, at,
             "the run needs about %.2f GiB (planned peak%s: %.2f GiB of intermediates at batch_size %lld, %.2f GiB of "
             "parameters, optimizer state and the other graphs) but %.2f GiB are free (%s): "
             "batch_size %lld is the largest that would fit; lower batch_size (and raise grad_accum to keep the "
             "tokens per step) or block_size%s",
             (double)peak / gib, ranks, (double)per_batch / gib, (long long)c->batch_size, (double)fixed / gib,
             (double)avail / gib, what, (long long)fit, zero_hint);
  tg_error(r->ctx, at,
           "the run needs about %.2f GiB (planned peak%s: %.2f GiB of intermediates at batch_size %lld, %.2f GiB of "
           "parameters, optimizer state and the other graphs) but %.2f GiB are free (%s): not even "
           "batch_size 1 fits; use a smaller model (model.n_layer, model.n_embd) or block_size%s",
           (double)peak / gib, ranks, (double)per_batch / gib, (long long)c->batch_size, (double)fixed / gib,
           (double)avail / gib, what, zero_hint);
}

/* Whether any of the graphs reads parameter `name` itself (not only its
 * bf16 copy): any node taking it as an input. */
static bool reads_param(const tg_graph *const *gs, int n, const char *name) {
  for (int k = 0; k < n; k++) {
    const tg_node *p = tg_graph_leaf(gs[k], TG_OP_param, name);
    for (int i = 0; p && i < gs[k]->n_nodes; i++)
      for (int j = 0; j < gs[k]->nodes[i]->nin; j++)
        if (gs[k]->nodes[i]->in[j] == p) return true;
  }
  return false;
}

/* The ZeRO stage against what runs it, before the passes and the device
 * compile: stages 1 to 3 need the backend's collectives; one rank has
 * nothing to shard. */
static void check_zero(run *r) {
  const tg_train_config *c = &r->cfg;
  if (!c->zero) return;
  tg_loc at = key_loc(r, "zero");
  if (r->dranks == 1) {
    say(r, "note: zero = %lld with one rank: nothing to shard; training as zero = 0\n", (long long)c->zero);
    return;
  }
  if (!tg_device_can_shard(r->dev))
    tg_error(r->ctx, at, "zero = %lld: the %s backend has no reduce-scatter and all-gather yet; use zero = 0 or "
             "another backend", (long long)c->zero, c->backend);
}

/* The graphs of the run, their kernels and the fusion report. */
static void free_values(const tg_graph *g, float **v) {
  if (!v) return;
  for (int i = 0; i < g->n_nodes; i++) free(v[i]);
  free(v);
}

/* The model's tensor axis is the run's tp: a model that declares none, or
 * another, is refused at tp's place; with one, the model compiled whole,
 * for the weights and checkpoints, which hold whole tensors (so that a run
 * resumes with another tp). */
static void check_mesh(run *r) {
  int declared = tg_tensor_degree(r->g_grad);
  double have;
  bool mesh = tg_graph_get_config(r->g_grad, TG_CONFIG_MESH_TENSOR, &have);
  if (declared != r->tp)
    tg_error(r->ctx, key_loc(r, "tp"),
             "tp = %d, but %s %s: %s", r->tp, r->cfg.model,
             mesh ? tg_sprintf(r->ctx->arena, "splits its tensor axis %d ways (mesh tensor = %s)", declared,
                               r->g_grad->mesh_sym ? r->g_grad->mesh_sym : "?")
                  : "declares no tensor axis (mesh tensor = N) to split its layers across",
             mesh ? "its mesh's degree must be a constant the run sets (mesh tensor = tp)"
                  : "remove tp, or annotate the model (docs/language.md, \"shard\")");
  if (r->tp == 1) return;
  r->g_whole = compile_model(r, r->cfg.batch_size, r->cfg.block_size, false);
  tg_pipeline_opts pw = {.precision = tg_train_config_precision(&r->cfg), .pad_multiple = TG_PAD_MULTIPLE_DEFAULT,
                         .no_tensor_split = true};
  tg_run_pipeline(r->ctx, r->g_whole, &pw);
}

static void build(run *r) {
  double t_front = now(); /* parsing and the passes of every graph: the front end */
  const tg_train_config *c = &r->cfg;
  /* the model first: its ranges (the asserts after its config) refuse a
   * bad model.NAME before the device is opened or anything allocated */
  r->g_grad = compile_model(r, c->batch_size, c->block_size, false);
  /* a GPU a rank: this machine's ranks take its GPUs in local-rank order
   * (docs/cuda.md); without it every rank of a node opened GPU 0 */
  tg_device_opts dopts = {.precision = TG_PREC_F32, .local_rank = tg_comm_local_rank()};
  r->dev = tg_device_open_named(r->ctx, r->cfg.backend, &dopts);
  check_zero(r);
  const tg_precision_policy prec = tg_train_config_precision(c);
  tg_adamw_opts ao = {c->beta1, c->beta2, c->eps, c->weight_decay, c->grad_clip, NULL, NULL, 0, r->tp};
  check_mesh(r);
  const char *kdir = path_in(r, c->out_dir, "kernels");
  if (r->rank == 0) mkdirs(r, kdir);
  FILE *fusion = r->rank == 0 ? fopen(path_in(r, kdir, "fusion.txt"), "w") : NULL;
  /* stage 3: the model's graphs read their weights from shards (passes/shard_params.c) */
  const int shard_ranks = sharded_weights(r) ? r->dranks : 0;
  tg_pipeline_opts po = {.precision = prec, .grad = true, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT,
                         .report_name = TG_REPORT_FUSION, .report = fusion, .shard_ranks = shard_ranks,
                         .tensor_rank = r->trank};
  tg_run_pipeline(r->ctx, r->g_grad, &po);
  if (fusion) fclose(fusion);

  /* the parameters, in the grad graph's order */
  for (int i = 0; i < r->g_grad->n_nodes; i++) r->n_params += r->g_grad->nodes[i]->op == TG_OP_param;
  r->params = tg_xcalloc((size_t)r->n_params, sizeof *r->params);
  tg_zero_param *zp = tg_alloc(r->ctx->arena, sizeof *zp * (size_t)(r->n_params + 1));
  int k = 0;
  for (int i = 0; i < r->g_grad->n_nodes; i++) {
    const tg_node *n = r->g_grad->nodes[i];
    if (n->op != TG_OP_param) continue;
    param *p = &r->params[k];
    p->name = n->name;
    p->type = n->type;
    p->numel = tg_type_numel(&n->type);
    p->grad = tg_gradient_of(r->g_grad, n);
    p->copy_node = tg_param_copy_of(r->g_grad, n);
    zp[k] = (tg_zero_param){n, p->grad, p->copy_node != NULL, false, NULL, NULL};
    k++;
  }
  r->g_eval = compile_model(r, c->batch_size, c->block_size, false);
  tg_pipeline_opts pe = {.precision = prec, .kernels = true, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT,
                         .shard_ranks = shard_ranks, .tensor_rank = r->trank};
  tg_run_pipeline(r->ctx, r->g_eval, &pe);
  r->g_sample = compile_model(r, 1, c->block_size, true);
  tg_run_pipeline(r->ctx, r->g_sample, &pe);
  const tg_graph *model[4] = {r->g_grad, r->g_eval, r->g_sample};
  int n_model = 3;
  if (r->hella) {
    r->g_hella = compile_model(r, TG_HELLASWAG_ENDINGS, r->hella->longest, true);
    tg_run_pipeline(r->ctx, r->g_hella, &pe);
    model[n_model++] = r->g_hella;
  }
  for (int i = 0; i < r->n_params; i++) zp[i].read_as_f32 = reads_param(model, n_model, r->params[i].name);
  const char *zero_names[TG_ZERO_MAX_GRAPHS];
  r->zero = tg_zero_new(r->ctx, r->dev, (int)c->zero, r->g_grad, zp, r->n_params, &ao);
  r->n_zero = tg_zero_graphs(r->zero, r->g_zero, zero_names);
  check_memory(r);
  /* only now that they fit: the parameters and the optimizer's state */
  tg_tensor **values = tg_alloc(r->ctx->arena, sizeof *values * (size_t)(r->n_params + 1));
  tg_tensor **copies = tg_alloc(r->ctx->arena, sizeof *copies * (size_t)(r->n_params + 1));
  for (int i = 0; i < r->n_params; i++) {
    param *p = &r->params[i];
    values[i] = p->value = tg_zero_master_sharded(r->zero, i) ? NULL : tg_tensor_new(r->dev, &p->type);
    copies[i] = p->copy = p->copy_node && !shard_ranks ? tg_tensor_new(r->dev, &p->copy_node->type) : NULL;
  }
  tg_zero_allocate(r->zero, values, copies);

  int64_t bt = c->batch_size * c->block_size;
  r->idx = tg_xcalloc((size_t)bt, sizeof *r->idx);
  r->tgt = tg_xcalloc((size_t)bt, sizeof *r->tgt);
  r->sample_in = tg_xcalloc((size_t)c->block_size, sizeof *r->sample_in);
  r->logits = tg_xcalloc((size_t)tg_type_numel(&tg_graph_output(r->g_sample, TG_OUTPUT_LOGITS)->type), sizeof *r->logits);
  if (r->g_hella)
    r->hella_logits = tg_xcalloc((size_t)tg_type_numel(&tg_graph_output(r->g_hella, TG_OUTPUT_LOGITS)->type),
                                 sizeof *r->hella_logits);
  t_front = now() - t_front;
  tg_graph *gs[4 + TG_ZERO_MAX_GRAPHS] = {r->g_grad, r->g_eval, r->g_sample, r->g_hella};
  const char *names[4 + TG_ZERO_MAX_GRAPHS] = {"grad", "eval", "sample", "hellaswag"};
  for (int i = 0; i < r->n_zero; i++) gs[n_model + i] = r->g_zero[i], names[n_model + i] = zero_names[i];
  tg_exec *es[4 + TG_ZERO_MAX_GRAPHS];
  double wall = compile_for_device(r, gs, names, n_model + r->n_zero, es);
  r->e_grad = es[0], r->e_eval = es[1], r->e_sample = es[2];
  if (r->g_hella) r->e_hella = es[3];
  for (int i = 0; i < r->n_zero; i++) r->e_zero[i] = es[n_model + i];
  tg_zero_bind(r->zero, r->e_zero);
  if (r->tp > 1) r->g_whole_state = tg_tensor_whole_state(r->ctx, tg_zero_state_graph(r->zero), r->g_whole);
  say_compile_time(r, t_front, wall);
  tg_exec_profile(r->e_grad, TG_PROFILE_PHASES);
}

/* ---- evaluation and samples ------------------------------------------------------ */

/* The batch's token ids, staged on the host, into the graph's inputs. */
static void feed(run *r, tg_exec *e, const int32_t *idx, const int32_t *targets) {
  const tg_graph *g = tg_exec_graph(e);
  tg_tensor_write(tg_exec_leaf(e, tg_graph_leaf(g, TG_OP_input, TG_INPUT_IDX)), idx, TG_HOST_I32);
  if (targets) tg_tensor_write(tg_exec_leaf(e, tg_graph_leaf(g, TG_OP_input, TG_INPUT_TARGETS)), targets, TG_HOST_I32);
  (void)r;
}

/* A graph's scalar output after a run. */
static float read_scalar(run *r, tg_exec *e, const char *name) {
  float v = 0;
  if (!tg_exec_read_scalar(e, name, &v))
    tg_error(r->ctx, (tg_loc){r->cfg.model, 1, 1}, "internal: output '%s' is not in memory after the step", name);
  return v;
}

static double eval_split(run *r, const tg_corpus *toks) {
  double sum = 0;
  for (int64_t k = 0; k < r->cfg.eval_batches; k++) {
    tg_loader_eval_batch(toks, r->order, r->cfg.batch_size, r->cfg.block_size, (uint64_t)r->cfg.seed, k, 0, 1, r->idx, r->tgt);
    feed(r, r->e_eval, r->idx, r->tgt);
    tg_exec_run(r->ctx, r->e_eval);
    sum += read_scalar(r, r->e_eval, TG_OUTPUT_LOSS);
  }
  return sum / (double)(r->cfg.eval_batches ? r->cfg.eval_batches : 1);
}

/* Generates sample_tokens tokens after the prompt; prints them and appends
 * them to out_dir/samples.txt. */
static void sample(run *r, int64_t step) {
  const tg_train_config *c = &r->cfg;
  if (c->sample_tokens <= 0) return;
  char why[512];
  int32_t *prompt = NULL;
  size_t np = 0;
  if (!tg_tok_encode(r->tok, c->sample_prompt, strlen(c->sample_prompt), &prompt, &np, why, sizeof why))
    tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "sample_prompt: %s", why);
  int64_t T = c->block_size, total = (int64_t)np + c->sample_tokens;
  int32_t *ids = tg_xcalloc((size_t)total + 1, sizeof *ids);
  memcpy(ids, prompt, np * sizeof *ids);
  free(prompt);
  int64_t n = (int64_t)np;
  if (n == 0) ids[n++] = 0; /* an empty prompt starts from token 0 */
  const tg_node *logits = tg_graph_output(r->g_sample, TG_OUTPUT_LOGITS);
  int32_t *in = r->sample_in;
  int64_t Vp = logits->type.dim[logits->type.rank - 1].size;
  float *row = r->logits;
  float *scratch = tg_xcalloc((size_t)r->vocab * 2 + 16, sizeof(float));
  tg_rng rng;
  tg_rng_seed(&rng, (uint64_t)c->seed, 0x5a5a0000u + (uint64_t)step);
  /* a stop cuts a sample short; not at stage 3, where every rank samples
   * in step (a signal reaches one rank; the others would wait for it) */
  while (n < total && (!tg_stop_signal() || sharded_weights(r))) {
    /* the last T tokens, left-aligned: causal attention makes the logits at
     * position t depend only on tokens up to t, so the padding after is inert */
    int64_t from = n > T ? n - T : 0, len = n - from;
    for (int64_t t = 0; t < T; t++) in[t] = t < len ? ids[from + t] : 0;
    feed(r, r->e_sample, in, NULL);
    tg_exec_run(r->ctx, r->e_sample);
    if (!tg_exec_read(r->e_sample, logits, row, TG_HOST_F32))
      tg_error(r->ctx, logits->loc, "internal: the logits are not in memory");
    ids[n++] = tg_sample(row + (len - 1) * Vp, r->vocab, c->temperature, (int32_t)c->top_k, &rng, scratch);
  }
  char *text = NULL;
  size_t tlen = 0;
  if (!tg_tok_decode(r->tok, ids, (size_t)n, &text, &tlen, why, sizeof why))
    tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "cannot decode a sample: %s", why);
  if (r->rank != 0) { /* stage 3's other ranks sampled only to take part in the gathers */
    free(text), free(ids), free(scratch);
    return;
  }
  say(r, "---- sample at step %lld (temperature %g, top-k %lld) ----\n%.*s\n----\n", (long long)step, c->temperature,
      (long long)c->top_k, (int)tlen, text);
  const char *samples = path_in(r, c->out_dir, "samples.txt");
  FILE *f = fopen(samples, "a");
  bool written = f && fprintf(f, "---- step %lld ----\n%.*s\n", (long long)step, (int)tlen, text) >= 0;
  if (f && fclose(f) != 0) written = false;
  int e = errno;
  free(text);
  if (!written) {
    free(ids);
    free(scratch);
    tg_error(r->ctx, (tg_loc){c->out_dir, 0, 0}, "cannot write %s: %s", samples, strerror(e));
  }
  free(ids);
  free(scratch);
}

/* ---- checkpoints ------------------------------------------------------------------ */

/* Every rank takes part (ZeRO's shards of the optimizer state are gathered
 * to rank 0); rank 0 checks and writes. */
static void save_checkpoint(run *r, int64_t step, uint64_t position) {
  double t0 = now();
  float **v = tg_zero_state_values(r->zero);
  /* weights that are finite but diverged (a step's update too large) show
   * in the loss of one batch: checked below, before they replace anything
   * (at ZeRO stage 3 every rank runs it: the graph gathers the weights) */
  float check = 0;
  if (evaluates(r)) {
    tg_loader_eval_batch(r->train, r->order, r->cfg.batch_size, r->cfg.block_size, (uint64_t)r->cfg.seed, 0, 0, 1, r->idx,
                         r->tgt);
    feed(r, r->e_eval, r->idx, r->tgt);
    tg_exec_run(r->ctx, r->e_eval);
    check = read_scalar(r, r->e_eval, TG_OUTPUT_LOSS);
  }
  const tg_graph *sg = tg_zero_state_graph(r->zero);
  float **whole = NULL; /* tensor parallelism: the tensor ranks' parts joined, indexed by g_whole_state */
  if (r->tp > 1 && r->drank == 0) whole = tg_tensor_join_state(sg, v, r->g_whole_state, r->tp, r->trank);
  if (r->rank != 0) {
    tg_zero_free_state_values(r->zero, v);
    free_values(r->g_whole_state, whole);
    return;
  }
  tg_ckpt_meta m = {.step = step, .data_position = position, .seed = (uint64_t)r->cfg.seed, .model = r->cfg.model,
                    .writer = TG_TRAIN_VERSION};
  char why[1024];
  /* a checkpoint of non-finite weights would rotate the last good one out */
  for (int i = 0; i < r->n_params; i++) {
    const float *w = v[tg_graph_leaf(sg, TG_OP_param, r->params[i].name)->id];
    for (int64_t k = 0; k < r->params[i].numel; k++)
      if (!isfinite(w[k])) {
        tg_zero_free_state_values(r->zero, v);
        tg_error(r->ctx, (tg_loc){r->cfg.path, 0, 0},
                 "step %lld: parameter '%s' holds %s: training diverged; no checkpoint written, %s/" TG_CKPT_FILE
                 " keeps the last good one (lower learning_rate or set grad_clip, then resume = true)",
                 (long long)step, r->params[i].name, isnan(w[k]) ? "NaN" : "an infinity", r->cfg.out_dir);
      }
  }
  if (!isfinite(check)) {
    tg_zero_free_state_values(r->zero, v);
    tg_error(r->ctx, (tg_loc){r->cfg.path, 0, 0},
             "step %lld: the weights give a loss of %g on a training batch: training diverged; no checkpoint written, "
             "%s/" TG_CKPT_FILE " keeps the last good one (lower learning_rate or set grad_clip, then resume = true)",
             (long long)step, (double)check, r->cfg.out_dir);
  }
  bool ok = whole ? tg_ckpt_save_in_dir(r->cfg.out_dir, r->g_whole_state, whole, &m, why, sizeof why)
                  : tg_ckpt_save_in_dir(r->cfg.out_dir, sg, v, &m, why, sizeof why);
  tg_zero_free_state_values(r->zero, v);
  free_values(r->g_whole_state, whole);
  if (!ok) tg_error(r->ctx, (tg_loc){r->cfg.out_dir, 0, 0}, "cannot write the checkpoint: %s", why);
  say(r, "checkpoint: %s/" TG_CKPT_FILE " at step %lld (%.2f s)\n", r->cfg.out_dir, (long long)step, now() - t0);
}

/* out_dir/train.cfg: the effective config, written atomically (a
 * temporary, then rename).  A fresh run writes it at the start; a resume
 * only once the checkpoint is loaded (with its seed adopted), so that a
 * resume refused for another model or data keeps the file of the run
 * whose checkpoint is there: it always says what the run uses. */
static void write_effective_config(run *r) {
  const tg_train_config *c = &r->cfg;
  const char *cfg_path = path_in(r, c->out_dir, "train.cfg");
  const char *tmp = tg_sprintf(r->ctx->arena, "%s.tmp.%ld", cfg_path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  bool written = f && tg_train_config_print(f, c);
  if (f && fclose(f) != 0) written = false;
  if (!written || rename(tmp, cfg_path) != 0) {
    int e = errno;
    remove(tmp);
    tg_error(r->ctx, (tg_loc){c->out_dir, 0, 0}, "cannot write %s: %s", cfg_path, strerror(e));
  }
}

/* Resuming a run that has done max_steps already would train nothing and
 * exit 0 as if it had: an error at max_steps's place in train.cfg (or the
 * command line), with the checkpoint's step and what to raise. */
static void refuse_resume_without_steps(run *r, int64_t done, const char *ckpt) {
  const tg_train_config *c = &r->cfg;
  if (done < c->max_steps) return;
  tg_error(r->ctx, key_loc(r, "max_steps"),
           "max_steps = %lld, but the checkpoint %s has done %lld steps already: there is nothing to resume; "
           "raise max_steps above %lld to train further (max_steps = N in %s, or max_steps=N on the command line)",
           (long long)c->max_steps, ckpt, (long long)done, (long long)done, c->path);
}

/* Whole values (of the whole state graph's leaves) as this rank's parts,
 * indexed by the state graph's nodes; w is freed. */
static tg_weights *parts_of_state(run *r, tg_weights *w) {
  const tg_graph *sg = tg_zero_state_graph(r->zero);
  tg_weights *p = tg_xcalloc(1, sizeof *p);
  p->g = sg;
  p->values = tg_tensor_cut_state(r->g_whole_state, w->values, sg, r->tp, r->trank);
  tg_weights_free(w);
  return p;
}

/* The whole model's initial weights (of g_whole's params) as this rank's
 * parts, indexed by the grad graph's nodes; w is freed. */
static tg_weights *parts_of_model(run *r, tg_weights *w) {
  tg_weights *p = tg_xcalloc(1, sizeof *p);
  p->g = r->g_grad;
  p->values = tg_tensor_cut_state(r->g_whole, w->values, r->g_grad, r->tp, r->trank);
  tg_weights_free(w);
  return p;
}

/* Fills the parameters (and for resume the moments) from wherever the
 * config says; returns the steps already done and the data position. */
static int64_t initial_state(run *r, uint64_t *position) {
  const tg_train_config *c = &r->cfg;
  *position = 0;
  if (c->resume) {
    tg_ckpt_meta m = {0};
    char *used_m = NULL;
    const tg_graph *sg = tg_zero_state_graph(r->zero);
    tg_weights *w = tg_ckpt_load_latest(r->ctx, r->g_whole_state ? r->g_whole_state : sg, c->out_dir, true, &m, &used_m);
    const char *used = used_m ? tg_strdup(r->ctx->arena, used_m) : NULL;
    free(used_m);
    if (!w) tg_bail(r->ctx);
    if (r->g_whole_state) w = parts_of_state(r, w);
    tg_zero_load(r->zero, w, true); /* each rank takes its shards of the optimizer state */
    tg_weights_free(w);
    refresh_copies(r);
    *position = m.data_position;
    /* the data stream is the checkpoint's: its seed with its position */
    if ((uint64_t)c->seed != m.seed) {
      tg_cfg_origin o = key_origin(&r->cfg, "seed");
      if ((o.cmdline || o.line > 0) && !c->reseed)
        tg_error(r->ctx, key_loc(r, "seed"),
                 "seed = %lld, but the checkpoint %s was trained with seed %llu: resuming with another seed "
                 "changes the data stream; remove seed (the checkpoint's is used) or add reseed = true to "
                 "continue with seed %lld",
                 (long long)c->seed, used ? used : c->out_dir, (unsigned long long)m.seed, (long long)c->seed);
      if (!c->reseed) {
        r->cfg.seed = (int64_t)m.seed;
        say(r, "seed %llu: the checkpoint's\n", (unsigned long long)m.seed);
      } else
        say(r, "seed %lld (reseed = true; the checkpoint's was %llu)\n", (long long)c->seed,
            (unsigned long long)m.seed);
    }
    refuse_resume_without_steps(r, m.step, used ? used : c->out_dir);
    if (r->rank == 0) write_effective_config(r);
    say(r, "resumed from %s: %lld steps done\n", used ? used : c->out_dir, (long long)m.step);
    return m.step;
  }
  /* init_from: a tg checkpoint or a plain weights file (Hugging Face's
   * GPT-2, tgrun init/step output); only its weights are taken */
  const tg_graph *sg = tg_zero_state_graph(r->zero);
  /* with a tensor axis: the whole model's, cut to this rank's parts */
  const tg_graph *mg = r->g_whole ? r->g_whole : r->g_grad;
  const tg_graph *wg = c->init_from && *c->init_from ? (r->g_whole_state ? r->g_whole_state : sg) : mg;
  tg_ckpt_meta m = {0};
  tg_weights *w = c->init_from && *c->init_from ? tg_ckpt_load(r->ctx, wg, c->init_from, false, &m)
                                                 : tg_weights_init(mg, (uint64_t)c->seed);
  if (!w) tg_bail(r->ctx);
  if (r->g_whole) {
    w = c->init_from && *c->init_from ? parts_of_state(r, w) : parts_of_model(r, w);
    wg = c->init_from && *c->init_from ? sg : r->g_grad;
  }
  for (int i = 0; i < r->n_params; i++) {
    const tg_node *n = tg_graph_leaf(wg, TG_OP_param, r->params[i].name);
    tg_zero_set_value(r->zero, i, w->values[n->id]);
  }
  tg_weights_free(w);
  refresh_copies(r);
  if (c->init_from && *c->init_from) say(r, "initial weights from %s\n", c->init_from);
  return 0;
}

/* A hash of every parameter's bits: replicas must agree exactly. */
static uint64_t weights_hash(const run *r) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < r->n_params; i++) {
    const param *p = &r->params[i];
    h = (h ^ tg_tensor_hash(p->value ? p->value : p->copy)) * 1099511628211ull; /* a sharded master: its copy */
  }
  return h;
}

/* ---- the loop ---------------------------------------------------------------------- */

static bool due(int64_t step, int64_t interval, int64_t last) {
  return step == last || (interval > 0 && step % interval == 0);
}

static void write_plot(run *r, const char *metrics_path) {
  if (r->rank != 0) return;
  char why[512];
  const char *svg = path_in(r, r->cfg.out_dir, "loss.svg");
  if (!tg_loss_plot_from_metrics(metrics_path, svg, r->cfg.model, why, sizeof why))
    say(r, "warning: no loss plot: %s\n", why);
  if (!tg_run_page_write(r->cfg.out_dir, metrics_path, r->cfg.model, why, sizeof why))
    say(r, "warning: no report.html: %s\n", why);
}

/* Train and val loss after `step` steps: logged and appended to the metrics. */
static void evaluate(run *r, const tg_log_columns *cols, tg_metrics_file *mf, int64_t step) {
  char why[512], line[512];
  tg_metrics_row e = tg_metrics_row_blank(TG_METRICS_EVAL, step);
  e.train_loss = eval_split(r, r->train);
  e.val_loss = eval_split(r, r->val);
  if (r->hella) {
    tg_hellaswag_result h = tg_hellaswag_run(r->ctx, r->hella, r->e_hella, r->vocab, r->hella_logits, NULL);
    e.hellaswag_acc = h.acc, e.hellaswag_acc_norm = h.acc_norm, e.hellaswag_n = h.n;
  }
  e.time = unix_time();
  e.elapsed_s = now() - r->started;
  tg_log_eval_line(line, sizeof line, cols, &e);
  say(r, "%s\n", line);
  if (mf && !tg_metrics_append(mf, &e, why, sizeof why)) tg_error(r->ctx, (tg_loc){r->cfg.out_dir, 0, 0}, "%s", why);
}

/* One loader per micro-step, at `position`.  A step's batch is grad_accum x
 * ranks slices of one seeded draw (stream = the step): micro-step m of rank r
 * takes slice m * ranks + r.  So 2 micro-batches of b, 2 ranks of b, and one
 * batch of 2b all train on the same sequences. */
static tg_loader **open_loaders(run *r, uint64_t position) {
  const tg_train_config *c = &r->cfg;
  char why[1024];
  int accum = (int)c->grad_accum;
  tg_loader **loaders = r->loaders = tg_xcalloc((size_t)accum, sizeof *loaders);
  r->n_loaders = accum;
  for (int m = 0; m < accum; m++) {
    loaders[m] = tg_loader_new(r->train, r->order, c->batch_size, c->block_size, m * r->dranks + r->drank,
                               accum * r->dranks, (uint64_t)c->seed, position, why, sizeof why);
    if (!loaders[m]) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "%s", why);
  }
  return loaders;
}

/* A step's FLOPs for MFU as nanoGPT counts them: 6N + 12 L H Q T per token,
 * N (into *nparams) without the position embedding. */
static double step_flops(run *r, int64_t tokens_per_step, int64_t *nparams) {
  double L = 0, H = 0, C = 0;
  tg_graph_get_config(r->g_grad, "n_layer", &L);
  tg_graph_get_config(r->g_grad, "n_head", &H);
  tg_graph_get_config(r->g_grad, "n_embd", &C);
  *nparams = 0;
  /* the whole model's, not this tensor rank's parts */
  const tg_graph *mg = r->g_whole ? r->g_whole : r->g_grad;
  for (int i = 0; i < mg->n_nodes; i++) {
    const tg_node *p = mg->nodes[i];
    if (p->op == TG_OP_param && strcmp(p->name, "wpe.weight")) {
      tg_type ft;
      tg_file_type(mg, &p->type, &ft);
      *nparams += tg_type_numel(&ft);
    }
  }
  tg_mfu_model mm = {*nparams, (int64_t)L, (int64_t)H, H > 0 ? (int64_t)(C / H) : 0, r->cfg.block_size};
  return tg_flops_per_step(&mm, tokens_per_step);
}

/* Rank 0's lines before the first step: the model, the batch, the ZeRO
 * stage, MFU's peak and the legend of the step lines.  Returns that peak:
 * train.cfg's peak_flops, else the device's own (a known GPU's datasheet
 * figure, a CPU's measured one: backend.h), 0 when unknown; only rank 0
 * logs MFU, so only it spends the CPU's measurement on it. */
static double say_run_start(run *r, int64_t nparams, int64_t tokens_per_step, const tg_log_columns *cols) {
  const tg_train_config *c = &r->cfg;
  if (r->rank != 0) return 0;
  bool bf16 = tg_train_config_precision(c) == TG_PRECISION_BF16;
  double peak = c->peak_flops;
  const char *peak_from = "peak_flops in train.cfg";
  if (!(peak > 0)) peak = tg_device_peak_flops(r->dev, bf16, &peak_from);
  say(r, "training %s: %lld parameters, %lld tokens per step (%lld x %lld x %lld accumulated x %d %srank%s%s), %s\n",
      c->model, (long long)nparams, (long long)tokens_per_step, (long long)c->batch_size, (long long)c->block_size,
      (long long)c->grad_accum, r->dranks, r->tp > 1 ? "data " : "", r->dranks == 1 ? "" : "s",
      r->tp > 1 ? tg_sprintf(r->ctx->arena, ", each layer split across %d tensor ranks", r->tp) : "",
      bf16 ? "bf16 (f32 master weights, optimizer and statistics)" : "f32");
  if (c->parallel_note) say(r, "%s\n", c->parallel_note);
  if (r->dranks > 1) say(r, "%s\n", tg_zero_describe(r->zero));
  if (peak > 0)
    say(r, "mfu: over a peak of %.4g %s %s a device (%s)\n", peak >= 1e12 ? peak * 1e-12 : peak * 1e-9,
        peak >= 1e12 ? "TFLOP/s" : "GFLOP/s", bf16 ? "bf16" : "f32", peak_from);
  else
    say(r, "mfu: unknown (%s); set peak_flops in train.cfg to show it\n", peak_from);
  tg_log_legend(stdout, cols);
  if (r->log) tg_log_legend(r->log, cols);
  return peak;
}

static void train_loop(run *r) {
  const tg_train_config *c = &r->cfg;
  uint64_t position;
  int64_t done = initial_state(r, &position);
  char why[1024];
  tg_loader **loaders = open_loaders(r, position);
  const char *metrics_path = path_in(r, c->out_dir, c->metrics_file);
  tg_metrics_file *mf = NULL;
  if (r->rank == 0) {
    mf = r->mf = tg_metrics_open(metrics_path, done > 0, why, sizeof why);
    if (!mf) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "%s", why);
  }

  r->accum = (int)c->grad_accum;
  tg_zero_attach(r->zero, r->e_grad, r->accum);

  int64_t tokens_per_step = c->batch_size * c->block_size * c->grad_accum * r->dranks;
  int64_t nparams;
  double flops_per_step = step_flops(r, tokens_per_step, &nparams);
  tg_lr_schedule sched = {c->learning_rate, c->min_lr, c->warmup_steps, tg_train_config_decay_steps(c)};
  tg_log_columns cols = {c->max_steps, true, r->hella != NULL};
  double peak = say_run_start(r, nparams, tokens_per_step, &cols);
  /* the loss before any step: the baseline of the plot */
  /* at stage 3 every rank runs the evaluations and samples: their graphs
   * gather the weights from every rank's shards */
  if (done == 0 && evaluates(r)) evaluate(r, &cols, mf, 0);
  double phase0[TG_NPHASES] = {0};
  const double loop_started = now(); /* the ETA's pace: the loop's, not the compile's */
  for (int64_t s = done; s < c->max_steps; s++) {
    double t0 = now();
    double lr = tg_lr_at(&sched, s);
    tg_exec_phase_seconds(r->e_grad, phase0);
    double loss_sum = 0;
    for (int micro = 0; micro < r->accum; micro++) {
      tg_zero_micro_step(r->zero, micro);
      tg_loader_next(loaders[micro], r->idx, r->tgt);
      feed(r, r->e_grad, r->idx, r->tgt);
      tg_exec_run(r->ctx, r->e_grad);
      tg_zero_micro_step_done(r->zero);
      loss_sum += read_scalar(r, r->e_grad, TG_OUTPUT_LOSS);
    }
    double phase1[TG_NPHASES];
    tg_exec_phase_seconds(r->e_grad, phase1);
    float gn = tg_zero_step(r->zero, lr, s + 1);
    /* the loss, and whether any rank was asked to stop: every rank then
     * stops after the same step */
    double stats[2] = {loss_sum / r->accum, tg_stop_signal()};
    tg_comm_sum_doubles(stats, 2);
    double dt = now() - t0;
    if (r->dranks > 1 && !sharded_weights(r) && !tg_comm_all_equal(weights_hash(r)))
      tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "the ranks' weights differ after step %lld", (long long)s + 1);
    /* a diverged step stops the run before anything records it: the
     * checkpoint on disk stays the last good one */
    if (!isfinite(stats[0]) || !isfinite(gn))
      tg_error(r->ctx, (tg_loc){c->path, 0, 0},
               "step %lld: the loss is %g and the gradient norm %g: training diverged; stopped without writing a "
               "checkpoint, so %s/" TG_CKPT_FILE " keeps the last good one (%s); lower learning_rate or set "
               "grad_clip, then resume = true",
               (long long)s + 1, stats[0] / r->dranks, (double)gn, c->out_dir, "if one was written");

    int64_t step = s + 1;
    tg_metrics_row row = tg_metrics_row_blank(TG_METRICS_STEP, step);
    row.loss = stats[0] / r->dranks;
    row.lr = lr;
    row.grad_norm = gn;
    row.dt_ms = dt * 1e3;
    row.fwd_ms = (phase1[TG_PHASE_FORWARD] - phase0[TG_PHASE_FORWARD]) * 1e3;
    row.bwd_ms = (phase1[TG_PHASE_BACKWARD] - phase0[TG_PHASE_BACKWARD]) * 1e3;
    row.tok_per_s = (double)tokens_per_step / dt;
    row.mfu = tg_mfu(flops_per_step, dt, peak * r->nranks); /* the step's FLOPs are every rank's */
    row.time = unix_time();
    row.elapsed_s = now() - r->started;
    row.eta_s = (now() - loop_started) / (double)(step - done) * (double)(c->max_steps - step);
    if (r->rank == 0) {
      if (due(step, c->log_interval, c->max_steps) || step == 1) {
        char line[512];
        tg_log_step_line(line, sizeof line, &cols, &row);
        say(r, "%s\n", line);
      }
      if (!tg_metrics_append(mf, &row, why, sizeof why)) tg_error(r->ctx, (tg_loc){c->out_dir, 0, 0}, "%s", why);
    }
    /* the checkpoint first: nothing slow (an evaluation, a long sample)
     * stands between a step and its being kept */
    if (due(step, c->checkpoint_interval, c->max_steps)) save_checkpoint(r, step, tg_loader_position(loaders[0]));
    if (evaluates(r) && due(step, c->eval_interval, c->max_steps)) {
      evaluate(r, &cols, mf, step);
      write_plot(r, metrics_path);
    }
    if (evaluates(r) && due(step, c->sample_interval, c->max_steps)) sample(r, step);
    if (stats[1] > 0) {
      if (!due(step, c->checkpoint_interval, c->max_steps)) save_checkpoint(r, step, tg_loader_position(loaders[0]));
      int sig = tg_stop_signal();
      say(r, "stopped by %s after step %lld of %lld: the checkpoint holds it; resume with resume = true\n",
          sig ? signal_name(sig) : "a signal to another rank", (long long)step, (long long)c->max_steps);
      r->stopped = true;
      break;
    }
  }
  r->mf = NULL;
  if (mf && !tg_metrics_close(mf, why, sizeof why)) tg_error(r->ctx, (tg_loc){c->out_dir, 0, 0}, "%s", why);
  write_plot(r, metrics_path);
  if (r->dranks > 1 && !sharded_weights(r))
    say(r, "replicas: the %d data-parallel ranks' weights were bit-identical after every step\n", r->dranks);
}

/* ---- before any work: what can be checked is checked --------------------------------- */

/* out_dir belongs to one run at a time: rank 0 holds an flock on
 * out_dir/tgrun.lock for the whole run.  The kernel drops the lock when
 * the process dies, however it dies, so a crashed run's leftover file
 * blocks nothing; the pid and host written in it are only for the message. */
static void lock_out_dir(run *r) {
  const char *path = path_in(r, r->cfg.out_dir, "tgrun.lock");
  char why[512];
  bool busy;
  r->lock_fd = tg_lock_file(path, &busy, why, sizeof why);
  if (r->lock_fd >= 0) return;
  if (busy)
    tg_error(r->ctx, (tg_loc){r->cfg.out_dir, 0, 0},
             "another run is using this out_dir (%s holds its lock: %s): wait for it to end, or give this run "
             "another out_dir",
             path, why);
  tg_error(r->ctx, (tg_loc){r->cfg.out_dir, 0, 0}, "%s (out_dir must be writable)", why);
}

/* A fresh run (no resume) would truncate train.log and the metrics and
 * rotate the old run's checkpoints out: refused while out_dir holds a
 * checkpoint, unless overwrite = true says to.  Checked under the lock,
 * before anything in out_dir is touched. */
static void refuse_fresh_run_over_old(run *r) {
  const tg_train_config *c = &r->cfg;
  if (c->resume || c->overwrite) return;
  const char *names[] = {TG_CKPT_FILE, TG_CKPT_PREV_FILE};
  for (int i = 0; i < 2; i++) {
    struct stat st;
    const char *path = path_in(r, c->out_dir, names[i]);
    if (stat(path, &st) == 0)
      tg_error(r->ctx, (tg_loc){c->out_dir, 0, 0},
               "out_dir %s already holds a run (%s): set resume = true to continue it, or overwrite = true to "
               "start afresh and replace its files, or choose another out_dir",
               c->out_dir, path);
  }
}

/* The ranks were started with the same configuration: a hash of each
 * rank's effective config, compared at start-up.  A difference names the
 * ranks and, on each of them, the first key that differs from rank 0's. */
/* FNV-1a of the model file's bytes; of the reason, when it cannot be read
 * (the compile reports that). */
static uint64_t model_hash(run *r) {
  char *text = NULL, why[512];
  size_t len = 0;
  uint64_t h = 1469598103934665603ull;
  const char *bytes = why;
  if (tg_read_whole_file(model_path(r), &text, &len, why, sizeof why)) bytes = text;
  else len = strlen(why);
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)bytes[i]) * 1099511628211ull;
  free(text);
  return h;
}

/* Every rank's mine, gathered: the ranks whose value is not rank 0's, as
 * text ("1, 3") in bad, and how many; rank 0's value in *rank0. */
static int ranks_unlike_rank0(run *r, uint64_t mine, char *bad, size_t badlen, uint64_t *rank0) {
  uint64_t *all = tg_xcalloc((size_t)r->nranks, sizeof *all);
  tg_comm_allgather_u64(mine, all);
  size_t n = 0;
  int nbad = 0;
  bad[0] = 0;
  for (int i = 1; i < r->nranks; i++)
    if (all[i] != all[0]) {
      if (n + 16 < badlen) n += (size_t)snprintf(bad + n, badlen - n, "%s%d", nbad ? ", " : "", i);
      nbad++;
    }
  *rank0 = all[0];
  free(all);
  return nbad;
}

/* The same train.cfg can name different model files on different ranks: a
 * relative path read from different working directories, or a copy edited
 * on one machine.  The configurations then agree, and the run failed after
 * its first step with an error that named no file; so the model file's
 * contents are compared too, before anything is compiled.  (Its imports
 * are not: they come from the installed models/ of the same build.) */
static void check_model_files_agree(run *r) {
  char bad[256];
  uint64_t rank0;
  int nbad = ranks_unlike_rank0(r, model_hash(r), bad, sizeof bad, &rank0);
  if (!nbad) return;
  if (r->rank != 0) tg_bail(r->ctx);
  tg_error(r->ctx, key_loc(r, "model"),
           "model \"%s\": the ranks read different model files: rank%s %s read%s other contents than rank 0's %s "
           "(give every rank the same file: an absolute path, or the same working directory)",
           r->cfg.model, nbad > 1 ? "s" : "", bad, nbad > 1 ? "" : "s", model_path(r));
}

static void check_ranks_agree(run *r) {
  if (r->nranks < 2) return;
  uint64_t mine = tg_train_config_hash(&r->cfg), rank0;
  char bad[256];
  int nbad = ranks_unlike_rank0(r, mine, bad, sizeof bad, &rank0);
  bool differ = mine != rank0;
  if (!nbad) {
    check_model_files_agree(r);
    return;
  }
  /* rank 0's config as text, to every rank, to find the key that differs */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f) {
    if (r->rank == 0) tg_train_config_print(f, &r->cfg);
    fclose(f);
  }
  uint64_t len64 = len;
  tg_comm_broadcast(&len64, sizeof len64);
  char *theirs = tg_alloc(r->ctx->arena, (size_t)len64 + 1);
  if (r->rank == 0 && text) memcpy(theirs, text, len64);
  free(text);
  tg_comm_broadcast(theirs, (size_t)len64);
  theirs[len64] = 0;
  const char *what = "";
  if (differ) {
    char *ours = NULL;
    size_t olen = 0;
    FILE *g = open_memstream(&ours, &olen);
    if (g) {
      tg_train_config_print(g, &r->cfg);
      fclose(g);
      /* the first line that differs */
      const char *a = ours, *b = theirs;
      while (*a && *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        if (la != lb || memcmp(a, b, la)) {
          what = tg_sprintf(r->ctx->arena, ": here '%.*s', on rank 0 '%.*s'", (int)la, a, (int)lb, b);
          break;
        }
        a += la + (ea ? 1 : 0), b += lb + (eb ? 1 : 0);
      }
      if (!*what && (*a || *b)) what = ": the ranks set different model.NAME keys";
      free(ours);
    }
  }
  /* the ranks that differ say how, then rank 0 names them all; the
   * barrier keeps rank 0's exit from ending the job before they have */
  if (differ)
    tg_report(r->ctx, "error", (tg_loc){r->cfg.path, 0, 0},
              "rank %d was started with another configuration than rank 0%s (start every rank with the same "
              "train.cfg and KEY=VALUE arguments)",
              r->rank, what);
  fflush(stderr);
  tg_comm_barrier();
  if (r->rank != 0) tg_bail(r->ctx);
  tg_error(r->ctx, (tg_loc){r->cfg.path, 0, 0},
           "the ranks were started with different configurations: rank%s %s differ%s from rank 0 (start every "
           "rank with the same train.cfg and KEY=VALUE arguments)",
           nbad > 1 ? "s" : "", bad, nbad > 1 ? "" : "s");
}

/* Where a value of the config was set, for messages. */
static const char *origin_text(run *r, tg_cfg_origin o, const char *what) {
  if (o.cmdline) return tg_sprintf(r->ctx->arena, "command line (%s)", what);
  if (o.line > 0) return tg_sprintf(r->ctx->arena, "%s:%d:%d (%s)", r->cfg.path, o.line, o.col, what);
  return tg_sprintf(r->ctx->arena, "the default (%s)", what);
}

/* Where a train.cfg key was set. */
static tg_cfg_origin key_origin(const tg_train_config *c, const char *key) {
  for (int k = 0; k < TG_TRAIN_NKEYS; k++)
    if (!strcmp(tg_train_config_key(k), key)) return c->origin[k];
  return (tg_cfg_origin){0};
}

/* Where a message about a train.cfg key points: its line, the command
 * line, or the file for a default. */
static tg_loc key_loc(const run *r, const char *key) {
  tg_cfg_origin o = key_origin(&r->cfg, key);
  return o.cmdline ? (tg_loc){"command line", 0, 0} : (tg_loc){r->cfg.path, o.line, o.col};
}

/* init_from's file gives the model's sizes (hf.h) where train.cfg does not:
 * read before anything is compiled, and checked against model.NAME, the
 * tokenizer's vocabulary and block_size, so that a file of another size
 * is reported at once with both numbers. */
static void check_init_dims(run *r) {
  const tg_train_config *c = &r->cfg;
  if (!c->init_from || !*c->init_from || c->resume) return;
  tg_hf_dims_of_file(r->ctx, c->init_from, &r->init_dims);
  tg_hf_dim *set = tg_alloc(r->ctx->arena, sizeof *set * (size_t)(c->n_defines + 1));
  int n = 0;
  for (int i = 0; i < c->n_defines; i++)
    set[n++] = (tg_hf_dim){c->defines[i].name, c->defines[i].value,
                           origin_text(r, c->defines[i].origin, tg_sprintf(r->ctx->arena, "model.%s", c->defines[i].name))};
  /* the tokenizer's vocabulary is the model's (compile_model) */
  set[n++] = (tg_hf_dim){"vocab", (double)r->vocab,
                         tg_sprintf(r->ctx->arena, "%s/tokenizer.json (the tokenizer's vocabulary)", c->data_dir)};
  tg_hf_dims_check(r->ctx, &r->init_dims, set, n);
  const tg_hf_dim *rows = tg_hf_dims_get(&r->init_dims, "block_size");
  bool block_given = false;
  for (int i = 0; i < c->n_defines; i++) block_given |= !strcmp(c->defines[i].name, "block_size");
  if (rows && !block_given && (double)c->block_size > rows->value) {
    tg_error(r->ctx, key_loc(r, "block_size"),
             "block_size = %lld, but the weights' position table has %.0f rows (%s): lower block_size to at most "
             "%.0f",
             (long long)c->block_size, rows->value, rows->from, rows->value);
  }
  if (!r->init_dims.n) return;
  say(r, "model sizes from %s:", c->init_from);
  for (int i = 0; i < r->init_dims.n; i++) say(r, " %s=%.17g", r->init_dims.d[i].name, r->init_dims.d[i].value);
  say(r, "\n");
}

/* The data and the prompt fit the run: checked before anything is
 * compiled, so that no training is lost to them at its end. */
static void check_data(run *r) {
  const tg_train_config *c = &r->cfg;
  int64_t need = c->block_size + 1;
  const tg_corpus *split[2] = {r->train, r->val};
  const char *largest[2] = {"the largest train shard", "the largest val shard"};
  for (int i = 0; i < 2; i++) {
    const tg_corpus *d = split[i];
    bool one = d->n_shards == 1;
    const char *where = one ? d->shards[0]->path : d->name, *base = strrchr(where, '/');
    if ((int64_t)d->largest < need)
      tg_error(r->ctx, (tg_loc){where, 0, 0},
               "%s has %llu tokens, but a sequence of block_size %lld needs %lld (its targets are shifted by "
               "one)%s: lower block_size or prepare more data%s",
               one ? (base ? base + 1 : where) : largest[i], (unsigned long long)d->largest, (long long)c->block_size,
               (long long)need, i == 1 ? "; evaluation reads the validation split" : "",
               i == 1 ? " (tgrun prepare --val-fraction above 0)" : "");
  }
  /* the sequential orders read a step's batch from one shard: train for
   * the ranks' micro-steps, val for rank 0's evaluation batches */
  char bad[1024];
  if (!tg_loader_check(r->train, r->order, c->batch_size, c->block_size, 0, (int)c->grad_accum * r->nranks, bad,
                       sizeof bad))
    tg_error(r->ctx, key_loc(r, "data_order"), "%s", bad);
  if (!tg_loader_check(r->val, r->order, c->batch_size, c->block_size, 0, 1, bad, sizeof bad))
    tg_error(r->ctx, key_loc(r, "data_order"), "%s", bad);
  if (c->sample_tokens > 0) {
    char why[512];
    int32_t *prompt = NULL;
    size_t np = 0;
    bool ok = tg_tok_encode(r->tok, c->sample_prompt, strlen(c->sample_prompt), &prompt, &np, why, sizeof why);
    free(prompt);
    if (!ok) {
      tg_error(r->ctx, key_loc(r, "sample_prompt"),
               "sample_prompt cannot be encoded by %s/tokenizer.json: %s (use only text of the training data, or set "
               "sample_tokens = 0)",
               c->data_dir, why);
    }
  }
}

/* The `hellaswag` key's file, read and encoded whole before anything is
 * compiled: a bad line, a tokenizer other than GPT-2's BPE, or an
 * example longer than block_size stops the run here, not at its first
 * evaluation. */
static void load_hellaswag(run *r) {
  const tg_train_config *c = &r->cfg;
  if (!c->hellaswag || !*c->hellaswag) return;
  if (access(c->hellaswag, R_OK) != 0)
    tg_error(r->ctx, key_loc(r, "hellaswag"), "hellaswag = \"%s\": %s (HellaSwag's hellaswag_val.jsonl; a relative "
             "path is from where tgrun runs)", c->hellaswag, strerror(errno));
  r->hella = tg_hellaswag_load(r->ctx, c->hellaswag, r->tok, c->hellaswag_examples, "hellaswag");
  if (r->hella->longest > c->block_size)
    tg_error(r->ctx, key_loc(r, "hellaswag"),
             "hellaswag: the example at line %lld of %s is %lld tokens with its longest ending, more than block_size "
             "%lld: raise block_size, or score it with a model of a longer context (tgrun eval)",
             (long long)r->hella->longest_line, c->hellaswag, (long long)r->hella->longest, (long long)c->block_size);
  say(r, "hellaswag: %s: %lld examples, the longest %lld tokens; scored at each evaluation\n", c->hellaswag,
      (long long)r->hella->n, (long long)r->hella->longest);
}

/* ---- entry ----------------------------------------------------------------------- */

/* Everything from the config to the end of the loop; errors longjmp out
 * of it to tg_train. */
/* Every rank compiles the same model from the same configuration (the
 * ranks checked that they agree), so an error in it is every rank's, and
 * printed by each it came out N times, interleaved mid-line.  Ranks other
 * than 0 hold their messages from that check until training starts (the
 * check's own messages, each rank's difference, are its own). */
static void hold_setup_errors(run *r) {
  if (r->nranks < 2 || r->rank == 0) return;
  r->held = open_memstream(&r->held_text, &r->held_len);
  if (r->held) r->ctx->err = r->held;
}

/* Setup went well: what a rank held (warnings) is printed after all. */
static void release_setup_errors(run *r) {
  if (!r->held) return;
  fclose(r->held);
  r->held = NULL;
  r->ctx->err = stderr;
  if (r->held_len) fwrite(r->held_text, 1, r->held_len, stderr);
  free(r->held_text);
  r->held_text = NULL;
}

/* An error in setup on a rank other than 0: rank 0, doing the same work,
 * meets the same error, prints it and exits, and mpirun then ends this
 * rank within about a second.  Still alive after a few seconds, this rank
 * failed on its own (a file only it cannot read) and says so itself. */
static void report_held_setup_error(run *r) {
  if (!r->held) return;
  fclose(r->held);
  r->held = NULL;
  r->ctx->err = stderr;
  if (r->held_len) {
    sleep(5);
    fprintf(stderr, "tgrun: rank %d of %d:\n", r->rank, r->nranks);
    fwrite(r->held_text, 1, r->held_len, stderr);
  }
  free(r->held_text);
  r->held_text = NULL;
}

/* tp > 1: the ranks become a data x tensor mesh (comm.h); from here on
 * the data-parallel collectives run among the ranks that hold the same
 * tensor part. */
static void split_mesh(run *r) {
  r->tp = (int)r->cfg.tp;
  r->drank = r->rank, r->dranks = r->nranks, r->trank = 0;
  if (r->tp == 1) return;
  char why[256];
  if (!tg_comm_split_mesh(r->tp, why, sizeof why)) tg_error(r->ctx, key_loc(r, "tp"), "tp = %d: %s", r->tp, why);
  r->drank = tg_comm_rank(), r->dranks = tg_comm_size(), r->trank = tg_comm_tensor_rank();
}

static int train(run *r) {
  char why[1024];
  const tg_train_config *c = &r->cfg;
  /* the CPU backend's threads (OpenMP's, read when the kernels' OpenMP
   * starts): the machine's cores shared among its ranks, unless threads
   * or OMP_NUM_THREADS says otherwise (host_cores.c) */
  int ranks_here = tg_comm_local_size();
  bool over = false;
  if (c->threads > 0 || !getenv("OMP_NUM_THREADS")) {
    r->threads = tg_threads_per_rank(c->threads, ranks_here, &over);
    char t[32];
    snprintf(t, sizeof t, "%d", r->threads);
    setenv("OMP_NUM_THREADS", t, 1);
  }
  if (over && r->rank == 0 && strcmp(c->backend, "cpu") == 0)
    fprintf(stderr,
            "tgrun: warning: %s: threads = %lld with %d rank%s on this machine is %lld threads for its %d cores: "
            "threads that wait for a core spin, and the run can be several times slower; threads = 0 gives each "
            "rank its share (%d)\n",
            c->path, (long long)c->threads, ranks_here, ranks_here == 1 ? "" : "s",
            (long long)c->threads * ranks_here, tg_host_cores(), tg_threads_per_rank(0, ranks_here, NULL));
  tg_comm_set_timeout((double)c->rank_timeout);
  check_ranks_agree(r);
  hold_setup_errors(r); /* from here on the ranks' work is the same: rank 0 speaks for them */
  if (r->rank == 0) {
    mkdirs(r, c->out_dir);
    lock_out_dir(r);
    refuse_fresh_run_over_old(r);
    if (c->resume) {
      /* before anything is compiled (initial_state checks again, on the
       * checkpoint it loads, in case this one could not be read) */
      char *ckpt = NULL;
      int64_t done = tg_ckpt_latest_step(c->out_dir, &ckpt);
      const char *at = ckpt ? tg_strdup(r->ctx->arena, ckpt) : NULL;
      free(ckpt);
      if (at) refuse_resume_without_steps(r, done, at);
    }
    r->log = fopen(path_in(r, c->out_dir, "train.log"), c->resume ? "a" : "w");
    if (!r->log)
      tg_error(r->ctx, (tg_loc){c->out_dir, 0, 0}, "cannot open %s/train.log: %s", c->out_dir, strerror(errno));
    if (!c->resume) { /* a resume's, once its checkpoint is loaded (initial_state) */
      remove(path_in(r, c->out_dir, "samples.txt")); /* a fresh run's samples only */
      write_effective_config(r);
    }
  }
  tg_comm_barrier();
  r->tok = tg_prepare_load_tokenizer(c->data_dir, why, sizeof why);
  if (!r->tok) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "data_dir: %s (make it with tgrun prepare)", why);
  r->vocab = tg_tok_vocab_size(r->tok);
  if (!tg_data_order_parse(c->data_order, &r->order)) /* validated with the config; kept in step here */
    tg_error(r->ctx, key_loc(r, "data_order"), "data_order = %s: expected random, sequential or shuffled",
             c->data_order);
  r->train = tg_corpus_open(c->data_dir, "train", c->train_files, r->vocab, why, sizeof why);
  if (!r->train) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "%s", why);
  r->val = tg_corpus_open(c->data_dir, "val", c->val_files, r->vocab, why, sizeof why);
  if (!r->val) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "%s", why);
  say(r, "data: %s: %llu train and %llu val tokens", c->data_dir, (unsigned long long)r->train->n,
      (unsigned long long)r->val->n);
  if (r->train->n_shards > 1 || r->val->n_shards > 1)
    say(r, " (%d and %d shards)", r->train->n_shards, r->val->n_shards);
  say(r, ", %s order, %s tokenizer, vocab %d\n", tg_data_order_name(r->order), tg_tok_kind_name(tg_tok_kind_of(r->tok)),
      r->vocab);
  check_data(r);
  load_hellaswag(r);
  check_init_dims(r);
  split_mesh(r);
  build(r);
  release_setup_errors(r);
  train_loop(r);
  if (r->rank == 0) {
    say(r, "\n%s. run directory %s:\n", r->stopped ? "stopped" : "done", c->out_dir);
    say(r, "  log       %s/train.log\n  metrics   %s/%s\n  plot      %s/loss.svg\n  samples   %s/samples.txt\n",
        c->out_dir, c->out_dir, c->metrics_file, c->out_dir, c->out_dir);
    say(r, "  report    %s/report.html (the curves, samples and config, one page)\n", c->out_dir);
    const char *suffix = tg_device_source_suffix(r->dev);
    say(r, "  checkpoint %s/" TG_CKPT_FILE "\n", c->out_dir);
    if (suffix) say(r, "  kernels   %s/kernels/*%s\n", c->out_dir, suffix);
    say(r, "  fusion    %s/kernels/fusion.txt\n", c->out_dir);
  }
  return r->stopped ? TG_TRAIN_STOPPED : 0;
}

int tg_train(const tg_train_config *cfg, int rank, int nranks) {
  run *r = tg_xcalloc(1, sizeof *r);
  r->cfg = *cfg; /* shallow: the caller's strings, which outlive the run */
  r->rank = rank;
  r->nranks = nranks;
  r->ctx = tg_ctx_new(stderr);
  r->lock_fd = -1;
  r->started = now();
  jmp_buf bail;
  r->ctx->bail = &bail;
  int status;
  /* the work is in a function of its own: nothing of it lives in this
   * frame across the longjmp of an error */
  tg_stop_signals_catch(true);
  if (setjmp(bail)) status = 1;
  else status = train(r);
  /* A run stopped on a signal goes on catching them until the process
   * ends: under mpirun a rank may learn of the stop from another rank's
   * signal (the step's collective) before its own forwarded copy reaches
   * its signals' thread, and that copy must not end it as a second
   * signal would. */
  if (status != TG_TRAIN_STOPPED) tg_stop_signals_catch(false);
  report_held_setup_error(r);
  if (r->log) fclose(r->log);
  if (r->mf) {
    char why[256];
    tg_metrics_close(r->mf, why, sizeof why);
  }
  for (int m = 0; m < r->n_loaders; m++) tg_loader_free(r->loaders[m]);
  free(r->loaders);
  if (r->lock_fd >= 0) close(r->lock_fd); /* releases the lock; the file stays, harmlessly */
  tg_exec_free(r->e_grad);
  for (int i = 0; i < r->n_zero; i++) tg_exec_free(r->e_zero[i]);
  tg_zero_free(r->zero);
  tg_exec_free(r->e_eval);
  tg_exec_free(r->e_sample);
  tg_exec_free(r->e_hella);
  free(r->hella_logits);
  for (int i = 0; i < r->n_params; i++) {
    tg_tensor_free(r->params[i].value);
    tg_tensor_free(r->params[i].copy);
  }
  free(r->params);
  free(r->idx);
  free(r->tgt);
  free(r->sample_in);
  free(r->logits);
  tg_device_close(r->dev);
  tg_corpus_close(r->train);
  tg_corpus_close(r->val);
  if (r->tok) tg_tok_free(r->tok);
  tg_ctx_free(r->ctx);
  free(r);
  return status;
}
