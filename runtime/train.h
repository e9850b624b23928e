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

/* argv[0] is the program, argv[1] the config; returns the exit status
 * (0, 1 for bad input or a failed run, 2 for bad usage). */
int tg_train_main(int argc, char **argv);

#endif
