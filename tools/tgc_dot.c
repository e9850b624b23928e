/* tgc_dot.c: Graphviz's dot, run beside tgc for --report html's drawing
 * of the step (tgc_dot.h).
 *
 * dot lays out the step's drawing (a few dozen nodes) in a few
 * milliseconds, but starts in some 20 ms of CPU: it loads every plugin
 * its config lists, Pango, Cairo and fontconfig among them, to measure
 * text with this machine's fonts.  The page is read in a browser, with
 * fonts of its own, so those widths are no truer than the estimates of
 * Times' metrics built into Graphviz.  On the 2-core machines tgc is
 * measured on, the other core is not free: dot's start was a third of
 * what --report html cost over --emit cuda.
 *
 * So dot runs with a config of two plugins, core (the SVG writer) and
 * dot_layout, copied from Graphviz's own config with their library paths
 * made absolute into a directory of tgc's, which GVBINDIR names (how
 * Graphviz is told where its plugins and config are): about 5 ms.  Where
 * Graphviz's config is not found, or that dot fails, dot runs as
 * installed. */
#define _DEFAULT_SOURCE /* realpath, mkdtemp */
#include "tgc_dot.h"

#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc.h"
#include "file.h"

extern char **environ;

/* The config files Graphviz writes with `dot -c`: config6a (plugins of
 * ABI 6, Graphviz 2.30 to 7), config8 (Graphviz 8 on). */
static const char *const config_names[] = {"config6a", "config8", "config6"};

static bool config_in(const char *dir, char *config, size_t n) {
  for (size_t i = 0; i < sizeof config_names / sizeof *config_names; i++) {
    snprintf(config, n, "%s/%s", dir, config_names[i]);
    if (access(config, R_OK) == 0) return true;
  }
  return false;
}

/* Graphviz's config: in $GVBINDIR, else where dot's installation keeps
 * its plugins (PREFIX/lib/graphviz, PREFIX/lib64/graphviz or Debian's
 * PREFIX/lib/TRIPLET/graphviz, PREFIX being dot's, links followed). */
static bool find_config(char *config, size_t n) {
  const char *env = getenv("GVBINDIR");
  if (env && *env) return config_in(env, config, n);
  const char *path = getenv("PATH");
  char dot[PATH_MAX], real[PATH_MAX];
  for (const char *p = path ? path : ""; *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    snprintf(dot, sizeof dot, "%.*s/dot", (int)len, p);
    p += len + (end != NULL);
    if (access(dot, X_OK) != 0 || !realpath(dot, real)) continue;
    char *slash = strrchr(real, '/'); /* PREFIX/bin/dot: PREFIX */
    if (slash) *slash = 0;
    slash = strrchr(real, '/');
    if (slash) *slash = 0;
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/lib/graphviz", real);
    if (config_in(dir, config, n)) return true;
    snprintf(dir, sizeof dir, "%s/lib64/graphviz", real);
    if (config_in(dir, config, n)) return true;
    snprintf(dir, sizeof dir, "%s/lib/*/graphviz", real);
    glob_t g;
    bool found = false;
    if (glob(dir, 0, NULL, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc && !found; i++) found = config_in(g.gl_pathv[i], config, n);
    globfree(&g);
    return found; /* the first dot on PATH is the one that runs */
  }
  return false;
}

/* The blocks of text (its config's syntax: "LIBRARY NAME {" to the brace
 * that closes it) of the plugins core and dot_layout, LIBRARY made
 * absolute (relative to dir), to out.  Whether both were there. */
static bool write_two_plugins(FILE *out, const char *text, const char *dir) {
  int depth = 0, kept = 0;
  bool keep = false;
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
    if (depth == 0 && line[0] != '#' && line[0] != '\n') {
      char lib[1024], name[64];
      keep = sscanf(line, "%1023s %63s {", lib, name) == 2 &&
             (!strcmp(name, "core") || !strcmp(name, "dot_layout"));
      if (keep) {
        fprintf(out, "%s%s%s %s {\n", lib[0] == '/' ? "" : dir, lib[0] == '/' ? "" : "/", lib, name);
        kept++;
      }
    } else if (keep) {
      fwrite(line, 1, len, out);
    }
    for (size_t i = 0; i < len; i++) depth += line[i] == '{' ? 1 : line[i] == '}' ? -1 : 0;
    line += len;
  }
  return kept == 2;
}

static void remove_config(tgc_dot *d) {
  if (!d->config_dir[0]) return;
  for (size_t i = 0; i < sizeof config_names / sizeof *config_names; i++) {
    char path[sizeof d->config_dir + 16];
    snprintf(path, sizeof path, "%s/%s", d->config_dir, config_names[i]);
    remove(path);
  }
  rmdir(d->config_dir);
  d->config_dir[0] = 0;
}

/* The two plugins' config in a fresh directory, named in d->config_dir;
 * false (and "") where it cannot be made. */
static bool make_config(tgc_dot *d) {
  d->config_dir[0] = 0;
  char config[PATH_MAX + 64], why[256], *text;
  size_t n;
  if (!find_config(config, sizeof config) || !tg_read_whole_file(config, &text, &n, why, sizeof why)) return false;
  char *name = strrchr(config, '/');
  *name++ = 0; /* config: the directory, name: the file's */
  const char *tmp = getenv("TMPDIR");
  char made[sizeof d->config_dir];
  snprintf(made, sizeof made, "%s/tgc-dot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(made)) {
    free(text);
    return false;
  }
  snprintf(d->config_dir, sizeof d->config_dir, "%s", made);
  char mine[sizeof d->config_dir + 16];
  snprintf(mine, sizeof mine, "%s/%s", d->config_dir, name);
  FILE *f = fopen(mine, "w");
  bool ok = f && write_two_plugins(f, text, config);
  if (f) ok = fclose(f) == 0 && ok;
  free(text);
  if (!ok) remove_config(d);
  return ok;
}

/* dot with the environment, and GVBINDIR set to config_dir unless "". */
static bool spawn(tgc_dot *d, const char *config_dir) {
  int n = 0;
  while (environ[n]) n++;
  char **env = tg_xcalloc((size_t)n + 2, sizeof *env), gvbindir[sizeof d->config_dir + 16];
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!*config_dir || strncmp(environ[i], "GVBINDIR=", 9)) env[k++] = environ[i];
  if (*config_dir) {
    snprintf(gvbindir, sizeof gvbindir, "GVBINDIR=%s", config_dir);
    env[k++] = gvbindir;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, d->svg_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  char *argv[] = {"dot", "-Tsvg", d->dot_path, NULL};
  d->running = posix_spawnp(&d->pid, "dot", &fa, NULL, argv, env) == 0;
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  return d->running;
}

void tgc_dot_start(tgc_dot *d, const char *dot_path, const char *svg_path) {
  snprintf(d->dot_path, sizeof d->dot_path, "%s", dot_path);
  snprintf(d->svg_path, sizeof d->svg_path, "%s", svg_path);
  d->running = false;
  make_config(d);
  spawn(d, d->config_dir);
}

static bool waited(tgc_dot *d) {
  int status = -1;
  bool done = waitpid(d->pid, &status, 0) == d->pid;
  d->running = false;
  return done && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool tgc_dot_finish(tgc_dot *d) {
  if (!d->running) {
    remove_config(d);
    return false;
  }
  bool ok = waited(d);
  if (!ok && d->config_dir[0]) /* the slim config failed: dot as installed */
    ok = spawn(d, "") && waited(d);
  remove_config(d);
  return ok;
}
