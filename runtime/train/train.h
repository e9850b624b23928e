/* train.h: tgrun's training loop, `tgrun train.cfg [KEY=VALUE ...]`.
 *
 * The config (train_config.h, docs/train-config.md) names the model, the
 * data made by `tgrun prepare`, and the run directory, which receives the
 * log, the metrics (JSON lines), the loss plot, text samples, checkpoints,
 * the generated kernels and the fusion report. */
#ifndef TG_TRAIN_H
#define TG_TRAIN_H

#include "train_config.h"

/* The exit status of a run stopped by a signal (SIGTERM, SIGINT, SIGUSR1)
 * after finishing its step and writing its checkpoint: sysexits.h's
 * EX_TEMPFAIL, "try again later" (with resume = true). */
enum { TG_TRAIN_STOPPED = 75 };

/* Trains as cfg says (loaded, overridden and validated by the caller:
 * tools/tgrun_train.c), as rank `rank` of `nranks` (runtime/comm, already
 * joined).  Errors are reported on stderr.  Returns the exit status: 0;
 * TG_TRAIN_STOPPED when a signal stopped it (the ranks agree on the step,
 * and the checkpoint holds it); or 1 for bad input or a failed run.
 *
 * SIGTERM, SIGINT and SIGUSR1 (Slurm's warning before preemption, with
 * --signal=USR1@SECONDS) ask the run to stop: it finishes the step it is
 * in (a text sample in progress is cut short), writes a checkpoint,
 * releases out_dir and returns TG_TRAIN_STOPPED.  A second such signal
 * ends the process at once, as the signal would by default. */
int tg_train(const tg_train_config *cfg, int rank, int nranks);

#endif
