/* prepare.c: `tgrun prepare --tokenizer char|gpt2 --input FILE --out DIR`.
 *
 * It follows nanoGPT's data/shakespeare_char/prepare.py: the text is split
 * at int(n * 0.9) of its n characters, the two parts are encoded
 * separately, and the vocabulary of the char tokenizer is taken from the
 * whole text, so that validation never meets an unknown character.  GPT-2's
 * BPE uses the same character split (nanoGPT's shakespeare/prepare.py
 * splits at 90% too, there by characters as well), each part encoded as one
 * string, which gives the reference counts of ../shared/data/README.md.
 * Outputs are written atomically, so an interrupted prepare leaves no
 * half-written file behind. */
/* realpath() is XSI, beyond the _POSIX_C_SOURCE the build asks for. */
#define _XOPEN_SOURCE 700

#include "prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "tokens_file.h"
#include "ir.h" /* tg_xmalloc, tg_why */

static const char usage[] =
    "usage: tgrun prepare --tokenizer char|gpt2 --input FILE --out DIR [options]\n"
    "\n"
    "Tokenizes a UTF-8 text file for training, as nanoGPT's prepare.py does: the\n"
    "first 90% of its characters become DIR/train.bin and the rest DIR/val.bin\n"
    "(token files in llm.c's format, which llm.c reads too), and DIR/tokenizer.json\n"
    "records the tokenizer so that training can turn samples back into text.\n"
    "\n"
    "  --tokenizer char   one token per character; the vocabulary is the distinct\n"
    "                     characters of the whole input (Tiny Shakespeare: 65)\n"
    "  --tokenizer gpt2   GPT-2's byte-level BPE (50,257 tokens)\n"
    "  --input FILE       the text, UTF-8\n"
    "  --out DIR          where to write; made if missing\n"
    "  --val-fraction X   the share of the characters kept for validation, in [0, 1)\n"
    "                     (default 0.1); the split is the same for both tokenizers\n"
    "  --gpt2-dir DIR     where GPT-2's encoder.json and vocab.bpe are (default\n"
    "                     $TG_DATA/gpt2, or ../shared/data/gpt2 when TG_DATA is unset)\n"
    "  --help\n"
    "\n"
    "Exit status: 0 on success, 1 for a bad input or tokenizer file, 2 for bad usage.\n";

static const char gpt2_url[] = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/";

typedef struct popts {
  const char *kind, *input, *out, *gpt2_dir;
  double val_fraction;
} popts;

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "tgrun prepare: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see tgrun prepare --help)\n");
  return 2;
}

static int fail(const char *msg) {
  fprintf(stderr, "tgrun prepare: error: %s\n", msg);
  return 1;
}

/* 1003854 -> "1,003,854" */
static const char *commas(size_t v, char buf[32]) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%zu", v), o = 0;
  for (int i = 0; i < n; i++) {
    if (i && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = tmp[i];
  }
  buf[o] = 0;
  return buf;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = tg_xmalloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* mkdir -p */
static bool make_dirs(const char *dir, char *why, size_t whylen) {
  char *p = strcpy(tg_xmalloc(strlen(dir) + 1), dir);
  bool ok = true;
  for (char *s = p + 1; ok; s++) {
    if (*s && *s != '/') continue;
    char c = *s;
    *s = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      ok = tg_why(why, whylen, "cannot make directory %s: %s", p, strerror(errno));
    *s = c;
    if (!c) break;
  }
  struct stat st;
  if (ok && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
    ok = tg_why(why, whylen, "%s exists and is not a directory", dir);
  free(p);
  return ok;
}

/* ---- tokenizer.json --------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = 2 * (b->n + n + 1);
    b->p = tg_xrealloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* s[0 .. n) as a JSON string; s is UTF-8, which JSON carries unescaped. */
static void put_json_string(sbuf *b, const char *s, size_t n) {
  put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char e[8];
    const char *rep = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                      : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
    if (rep) {
      puts_(b, rep);
    } else if (c < 0x20) {
      snprintf(e, sizeof e, "\\u%04x", c);
      puts_(b, e);
    } else {
      put(b, s + i, 1);
    }
  }
  put(b, "\"", 1);
}

/* The JSON text of tokenizer.json; for gpt2 the absolute paths of the two
 * files, so that the directory can be used from anywhere. */
static bool tokenizer_json(const tg_tokenizer *t, const char *enc, const char *bpe, sbuf *b,
                           char *why, size_t whylen) {
  char num[32];
  puts_(b, "{\n  \"kind\": ");
  const char *kind = tg_tok_kind_name(tg_tok_kind_of(t));
  put_json_string(b, kind, strlen(kind));
  snprintf(num, sizeof num, "%ld", (long)tg_tok_vocab_size(t));
  puts_(b, ",\n  \"vocab_size\": ");
  puts_(b, num);
  if (tg_tok_kind_of(t) == TG_TOK_CHAR) {
    puts_(b, ",\n  \"vocab\": [");
    for (int32_t i = 0; i < tg_tok_vocab_size(t); i++) {
      size_t n;
      const char *s = tg_tok_piece(t, i, &n);
      puts_(b, i == 0 ? "\n    " : i % 16 == 0 ? ",\n    " : ", ");
      put_json_string(b, s, n);
    }
    puts_(b, "\n  ]\n}\n");
    return true;
  }
  const char *paths[2] = {enc, bpe}, *keys[2] = {",\n  \"encoder\": ", ",\n  \"vocab_bpe\": "};
  for (int k = 0; k < 2; k++) {
    char *abs = realpath(paths[k], NULL);
    if (!abs) return tg_why(why, whylen, "cannot resolve %s: %s", paths[k], strerror(errno));
    size_t n = strlen(abs);
    bool utf8 = tg_utf8_check(abs, n) == n;
    if (utf8) {
      puts_(b, keys[k]);
      put_json_string(b, abs, n);
    }
    free(abs);
    if (!utf8) return tg_why(why, whylen, "%s: the path is not UTF-8, which JSON needs", paths[k]);
  }
  puts_(b, "\n}\n");
  return true;
}

/* Writes a small file atomically, as tg_tokens_write does. */
static bool write_atomic(const char *path, const char *data, size_t n, char *why, size_t whylen) {
  size_t tlen = strlen(path) + 32;
  char *tmp = tg_xmalloc(tlen);
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  bool ok = fd >= 0;
  if (!ok) tg_why(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
  for (size_t at = 0; ok && at < n;) {
    ssize_t k = write(fd, data + at, n - at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) ok = tg_why(why, whylen, "cannot write %s: %s", tmp, strerror(errno));
    else at += (size_t)k;
  }
  if (ok && fsync(fd) != 0) ok = tg_why(why, whylen, "cannot write %s: %s", tmp, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && ok)
    ok = tg_why(why, whylen, "cannot write %s: %s", tmp, strerror(errno));
  if (ok && rename(tmp, path) != 0)
    ok = tg_why(why, whylen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (!ok && fd >= 0) unlink(tmp);
  free(tmp);
  return ok;
}

static tg_tokenizer *load_json(const char *path, const char *text, size_t size, char *why,
                               size_t whylen) {
  tg_arena *a = tg_arena_new();
  tg_json_error err;
  const tg_json *root = tg_json_parse(a, text, size, NULL, &err);
  tg_tokenizer *t = NULL;
  const tg_json *kind = root ? tg_json_get(root, "kind") : NULL;
  const tg_json *vs = root ? tg_json_get(root, "vocab_size") : NULL;
  if (!root) {
    tg_why(why, whylen, "%s: byte %zu: %s", path, err.pos, err.msg);
  } else if (!kind || kind->kind != TG_JSON_STRING ||
             (strcmp(kind->u.s, "char") && strcmp(kind->u.s, "gpt2"))) {
    tg_why(why, whylen, "%s: expected \"kind\": \"char\" or \"gpt2\"", path);
  } else if (!vs || vs->kind != TG_JSON_INT || vs->u.i < 1 || vs->u.i > INT32_MAX) {
    tg_why(why, whylen, "%s: expected \"vocab_size\": a positive integer", path);
  } else if (!strcmp(kind->u.s, "char")) {
    const tg_json *v = tg_json_get(root, "vocab");
    if (!v || v->kind != TG_JSON_ARRAY || v->n != (size_t)vs->u.i) {
      tg_why(why, whylen, "%s: expected \"vocab\": an array of vocab_size (%ld) strings", path,
             (long)vs->u.i);
    } else {
      const char **syms = tg_xmalloc(v->n * sizeof *syms);
      size_t *lens = tg_xmalloc(v->n * sizeof *lens);
      bool strings = true;
      for (size_t i = 0; i < v->n; i++) {
        strings &= v->u.items[i].kind == TG_JSON_STRING;
        syms[i] = v->u.items[i].u.s;
        lens[i] = v->u.items[i].n;
      }
      if (strings) t = tg_tok_char_from_symbols(path, syms, lens, (int)v->n, why, whylen);
      else tg_why(why, whylen, "%s: \"vocab\" holds something other than strings", path);
      free(syms);
      free(lens);
    }
  } else {
    const tg_json *enc = tg_json_get(root, "encoder"), *bpe = tg_json_get(root, "vocab_bpe");
    if (!enc || enc->kind != TG_JSON_STRING || !bpe || bpe->kind != TG_JSON_STRING) {
      tg_why(why, whylen, "%s: expected \"encoder\" and \"vocab_bpe\": the paths of GPT-2's "
             "encoder.json and vocab.bpe", path);
    } else if ((t = tg_tok_gpt2_load(enc->u.s, bpe->u.s, why, whylen)) &&
               tg_tok_vocab_size(t) != vs->u.i) {
      tg_why(why, whylen, "%s: vocab_size is %ld but %s has %ld tokens", path, (long)vs->u.i,
             enc->u.s, (long)tg_tok_vocab_size(t));
      tg_tok_free(t);
      t = NULL;
    }
  }
  tg_arena_free(a);
  return t;
}

tg_tokenizer *tg_prepare_load_tokenizer(const char *dir, char *why, size_t whylen) {
  char *path = join(dir, "tokenizer.json"), *text;
  size_t size;
  tg_tokenizer *t = NULL;
  if (tg_read_whole_file(path, &text, &size, why, whylen)) {
    t = load_json(path, text, size, why, whylen);
    free(text);
  }
  free(path);
  return t;
}

/* ---- the command ------------------------------------------------------------ */

/* Fills o from argv; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, popts *o) {
  *o = (popts){.val_fraction = 0.1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 0;
    }
    const char **slot = !strcmp(a, "--tokenizer")  ? &o->kind
                        : !strcmp(a, "--input")    ? &o->input
                        : !strcmp(a, "--out")      ? &o->out
                        : !strcmp(a, "--gpt2-dir") ? &o->gpt2_dir
                                                   : NULL;
    bool fraction = !strcmp(a, "--val-fraction");
    if (!slot && !fraction) return usage_error("unknown option '%s'", a);
    if (i + 1 >= argc) return usage_error("%s needs a value", a);
    const char *v = argv[++i];
    if (slot) {
      *slot = v;
      continue;
    }
    char *end;
    errno = 0;
    o->val_fraction = strtod(v, &end);
    if (end == v || *end || errno || !(o->val_fraction >= 0 && o->val_fraction < 1))
      return usage_error("--val-fraction %s: expected a number in [0, 1), e.g. 0.1", v);
  }
  if (!o->kind) return usage_error("%s", "--tokenizer char|gpt2 is required");
  if (strcmp(o->kind, "char") && strcmp(o->kind, "gpt2"))
    return usage_error("--tokenizer %s: expected char or gpt2", o->kind);
  if (!o->input) return usage_error("%s", "--input FILE is required");
  if (!o->out) return usage_error("%s", "--out DIR is required");
  if (!*o->out) return usage_error("%s", "--out needs a directory name");
  return -1;
}

/* Everything after the arguments: exit status 0 or 1. */
static int prepare(const popts *o, char *why, size_t whylen) {
  char *text = NULL, *enc = NULL, *bpe = NULL, *gdir = NULL;
  int32_t *ids[2] = {NULL, NULL};
  size_t nids[2] = {0, 0};
  tg_tokenizer *t = NULL;
  sbuf js = {0};
  bool ok = false;
  size_t size;
  if (!tg_read_whole_file(o->input, &text, &size, why, whylen)) goto done;
  size_t bad = tg_utf8_check(text, size);
  if (bad < size) {
    tg_why(why, whylen, "%s: not UTF-8 text: byte offset %zu (0x%02X) does not start a valid "
           "UTF-8 character", o->input, bad, (unsigned char)text[bad]);
    goto done;
  }
  if (!size) {
    tg_why(why, whylen, "%s: the file is empty", o->input);
    goto done;
  }
  /* nanoGPT: n = len(data); train = data[:int(n*0.9)].  In double, 1 - 0.1
   * is the same number as 0.9, so the default matches it exactly. */
  size_t nchars = 0;
  for (size_t i = 0; i < size; i++) nchars += ((unsigned char)text[i] & 0xC0) != 0x80;
  size_t ktrain = (size_t)((double)nchars * (1.0 - o->val_fraction)), cut = 0;
  for (size_t seen = 0; cut < size; cut++) {
    if (((unsigned char)text[cut] & 0xC0) != 0x80 && seen++ == ktrain) break;
  }
  if (!strcmp(o->kind, "char")) {
    t = tg_tok_char_from_text(o->input, text, size, why, whylen);
    if (!t) goto done;
    if (tg_tok_vocab_size(t) > 65536) {
      tg_why(why, whylen, "%s: %ld distinct characters, more than the 65,536 ids a token file "
             "can hold", o->input, (long)tg_tok_vocab_size(t));
      goto done;
    }
  } else {
    const char *env = getenv("TG_DATA");
    gdir = o->gpt2_dir ? strcpy(tg_xmalloc(strlen(o->gpt2_dir) + 1), o->gpt2_dir)
           : env && *env ? join(env, "gpt2")
                         : strcpy(tg_xmalloc(sizeof "../shared/data/gpt2"), "../shared/data/gpt2");
    enc = join(gdir, "encoder.json");
    bpe = join(gdir, "vocab.bpe");
    t = tg_tok_gpt2_load(enc, bpe, why, whylen);
    if (!t) {
      size_t k = strlen(why);
      if (access(enc, R_OK) != 0 || access(bpe, R_OK) != 0)
        snprintf(why + k, whylen - k, " (point --gpt2-dir or TG_DATA at a directory holding "
                 "encoder.json and vocab.bpe from %s)", gpt2_url);
      goto done;
    }
  }
  const char *part[2] = {text, text + cut};
  size_t plen[2] = {cut, size - cut};
  for (int k = 0; k < 2; k++) {
    if (!tg_tok_encode(t, part[k], plen[k], &ids[k], &nids[k], why, whylen)) goto done;
    if (nids[k] > INT32_MAX) {
      tg_why(why, whylen, "%s: %zu tokens, more than a token file holds (%d)", o->input, nids[k],
             INT32_MAX);
      goto done;
    }
  }
  if (!tokenizer_json(t, enc, bpe, &js, why, whylen)) goto done;
  if (!make_dirs(o->out, why, whylen)) goto done;
  static const char *names[2] = {"train.bin", "val.bin"};
  char c1[32], c2[32];
  for (int k = 0; k < 2; k++) {
    char *path = join(o->out, names[k]);
    bool wrote = tg_tokens_write(path, ids[k], nids[k], why, whylen);
    if (wrote)
      printf("wrote %s: %s tokens, vocab %s (%s)\n", path, commas(nids[k], c1),
             commas((size_t)tg_tok_vocab_size(t), c2), o->kind);
    free(path);
    if (!wrote) goto done;
  }
  char *path = join(o->out, "tokenizer.json");
  ok = write_atomic(path, js.p, js.n, why, whylen);
  if (ok) printf("wrote %s: the %s tokenizer, vocab %s\n", path, o->kind,
                 commas((size_t)tg_tok_vocab_size(t), c2));
  free(path);
done:
  fflush(stdout);
  free(js.p);
  free(ids[0]);
  free(ids[1]);
  tg_tok_free(t);
  free(gdir);
  free(enc);
  free(bpe);
  free(text);
  return ok ? 0 : 1;
}

int tg_prepare_main(int argc, char **argv) {
  popts o;
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) return rc;
  char why[1024];
  why[0] = 0;
  rc = prepare(&o, why, sizeof why);
  if (rc) fail(why);
  return rc;
}
