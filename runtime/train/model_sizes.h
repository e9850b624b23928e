/* model_sizes.h: the sizes a model is compiled with when weights are given:
 * the weights file's (runtime/formats/hf.h), checked against the user's -D
 * before anything is compiled. */
#ifndef TG_MODEL_SIZES_H
#define TG_MODEL_SIZES_H

#include "elaborate.h"

/* The defines to compile a model for the weights at path: the sizes the
 * file shows (but B and T, a run's own), then `before` (say, a batch's B
 * and T), then `defines` (the user's -D; the last of a name wins, so they
 * decide).  A -D that contradicts the file bails through ctx naming both.
 * The array (in ctx's arena) has `room` more slots after the *n_out. */
tg_define *tg_model_sizes(tg_ctx *ctx, const char *path, const tg_define *before, int n_before,
                          const tg_define *defines, int n_defines, int room, int *n_out);

/* The .tg file a model path (--model, or the one a checkpoint records)
 * means: the path itself, or, where it is relative and not there from
 * here, the file of that name in the installed models/.  Bails through ctx
 * when neither exists, saying who named it (named_by: "--model", ...). */
const char *tg_model_file(tg_ctx *ctx, const char *path, const char *named_by);

#endif
