/* single_step.h: `tgrun init | grad | step`, the commands that check one
 * training step of a model against other implementations (their command
 * line: tools/tgrun_check.c).
 *
 *   init  writes a model's initial weights;
 *   grad  the loss and every parameter's gradient for one batch;
 *   step  AdamW steps on one batch.
 *
 * They run on any backend (runtime/backend: the reference interpreter by
 * default, the oracle the compiled backends are held to).  Files keep the
 * model's unpadded shapes.  docs/tgrun.md has the details. */
#ifndef TG_SINGLE_STEP_H
#define TG_SINGLE_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "frontend.h"
#include "passes.h"

typedef struct tg_single_opts {
  const char *model;                /* the .tg file */
  const tg_define *defines;         /* -D; B and T default to the batch's */
  int n_defines;
  const char *const *include_dirs;  /* -I, $TG_PATH, the installed models/ */
  int n_include_dirs;
  const char *weights, *batch, *out;
  uint64_t seed;                    /* init */
  const char *backend;              /* a backend's name: "ref", "cpu" */
  tg_precision precision;           /* ref's arithmetic: f32 or f64 */
  tg_precision_policy policy;       /* the mixed-precision policy: f32 or bf16 */
  double lr;                        /* step */
  long steps;                       /* step */
  tg_adamw_opts adamw;              /* step */
  const char *keep_source;          /* write the generated source here (or NULL) */
  int profile_top;                  /* > 0: print the longest kernels after step */
} tg_single_opts;

/* Each returns the exit status: 0, or 1 for a bad model, weights or batch
 * file (reported on stderr). */
int tg_single_init(const tg_single_opts *o);
int tg_single_grad(const tg_single_opts *o);
int tg_single_step(const tg_single_opts *o);

#endif
