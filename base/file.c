/* file.c: reading a whole file (file.h). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "diag.h" /* tg_why */

char *tg_path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = tg_xmalloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

bool tg_read_whole_file(const char *path, char **buf, size_t *size, char *why, size_t whylen) {
  FILE *f = fopen(path, "rb");
  if (!f) return tg_why(why, whylen, "cannot open %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *p = tg_xmalloc(cap);
  for (;;) {
    if (n == cap) p = tg_xrealloc(p, cap *= 2);
    size_t got = fread(p + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  bool ok = !ferror(f);
  if (!ok) tg_why(why, whylen, "cannot read %s: %s", path, strerror(errno));
  fclose(f);
  if (!ok) {
    free(p);
    return false;
  }
  p = tg_xrealloc(p, n + 1);
  p[n] = 0;
  *buf = p;
  *size = n;
  return true;
}

void tg_sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

void tg_sync_parent_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    tg_sync_dir(".");
    return;
  }
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  char *dir = tg_xmalloc(n + 1);
  memcpy(dir, path, n);
  dir[n] = 0;
  tg_sync_dir(dir);
  free(dir);
}

bool tg_write_file_atomic(const char *path, const void *data, size_t n, char *why, size_t whylen) {
  if (!path || !*path) return tg_why(why, whylen, "no file name");
  size_t tlen = strlen(path) + 32;
  char *tmp = tg_xmalloc(tlen);
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  bool ok = fd >= 0;
  if (!ok) tg_why(why, whylen, "cannot create '%s': %s", tmp, strerror(errno));
  for (size_t at = 0; ok && at < n;) {
    ssize_t k = write(fd, (const char *)data + at, n - at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) ok = tg_why(why, whylen, "cannot write '%s': %s", tmp, k < 0 ? strerror(errno) : "no progress");
    else at += (size_t)k;
  }
  if (ok && fsync(fd) != 0) ok = tg_why(why, whylen, "cannot write '%s': %s", tmp, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && ok) ok = tg_why(why, whylen, "cannot write '%s': %s", tmp, strerror(errno));
  if (ok && rename(tmp, path) != 0)
    ok = tg_why(why, whylen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
  if (!ok && fd >= 0) unlink(tmp);
  if (ok) tg_sync_parent_dir(path);
  free(tmp);
  return ok;
}

bool tg_make_dirs(const char *dir, char *why, size_t whylen) {
  size_t n = strlen(dir);
  char *p = tg_xmalloc(n + 1);
  memcpy(p, dir, n + 1);
  bool ok = true;
  for (size_t i = 1; ok && i <= n; i++) {
    if (p[i] != '/' && p[i] != 0) continue;
    char c = p[i];
    p[i] = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) ok = tg_why(why, whylen, "cannot make directory '%s': %s", p, strerror(errno));
    p[i] = c;
  }
  free(p);
  struct stat st;
  if (ok && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
    ok = tg_why(why, whylen, "'%s' exists and is not a directory", dir);
  return ok;
}

int tg_lock_file(const char *path, bool *busy, char *why, size_t whylen) {
  *busy = false;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    tg_why(why, whylen, "cannot create %s: %s", path, strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char holder[256] = {0};
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    close(fd);
    if (n > 0 && holder[n - 1] == '\n') holder[n - 1] = 0;
    *busy = e == EWOULDBLOCK;
    if (*busy) tg_why(why, whylen, "%s", n > 0 ? holder : "no pid recorded");
    else tg_why(why, whylen, "cannot lock %s: %s", path, strerror(e));
    return -1;
  }
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  char text[320];
  int len = snprintf(text, sizeof text, "pid %ld on %s\n", (long)getpid(), host);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
    tg_why(why, whylen, "cannot write %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}
