/* replay_main.c: runs the fuzz target over stored inputs, without libFuzzer.
 *
 *     fuzz_frontend_replay [-v] DIR|FILE...
 *
 * Every regular file named, or found under a directory named (recursively,
 * skipping dot files), is passed to LLVMFuzzerTestOneInput once, in sorted
 * path order so that runs are reproducible.  Any compiler builds this, so
 * ctest replays tests/fuzz/corpus in every build, the sanitizer build
 * included: an input that once found a bug keeps guarding against it.
 * With -v each path is printed to stderr before it runs, which names the
 * culprit when a sanitizer stops the process.
 *
 * Exit status: 0 when every input ran; 1 when an argument cannot be read or
 * there are no inputs at all (an empty corpus would make the test vacuous). */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct paths {
  char **v;
  size_t n, cap;
} paths;

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) {
    fprintf(stderr, "replay: out of memory\n");
    exit(1);
  }
  return p;
}

static void push(paths *ps, const char *path) {
  if (ps->n == ps->cap) {
    ps->cap = ps->cap ? 2 * ps->cap : 64;
    ps->v = xrealloc(ps->v, ps->cap * sizeof *ps->v);
  }
  size_t len = strlen(path) + 1;
  ps->v[ps->n] = xrealloc(NULL, len);
  memcpy(ps->v[ps->n++], path, len);
}

/* Adds path (a file, or every file under a directory) to ps; false with a
 * message when it cannot be read. */
static bool collect(paths *ps, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: cannot read '%s': %s\n", path, strerror(errno));
    return false;
  }
  if (S_ISREG(st.st_mode)) {
    push(ps, path);
    return true;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "replay: '%s' is neither a file nor a directory\n", path);
    return false;
  }
  DIR *d = opendir(path);
  if (!d) {
    fprintf(stderr, "replay: cannot open directory '%s': %s\n", path, strerror(errno));
    return false;
  }
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue; /* ".", "..", and editor or VCS leftovers */
    size_t n = strlen(path) + strlen(e->d_name) + 2;
    char *sub = xrealloc(NULL, n);
    snprintf(sub, n, "%s/%s", path, e->d_name);
    ok = collect(ps, sub);
    free(sub);
  }
  closedir(d);
  return ok;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads a whole file into a malloc'ed buffer of exactly its size, so that
 * ASan catches a read one byte past the end as it would under libFuzzer. */
static uint8_t *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open '%s': %s\n", path, strerror(errno));
    return NULL;
  }
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? 2 * cap : 4096;
      buf = xrealloc(buf, cap);
    }
    size_t k = fread(buf + len, 1, cap - len, f);
    len += k;
    if (k == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "replay: cannot read '%s'\n", path);
    free(buf);
    return NULL;
  }
  uint8_t *exact = xrealloc(NULL, len);
  if (len) memcpy(exact, buf, len);
  free(buf);
  *size = len;
  return exact;
}

int main(int argc, char **argv) {
  paths ps = {0};
  bool verbose = false, ok = true;
  int nargs = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) {
      verbose = true;
      continue;
    }
    nargs++;
    ok = collect(&ps, argv[i]) && ok;
  }
  if (nargs == 0) {
    fprintf(stderr, "usage: %s [-v] DIR|FILE...\n", argv[0]);
    return 1;
  }
  if (ok && ps.n == 0) {
    fprintf(stderr, "replay: no inputs found\n");
    ok = false;
  }
  if (ps.n) qsort(ps.v, ps.n, sizeof *ps.v, by_name); /* ps.v is NULL when empty */
  size_t done = 0;
  for (size_t i = 0; ok && i < ps.n; i++) {
    size_t size;
    uint8_t *data = read_file(ps.v[i], &size);
    if (!data) {
      ok = false;
      break;
    }
    if (verbose) fprintf(stderr, "replay: %s\n", ps.v[i]);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    done++;
  }
  for (size_t i = 0; i < ps.n; i++) free(ps.v[i]);
  free(ps.v);
  if (!ok) return 1;
  printf("replayed %zu inputs\n", done);
  return 0;
}
