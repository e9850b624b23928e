/* json.c: a small, strict, bounded JSON parser (see json.h).
 *
 * Recursive descent over a byte range that is never read past its end.
 * Recursion is bounded by the depth limit (at most MAX_DEPTH_CAP, so that
 * no caller can configure a stack overflow), memory by the value limit.
 * Arrays and objects are collected on one malloc'ed scratch stack shared by
 * the whole parse and copied into the arena when they close, so that a
 * value costs one tg_json in the arena however it is nested, not a list
 * node and a copy.  Errors carry the byte offset of the problem and return
 * up through every level; nothing longjmps, so the parser can be used on
 * its own and the caller decides how to report. */
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_DEPTH = 64, MAX_DEPTH_CAP = 1000 };

/* A value being collected for an array or object that is still open. */
typedef struct slot {
  tg_json v;
  size_t key_pos; /* where the member's key starts, for duplicate reports */
} slot;

typedef struct parser {
  tg_arena *a;
  const unsigned char *s; /* the text */
  size_t len, i;          /* its length and the read position */
  int depth, max_depth;
  size_t nvalues, max_values;
  tg_json_error *err;
  slot *stack; /* scratch: the elements of every open array and object */
  size_t top, cap;
} parser;

const char *tg_json_kind_name(tg_json_kind k) {
  switch (k) {
  case TG_JSON_NULL: return "null";
  case TG_JSON_FALSE:
  case TG_JSON_TRUE: return "a boolean";
  case TG_JSON_INT:
  case TG_JSON_REAL: return "a number";
  case TG_JSON_STRING: return "a string";
  case TG_JSON_ARRAY: return "an array";
  case TG_JSON_OBJECT: return "an object";
  }
  return "a value";
}

/* Records the first error (the only one: every caller returns at once). */
static bool fail(parser *P, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(parser *P, size_t pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  P->err->pos = pos;
  P->err->depth = P->depth;
  vsnprintf(P->err->msg, sizeof P->err->msg, fmt, ap);
  va_end(ap);
  return false;
}

static void skip_ws(parser *P) {
  while (P->i < P->len) {
    unsigned char c = P->s[P->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    P->i++;
  }
}

/* The byte at the read position, or -1 at the end. */
static int peek(const parser *P) { return P->i < P->len ? P->s[P->i] : -1; }

/* "'x'", "byte 0x01" or "the end of the text", for "unexpected ..." */
static const char *describe(int c, char *buf, size_t n) {
  if (c < 0) snprintf(buf, n, "the end of the text");
  else if (c >= 0x20 && c < 0x7f) snprintf(buf, n, "'%c'", c);
  else snprintf(buf, n, "byte 0x%02x", (unsigned)c);
  return buf;
}

static void push(parser *P, const tg_json *v, size_t key_pos) {
  if (P->top == P->cap) {
    P->cap = P->cap ? 2 * P->cap : 64;
    slot *grown = realloc(P->stack, P->cap * sizeof *P->stack);
    if (!grown) {
      fprintf(stderr, "tg: out of memory\n");
      exit(1);
    }
    P->stack = grown;
  }
  P->stack[P->top].v = *v;
  P->stack[P->top++].key_pos = key_pos;
}

/* Moves the slots above base into the arena as v's elements. */
static void pop_into(parser *P, size_t base, tg_json *v) {
  v->n = P->top - base;
  if (v->n) {
    tg_json *items = tg_alloc(P->a, v->n * sizeof *items);
    for (size_t k = 0; k < v->n; k++) items[k] = P->stack[base + k].v;
    v->u.items = items;
  }
  P->top = base;
}

/* ---- strings ----------------------------------------------------------- */

/* Length of a valid UTF-8 sequence at s[i] (a byte >= 0x80) that ends
 * before lim, or 0: overlong forms, surrogates and code points past
 * U+10FFFF are invalid. */
static int utf8_len(const unsigned char *s, size_t i, size_t lim) {
  unsigned c = s[i], min;
  int n;
  if (c >= 0xc2 && c <= 0xdf) n = 2, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) n = 3, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, min = 0x10000;
  else return 0;
  if (lim - i < (size_t)n) return 0;
  unsigned cp = c & (0x3fu >> (n - 1));
  for (int k = 1; k < n; k++) {
    if ((s[i + k] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i + k] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

size_t tg_json_utf8_check(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    int m = u[i] < 0x80 ? 1 : utf8_len(u, i, n);
    if (!m) return i;
    i += (size_t)m;
  }
  return n;
}

static size_t put_utf8(char *out, unsigned cp) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | cp >> 12);
    out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | cp >> 18);
  out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
  out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* Four hex digits at s[i] before lim, or -1. */
static long hex4(const unsigned char *s, size_t i, size_t lim) {
  if (lim - i < 4) return -1;
  long v = 0;
  for (int k = 0; k < 4; k++) {
    unsigned c = s[i + k];
    int d = c >= '0' && c <= '9' ? (int)c - '0'
            : c >= 'a' && c <= 'f' ? (int)c - 'a' + 10
            : c >= 'A' && c <= 'F' ? (int)c - 'A' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v << 4 | d;
  }
  return v;
}

/* Decodes the \u escape at s[*i] (just after "\u") into a code point,
 * joining a surrogate pair; advances *i past it. */
static bool unicode_escape(parser *P, size_t *i, size_t close, unsigned *cp) {
  size_t at = *i - 2;
  long hi = hex4(P->s, *i, close);
  if (hi < 0) return fail(P, at, "invalid \\u escape: expected four hex digits");
  *i += 4;
  if (hi >= 0xdc00 && hi <= 0xdfff)
    return fail(P, at, "invalid \\u escape: lone low surrogate \\u%04lx", hi);
  if (hi < 0xd800 || hi > 0xdbff) {
    *cp = (unsigned)hi;
    return true;
  }
  long lo = -1;
  if (close - *i >= 2 && P->s[*i] == '\\' && P->s[*i + 1] == 'u') lo = hex4(P->s, *i + 2, close);
  if (lo < 0xdc00 || lo > 0xdfff)
    return fail(P, at, "invalid \\u escape: high surrogate \\u%04lx without a low one", hi);
  *i += 6;
  *cp = 0x10000 + ((unsigned)(hi - 0xd800) << 10) + (unsigned)(lo - 0xdc00);
  return true;
}

/* Decodes the string whose opening quote is at the read position into the
 * arena: *out (NUL-terminated) and *n bytes. */
static bool parse_string(parser *P, const char **out, size_t *n) {
  size_t open = P->i, close = open + 1;
  /* Find the closing quote first: the decoded text is never longer than
   * the escaped text, which sizes the buffer. */
  while (close < P->len && P->s[close] != '"') close += P->s[close] == '\\' ? 2 : 1;
  if (close >= P->len) return fail(P, open, "unterminated string");
  char *buf = tg_alloc(P->a, close - open);
  size_t k = 0;
  for (size_t i = open + 1; i < close;) {
    unsigned c = P->s[i];
    if (c < 0x20) return fail(P, i, "control byte 0x%02x in a string (escape it)", c);
    if (c >= 0x80) {
      int m = utf8_len(P->s, i, close);
      if (!m) return fail(P, i, "invalid UTF-8 byte 0x%02x in a string", c);
      memcpy(buf + k, P->s + i, (size_t)m);
      k += (size_t)m;
      i += (size_t)m;
      continue;
    }
    if (c != '\\') {
      buf[k++] = (char)c;
      i++;
      continue;
    }
    /* close is the first unescaped quote, so an escape's letter is before it */
    unsigned e = P->s[i + 1];
    i += 2;
    const char *plain = strchr("\"\\/bfnrt", (int)e);
    static const char decoded[] = "\"\\/\b\f\n\r\t";
    if (e && plain) {
      buf[k++] = decoded[plain - "\"\\/bfnrt"];
    } else if (e == 'u') {
      unsigned cp = 0;
      if (!unicode_escape(P, &i, close, &cp)) return false;
      k += put_utf8(buf + k, cp);
    } else {
      char d[24];
      return fail(P, i - 2, "invalid escape: '\\' followed by %s", describe((int)e, d, sizeof d));
    }
  }
  buf[k] = 0;
  *out = buf;
  *n = k;
  P->i = close + 1;
  return true;
}

/* ---- numbers ----------------------------------------------------------- */

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* Skips digits; false when there were none. */
static bool digits(parser *P) {
  size_t from = P->i;
  while (is_digit(peek(P))) P->i++;
  return P->i > from;
}

/* An integer token's value, if it fits int64. */
static bool int_value(const unsigned char *s, size_t n, int64_t *out) {
  bool neg = s[0] == '-';
  uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
  for (size_t k = neg; k < n; k++) {
    unsigned d = s[k] - '0';
    if (v > (limit - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  return true;
}

static bool parse_number(parser *P, tg_json *v) {
  size_t from = P->i;
  bool integral = true;
  if (peek(P) == '-') P->i++;
  if (peek(P) == '0') {
    P->i++;
    if (is_digit(peek(P))) return fail(P, from, "invalid number: a leading zero");
  } else if (!digits(P)) {
    return fail(P, from, "invalid number: expected a digit");
  }
  if (peek(P) == '.') {
    P->i++;
    integral = false;
    if (!digits(P)) return fail(P, P->i, "invalid number: expected a digit after '.'");
  }
  if (peek(P) == 'e' || peek(P) == 'E') {
    P->i++;
    integral = false;
    if (peek(P) == '+' || peek(P) == '-') P->i++;
    if (!digits(P)) return fail(P, P->i, "invalid number: expected a digit in the exponent");
  }
  size_t n = P->i - from;
  if (integral && int_value(P->s + from, n, &v->u.i)) {
    v->kind = TG_JSON_INT;
    return true;
  }
  /* strtod wants a terminated string; the token is ASCII of known length. */
  char small[64], *copy = n < sizeof small ? small : malloc(n + 1);
  if (!copy) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  memcpy(copy, P->s + from, n);
  copy[n] = 0;
  double d = strtod(copy, NULL);
  if (copy != small) free(copy);
  if (isinf(d)) return fail(P, from, "number out of range");
  v->kind = TG_JSON_REAL;
  v->u.d = d;
  return true;
}

/* ---- values, arrays, objects ------------------------------------------ */

static bool parse_value(parser *P, tg_json *v);

static bool literal(parser *P, const char *word, tg_json_kind kind, tg_json *v) {
  size_t n = strlen(word);
  if (P->len - P->i < n || memcmp(P->s + P->i, word, n) != 0)
    return fail(P, P->i, "invalid literal (expected %s)", word);
  P->i += n;
  v->kind = kind;
  return true;
}

static bool enter(parser *P) {
  if (++P->depth > P->max_depth)
    return fail(P, P->i, "arrays and objects nested more than %d deep", P->max_depth);
  P->i++; /* the bracket */
  return true;
}

static bool parse_array(parser *P, tg_json *v) {
  if (!enter(P)) return false;
  v->kind = TG_JSON_ARRAY;
  size_t base = P->top;
  skip_ws(P);
  if (peek(P) == ']') {
    P->i++;
    P->depth--;
    return true;
  }
  for (;;) {
    tg_json item;
    if (!parse_value(P, &item)) return false;
    push(P, &item, 0);
    skip_ws(P);
    int c = peek(P);
    P->i++;
    if (c == ']') break;
    if (c != ',') return fail(P, P->i - 1, "expected ',' or ']'");
  }
  pop_into(P, base, v);
  P->depth--;
  return true;
}

typedef struct key_ref {
  const char *key;
  size_t len, pos;
} key_ref;

static int by_key_then_pos(const void *pa, const void *pb) {
  const key_ref *a = pa, *b = pb;
  int c = memcmp(a->key, b->key, a->len < b->len ? a->len : b->len);
  if (c) return c;
  if (a->len != b->len) return a->len < b->len ? -1 : 1;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* Finds the first key (in text order) that repeats an earlier one among
 * the members in slots [base, top); sorting keeps this O(n log n) for
 * headers with a great many tensors. */
static bool check_duplicates(parser *P, size_t base) {
  size_t n = P->top - base;
  if (n < 2) return true;
  key_ref *refs = malloc(n * sizeof *refs);
  if (!refs) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  for (size_t k = 0; k < n; k++) {
    const slot *s = &P->stack[base + k];
    refs[k] = (key_ref){s->v.key, s->v.key_len, s->key_pos};
  }
  qsort(refs, n, sizeof *refs, by_key_then_pos);
  const key_ref *dup = NULL;
  for (size_t k = 1; k < n; k++)
    if (refs[k].len == refs[k - 1].len && memcmp(refs[k].key, refs[k - 1].key, refs[k].len) == 0 &&
        (!dup || refs[k].pos < dup->pos))
      dup = &refs[k];
  bool ok = true;
  if (dup) {
    P->err->dup_key = dup->key;
    ok = fail(P, dup->pos, "duplicate key");
  }
  free(refs);
  return ok;
}

static bool parse_object(parser *P, tg_json *v) {
  if (!enter(P)) return false;
  v->kind = TG_JSON_OBJECT;
  size_t base = P->top;
  skip_ws(P);
  if (peek(P) == '}') {
    P->i++;
    P->depth--;
    return true;
  }
  for (;;) {
    skip_ws(P);
    size_t key_pos = P->i;
    if (peek(P) != '"') return fail(P, P->i, "expected a string key");
    const char *key;
    size_t key_len;
    if (!parse_string(P, &key, &key_len)) return false;
    skip_ws(P);
    if (peek(P) != ':') return fail(P, P->i, "expected ':'");
    P->i++;
    tg_json item;
    if (!parse_value(P, &item)) return false;
    item.key = key;
    item.key_len = key_len;
    push(P, &item, key_pos);
    skip_ws(P);
    int c = peek(P);
    P->i++;
    if (c == '}') break;
    if (c != ',') return fail(P, P->i - 1, "expected ',' or '}'");
  }
  if (!check_duplicates(P, base)) return false;
  pop_into(P, base, v);
  P->depth--;
  return true;
}

static bool parse_value(parser *P, tg_json *v) {
  *v = (tg_json){0};
  skip_ws(P);
  v->pos = P->i;
  if (P->max_values && ++P->nvalues > P->max_values)
    return fail(P, P->i, "more than %zu values", P->max_values);
  int c = peek(P);
  bool ok;
  switch (c) {
  case '{': ok = parse_object(P, v); break;
  case '[': ok = parse_array(P, v); break;
  case '"':
    v->kind = TG_JSON_STRING;
    ok = parse_string(P, &v->u.s, &v->n);
    break;
  case 't': ok = literal(P, "true", TG_JSON_TRUE, v); break;
  case 'f': ok = literal(P, "false", TG_JSON_FALSE, v); break;
  case 'n': ok = literal(P, "null", TG_JSON_NULL, v); break;
  default:
    if (c == '-' || is_digit(c)) {
      ok = parse_number(P, v);
    } else {
      char d[24];
      ok = fail(P, P->i, "expected a value, found %s", describe(c, d, sizeof d));
    }
  }
  v->end = P->i;
  return ok;
}

tg_json *tg_json_parse(tg_arena *a, const char *text, size_t len, const tg_json_opts *opts,
                       tg_json_error *err) {
  parser P = {.a = a, .s = (const unsigned char *)text, .len = len, .err = err};
  P.max_depth = opts && opts->max_depth > 0 ? opts->max_depth : DEFAULT_DEPTH;
  if (P.max_depth > MAX_DEPTH_CAP) P.max_depth = MAX_DEPTH_CAP;
  P.max_values = opts ? opts->max_values : 0;
  *err = (tg_json_error){0};
  tg_json *root = tg_alloc(a, sizeof *root);
  bool ok = parse_value(&P, root);
  if (ok) {
    skip_ws(&P);
    if (P.i < len) ok = fail(&P, P.i, "unexpected data after the JSON value");
  }
  free(P.stack);
  return ok ? root : NULL;
}

const tg_json *tg_json_get(const tg_json *o, const char *key) {
  if (!o || o->kind != TG_JSON_OBJECT) return NULL;
  size_t n = strlen(key);
  for (size_t k = 0; k < o->n; k++)
    if (o->u.items[k].key_len == n && memcmp(o->u.items[k].key, key, n) == 0)
      return &o->u.items[k];
  return NULL;
}
