/* compile_log.c: a compiler's complaint about generated CUDA, led by the
 * kernels it is about (compile_log.h). */
#include "compile_log.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "diag.h" /* tg_why */
#include "sbuf.h"

bool tg_kernel_at(const char *src, long line, char *buf, size_t buflen) {
  static const char marker[] = "// tg kernel:";
  bool found = false;
  long l = 1;
  for (const char *p = src; *p && l <= line; l++) {
    const char *end = strchr(p, '\n');
    if (!end) end = p + strlen(p);
    const char *q = p;
    while (*q == ' ' || *q == '\t') q++;
    if (!strncmp(q, marker, sizeof marker - 1)) {
      q += sizeof marker - 1;
      while (*q == ' ' || *q == '\t') q++;
      const char *e = end;
      while (e > q && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
      size_t n = (size_t)(e - q) < buflen - 1 ? (size_t)(e - q) : buflen - 1;
      memcpy(buf, q, n);
      buf[n] = 0;
      found = true;
    }
    p = *end ? end + 1 : end;
  }
  return found;
}

void tg_compile_error(const char *who, const char *src, const char *name, const char *after, const char *log,
                      const long *lines, int n, tg_line_style style, char *why, size_t whylen) {
  char (*names)[128] = tg_xcalloc((size_t)n + 1, sizeof *names);
  int nk = 0;
  for (int i = 0; i < n; i++) {
    char k[128];
    if (!tg_kernel_at(src, lines[i], k, sizeof k)) continue;
    bool seen = false;
    for (int j = 0; j < nk; j++) seen = seen || !strcmp(names[j], k);
    if (!seen) memcpy(names[nk++], k, sizeof k);
  }
  tg_sbuf b = {0};
  tg_sb_printf(&b, "%s could not compile ", who);
  for (int j = 0; j < nk; j++) tg_sb_printf(&b, "%s%s", j ? ", " : nk > 1 ? "kernels " : "kernel ", names[j]);
  tg_sb_printf(&b, "%s%s%s:\n%s", nk ? " in " : "", name, after, log);
  free(names);
  if (b.n && b.s[b.n - 1] != '\n') tg_sb_puts(&b, "\n");
  for (int i = 0; i < n; i++) {
    char k[128];
    if (style == TG_LINES_PAREN) tg_sb_printf(&b, "%s(%ld)", name, lines[i]);
    else tg_sb_printf(&b, "%s:%ld", name, lines[i]);
    if (tg_kernel_at(src, lines[i], k, sizeof k)) tg_sb_printf(&b, " is in kernel %s\n", k);
    else tg_sb_puts(&b, " is before the first kernel\n");
  }
  if (b.n) b.s[--b.n] = 0; /* no final newline, like every other message */
  tg_why(why, whylen, "%s", tg_sb_text(&b));
  tg_sb_free(&b);
}
