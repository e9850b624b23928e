/* train.c: `tgrun train.cfg`, the training loop (train.h).
 *
 * One run compiles the model four times, each graph lowered to C and run
 * by the CPU backend (cpu_backend.h), all sharing one copy of the
 * parameters:
 *
 *   grad      forward and backward of one micro-batch: the loss and every
 *             parameter's gradient; the schedule pass (passes/schedule.c)
 *             calls back after each bucket of gradients is complete, and
 *             there the gradients are added into the accumulators and, on
 *             a step's last micro-batch, averaged over the ranks;
 *   optimizer clipping and AdamW on the accumulated gradients (tg's adamw
 *             pass on a graph whose gradients are inputs);
 *   eval      the forward of one batch: the loss on train and val batches;
 *   sample    the forward of one sequence with its logits, for text samples.
 *
 * Rank 0 evaluates, samples, logs and writes checkpoints; every rank takes
 * the same steps on its own slice of each batch (dataloader.h), so the
 * replicas stay bit-identical, which is checked every step. */
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "cpu_backend.h"
#include "dataloader.h"
#include "frontend.h"
#include "loss_plot.h"
#include "lr_schedule.h"
#include "metrics.h"
#include "passes.h"
#include "prepare.h"
#include "render.h"
#include "lower.h"
#include "rng.h"
#include "sampler.h"
#include "tokenizer.h"
#include "tokens_file.h"
#include "train_config.h"
#include "weights.h"

#define TG_TRAIN_VERSION "tgrun 0.1.0"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float *falloc(int64_t n) {
  size_t bytes = ((size_t)(n ? n : 1) * sizeof(float) + 255) / 256 * 256;
  float *p = aligned_alloc(256, bytes);
  if (!p) {
    fprintf(stderr, "tgrun: out of memory\n");
    exit(1);
  }
  memset(p, 0, bytes);
  return p;
}

/* ---- the run ---------------------------------------------------------------- */

/* One parameter, shared by every graph. */
typedef struct param {
  const char *name;
  tg_type type;      /* the graph's (padded) shape */
  int64_t numel;
  float *value, *grad_acc, *m, *v;
} param;

typedef struct run {
  tg_ctx *ctx;
  tg_train_config cfg;
  int rank, nranks;
  FILE *log;         /* out_dir/train.log (rank 0) */
  tg_tokenizer *tok;
  int32_t vocab;
  tg_tokens *train, *val;
  tg_graph *g_grad, *g_opt, *g_eval, *g_sample;
  tg_cpu *c_grad, *c_opt, *c_eval, *c_sample;
  param *params;
  int n_params;
  int *param_of_grad; /* per g_grad node: index into params of the grad it is, or -1 */
  int micro, accum;   /* the micro-step running, of how many */
  float *bucket_buf;  /* the largest bucket's gradients, packed for the all-reduce */
  double grad_seconds[TG_NPHASES];
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
    fflush(r->log);
  }
}

static const char *path_in(run *r, const char *dir, const char *file) {
  return tg_sprintf(r->ctx->arena, "%s/%s", dir, file);
}

static void mkdirs(run *r, const char *dir) {
  char *d = tg_strdup(r->ctx->arena, dir);
  for (char *p = d + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(d, 0777);
      *p = '/';
    }
  if (mkdir(d, 0777) != 0 && errno != EEXIST)
    tg_error(r->ctx, (tg_loc){r->cfg.path, 0, 0}, "cannot make directory '%s': %s", dir, strerror(errno));
}

/* ---- graphs -------------------------------------------------------------------- */

/* The model with the run's config: the train.cfg's model.NAME values, the
 * tokenizer's vocabulary, and B, T of the batch. */
static tg_graph *compile_model(run *r, int64_t B, bool sample) {
  const tg_train_config *c = &r->cfg;
  tg_define *d = tg_alloc(r->ctx->arena, sizeof *d * (size_t)(c->n_defines + 4));
  int n = 0;
  bool block_given = false;
  for (int i = 0; i < c->n_defines; i++) {
    d[n++] = (tg_define){c->defines[i].name, c->defines[i].value, false};
    block_given |= !strcmp(c->defines[i].name, "block_size");
  }
  d[n++] = (tg_define){"vocab", (double)r->vocab, true};
  d[n++] = (tg_define){"B", (double)B, true};
  d[n++] = (tg_define){"T", (double)c->block_size, true};
  if (!block_given) d[n++] = (tg_define){"block_size", (double)c->block_size, true};
  const char *incs[1] = {TG_TRAIN_MODELS_DIR};
  tg_compile_opts co = {d, n, incs, 1};
  /* model = "models/gpt2.tg" run from elsewhere: the installed models/ */
  const char *path = c->model;
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  const char *installed = tg_sprintf(r->ctx->arena, "%s/%s", TG_TRAIN_MODELS_DIR, base);
  if (access(path, F_OK) != 0 && path[0] != '/' && access(installed, F_OK) == 0) path = installed;
  tg_graph *g = tg_compile_file(r->ctx, path, &co);
  if (!tg_verify(r->ctx, g)) tg_bail(r->ctx);
  if (sample) {
    /* the head's output, named `logits` in the model, is what sampling reads */
    tg_node *logits = NULL;
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i]->name && !strcmp(g->nodes[i]->name, "logits") && g->nodes[i]->phase == TG_PHASE_FORWARD)
        logits = g->nodes[i];
    if (!logits)
      tg_error(r->ctx, (tg_loc){c->model, 1, 1}, "the model names no value 'logits' [B, T, vocab] to sample from");
    tg_graph_add_output(g, "logits", logits);
  }
  return g;
}

/* The optimizer alone: the model's parameters, their gradients as inputs
 * ("grad:NAME", the accumulated and averaged gradients), and the adamw
 * pass appended, as it is to a training step. */
static tg_graph *optimizer_graph(run *r, const tg_graph *model, const tg_adamw_opts *o) {
  tg_graph *g = tg_graph_new(r->ctx->arena);
  g->source = model->source;
  for (int i = 0; i < model->n_config; i++) tg_graph_set_config(g, model->config[i].name, model->config[i].value);
  for (int i = 0; i < model->n_nodes; i++) {
    const tg_node *p = model->nodes[i];
    if (p->op != TG_OP_param) continue;
    tg_node *q = tg_node_new(g, TG_OP_param, p->loc);
    q->type = p->type;
    q->name = p->name;
    q->init = p->init;
    const char *why = tg_graph_add(g, q);
    tg_node *gr = tg_node_new(g, TG_OP_input, p->loc);
    gr->type = p->type;
    gr->name = tg_sprintf(r->ctx->arena, TG_GRAD_PREFIX "%s", p->name);
    gr->phase = TG_PHASE_OPTIMIZER;
    if (!why) why = tg_graph_add(g, gr);
    if (why) tg_error(r->ctx, p->loc, "cannot build the optimizer graph: %s", why);
    tg_graph_add_output(g, gr->name, gr);
  }
  tg_append_adamw(r->ctx, g, o);
  /* only the norm is an output; the gradients were only for the pass */
  int k = 0;
  for (int i = 0; i < g->n_outputs; i++)
    if (strncmp(g->outputs[i].name, TG_GRAD_PREFIX, strlen(TG_GRAD_PREFIX))) g->outputs[k++] = g->outputs[i];
  g->n_outputs = k;
  if (!tg_verify(r->ctx, g)) tg_bail(r->ctx);
  return g;
}

static const tg_node *find_leaf(const tg_graph *g, tg_op op, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == op && g->nodes[i]->name && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
  return NULL;
}

static const tg_node *find_output(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, name)) return g->outputs[i].node;
  return NULL;
}

/* Builds the graph's C (kept in out_dir/kernels/NAME.c for the reader) and
 * loads it; every parameter leaf is bound to the shared copy. */
static tg_cpu *backend(run *r, tg_graph *g, const char *name) {
  const char *kdir = path_in(r, r->cfg.out_dir, "kernels");
  const char *c_path = r->rank == 0 ? path_in(r, kdir, tg_sprintf(r->ctx->arena, "%s.c", name)) : NULL;
  double t0 = now();
  tg_cpu *c = tg_cpu_new(r->ctx, g, c_path);
  say(r, "built %-9s %3d kernels  %s%s (%.1f s)\n", name, g->n_kernels, c_path ? c_path : "",
      tg_cpu_from_cache(c) ? ", from the cache" : "", now() - t0);
  for (int i = 0; i < r->n_params; i++) {
    const tg_node *p = find_leaf(g, TG_OP_param, r->params[i].name);
    if (p) tg_cpu_bind_leaf(c, p, r->params[i].value);
  }
  return c;
}

/* The graphs of the run, their kernels and the fusion report. */
static void build(run *r) {
  const tg_train_config *c = &r->cfg;
  tg_adamw_opts ao = {c->beta1, c->beta2, c->eps, c->weight_decay, c->grad_clip};
  const char *kdir = path_in(r, c->out_dir, "kernels");
  if (r->rank == 0) mkdirs(r, kdir);

  r->g_grad = compile_model(r, c->batch_size, false);
  FILE *fusion = r->rank == 0 ? fopen(path_in(r, kdir, "fusion.txt"), "w") : NULL;
  tg_pipeline_opts po = {.grad = true, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT, .report_pass = "fusion",
                         .report = fusion};
  tg_run_pipeline(r->ctx, r->g_grad, &po);
  if (fusion) fclose(fusion);

  /* the parameters, in the grad graph's order */
  for (int i = 0; i < r->g_grad->n_nodes; i++) r->n_params += r->g_grad->nodes[i]->op == TG_OP_param;
  r->params = tg_xcalloc((size_t)r->n_params, sizeof *r->params);
  r->param_of_grad = tg_xcalloc((size_t)r->g_grad->n_nodes + 1, sizeof(int));
  for (int i = 0; i < r->g_grad->n_nodes; i++) r->param_of_grad[i] = -1;
  int k = 0;
  for (int i = 0; i < r->g_grad->n_nodes; i++) {
    const tg_node *n = r->g_grad->nodes[i];
    if (n->op != TG_OP_param) continue;
    param *p = &r->params[k];
    p->name = n->name;
    p->type = n->type;
    p->numel = tg_type_numel(&n->type);
    p->value = falloc(p->numel);
    p->grad_acc = falloc(p->numel);
    p->m = falloc(p->numel);
    p->v = falloc(p->numel);
    const tg_node *gr = find_output(r->g_grad, tg_sprintf(r->ctx->arena, TG_GRAD_PREFIX "%s", n->name));
    if (gr) r->param_of_grad[tg_kernel_base(gr)->id] = k;
    k++;
  }

  r->g_opt = optimizer_graph(r, r->g_grad, &ao);
  tg_pipeline_opts pk = {.kernels = true};
  tg_run_pipeline(r->ctx, r->g_opt, &pk);
  r->g_eval = compile_model(r, c->batch_size, false);
  tg_pipeline_opts pe = {.kernels = true, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(r->ctx, r->g_eval, &pe);
  r->g_sample = compile_model(r, 1, true);
  tg_run_pipeline(r->ctx, r->g_sample, &pe);

  r->c_grad = backend(r, r->g_grad, "grad");
  r->c_opt = backend(r, r->g_opt, "optimizer");
  r->c_eval = backend(r, r->g_eval, "eval");
  r->c_sample = backend(r, r->g_sample, "sample");
  /* the optimizer's gradient inputs and moments are the run's buffers */
  for (int i = 0; i < r->n_params; i++) {
    param *p = &r->params[i];
    tg_cpu_bind_leaf(r->c_opt, find_leaf(r->g_opt, TG_OP_input, tg_sprintf(r->ctx->arena, TG_GRAD_PREFIX "%s", p->name)),
                     p->grad_acc);
    tg_cpu_bind_leaf(r->c_opt, find_leaf(r->g_opt, TG_OP_state, tg_sprintf(r->ctx->arena, TG_ADAM_M_PREFIX "%s", p->name)), p->m);
    tg_cpu_bind_leaf(r->c_opt, find_leaf(r->g_opt, TG_OP_state, tg_sprintf(r->ctx->arena, TG_ADAM_V_PREFIX "%s", p->name)), p->v);
  }
  tg_cpu_profile(r->c_grad, true);
}

/* ---- gradients: accumulated, then averaged over the ranks ------------------------ */

/* Called by the grad graph's step after each bucket of gradients is complete. */
static void on_bucket(int bucket, void *ctx) {
  run *r = ctx;
  const tg_bucket *B = &r->g_grad->allreduce->buckets[bucket];
  const float scale = 1.0f / (float)r->accum;
  bool last = r->micro == r->accum - 1;
  for (int i = 0; i < B->n_grads; i++) {
    const tg_node *n = r->g_grad->nodes[B->grads[i]];
    int pi = r->param_of_grad[n->id];
    if (pi < 0) continue;
    param *p = &r->params[pi];
    const float *g = tg_cpu_value(r->c_grad, n);
    if (!g) tg_error(r->ctx, n->loc, "internal: the gradient of '%s' is not contiguous in memory", p->name);
    if (r->micro == 0)
      for (int64_t e = 0; e < p->numel; e++) p->grad_acc[e] = g[e] * scale;
    else
      for (int64_t e = 0; e < p->numel; e++) p->grad_acc[e] += g[e] * scale;
  }
  /* only the last micro-step communicates: the bucket's gradients packed
   * into one buffer, one all-reduce */
  if (!last || r->nranks == 1) return;
  float *buf = r->bucket_buf;
  int64_t at = 0;
  for (int i = 0; i < B->n_grads; i++) {
    int pi = r->param_of_grad[B->grads[i]];
    if (pi < 0) continue;
    memcpy(buf + at, r->params[pi].grad_acc, sizeof(float) * (size_t)r->params[pi].numel);
    at += r->params[pi].numel;
  }
  tg_comm_average(buf, at);
  at = 0;
  for (int i = 0; i < B->n_grads; i++) {
    int pi = r->param_of_grad[B->grads[i]];
    if (pi < 0) continue;
    memcpy(r->params[pi].grad_acc, buf + at, sizeof(float) * (size_t)r->params[pi].numel);
    at += r->params[pi].numel;
  }
}

/* ---- evaluation and samples ------------------------------------------------------ */

static double eval_split(run *r, const tg_tokens *toks) {
  const tg_node *idx = find_leaf(r->g_eval, TG_OP_input, "idx"), *tgt = find_leaf(r->g_eval, TG_OP_input, "targets");
  const tg_node *loss = find_output(r->g_eval, "loss");
  double sum = 0;
  for (int64_t k = 0; k < r->cfg.eval_batches; k++) {
    tg_loader_eval_batch(toks, r->cfg.batch_size, r->cfg.block_size, (uint64_t)r->cfg.seed, k, 0, 1,
                         tg_cpu_leaf(r->c_eval, idx), tg_cpu_leaf(r->c_eval, tgt));
    tg_cpu_run(r->c_eval);
    float l;
    tg_cpu_read(r->c_eval, loss, &l);
    sum += l;
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
  const tg_node *idx = find_leaf(r->g_sample, TG_OP_input, "idx");
  const tg_node *logits = find_output(r->g_sample, "logits");
  int32_t *in = tg_cpu_leaf(r->c_sample, idx);
  int64_t Vp = logits->type.dim[logits->type.rank - 1].size;
  float *scratch = tg_xcalloc((size_t)r->vocab * 2 + 16, sizeof(float));
  tg_rng rng;
  tg_rng_seed(&rng, (uint64_t)c->seed, 0x5a5a0000u + (uint64_t)step);
  while (n < total) {
    /* the last T tokens, left-aligned: causal attention makes the logits at
     * position t depend only on tokens up to t, so the padding after is inert */
    int64_t from = n > T ? n - T : 0, len = n - from;
    for (int64_t t = 0; t < T; t++) in[t] = t < len ? ids[from + t] : 0;
    tg_cpu_run(r->c_sample);
    const float *row = tg_cpu_value(r->c_sample, logits);
    if (!row) tg_error(r->ctx, logits->loc, "internal: the logits are not in memory");
    ids[n++] = tg_sample(row + (len - 1) * Vp, r->vocab, c->temperature, (int32_t)c->top_k, &rng, scratch);
  }
  char *text = NULL;
  size_t tlen = 0;
  if (!tg_tok_decode(r->tok, ids, (size_t)n, &text, &tlen, why, sizeof why))
    tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "cannot decode a sample: %s", why);
  say(r, "---- sample at step %lld (temperature %g, top-k %lld) ----\n%.*s\n----\n", (long long)step, c->temperature,
      (long long)c->top_k, (int)tlen, text);
  FILE *f = fopen(path_in(r, c->out_dir, "samples.txt"), "a");
  if (f) {
    fprintf(f, "---- step %lld ----\n%.*s\n", (long long)step, (int)tlen, text);
    fclose(f);
  }
  free(text);
  free(ids);
  free(scratch);
}

/* ---- checkpoints ------------------------------------------------------------------ */

/* The optimizer graph's leaves by node id, as the checkpoint wants them. */
static float **leaf_values(run *r) {
  float **v = tg_alloc(r->ctx->arena, sizeof(float *) * ((size_t)r->g_opt->n_nodes + 1));
  for (int i = 0; i < r->n_params; i++) {
    param *p = &r->params[i];
    v[find_leaf(r->g_opt, TG_OP_param, p->name)->id] = p->value;
    v[find_leaf(r->g_opt, TG_OP_state, tg_sprintf(r->ctx->arena, TG_ADAM_M_PREFIX "%s", p->name))->id] = p->m;
    v[find_leaf(r->g_opt, TG_OP_state, tg_sprintf(r->ctx->arena, TG_ADAM_V_PREFIX "%s", p->name))->id] = p->v;
  }
  return v;
}

static void save_checkpoint(run *r, int64_t step, uint64_t position) {
  if (r->rank != 0) return;
  tg_ckpt_meta m = {.step = step, .data_position = position, .seed = (uint64_t)r->cfg.seed, .model = r->cfg.model,
                    .writer = TG_TRAIN_VERSION};
  char why[1024];
  double t0 = now();
  if (!tg_ckpt_save_in_dir(r->cfg.out_dir, r->g_opt, leaf_values(r), &m, why, sizeof why))
    tg_error(r->ctx, (tg_loc){r->cfg.out_dir, 0, 0}, "cannot write the checkpoint: %s", why);
  say(r, "checkpoint: %s/" TG_CKPT_FILE " at step %lld (%.2f s)\n", r->cfg.out_dir, (long long)step, now() - t0);
}

/* Fills the parameters (and for resume the moments) from wherever the
 * config says; returns the steps already done and the data position. */
static int64_t initial_state(run *r, uint64_t *position) {
  const tg_train_config *c = &r->cfg;
  *position = 0;
  if (c->resume) {
    tg_ckpt_meta m = {0};
    char *used = NULL;
    tg_weights *w = tg_ckpt_load_latest(r->ctx, r->g_opt, c->out_dir, true, &m, &used);
    if (!w) tg_bail(r->ctx);
    for (int i = 0; i < r->g_opt->n_nodes; i++) {
      const tg_node *n = r->g_opt->nodes[i];
      if (!w->values[i]) continue;
      for (int j = 0; j < r->n_params; j++) {
        param *p = &r->params[j];
        float *dst = NULL;
        if (n->op == TG_OP_param && !strcmp(n->name, p->name)) dst = p->value;
        else if (n->op == TG_OP_state && !strcmp(n->name + strlen(TG_ADAM_M_PREFIX), p->name) &&
                 !strncmp(n->name, TG_ADAM_M_PREFIX, strlen(TG_ADAM_M_PREFIX)))
          dst = p->m;
        else if (n->op == TG_OP_state && !strcmp(n->name + strlen(TG_ADAM_V_PREFIX), p->name) &&
                 !strncmp(n->name, TG_ADAM_V_PREFIX, strlen(TG_ADAM_V_PREFIX)))
          dst = p->v;
        if (dst) memcpy(dst, w->values[i], sizeof(float) * (size_t)p->numel);
      }
    }
    tg_weights_free(w);
    *position = m.data_position;
    say(r, "resumed from %s: %lld steps done\n", used ? used : c->out_dir, (long long)m.step);
    free(used);
    return m.step;
  }
  /* init_from: a tg checkpoint or a plain weights file (Hugging Face's
   * GPT-2, tgrun init/step output); only its weights are taken */
  const tg_graph *wg = c->init_from && *c->init_from ? r->g_opt : r->g_grad;
  tg_ckpt_meta m = {0};
  tg_weights *w = c->init_from && *c->init_from ? tg_ckpt_load(r->ctx, r->g_opt, c->init_from, false, &m)
                                                 : tg_weights_init(r->g_grad, (uint64_t)c->seed);
  if (!w) tg_bail(r->ctx);
  for (int i = 0; i < r->n_params; i++) {
    const tg_node *n = find_leaf(wg, TG_OP_param, r->params[i].name);
    memcpy(r->params[i].value, w->values[n->id], sizeof(float) * (size_t)r->params[i].numel);
  }
  tg_weights_free(w);
  if (c->init_from && *c->init_from) say(r, "initial weights from %s\n", c->init_from);
  return 0;
}

/* A hash of every parameter's bits: replicas must agree exactly. */
static uint64_t weights_hash(const run *r) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < r->n_params; i++) {
    const unsigned char *b = (const unsigned char *)r->params[i].value;
    for (size_t e = 0; e < (size_t)r->params[i].numel * sizeof(float); e++) h = (h ^ b[e]) * 1099511628211ull;
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
}

static void train_loop(run *r) {
  const tg_train_config *c = &r->cfg;
  uint64_t position;
  int64_t done = initial_state(r, &position);
  char why[1024];
  /* A step's batch is grad_accum x ranks slices of one seeded draw (stream =
   * the step): micro-step m of rank r takes slice m * ranks + r.  So 2
   * micro-batches of b, 2 ranks of b, and one batch of 2b all train on the
   * same sequences; one loader per micro-step, each at the step count. */
  int accum = (int)c->grad_accum;
  tg_loader **loaders = tg_xcalloc((size_t)accum, sizeof *loaders);
  for (int m = 0; m < accum; m++) {
    loaders[m] = tg_loader_new(r->train, c->batch_size, c->block_size, m * r->nranks + r->rank, accum * r->nranks,
                               (uint64_t)c->seed, position, why, sizeof why);
    if (!loaders[m]) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "%s", why);
  }
  const char *metrics_path = path_in(r, c->out_dir, c->metrics_file);
  tg_metrics_file *mf = NULL;
  if (r->rank == 0) {
    mf = tg_metrics_open(metrics_path, done > 0, why, sizeof why);
    if (!mf) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "%s", why);
  }

  const tg_node *idx = find_leaf(r->g_grad, TG_OP_input, "idx"), *tgt = find_leaf(r->g_grad, TG_OP_input, "targets");
  const tg_node *loss = find_output(r->g_grad, "loss");
  const tg_node *lr_in = find_leaf(r->g_opt, TG_OP_input, "lr"), *step_in = find_leaf(r->g_opt, TG_OP_input, "step");
  const tg_node *norm = find_output(r->g_opt, "grad_norm");
  tg_cpu_set_allreduce(r->c_grad, on_bucket, r);
  int64_t most = 0;
  for (int b = 0; b < r->g_grad->allreduce->n_buckets; b++) {
    const tg_bucket *B = &r->g_grad->allreduce->buckets[b];
    int64_t n = 0;
    for (int i = 0; i < B->n_grads; i++)
      if (r->param_of_grad[B->grads[i]] >= 0) n += r->params[r->param_of_grad[B->grads[i]]].numel;
    if (n > most) most = n;
  }
  r->bucket_buf = falloc(most);
  r->accum = (int)c->grad_accum;

  /* MFU as nanoGPT counts it: 6N + 12 L H Q T FLOPs per token, N without
   * the position embedding */
  double L = 0, H = 0, C = 0;
  tg_graph_get_config(r->g_grad, "n_layer", &L);
  tg_graph_get_config(r->g_grad, "n_head", &H);
  tg_graph_get_config(r->g_grad, "n_embd", &C);
  int64_t nparams = 0;
  for (int i = 0; i < r->n_params; i++)
    if (strcmp(r->params[i].name, "wpe.weight")) {
      tg_type ft;
      tg_file_type(r->g_grad, &r->params[i].type, &ft);
      nparams += tg_type_numel(&ft);
    }
  tg_mfu_model mm = {nparams, (int64_t)L, (int64_t)H, H > 0 ? (int64_t)(C / H) : 0, c->block_size};
  int64_t tokens_per_step = c->batch_size * c->block_size * c->grad_accum * r->nranks;
  double flops_per_step = tg_flops_per_step(&mm, tokens_per_step);

  tg_lr_schedule sched = {c->learning_rate, c->min_lr, c->warmup_steps, tg_train_config_decay_steps(c)};
  tg_log_columns cols = {c->max_steps, true};
  if (r->rank == 0) {
    say(r, "training %s: %lld parameters, %lld tokens per step (%lld x %lld x %lld accumulated x %d rank%s)\n",
        c->model, (long long)nparams, (long long)tokens_per_step, (long long)c->batch_size, (long long)c->block_size,
        (long long)c->grad_accum, r->nranks, r->nranks == 1 ? "" : "s");
    tg_log_legend(stdout, &cols);
    if (r->log) tg_log_legend(r->log, &cols);
  }
  if (done == 0 && r->rank == 0) {
    /* the loss before any step: the baseline of the plot */
    tg_metrics_row e = tg_metrics_row_blank(TG_METRICS_EVAL, 0);
    e.train_loss = eval_split(r, r->train);
    e.val_loss = eval_split(r, r->val);
    char line[512];
    tg_log_eval_line(line, sizeof line, &cols, &e);
    say(r, "%s\n", line);
    tg_metrics_append(mf, &e, why, sizeof why);
  }
  double phase0[TG_NPHASES] = {0};
  for (int64_t s = done; s < c->max_steps; s++) {
    double t0 = now();
    double lr = tg_lr_at(&sched, s);
    tg_cpu_phase_seconds(r->c_grad, phase0);
    double loss_sum = 0;
    for (r->micro = 0; r->micro < r->accum; r->micro++) {
      tg_loader_next(loaders[r->micro], tg_cpu_leaf(r->c_grad, idx), tg_cpu_leaf(r->c_grad, tgt));
      tg_cpu_run(r->c_grad);
      float l;
      tg_cpu_read(r->c_grad, loss, &l);
      loss_sum += l;
    }
    double phase1[TG_NPHASES];
    tg_cpu_phase_seconds(r->c_grad, phase1);
    *(float *)tg_cpu_leaf(r->c_opt, lr_in) = (float)lr;
    *(float *)tg_cpu_leaf(r->c_opt, step_in) = (float)(s + 1);
    tg_cpu_run(r->c_opt);
    float gn = 0;
    tg_cpu_read(r->c_opt, norm, &gn);
    double stats[1] = {loss_sum / r->accum};
    tg_comm_sum_doubles(stats, 1);
    double dt = now() - t0;
    if (r->nranks > 1 && !tg_comm_all_equal(weights_hash(r)))
      tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "the ranks' weights differ after step %lld", (long long)s + 1);

    int64_t step = s + 1;
    tg_metrics_row row = tg_metrics_row_blank(TG_METRICS_STEP, step);
    row.loss = stats[0] / r->nranks;
    row.lr = lr;
    row.grad_norm = gn;
    row.dt_ms = dt * 1e3;
    row.fwd_ms = (phase1[TG_PHASE_FORWARD] - phase0[TG_PHASE_FORWARD]) * 1e3;
    row.bwd_ms = (phase1[TG_PHASE_BACKWARD] - phase0[TG_PHASE_BACKWARD]) * 1e3;
    row.tok_per_s = (double)tokens_per_step / dt;
    row.mfu = tg_mfu(flops_per_step, dt, c->peak_flops);
    if (r->rank == 0) {
      if (due(step, c->log_interval, c->max_steps) || step == 1) {
        char line[512];
        tg_log_step_line(line, sizeof line, &cols, &row);
        say(r, "%s\n", line);
      }
      tg_metrics_append(mf, &row, why, sizeof why);
    }
    if (r->rank == 0 && due(step, c->eval_interval, c->max_steps)) {
      tg_metrics_row e = tg_metrics_row_blank(TG_METRICS_EVAL, step);
      e.train_loss = eval_split(r, r->train);
      e.val_loss = eval_split(r, r->val);
      char line[512];
      tg_log_eval_line(line, sizeof line, &cols, &e);
      say(r, "%s\n", line);
      tg_metrics_append(mf, &e, why, sizeof why);
      write_plot(r, metrics_path);
    }
    if (r->rank == 0 && due(step, c->sample_interval, c->max_steps)) sample(r, step);
    if (due(step, c->checkpoint_interval, c->max_steps)) save_checkpoint(r, step, tg_loader_position(loaders[0]));
  }
  if (mf && !tg_metrics_close(mf, why, sizeof why)) say(r, "warning: %s\n", why);
  write_plot(r, metrics_path);
  if (r->nranks > 1) say(r, "replicas: the %d ranks' weights were bit-identical after every step\n", r->nranks);
  for (int m = 0; m < accum; m++) tg_loader_free(loaders[m]);
  free(loaders);
}

/* ---- entry ----------------------------------------------------------------------- */

static const char train_usage[] =
    "usage: tgrun train.cfg [KEY=VALUE ...]\n"
    "       tgrun --nproc N train.cfg [KEY=VALUE ...]\n"
    "\n"
    "Trains as train.cfg says (docs/train-config.md: every key and its default);\n"
    "KEY=VALUE arguments override the file.  The run directory (out_dir) gets\n"
    "train.log, metrics.jsonl, loss.svg, samples.txt, checkpoints, the generated\n"
    "kernels (kernels/*.c) and the fusion report (kernels/fusion.txt).\n"
    "--nproc N runs N data-parallel ranks with mpirun; tgrun also runs as a rank\n"
    "when started by mpirun or srun itself.\n";

/* Everything between the config and the end of the loop; errors longjmp
 * out of it to tg_train_main. */
static int train(run *r, int argc, char **argv) {
  char why[1024];
  tg_train_config_defaults(&r->cfg);
  if (!tg_train_config_load(r->ctx, argv[1], &r->cfg)) return 1;
  for (int i = 2; i < argc; i++)
    if (!tg_train_config_override(r->ctx, &r->cfg, argv[i])) return 2;
  if (!tg_train_config_validate(r->ctx, &r->cfg)) return 1;
  const tg_train_config *c = &r->cfg;
  if (strcmp(c->backend, "cpu"))
    tg_error(r->ctx, c->origin[0].line ? (tg_loc){c->path, 1, 1} : (tg_loc){c->path, 0, 0},
             "backend '%s': training runs on the cpu backend so far (ref is for checking single steps with "
             "tgrun grad/step; cuda comes with the GPU runtime)", c->backend);
  if (c->threads > 0) {
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)c->threads);
    setenv("OMP_NUM_THREADS", t, 1); /* read when the kernels' OpenMP starts */
  }
  if (r->rank == 0) {
    mkdirs(r, c->out_dir);
    r->log = fopen(path_in(r, c->out_dir, "train.log"), c->resume ? "a" : "w");
    if (!c->resume) remove(path_in(r, c->out_dir, "samples.txt")); /* a fresh run's samples only */
    FILE *f = fopen(path_in(r, c->out_dir, "train.cfg"), "w");
    if (f) {
      tg_train_config_print(f, c);
      fclose(f);
    }
  }
  tg_comm_barrier();
  r->tok = tg_prepare_load_tokenizer(c->data_dir, why, sizeof why);
  if (!r->tok) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "data_dir: %s (make it with tgrun prepare)", why);
  r->vocab = tg_tok_vocab_size(r->tok);
  r->train = tg_tokens_open(path_in(r, c->data_dir, "train.bin"), r->vocab, why, sizeof why);
  if (!r->train) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "%s", why);
  r->val = tg_tokens_open(path_in(r, c->data_dir, "val.bin"), r->vocab, why, sizeof why);
  if (!r->val) tg_error(r->ctx, (tg_loc){c->path, 0, 0}, "%s", why);
  say(r, "data: %s: %zu train and %zu val tokens, %s tokenizer, vocab %d\n", c->data_dir, r->train->n, r->val->n,
      tg_tok_kind_name(tg_tok_kind_of(r->tok)), r->vocab);
  build(r);
  train_loop(r);
  if (r->rank == 0) {
    say(r, "\ndone. run directory %s:\n", c->out_dir);
    say(r, "  log       %s/train.log\n  metrics   %s/%s\n  plot      %s/loss.svg\n  samples   %s/samples.txt\n",
        c->out_dir, c->out_dir, c->metrics_file, c->out_dir, c->out_dir);
    say(r, "  checkpoint %s/" TG_CKPT_FILE "\n  kernels   %s/kernels/*.c\n  fusion    %s/kernels/fusion.txt\n",
        c->out_dir, c->out_dir, c->out_dir);
  }
  return 0;
}

int tg_train_main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help")) {
    fputs(train_usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  run *r = tg_xcalloc(1, sizeof *r);
  char why[1024];
  if (!tg_comm_init(&argc, &argv, &r->rank, &r->nranks, why, sizeof why)) {
    fprintf(stderr, "tgrun: error: %s\n", why);
    free(r);
    return 1;
  }
  r->ctx = tg_ctx_new(stderr);
  jmp_buf bail;
  r->ctx->bail = &bail;
  int status;
  /* the work is in a function of its own: nothing of it lives in this
   * frame across the longjmp of an error */
  if (setjmp(bail)) status = 1;
  else status = train(r, argc, argv);
  if (r->log) fclose(r->log);
  tg_cpu_free(r->c_grad);
  tg_cpu_free(r->c_opt);
  tg_cpu_free(r->c_eval);
  tg_cpu_free(r->c_sample);
  for (int i = 0; i < r->n_params; i++) {
    free(r->params[i].value);
    free(r->params[i].grad_acc);
    free(r->params[i].m);
    free(r->params[i].v);
  }
  free(r->params);
  free(r->param_of_grad);
  free(r->bucket_buf);
  if (r->train) tg_tokens_close(r->train);
  if (r->val) tg_tokens_close(r->val);
  if (r->tok) tg_tok_free(r->tok);
  tg_train_config_free(&r->cfg);
  tg_ctx_free(r->ctx);
  if (status && r->nranks > 1) {
    fflush(stderr);
    /* one rank's error must not leave the others waiting in a collective */
    exit(status);
  }
  tg_comm_finalize();
  free(r);
  return status;
}
