/* tgrun_sample.c: the command line of `tgrun sample` (the work is
 * runtime/train/generate.c).  Every option is checked here, before any
 * file is read or anything compiled. */
#include "tgrun_cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "diag.h"
#include "frontend.h"
#include "generate.h"
#include "nearest.h"
#include "program_dir.h"

const char tgrun_sample_usage[] =
    "usage: tgrun sample --weights FILE [--model MODEL.tg] (--prompt TEXT | --prompt-file F) [options]\n"
    "\n"
    "Generates text from a trained model, a token at a time, with a key/value cache\n"
    "(the decode step: tgc --decode), streaming each token to stdout as it is made.\n"
    "\n"
    "  --weights FILE       a checkpoint (out_dir/ckpt.safetensors: it names its model and\n"
    "                       config) or a weights file (tgrun init/step, Hugging Face's\n"
    "                       model.safetensors: give --model); the model's sizes come\n"
    "                       from the file (and a config.json beside it)\n"
    "  --model MODEL.tg     the model; -D NAME=VALUE and -I DIR as for tgc\n"
    "  --tokenizer PATH     a directory with tokenizer.json (the run's data_dir, made by\n"
    "                       tgrun prepare), that file, or a directory with GPT-2's\n"
    "                       encoder.json and vocab.bpe (default: the weights' directory;\n"
    "                       for a run's checkpoint, the data_dir of its train.cfg)\n"
    "  --prompt TEXT        the text to continue (not empty)\n"
    "  --prompt-file F      ... read from F (at most 1 MiB; a larger file is refused)\n"
    "  --max-new-tokens N   tokens to generate per sample (default 256; --tokens N too)\n"
    "  --num-samples N      samples, one after another, each from the prompt (default 1),\n"
    "                       separated by a line of dashes\n"
    "  --temperature X      softmax temperature, > 0; 0: greedy, the most likely token\n"
    "                       (default 1)\n"
    "  --top-k N            sample among the N most likely tokens; 0: all (default 0)\n"
    "  --top-p P            nucleus sampling, 0 < P <= 1: after temperature and top-k, sample\n"
    "                       among the fewest most likely tokens whose probabilities add up\n"
    "                       to P; 1: all (default 1)\n"
    "  --repetition-penalty R\n"
    "                       every token already in the prompt or the text has its logit\n"
    "                       divided by R if positive, multiplied by R if negative (CTRL's,\n"
    "                       as transformers'); R > 0, above 1 discourages repeats; 1: off\n"
    "                       (default 1)\n"
    "  --no-stop-at-eot     with GPT-2's BPE, go on past <|endoftext|> (written out as such)\n"
    "                       instead of ending the sample there (the char tokenizer has no\n"
    "                       such token: its samples end at --max-new-tokens only)\n"
    "  --seed N             the sampling seed (default 1337); sample k uses stream k\n"
    "  --backend NAME       cpu (default): generated C; ref: the reference interpreter\n"
    "\n"
    "The prompt runs through the same decode step one token at a time.  Past the\n"
    "model's context (block_size tokens) the window slides: when the cache is full\n"
    "it is rebuilt from the last block_size/2 tokens, so each token sees between\n"
    "block_size/2 and block_size tokens, for about one extra step a token.  At\n"
    "--temperature 0, --top-k and --top-p change nothing.  The text goes to stdout,\n"
    "progress and tokens/s to stderr.  Exit status: 0, 1 for a bad model, weights,\n"
    "tokenizer or prompt, 2 for bad usage.\n";

static int usage_error(const char *fmt, const char *arg) { return tg_usage_error("tgrun sample", fmt, arg); }

static const char *const value_flags[] = {"--weights",     "--model",      "--tokenizer", "--prompt",
                                          "--prompt-file", "--max-new-tokens", "--tokens", "--num-samples",
                                          "--temperature", "--top-k",      "--seed",      "--backend",
                                          "-D",            "-I",           "--top-p",     "--repetition-penalty",
                                          /* the switches, after the flags with values */
                                          "--no-stop-at-eot"};
enum { N_FLAGS = sizeof value_flags / sizeof *value_flags, N_VALUE_FLAGS = N_FLAGS - 1 };

typedef struct opts {
  tg_generate_opts g;
  tg_define *defines;
  char (*define_names)[128];
  const char **incs;
  const char *prompt_file;
  bool prompt_given;
  char *prompt_text; /* the prompt file's contents */
  char prompt_name[4200]; /* "--prompt-file F", for messages */
} opts;

/* A whole number in [lo, hi], else a usage error naming the flag. */
static bool count(const char *flag, const char *val, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(val, &end, 10);
  if (end == val || *end || errno || v < lo || v > hi) {
    fprintf(stderr, "tgrun sample: error: %s %s: expected a whole number from %ld to %ld\n(see tgrun sample --help)\n",
            flag, val, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

/* A finite decimal number, else false (the caller names the range). */
static bool number(const char *val, double *out) {
  char *end;
  errno = 0;
  double v = strtod(val, &end);
  if (end == val || *end || errno || !isfinite(v)) return false;
  *out = v;
  return true;
}

static int take_value(opts *o, const char *flag, const char *val) {
  long n;
  if (!strcmp(flag, "--weights")) o->g.weights = val;
  else if (!strcmp(flag, "--model")) o->g.model = val;
  else if (!strcmp(flag, "--tokenizer")) o->g.tokenizer = val;
  else if (!strcmp(flag, "--prompt")) o->g.prompt = val, o->g.prompt_len = strlen(val), o->prompt_given = true;
  else if (!strcmp(flag, "--prompt-file")) o->prompt_file = val;
  else if (!strcmp(flag, "-I")) o->incs[o->g.n_include_dirs++] = val;
  else if (!strcmp(flag, "-D")) {
    if (!tg_define_parse(val, &o->defines[o->g.n_defines], o->define_names[o->g.n_defines],
                         sizeof o->define_names[o->g.n_defines]))
      return usage_error("-D %s: expected NAME=NUMBER, e.g. -D n_layer=2", val);
    o->g.n_defines++;
  } else if (!strcmp(flag, "--backend")) {
    if (!tg_backend_find(val)) {
      const char *near = tg_backend_suggest(val);
      fprintf(stderr, "tgrun sample: error: --backend %s: unknown backend%s%s%s (the backends: %s)\n", val,
              near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", tg_backend_names_text());
      return 2;
    }
    o->g.backend = val;
  } else if (!strcmp(flag, "--max-new-tokens") || !strcmp(flag, "--tokens")) {
    if (!count(flag, val, 1, 1 << 24, &n)) return 2;
    o->g.max_new_tokens = (int)n;
  } else if (!strcmp(flag, "--num-samples")) {
    if (!count(flag, val, 1, 1 << 20, &n)) return 2;
    o->g.num_samples = (int)n;
  } else if (!strcmp(flag, "--top-k")) {
    if (!count(flag, val, 0, 1 << 30, &n)) return 2;
    o->g.top_k = (int)n;
  } else if (!strcmp(flag, "--seed")) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (end == val || *end || errno || val[0] == '-')
      return usage_error("--seed %s: expected a whole number, 0 or more", val);
    o->g.seed = (uint64_t)v;
  } else if (!strcmp(flag, "--temperature")) {
    if (!number(val, &o->g.temperature) || o->g.temperature < 0)
      return usage_error("--temperature %s: expected a number, 0 (greedy) or more", val);
  } else if (!strcmp(flag, "--top-p")) {
    if (!number(val, &o->g.top_p) || !(o->g.top_p > 0 && o->g.top_p <= 1))
      return usage_error("--top-p %s: expected a number above 0 and at most 1 (1: no nucleus filter)", val);
  } else if (!strcmp(flag, "--repetition-penalty")) {
    if (!number(val, &o->g.repetition_penalty) || !(o->g.repetition_penalty > 0))
      return usage_error("--repetition-penalty %s: expected a number above 0 (1: off; above 1 discourages repeats)",
                         val);
  }
  return -1;
}

/* A prompt has no natural size, and a file may have none either
 * (/dev/zero, a pipe): more than this is refused rather than read without
 * end.  1 MiB is some 250,000 GPT-2 tokens, far past any context. */
#define PROMPT_FILE_CAP (1024 * 1024)

/* The prompt file, whole, up to PROMPT_FILE_CAP; 1 after a message when
 * it cannot be read or is larger. */
static int read_prompt(opts *o) {
  FILE *f = fopen(o->prompt_file, "rb");
  if (!f) {
    fprintf(stderr, "tgrun sample: error: --prompt-file %s: %s\n", o->prompt_file, strerror(errno));
    return 1;
  }
  /* one byte past the cap tells a file of exactly the cap from a larger one */
  char *buf = malloc(PROMPT_FILE_CAP + 1);
  size_t n = buf ? fread(buf, 1, PROMPT_FILE_CAP + 1, f) : 0;
  bool bad = !buf || ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    fprintf(stderr, "tgrun sample: error: --prompt-file %s: cannot read it\n", o->prompt_file);
    return 1;
  }
  if (n > PROMPT_FILE_CAP) {
    free(buf);
    fprintf(stderr,
            "tgrun sample: error: --prompt-file %s is larger than the cap on a prompt, 1 MiB (%d bytes): give "
            "the prompt's last part only (the model sees at most block_size tokens of it)\n",
            o->prompt_file, PROMPT_FILE_CAP);
    return 1;
  }
  o->prompt_text = buf;
  o->g.prompt = buf;
  o->g.prompt_len = n;
  snprintf(o->prompt_name, sizeof o->prompt_name, "--prompt-file %s", o->prompt_file);
  o->g.prompt_name = o->prompt_name;
  return -1;
}

static int parse_args(int argc, char **argv, opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(tgrun_sample_usage, stdout);
      return 0;
    }
    if (a[0] == '-' && (a[1] == 'D' || a[1] == 'I') && a[2]) {
      char flag[3] = {'-', a[1], 0};
      int st = take_value(o, flag, a + 2);
      if (st >= 0) return st;
      continue;
    }
    if (!strcmp(a, "--no-stop-at-eot")) {
      o->g.keep_eot = true;
      continue;
    }
    const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
    bool known = false;
    for (int k = 0; k < N_VALUE_FLAGS && !known; k++) {
      size_t n = strlen(value_flags[k]);
      if (!strcmp(a, value_flags[k]) || (eq && (size_t)(eq - a) == n && !strncmp(a, value_flags[k], n))) known = true;
    }
    if (known) {
      char flag[32];
      const char *val;
      if (eq) {
        snprintf(flag, sizeof flag, "%.*s", (int)(eq - a), a);
        val = eq + 1;
      } else {
        if (i + 1 >= argc) return usage_error("%s needs a value", a);
        snprintf(flag, sizeof flag, "%s", a);
        val = argv[++i];
      }
      int st = take_value(o, flag, val);
      if (st >= 0) return st;
    } else if (a[0] == '-') {
      const char *s = tg_nearest(a, value_flags, N_FLAGS);
      if (s) {
        fprintf(stderr, "tgrun sample: error: unknown option '%s' (did you mean '%s'?)\n(see tgrun sample --help)\n",
                a, s);
        return 2;
      }
      return usage_error("unknown option '%s'", a);
    } else {
      return usage_error("unexpected argument '%s' (the model is --model FILE, the prompt --prompt TEXT)", a);
    }
  }
  if (!o->g.weights) return usage_error("%s", "--weights FILE is required (a checkpoint or a safetensors file)");
  if (o->prompt_given && o->prompt_file) return usage_error("%s", "give --prompt or --prompt-file, not both");
  if (!o->prompt_given && !o->prompt_file) return usage_error("%s", "no prompt: give --prompt TEXT or --prompt-file F");
  if (o->prompt_file) return read_prompt(o);
  return -1;
}

int tgrun_sample_main(int argc, char **argv) {
  opts o = {0};
  o.g = (tg_generate_opts){.temperature = 1, .top_k = 0, .top_p = 1, .repetition_penalty = 1, .num_samples = 1,
                           .max_new_tokens = 256, .seed = 1337, .backend = "cpu", .out = stdout, .info = stderr,
                           .prompt_name = "--prompt"};
  o.defines = tg_xcalloc((size_t)argc + 1, sizeof *o.defines);
  o.define_names = tg_xcalloc((size_t)argc + 1, sizeof *o.define_names);
  o.incs = tg_xcalloc((size_t)argc + 64, sizeof *o.incs);
  int status = parse_args(argc, argv, &o);
  if (status < 0) {
    char *tg_path = tg_import_path(o.incs, &o.g.n_include_dirs, argc + 64, tg_program_models_dir());
    o.g.defines = o.defines;
    o.g.include_dirs = o.incs;
    const char *prof = getenv("TG_PROFILE"); /* as tgrun step: the longest kernels */
    o.g.profile_top = prof ? (atoi(prof) > 1 ? atoi(prof) : 15) : 0;
    status = tg_generate(&o.g, NULL);
    free(tg_path);
  }
  free(o.prompt_text);
  free(o.defines);
  free(o.define_names);
  free(o.incs);
  return status;
}
