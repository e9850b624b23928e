/* utf8.h: UTF-8 and the Unicode classes of GPT-2's pre-tokenizer (utf8.c,
 * unicode_tables.c), shared by both tokenizers and by prepare. */
#ifndef TG_UTF8_H
#define TG_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one well-formed UTF-8 character at s[0 .. n) (n > 0): stores it
 * in *cp and returns its length, or returns 0 when s does not start with
 * one (a stray continuation byte, a truncated or overlong sequence, a
 * surrogate, or past U+10FFFF). */
int tg_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Offset of the first byte of s[0 .. n) that is not part of well-formed
 * UTF-8, or n. */
size_t tg_utf8_check(const char *s, size_t n);
/* Writes cp as UTF-8 into out (4 bytes of room); returns the length. */
int tg_utf8_encode(uint32_t cp, char *out);

/* The classes of GPT-2's pre-tokenizer regex, from unicode_tables.c. */
typedef enum tg_uni_class {
  TG_UNI_OTHER,  /* none of the below: punctuation, symbols, marks, ... */
  TG_UNI_LETTER, /* \p{L} */
  TG_UNI_NUMBER, /* \p{N} */
  TG_UNI_SPACE,  /* \s: the White_Space property */
} tg_uni_class;
tg_uni_class tg_unicode_class(uint32_t cp);
extern const char tg_unicode_version[]; /* the tables', e.g. "15.1.0" */

#endif
