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

/* n bytes of fresh zeroed memory, 2 MB aligned, in huge pages where the
 * kernel gives them (Linux's transparent huge pages on madvise): one page
 * fault for 2 MB instead of 512, each some microseconds on a virtual
 * machine.  For large blocks of many small pieces (tgc --report html's
 * IR after each pass, report/ir_history.c).  Freed with tg_huge_free(p,
 * n), the same n. */
void *tg_huge_alloc(size_t n);
void tg_huge_free(void *p, size_t n);

#endif
