/* embedded.h: hand-written text that generated code holds, kept in files
 * of its own (so that it is read, and compiled on its own, as code) and
 * embedded at build time as NUL-terminated arrays (cmake/embed.cmake,
 * without each file's opening comment).  The targets declare their own
 * (codegen/c/render_c.h, codegen/cuda/device_code.h); this is the text
 * both print. */
#ifndef TG_EMBEDDED_H
#define TG_EMBEDDED_H

/* codegen/gelu_kernel.h: tg_gelu and tg_gelu_grad, after a definition of
 * TG_GELU_FN (the function qualifiers) and of tg_tanh. */
extern const char tg_gelu_text[];

#endif
