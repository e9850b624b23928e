/* corpus.c: the shards of a split (corpus.h).
 *
 * Shards are found with POSIX glob() and opened (mapped, checked) one by
 * one through tokens_file.c; nothing is read ahead, since the mapping
 * brings pages in as the loader touches them. */
#include "corpus.h"

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "diag.h"

static char *dup_str(const char *s) { return strcpy(tg_xmalloc(strlen(s) + 1), s); }

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The number just before ".bin" at the end of path, or -1 where there is none. */
static long long trailing_number(const char *path) {
  size_t n = strlen(path);
  if (n < 5 || strcmp(path + n - 4, ".bin")) return -1;
  size_t end = n - 4, start = end;
  while (start > 0 && isdigit((unsigned char)path[start - 1])) start--;
  if (start == end || end - start > 15) return -1;
  return strtoll(path + start, NULL, 10);
}

/* A shard missing between two numbered ones: llm.c's downloads number the
 * shards from 0 or 1 without gaps, so a gap is a file that did not arrive. */
static bool check_numbering(char **paths, size_t n, const char *what, char *why, size_t whylen) {
  for (size_t i = 0; i < n; i++)
    if (trailing_number(paths[i]) < 0) return true; /* not a numbered set: nothing to check */
  for (size_t i = 1; i < n; i++) {
    long long a = trailing_number(paths[i - 1]), b = trailing_number(paths[i]);
    if (b != a + 1)
      return tg_why(why, whylen, "%s: shard %lld is missing: %s is followed by %s (the shards' numbers "
                    "must run without a gap; name the ones to read with train_files / val_files)",
                    what, a + 1, paths[i - 1], paths[i]);
  }
  return true;
}

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char **tg_corpus_paths(const char *dir, const char *split, const char *pattern, char *why, size_t whylen) {
  char what[1024];
  glob_t g;
  memset(&g, 0, sizeof g);
  int rc;
  if (pattern && *pattern) {
    snprintf(what, sizeof what, "%s_files = %s", split, pattern);
    rc = glob(pattern, 0, NULL, &g);
  } else {
    size_t len = strlen(dir) + strlen(split) + 16;
    char *single = tg_xmalloc(len);
    snprintf(single, len, "%s/%s.bin", dir, split);
    if (is_file(single)) {
      char **one = tg_xcalloc(2, sizeof *one);
      one[0] = single;
      return one;
    }
    free(single);
    struct stat st;
    if (stat(dir, &st) != 0) {
      tg_why(why, whylen, "cannot open %s: %s", dir, strerror(errno));
      return NULL;
    }
    snprintf(what, sizeof what, "%s", dir);
    char pat[2][2048];
    snprintf(pat[0], sizeof pat[0], "%s/%s_*.bin", dir, split);
    snprintf(pat[1], sizeof pat[1], "%s/*_%s_*.bin", dir, split);
    rc = glob(pat[0], 0, NULL, &g);
    int rc2 = glob(pat[1], rc == 0 ? GLOB_APPEND : 0, NULL, &g);
    if (rc == GLOB_NOMATCH) rc = rc2;
  }
  if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
    globfree(&g);
    if (pattern && *pattern) tg_why(why, whylen, "%s: no file matches", what);
    else
      tg_why(why, whylen, "%s: no %s.bin and no shards %s_*.bin or *_%s_*.bin (make them with tgrun prepare, "
             "or name them with %s_files)", dir, split, split, split, split);
    return NULL;
  }
  if (rc != 0) {
    globfree(&g);
    tg_why(why, whylen, "%s: cannot list the files: %s", what, rc == GLOB_NOSPACE ? "out of memory" : "read error");
    return NULL;
  }
  char **paths = tg_xcalloc(g.gl_pathc + 1, sizeof *paths);
  size_t n = 0;
  for (size_t i = 0; i < g.gl_pathc; i++) paths[n++] = dup_str(g.gl_pathv[i]);
  globfree(&g);
  qsort(paths, n, sizeof *paths, by_name);
  size_t k = 0; /* the two default patterns can both match a name */
  for (size_t i = 0; i < n; i++) {
    if (k && !strcmp(paths[k - 1], paths[i])) free(paths[i]);
    else paths[k++] = paths[i];
  }
  paths[k] = NULL;
  if (!check_numbering(paths, k, what, why, whylen)) {
    tg_corpus_free_paths(paths);
    return NULL;
  }
  return paths;
}

void tg_corpus_free_paths(char **paths) {
  if (!paths) return;
  for (char **p = paths; *p; p++) free(*p);
  free(paths);
}

tg_corpus *tg_corpus_of(const char *name, tg_tokens **shards, int n_shards) {
  tg_corpus *c = tg_xcalloc(1, sizeof *c);
  c->name = dup_str(name);
  c->shards = tg_xcalloc((size_t)(n_shards ? n_shards : 1), sizeof *c->shards);
  c->n_shards = n_shards;
  for (int i = 0; i < n_shards; i++) {
    c->shards[i] = shards[i];
    c->n += shards[i]->n;
    if (shards[i]->n > c->largest) c->largest = shards[i]->n;
  }
  return c;
}

tg_corpus *tg_corpus_open(const char *dir, const char *split, const char *pattern, int32_t vocab, char *why,
                          size_t whylen) {
  char **paths = tg_corpus_paths(dir, split, pattern, why, whylen);
  if (!paths) return NULL;
  size_t n = 0;
  while (paths[n]) n++;
  if (n > (size_t)INT32_MAX / 2) {
    tg_corpus_free_paths(paths);
    tg_why(why, whylen, "%s: %zu shards: too many", dir, n);
    return NULL;
  }
  tg_tokens **shards = tg_xcalloc(n, sizeof *shards);
  bool ok = true;
  for (size_t i = 0; ok && i < n; i++) ok = (shards[i] = tg_tokens_open(paths[i], vocab, why, whylen)) != NULL;
  tg_corpus *c = NULL;
  if (ok) {
    char name[1024];
    if (pattern && *pattern) snprintf(name, sizeof name, "%s", pattern);
    else if (n == 1) snprintf(name, sizeof name, "%s", paths[0]);
    else snprintf(name, sizeof name, "%s (%zu %s shards)", dir, n, split);
    c = tg_corpus_of(name, shards, (int)n);
  } else {
    for (size_t i = 0; i < n; i++) tg_tokens_close(shards[i]);
  }
  free(shards);
  tg_corpus_free_paths(paths);
  return c;
}

void tg_corpus_close(tg_corpus *c) {
  if (!c) return;
  for (int i = 0; i < c->n_shards; i++) tg_tokens_close(c->shards[i]);
  free(c->shards);
  free(c->name);
  free(c);
}
