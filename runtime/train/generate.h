/* generate.h: `tgrun sample`: text from a trained model, a token at a time,
 * through the decode step (passes/decode.c: a key/value cache kept on the
 * device), streamed as it is made.  Its command line: tools/tgrun_sample.c;
 * docs/tgrun.md has the details. */
#ifndef TG_GENERATE_H
#define TG_GENERATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "frontend.h"

typedef struct tg_generate_opts {
  const char *weights;              /* a checkpoint or a weights file (safetensors) */
  const char *model;                /* the .tg file; NULL: the checkpoint's "model" */
  const tg_define *defines;         /* -D, after the checkpoint's config */
  int n_defines;
  const char *const *include_dirs;
  int n_include_dirs;
  const char *tokenizer;            /* a directory with tokenizer.json (prepared data,
                                     * a run's data_dir), a tokenizer.json, or a directory
                                     * with GPT-2's encoder.json and vocab.bpe; NULL: the
                                     * weights file's directory, or, when that is a run's
                                     * out_dir, the data_dir its train.cfg names */
  const char *prompt;               /* UTF-8 text, not empty */
  size_t prompt_len;
  const char *prompt_name;          /* where it came from, for messages: "--prompt" */
  double temperature;               /* 0: greedy (the first largest logit) */
  int top_k;                        /* 0: all */
  double top_p;                     /* (0, 1]: nucleus sampling; 1 (or 0, unset): off */
  double repetition_penalty;        /* > 0: CTRL's penalty on the ids seen; 1 (or 0, unset): off */
  bool keep_eot;                    /* GPT-2 BPE: go on past <|endoftext|> instead of stopping */
  int num_samples;
  int max_new_tokens;
  uint64_t seed;
  const char *backend;              /* "cpu", "ref", ... */
  FILE *out;                        /* the text, token by token */
  FILE *info;                       /* progress and timing lines (stderr) */
  int profile_top;                  /* > 0: time every kernel, print the longest after */
} tg_generate_opts;

/* What a run measured (for bench/sample.sh and tests). */
typedef struct tg_generate_stats {
  double compile_s, load_s;         /* compiling the decode step; reading the weights */
  double prefill_s, decode_s;       /* the prompt's steps; the new tokens' steps */
  int64_t prompt_tokens, new_tokens; /* over all samples */
  int64_t slides;                   /* context rebuilds (generate.c: past block_size) */
  int eot_stops;                    /* samples that ended at <|endoftext|> */
} tg_generate_stats;

/* Generates; returns the exit status (0, or 1 after an error reported on
 * stderr).  stats may be NULL. */
int tg_generate(const tg_generate_opts *o, tg_generate_stats *stats);

/* The tokenizer a run's weights were trained with, as sample and export
 * find it: tokenizer (--tokenizer: a directory or a file in it) if given,
 * else the weights' directory: its tokenizer.json or GPT-2's encoder.json
 * and vocab.bpe, or, in a run's out_dir, the data_dir its train.cfg names.
 * tokenizer.json is tg's own format (tgrun prepare), not Hugging Face's.
 * Bails through ctx on a tokenizer that cannot be read; where none is
 * found, bails if required, else returns NULL. */
typedef struct tg_tokenizer tg_tokenizer;
tg_tokenizer *tg_generate_tokenizer(tg_ctx *ctx, const char *weights, const char *tokenizer, bool required);

#endif
