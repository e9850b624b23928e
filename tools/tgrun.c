/* tgrun: runs tg models.
 *
 * Today it has the commands that check one training step against other
 * implementations: `init` writes initial weights, `grad` computes the loss
 * and every parameter's gradient for one batch, `step` applies AdamW steps.
 * They run on the reference interpreter (--backend ref), the oracle that
 * the compiled backends of later parts are held to.  Training from a
 * train.cfg arrives with part 5. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "cpu_backend.h"
#include "frontend.h"
#include "interp.h"
#include "ir.h"
#include "passes.h"
#include "prepare.h"
#include "train.h"
#include "safetensors.h"
#include "weights.h"

#define TG_VERSION "0.1.0"

static const char usage[] =
    "usage: tgrun train.cfg [KEY=VALUE ...]     train (docs/train-config.md)\n"
    "       tgrun --nproc N train.cfg ...        ... on N data-parallel ranks (mpirun)\n"
    "       tgrun COMMAND MODEL.tg [options]\n"
    "\n"
    "Commands:\n"
    "  prepare  text to train/val token files (char or GPT-2 BPE): tgrun prepare --help\n"
    "  init   write initial weights:      tgrun init MODEL.tg --seed S --out W.safetensors\n"
    "  grad   loss and gradients of one batch:\n"
    "         tgrun grad MODEL.tg --weights W.safetensors --batch X.safetensors --out G.safetensors\n"
    "  step   AdamW steps on one batch:\n"
    "         tgrun step MODEL.tg --weights W --batch X --lr LR --steps N --out W2.safetensors\n"
    "\n"
    "Model options (all commands):\n"
    "  -D NAME=VALUE      override a config constant (see tgc --help); B and T default\n"
    "                     to the batch's shape\n"
    "  -I DIR             also look for imports in DIR (then in $TG_PATH's directories,\n"
    "                     then the installed models/)\n"
    "\n"
    "Files:\n"
    "  --weights FILE     parameters, safetensors with Hugging Face names (F32, BF16, F16)\n"
    "  --batch FILE       safetensors with int32 'idx' and 'targets', both [B, T]\n"
    "  --out FILE         where to write (atomically): weights for init and step; for\n"
    "                     grad, the f32 scalar 'loss' and one f32 gradient per parameter\n"
    "                     under the parameter's name\n"
    "\n"
    "Options:\n"
    "  --seed N           init: the seed of the normal initialisers (default 1337)\n"
    "  --backend NAME     ref (default): the reference interpreter; cpu: the fused step\n"
    "                     as generated C, built with cc -O3 -fopenmp and OpenBLAS (cached\n"
    "                     under $TG_CACHE, $XDG_CACHE_HOME/tg or ~/.cache/tg)\n"
    "  --precision P      ref: f32 (default): every value rounded to float as a float32\n"
    "                     machine would; f64: double precision throughout (cpu: f32)\n"
    "  --lr X             step: learning rate (default 6e-4)\n"
    "  --steps N          step: number of steps (default 1)\n"
    "  --beta1 X --beta2 X --eps X --weight-decay X --clip X\n"
    "                     step: AdamW settings (defaults 0.9, 0.95, 1e-8, 0.1, 1.0;\n"
    "                     --clip 0 turns clipping off)\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 on success, 1 for a bad model, weights or batch file, 2 for bad usage.\n";

typedef enum command { CMD_INIT, CMD_GRAD, CMD_STEP } command;

typedef enum backend { BACKEND_REF, BACKEND_CPU } backend;

typedef struct opts {
  command cmd;
  backend backend;
  const char *model, *weights, *batch, *out;
  tg_define *defines;
  char (*define_names)[128];
  int n_defines;
  const char **incs;
  int n_incs;
  uint64_t seed;
  tg_precision prec;
  double lr;
  long steps;
  tg_adamw_opts adamw;
} opts;

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "tgrun: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see tgrun --help)\n");
  return 2;
}

static bool parse_number(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno == ERANGE || !isfinite(v)) return false;
  *out = v;
  return true;
}

/* Options that take a value, with where it goes. */
static int take_value(opts *o, const char *flag, const char *val) {
  double x;
  if (!strcmp(flag, "--weights")) o->weights = val;
  else if (!strcmp(flag, "--batch")) o->batch = val;
  else if (!strcmp(flag, "--out")) o->out = val;
  else if (!strcmp(flag, "-I")) o->incs[o->n_incs++] = val;
  else if (!strcmp(flag, "-D")) {
    if (!tg_define_parse(val, &o->defines[o->n_defines], o->define_names[o->n_defines],
                         sizeof o->define_names[o->n_defines]))
      return usage_error("-D %s: expected NAME=NUMBER, e.g. -D n_layer=2", val);
    o->n_defines++;
  } else if (!strcmp(flag, "--backend")) {
    if (!strcmp(val, "ref")) o->backend = BACKEND_REF;
    else if (!strcmp(val, "cpu")) o->backend = BACKEND_CPU;
    else return usage_error("--backend %s: expected ref (the reference interpreter) or cpu (generated C)", val);
  } else if (!strcmp(flag, "--precision")) {
    if (!strcmp(val, "f32")) o->prec = TG_PREC_F32;
    else if (!strcmp(val, "f64")) o->prec = TG_PREC_F64;
    else return usage_error("--precision %s: expected f32 or f64", val);
  } else {
    if (!parse_number(val, &x)) return usage_error("%s needs a number", flag);
    if (!strcmp(flag, "--seed")) {
      if (x < 0 || x != floor(x) || x > 9007199254740992.0)
        return usage_error("--seed %s: expected a non-negative integer", val);
      o->seed = (uint64_t)x;
    } else if (!strcmp(flag, "--lr")) o->lr = x;
    else if (!strcmp(flag, "--steps")) {
      if (x < 1 || x != floor(x) || x > 1e9) return usage_error("--steps %s: expected a count >= 1", val);
      o->steps = (long)x;
    } else if (!strcmp(flag, "--beta1")) o->adamw.beta1 = x;
    else if (!strcmp(flag, "--beta2")) o->adamw.beta2 = x;
    else if (!strcmp(flag, "--eps")) o->adamw.eps = x;
    else if (!strcmp(flag, "--weight-decay")) o->adamw.weight_decay = x;
    else if (!strcmp(flag, "--clip")) o->adamw.grad_clip = x;
    else return usage_error("unknown option '%s'", flag);
  }
  return -1;
}

static const char *const value_flags[] = {
    "--weights", "--batch", "--out",   "-I",    "-D",    "--backend",      "--precision",
    "--seed",    "--lr",    "--steps", "--beta1", "--beta2", "--eps", "--weight-decay", "--clip"};
enum { N_VALUE_FLAGS = sizeof value_flags / sizeof *value_flags };

/* Fills o from argv; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, opts *o) {
  if (argc < 2) return usage_error("%s", "no command (init, grad or step)");
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    fputs(usage, stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    printf("tgrun %s\n", TG_VERSION);
    return 0;
  }
  if (!strcmp(cmd, "init")) o->cmd = CMD_INIT;
  else if (!strcmp(cmd, "grad")) o->cmd = CMD_GRAD;
  else if (!strcmp(cmd, "step")) o->cmd = CMD_STEP;
  else {
    static const char *const cmds[] = {"init", "grad", "step", "prepare"};
    const char *s = tg_nearest(cmd, cmds, 4);
    if (s) {
      fprintf(stderr, "tgrun: error: unknown command '%s' (did you mean '%s'?)\n(see tgrun --help)\n",
              cmd, s);
      return 2;
    }
    return usage_error("unknown command '%s' (init, grad or step)", cmd);
  }
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    }
    if (a[0] == '-' && (a[1] == 'D' || a[1] == 'I') && a[2]) {
      char flag[3] = {'-', a[1], 0};
      int st = take_value(o, flag, a + 2);
      if (st >= 0) return st;
      continue;
    }
    const char *eq = strchr(a, '=');
    bool known = false;
    for (int k = 0; k < N_VALUE_FLAGS && !known; k++) {
      size_t n = strlen(value_flags[k]);
      if (!strcmp(a, value_flags[k]) || (eq && (size_t)(eq - a) == n && !strncmp(a, value_flags[k], n)))
        known = true;
    }
    if (known) {
      char flag[32];
      const char *val;
      if (eq && a[0] == '-' && a[1] == '-') {
        snprintf(flag, sizeof flag, "%.*s", (int)(eq - a), a);
        val = eq + 1;
      } else {
        if (i + 1 >= argc) return usage_error("%s needs a value", a);
        snprintf(flag, sizeof flag, "%s", a);
        val = argv[++i];
      }
      int st = take_value(o, flag, val);
      if (st >= 0) return st;
    } else if (a[0] == '-' && a[1]) {
      const char *s = tg_nearest(a, value_flags, N_VALUE_FLAGS);
      if (s) {
        fprintf(stderr, "tgrun: error: unknown option '%s' (did you mean '%s'?)\n(see tgrun --help)\n",
                a, s);
        return 2;
      }
      return usage_error("unknown option '%s'", a);
    } else if (o->model) {
      return usage_error("only one model file, please (got another: '%s')", a);
    } else {
      o->model = a;
    }
  }
  if (!o->model) return usage_error("%s", "no model file (e.g. models/gpt2.tg)");
  if (!o->out) return usage_error("%s", "--out FILE is required");
  const tg_adamw_opts *w = &o->adamw;
  if (!(o->lr > 0)) return usage_error("%s", "--lr must be above 0");
  if (!(w->beta1 >= 0 && w->beta1 < 1 && w->beta2 >= 0 && w->beta2 < 1))
    return usage_error("%s", "--beta1 and --beta2 must lie in [0, 1)");
  if (!(w->eps > 0)) return usage_error("%s", "--eps must be above 0");
  if (!(w->weight_decay >= 0 && w->grad_clip >= 0))
    return usage_error("%s", "--weight-decay and --clip must not be negative");
  if (o->cmd != CMD_INIT && (!o->weights || !o->batch))
    return usage_error("%s", "grad and step need --weights FILE and --batch FILE");
  return -1;
}

/* ---- running ---------------------------------------------------------------- */

static const tg_node *find_output(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, name)) return g->outputs[i].node;
  return NULL;
}

static const tg_node *find_input(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_input && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
  return NULL;
}

/* Compiles the model; B and T follow the batch unless given with -D. */
static tg_graph *compile(tg_ctx *ctx, const opts *o, const tg_batch *b) {
  /* The batch's B and T go first: the last -D of a name wins, so an
   * explicit -D B=... still decides (and a mismatch is then reported).  A
   * model without B or T constants just does not take them. */
  int n = 0;
  tg_define *all = tg_alloc(ctx->arena, sizeof *all * (size_t)(o->n_defines + 2));
  if (b) {
    all[n++] = (tg_define){"B", (double)b->B, true};
    all[n++] = (tg_define){"T", (double)b->T, true};
  }
  memcpy(all + n, o->defines, sizeof *all * (size_t)o->n_defines);
  n += o->n_defines;
  tg_compile_opts co = {all, n, o->incs, o->n_incs};
  tg_graph *g = tg_compile_file(ctx, o->model, &co);
  if (!tg_verify(ctx, g)) tg_bail(ctx);
  return g;
}

/* Checks that the model has inputs idx and targets of the batch's shape. */
static void check_batch_inputs(tg_ctx *ctx, const tg_graph *g, const tg_batch *b, const char *path) {
  const char *names[2] = {"idx", "targets"};
  for (int k = 0; k < 2; k++) {
    const tg_node *in = find_input(g, names[k]);
    if (!in)
      tg_error(ctx, (tg_loc){g->source, 1, 1}, "the model has no input '%s' to take the batch's",
               names[k]);
    if (in->type.rank != 2 || in->type.dim[0].size != b->B || in->type.dim[1].size != b->T) {
      char t[TG_TYPE_STR_MAX];
      tg_error(ctx, (tg_loc){path, 0, 0},
               "tensor '%s' is [%lld, %lld] but the model's input is %s (check -D B and -D T)",
               names[k], (long long)b->B, (long long)b->T, tg_type_str(&in->type, t, sizeof t));
    }
  }
}

/* Puts the batch into the model's inputs named like its tensors. */
static void feed_batch(tg_ctx *ctx, tg_interp *it, const tg_graph *g, const tg_batch *b,
                       const char *path) {
  check_batch_inputs(ctx, g, b, path);
  const char *names[2] = {"idx", "targets"};
  const int32_t *vals[2] = {b->idx, b->targets};
  for (int k = 0; k < 2; k++) {
    const tg_node *in = find_input(g, names[k]);
    double *dst = tg_interp_leaf(it, in);
    for (int64_t i = 0; i < b->B * b->T; i++) dst[i] = vals[k][i];
  }
}

static tg_interp *new_interp(tg_ctx *ctx, const tg_graph *g, tg_precision prec,
                             const tg_weights *w) {
  tg_interp *it = tg_interp_new(g, prec);
  if (!it)
    tg_error(ctx, (tg_loc){g->source, 1, 1},
             "the model is too large for the reference interpreter (try smaller -D sizes)");
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (!w->values[i]) continue;
    double *dst = tg_interp_leaf(it, n);
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++) dst[k] = w->values[i][k];
  }
  return it;
}

/* Copies the interpreter's current params back into w (after steps). */
static void read_back(tg_interp *it, const tg_graph *g, tg_weights *w) {
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_param) continue;
    const double *src = tg_interp_leaf(it, n);
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++) w->values[i][k] = (float)src[k];
  }
}

static int save_weights(const tg_weights *w, const char *path) {
  char why[512];
  if (tg_weights_save(w, path, false, why, sizeof why)) return 0;
  fprintf(stderr, "tgrun: error: %s\n", why);
  return 1;
}

static int cmd_init(tg_ctx *ctx, const opts *o) {
  tg_graph *g = compile(ctx, o, NULL);
  tg_weights *w = tg_weights_init(g, o->seed);
  int st = save_weights(w, o->out);
  if (st == 0) printf("wrote %s: initial weights, seed %llu\n", o->out, (unsigned long long)o->seed);
  tg_weights_free(w);
  tg_graph_free(g);
  return st;
}

/* The batch, the graph (with its backward, and the optimizer for step),
 * and the weights loaded into a fresh interpreter. */
typedef struct session {
  tg_batch *batch;
  tg_graph *g;
  tg_weights *w;
  tg_interp *it; /* --backend ref */
  tg_cpu *cpu;   /* --backend cpu */
} session;

static void session_free(session *s) {
  if (!s) return;
  if (s->it) tg_interp_free(s->it);
  tg_cpu_free(s->cpu);
  tg_weights_free(s->w);
  if (s->g) tg_graph_free(s->g);
  tg_batch_free(s->batch);
  free(s);
}

static void open_session(tg_ctx *ctx, const opts *o, session *s) {
  s->batch = tg_batch_load(ctx, o->batch);
  s->g = compile(ctx, o, s->batch);
  double vocab;
  if (tg_graph_get_config(s->g, "vocab", &vocab))
    tg_batch_check_ids(ctx, s->batch, o->batch, (int64_t)vocab);
  tg_pipeline_opts popts = {.grad = true, .step = o->cmd == CMD_STEP, .adamw = o->adamw,
                            .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(ctx, s->g, &popts);
  s->w = tg_weights_load(ctx, s->g, o->weights, false);
  if (o->backend == BACKEND_CPU) {
    if (o->prec != TG_PREC_F32) tg_error(ctx, (tg_loc){0}, "--backend cpu computes in f32 only");
    s->cpu = tg_cpu_new(ctx, s->g, getenv("TG_KEEP_C"));
    tg_cpu_profile(s->cpu, getenv("TG_PROFILE") != NULL);
    for (int i = 0; i < s->g->n_nodes; i++)
      if (s->w->values[i])
        memcpy(tg_cpu_leaf(s->cpu, s->g->nodes[i]), s->w->values[i],
               sizeof(float) * (size_t)tg_type_numel(&s->g->nodes[i]->type));
    check_batch_inputs(ctx, s->g, s->batch, o->batch);
    const char *names[2] = {"idx", "targets"};
    const int32_t *vals[2] = {s->batch->idx, s->batch->targets};
    for (int k = 0; k < 2; k++)
      memcpy(tg_cpu_leaf(s->cpu, find_input(s->g, names[k])), vals[k],
             sizeof(int32_t) * (size_t)(s->batch->B * s->batch->T));
  } else {
    s->it = new_interp(ctx, s->g, o->prec, s->w);
    feed_batch(ctx, s->it, s->g, s->batch, o->batch);
  }
  /* Every other input would silently stay zero: refuse instead. */
  for (int i = 0; i < s->g->n_nodes; i++) {
    const tg_node *n = s->g->nodes[i];
    if (n->op != TG_OP_input || !strcmp(n->name, "idx") || !strcmp(n->name, "targets")) continue;
    if (n->phase == TG_PHASE_OPTIMIZER) continue; /* lr and step, set per step */
    tg_error(ctx, n->loc, "the model's input '%s' has no value: tgrun feeds only 'idx' and "
             "'targets' from the batch", n->name);
  }
}

static int cmd_grad(tg_ctx *ctx, const opts *o, session *s) {
  open_session(ctx, o, s);
  if (s->cpu) tg_cpu_run(s->cpu);
  else tg_interp_run(ctx, s->it);
  const tg_graph *g = s->g;
  /* loss first, then each parameter's gradient under the parameter's name */
  int n = 0;
  float loss_value = 0;
  tg_st_tensor *ts = tg_alloc(ctx->arena, sizeof *ts * (size_t)(g->n_outputs + 1));
  for (int i = 0; i < g->n_outputs; i++) {
    const char *name = g->outputs[i].name;
    const tg_node *node = g->outputs[i].node;
    bool is_grad = !strncmp(name, TG_GRAD_PREFIX, strlen(TG_GRAD_PREFIX));
    if (!is_grad && strcmp(name, "loss")) continue;
    int64_t numel = tg_type_numel(&node->type);
    float *v = tg_alloc(ctx->arena, sizeof *v * (size_t)numel);
    if (s->cpu) {
      if (!tg_cpu_read(s->cpu, node, v))
        tg_error(ctx, node->loc, "internal: output '%s' is not in memory after the step", name);
    } else {
      const double *src = tg_interp_value(s->it, node);
      for (int64_t k = 0; k < numel; k++) v[k] = (float)src[k];
    }
    if (!is_grad) loss_value = v[0];
    /* At the parameter's file shape: a padded vocab (pad_vocab) is cropped. */
    tg_type ft;
    tg_file_type(g, &node->type, &ft);
    float *out = tg_alloc(ctx->arena, sizeof *out * (size_t)tg_type_numel(&ft));
    tg_copy_box(v, &node->type, out, &ft);
    tg_st_tensor *t = &ts[n++];
    t->name = is_grad ? name + strlen(TG_GRAD_PREFIX) : name;
    t->dtype = TG_F32;
    t->rank = ft.rank;
    for (int d = 0; d < t->rank; d++) t->shape[d] = ft.dim[d].size;
    t->data = out;
    t->nbytes = (size_t)tg_type_numel(&ft) * sizeof *out;
  }
  char why[512];
  if (!tg_st_write(o->out, ts, n, NULL, 0, why, sizeof why)) {
    fprintf(stderr, "tgrun: error: %s\n", why);
    return 1;
  }
  printf("loss %.8g\nwrote %s: loss and %d gradient%s\n", loss_value, o->out, n - 1, n == 2 ? "" : "s");
  return 0;
}

static int cmd_step(tg_ctx *ctx, const opts *o, session *s) {
  open_session(ctx, o, s);
  const tg_graph *g = s->g;
  const tg_node *lr_in = find_input(g, "lr"), *step_in = find_input(g, "step");
  const tg_node *loss = find_output(g, "loss"), *norm = find_output(g, "grad_norm");
  for (long i = 1; i <= o->steps; i++) {
    struct timespec t0, t1;
    double lossv, normv;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (s->cpu) {
      *(float *)tg_cpu_leaf(s->cpu, lr_in) = (float)o->lr;
      *(float *)tg_cpu_leaf(s->cpu, step_in) = (float)i;
      tg_cpu_run(s->cpu);
      float l, gn;
      if (!tg_cpu_read(s->cpu, loss, &l) || !tg_cpu_read(s->cpu, norm, &gn))
        tg_error(ctx, loss->loc, "internal: loss or grad_norm is not in memory after the step");
      lossv = l, normv = gn;
    } else {
      *tg_interp_leaf(s->it, lr_in) = o->lr;
      *tg_interp_leaf(s->it, step_in) = (double)i;
      tg_interp_run(ctx, s->it);
      lossv = tg_interp_value(s->it, loss)[0];
      normv = tg_interp_value(s->it, norm)[0];
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("step %ld/%ld  loss %.8g  grad_norm %.6g  lr %.3g  %.0f ms\n", i, o->steps, lossv, normv, o->lr, ms);
    fflush(stdout);
  }
  if (s->cpu && getenv("TG_PROFILE")) tg_cpu_profile_print(s->cpu, stdout, atoi(getenv("TG_PROFILE")) > 1 ? atoi(getenv("TG_PROFILE")) : 15);
  if (s->cpu) {
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i]->op == TG_OP_param)
        memcpy(s->w->values[i], tg_cpu_leaf(s->cpu, g->nodes[i]),
               sizeof(float) * (size_t)tg_type_numel(&g->nodes[i]->type));
  } else {
    read_back(s->it, g, s->w);
  }
  int st = save_weights(s->w, o->out);
  if (st == 0) printf("wrote %s: weights after %ld step%s\n", o->out, o->steps, o->steps == 1 ? "" : "s");
  return st;
}

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* tgrun --nproc N train.cfg ...: runs N ranks of this tgrun under mpirun. */
static int launch_ranks(int argc, char **argv) {
  char *end;
  long n = strtol(argv[2], &end, 10);
  if (*end || n < 1 || n > 4096) return usage_error("--nproc %s: expected a number of ranks from 1 to 4096", argv[2]);
  if (argc < 4) return usage_error("%s", "--nproc N needs a train.cfg after it");
  if (n == 1) {
    argv[2] = argv[0];
    return tg_train_main(argc - 2, argv + 2);
  }
  char **args = calloc((size_t)argc + 8, sizeof *args);
  if (!args) return 1;
  int k = 0;
  args[k++] = "mpirun";
  args[k++] = "-np";
  args[k++] = argv[2];
  /* more ranks than cores is slow but correct: let a small machine test it */
  args[k++] = "--oversubscribe";
  args[k++] = "--bind-to";
  args[k++] = "none";
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) self[len] = 0;
  args[k++] = len > 0 ? self : argv[0];
  for (int i = 3; i < argc; i++) args[k++] = argv[i];
  args[k] = NULL;
  if (getuid() == 0) { /* Open MPI refuses root unless told twice */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  fflush(stdout);
  execvp("mpirun", args);
  fprintf(stderr, "tgrun: error: cannot run mpirun: %s (install openmpi-bin)\n", strerror(errno));
  free(args);
  return 1;
}

int main(int argc, char **argv) {
  opts o = {.seed = 1337, .prec = TG_PREC_F32, .lr = 6e-4, .steps = 1, .adamw = tg_adamw_defaults};
  o.defines = calloc((size_t)argc + 1, sizeof *o.defines);
  o.define_names = calloc((size_t)argc + 1, sizeof *o.define_names);
  o.incs = calloc((size_t)argc + 64, sizeof *o.incs);
  if (!o.defines || !o.define_names || !o.incs) {
    fprintf(stderr, "tgrun: out of memory\n");
    return 1;
  }
  /* tgrun [--nproc N] train.cfg ...: the training loop (runtime/train.c) */
  if (argc >= 3 && !strcmp(argv[1], "--nproc")) {
    free(o.defines);
    free(o.define_names);
    free(o.incs);
    return launch_ranks(argc, argv);
  }
  if (argc >= 2 && has_suffix(argv[1], ".cfg")) {
    free(o.defines);
    free(o.define_names);
    free(o.incs);
    return tg_train_main(argc, argv);
  }
  if (argc >= 2 && !strcmp(argv[1], "prepare")) {
    free(o.defines);
    free(o.define_names);
    free(o.incs);
    return tg_prepare_main(argc - 1, argv + 1);
  }
  int status = parse_args(argc, argv, &o);
  if (status < 0) {
    /* -I first, then $TG_PATH, then the source tree's models/, as tgc. */
    char *tg_path = tg_import_path(o.incs, &o.n_incs, argc + 64, TG_MODELS_DIR);
    tg_ctx *ctx = tg_ctx_new(stderr);
    /* On the heap: what it holds must survive an error's longjmp. */
    session *const s = calloc(1, sizeof *s);
    jmp_buf bail;
    ctx->bail = &bail;
    if (!s) status = 1;
    else if (setjmp(bail)) status = 1;
    else if (o.cmd == CMD_INIT) status = cmd_init(ctx, &o);
    else if (o.cmd == CMD_GRAD) status = cmd_grad(ctx, &o, s);
    else status = cmd_step(ctx, &o, s);
    session_free(s);
    tg_ctx_free(ctx);
    free(tg_path);
  }
  free(o.defines);
  free(o.define_names);
  free(o.incs);
  return status;
}
