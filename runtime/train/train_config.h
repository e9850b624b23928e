/* train_config.h: train.cfg, the file that describes a training run.
 *
 * One `key = value` a line; `#` starts a comment outside quotes; blank lines
 * are fine.  A value is an integer, a float, a boolean (true or false) or a
 * string, bare (the rest of the line, trimmed) or double-quoted with the
 * escapes \n \t \" \\.  `model.NAME = number` sets the config constant NAME
 * of the .tg model; those are kept in file order, to become -D defines.
 * docs/train-config.md describes every key.
 *
 * Errors are reported through a tg_ctx, in the house style
 *     train.cfg:7:17: error: unknown key 'learning_rat'; did you mean 'learning_rate'?
 *         7 | learning_rat = 1e-3
 *           | ^
 * and the functions return false; they never bail, so the caller needs no
 * ctx->bail.  Every bad line of a file is reported, not just the first.
 *
 * The intended order of calls:
 *     tg_train_config cfg;
 *     tg_train_config_defaults(&cfg);
 *     ok = tg_train_config_load(ctx, "train.cfg", &cfg);
 *     for each "key=value" argument: ok = ok && tg_train_config_override(ctx, &cfg, arg);
 *     ok = ok && tg_train_config_validate(ctx, &cfg);   // rules between keys
 *     ...
 *     tg_train_config_print(file, &cfg);                // the effective config
 *     tg_train_config_free(&cfg);
 * Loading a printed config gives an equal one (tg_train_config_equal). */
#ifndef TG_TRAIN_CONFIG_H
#define TG_TRAIN_CONFIG_H

#include "diag.h"
#include "passes.h" /* tg_precision_policy */

/* Where a value came from, for messages about it later (validate). */
typedef struct tg_cfg_origin {
  int line, col;  /* in the config file; 0: the default, or the command line */
  bool cmdline;   /* set by tg_train_config_override */
} tg_cfg_origin;

/* model.NAME = value */
typedef struct tg_model_define {
  char *name; /* without "model." */
  double value;
  tg_cfg_origin origin;
} tg_model_define;

enum { TG_TRAIN_NKEYS = 44 }; /* the keys below, model.NAME not counted */

typedef struct tg_train_config {
  /* The model and the data. */
  char *model;                 /* "models/gpt2.tg" */
  tg_model_define *defines;    /* model.NAME, in the order first set */
  int n_defines;
  char *data_dir;              /* "data/shakespeare_char": train.bin, val.bin (or shards), tokenizer.json */
  char *train_files;           /* "": data_dir's train.bin or *_train_*.bin shards; else a glob */
  char *val_files;             /* "": the same for val */
  char *data_order;            /* "random" (nanoGPT's get_batch) | "sequential" (llm.c's) | "shuffled" */
  char *out_dir;               /* "out": log, metrics, plot, samples, checkpoints */
  char *backend;               /* "cpu": ref | cpu | cuda | cuda-emu */
  char *precision;             /* "auto": the backend's (bf16 on cuda, f32 on cpu) | f32 | bf16 */
  /* Batch. */
  int64_t batch_size;          /* 12: sequences per micro-step per rank */
  int64_t block_size;          /* 64: tokens per sequence (the model's T) */
  int64_t grad_accum;          /* 1: micro-steps per optimizer step */
  int64_t max_steps;           /* 2000: optimizer steps */
  /* Learning-rate schedule (lr_schedule.h). */
  double learning_rate;        /* 1e-3: peak, reached after the warmup */
  double min_lr;               /* 1e-4: floor after the cosine decay */
  int64_t warmup_steps;        /* 100 */
  int64_t lr_decay_steps;      /* 0: max_steps (see tg_train_config_decay_steps) */
  /* AdamW. */
  double beta1;                /* 0.9 */
  double beta2;                /* 0.99 */
  double eps;                  /* 1e-8 */
  double weight_decay;         /* 0.1 */
  double grad_clip;            /* 1.0: global norm; 0 disables */
  /* Evaluation and logging. */
  int64_t eval_interval;       /* 250 steps; 0: only at the end */
  int64_t eval_batches;        /* 20 */
  char *hellaswag;             /* "": HellaSwag's jsonl, scored at each evaluation (hellaswag.h) */
  int64_t hellaswag_examples;  /* 0: all of them; N: its first N */
  int64_t log_interval;        /* 1 */
  /* Samples. */
  int64_t sample_interval;     /* 500 steps; 0: only at the end */
  char *sample_prompt;         /* "\n" */
  int64_t sample_tokens;       /* 200; 0: no samples */
  double temperature;          /* 0.8 */
  int64_t top_k;               /* 200; 0: no top-k */
  /* Checkpoints. */
  int64_t checkpoint_interval; /* 500 steps; 0: only at the end */
  bool resume;                 /* false: continue from out_dir's checkpoint */
  bool reseed;                 /* false: resume with seed, not the checkpoint's */
  bool overwrite;              /* false: a fresh run refuses an out_dir holding a checkpoint */
  char *init_from;             /* "": a .safetensors file to start from */
  /* The machine. */
  int64_t seed;                /* 1337 */
  int64_t threads;             /* 0: all cores */
  int64_t rank_timeout;        /* 300 s: a collective waits this long for the other ranks */
  int64_t zero;                /* 0: ZeRO stage (0 plain data parallelism; 1 optimizer state sharded; 2 and gradients) */
  int64_t tp;                  /* 1: the tensor-parallel degree, the model's mesh tensor axis (ranks a multiple of it) */
  char *parallel;              /* "manual" | "auto": tp, zero and the batch from the planner (tgrun_train.c) */
  const char *parallel_note;   /* set by tgrun with parallel = auto: the choice, for the log; not a key */
  double peak_flops;           /* 0: unknown (MFU shown as "-"); FLOP/s */
  char *metrics_file;          /* "metrics.jsonl", inside out_dir */

  /* Where each value came from, by key in the order above; kept so that
   * validate can point at the line that broke a rule between keys. */
  tg_cfg_origin origin[TG_TRAIN_NKEYS];
  char *path; /* the file loaded last, or NULL */
} tg_train_config;

/* Fills cfg with the defaults; it must be freed with tg_train_config_free. */
void tg_train_config_defaults(tg_train_config *cfg);
void tg_train_config_free(tg_train_config *cfg);

/* Reads a file onto cfg (keys it does not set keep their values).  Reports
 * every error through ctx and returns false if there was one; cfg then
 * holds what the good lines set. */
bool tg_train_config_load(tg_ctx *ctx, const char *path, tg_train_config *cfg);
/* The same for text in memory, shown as `name` in messages. */
bool tg_train_config_parse(tg_ctx *ctx, const char *name, const char *text, size_t len,
                           tg_train_config *cfg);

/* Applies one "key=value" from the command line, the value written as in a
 * file except that '#' is an ordinary character.  It replaces what the file
 * set; the last of several overrides of one key wins.  Messages name
 * "command line" as the place. */
bool tg_train_config_override(tg_ctx *ctx, tg_train_config *cfg, const char *arg);

/* Checks the rules between keys (warmup_steps <= max_steps, min_lr <=
 * learning_rate, ...), after all overrides; reports each broken rule at the
 * place that set the value last. */
bool tg_train_config_validate(tg_ctx *ctx, const tg_train_config *cfg);

/* Writes every key in the file format, grouped and commented, model.NAME
 * after model; returns false if the stream reports an error. */
bool tg_train_config_print(FILE *out, const tg_train_config *cfg);

/* Same values (origins and path aside). */
bool tg_train_config_equal(const tg_train_config *a, const tg_train_config *b);

/* A hash of the effective config (every key and model.NAME, as printed):
 * the ranks of a run compare it at start-up. */
uint64_t tg_train_config_hash(const tg_train_config *cfg);
/* The most model.NAME keys a file or command line may set. */
enum { TG_TRAIN_MAX_DEFINES = 256 };

/* lr_decay_steps, or max_steps where it is 0. */
int64_t tg_train_config_decay_steps(const tg_train_config *cfg);
/* The precision policy the run uses: precision, or for "auto" the
 * backend's default (bf16 on the cuda backends, f32 on the CPU). */
tg_precision_policy tg_train_config_precision(const tg_train_config *cfg);

/* The keys, in the order above ("model", "data_dir", ...), for docs and
 * tests; n is TG_TRAIN_NKEYS. */
const char *tg_train_config_key(int i);

#endif
