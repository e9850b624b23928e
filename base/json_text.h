/* json_text.h: JSON string literals, written (json_text.c).
 *
 * One escaping for every JSON tg writes: safetensors headers and the data
 * directory's tokenizer.json (runtime/formats, runtime/data) and the CUDA
 * manifest (codegen/manifest.c).  It escapes as serde_json does, and so
 * the safetensors files of other tools: '"' and '\' with a backslash,
 * control characters as \b \f \n \r \t or \u00XX, all else (UTF-8
 * included) as it is.  Reading JSON is runtime/formats/json.h's. */
#ifndef TG_JSON_TEXT_H
#define TG_JSON_TEXT_H

#include <stddef.h>
#include <stdio.h>

#include "sbuf.h"

/* Appends s[0 .. n), quoted and escaped. */
void tg_json_quote(tg_sbuf *b, const char *s, size_t n);

/* Writes the NUL-terminated s, quoted and escaped, to out; NULL as "". */
void tg_json_fquote(FILE *out, const char *s);

#endif
