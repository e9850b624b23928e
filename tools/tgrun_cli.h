/* tgrun_cli.h: tgrun's command line, one file per command, each parsing
 * its arguments into the options of the runtime module that does the work:
 *
 *   tgrun_check.c    init, grad, step    -> runtime/train/single_step.h
 *   tgrun_train.c    train.cfg [K=V ...] -> runtime/train/train.h
 *   tgrun_prepare.c  prepare             -> runtime/data/prepare.h
 *   tgrun_export.c   export              -> runtime/train/export.h
 *   tgrun_sample.c   sample              -> runtime/train/generate.h
 *   tgrun_eval.c     eval                -> runtime/train/eval.h (HellaSwag)
 *
 * tgrun.c is main: it picks the command (and execs mpirun for --nproc).
 * Each returns the exit status: 0, 1 for bad input or a failed run, 2 for
 * bad usage. */
#ifndef TGRUN_CLI_H
#define TGRUN_CLI_H

/* tgrun's own argv: argv[1] is the command (init, grad, step; anything
 * else is answered with a usage error, a suggestion, --help or --version) */
int tgrun_check_main(int argc, char **argv);
int tgrun_train_main(int argc, char **argv);   /* argv[0]: the program, argv[1]: train.cfg */
int tgrun_prepare_main(int argc, char **argv); /* argv[0]: "prepare" */
int tgrun_export_main(int argc, char **argv);  /* argv[0]: "export" */
int tgrun_sample_main(int argc, char **argv);  /* argv[0]: "sample" */
int tgrun_eval_main(int argc, char **argv);    /* argv[0]: "eval" */

/* The usage text of init, grad and step (tgrun --help prints it). */
extern const char tgrun_check_usage[];
extern const char tgrun_sample_usage[]; /* tgrun sample --help */

#endif
