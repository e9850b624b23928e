/* emu_compile.c: a generated .cu as a module of the emulated device.
 *
 * The source is cuda_emu.h's text (embedded at build time: emu_header.c),
 * a #line directive, then the .cu, compiled as C++17 by the host compiler
 * through the C JIT (runtime/jit/ccjit.h), which caches the shared object
 * under $TG_CACHE keyed by all of that text, the flags and the compiler.
 * The image handed back is the object's path; cuModuleLoadData dlopens it.
 *
 * -O1 -g: quick to build (GPT-2's whole step is some 37,000 lines) and
 * debuggable, fast enough to run.  -ffp-contract=fast (with -mfma on an
 * x86-64 host that has FMA, which the default x86-64 target lacks, so
 * nothing would be fused without it; and -fexpensive-optimizations, without
 * which GCC forms no FMA at -O1, a flag clang ignores with a warning): NVRTC compiles with --fmad=true by
 * default, fusing a * b + c into one rounding, and the emulated kernels
 * must round as the GPU's do.  The host compiler picks its own pairs to
 * fuse in an expression such as a * b + c * d, as ptxas does: results
 * agree with a GPU's to an f32 rounding here and there, not bit for bit.
 * A host without FMA keeps separate roundings (docs/cuda-emu.md).  The sanitizer build compiles modules
 * with AddressSanitizer and UBSan as well, so that the emulation code in
 * the header is checked too.
 *
 * A compile error names the kernels its lines are in, as NVRTC's do
 * (runtime/jit/nvrtc.c): the line numbers the compiler gives for the .cu are
 * its own (thanks to #line), and the kernel holding a line is the last
 * "// tg kernel: NAME" marker at or before it. */
#define _GNU_SOURCE /* strdup */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccjit.h"
#include "emu_internal.h"

/* The name after the last "// tg kernel: NAME" at or before line `line`
 * (1-based) of src, into buf; false if no marker comes before it. */
static bool kernel_at(const char *src, long line, char *buf, size_t buflen) {
  static const char marker[] = "// tg kernel:";
  bool found = false;
  long l = 1;
  for (const char *p = src; *p && l <= line; l++) {
    const char *end = strchr(p, '\n');
    if (!end) end = p + strlen(p);
    const char *q = p;
    while (*q == ' ' || *q == '\t') q++;
    if (!strncmp(q, marker, sizeof marker - 1)) {
      q += sizeof marker - 1;
      while (*q == ' ' || *q == '\t') q++;
      const char *e = end;
      while (e > q && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
      size_t n = (size_t)(e - q) < buflen - 1 ? (size_t)(e - q) : buflen - 1;
      memcpy(buf, q, n);
      buf[n] = 0;
      found = true;
    }
    p = *end ? end + 1 : end;
  }
  return found;
}

/* The distinct lines of the source that the compiler's messages point at
 * ("NAME:LINE:COL: ..." or "NAME:LINE: ..."), in order. */
static int message_lines(const char *log, const char *name, long *lines, int max) {
  size_t nl = strlen(name);
  int n = 0;
  for (const char *p = log; *p && n < max;) {
    const char *end = strchr(p, '\n');
    if (!end) end = p + strlen(p);
    const char *hit = p;
    /* the name may come after a directory */
    for (const char *q = p; q + nl < end; q++)
      if (!strncmp(q, name, nl) && q[nl] == ':' && (q == p || q[-1] == '/')) {
        hit = q;
        break;
      }
    if (!strncmp(hit, name, nl) && hit[nl] == ':') {
      char *after;
      long l = strtol(hit + nl + 1, &after, 10);
      if (after != hit + nl + 1 && *after == ':' && l > 0) {
        bool seen = false;
        for (int i = 0; i < n; i++) seen = seen || lines[i] == l;
        if (!seen) lines[n++] = l;
      }
    }
    p = *end ? end + 1 : end;
  }
  return n;
}

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    if (b->p && (size_t)m < b->cap - b->n) {
      b->n += (size_t)m;
      return;
    }
    size_t cap = (b->cap ? 2 * b->cap : 1024) + (size_t)m;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p, b->cap = cap;
  }
}

/* The compiler's complaint, led by the kernels it is about. */
static void compile_error(const char *src, const char *name, const char *log, char *why, size_t whylen) {
  enum { MAX_LINES = 64 };
  long lines[MAX_LINES];
  int n = message_lines(log, name, lines, MAX_LINES);
  char kernels[MAX_LINES][128];
  int nk = 0;
  for (int i = 0; i < n; i++) {
    char k[128];
    if (!kernel_at(src, lines[i], k, sizeof k)) continue;
    bool seen = false;
    for (int j = 0; j < nk; j++) seen = seen || !strcmp(kernels[j], k);
    if (!seen) memcpy(kernels[nk++], k, sizeof k);
  }
  sbuf b = {0};
  sb_add(&b, "the host C++ compiler could not compile ");
  for (int j = 0; j < nk; j++) sb_add(&b, "%s%s", j ? ", " : nk > 1 ? "kernels " : "kernel ", kernels[j]);
  sb_add(&b, "%s%s for the emulated device:\n%s", nk ? " in " : "", name, log);
  if (b.n && b.p[b.n - 1] != '\n') sb_add(&b, "\n");
  for (int i = 0; i < n; i++) {
    char k[128];
    if (kernel_at(src, lines[i], k, sizeof k)) sb_add(&b, "%s:%ld is in kernel %s\n", name, lines[i], k);
    else sb_add(&b, "%s:%ld is before the first kernel\n", name, lines[i]);
  }
  if (b.n) b.p[--b.n] = 0;
  snprintf(why, whylen, "%s", b.oom || !b.p ? "the host C++ compiler could not compile the module (and out of memory)" : b.p);
  free(b.p);
}

/* Whether the host can fuse multiply-adds, and the flag that lets the
 * compiler use the instruction: x86-64's baseline has no FMA (Haswell and
 * later do); aarch64 always has it. */
#if defined(__x86_64__) || defined(__i386__)
static const char HOST_FMA_FLAG[] = "-mfma";
static bool host_has_fma(void) { return __builtin_cpu_supports("fma"); }
#else
static const char HOST_FMA_FLAG[] = "";
static bool host_has_fma(void) { return true; }
#endif

bool emu_compile(const char *src, const char *src_name, const char *arch, void **image, size_t *size,
                 bool *from_cache, char *why, size_t whylen) {
  *image = NULL;
  *size = 0;
  if (from_cache) *from_cache = false;
  if (!src_name || !*src_name) src_name = "tg.cu";
  if (!src) {
    snprintf(why, whylen, "compile: no source");
    return false;
  }
  if (!arch || strncmp(arch, "sm_", 3)) {
    snprintf(why, whylen, "compile: bad GPU architecture '%s': want sm_XX, as in sm_90", arch ? arch : "(null)");
    return false;
  }
  for (const char *p = src_name; *p; p++)
    if (*p == '"' || *p == '\\' || *p == '\n') {
      snprintf(why, whylen, "compile: the source name '%s' has a character a #line directive cannot hold", src_name);
      return false;
    }
  sbuf full = {0};
  sb_add(&full, "#line 1 \"cuda_emu.h\"\n%s\n#line 1 \"%s\"\n%s\n", tg_cuda_emu_header, src_name, src);
  if (full.oom) {
    free(full.p);
    snprintf(why, whylen, "compile: out of memory");
    return false;
  }
  const char *flags[16] = {"-x", "c++", "-std=c++17", "-O1", "-g", "-fvisibility=hidden", "-fno-exceptions",
                           "-fno-rtti", "-fno-math-errno", "-ffp-contract=fast", "-fexpensive-optimizations"};
  int n_flags = 11;
  if (host_has_fma() && HOST_FMA_FLAG[0]) flags[n_flags++] = HOST_FMA_FLAG;
#ifdef TG_EMU_SANITIZE
  flags[n_flags++] = "-fsanitize=address,undefined";
  flags[n_flags++] = "-fno-omit-frame-pointer";
#endif
  static const char *const libs[] = {"-lstdc++", "-lm"};
  tg_so so = {0};
  char *log = malloc(65536);
  if (!log) {
    free(full.p);
    snprintf(why, whylen, "compile: out of memory");
    return false;
  }
  bool ok = tg_ccjit_build(full.p, flags, n_flags, libs, 2, &so, log, 65536);
  if (!ok) compile_error(src, src_name, log, why, whylen);
  free(log);
  free(full.p);
  if (!ok) return false;
  *image = strdup(so.path);
  if (!*image) {
    tg_so_free(&so);
    snprintf(why, whylen, "compile: out of memory");
    return false;
  }
  *size = strlen(so.path) + 1;
  if (from_cache) *from_cache = so.from_cache;
  tg_so_free(&so);
  return true;
}
