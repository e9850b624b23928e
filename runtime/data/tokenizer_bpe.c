/* tokenizer_bpe.c: GPT-2's byte-level BPE, exactly as OpenAI's encoder.py.
 *
 * Encoding has two stages.  The pre-tokenizer splits the text into chunks
 * the way encoder.py's regex does,
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * written out by hand (chunk_end) over the Unicode classes of
 * unicode_tables.c, so tg needs no regex engine.  Then each chunk's bytes
 * are merged pair by pair, lowest rank first, until no ranked pair is left.
 *
 * The files describe tokens through bytes_to_unicode(): each byte is shown
 * as a printable character (the space as 'Ġ', U+0120), so that encoder.json
 * and vocab.bpe are text.  Loading maps them back at once; everything below
 * works on token ids and raw bytes.
 *
 * Speed comes from a cache of chunk -> ids (a text repeats its words) and
 * a merge loop that is O(n log n) in the chunk's length rather than
 * encoder.py's O(n^2), so that a long run without spaces stays cheap. */
#include "tokenizer.h"
#include "tokenizer_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "diag.h" /* tg_why */
#include "file.h"
#include "json.h"
#include "utf8.h"

enum {
  CACHE_MAX_KEY = 128,       /* longer chunks are rare; not worth keeping */
  CACHE_MAX_ENTRIES = 1 << 18, /* then the cache starts over: memory stays bounded */
};

typedef struct merge_slot {
  uint64_t pair; /* left id << 32 | right id; EMPTY when unused */
  int32_t rank;  /* the line of vocab.bpe, from 0 */
  int32_t id;    /* the merged token */
} merge_slot;

typedef struct cache_slot {
  uint64_t hash; /* 0 when unused */
  uint32_t key_off, key_len, ids_off, n_ids;
} cache_slot;

/* One candidate merge in the heap: the pair (a, b) at symbol pos. */
typedef struct cand {
  int32_t rank, pos, a, b;
} cand;

struct tg_tok_bpe {
  int32_t byte_id[256];       /* the token of each single byte */
  uint8_t ascii_cls[128];     /* tg_uni_class of each ASCII character */
  merge_slot *merges;         /* open addressing, a power of two */
  size_t merge_cap;
  /* cache of chunk bytes -> ids */
  cache_slot *cache;
  size_t cache_cap, cache_n;
  char *ckeys;
  size_t ckeys_n, ckeys_cap;
  int32_t *cids;
  size_t cids_n, cids_cap;
  /* scratch for merging one chunk */
  int32_t *sym, *next, *prev;
  cand *heap, *batch; /* batch: one round's candidates */
  size_t scratch_cap, heap_cap, batch_cap;
};

#define EMPTY UINT64_MAX

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
  return mix64(h ^ n) | 1; /* never 0, which marks a free cache slot */
}

/* ---- merges ---------------------------------------------------------------- */

static const merge_slot *merge_find(const tg_tok_bpe *b, int32_t left, int32_t right) {
  uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
  size_t mask = b->merge_cap - 1;
  for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
    if (b->merges[i].pair == key) return &b->merges[i];
    if (b->merges[i].pair == EMPTY) return NULL;
  }
}

static bool merge_add(tg_tok_bpe *b, int32_t left, int32_t right, int32_t rank, int32_t id) {
  uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
  size_t mask = b->merge_cap - 1;
  size_t i = mix64(key) & mask;
  while (b->merges[i].pair != EMPTY) {
    if (b->merges[i].pair == key) return false;
    i = (i + 1) & mask;
  }
  b->merges[i] = (merge_slot){key, rank, id};
  return true;
}

/* ---- the candidate heap, ordered by (rank, pos) ---------------------------- */

static bool cand_less(cand x, cand y) {
  return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos);
}

static void heap_push(tg_tok_bpe *b, size_t *n, cand c) {
  if (*n == b->heap_cap) {
    b->heap_cap = b->heap_cap ? 2 * b->heap_cap : 64;
    b->heap = tg_xrealloc(b->heap, b->heap_cap * sizeof *b->heap);
  }
  size_t i = (*n)++;
  while (i > 0 && cand_less(c, b->heap[(i - 1) / 2])) {
    b->heap[i] = b->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  b->heap[i] = c;
}

static cand heap_pop(tg_tok_bpe *b, size_t *n) {
  cand top = b->heap[0], last = b->heap[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && cand_less(b->heap[c + 1], b->heap[c])) c++;
    if (!cand_less(b->heap[c], last)) break;
    b->heap[i] = b->heap[c];
    i = c;
  }
  if (*n) b->heap[i] = last;
  return top;
}

static void push_pair(tg_tok_bpe *b, size_t *hn, int32_t pos) {
  int32_t nx = b->next[pos];
  if (nx < 0) return;
  const merge_slot *m = merge_find(b, b->sym[pos], b->sym[nx]);
  if (m) heap_push(b, hn, (cand){m->rank, pos, b->sym[pos], b->sym[nx]});
}

/* Merges the bytes of one chunk into tokens, appending them to out.
 *
 * encoder.py repeats: take the lowest-ranked adjacent pair, merge every
 * occurrence of it from left to right (an occurrence overlapping one just
 * merged is skipped).  Here each round pops every candidate of the lowest
 * rank, in position order, before pushing the pairs the merges create, so
 * that the rounds are encoder.py's even for a vocab.bpe whose ranks are not
 * in training order.  A candidate whose symbols have changed since it was
 * pushed is stale and skipped. */
static void bpe_chunk(tg_tok_bpe *b, const unsigned char *s, size_t n, int32_t **out,
                      size_t *on, size_t *ocap) {
  if (n > b->scratch_cap) {
    b->scratch_cap = n > 2 * b->scratch_cap ? n : 2 * b->scratch_cap;
    b->sym = tg_xrealloc(b->sym, b->scratch_cap * sizeof *b->sym);
    b->next = tg_xrealloc(b->next, b->scratch_cap * sizeof *b->next);
    b->prev = tg_xrealloc(b->prev, b->scratch_cap * sizeof *b->prev);
  }
  for (size_t i = 0; i < n; i++) {
    b->sym[i] = b->byte_id[s[i]];
    b->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    b->prev[i] = (int32_t)i - 1;
  }
  size_t hn = 0;
  for (size_t i = 0; i + 1 < n; i++) push_pair(b, &hn, (int32_t)i);
  while (hn) {
    int32_t rank = b->heap[0].rank;
    size_t nb = 0;
    while (hn && b->heap[0].rank == rank) {
      if (nb == b->batch_cap) {
        b->batch_cap = b->batch_cap ? 2 * b->batch_cap : 16;
        b->batch = tg_xrealloc(b->batch, b->batch_cap * sizeof *b->batch);
      }
      b->batch[nb++] = heap_pop(b, &hn);
    }
    for (size_t k = 0; k < nb; k++) {
      cand c = b->batch[k];
      int32_t i = c.pos, j = b->next[i];
      if (b->sym[i] != c.a || j < 0 || b->sym[j] != c.b) continue; /* stale */
      b->sym[i] = merge_find(b, c.a, c.b)->id;
      b->sym[j] = -1; /* dead, so that a candidate at j is stale */
      b->next[i] = b->next[j];
      if (b->next[j] >= 0) b->prev[b->next[j]] = i;
      if (b->prev[i] >= 0) push_pair(b, &hn, b->prev[i]);
      push_pair(b, &hn, i);
    }
  }
  for (int32_t i = 0; i >= 0; i = b->next[i]) {
    if (*on == *ocap) {
      *ocap = 2 * *ocap + 16;
      *out = tg_xrealloc(*out, *ocap * sizeof **out);
    }
    (*out)[(*on)++] = b->sym[i];
  }
}

/* ---- the cache ----------------------------------------------------------- */

static void cache_clear(tg_tok_bpe *b) {
  memset(b->cache, 0, b->cache_cap * sizeof *b->cache);
  b->cache_n = b->ckeys_n = b->cids_n = 0;
}

static const cache_slot *cache_find(const tg_tok_bpe *b, const char *s, size_t n, uint64_t h) {
  size_t mask = b->cache_cap - 1;
  for (size_t i = h & mask; b->cache[i].hash; i = (i + 1) & mask) {
    const cache_slot *c = &b->cache[i];
    if (c->hash == h && c->key_len == n && !memcmp(b->ckeys + c->key_off, s, n)) return c;
  }
  return NULL;
}

static void cache_put(tg_tok_bpe *b, const char *s, size_t n, uint64_t h, const int32_t *ids,
                      size_t nids) {
  if (b->cache_n >= CACHE_MAX_ENTRIES) cache_clear(b);
  if (2 * (b->cache_n + 1) > b->cache_cap) { /* grow, keeping the load under half */
    cache_slot *old = b->cache;
    size_t oldcap = b->cache_cap;
    b->cache_cap = oldcap ? 2 * oldcap : 4096;
    b->cache = tg_xmalloc(b->cache_cap * sizeof *b->cache);
    memset(b->cache, 0, b->cache_cap * sizeof *b->cache);
    for (size_t i = 0; i < oldcap; i++) {
      if (!old[i].hash) continue;
      size_t j = old[i].hash & (b->cache_cap - 1);
      while (b->cache[j].hash) j = (j + 1) & (b->cache_cap - 1);
      b->cache[j] = old[i];
    }
    free(old);
  }
  if (b->ckeys_n + n > b->ckeys_cap) {
    b->ckeys_cap = 2 * (b->ckeys_n + n);
    b->ckeys = tg_xrealloc(b->ckeys, b->ckeys_cap);
  }
  if (b->cids_n + nids > b->cids_cap) {
    b->cids_cap = 2 * (b->cids_n + nids);
    b->cids = tg_xrealloc(b->cids, b->cids_cap * sizeof *b->cids);
  }
  size_t mask = b->cache_cap - 1, i = h & mask;
  while (b->cache[i].hash) i = (i + 1) & mask;
  b->cache[i] = (cache_slot){h, (uint32_t)b->ckeys_n, (uint32_t)n, (uint32_t)b->cids_n,
                             (uint32_t)nids};
  memcpy(b->ckeys + b->ckeys_n, s, n);
  memcpy(b->cids + b->cids_n, ids, nids * sizeof *ids);
  b->ckeys_n += n;
  b->cids_n += nids;
  b->cache_n++;
}

/* ---- the pre-tokenizer --------------------------------------------------- */

/* The class of the character at u[i] and, in *k, its length; a byte that
 * does not start well-formed UTF-8 is a character of its own, of class
 * OTHER (Python's surrogateescape turns it into a lone surrogate, Cs). */
static tg_uni_class class_at(const tg_tok_bpe *b, const unsigned char *u, size_t len, size_t i,
                             size_t *k) {
  if (u[i] < 0x80) {
    *k = 1;
    return (tg_uni_class)b->ascii_cls[u[i]];
  }
  uint32_t cp;
  int n = tg_utf8_decode(u + i, len - i, &cp);
  if (!n) {
    *k = 1;
    return TG_UNI_OTHER;
  }
  *k = (size_t)n;
  return tg_unicode_class(cp);
}

/* The end of the run of characters of class cls that starts at i. */
static size_t run_end(const tg_tok_bpe *b, const unsigned char *u, size_t len, size_t i,
                      tg_uni_class cls) {
  size_t k;
  while (i < len && class_at(b, u, len, i, &k) == cls) i += k;
  return i;
}

/* Where the regex's match starting at u[i] ends, trying its alternatives
 * in order as the regex does. */
static size_t chunk_end(const tg_tok_bpe *b, const unsigned char *u, size_t len, size_t i) {
  /* 's|'t|'re|'ve|'m|'ll|'d: lower case only, as in GPT-2 */
  if (u[i] == '\'' && i + 1 < len) {
    unsigned char c = u[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
    if (i + 2 < len && ((c == 'r' && u[i + 2] == 'e') || (c == 'v' && u[i + 2] == 'e') ||
                        (c == 'l' && u[i + 2] == 'l')))
      return i + 3;
  }
  size_t k;
  /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' with their optional space */
  if (u[i] == ' ' && i + 1 < len) {
    tg_uni_class next = class_at(b, u, len, i + 1, &k);
    if (next != TG_UNI_SPACE) return run_end(b, u, len, i + 1, next);
  }
  tg_uni_class cls = class_at(b, u, len, i, &k);
  if (cls != TG_UNI_SPACE) return run_end(b, u, len, i, cls);
  /* \s+(?!\S) backtracks from the end of the whitespace run to leave its
   * last character for the next match (where ' ' then takes a word), unless
   * the run ends the text; a run of one character falls through to \s+. */
  size_t j = i, last = i, nchars = 0;
  while (j < len && class_at(b, u, len, j, &k) == TG_UNI_SPACE) {
    last = j;
    j += k;
    nchars++;
  }
  return j == len || nchars == 1 ? j : last;
}

static void gpt2_encode(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n) {
  tg_tok_bpe *b = t->bpe;
  const unsigned char *u = (const unsigned char *)text;
  size_t on = 0, ocap = len / 3 + 16; /* English runs at about 4 bytes a token */
  int32_t *out = tg_xmalloc(ocap * sizeof *out);
  for (size_t i = 0; i < len;) {
    size_t e = chunk_end(b, u, len, i), cn = e - i;
    const char *chunk = text + i;
    i = e;
    if (cn == 1) {
      if (on == ocap) out = tg_xrealloc(out, (ocap = 2 * ocap) * sizeof *out);
      out[on++] = b->byte_id[(unsigned char)chunk[0]];
      continue;
    }
    uint64_t h = 0;
    if (cn <= CACHE_MAX_KEY) {
      h = hash_bytes(chunk, cn);
      const cache_slot *c = b->cache_cap ? cache_find(b, chunk, cn, h) : NULL;
      if (c) {
        if (on + c->n_ids > ocap) {
          ocap = 2 * (on + c->n_ids);
          out = tg_xrealloc(out, ocap * sizeof *out);
        }
        memcpy(out + on, b->cids + c->ids_off, c->n_ids * sizeof *out);
        on += c->n_ids;
        continue;
      }
    }
    size_t start = on;
    bpe_chunk(b, (const unsigned char *)chunk, cn, &out, &on, &ocap);
    if (cn <= CACHE_MAX_KEY) cache_put(b, chunk, cn, h, out + start, on - start);
  }
  *ids = out;
  *n = on;
}

/* ---- loading ------------------------------------------------------------- */

/* bytes_to_unicode() of encoder.py: the printable bytes stand for
 * themselves, the other 68 for U+0100 onwards in byte order.  Here the
 * inverse: code point -> byte, for code points below 0x144. */
static void unicode_to_byte(int16_t inv[0x144]) {
  for (int c = 0; c < 0x144; c++) inv[c] = -1;
  int extra = 0;
  for (int byte = 0; byte < 256; byte++) {
    bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                     (byte >= 0xAE && byte <= 0xFF);
    inv[printable ? byte : 0x100 + extra++] = (int16_t)byte;
  }
}

/* Turns one symbol as the files write it (UTF-8 of bytes_to_unicode
 * characters) into the bytes it stands for, in out (room for n bytes).
 * Returns the length, or -1 with the offending code point in *bad. */
static long symbol_bytes(const int16_t inv[0x144], const char *s, size_t n, char *out,
                         uint32_t *bad) {
  const unsigned char *u = (const unsigned char *)s;
  long m = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp = 0;
    int k = tg_utf8_decode(u + i, n - i, &cp);
    if (!k || cp >= 0x144 || inv[cp] < 0) {
      *bad = k ? cp : u[i];
      return -1;
    }
    out[m++] = (char)inv[cp];
    i += (size_t)k;
  }
  return m;
}

/* Pieces by bytes, to find the ids that vocab.bpe's merges name. */
typedef struct piece_index {
  int32_t *slot; /* ids, -1 when free */
  size_t cap;
} piece_index;

static int32_t piece_find(const tg_tokenizer *t, const piece_index *x, const char *s, size_t n) {
  size_t mask = x->cap - 1;
  for (size_t i = hash_bytes(s, n) & mask; x->slot[i] >= 0; i = (i + 1) & mask) {
    int32_t id = x->slot[i];
    size_t k = t->piece_off[id + 1] - t->piece_off[id];
    if (k == n && !memcmp(t->pieces + t->piece_off[id], s, n)) return id;
  }
  return -1;
}

static void lc_of(const char *text, size_t pos, int *line, int *col) {
  *line = 1;
  size_t bol = 0;
  for (size_t i = 0; i < pos; i++)
    if (text[i] == '\n') ++*line, bol = i + 1;
  *col = (int)(pos - bol) + 1;
}

/* Reads encoder.json into t's pieces. */
static bool load_encoder(tg_tokenizer *t, const int16_t inv[0x144], const char *path, char *why,
                         size_t whylen) {
  char *text;
  size_t size;
  if (!tg_read_whole_file(path, &text, &size, why, whylen)) return false;
  tg_arena *a = tg_arena_new();
  tg_json_error err;
  tg_json_opts opts = {.max_depth = 4};
  const tg_json *root = tg_json_parse(a, text, size, &opts, &err);
  bool ok = false;
  int line, col;
  uint32_t *len = NULL;
  if (!root) {
    lc_of(text, err.pos, &line, &col);
    tg_why(why, whylen, "%s:%d:%d: %s", path, line, col, err.msg);
    goto done;
  }
  if (root->kind != TG_JSON_OBJECT || root->n < 256 || root->n > INT32_MAX / 2) {
    tg_why(why, whylen, "%s: expected an object mapping GPT-2's token strings to ids", path);
    goto done;
  }
  int32_t n = (int32_t)root->n;
  len = tg_xmalloc((size_t)n * sizeof *len);
  for (int32_t i = 0; i < n; i++) len[i] = UINT32_MAX;
  size_t total = 0;
  for (int32_t i = 0; i < n; i++) { /* ids first: a dense permutation of 0 .. n-1 */
    const tg_json *v = &root->u.items[i];
    if (v->kind != TG_JSON_INT || v->u.i < 0 || v->u.i >= n) {
      lc_of(text, v->pos, &line, &col);
      tg_why(why, whylen, "%s:%d:%d: token \"%s\": expected an id in [0, %ld)", path, line, col,
             v->key, (long)n);
      goto done;
    }
    if (len[v->u.i] != UINT32_MAX) {
      lc_of(text, v->pos, &line, &col);
      tg_why(why, whylen, "%s:%d:%d: token \"%s\": id %ld is taken twice", path, line, col, v->key,
             (long)v->u.i);
      goto done;
    }
    len[v->u.i] = (uint32_t)v->key_len; /* an upper bound: bytes <= UTF-8 length */
    total += v->key_len;
  }
  t->n_vocab = n;
  t->piece_off = tg_xmalloc(((size_t)n + 1) * sizeof *t->piece_off);
  t->pieces = tg_xmalloc(total);
  size_t at = 0;
  for (int32_t i = 0; i < n; i++) t->piece_off[i] = (uint32_t)at, at += len[i];
  for (int32_t i = 0; i < n; i++) {
    const tg_json *v = &root->u.items[i];
    uint32_t bad;
    long m = symbol_bytes(inv, v->key, v->key_len, t->pieces + t->piece_off[v->u.i], &bad);
    if (m <= 0) {
      lc_of(text, v->pos, &line, &col);
      if (m == 0)
        tg_why(why, whylen, "%s:%d:%d: the empty string is no token", path, line, col);
      else
        tg_why(why, whylen, "%s:%d:%d: token \"%s\": U+%04X is not one of the 256 characters "
               "that stand for bytes", path, line, col, v->key, (unsigned)bad);
      goto done;
    }
    len[v->u.i] = (uint32_t)m;
  }
  /* Close the gaps that characters longer than their byte left. */
  at = 0;
  for (int32_t i = 0; i < n; i++) {
    memmove(t->pieces + at, t->pieces + t->piece_off[i], len[i]);
    t->piece_off[i] = (uint32_t)at;
    at += len[i];
  }
  t->piece_off[n] = (uint32_t)at;
  ok = true;
done:
  free(len);
  tg_arena_free(a);
  free(text);
  return ok;
}

/* Reads vocab.bpe's merges, rank = line - 2, into b. */
static bool load_merges(tg_tokenizer *t, const int16_t inv[0x144], const char *path, char *why,
                        size_t whylen) {
  tg_tok_bpe *b = t->bpe;
  char *text;
  size_t size;
  if (!tg_read_whole_file(path, &text, &size, why, whylen)) return false;
  piece_index x = {NULL, 1};
  while (x.cap < 2 * (size_t)t->n_vocab) x.cap *= 2;
  x.slot = tg_xmalloc(x.cap * sizeof *x.slot);
  for (size_t i = 0; i < x.cap; i++) x.slot[i] = -1;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    const char *s = t->pieces + t->piece_off[id];
    size_t n = t->piece_off[id + 1] - t->piece_off[id];
    size_t i = hash_bytes(s, n) & (x.cap - 1);
    while (x.slot[i] >= 0) i = (i + 1) & (x.cap - 1);
    x.slot[i] = id;
  }
  size_t lines = 0;
  for (size_t i = 0; i < size; i++) lines += text[i] == '\n';
  b->merge_cap = 1;
  while (b->merge_cap < 2 * lines + 2) b->merge_cap *= 2;
  b->merges = tg_xmalloc(b->merge_cap * sizeof *b->merges);
  for (size_t i = 0; i < b->merge_cap; i++) b->merges[i].pair = EMPTY;
  char *buf = tg_xmalloc(size + 1);
  bool ok = false;
  /* Like encoder.py, which reads text.split('\n')[1:-1]: the first line
   * is a version comment and the file ends with a newline. */
  if (size < 8 || memcmp(text, "#version", 8)) {
    tg_why(why, whylen, "%s:1: expected '#version: ...' (is this GPT-2's vocab.bpe?)", path);
    goto done;
  }
  if (text[size - 1] != '\n') {
    tg_why(why, whylen, "%s: the last line does not end with a newline (encoder.py would drop "
           "it)", path);
    goto done;
  }
  const char *p = memchr(text, '\n', size) + 1, *end = text + size;
  for (int32_t rank = 0, line = 2; p < end; rank++, line++) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *sp = memchr(p, ' ', (size_t)(eol - p));
    if (!sp || sp == p || sp + 1 == eol || memchr(sp + 1, ' ', (size_t)(eol - sp - 1)) ||
        memchr(p, '\r', (size_t)(eol - p))) {
      tg_why(why, whylen, "%s:%d: expected two symbols separated by one space", path, line);
      goto done;
    }
    uint32_t bad;
    long na = symbol_bytes(inv, p, (size_t)(sp - p), buf, &bad);
    long nb = na < 0 ? -1 : symbol_bytes(inv, sp + 1, (size_t)(eol - sp - 1), buf + na, &bad);
    if (na < 0 || nb < 0) {
      tg_why(why, whylen, "%s:%d: U+%04X is not one of the 256 characters that stand for bytes",
             path, line, (unsigned)bad);
      goto done;
    }
    int32_t left = piece_find(t, &x, buf, (size_t)na);
    int32_t right = piece_find(t, &x, buf + na, (size_t)nb);
    int32_t merged = piece_find(t, &x, buf, (size_t)(na + nb));
    if (left < 0 || right < 0 || merged < 0) {
      int w = left < 0 ? 0 : right < 0 ? 1 : 2;
      static const char *what[] = {"its first symbol", "its second symbol", "the merged symbol"};
      tg_why(why, whylen, "%s:%d: %s is not in the encoder's vocabulary", path, line, what[w]);
      goto done;
    }
    if (!merge_add(b, left, right, rank, merged)) {
      tg_why(why, whylen, "%s:%d: the same merge twice", path, line);
      goto done;
    }
    p = eol + 1;
  }
  ok = true;
done:
  free(buf);
  free(x.slot);
  free(text);
  return ok;
}

/* Every text has a byte-level BPE encoding: nothing to refuse. */
static bool bpe_encode(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, char *why,
                       size_t whylen) {
  (void)why, (void)whylen;
  gpt2_encode(t, text, len, ids, n);
  return true;
}

static void bpe_free(tg_tokenizer *t);

tg_tokenizer *tg_tok_gpt2_load(const char *encoder_json, const char *vocab_bpe, char *why,
                               size_t whylen) {
  tg_tokenizer *t = tg_xmalloc(sizeof *t);
  memset(t, 0, sizeof *t);
  t->kind = TG_TOK_GPT2;
  t->encode = bpe_encode;
  t->free_kind = bpe_free;
  t->source = strcpy(tg_xmalloc(strlen(encoder_json) + 1), encoder_json);
  t->bpe = tg_xmalloc(sizeof *t->bpe);
  memset(t->bpe, 0, sizeof *t->bpe);
  int16_t inv[0x144];
  unicode_to_byte(inv);
  if (!load_encoder(t, inv, encoder_json, why, whylen)) goto fail;
  for (int c = 0; c < 256; c++) t->bpe->byte_id[c] = -1;
  for (int32_t i = 0; i < t->n_vocab; i++)
    if (t->piece_off[i + 1] - t->piece_off[i] == 1)
      t->bpe->byte_id[(unsigned char)t->pieces[t->piece_off[i]]] = i;
  for (int c = 0; c < 256; c++) {
    if (t->bpe->byte_id[c] < 0) {
      tg_why(why, whylen, "%s: no token for the single byte 0x%02X", encoder_json, c);
      goto fail;
    }
  }
  for (int c = 0; c < 128; c++) t->bpe->ascii_cls[c] = (uint8_t)tg_unicode_class((uint32_t)c);
  if (!load_merges(t, inv, vocab_bpe, why, whylen)) goto fail;
  return t;
fail:
  tg_tok_free(t);
  return NULL;
}

static void bpe_free(tg_tokenizer *t) {
  tg_tok_bpe *b = t->bpe;
  if (!b) return;
  free(b->merges);
  free(b->cache);
  free(b->ckeys);
  free(b->cids);
  free(b->sym);
  free(b->next);
  free(b->prev);
  free(b->heap);
  free(b->batch);
  free(b);
}
