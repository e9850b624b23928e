/* frontend.h: from .tg source text to an IR graph.
 *
 * tg_compile_file reads a model file, follows its imports, binds config
 * constants (with -D overrides), expands blocks and loops, and returns the
 * forward graph.  Any error is reported through ctx with file:line:col, the
 * source line and a caret, and then tg_bail() jumps to ctx->bail. */
#ifndef TG_FRONTEND_H
#define TG_FRONTEND_H

#include "ast.h"
#include "ir.h"

typedef struct tg_define {
  const char *name;
  double value;
  bool if_present; /* a default (tgrun's B and T from a batch): no error if
                      the model has no such constant */
} tg_define;

typedef struct tg_compile_opts {
  const tg_define *defines; /* -D overrides of config constants */
  int n_defines;
  const char *const *include_dirs; /* searched for imports after the importing file's own directory */
  int n_include_dirs;
} tg_compile_opts;

tg_graph *tg_compile_file(tg_ctx *ctx, const char *path, const tg_compile_opts *opts);
tg_graph *tg_compile_source(tg_ctx *ctx, const tg_source *src, const tg_compile_opts *opts);

/* Elaborates a parsed file (frontend/elaborate.c). */
tg_graph *tg_elaborate(tg_ctx *ctx, const tg_ast *ast, const tg_compile_opts *opts);

/* Completes the import search path after the -I directories in dirs[0..*n):
 * the directories of $TG_PATH (colon-separated), then models_dir.  Stops at
 * max entries.  Returns the malloc'ed copy of $TG_PATH the entries point
 * into (NULL if unset): free it when done with dirs. */
char *tg_import_path(const char **dirs, int *n, int max, const char *models_dir);

/* Parses a "name=value" -D argument; false if malformed. */
bool tg_define_parse(const char *arg, tg_define *out, char *name_buf, size_t name_len);

/* The known name nearest to `name` by edit distance, or NULL if none is close
 * enough to be a plausible typo. */
const char *tg_nearest(const char *name, const char *const *known, int n);

#endif
