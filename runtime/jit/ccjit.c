/* ccjit.c: building C into cached shared objects (see ccjit.h).
 *
 * The compiler is started with posix_spawnp rather than system() or
 * popen(): no shell means no quoting rules for paths and flags, and the
 * exit status is the compiler's own.  Its stdout and stderr go to one pipe
 * and are read in full before waiting for it, so a chatty compiler cannot
 * block on a full pipe. */
#include "ccjit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "diag.h" /* tg_why */
#include "sbuf.h"

#if defined(__GNUC__)
#define TG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TG_PRINTF(f, a)
#endif

extern char **environ; /* POSIX defines it; glibc's unistd.h declares it only for _GNU_SOURCE */

/* ---- running the compiler ------------------------------------------------ */

/* Cap on captured output: a compiler that prints megabytes of errors has
 * said all that is useful in the first few hundred lines. */
enum { MAX_OUTPUT = 1 << 20 };

/* Runs argv[0] (found on PATH) with stdin from /dev/null and stdout and
 * stderr into *output; *status is the wait status.  False (with why) only
 * when it could not be started at all. */
static pthread_mutex_t spawn_lock = PTHREAD_MUTEX_INITIALIZER;

static bool run(char *const argv[], tg_sbuf *output, int *status, char *why, size_t whylen) {
  int fds[2];
  /* Threads may build at once (the CPU backend's graphs): no other thread
   * may spawn between pipe() and FD_CLOEXEC, or its child would hold this
   * pipe's write end and this read would wait for that child too. */
  pthread_mutex_lock(&spawn_lock);
  if (pipe(fds) != 0) {
    pthread_mutex_unlock(&spawn_lock);
    return tg_why(why, whylen, "cannot make a pipe: %s", strerror(errno));
  }
  /* Only the dup2'ed copies should reach the child; they lose FD_CLOEXEC. */
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  /* The compiler starts with no signal blocked: training blocks its stop
   * signals on the threads that run kernels (runtime/train/stop_signals.h),
   * and a compiler that inherited that would outlive an interrupted run. */
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  pthread_mutex_unlock(&spawn_lock);
  if (rc != 0) {
    close(fds[0]);
    return tg_why(why, whylen, "cannot run the C compiler '%s': %s%s", argv[0], strerror(rc),
                getenv("CC") ? " (it comes from $CC)" : "; install one or set CC");
  }
  char buf[4096];
  for (;;) {
    ssize_t r = read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (output->n < MAX_OUTPUT) tg_sb_put(output, buf, (size_t)r);
  }
  close(fds[0]);
  while (waitpid(pid, status, 0) < 0)
    if (errno != EINTR)
      return tg_why(why, whylen, "cannot wait for '%s': %s", argv[0], strerror(errno));
  return true;
}

static void describe_status(int status, char *buf, size_t n) {
  if (WIFEXITED(status)) snprintf(buf, n, "exit status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status)) snprintf(buf, n, "killed by signal %d", WTERMSIG(status));
  else snprintf(buf, n, "wait status %d", status);
}

/* $CC, or "cc" when it is unset or blank. */
static const char *compiler_name(void) {
  const char *cc = getenv("CC");
  return cc && cc[strspn(cc, " \t")] ? cc : "cc";
}

/* $CC split at blanks into a NULL-terminated argv with room for `extra`
 * more entries; the words live in *words.  Both are malloc'ed. */
static char **compiler_argv(int extra, char **words, int *nwords) {
  const char *cc = compiler_name();
  size_t len = strlen(cc);
  *words = malloc(len + 1);
  char **argv = malloc(sizeof *argv * (len / 2 + 2 + (size_t)extra));
  if (!*words || !argv) {
    free(*words), free(argv);
    *words = NULL;
    return NULL;
  }
  memcpy(*words, cc, len + 1);
  int n = 0;
  char *save = NULL;
  for (char *w = strtok_r(*words, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
    argv[n++] = w; /* at least one: compiler_name is never blank */
  argv[n] = NULL;
  *nwords = n;
  return argv;
}

/* ---- what the key depends on besides the source --------------------------- */

static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;

/* `CC --version`, run once per process for each $CC (tests change it). */
static bool compiler_version(const char *cc, char **version, char *why, size_t whylen) {
  static char *memo_cc, *memo_version;
  pthread_mutex_lock(&memo_lock);
  bool ok = true;
  if (!memo_cc || strcmp(memo_cc, cc)) {
    char *words;
    int n;
    char **argv = compiler_argv(1, &words, &n);
    tg_sbuf out = {0};
    int status = 0;
    if (!argv) ok = tg_why(why, whylen, "out of memory");
    else {
      argv[n] = "--version", argv[n + 1] = NULL;
      ok = run(argv, &out, &status, why, whylen);
    }
    if (ok && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      char st[64];
      describe_status(status, st, sizeof st);
      ok = tg_why(why, whylen, "the C compiler '%s' fails on --version (%s): %s", cc, st,
                tg_sb_text(&out));
    }
    if (ok) {
      free(memo_cc), free(memo_version);
      memo_cc = strdup(cc);
      memo_version = tg_sb_take(&out);
      if (!memo_cc || !memo_version) {
        free(memo_cc), free(memo_version);
        memo_cc = memo_version = NULL;
        ok = tg_why(why, whylen, "out of memory");
      }
    }
    tg_sb_free(&out);
    free(argv);
    free(words);
  }
  if (ok && !(*version = strdup(memo_version))) ok = tg_why(why, whylen, "out of memory");
  pthread_mutex_unlock(&memo_lock);
  return ok;
}

/* The lines of the first processor in /proc/cpuinfo that say which
 * instructions -march=native may use: "model name" and "flags" on x86,
 * "CPU implementer/architecture/variant/part" and "Features" on ARM.
 * Empty where there is no /proc (the key then depends on the rest only). */
static char *cpu_identity(void) {
  static const char *const keys[] = {"model name", "flags", "Features", "CPU implementer",
                                     "CPU architecture", "CPU variant", "CPU part"};
  tg_sbuf id = {0};
  FILE *f = fopen("/proc/cpuinfo", "r");
  char *line = NULL;
  size_t cap = 0;
  while (f && getline(&line, &cap, f) > 0 && line[0] != '\n') {
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
      size_t n = strlen(keys[i]);
      if (!strncmp(line, keys[i], n) && (line[n] == ' ' || line[n] == '\t' || line[n] == ':'))
        tg_sb_puts(&id, line);
    }
  }
  free(line);
  if (f) fclose(f);
  return tg_sb_take(&id);
}

static bool cpu_memo(char **out) {
  static char *memo;
  pthread_mutex_lock(&memo_lock);
  if (!memo) memo = cpu_identity();
  *out = memo ? strdup(memo) : NULL;
  pthread_mutex_unlock(&memo_lock);
  return *out != NULL;
}

/* ---- building ------------------------------------------------------------ */

void tg_so_free(tg_so *so) {
  if (!so) return;
  free(so->path);
  free(so->log);
  *so = (tg_so){0};
}

static void hash_list(tg_sha256 *s, const char *const *v, int n) {
  char count[32];
  snprintf(count, sizeof count, "%d", n);
  tg_sha256_field(s, count);
  for (int i = 0; i < n; i++) tg_sha256_field(s, v[i]);
}

/* A hit needs both the object and its log (the log is written first),
 * and the object must match its seal (size and SHA-256, cache.h): a
 * damaged one is built again, never loaded. */
static bool lookup(const char *key, tg_so *out, char *why, size_t whylen) {
  char path[4096];
  if (!tg_cache_path(key, ".so", path, sizeof path, why, whylen)) return false;
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return true;
  void *log, *so;
  size_t n;
  bool found;
  if (!tg_cache_get_sealed(key, ".so", &so, &n, &found, NULL, 0, why, whylen)) return false;
  free(so);
  if (!found) return true;
  if (!tg_cache_get(key, ".log", &log, &n, &found, why, whylen)) return false;
  if (!found) return true;
  if (!(out->path = strdup(path))) {
    free(log);
    return tg_why(why, whylen, "out of memory");
  }
  out->log = log;
  out->from_cache = true;
  return true;
}

/* Compiles the saved source into a temporary file, then installs it. */
static bool compile(const char *key, const char *const *flags, int nflags,
                    const char *const *libs, int nlibs, tg_so *out, char *why, size_t whylen) {
  char srcpath[4096], tmp[4096], sopath[4096];
  if (!tg_cache_path(key, ".c", srcpath, sizeof srcpath, why, whylen) ||
      !tg_cache_path(key, ".so", sopath, sizeof sopath, why, whylen) ||
      !tg_cache_tmp(key, ".so", tmp, sizeof tmp, why, whylen))
    return false;
  char *words;
  int n;
  char **argv = compiler_argv(nflags + nlibs + 5, &words, &n);
  if (!argv) {
    unlink(tmp);
    return tg_why(why, whylen, "out of memory");
  }
  argv[n++] = "-fPIC", argv[n++] = "-shared";
  for (int i = 0; i < nflags; i++) argv[n++] = (char *)flags[i];
  argv[n++] = "-o", argv[n++] = tmp, argv[n++] = srcpath;
  for (int i = 0; i < nlibs; i++) argv[n++] = (char *)libs[i];
  argv[n] = NULL;

  tg_sbuf output = {0};
  int status = 0;
  bool ok = run(argv, &output, &status, why, whylen);
  if (ok && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    char st[64];
    describe_status(status, st, sizeof st);
    tg_sbuf cmd = {0};
    for (int i = 0; argv[i]; i++) tg_sb_puts(&cmd, i ? " " : ""), tg_sb_puts(&cmd, argv[i]);
    ok = tg_why(why, whylen,
              "the C compiler failed (%s) on %s (the generated source, kept there):\n"
              "%s%scommand: %s",
              st, srcpath, tg_sb_text(&output),
              output.n && output.s[output.n - 1] != '\n' ? "\n" : "", tg_sb_text(&cmd));
    tg_sb_free(&cmd);
  }
  free(argv);
  free(words);
  if (!ok) {
    unlink(tmp);
    tg_sb_free(&output);
    return false;
  }
  ok = tg_cache_put(key, ".log", tg_sb_text(&output), output.n, why, whylen) &&
       tg_cache_install(tmp, key, ".so", why, whylen) && tg_cache_seal(key, ".so", why, whylen);
  if (!ok) {
    unlink(tmp);
    tg_sb_free(&output);
    return false;
  }
  out->path = strdup(sopath);
  out->log = tg_sb_take(&output);
  if (!out->path || !out->log) {
    tg_so_free(out);
    return tg_why(why, whylen, "out of memory");
  }
  return true;
}

bool tg_ccjit_build(const char *src, const char *const *flags, int nflags,
                    const char *const *libs, int nlibs, tg_so *out, char *why, size_t whylen) {
  *out = (tg_so){0};
  if (!src) return tg_why(why, whylen, "no C source to compile");
  if (nflags < 0 || nlibs < 0 || (nflags && !flags) || (nlibs && !libs))
    return tg_why(why, whylen, "bad flag list for the C compiler");
  for (int i = 0; i < nflags; i++)
    if (!flags[i]) return tg_why(why, whylen, "bad flag list for the C compiler");
  for (int i = 0; i < nlibs; i++)
    if (!libs[i]) return tg_why(why, whylen, "bad library list for the C compiler");

  const char *cc = compiler_name();
  char *version = NULL, *cpu = NULL;
  if (!compiler_version(cc, &version, why, whylen)) return false;
  if (!cpu_memo(&cpu)) {
    free(version);
    return tg_why(why, whylen, "out of memory");
  }
  tg_sha256 s;
  char key[TG_SHA256_HEX];
  tg_sha256_init(&s);
  tg_sha256_field(&s, "tg ccjit so 1");
  tg_sha256_field(&s, cc);
  tg_sha256_field(&s, version);
  tg_sha256_field(&s, cpu);
  hash_list(&s, flags, nflags);
  hash_list(&s, libs, nlibs);
  tg_sha256_field(&s, src);
  tg_sha256_final(&s, NULL, key);
  free(version);
  free(cpu);

  if (!lookup(key, out, why, whylen)) return false;
  if (out->from_cache) return true;
  /* Saved before compiling, so that it is there to read when the compiler
   * fails or crashes. */
  if (!tg_cache_put(key, ".c", src, strlen(src), why, whylen)) return false;
  return compile(key, flags, nflags, libs, nlibs, out, why, whylen);
}
