/* sbuf.h: a growing string (sbuf.c).
 *
 * For text whose length is not known in advance: generated code, JSON
 * headers, compiler logs, messages.  The text is always NUL-terminated
 * once anything was added; out of memory exits (alloc.h). */
#ifndef TG_SBUF_H
#define TG_SBUF_H

#include <stddef.h>

typedef struct tg_sbuf {
  char *s;          /* NULL until something is added */
  size_t n, cap;    /* bytes used (without the NUL), allocated */
} tg_sbuf;

void tg_sb_put(tg_sbuf *b, const void *data, size_t n);
void tg_sb_puts(tg_sbuf *b, const char *s);
void tg_sb_printf(tg_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text so far; "" when empty (never NULL). */
const char *tg_sb_text(const tg_sbuf *b);
/* Hands the text (malloc'ed, never NULL) to the caller and empties b. */
char *tg_sb_take(tg_sbuf *b);
void tg_sb_free(tg_sbuf *b);

#endif
