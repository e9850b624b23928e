/* eval.h: `tgrun eval`: a checkpoint or weights file scored on HellaSwag
 * (hellaswag.h), as llm.c scores it.  Its command line:
 * tools/tgrun_eval.c; docs/tgrun.md has the details. */
#ifndef TG_EVAL_H
#define TG_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "frontend.h"

typedef struct tg_eval_opts {
  const char *weights;      /* a checkpoint or a weights file (safetensors) */
  const char *model;        /* the .tg file; NULL: the checkpoint's, else models/gpt2.tg */
  const tg_define *defines; /* -D, after the weights' sizes */
  int n_defines;
  const char *const *include_dirs;
  int n_include_dirs;
  const char *tokenizer;    /* as tgrun sample's --tokenizer (generate.h); must be GPT-2's BPE */
  const char *hellaswag;    /* HellaSwag's jsonl */
  int64_t limit;            /* the first N examples; 0: all */
  const char *backend;      /* "cpu", "ref", ... */
  const char *out;          /* per-example JSON lines (losses, answers), or NULL */
  FILE *info;               /* the result and progress (stdout) */
} tg_eval_opts;

/* Scores; returns the exit status (0, or 1 after an error on stderr). */
int tg_eval_run(const tg_eval_opts *o);

#endif
