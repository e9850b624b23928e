/* tgrun_eval.c: the command line of `tgrun eval` (the work is
 * runtime/train/eval.c and hellaswag.c).  Every option is checked here,
 * before any file is read. */
#include "tgrun_cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "diag.h"
#include "eval.h"
#include "frontend.h"
#include "nearest.h"
#include "program_dir.h"

static const char usage[] =
    "usage: tgrun eval --weights FILE --hellaswag FILE.jsonl [options]\n"
    "\n"
    "Scores a model on HellaSwag as llm.c does: each example's 4 rows, the context's\n"
    "GPT-2 tokens followed by those of \" \" + an ending, through the model's forward;\n"
    "an ending's loss is the cross-entropy over its own tokens.  acc: the answer is\n"
    "the ending of lowest summed loss; acc_norm: of lowest average loss a token.\n"
    "\n"
    "  --weights FILE     a checkpoint or a weights file (tgrun init/step, Hugging Face's\n"
    "                     model.safetensors), as for tgrun sample\n"
    "  --hellaswag FILE   HellaSwag's validation jsonl as distributed (hellaswag_val.jsonl)\n"
    "  --model MODEL.tg   the model (default: the checkpoint's, else models/gpt2.tg);\n"
    "                     -D NAME=VALUE and -I DIR as for tgc\n"
    "  --tokenizer PATH   GPT-2's BPE: a directory with encoder.json and vocab.bpe, or a\n"
    "                     data_dir prepared with them (default: as tgrun sample finds it)\n"
    "  --limit N          the first N examples only (default: all)\n"
    "  --out FILE         one JSON line an example: its line, label, the 4 endings'\n"
    "                     summed and average losses and tokens, and both answers\n"
    "  --backend NAME     cpu (default), ref, cuda, cuda-emu\n"
    "\n"
    "Exit status: 0, 1 for a bad model, weights, tokenizer or HellaSwag file, 2 for\n"
    "bad usage.\n";

static int usage_error(const char *fmt, const char *arg) { return tg_usage_error("tgrun eval", fmt, arg); }

static const char *const flags[] = {"--weights", "--hellaswag", "--model", "--tokenizer", "--limit",
                                    "--out",     "--backend",   "-D",      "-I"};
enum { N_FLAGS = sizeof flags / sizeof *flags };

typedef struct cli {
  tg_eval_opts e;
  tg_define *defines;
  char (*names)[128];
  const char **incs;
} cli;

static int take(cli *c, const char *flag, const char *val) {
  tg_eval_opts *o = &c->e;
  if (!strcmp(flag, "--weights")) o->weights = val;
  else if (!strcmp(flag, "--hellaswag")) o->hellaswag = val;
  else if (!strcmp(flag, "--model")) o->model = val;
  else if (!strcmp(flag, "--tokenizer")) o->tokenizer = val;
  else if (!strcmp(flag, "--out")) o->out = val;
  else if (!strcmp(flag, "-I")) c->incs[o->n_include_dirs++] = val;
  else if (!strcmp(flag, "--limit")) {
    char *end;
    errno = 0;
    long long n = strtoll(val, &end, 10);
    if (end == val || *end || errno || n < 1) return usage_error("--limit %s: expected a whole number, 1 or more", val);
    o->limit = n;
  } else if (!strcmp(flag, "--backend")) {
    if (!tg_backend_find(val)) {
      const char *near = tg_backend_suggest(val);
      fprintf(stderr, "tgrun eval: error: --backend %s: unknown backend%s%s%s (the backends: %s)\n", val,
              near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", tg_backend_names_text());
      return 2;
    }
    o->backend = val;
  } else if (!tg_define_parse(val, &c->defines[o->n_defines], c->names[o->n_defines], sizeof c->names[o->n_defines])) {
    return usage_error("-D %s: expected NAME=NUMBER, e.g. -D n_head=12", val);
  } else {
    o->n_defines++;
  }
  return -1;
}

static int parse(int argc, char **argv, cli *c) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 0;
    }
    if (a[0] == '-' && (a[1] == 'D' || a[1] == 'I') && a[2]) {
      char flag[3] = {'-', a[1], 0};
      int st = take(c, flag, a + 2);
      if (st >= 0) return st;
      continue;
    }
    const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
    const char *flag = NULL;
    for (int k = 0; k < N_FLAGS && !flag; k++) {
      size_t n = strlen(flags[k]);
      if (!strcmp(a, flags[k]) || (eq && (size_t)(eq - a) == n && !strncmp(a, flags[k], n))) flag = flags[k];
    }
    if (!flag) {
      const char *near = a[0] == '-' ? tg_nearest(a, flags, N_FLAGS) : NULL;
      if (near) {
        fprintf(stderr, "tgrun eval: error: unknown option '%s' (did you mean '%s'?)\n(see tgrun eval --help)\n", a,
                near);
        return 2;
      }
      return usage_error(a[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s' (the weights are --weights "
                                                               "FILE, the data --hellaswag FILE)", a);
    }
    if (!eq && i + 1 >= argc) return usage_error("%s needs a value", a);
    int st = take(c, flag, eq ? eq + 1 : argv[++i]);
    if (st >= 0) return st;
  }
  if (!c->e.weights) return usage_error("%s", "--weights FILE is required (a checkpoint or a safetensors file)");
  if (!c->e.hellaswag) return usage_error("%s", "--hellaswag FILE is required (HellaSwag's hellaswag_val.jsonl)");
  return -1;
}

int tgrun_eval_main(int argc, char **argv) {
  cli c = {.e = {.backend = "cpu", .info = stdout}};
  c.defines = tg_xcalloc((size_t)argc + 1, sizeof *c.defines);
  c.names = tg_xcalloc((size_t)argc + 1, sizeof *c.names);
  c.incs = tg_xcalloc((size_t)argc + 64, sizeof *c.incs);
  int status = parse(argc, argv, &c);
  if (status < 0) {
    char *tg_path = tg_import_path(c.incs, &c.e.n_include_dirs, argc + 64, tg_program_models_dir());
    c.e.defines = c.defines;
    c.e.include_dirs = c.incs;
    status = tg_eval_run(&c.e);
    free(tg_path);
  }
  free(c.defines);
  free(c.names);
  free(c.incs);
  return status;
}
