/* arena.h: bump allocation for everything one compilation makes (arena.c).
 *
 * The frontend and the passes allocate nodes, strings and syntax trees
 * freely and never free them one by one: the whole arena goes at once,
 * which also makes bailing out of an error with longjmp leak-free. */
#ifndef TG_ARENA_H
#define TG_ARENA_H

#include <stddef.h>

typedef struct tg_arena tg_arena;

tg_arena *tg_arena_new(void);
void tg_arena_free(tg_arena *a);
void *tg_alloc(tg_arena *a, size_t size);         /* zeroed, 16-byte aligned */
char *tg_strdup(tg_arena *a, const char *s);
char *tg_strndup(tg_arena *a, const char *s, size_t n);
char *tg_sprintf(tg_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
size_t tg_arena_bytes(const tg_arena *a);         /* total bytes handed out */

#endif
