/* elaborate.h: a parsed .tg file to an IR graph (elaborate.c), and the
 * options that shape it: -D overrides of config constants and the import
 * path.  frontend.h builds on it: reading the file, parsing it, and the
 * command-line helpers. */
#ifndef TG_ELABORATE_H
#define TG_ELABORATE_H

#include "ast.h"
#include "ir.h"

typedef struct tg_define {
  const char *name;
  double value;
  bool if_present; /* a default (tgrun's B and T from a batch): no error if
                      the model has no such constant */
  const char *origin; /* where the value was set, for messages ("train.cfg:4:1
                         (model.n_layer)"); NULL: "-D NAME=VALUE" */
} tg_define;

typedef struct tg_compile_opts {
  const tg_define *defines; /* -D overrides of config constants */
  int n_defines;
  const char *const *include_dirs; /* searched for imports after the importing file's own directory */
  int n_include_dirs;
} tg_compile_opts;

/* Elaborates a parsed file (frontend/elaborate.c). */
tg_graph *tg_elaborate(tg_ctx *ctx, const tg_ast *ast, const tg_compile_opts *opts);

#endif
