/* diag.h: errors.  The compilation context, source files, and messages
 * that point into them (diag.c).
 *
 * An error is reported through a tg_ctx: "file:line:col: error: ...", the
 * source line and a caret, and then a longjmp back to whoever set
 * ctx->bail.  This keeps the frontend, the passes and the readers free of
 * error plumbing, and lets one process (a test, the fuzzer) run them on
 * many inputs.  Functions that report failure as a return value instead
 * write their reason with tg_why. */
#ifndef TG_DIAG_H
#define TG_DIAG_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "arena.h"

/* Writes a message into why (whylen bytes; either may be 0/NULL) and
 * returns false: `return tg_why(why, n, "bad %s", x);` in functions that
 * report failure as false plus a message. */
bool tg_why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A command line's mistake, as tgc and every tgrun command say it:
 * "PROG: error: MESSAGE\n(see PROG --help)" on stderr; returns 2, the exit
 * status for bad usage. */
int tg_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));


/* ---- source locations and diagnostics -------------------------------- */

typedef struct tg_loc {
  const char *file; /* NULL when unknown (nodes made by passes) */
  int line, col;    /* 1-based; col counts bytes */
} tg_loc;

/* A file's text kept for quoting the offending line under a caret. */
typedef struct tg_source {
  struct tg_source *next;
  const char *path;
  const char *text;
  size_t len;
} tg_source;

typedef struct tg_ctx {
  tg_arena *arena;     /* owns everything made during one compilation */
  FILE *err;           /* where diagnostics go; NULL keeps them silent */
  jmp_buf *bail;       /* tg_bail() jumps here; must be set before use */
  tg_source *sources;  /* every file read so far */
  char message[512];   /* the first error's text, without location */
  int nerrors;
  int64_t node_limit;  /* refuse to build graphs larger than this */
  int64_t step_limit;  /* refuse elaborations that run longer than this */
} tg_ctx;

tg_ctx *tg_ctx_new(FILE *err);
void tg_ctx_free(tg_ctx *ctx);

/* Reads a whole regular file (at most TG_MAX_FILE_BYTES) and registers it as
 * a source.  Missing, unreadable, over-large, or non-text files are errors
 * reported at `from` (or at path:1:1 when from.file is NULL). */
enum { TG_MAX_FILE_BYTES = 16 << 20 };
const tg_source *tg_source_load(tg_ctx *ctx, const char *path, tg_loc from);
/* Registers text already in memory under a name (tests, the fuzzer). */
const tg_source *tg_source_add(tg_ctx *ctx, const char *path, const char *text,
                               size_t len);
/* Checks that text is UTF-8 without NUL or other control bytes except tab,
 * newline and carriage return; reports the first offending byte. */
void tg_source_check_text(tg_ctx *ctx, const tg_source *src);

void tg_report(tg_ctx *ctx, const char *severity, tg_loc loc, const char *fmt,
               ...) __attribute__((format(printf, 4, 5)));
void tg_vreport(tg_ctx *ctx, const char *severity, tg_loc loc, const char *fmt,
                va_list ap);
_Noreturn void tg_bail(tg_ctx *ctx);
_Noreturn void tg_error(tg_ctx *ctx, tg_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
