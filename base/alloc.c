/* alloc.c: malloc, calloc and realloc that never return NULL (alloc.h).
 *
 * Running out of memory is not something tg recovers from in the middle of
 * building a graph or a tokenizer table; one clear message and exit(1)
 * beat a NULL check at every call. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE */
#include "alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

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

enum { HUGE_PAGE = 2 << 20 };

static size_t huge_rounded(size_t n) { return (n + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1); }

void *tg_huge_alloc(size_t n) {
  n = huge_rounded(n ? n : 1);
  /* a huge page needs 2 MB alignment: map 2 MB more and trim the ends */
  char *p = mmap(NULL, n + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) or_die(NULL);
  char *at = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (at > p) munmap(p, (size_t)(at - p));
  if (at + n < p + n + HUGE_PAGE) munmap(at + n, (size_t)(p + n + HUGE_PAGE - (at + n)));
#ifdef MADV_HUGEPAGE
  madvise(at, n, MADV_HUGEPAGE); /* advice: without it, 4 KB pages */
#endif
  return at;
}

void tg_huge_free(void *p, size_t n) {
  if (p) munmap(p, huge_rounded(n ? n : 1));
}
