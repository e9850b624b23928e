/* emu_compile.c: a generated .cu as a module of the emulated device.
 *
 * The source is cuda_emu.h's text (embedded at build time by cmake/embed.cmake),
 * a #line directive, then the .cu, compiled as C++17 by the host compiler
 * through the C JIT (runtime/jit/ccjit.h), which caches the shared object
 * under $TG_CACHE keyed by all of that text, the flags and the compiler.
 * The image handed back is the object's path; cuModuleLoadData dlopens it.
 *
 * -O1 -g: quick to build (GPT-2's whole step is some 37,000 lines) and
 * debuggable, fast enough to run.  The sanitizer build compiles modules
 * with AddressSanitizer and UBSan as well, so that the emulation code in
 * the header is checked too.
 *
 * -ffp-contract=fast, -mfma on an x86-64 host that has FMA (the default
 * x86-64 target lacks it, so nothing would be fused without) and
 * -fexpensive-optimizations (without which GCC forms no FMA at -O1; clang
 * ignores it with a warning): NVRTC compiles with --fmad=true by default,
 * fusing a * b + c into one rounding, and the emulated kernels must round
 * as the GPU's do.  The host compiler picks its own pairs to fuse in an
 * expression such as a * b + c * d, as ptxas does: results agree with a
 * GPU's to an f32 rounding here and there, not bit for bit.  A host
 * without FMA keeps separate roundings (docs/cuda-emu.md).
 *
 * The kernels' __launch_bounds__, which the header defines away, are read
 * from the source into a table appended to it (TG_EMU_LAUNCH_BOUNDS,
 * emu_internal.h), so that the driver refuses a block over the bound.
 *
 * A compile error names the kernels its lines are in, as NVRTC's do (both
 * through runtime/jit/compile_log.c): the line numbers the compiler gives
 * for the .cu are its own (thanks to #line), and the kernel holding a line
 * is the last "// tg kernel: NAME" marker at or before it. */
#define _GNU_SOURCE /* strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "ccjit.h"
#include "compile_log.h"
#include "emu_internal.h"
#include "sbuf.h"

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

/* The compiler's complaint, led by the kernels it is about (compile_log.h). */
static void compile_error(const char *src, const char *name, const char *log, char *why, size_t whylen) {
  enum { MAX_LINES = 64 };
  long lines[MAX_LINES];
  int n = message_lines(log, name, lines, MAX_LINES);
  tg_compile_error("the host C++ compiler", src, name, " for the emulated device", log, lines, n, TG_LINES_COLON, why,
                   whylen);
}

static bool ident_char(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

/* The table of launch bounds (TG_EMU_LAUNCH_BOUNDS) for the source's
 * kernels, "__launch_bounds__(N[, ...]) NAME(": C++ to append to it.  A
 * bound that is not a number literal is left out (not enforced). */
static void launch_bounds_table(const char *src, tg_sbuf *out) {
  static const char key[] = "__launch_bounds__(";
  tg_sb_printf(out, "\n#line 1 \"the launch bounds (emu_compile.c)\"\nextern \"C\" {\n"
              "struct tg_emu_launch_bound_ { const char *name; int max_threads; };\n"
              "__attribute__((visibility(\"default\"))) extern const tg_emu_launch_bound_ " TG_EMU_LAUNCH_BOUNDS "[];\n"
              "const tg_emu_launch_bound_ " TG_EMU_LAUNCH_BOUNDS "[] = {\n");
  for (const char *p = strstr(src, key); p; p = strstr(p + 1, key)) {
    char *end;
    long n = strtol(p + sizeof key - 1, &end, 10);
    if (end == p + sizeof key - 1 || n <= 0) continue;
    const char *q = strchr(end, ')');
    if (!q) break;
    q++;
    while (*q == ' ' || *q == '\t' || *q == '\n') q++;
    const char *name = q;
    while (ident_char(*q)) q++;
    const char *after = q;
    while (*after == ' ' || *after == '\t') after++;
    if (q > name && *after == '(') tg_sb_printf(out, "  {\"%.*s\", %ld},\n", (int)(q - name), name, n);
  }
  tg_sb_printf(out, "  {nullptr, 0}};\n}\n");
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
  tg_sbuf full = {0};
  tg_sb_printf(&full, "#line 1 \"cuda_emu.h\"\n%s\n#line 1 \"%s\"\n%s\n", tg_cuda_emu_header, src_name, src);
  launch_bounds_table(src, &full);
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
  char *log = tg_xmalloc(65536);
  bool ok = tg_ccjit_build(full.s, flags, n_flags, libs, 2, &so, log, 65536);
  if (!ok) compile_error(src, src_name, log, why, whylen);
  free(log);
  tg_sb_free(&full);
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
