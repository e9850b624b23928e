/* tokens_file.c: reading and writing llm.c's token files (tokens_file.h).
 *
 * The reader maps the file rather than reading it, because token files of
 * real corpora run to gigabytes and training touches them a batch at a
 * time.  The header is 1024 bytes, so the ids after it are aligned for
 * uint16 reads straight from the mapping. */
#include "tokens_file.h"
#include "alloc.h"
#include "diag.h" /* tg_why */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static bool little_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

static void put_i32(unsigned char *p, int32_t v) {
  uint32_t u = (uint32_t)v;
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(u >> 8 * i);
}

static int32_t get_i32(const unsigned char *p) {
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  return (int32_t)u;
}

static bool write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

/* ids32 or ids16 (the other NULL) to path, atomically (tokens_file.h). */
static bool write_tokens(const char *path, const int32_t *ids32, const uint16_t *ids16, size_t n, char *why,
                         size_t whylen) {
  if (!path || !*path) return tg_why(why, whylen, "no file name for the tokens");
  if (n > INT32_MAX)
    return tg_why(why, whylen, "%s: %zu tokens are more than the format's %d", path, n,
                  INT32_MAX);
  for (size_t i = 0; ids32 && i < n; i++)
    if (ids32[i] < 0 || ids32[i] > UINT16_MAX)
      return tg_why(why, whylen, "%s: token %zu is %ld, which does not fit the format's uint16",
                    path, i, (long)ids32[i]);
  unsigned char header[TG_TOKENS_HEADER_BYTES] = {0};
  put_i32(header, TG_TOKENS_MAGIC);
  put_i32(header + 4, TG_TOKENS_VERSION);
  put_i32(header + 8, (int32_t)n);
  size_t tlen = strlen(path) + 32;
  char *tmp = tg_xmalloc(tlen);
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0) {
    tg_why(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
    free(tmp);
    return false;
  }
  bool ok = write_all(fd, header, sizeof header);
  enum { CHUNK = 1 << 15 };
  unsigned char *buf = tg_xmalloc(2 * CHUNK);
  for (size_t i = 0; ok && i < n; i += CHUNK) {
    size_t k = n - i < CHUNK ? n - i : CHUNK;
    for (size_t j = 0; j < k; j++) {
      uint32_t v = ids32 ? (uint32_t)ids32[i + j] : ids16[i + j];
      buf[2 * j] = (unsigned char)(v & 0xFF);
      buf[2 * j + 1] = (unsigned char)(v >> 8);
    }
    ok = write_all(fd, buf, 2 * k);
  }
  free(buf);
  if (ok) ok = fsync(fd) == 0;
  int saved = errno;
  if (close(fd) != 0 && ok) ok = false, saved = errno;
  if (!ok) {
    tg_why(why, whylen, "cannot write %s: %s", tmp, strerror(saved));
  } else if (rename(tmp, path) != 0) {
    tg_why(why, whylen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    ok = false;
  }
  if (!ok) unlink(tmp);
  else tg_sync_parent_dir(path);
  free(tmp);
  return ok;
}

bool tg_tokens_write(const char *path, const int32_t *ids, size_t n, char *why, size_t whylen) {
  return write_tokens(path, ids, NULL, n, why, whylen);
}

bool tg_tokens_write16(const char *path, const uint16_t *ids, size_t n, char *why, size_t whylen) {
  return write_tokens(path, NULL, ids, n, why, whylen);
}

/* Checks the mapped bytes; fills t's ids and n. */
static bool check(tg_tokens *t, int32_t vocab, char *why, size_t whylen) {
  const unsigned char *p = t->map;
  size_t size = t->map_size;
  const char *path = t->path;
  if (size < TG_TOKENS_HEADER_BYTES)
    return tg_why(why, whylen, "%s: truncated: %zu bytes, less than the %d-byte header of a "
                  "token file", path, size, TG_TOKENS_HEADER_BYTES);
  int32_t magic = get_i32(p), version = get_i32(p + 4), count = get_i32(p + 8);
  if (magic == 20240801)
    return tg_why(why, whylen, "%s: llm.c's Llama 3 token file (magic 20240801, uint32 tokens): "
                  "tg reads GPT-2 token files (magic %d)", path, TG_TOKENS_MAGIC);
  if (magic != TG_TOKENS_MAGIC)
    return tg_why(why, whylen, "%s: not a token file: bad magic %ld (expected %d)", path,
                  (long)magic, TG_TOKENS_MAGIC);
  if (version != TG_TOKENS_VERSION)
    return tg_why(why, whylen, "%s: unsupported version %ld (tg reads version %d: uint16 "
                  "tokens)", path, (long)version, TG_TOKENS_VERSION);
  if (count < 0)
    return tg_why(why, whylen, "%s: the header's token count is negative (%ld)", path,
                  (long)count);
  size_t want = TG_TOKENS_HEADER_BYTES + 2 * (size_t)count;
  if (size < want)
    return tg_why(why, whylen, "%s: truncated: the header says %ld tokens (%zu bytes) but the "
                  "file has %zu bytes", path, (long)count, want, size);
  if (size > want)
    return tg_why(why, whylen, "%s: %zu bytes after the %ld tokens the header counts (%zu "
                  "bytes expected): the count does not match the data", path, size - want,
                  (long)count, want);
  if (!little_endian())
    return tg_why(why, whylen, "%s: tg reads token files on little-endian machines only", path);
  t->ids = (const uint16_t *)(p + TG_TOKENS_HEADER_BYTES);
  t->n = (size_t)count;
  if (vocab > 0) {
    for (size_t i = 0; i < t->n; i++)
      if (t->ids[i] >= vocab)
        return tg_why(why, whylen, "%s: token %zu is %u, not below the vocabulary size %ld",
                      path, i, (unsigned)t->ids[i], (long)vocab);
  }
  return true;
}

tg_tokens *tg_tokens_open(const char *path, int32_t vocab, char *why, size_t whylen) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    tg_why(why, whylen, "cannot open %s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  const char *bad = fstat(fd, &st) != 0 ? strerror(errno)
                    : S_ISDIR(st.st_mode) ? "a directory, not a token file"
                    : !S_ISREG(st.st_mode) ? "not a regular file" : NULL;
  if (bad) {
    tg_why(why, whylen, "%s: %s", path, bad);
    close(fd);
    return NULL;
  }
  tg_tokens *t = tg_xmalloc(sizeof *t);
  memset(t, 0, sizeof *t);
  t->path = strcpy(tg_xmalloc(strlen(path) + 1), path);
  t->map_size = (size_t)st.st_size;
  if (t->map_size) { /* mmap refuses 0 bytes; check() reports the size */
    void *m = mmap(NULL, t->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      tg_why(why, whylen, "cannot map %s: %s", path, strerror(errno));
      close(fd);
      t->map_size = 0;
      tg_tokens_close(t);
      return NULL;
    }
    t->map = m;
  }
  close(fd); /* the mapping stays valid */
  if (!check(t, vocab, why, whylen)) {
    tg_tokens_close(t);
    return NULL;
  }
  return t;
}

void tg_tokens_close(tg_tokens *t) {
  if (!t) return;
  if (t->map) munmap(t->map, t->map_size);
  free(t->path);
  free(t);
}
