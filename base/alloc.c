/* alloc.c: malloc, calloc and realloc that never return NULL (alloc.h).
 *
 * Running out of memory is not something tg recovers from in the middle of
 * building a graph or a tokenizer table; one clear message and exit(1)
 * beat a NULL check at every call. */
#include "alloc.h"

#include <stdio.h>
#include <stdlib.h>

static void *or_die(void *p) {
  if (!p) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  return p;
}

void *tg_xmalloc(size_t n) { return or_die(malloc(n ? n : 1)); }
void *tg_xcalloc(size_t n, size_t size) { return or_die(calloc(n ? n : 1, size ? size : 1)); }
void *tg_xrealloc(void *p, size_t n) { return or_die(realloc(p, n ? n : 1)); }
