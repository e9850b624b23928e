/* train.h: tgrun's training loop, `tgrun train.cfg [KEY=VALUE ...]`.
 *
 * The config (train_config.h, docs/train-config.md) names the model, the
 * data made by `tgrun prepare`, and the run directory, which receives the
 * log, the metrics (JSON lines), the loss plot, text samples, checkpoints,
 * the generated kernels and the fusion report. */
#ifndef TG_TRAIN_H
#define TG_TRAIN_H

/* Where `import "std.tg"` is found when the model's directory lacks it. */
#ifndef TG_TRAIN_MODELS_DIR
#define TG_TRAIN_MODELS_DIR "models"
#endif

#include "train_config.h"

/* Trains as cfg says (loaded, overridden and validated by the caller:
 * tools/tgrun_train.c), as rank `rank` of `nranks` (runtime/comm, already
 * joined).  Errors are reported on stderr.  Returns the exit status: 0, or
 * 1 for bad input or a failed run. */
int tg_train(const tg_train_config *cfg, int rank, int nranks);

#endif
