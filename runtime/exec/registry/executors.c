/* executors.c: the table of executors (executors.h). */
#include "executors.h"

#include <string.h>

#include "executor_impl.h"
#include "nearest.h"

extern const tg_executor tg_executor_ref; /* exec/ref/ref_executor.c */
extern const tg_executor tg_executor_cpu; /* exec/cpu/cpu_backend.c */
extern const tg_executor tg_executor_cuda, tg_executor_cuda_emu; /* exec/cuda/cuda_backend.c */

static const tg_executor *const all[] = {&tg_executor_ref, &tg_executor_cpu, &tg_executor_cuda, &tg_executor_cuda_emu};
enum { N_EXECUTORS = sizeof all / sizeof *all };

const tg_executor *tg_executor_find(const char *name) {
  for (int i = 0; i < N_EXECUTORS; i++)
    if (!strcmp(all[i]->name, name)) return all[i];
  return NULL;
}

const tg_executor *const *tg_executors(int *n) {
  *n = N_EXECUTORS;
  return all;
}

const char *tg_executor_name(const tg_executor *x) { return x->name; }

const char *tg_executor_summary(const tg_executor *x) { return x->summary; }

const char *tg_executor_default_precision(const tg_executor *x) {
  return x->default_precision ? x->default_precision : "f32";
}

const char *tg_executor_names_text(void) {
  static char text[256];
  if (!text[0])
    for (int i = 0; i < N_EXECUTORS; i++) {
      size_t k = strlen(text);
      snprintf(text + k, sizeof text - k, "%s%s", i ? ", " : "", all[i]->name);
    }
  return text;
}

const char *tg_executor_suggest(const char *name) {
  const char *names[N_EXECUTORS];
  for (int i = 0; i < N_EXECUTORS; i++) names[i] = all[i]->name;
  return tg_nearest(name, names, N_EXECUTORS);
}

tg_device *tg_device_open_named(tg_ctx *ctx, const char *name, const tg_device_opts *o) {
  const tg_executor *x = tg_executor_find(name);
  if (!x) {
    const char *s = tg_executor_suggest(name);
    tg_error(ctx, (tg_loc){0}, "unknown backend '%s'%s%s%s (the backends: %s)", name, s ? "; did you mean '" : "",
             s ? s : "", s ? "'?" : "", tg_executor_names_text());
  }
  return tg_device_open(ctx, x, o);
}
