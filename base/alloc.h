/* alloc.h: allocation that never fails (alloc.c).
 *
 * For memory outside an arena (arena.h): buffers whose size depends on the
 * input (file contents, tensors, tables).  Out of memory, these print
 * "tg: out of memory" and exit(1). */
#ifndef TG_ALLOC_H
#define TG_ALLOC_H

#include <stddef.h>

void *tg_xmalloc(size_t n);
void *tg_xcalloc(size_t n, size_t size);
void *tg_xrealloc(void *p, size_t n);

#endif
