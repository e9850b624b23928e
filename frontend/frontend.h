/* frontend.h: from .tg source text to an IR graph.
 *
 * tg_compile_file reads a model file, follows its imports, binds config
 * constants (with -D overrides), expands blocks and loops, and returns the
 * forward graph.  Any error is reported through ctx with file:line:col, the
 * source line and a caret, and then tg_bail() jumps to ctx->bail. */
#ifndef TG_FRONTEND_H
#define TG_FRONTEND_H

#include "elaborate.h" /* tg_define, tg_compile_opts */
#include "ir.h"

tg_graph *tg_compile_file(tg_ctx *ctx, const char *path, const tg_compile_opts *opts);
tg_graph *tg_compile_source(tg_ctx *ctx, const tg_source *src, const tg_compile_opts *opts);


/* Completes the import search path after the -I directories in dirs[0..*n):
 * the directories of $TG_PATH (colon-separated), then models_dir (the
 * program's own models/, tg_program_models_dir; none if NULL).  Stops at
 * max entries.  Returns the malloc'ed copy of $TG_PATH the entries point
 * into (NULL if unset): free it when done with dirs. */
char *tg_import_path(const char **dirs, int *n, int max, const char *models_dir);

/* Parses a "name=value" -D argument; false if malformed. */
bool tg_define_parse(const char *arg, tg_define *out, char *name_buf, size_t name_len);

#endif
