/* json.h: a small, strict, bounded JSON parser (RFC 8259).
 *
 * Written for the safetensors header, which is untrusted input of up to
 * 100 MB, so the parser is strict and bounded rather than forgiving:
 *   - the whole text must be one value, with only JSON whitespace around it
 *     (trailing garbage is an error);
 *   - strings must be valid UTF-8 with no raw control characters; escapes,
 *     \uXXXX included, are decoded to UTF-8, a surrogate pair to one
 *     character, and a lone surrogate is an error;
 *   - numbers follow the JSON grammar exactly (no "+1", "01", ".5", "1.",
 *     NaN or Infinity); one without fraction or exponent that fits int64
 *     is TG_JSON_INT, any other is TG_JSON_REAL, and one too large for a
 *     double is an error;
 *   - an object with the same key twice is an error;
 *   - nesting depth and the number of values are limited, so that neither
 *     the C stack nor memory grows without bound with the input.
 * Everything is allocated in the caller's arena; on an error the parse
 * returns NULL and whatever it allocated stays in the arena, to be freed
 * with it.  Members of an object keep their order in the text.
 *
 * Numbers are converted with strtod, which honours LC_NUMERIC: tg never
 * calls setlocale, so the decimal point is '.'. */
#ifndef TG_JSON_H
#define TG_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"

typedef enum tg_json_kind {
  TG_JSON_NULL,
  TG_JSON_FALSE,
  TG_JSON_TRUE,
  TG_JSON_INT,    /* integral and within int64: u.i */
  TG_JSON_REAL,   /* any other number: u.d */
  TG_JSON_STRING, /* u.s, decoded UTF-8, n bytes, NUL-terminated (may hold NULs) */
  TG_JSON_ARRAY,  /* u.items[0 .. n) */
  TG_JSON_OBJECT, /* u.items[0 .. n), each with key and key_len set */
} tg_json_kind;

typedef struct tg_json tg_json;
struct tg_json {
  tg_json_kind kind;
  size_t pos, end; /* the value's bytes in the text: [pos, end) */
  size_t n;        /* STRING: length in bytes; ARRAY, OBJECT: element count */
  const char *key; /* for a member of an object: its decoded key, else NULL */
  size_t key_len;
  union {
    int64_t i;
    double d;
    const char *s;
    tg_json *items;
  } u;
};

typedef struct tg_json_opts {
  int max_depth;     /* arrays and objects nested deeper are an error; 0: 64 */
  size_t max_values; /* more values in all are an error; 0: no limit */
} tg_json_opts;

typedef struct tg_json_error {
  size_t pos;           /* byte offset in the text where the problem is */
  char msg[160];        /* e.g. "expected ':'" */
  const char *dup_key;  /* for a duplicate key: the key (in the arena), else NULL */
  int depth;            /* open arrays and objects at pos: 1 inside the root */
} tg_json_error;

/* Parses text[0 .. len) (which need not be NUL-terminated).  Returns the
 * root value, or NULL with err filled in.  opts may be NULL. */
tg_json *tg_json_parse(tg_arena *a, const char *text, size_t len, const tg_json_opts *opts,
                       tg_json_error *err);

/* The member of object o named key, or NULL (also when o is no object). */
const tg_json *tg_json_get(const tg_json *o, const char *key);

/* Offset of the first byte of s[0 .. n) that is not part of valid UTF-8
 * (no overlong forms, surrogates or code points past U+10FFFF), or n. */
size_t tg_json_utf8_check(const char *s, size_t n);

/* "a string", "an array", ... for messages. */
const char *tg_json_kind_name(tg_json_kind k);

#endif
