/* canon.c: generated code's graph numbers made positional, and steps of
 * one shape found (canon.h).
 *
 * A light tokenizer (identifiers, numbers, strings, comments, spaces, one
 * character of punctuation) is enough: the text is the renderers' own, and
 * only names of the forms the emitter makes (b<N>, t<N>, t<N>_<L>, r<N>,
 * acc<N>, tg_row_k<K>_s<S>) and integer literals are ever changed. */
#include "canon.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

/* ---- tokens -------------------------------------------------------------------- */

typedef enum tk_kind { TK_SPACE, TK_COMMENT, TK_IDENT, TK_NUMBER, TK_STRING, TK_PUNCT } tk_kind;

typedef struct tg_token {
  tk_kind k;
  const char *s;
  int n;
} tok;

static bool id0(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool id1(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The tokens of C++ text, as far as renaming needs: every byte is in one. */
static int tokenize(const char *s, tok **out) {
  int n = 0, cap = 256;
  tok *t = tg_xmalloc(sizeof *t * (size_t)cap);
  while (*s) {
    const char *b = s;
    tk_kind k;
    if (isspace((unsigned char)*s)) {
      while (isspace((unsigned char)*s)) s++;
      k = TK_SPACE;
    } else if (s[0] == '/' && s[1] == '/') {
      while (*s && *s != '\n') s++;
      k = TK_COMMENT;
    } else if (s[0] == '/' && s[1] == '*') {
      const char *e = strstr(s + 2, "*/");
      s = e ? e + 2 : s + strlen(s);
      k = TK_COMMENT;
    } else if (*s == '"' || *s == '\'') {
      char q = *s++;
      while (*s && *s != q) s += s[0] == '\\' && s[1] ? 2 : 1;
      if (*s) s++;
      k = TK_STRING;
    } else if (id0(*s)) {
      while (id1(*s)) s++;
      k = TK_IDENT;
    } else if (isdigit((unsigned char)*s) || (*s == '.' && isdigit((unsigned char)s[1]))) {
      bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
      while (id1(*s) || *s == '.' || (!hex && (*s == '+' || *s == '-') && (s[-1] == 'e' || s[-1] == 'E'))) s++;
      k = TK_NUMBER;
    } else {
      s++;
      k = TK_PUNCT;
    }
    if (n == cap) t = tg_xrealloc(t, sizeof *t * (size_t)(cap *= 2));
    t[n++] = (tok){k, b, (int)(s - b)};
  }
  *out = t;
  return n;
}

static bool tok_is(const tok *t, const char *s) { return (int)strlen(s) == t->n && !strncmp(t->s, s, (size_t)t->n); }

/* A name made from a graph number: b<N> (a buffer), t<N> and t<N>_<L> (a
 * value, a lane of it), r<N> (a row cache register array), acc<N> (a
 * sum), col<N> (a row-group nest's column sums).  Returns the prefix's length and sets *num and *rest (what follows
 * the number), or 0. */
static int numbered(const tok *t, long *num, int *rest) {
  static const char *const prefixes[] = {"acc", "col", "b", "t", "r"};
  for (int i = 0; i < 5; i++) {
    int pl = (int)strlen(prefixes[i]);
    if (t->n <= pl || strncmp(t->s, prefixes[i], (size_t)pl) || !isdigit((unsigned char)t->s[pl])) continue;
    int e = pl;
    long v = 0;
    while (e < t->n && isdigit((unsigned char)t->s[e]) && v < 100000000) v = v * 10 + (t->s[e++] - '0');
    if (e < t->n) {
      if (t->s[e] != '_' || e + 1 == t->n) return 0;
      for (int x = e + 1; x < t->n; x++)
        if (!isdigit((unsigned char)t->s[x])) return 0;
    }
    *num = v, *rest = e;
    return pl;
  }
  return 0;
}

/* Graph numbers to positions, by first appearance: a list, and an
 * open-addressing index over it (a whole-model kernel such as the
 * optimizer has thousands of names, and a list search per name grew with
 * depth squared). */
typedef struct renamer {
  long *from;
  int n, cap;
  int *slot; /* positions + 1, 0 empty; size n_slots, a power of two */
  int n_slots;
} renamer;

static unsigned slot_of(long v, int n_slots) { return (unsigned)(((unsigned long)v * 2654435761u) >> 7) & (unsigned)(n_slots - 1); }

static void reindex(renamer *R) {
  R->n_slots = R->n_slots ? 2 * R->n_slots : 128;
  free(R->slot);
  R->slot = tg_xcalloc((size_t)R->n_slots, sizeof *R->slot);
  for (int i = 0; i < R->n; i++) {
    unsigned h = slot_of(R->from[i], R->n_slots);
    while (R->slot[h]) h = (h + 1) & (unsigned)(R->n_slots - 1);
    R->slot[h] = i + 1;
  }
}

static int position(renamer *R, long v) {
  if (2 * (R->n + 1) > R->n_slots) reindex(R);
  unsigned h = slot_of(v, R->n_slots);
  for (; R->slot[h]; h = (h + 1) & (unsigned)(R->n_slots - 1))
    if (R->from[R->slot[h] - 1] == v) return R->slot[h] - 1;
  if (R->n == R->cap) R->from = tg_xrealloc(R->from, sizeof *R->from * (size_t)(R->cap = R->cap ? 2 * R->cap : 64));
  R->from[R->n] = v;
  R->slot[h] = R->n + 1;
  return R->n++;
}

/* t's text with its graph number made positional (into out). */
static void put_renamed(tg_sbuf *out, renamer *R, const tok *t) {
  long v;
  int rest, pl = numbered(t, &v, &rest);
  if (pl) {
    tg_sb_printf(out, "%.*s%d%.*s", pl, t->s, position(R, v), t->n - rest, t->s + rest);
    return;
  }
  /* the row cache's shared array, tg_row_k<K>_s<S>: named after the unit */
  if (t->n > 8 && !strncmp(t->s, "tg_row_k", 8) && isdigit((unsigned char)t->s[8])) {
    const char *s = memchr(t->s + 8, '_', (size_t)(t->n - 8));
    if (s) {
      tg_sb_printf(out, "tg_row_TGSELF%.*s", (int)(t->s + t->n - s), s);
      return;
    }
  }
  tg_sb_put(out, t->s, (size_t)t->n);
}

void tg_canonical(const char *text, tg_sbuf *out, tg_sbuf *key) {
  tok *t;
  int n = tokenize(text, &t);
  renamer R = {0};
  for (int i = 0; i < n; i++) {
    if (t[i].k == TK_IDENT) {
      size_t before = out->n;
      put_renamed(out, &R, &t[i]);
      tg_sb_put(key, out->s + before, out->n - before);
    } else {
      tg_sb_put(out, t[i].s, (size_t)t[i].n);
      if (t[i].k == TK_SPACE) tg_sb_puts(key, " ");
      else if (t[i].k != TK_COMMENT) tg_sb_put(key, t[i].s, (size_t)t[i].n);
    }
  }
  free(R.from);
  free(R.slot);
  free(t);
}

void tg_canonical_hash(const char *text, tg_sbuf *out, tg_sbuf *key, char hex[TG_SHA256_HEX]) {
  tg_canonical(text, out, key);
  tg_sha256 h;
  unsigned char d[32];
  tg_sha256_init(&h);
  tg_sha256_update(&h, key->s ? key->s : "", key->n);
  tg_sha256_final(&h, d, hex);
}

/* ---- steps of one shape as one device function ------------------------------ */

/* Whether the integer literal t[i] may become a parameter: not an array's
 * size or a loop the compiler must unroll (the row cache's registers),
 * nor inside TG_SHARED(...). */
static bool sizes_free(const tok *t, int n, int i) {
  int a = i - 1, b = i + 1;
  while (a >= 0 && t[a].k == TK_SPACE) a--;
  while (b < n && t[b].k == TK_SPACE) b++;
  if (a >= 0 && b < n && tok_is(&t[a], "[") && tok_is(&t[b], "]")) return false;
  if (a >= 0 && tok_is(&t[a], "<")) {
    int c = a - 1;
    while (c >= 0 && t[c].k == TK_SPACE) c--;
    if (c >= 0 && tok_is(&t[c], "u")) return false;
  }
  for (int c = i - 1, depth = 0; c >= 0; c--) {
    if (tok_is(&t[c], ")")) depth++;
    else if (tok_is(&t[c], "(")) {
      if (depth-- == 0) {
        int d = c - 1;
        while (d >= 0 && t[d].k == TK_SPACE) d--;
        return !(d >= 0 && t[d].k == TK_IDENT && t[d].n >= 9 && !strncmp(t[d].s, "TG_SHARED", 9));
      }
    } else if (tok_is(&t[c], ";") || tok_is(&t[c], "{") || tok_is(&t[c], "}")) {
      return true;
    }
  }
  return true;
}

static bool int_literal(const tok *t) {
  if (t->k != TK_NUMBER) return false;
  int e = 0;
  while (e < t->n && isdigit((unsigned char)t->s[e])) e++;
  if (e == 0 || (t->s[0] == '0' && e > 1)) return false; /* octal: leave it */
  for (int x = e; x < t->n; x++)
    if (t->s[x] != 'u' && t->s[x] != 'U' && t->s[x] != 'l' && t->s[x] != 'L') return false;
  return true;
}

/* ---- steps of one shape ------------------------------------------------------ */

bool tg_shape_analyse(tg_shape *S, const char *body, tg_buf_decl decl, void *ctx) {
  memset(S, 0, sizeof *S);
  S->body = body;
  S->n = tokenize(body, &S->t);
  tg_sbuf key = {0};
  renamer bufs = {0}, vals = {0};
  S->lits = tg_xmalloc(sizeof(int) * (size_t)(S->n + 1));
  bool ok = true;
  for (int i = 0; i < S->n && ok; i++) {
    const tok *t = &S->t[i];
    long v;
    int rest;
    if (t->k == TK_SPACE || t->k == TK_COMMENT) continue;
    if (t->k == TK_IDENT && numbered(t, &v, &rest) == 1 && t->s[0] == 'b' && rest == t->n) {
      const char *d = decl(ctx, v);
      if (!d) ok = false; /* not a parameter: the step stays as it is */
      else tg_sb_printf(&key, "b%d:%s ", position(&bufs, v), d);
    } else if (t->k == TK_IDENT) {
      put_renamed(&key, &vals, t);
      tg_sb_puts(&key, " ");
    } else if (int_literal(t) && sizes_free(S->t, S->n, i)) {
      S->lits[S->n_lits++] = i;
      tg_sb_puts(&key, "# ");
    } else {
      tg_sb_put(&key, t->s, (size_t)t->n);
      tg_sb_puts(&key, " ");
    }
  }
  S->key = tg_sb_take(&key);
  S->bufs = bufs.from, S->n_bufs = bufs.n;
  free(bufs.slot);
  free(vals.from);
  free(vals.slot);
  return ok;
}

void tg_shape_free(tg_shape *S) {
  free(S->t);
  free(S->key);
  free(S->bufs);
  free(S->lits);
  memset(S, 0, sizeof *S);
}

bool tg_shape_same(const tg_shape *a, const tg_shape *b) {
  return a->key && b->key && a->n_lits == b->n_lits && !strcmp(a->key, b->key);
}

void tg_shape_vary(const tg_shape *rep, const tg_shape *m, bool *vary) {
  for (int l = 0; l < rep->n_lits; l++) {
    const tok *x = &rep->t[rep->lits[l]], *y = &m->t[m->lits[l]];
    if (x->n != y->n || strncmp(x->s, y->s, (size_t)x->n)) vary[l] = true;
  }
}

void tg_shape_params(tg_sbuf *out, const tg_shape *R, const bool *vary, tg_buf_decl decl, void *ctx) {
  for (int b = 0; b < R->n_bufs; b++) tg_sb_printf(out, "%s%s b%d", b ? ", " : "", decl(ctx, R->bufs[b]), b);
  for (int i = 0, m = 0; i < R->n_lits; i++)
    if (vary[i]) tg_sb_printf(out, "%sconst tg_idx n%d", R->n_bufs || m ? ", " : "", m), m++;
  if (!R->n_bufs && !R->n_lits) tg_sb_puts(out, "void");
}

void tg_shape_body(tg_sbuf *out, const tg_shape *R, const bool *vary) {
  renamer vals = {0}, bufs = {0};
  for (int i = 0, l = 0, m = 0; i < R->n; i++) {
    const tok *t = &R->t[i];
    long v;
    int rest;
    if (l < R->n_lits && R->lits[l] == i) {
      if (vary[l]) tg_sb_printf(out, "n%d", m++);
      else tg_sb_put(out, t->s, (size_t)t->n);
      l++;
    } else if (t->k == TK_IDENT && numbered(t, &v, &rest) == 1 && t->s[0] == 'b' && rest == t->n) {
      tg_sb_printf(out, "b%d", position(&bufs, v));
    } else if (t->k == TK_IDENT) {
      put_renamed(out, &vals, t);
    } else {
      tg_sb_put(out, t->s, (size_t)t->n);
    }
  }
  free(vals.from);
  free(vals.slot);
  free(bufs.from);
  free(bufs.slot);
}

void tg_shape_args(tg_sbuf *out, const tg_shape *m, const bool *vary) {
  for (int b = 0; b < m->n_bufs; b++) tg_sb_printf(out, "%sb%ld", b ? ", " : "", m->bufs[b]);
  for (int l = 0, k = 0; l < m->n_lits; l++)
    if (vary[l]) {
      const tok *y = &m->t[m->lits[l]];
      tg_sb_printf(out, "%s%.*s", m->n_bufs || k ? ", " : "", y->n, y->s), k++;
    }
}

long long tg_shape_lit(const tg_shape *m, int l) {
  const tok *y = &m->t[m->lits[l]];
  long long v = 0;
  for (int i = 0; i < y->n && isdigit((unsigned char)y->s[i]); i++) v = v * 10 + (y->s[i] - '0');
  return v;
}

void tg_put_named(tg_sbuf *out, const char *text, const char *name) {
  for (const char *s = text; *s;) {
    const char *hit = strstr(s, "TGSELF");
    if (!hit) {
      tg_sb_puts(out, s);
      break;
    }
    tg_sb_put(out, s, (size_t)(hit - s));
    tg_sb_puts(out, name);
    s = hit + 6;
  }
}
