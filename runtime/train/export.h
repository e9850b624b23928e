/* export.h: `tgrun export CKPT --out DIR` (command line: tools/tgrun_export.c).
 *
 * Reads a tg checkpoint or any weights file tgrun takes (Hugging Face's,
 * tgrun init/step output), loads it into the model as --weights does (the
 * model's sizes from the file, every tensor checked), and writes DIR as
 * Hugging Face's GPT-2 format (runtime/formats/hf_export.h), with the
 * run's tokenizer and a generation config, so that transformers'
 * from_pretrained(DIR) and nanoGPT-style loaders read it.  Only a model
 * whose graph is GPT-2's is exported (export.c: refuse_not_gpt2). */
#ifndef TG_EXPORT_H
#define TG_EXPORT_H

#include "frontend.h"

typedef struct tg_export_opts {
  const char *checkpoint;           /* the file to read */
  const char *out_dir;              /* DIR: model.safetensors, config.json */
  const char *model;                /* the .tg file; NULL: the checkpoint's, else models/gpt2.tg */
  const char *tokenizer;            /* --tokenizer; NULL: the run's, as tgrun sample finds it */
  const tg_define *defines;         /* -D: sizes the file does not give (n_head) */
  int n_defines;
  const char *const *include_dirs;
  int n_include_dirs;
} tg_export_opts;

/* The exit status: 0, or 1 after a message on stderr. */
int tg_export_run(const tg_export_opts *o);

#endif
