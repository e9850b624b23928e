/* dynlib.c: loading a shared library that may not be there (dynlib.h). */
#include "dynlib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *try_open(const char *path, tg_sbuf *tried) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (tried) tg_sb_printf(tried, "%s%s", tried->n ? ", " : "", path);
  if (!lib && tried) {
    /* "No such file" for each miss says nothing new; other reasons (wrong
     * architecture, missing dependencies) are what the user needs. */
    const char *e = dlerror();
    if (e && !strstr(e, "No such file")) tg_sb_printf(tried, " (%s)", e);
  }
  return lib;
}

void *tg_dynlib_open(const char *const *names, int n, bool cuda_dirs, tg_sbuf *tried) {
  for (int i = 0; i < n; i++) {
    void *lib = try_open(names[i], tried);
    if (lib) return lib;
  }
  if (!cuda_dirs) return NULL;
  const char *dirs[] = {getenv("CUDA_HOME"), "/usr/local/cuda"};
  for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
    if (!dirs[d] || !*dirs[d]) continue;
    for (int i = 0; i < n; i++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]);
      void *lib = try_open(path, tried);
      if (lib) return lib;
    }
  }
  return NULL;
}

bool tg_dynlib_fn(void *lib, const char *name, void *fn, tg_sbuf *tried) {
  void *p = dlsym(lib, name);
  if (!p) {
    if (tried) tg_sb_printf(tried, " (which lacks %s)", name);
    return false;
  }
  memcpy(fn, &p, sizeof p);
  return true;
}
