/* json_text.c: JSON string literals, written (json_text.h). */
#include "json_text.h"

#include <string.h>

void tg_json_quote(tg_sbuf *b, const char *s, size_t n) {
  tg_sb_put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *short_form = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b"
                             : c == '\f' ? "\\f" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                             : c == '\t' ? "\\t" : NULL;
    if (short_form) tg_sb_puts(b, short_form);
    else if (c < 0x20) tg_sb_printf(b, "\\u%04x", c);
    else tg_sb_put(b, s + i, 1);
  }
  tg_sb_put(b, "\"", 1);
}

void tg_json_fquote(FILE *out, const char *s) {
  tg_sbuf b = {0};
  tg_json_quote(&b, s ? s : "", s ? strlen(s) : 0);
  fwrite(b.s, 1, b.n, out);
  tg_sb_free(&b);
}
