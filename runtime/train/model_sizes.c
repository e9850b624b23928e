/* model_sizes.c: a weights file's sizes as defines; see model_sizes.h.
 * One place for grad/step, export and sample, which all compile a model for
 * a file they were given. */
#include "model_sizes.h"

#include <string.h>
#include <unistd.h>

#include "hf.h"
#include "program_dir.h"

tg_define *tg_model_sizes(tg_ctx *ctx, const char *path, const tg_define *before, int n_before,
                          const tg_define *defines, int n_defines, int room, int *n_out) {
  tg_hf_dims dims = {0};
  tg_hf_dims_of_file(ctx, path, &dims);
  tg_hf_dim *set = tg_alloc(ctx->arena, sizeof *set * (size_t)(n_defines + 1));
  for (int i = 0; i < n_defines; i++) {
    char v[40];
    set[i] = (tg_hf_dim){defines[i].name, defines[i].value,
                         tg_sprintf(ctx->arena, "command line (-D %s=%s)", defines[i].name,
                                    tg_fmt_double(defines[i].value, v, sizeof v))};
  }
  tg_hf_dims_check(ctx, &dims, set, n_defines);
  int n = 0;
  tg_define *d = tg_alloc(ctx->arena, sizeof *d * (size_t)(dims.n + n_before + n_defines + room + 1));
  for (int i = 0; i < dims.n; i++)
    if (strcmp(dims.d[i].name, "B") && strcmp(dims.d[i].name, "T"))
      d[n++] = (tg_define){dims.d[i].name, dims.d[i].value, true, dims.d[i].from};
  if (n_before) memcpy(d + n, before, sizeof *d * (size_t)n_before);
  n += n_before;
  if (n_defines) memcpy(d + n, defines, sizeof *d * (size_t)n_defines);
  *n_out = n + n_defines;
  return d;
}

const char *tg_model_file(tg_ctx *ctx, const char *path, const char *named_by) {
  /* models/gpt2.tg run from elsewhere: the installed models/ */
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  const char *models = tg_program_models_dir();
  const char *installed = models ? tg_sprintf(ctx->arena, "%s/%s", models, base) : NULL;
  if (access(path, F_OK) != 0 && path[0] != '/' && installed && access(installed, F_OK) == 0) return installed;
  if (access(path, F_OK) != 0) tg_error(ctx, (tg_loc){path, 0, 0}, "%s %s: no such file", named_by, path);
  return path;
}
