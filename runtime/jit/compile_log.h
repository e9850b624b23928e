/* compile_log.h: a compiler's complaint about generated CUDA, led by the
 * kernels it is about (compile_log.c).
 *
 * The generated .cu marks each kernel with a line "// tg kernel: NAME", so
 * a line number in a compiler's log tells which kernel it is in.  NVRTC
 * (nvrtc.c) and the emulated device's host C++ compile
 * (runtime/cuda/emu/emu_compile.c) read their logs' line numbers each in
 * its own way and say the rest the same way, here. */
#ifndef TG_COMPILE_LOG_H
#define TG_COMPILE_LOG_H

#include <stdbool.h>
#include <stddef.h>

/* The name after the last "// tg kernel: NAME" marker at or before line
 * `line` of src (1-based), into buf; false when no marker precedes it. */
bool tg_kernel_at(const char *src, long line, char *buf, size_t buflen);

/* How a log names a line of the source: NVRTC's "NAME(LINE)", or the
 * host compiler's "NAME:LINE". */
typedef enum { TG_LINES_PAREN, TG_LINES_COLON } tg_line_style;

/* The message for a failed compile of src (called name), into why:
 *     WHO could not compile [kernel K | kernels K, L in ]NAMEAFTER:
 *     LOG
 *     NAME(LINE) is in kernel K          (one for each of lines[0 .. n))
 * without a final newline.  lines: the distinct source lines the log
 * points at, in its order.  The kernels come first so that a short why
 * buffer still names them. */
void tg_compile_error(const char *who, const char *src, const char *name, const char *after, const char *log,
                      const long *lines, int n, tg_line_style style, char *why, size_t whylen);

#endif
