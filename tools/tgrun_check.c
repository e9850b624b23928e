/* tgrun_check.c: the command line of `tgrun init | grad | step` (the
 * work is runtime/train/single_step.c). */
#include "tgrun_cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "comm.h"
#include "diag.h"
#include "frontend.h"
#include "nearest.h"
#include "passes.h"
#include "single_step.h"
#include "program_dir.h"

#define TG_VERSION "0.1.0"

const char tgrun_check_usage[] =
    "usage: tgrun train.cfg [KEY=VALUE ...]     train (docs/train-config.md)\n"
    "       tgrun --nproc N train.cfg ...        ... on N ranks (mpirun): data-parallel, or a data x tensor mesh with tp = T\n"
    "       tgrun COMMAND MODEL.tg [options]\n"
    "\n"
    "Commands:\n"
    "  prepare  text to train/val token files (char or GPT-2 BPE): tgrun prepare --help\n"
    "  export   a checkpoint as Hugging Face's GPT-2 (model.safetensors, config.json):\n"
    "           tgrun export CKPT --out DIR (tgrun export --help)\n"
    "  sample   text from a trained model (key/value cache):      tgrun sample --help\n"
    "  eval     HellaSwag accuracy of a checkpoint, as llm.c:   tgrun eval --help\n"
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
    "  --weights FILE     parameters, safetensors with Hugging Face names (F32, BF16, F16):\n"
    "                     GPT2Model's or GPT2LMHeadModel's, or a tg checkpoint; the model's\n"
    "                     sizes come from it (n_head from its config.json or tg metadata)\n"
    "  --batch FILE       safetensors with int32 'idx' and 'targets', both [B, T]\n"
    "  --out FILE         where to write (atomically): weights for init and step; for\n"
    "                     grad, the f32 scalar 'loss' and one f32 gradient per parameter\n"
    "                     under the parameter's name\n"
    "\n"
    "Options:\n"
    "  --seed N           init: the seed of the normal initialisers (default 1337)\n"
    "  --backend NAME     ref (default): the reference interpreter; cpu: the fused step\n"
    "                     as generated C, built with cc -O2 -fopenmp, its matmuls oneDNN's\n"
    "                     or OpenBLAS's (TG_CPU_GEMM; cached under $TG_CACHE,\n"
    "                     $XDG_CACHE_HOME/tg or ~/.cache/tg); cuda: the\n"
    "                     generated CUDA on the GPU; cuda-emu: the same on the emulated\n"
    "                     device, every kernel run on the CPU, checked\n"
    "  --precision P      f32 (the default but on cuda): every value f32, rounded to float\n"
    "                     as a float32 machine would; bf16 (the default on cuda and\n"
    "                     cuda-emu): the mixed-precision policy, bf16 matmuls and saved\n"
    "                     activations, f32 master weights (docs/precision.md); f64: the\n"
    "                     ref interpreter in double precision throughout\n"
    "  --lr X             step: learning rate (default 6e-4)\n"
    "  --steps N          step: number of steps (default 1)\n"
    "  --beta1 X --beta2 X --eps X --weight-decay X --clip X\n"
    "                     step: AdamW settings (defaults 0.9, 0.95, 1e-8, 0.1, 1.0;\n"
    "                     --clip 0 turns clipping off)\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 on success, 1 for a bad model, weights or batch file, 2 for bad usage;\n"
    "training also 75 when a signal (SIGTERM, SIGINT, SIGUSR1) stopped it with its checkpoint.\n";

typedef enum command { CMD_INIT, CMD_GRAD, CMD_STEP } command;

typedef struct opts {
  command cmd;
  tg_single_opts s;
  tg_define *defines;
  char (*define_names)[128];
  const char **incs;
  bool precision_given; /* --precision: else the backend's policy */
} opts;

static int usage_error(const char *fmt, const char *arg) { return tg_usage_error("tgrun", fmt, arg); }

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
  if (!strcmp(flag, "--weights")) o->s.weights = val;
  else if (!strcmp(flag, "--batch")) o->s.batch = val;
  else if (!strcmp(flag, "--out")) o->s.out = val;
  else if (!strcmp(flag, "-I")) o->incs[o->s.n_include_dirs++] = val;
  else if (!strcmp(flag, "-D")) {
    if (!tg_define_parse(val, &o->defines[o->s.n_defines], o->define_names[o->s.n_defines],
                         sizeof o->define_names[o->s.n_defines]))
      return usage_error("-D %s: expected NAME=NUMBER, e.g. -D n_layer=2", val);
    o->s.n_defines++;
  } else if (!strcmp(flag, "--backend")) {
    if (!tg_backend_find(val)) {
      const char *near = tg_backend_suggest(val);
      fprintf(stderr, "tgrun: error: --backend %s: unknown backend%s%s%s (the backends: %s)\n(see tgrun --help)\n",
              val, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", tg_backend_names_text());
      return 2;
    }
    o->s.backend = val;
  } else if (!strcmp(flag, "--precision")) {
    o->precision_given = true;
    if (!strcmp(val, "f64")) {
      o->s.precision = TG_PREC_F64;
      o->s.policy = TG_PRECISION_F32;
    } else if (tg_precision_parse(val, &o->s.policy)) {
      o->s.precision = TG_PREC_F32;
    } else {
      return usage_error("--precision %s: expected f32, bf16 or f64", val);
    }
  } else {
    if (!parse_number(val, &x)) return usage_error("%s needs a number", flag);
    if (!strcmp(flag, "--seed")) {
      if (x < 0 || x != floor(x) || x > 9007199254740992.0)
        return usage_error("--seed %s: expected a non-negative integer", val);
      o->s.seed = (uint64_t)x;
    } else if (!strcmp(flag, "--lr")) o->s.lr = x;
    else if (!strcmp(flag, "--steps")) {
      if (x < 1 || x != floor(x) || x > 1e9) return usage_error("--steps %s: expected a count >= 1", val);
      o->s.steps = (long)x;
    } else if (!strcmp(flag, "--beta1")) o->s.adamw.beta1 = x;
    else if (!strcmp(flag, "--beta2")) o->s.adamw.beta2 = x;
    else if (!strcmp(flag, "--eps")) o->s.adamw.eps = x;
    else if (!strcmp(flag, "--weight-decay")) o->s.adamw.weight_decay = x;
    else if (!strcmp(flag, "--clip")) o->s.adamw.grad_clip = x;
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
    fputs(tgrun_check_usage, stdout);
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
    static const char *const cmds[] = {"init", "grad", "step", "prepare", "export", "sample", "eval"};
    const char *s = tg_nearest(cmd, cmds, sizeof cmds / sizeof *cmds);
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
      fputs(tgrun_check_usage, stdout);
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
    } else if (o->s.model) {
      return usage_error("only one model file, please (got another: '%s')", a);
    } else {
      o->s.model = a;
    }
  }
  if (!o->s.model) return usage_error("%s", "no model file (e.g. models/gpt2.tg)");
  if (!o->s.out) return usage_error("%s", "--out FILE is required");
  const tg_adamw_opts *w = &o->s.adamw;
  if (!(o->s.lr > 0)) return usage_error("%s", "--lr must be above 0");
  /* the step computes in f32: a beta closer to 1 rounds to 1 (the bias
   * correction divides by 0), a smaller eps to 0 (0 / 0) */
  if (!(w->beta1 >= 0 && w->beta1 <= 0.9999999 && w->beta2 >= 0 && w->beta2 <= 0.9999999))
    return usage_error("%s", "--beta1 and --beta2 must lie in [0, 0.9999999]");
  if (!(w->eps >= 1e-30)) return usage_error("%s", "--eps must be at least 1e-30");
  if (!(w->weight_decay >= 0 && w->grad_clip >= 0))
    return usage_error("%s", "--weight-decay and --clip must not be negative");
  if (o->cmd != CMD_INIT && (!o->s.weights || !o->s.batch))
    return usage_error("%s", "grad and step need --weights FILE and --batch FILE");
  if (o->s.precision == TG_PREC_F64 && strcmp(o->s.backend, "ref"))
    return usage_error("--precision f64 is the ref interpreter's alone (--backend %s computes in f32)", o->s.backend);
  /* the backend's policy unless one is asked for: bf16 on the cuda backends */
  if (!o->precision_given) tg_precision_parse(tg_backend_default_precision(tg_backend_find(o->s.backend)), &o->s.policy);
  return -1;
}

int tgrun_check_main(int argc, char **argv) {
  opts o = {0};
  o.s = (tg_single_opts){.seed = 1337, .precision = TG_PREC_F32, .lr = 6e-4, .steps = 1, .adamw = tg_adamw_defaults,
                         .backend = "ref"};
  o.defines = tg_xcalloc((size_t)argc + 1, sizeof *o.defines);
  o.define_names = tg_xcalloc((size_t)argc + 1, sizeof *o.define_names);
  o.incs = tg_xcalloc((size_t)argc + 64, sizeof *o.incs);
  int status = parse_args(argc, argv, &o);
  int rank, nranks;
  char why[1024];
  /* under mpirun, grad runs a model with a tensor axis on its ranks */
  if (status < 0 && !tg_comm_init(&argc, &argv, &rank, &nranks, why, sizeof why)) {
    fprintf(stderr, "tgrun: error: %s\n", why);
    status = 1;
  }
  if (status < 0) {
    /* -I first, then $TG_PATH, then the program's models/, as tgc. */
    char *tg_path = tg_import_path(o.incs, &o.s.n_include_dirs, argc + 64, tg_program_models_dir());
    o.s.defines = o.defines;
    o.s.include_dirs = o.incs;
    o.s.keep_source = getenv("TG_KEEP_C");
    const char *prof = getenv("TG_PROFILE");
    o.s.profile_top = prof ? (atoi(prof) > 1 ? atoi(prof) : 15) : 0;
    status = o.cmd == CMD_INIT ? tg_single_init(&o.s) : o.cmd == CMD_GRAD ? tg_single_grad(&o.s) : tg_single_step(&o.s);
    free(tg_path);
    if (status && tg_comm_size() > 1) {
      fflush(stderr);
      exit(status); /* one rank's error must not leave the others waiting in a collective */
    }
    tg_comm_finalize();
  }
  free(o.defines);
  free(o.define_names);
  free(o.incs);
  return status;
}
