/* dynlib.h: loading a shared library that may not be there (dynlib.c).
 *
 * tg never links NVIDIA's libraries: tgc and tgrun must start, and the
 * CPU backend must run, on machines without them.  NVRTC, the driver,
 * cuBLASLt and NCCL are found at run time by trying their versioned names
 * on the loader's path, then under $CUDA_HOME and /usr/local/cuda, and
 * every place tried goes into the message when none works. */
#ifndef TG_DYNLIB_H
#define TG_DYNLIB_H

#include <stdbool.h>

#include "sbuf.h"

/* The first of names[0 .. n) that dlopen loads, by itself, then under
 * DIR/lib64/ for each of $CUDA_HOME and /usr/local/cuda when cuda_dirs;
 * NULL if none.  Each path tried is appended to tried (", "-separated),
 * with dlerror's reason when it is more than "No such file". */
void *tg_dynlib_open(const char *const *names, int n, bool cuda_dirs, tg_sbuf *tried);

/* Looks up name in lib and stores the function pointer in *(fn) (a
 * pointer to a function pointer); false, appending " (which lacks NAME)"
 * to tried (may be NULL), when lib lacks it.  dlsym returns void *, which
 * C does not convert to a function pointer; POSIX guarantees the
 * representation is the same, so the bits are copied. */
bool tg_dynlib_fn(void *lib, const char *name, void *fn, tg_sbuf *tried);

#endif
