/* prepare_corpus.c: a corpus of documents to shards (prepare_corpus.h).
 *
 * The work goes in rounds: the main thread reads a few chunks of input
 * (about 4 MB of whole JSON lines each, or one whole text file), the
 * threads take chunks from the round until none is left, each parsing and
 * tokenizing with a tokenizer of its own (GPT-2's encoder caches chunks of
 * text, so one is not shared between threads), and the main thread then
 * appends the tokens to the shard being filled, in input order.  Reading
 * and writing are a small part next to BPE, so they are not overlapped
 * with it; the output does not depend on the number of threads.
 *
 * Every document records where it starts (file, byte offset, line), so
 * that when a shard is full the state file can say where the next shard's
 * first token comes from: that document, re-tokenized, less the tokens
 * the shards already hold. */
#include "prepare_corpus.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "diag.h"
#include "file.h"
#include "host_cores.h"
#include "json.h"
#include "json_text.h"
#include "prepare.h"
#include "sbuf.h"
#include "tokenizer.h"
#include "tokens_file.h"

enum { CHUNK_BYTES = 4 << 20 };
#define STATE_FILE "prepare.state"
#define DEFAULT_SHARD_TOKENS 100000000 /* llm.c's dev/data/fineweb.py: shard_size = 10**8 */

typedef struct source {
  char *path;
  uint64_t size;
  bool jsonl;
} source;

/* A document's place in the input and its tokens in its chunk's array. */
typedef struct doc {
  uint64_t offset, line;
  size_t first, ntok;
} doc;

typedef struct chunk {
  int file;
  uint64_t offset, line; /* where its text starts */
  char *text;
  size_t len;
  uint16_t *toks; /* <|endoftext|> and the ids of each document, in order */
  size_t ntoks, tcap;
  doc *docs;
  size_t ndocs, dcap;
  bool failed;
  char err[700];
} chunk;

/* One round's chunks, shared by its threads. */
typedef struct round {
  chunk *chunks;
  int n, next;
  pthread_mutex_t mu;
  const source *src;
  const char *field;
} round;

typedef struct worker {
  round *r;
  tg_tokenizer *tok;
  pthread_t thread;
} worker;

/* ---- tokenizing (the threads) -------------------------------------------------------- */

static bool add_doc(chunk *c, tg_tokenizer *t, const char *text, size_t len, uint64_t offset, uint64_t line) {
  int32_t *ids = NULL;
  size_t n = 0;
  char why[256];
  if (!tg_tok_encode(t, text, len, &ids, &n, why, sizeof why)) {
    c->failed = true;
    snprintf(c->err, sizeof c->err, "line %llu: %s", (unsigned long long)line, why);
    return false;
  }
  if (c->ntoks + n + 1 > c->tcap) {
    c->tcap = (c->ntoks + n + 1) * 2;
    c->toks = tg_xrealloc(c->toks, c->tcap * sizeof *c->toks);
  }
  if (c->ndocs == c->dcap) {
    c->dcap = c->dcap ? 2 * c->dcap : 64;
    c->docs = tg_xrealloc(c->docs, c->dcap * sizeof *c->docs);
  }
  c->docs[c->ndocs++] = (doc){offset, line, c->ntoks, n + 1};
  c->toks[c->ntoks++] = TG_GPT2_EOT; /* llm.c: tokens = [eot] + encode_ordinary(text) */
  for (size_t i = 0; i < n; i++) c->toks[c->ntoks++] = (uint16_t)ids[i];
  free(ids);
  return true;
}

static bool blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
  return true;
}

/* One JSON line's document, or a message in c->err. */
static bool json_line(chunk *c, tg_tokenizer *t, tg_arena *a, const char *path, const char *field, const char *s,
                      size_t n, uint64_t offset, uint64_t line) {
  tg_json_error err;
  const tg_json *root = tg_json_parse(a, s, n, NULL, &err);
  const tg_json *f = root && root->kind == TG_JSON_OBJECT ? tg_json_get(root, field) : NULL;
  unsigned long long ln = (unsigned long long)line;
  if (!root)
    snprintf(c->err, sizeof c->err, "%s:%llu: not valid JSON: %s at byte %zu of the line", path, ln, err.msg,
             err.pos + 1);
  else if (root->kind != TG_JSON_OBJECT)
    snprintf(c->err, sizeof c->err, "%s:%llu: expected a JSON object with a \"%s\" field, found %s", path, ln, field,
             tg_json_kind_name(root->kind));
  else if (!f)
    snprintf(c->err, sizeof c->err, "%s:%llu: the object has no \"%s\" field (the document's text; "
             "--text-field names another)", path, ln, field);
  else if (f->kind != TG_JSON_STRING)
    snprintf(c->err, sizeof c->err, "%s:%llu: \"%s\" is %s, not a string", path, ln, field,
             tg_json_kind_name(f->kind));
  else
    return add_doc(c, t, f->u.s, f->n, offset, line);
  c->failed = true;
  return false;
}

static void tokenize_chunk(chunk *c, tg_tokenizer *t, const source *src, const char *field) {
  const source *s = &src[c->file];
  if (!s->jsonl) {
    add_doc(c, t, c->text, c->len, c->offset, c->line);
    return;
  }
  tg_arena *a = tg_arena_new();
  uint64_t line = c->line;
  for (size_t p = 0; p < c->len; line++) {
    const char *at = c->text + p, *nl = memchr(at, '\n', c->len - p);
    size_t n = nl ? (size_t)(nl - at) : c->len - p;
    if (!blank(at, n) && !json_line(c, t, a, s->path, field, at, n, c->offset + p, line)) break;
    p += n + (nl != NULL);
    if (tg_arena_bytes(a) > (64u << 20)) { /* a chunk's worth of parsed lines, then start over */
      tg_arena_free(a);
      a = tg_arena_new();
    }
  }
  tg_arena_free(a);
}

static void *work(void *arg) {
  worker *w = arg;
  round *r = w->r;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    int i = r->next++;
    pthread_mutex_unlock(&r->mu);
    if (i >= r->n) return NULL;
    tokenize_chunk(&r->chunks[i], w->tok, r->src, r->field);
  }
}

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct reader {
  source *src;
  int nsrc;
  int file;               /* where the next chunk starts */
  uint64_t offset, line;
  uint64_t bytes_before;  /* the sizes of the files before `file` */
} reader;

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

static bool pread_all(int fd, char *buf, size_t n, uint64_t at) {
  while (n) {
    ssize_t k = pread(fd, buf, n, (off_t)at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    buf += k, n -= (size_t)k, at += (uint64_t)k;
  }
  return true;
}

/* The next chunk into c (c->text NULL: the input is done).  A JSON-lines
 * chunk ends at a newline, grown past CHUNK_BYTES for a longer line. */
static bool read_chunk(reader *r, chunk *c, char *why, size_t whylen) {
  memset(c, 0, sizeof *c);
  while (r->file < r->nsrc && r->offset >= r->src[r->file].size) {
    r->bytes_before += r->src[r->file].size;
    r->file++, r->offset = 0, r->line = 1;
  }
  if (r->file >= r->nsrc) return true;
  const source *s = &r->src[r->file];
  int fd = open(s->path, O_RDONLY);
  if (fd < 0) return tg_why(why, whylen, "cannot open %s: %s", s->path, strerror(errno));
  uint64_t left = s->size - r->offset;
  size_t want = s->jsonl && left > CHUNK_BYTES ? CHUNK_BYTES : (size_t)left, len = 0;
  char *text = NULL;
  for (;;) {
    text = tg_xrealloc(text, want + 1);
    if (!pread_all(fd, text, want, r->offset)) {
      close(fd);
      free(text);
      return tg_why(why, whylen, "cannot read %s: %s", s->path, errno ? strerror(errno) : "the file got shorter");
    }
    if (!s->jsonl || want == left) {
      len = want;
      break;
    }
    const char *nl = NULL;
    for (size_t i = want; i > 0 && !nl; i--)
      if (text[i - 1] == '\n') nl = text + i - 1;
    if (nl) {
      len = (size_t)(nl - text) + 1;
      break;
    }
    want = left - want < want ? (size_t)left : 2 * want; /* a line longer than the chunk */
  }
  close(fd);
  text[len] = 0;
  *c = (chunk){.file = r->file, .offset = r->offset, .line = r->line, .text = text, .len = len};
  for (size_t i = 0; i < len; i++) r->line += text[i] == '\n';
  r->offset += len;
  return true;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void add_source(source **src, int *n, const char *path, uint64_t size) {
  *src = tg_xrealloc(*src, (size_t)(*n + 1) * sizeof **src);
  (*src)[(*n)++] = (source){strcpy(tg_xmalloc(strlen(path) + 1), path), size, ends_with(path, ".jsonl")};
}

/* The inputs as files: a directory's regular files in name order. */
static bool list_sources(const tg_corpus_opts *o, source **src, int *n, char *why, size_t whylen) {
  for (int i = 0; i < o->n_inputs; i++) {
    const char *in = o->inputs[i];
    struct stat st;
    if (stat(in, &st) != 0) return tg_why(why, whylen, "cannot open %s: %s", in, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
      add_source(src, n, in, (uint64_t)st.st_size);
      continue;
    }
    DIR *d = opendir(in);
    if (!d) return tg_why(why, whylen, "cannot list %s: %s", in, strerror(errno));
    char **names = NULL;
    size_t k = 0;
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      names = tg_xrealloc(names, (k + 1) * sizeof *names);
      size_t len = strlen(in) + strlen(e->d_name) + 2;
      names[k] = tg_xmalloc(len);
      snprintf(names[k++], len, "%s/%s", in, e->d_name);
    }
    closedir(d);
    qsort(names, k, sizeof *names, by_name);
    size_t before = (size_t)*n;
    for (size_t j = 0; j < k; j++) {
      if (stat(names[j], &st) == 0 && S_ISREG(st.st_mode)) add_source(src, n, names[j], (uint64_t)st.st_size);
      free(names[j]);
    }
    free(names);
    if ((size_t)*n == before) return tg_why(why, whylen, "%s: the directory holds no files", in);
  }
  return true;
}

/* ---- writing and the state ---------------------------------------------------------------- */

typedef struct writer {
  const tg_corpus_opts *o;
  const char *name;
  uint16_t *buf;
  size_t fill, cap;
  int64_t shards;
  uint64_t tokens, docs;
  /* where the shard being filled starts, for the state: its first
   * document, and how many of that document's tokens came before */
  int next_file;
  uint64_t next_offset, next_line, skip, docs_before;
} writer;

static char *shard_path(const writer *w, int64_t k) {
  size_t n = strlen(w->o->out) + strlen(w->name) + 32;
  char *p = tg_xmalloc(n);
  snprintf(p, n, "%s/%s_%s_%06lld.bin", w->o->out, w->name, k == 0 ? "val" : "train", (long long)k);
  return p;
}

static void put_key_num(tg_sbuf *b, const char *key, uint64_t v) {
  char num[32];
  snprintf(num, sizeof num, "%llu", (unsigned long long)v);
  tg_sb_puts(b, ",\n  \"");
  tg_sb_puts(b, key);
  tg_sb_puts(b, "\": ");
  tg_sb_puts(b, num);
}

static void put_key_str(tg_sbuf *b, const char *key, const char *v) {
  tg_sb_puts(b, ",\n  \"");
  tg_sb_puts(b, key);
  tg_sb_puts(b, "\": ");
  tg_json_quote(b, v, strlen(v));
}

/* What a resumed run must agree with, and where it goes on. */
static bool write_state(const writer *w, const source *src, int nsrc, char *why, size_t whylen) {
  tg_sbuf b = {0};
  tg_sb_puts(&b, "{\n  \"tg_prepare_state\": 1");
  put_key_str(&b, "name", w->name);
  put_key_str(&b, "text_field", w->o->text_field);
  put_key_num(&b, "shard_tokens", (uint64_t)w->o->shard_tokens);
  tg_sb_puts(&b, ",\n  \"inputs\": [");
  for (int i = 0; i < nsrc; i++) {
    tg_sb_puts(&b, i ? ",\n    [" : "\n    [");
    tg_json_quote(&b, src[i].path, strlen(src[i].path));
    char num[32];
    snprintf(num, sizeof num, ", %llu]", (unsigned long long)src[i].size);
    tg_sb_puts(&b, num);
  }
  tg_sb_puts(&b, "\n  ]");
  put_key_num(&b, "shards", (uint64_t)w->shards);
  put_key_num(&b, "tokens", w->tokens);
  put_key_num(&b, "documents", w->docs_before);
  put_key_num(&b, "next_file", (uint64_t)w->next_file);
  put_key_num(&b, "next_offset", w->next_offset);
  put_key_num(&b, "next_line", w->next_line);
  put_key_num(&b, "skip", w->skip);
  tg_sb_puts(&b, "\n}\n");
  char *path = tg_path_join(w->o->out, STATE_FILE);
  bool ok = tg_write_file_atomic(path, tg_sb_text(&b), b.n, why, whylen);
  free(path);
  tg_sb_free(&b);
  return ok;
}

static uint64_t num_of(const tg_json *root, const char *key, bool *ok) {
  const tg_json *v = tg_json_get(root, key);
  if (!v || v->kind != TG_JSON_INT || v->u.i < 0) {
    *ok = false;
    return 0;
  }
  return (uint64_t)v->u.i;
}

static const char *str_of(const tg_json *root, const char *key) {
  const tg_json *v = tg_json_get(root, key);
  return v && v->kind == TG_JSON_STRING ? v->u.s : "";
}

/* Reads OUT/prepare.state into w and r after checking that it was made
 * from the same inputs and options. */
static bool read_state(writer *w, reader *r, char *why, size_t whylen) {
  char *path = tg_path_join(w->o->out, STATE_FILE), *text = NULL;
  size_t size;
  bool ok = tg_read_whole_file(path, &text, &size, why, whylen);
  tg_arena *a = tg_arena_new();
  tg_json_error err;
  const tg_json *root = ok ? tg_json_parse(a, text, size, NULL, &err) : NULL;
  const tg_json *inputs = root ? tg_json_get(root, "inputs") : NULL;
  if (ok && !root) ok = tg_why(why, whylen, "%s: byte %zu: %s", path, err.pos, err.msg);
  else if (ok && (!inputs || inputs->kind != TG_JSON_ARRAY))
    ok = tg_why(why, whylen, "%s: not a state tgrun prepare wrote", path);
  bool same = ok && strcmp(str_of(root, "name"), w->name) == 0 && strcmp(str_of(root, "text_field"), w->o->text_field) == 0;
  if (ok) same = same && num_of(root, "shard_tokens", &ok) == (uint64_t)w->o->shard_tokens;
  if (ok && same) same = inputs->n == (size_t)r->nsrc;
  for (size_t i = 0; ok && same && i < inputs->n; i++) {
    const tg_json *e = &inputs->u.items[i];
    same = e->kind == TG_JSON_ARRAY && e->n == 2 && e->u.items[0].kind == TG_JSON_STRING &&
           !strcmp(e->u.items[0].u.s, r->src[i].path) && e->u.items[1].kind == TG_JSON_INT &&
           (uint64_t)e->u.items[1].u.i == r->src[i].size;
  }
  if (ok && !same)
    ok = tg_why(why, whylen, "%s: the interrupted preparation had other inputs (or sizes), shard size, name or "
                "text field than this one: run it with those, or remove %s to start over", path, path);
  if (ok) {
    w->shards = (int64_t)num_of(root, "shards", &ok);
    w->tokens = num_of(root, "tokens", &ok);
    w->docs = w->docs_before = num_of(root, "documents", &ok);
    w->next_file = r->file = (int)num_of(root, "next_file", &ok);
    w->next_offset = r->offset = num_of(root, "next_offset", &ok);
    w->next_line = r->line = num_of(root, "next_line", &ok);
    w->skip = num_of(root, "skip", &ok);
    if (!ok || r->file > r->nsrc || (r->file < r->nsrc && r->offset > r->src[r->file].size))
      ok = tg_why(why, whylen, "%s: a number is missing or out of range", path);
    for (int i = 0; ok && i < r->file; i++) r->bytes_before += r->src[i].size;
  }
  tg_arena_free(a);
  free(text);
  free(path);
  return ok;
}

static bool flush_shard(writer *w, char *why, size_t whylen) {
  char *path = shard_path(w, w->shards);
  bool ok = tg_tokens_write16(path, w->buf, w->fill, why, whylen);
  char c[32];
  if (ok) printf("wrote %s: %s tokens\n", path, tg_prepare_commas(w->fill, c));
  fflush(stdout);
  free(path);
  w->shards++;
  w->fill = 0;
  return ok;
}

/* Appends a round's tokens, document by document; writes each full shard
 * and the state after it.  *stop: --max-shards reached. */
static bool consume(writer *w, const chunk *c, const source *src, int nsrc, bool *stop, char *why, size_t whylen) {
  for (size_t d = 0; d < c->ndocs && !*stop; d++) {
    const doc *e = &c->docs[d];
    size_t i = (size_t)w->skip; /* the first document after a resume: what the shards hold already */
    w->skip = 0;
    w->docs++;
    while (i < e->ntok) {
      size_t take = e->ntok - i < w->cap - w->fill ? e->ntok - i : w->cap - w->fill;
      memcpy(w->buf + w->fill, c->toks + e->first + i, take * sizeof *w->buf);
      w->fill += take, i += take, w->tokens += take;
      if (w->fill < w->cap) continue;
      if (!flush_shard(w, why, whylen)) return false;
      w->next_file = c->file, w->next_offset = e->offset, w->next_line = e->line;
      w->skip = i, w->docs_before = w->docs - 1;
      if (!write_state(w, src, nsrc, why, whylen)) return false;
      w->skip = 0;
      if (w->o->max_shards && w->shards >= w->o->max_shards) {
        *stop = true;
        break;
      }
    }
  }
  return true;
}

/* ---- progress --------------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(const writer *w, uint64_t done, uint64_t start, uint64_t total, double t0, bool last) {
  double dt = now_s() - t0, rate = dt > 0 ? (double)(done - start) / dt : 0;
  char docs[32], toks[32], eta[32] = "ETA -";
  if (last) {
    snprintf(eta, sizeof eta, "%.1f s", dt);
  } else if (rate > 0) {
    long s = (long)((double)(total - done) / rate);
    snprintf(eta, sizeof eta, "ETA %ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  }
  fprintf(stderr, "prepare: %s documents, %s tokens, %lld shards, %.1f MB/s, %.0f%% of %.1f MB, %s",
          tg_prepare_commas(w->docs, docs), tg_prepare_commas(w->tokens, toks), (long long)(w->shards + (w->fill > 0)),
          rate / 1e6, total ? 100.0 * (double)done / (double)total : 100.0, (double)total / 1e6, eta);
  fputc(isatty(2) && !last ? '\r' : '\n', stderr);
  fflush(stderr);
}

/* ---- the command ------------------------------------------------------------------------ */

/* A fresh run starts from an empty set: the shards of an earlier run under
 * this name (or a train.bin, which training would read first) would
 * otherwise be read with the new ones. */
static void remove_old_outputs(const char *out, const char *name) {
  DIR *d = opendir(out);
  if (!d) return;
  size_t k = strlen(name);
  int removed = 0;
  for (struct dirent *e; (e = readdir(d));) {
    const char *f = e->d_name;
    bool ours = !strncmp(f, name, k) && (!strncmp(f + k, "_train_", 7) || !strncmp(f + k, "_val_", 5)) &&
                ends_with(f, ".bin");
    if (!ours && strcmp(f, "train.bin") && strcmp(f, "val.bin")) continue;
    char *p = tg_path_join(out, f);
    removed += unlink(p) == 0;
    free(p);
  }
  closedir(d);
  if (removed) printf("removed %d token files of an earlier preparation from %s\n", removed, out);
}

static char *default_name(const char *out) {
  size_t n = strlen(out);
  while (n > 1 && out[n - 1] == '/') n--;
  size_t s = n;
  while (s > 0 && out[s - 1] != '/') s--;
  if (s == n || !strncmp(out + s, ".", n - s) || !strncmp(out + s, "..", n - s))
    return strcpy(tg_xmalloc(sizeof "data"), "data");
  char *p = tg_xmalloc(n - s + 1);
  memcpy(p, out + s, n - s);
  p[n - s] = 0;
  return p;
}

typedef struct run {
  tg_corpus_opts o;
  source *src;
  int nsrc;
  worker *workers;
  int nthreads;
  writer w;
  reader r;
  chunk *chunks;
  char *enc, *bpe;
  tg_tokenizer *tok0;
} run;

/* Reads, tokenizes and writes rounds until the input ends or max_shards. */
static bool rounds(run *x, char *why, size_t whylen) {
  int per_round = 2 * x->nthreads;
  uint64_t total = 0;
  for (int i = 0; i < x->nsrc; i++) total += x->src[i].size;
  uint64_t start = x->r.bytes_before + x->r.offset;
  double t0 = now_s(), every = x->o.progress_every > 0 ? x->o.progress_every : 2, shown = t0;
  bool stop = false, ok = true;
  while (ok && !stop) {
    int n = 0;
    while (ok && n < per_round && (ok = read_chunk(&x->r, &x->chunks[n], why, whylen)) && x->chunks[n].text) n++;
    if (!ok || n == 0) break;
    round rd = {x->chunks, n, 0, PTHREAD_MUTEX_INITIALIZER, x->src, x->o.text_field};
    int started = 0;
    for (int t = 0; t < x->nthreads; t++) x->workers[t].r = &rd;
    for (int t = 0; t < x->nthreads && t < n; t++, started++)
      if (pthread_create(&x->workers[t].thread, NULL, work, &x->workers[t]) != 0) break;
    if (!started) work(&x->workers[0]); /* no thread could start: this one does the round */
    for (int t = 0; t < started; t++) pthread_join(x->workers[t].thread, NULL);
    for (int i = 0; i < n; i++) {
      chunk *c = &x->chunks[i];
      if (ok && c->failed) ok = tg_why(why, whylen, "%s", c->err);
      if (ok && !stop) ok = consume(&x->w, c, x->src, x->nsrc, &stop, why, whylen);
      free(c->text);
      free(c->toks);
      free(c->docs);
    }
    if (now_s() - shown >= every) {
      progress(&x->w, x->r.bytes_before + x->r.offset, start, total, t0, false);
      shown = now_s();
    }
  }
  if (!ok) return false;
  if (!stop && x->w.fill > 0 && !flush_shard(&x->w, why, whylen)) return false;
  uint64_t done = total; /* stopped: up to where the next shard starts */
  if (stop) {
    done = x->w.next_offset;
    for (int i = 0; i < x->w.next_file; i++) done += x->src[i].size;
  }
  progress(&x->w, done, start, total, t0, true);
  char *state = tg_path_join(x->o.out, STATE_FILE);
  char c1[32];
  if (stop) {
    printf("stopped after %lld shards (--max-shards %lld): tgrun prepare --resume goes on from %s\n",
           (long long)x->w.shards, (long long)x->o.max_shards, state);
  } else {
    unlink(state);
    printf("prepared %s documents: %s tokens in %lld shards (%s_val_000000.bin for validation, %lld for training)\n",
           tg_prepare_commas(x->w.docs, c1), tg_prepare_commas(x->w.tokens, (char[32]){0}), (long long)x->w.shards,
           x->w.name, (long long)(x->w.shards > 0 ? x->w.shards - 1 : 0));
    if (x->w.shards < 2)
      printf("note: every token went to the validation shard; training needs a smaller --shard-tokens\n");
  }
  free(state);
  return true;
}

static bool setup(run *x, char *why, size_t whylen) {
  if (x->o.shard_tokens < 1 || x->o.shard_tokens > INT32_MAX)
    return tg_why(why, whylen, "shard size %lld: must lie in [1, %d], what a token file holds",
                  (long long)x->o.shard_tokens, INT32_MAX);
  if (!list_sources(&x->o, &x->src, &x->nsrc, why, whylen)) return false;
  if (!tg_make_dirs(x->o.out, why, whylen)) return false;
  x->r = (reader){x->src, x->nsrc, 0, 0, 1, 0};
  x->w.o = &x->o;
  char *state = tg_path_join(x->o.out, STATE_FILE);
  bool have_state = access(state, F_OK) == 0, ok = true;
  if (x->o.resume && !have_state)
    ok = tg_why(why, whylen, "%s: nothing to resume (no %s there)", x->o.out, STATE_FILE);
  else if (!x->o.resume && have_state)
    ok = tg_why(why, whylen, "%s: an interrupted preparation is there (%s): add --resume to finish it, or remove "
                "that file to start over", x->o.out, state);
  free(state);
  if (!ok) return false;
  if (x->o.resume) {
    if (!read_state(&x->w, &x->r, why, whylen)) return false;
    char c[32];
    printf("resuming at shard %lld: %s tokens in %lld shards done\n", (long long)x->w.shards,
           tg_prepare_commas(x->w.tokens, c), (long long)x->w.shards);
  } else {
    remove_old_outputs(x->o.out, x->w.name);
  }
  x->w.cap = (size_t)x->o.shard_tokens;
  x->w.buf = tg_xmalloc(x->w.cap * sizeof *x->w.buf);
  x->tok0 = tg_prepare_gpt2(x->o.gpt2_dir, &x->enc, &x->bpe, why, whylen);
  if (!x->tok0 || !tg_prepare_write_tokenizer(x->o.out, x->tok0, x->enc, x->bpe, why, whylen)) return false;
  x->nthreads = x->o.threads > 0 ? x->o.threads : tg_host_cores();
  x->workers = tg_xcalloc((size_t)x->nthreads, sizeof *x->workers);
  x->workers[0].tok = x->tok0;
  for (int t = 1; t < x->nthreads; t++)
    if (!(x->workers[t].tok = tg_tok_gpt2_load(x->enc, x->bpe, why, whylen))) return false;
  x->chunks = tg_xcalloc((size_t)(2 * x->nthreads), sizeof *x->chunks);
  return true;
}

bool tg_prepare_corpus(const tg_corpus_opts *opts, char *why, size_t whylen) {
  run x = {.o = *opts};
  if (!x.o.text_field) x.o.text_field = "text";
  if (!x.o.shard_tokens) x.o.shard_tokens = DEFAULT_SHARD_TOKENS;
  char *name = x.o.name ? strcpy(tg_xmalloc(strlen(x.o.name) + 1), x.o.name) : default_name(x.o.out);
  x.w.name = name;
  bool ok = setup(&x, why, whylen) && rounds(&x, why, whylen);
  fflush(stdout);
  for (int t = 0; x.workers && t < x.nthreads; t++) tg_tok_free(x.workers[t].tok);
  if (!x.workers) tg_tok_free(x.tok0);
  free(x.workers);
  free(x.chunks);
  for (int i = 0; i < x.nsrc; i++) free(x.src[i].path);
  free(x.src);
  free(x.w.buf);
  free(x.enc);
  free(x.bpe);
  free(name);
  return ok;
}
