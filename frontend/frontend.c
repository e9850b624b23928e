/* frontend.c: the frontend's entry points: read, check, parse, elaborate. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

tg_graph *tg_compile_source(tg_ctx *ctx, const tg_source *src, const tg_compile_opts *opts) {
  tg_source_check_text(ctx, src);
  return tg_elaborate(ctx, tg_parse(ctx, src), opts);
}

tg_graph *tg_compile_file(tg_ctx *ctx, const char *path, const tg_compile_opts *opts) {
  return tg_compile_source(ctx, tg_source_load(ctx, path, (tg_loc){0}), opts);
}

char *tg_import_path(const char **dirs, int *n, int max, const char *models_dir) {
  const char *env = getenv("TG_PATH");
  char *copy = env ? strdup(env) : NULL;
  char *save = NULL;
  for (char *p = copy ? strtok_r(copy, ":", &save) : NULL; p && *n < max - 1;
       p = strtok_r(NULL, ":", &save))
    dirs[(*n)++] = p;
  if (models_dir && *n < max) dirs[(*n)++] = models_dir;
  return copy;
}

bool tg_define_parse(const char *arg, tg_define *out, char *name_buf, size_t name_len) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg || (size_t)(eq - arg) >= name_len) return false;
  for (const char *p = arg; p < eq; p++)
    if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
          (p > arg && *p >= '0' && *p <= '9')))
      return false;
  /* Decimal numbers only: strtod would also take hex, "inf" and spaces. */
  for (const char *p = eq + 1; *p; p++)
    if (!strchr("0123456789.eE+-", *p)) return false;
  char *end;
  errno = 0;
  double v = strtod(eq + 1, &end);
  if (end == eq + 1 || *end || errno == ERANGE || !isfinite(v)) return false;
  memcpy(name_buf, arg, (size_t)(eq - arg));
  name_buf[eq - arg] = 0;
  out->name = name_buf;
  out->value = v;
  out->if_present = false;
  out->origin = NULL;
  return true;
}
