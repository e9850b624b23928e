/* program_dir.h: where the running program's own files are (program_dir.c). */
#ifndef TG_PROGRAM_DIR_H
#define TG_PROGRAM_DIR_H

/* The models/ directory that comes with the running program (holding
 * std.tg): DIR/../models, where DIR is the directory of the program's
 * executable (a build directory inside the source tree, or a bin/ beside
 * models/), else DIR/../share/tg/models (an installed layout); the real
 * path, or NULL when neither exists.  Found at run time, so that a copy
 * of the tree in another directory reads its own models, never the ones
 * of the tree it was built in. */
const char *tg_program_models_dir(void);

#endif
