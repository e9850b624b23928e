/* program_dir.c: the models/ that come with the running program.
 *
 * The import search path's last directory, and where `model =
 * "models/gpt2.tg"` is found when a run starts elsewhere, used to be the
 * source tree's models/, its path compiled into the binaries: a copy of
 * the tree, or a user's own edited std.tg beside a model in a folder of
 * its own, then silently read the build tree's files.  Found from
 * /proc/self/exe instead. */
#define _GNU_SOURCE
#include "program_dir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char found[PATH_MAX];
static int looked;

const char *tg_program_models_dir(void) {
  if (looked) return found[0] ? found : NULL;
  looked = 1;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return NULL;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return NULL;
  *slash = 0;
  static const char *const rel[] = {"../models", "../share/tg/models"};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
    char dir[PATH_MAX], std[PATH_MAX + 16];
    if (snprintf(dir, sizeof dir, "%s/%s", exe, rel[i]) >= (int)sizeof dir) continue;
    if (snprintf(std, sizeof std, "%s/std.tg", dir) >= (int)sizeof std || access(std, R_OK) != 0) continue;
    if (realpath(dir, found)) return found;
  }
  found[0] = 0;
  return NULL;
}
