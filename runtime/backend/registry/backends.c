/* backends.c: the table of backends (backends.h). */
#include "backends.h"

#include <string.h>

#include "backend_impl.h"
#include "nearest.h"

extern const tg_backend tg_backend_ref; /* backend/ref/ref_backend.c */
extern const tg_backend tg_backend_cpu; /* backend/cpu/cpu_backend.c */
extern const tg_backend tg_backend_cuda, tg_backend_cuda_emu; /* backend/cuda/cuda_backend.c */

static const tg_backend *const all[] = {&tg_backend_ref, &tg_backend_cpu, &tg_backend_cuda, &tg_backend_cuda_emu};
enum { N_BACKENDS = sizeof all / sizeof *all };

const tg_backend *tg_backend_find(const char *name) {
  for (int i = 0; i < N_BACKENDS; i++)
    if (!strcmp(all[i]->name, name)) return all[i];
  return NULL;
}

const tg_backend *const *tg_backends(int *n) {
  *n = N_BACKENDS;
  return all;
}

const char *tg_backend_name(const tg_backend *x) { return x->name; }

const char *tg_backend_summary(const tg_backend *x) { return x->summary; }

const char *tg_backend_default_precision(const tg_backend *x) {
  return x->default_precision ? x->default_precision : "f32";
}

const char *tg_backend_names_text(void) {
  static char text[256];
  if (!text[0])
    for (int i = 0; i < N_BACKENDS; i++) {
      size_t k = strlen(text);
      snprintf(text + k, sizeof text - k, "%s%s", i ? ", " : "", all[i]->name);
    }
  return text;
}

const char *tg_backend_suggest(const char *name) {
  const char *names[N_BACKENDS];
  for (int i = 0; i < N_BACKENDS; i++) names[i] = all[i]->name;
  return tg_nearest(name, names, N_BACKENDS);
}

tg_device *tg_device_open_named(tg_ctx *ctx, const char *name, const tg_device_opts *o) {
  const tg_backend *x = tg_backend_find(name);
  if (!x) {
    const char *s = tg_backend_suggest(name);
    tg_error(ctx, (tg_loc){0}, "unknown backend '%s'%s%s%s (the backends: %s)", name, s ? "; did you mean '" : "",
             s ? s : "", s ? "'?" : "", tg_backend_names_text());
  }
  return tg_device_open(ctx, x, o);
}
