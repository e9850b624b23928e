/* prepare.c: text to token files for training (prepare.h); the command
 * line is tools/tgrun_prepare.c.
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

#include "corpus.h"
#include "json.h"
#include "json_text.h"
#include "tokens_file.h"
#include "alloc.h"
#include "diag.h" /* tg_why */
#include "file.h"
#include "utf8.h"

static const char gpt2_url[] = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/";

const char *tg_prepare_commas(uint64_t v, char buf[32]) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), o = 0;
  for (int i = 0; i < n; i++) {
    if (i && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = tmp[i];
  }
  buf[o] = 0;
  return buf;
}

/* ---- tokenizer.json --------------------------------------------------------- */

/* The JSON text of tokenizer.json; for gpt2 the absolute paths of the two
 * files, so that the directory can be used from anywhere. */
static bool tokenizer_json(const tg_tokenizer *t, const char *enc, const char *bpe, tg_sbuf *b,
                           char *why, size_t whylen) {
  char num[32];
  tg_sb_puts(b, "{\n  \"kind\": ");
  const char *kind = tg_tok_kind_name(tg_tok_kind_of(t));
  tg_json_quote(b, kind, strlen(kind));
  snprintf(num, sizeof num, "%ld", (long)tg_tok_vocab_size(t));
  tg_sb_puts(b, ",\n  \"vocab_size\": ");
  tg_sb_puts(b, num);
  if (tg_tok_kind_of(t) == TG_TOK_CHAR) {
    tg_sb_puts(b, ",\n  \"vocab\": [");
    for (int32_t i = 0; i < tg_tok_vocab_size(t); i++) {
      size_t n;
      const char *s = tg_tok_piece(t, i, &n);
      tg_sb_puts(b, i == 0 ? "\n    " : i % 16 == 0 ? ",\n    " : ", ");
      tg_json_quote(b, s, n);
    }
    tg_sb_puts(b, "\n  ]\n}\n");
    return true;
  }
  const char *paths[2] = {enc, bpe}, *keys[2] = {",\n  \"encoder\": ", ",\n  \"vocab_bpe\": "};
  for (int k = 0; k < 2; k++) {
    char *abs = realpath(paths[k], NULL);
    if (!abs) return tg_why(why, whylen, "cannot resolve %s: %s", paths[k], strerror(errno));
    size_t n = strlen(abs);
    bool utf8 = tg_utf8_check(abs, n) == n;
    if (utf8) {
      tg_sb_puts(b, keys[k]);
      tg_json_quote(b, abs, n);
    }
    free(abs);
    if (!utf8) return tg_why(why, whylen, "%s: the path is not UTF-8, which JSON needs", paths[k]);
  }
  tg_sb_puts(b, "\n}\n");
  return true;
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

/* llm.c's dev/data scripts write shards and no tokenizer.json; their
 * version-1 files hold GPT-2 tokens, so such a directory is read with
 * GPT-2's tokenizer from the usual place. */
static bool llmc_shards_only(const char *dir, const char *json_path) {
  if (access(json_path, F_OK) == 0) return false;
  char ignored[256];
  char **paths = tg_corpus_paths(dir, "train", "", ignored, sizeof ignored);
  bool shards = paths && paths[0] && strstr(paths[0], "_train_");
  tg_corpus_free_paths(paths);
  return shards;
}

tg_tokenizer *tg_prepare_load_tokenizer(const char *dir, char *why, size_t whylen) {
  char *path = tg_path_join(dir, "tokenizer.json"), *text;
  size_t size;
  tg_tokenizer *t = NULL;
  if (llmc_shards_only(dir, path)) {
    char *enc, *bpe;
    t = tg_prepare_gpt2(NULL, &enc, &bpe, why, whylen);
    free(enc);
    free(bpe);
  } else if (tg_read_whole_file(path, &text, &size, why, whylen)) {
    t = load_json(path, text, size, why, whylen);
    free(text);
  }
  free(path);
  return t;
}

tg_tokenizer *tg_prepare_gpt2(const char *gpt2_dir, char **enc, char **bpe, char *why, size_t whylen) {
  const char *env = getenv("TG_DATA");
  char *gdir = gpt2_dir ? strcpy(tg_xmalloc(strlen(gpt2_dir) + 1), gpt2_dir)
               : env && *env ? tg_path_join(env, "gpt2")
                             : strcpy(tg_xmalloc(sizeof "../shared/data/gpt2"), "../shared/data/gpt2");
  *enc = tg_path_join(gdir, "encoder.json");
  *bpe = tg_path_join(gdir, "vocab.bpe");
  free(gdir);
  tg_tokenizer *t = tg_tok_gpt2_load(*enc, *bpe, why, whylen);
  if (!t) {
    size_t k = strlen(why);
    if (access(*enc, R_OK) != 0 || access(*bpe, R_OK) != 0)
      snprintf(why + k, whylen - k, " (point --gpt2-dir or TG_DATA at a directory holding "
               "encoder.json and vocab.bpe from %s)", gpt2_url);
  }
  return t;
}

bool tg_prepare_write_tokenizer(const char *dir, const tg_tokenizer *t, const char *enc, const char *bpe, char *why,
                                size_t whylen) {
  tg_sbuf js = {0};
  bool ok = tokenizer_json(t, enc, bpe, &js, why, whylen) && tg_make_dirs(dir, why, whylen);
  char *path = tg_path_join(dir, "tokenizer.json");
  if (ok) ok = tg_write_file_atomic(path, tg_sb_text(&js), js.n, why, whylen);
  char c[32];
  if (ok)
    printf("wrote %s: the %s tokenizer, vocab %s\n", path, tg_tok_kind_name(tg_tok_kind_of(t)),
           tg_prepare_commas((uint64_t)tg_tok_vocab_size(t), c));
  free(path);
  tg_sb_free(&js);
  return ok;
}

/* ---- the command ------------------------------------------------------------ */

bool tg_prepare(const tg_prepare_opts *o, char *why, size_t whylen) {
  char *text = NULL, *enc = NULL, *bpe = NULL;
  int32_t *ids[2] = {NULL, NULL};
  size_t nids[2] = {0, 0};
  tg_tokenizer *t = NULL;
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
  if (!strcmp(o->tokenizer, "char")) {
    t = tg_tok_char_from_text(o->input, text, size, why, whylen);
    if (!t) goto done;
    if (tg_tok_vocab_size(t) > 65536) {
      tg_why(why, whylen, "%s: %ld distinct characters, more than the 65,536 ids a token file "
             "can hold", o->input, (long)tg_tok_vocab_size(t));
      goto done;
    }
  } else {
    t = tg_prepare_gpt2(o->gpt2_dir, &enc, &bpe, why, whylen);
    if (!t) goto done;
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
  if (!tg_make_dirs(o->out, why, whylen)) goto done;
  static const char *names[2] = {"train.bin", "val.bin"};
  char c1[32], c2[32];
  for (int k = 0; k < 2; k++) {
    char *path = tg_path_join(o->out, names[k]);
    bool wrote = tg_tokens_write(path, ids[k], nids[k], why, whylen);
    if (wrote)
      printf("wrote %s: %s tokens, vocab %s (%s)\n", path, tg_prepare_commas(nids[k], c1),
             tg_prepare_commas((size_t)tg_tok_vocab_size(t), c2), o->tokenizer);
    free(path);
    if (!wrote) goto done;
  }
  ok = tg_prepare_write_tokenizer(o->out, t, enc, bpe, why, whylen);
done:
  fflush(stdout);
  free(ids[0]);
  free(ids[1]);
  tg_tok_free(t);
  free(enc);
  free(bpe);
  free(text);
  return ok;
}
