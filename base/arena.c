/* arena.c: bump allocation for everything one compilation makes.
 *
 * The frontend and the passes allocate nodes, strings and AST freely and
 * never free them one by one; the whole arena goes at once.  That also makes
 * bailing out of an error with longjmp leak-free. */
#include "arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK_BYTES = 64 * 1024 };

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} chunk;

struct tg_arena {
  chunk *head;
  size_t total;
};

tg_arena *tg_arena_new(void) {
  tg_arena *a = calloc(1, sizeof *a);
  if (!a) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  return a;
}

void tg_arena_free(tg_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(a);
}

void *tg_alloc(tg_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  chunk *c = a->head;
  if (!c || c->cap - c->used < size) {
    size_t cap = size > CHUNK_BYTES ? size : CHUNK_BYTES;
    c = malloc(sizeof *c + cap);
    if (!c) {
      fprintf(stderr, "tg: out of memory\n");
      exit(1);
    }
    c->used = 0;
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += size;
  a->total += size;
  memset(p, 0, size);
  return p;
}

char *tg_strndup(tg_arena *a, const char *s, size_t n) {
  char *p = tg_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *tg_strdup(tg_arena *a, const char *s) { return tg_strndup(a, s, strlen(s)); }

char *tg_sprintf(tg_arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = tg_alloc(a, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

size_t tg_arena_bytes(const tg_arena *a) { return a->total; }
