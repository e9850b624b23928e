/* render_c.h: the C target's entry points (render_c.c, manifest_c.c).
 *
 * The file is self-contained for a whole program (every kernel of a
 * training step, in order), each kernel headed by a comment listing the ops
 * it fuses and their .tg lines.  The output depends only on the program:
 * the same graph gives the same bytes. */
#ifndef TG_RENDER_C_H
#define TG_RENDER_C_H

#include <stdio.h>

#include "lower.h"

/* C11 for the CPU backend: OpenMP loops, tg_sgemm for the matmuls
 * (prelude.h: oneDNN's or OpenBLAS's), and the entry points of
 * step_abi.h: tg_step runs every kernel in order; leaves[i] points at leaf
 * p->leaves[i]'s elements; arena and scratch are p->arena_bytes and
 * p->scratch_bytes, 256-byte aligned. */
void tg_render_c(FILE *out, const tg_program *p);

/* The C's functions: each nest step calls one function of its shape
 * (canon.h), shared by the layers' copies of the step and by the steps of
 * one multi-tensor kernel; flash attention's are shared likewise.
 * tg_c_function_of names the function step s of kernel p->kernels[k]
 * calls (NULL for a matmul). */
typedef struct tg_c_functions tg_c_functions;
tg_c_functions *tg_c_functions_make(const tg_program *p);
const char *tg_c_function_of(const tg_c_functions *f, int k, int s);
/* ... and the arguments it calls it with: "b28, b25, b29" (buffers b<N>
 * are the kernel's arguments, numbers its sizes). */
const char *tg_c_call_of(const tg_c_functions *f, int k, int s);
int tg_c_function_count(const tg_c_functions *f);
void tg_c_functions_free(tg_c_functions *f);

/* The manifest (codegen/manifest.h) of the C file named file: every step
 * function with its loop sizes, the sgemm calls and the all-reduce
 * points, each kernel's arguments saying which value they are and where
 * it lives. */
void tg_render_c_manifest(FILE *out, const tg_program *p, const char *file);

/* codegen/c/prelude.h's text, embedded at build time (codegen/embedded.h):
 * what the file needs before its kernels. */
extern const char tg_c_prelude_text[];

#endif
