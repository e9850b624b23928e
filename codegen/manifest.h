/* manifest.h: what both targets' manifests share (manifest.c).
 *
 * A manifest is JSON describing what runs, in order: its head (format,
 * source, the generated file, arena and scratch sizes, the leaves), then
 * one entry per kernel (its arguments, then what it runs), then its tail.
 * What a kernel runs is the target's: launches and cuBLASLt calls for CUDA
 * (codegen/cuda/render_cuda.h), step functions and cblas_sgemm calls for C
 * (codegen/c/render_c.h); the rest is written here, so that the two
 * manifests spell values, arguments and all-reduces alike. */
#ifndef TG_MANIFEST_H
#define TG_MANIFEST_H

#include <stdbool.h>
#include <stdio.h>

#include "lower.h"

/* s as a JSON string, quoted and escaped. */
void tg_manifest_str(FILE *out, const char *s);

/* "read", "write" or "readwrite". */
const char *tg_manifest_access(bool read, bool written);

/* Everything before the first kernel; target names the generated file's
 * key ("cuda" or "c"). */
void tg_manifest_head(FILE *out, const tg_program *p, const char *target, const char *file);

/* A kernel's entry up to its list of what it runs, which the caller
 * writes and closes with "]}"; where (NULL: none) says where it runs. */
void tg_manifest_kernel_head(FILE *out, const tg_program *p, const tg_lkernel *lk, const char *where);

/* All-reduce bucket b of the graph's plan. */
void tg_manifest_allreduce(FILE *out, const tg_graph *g, int b);

/* An IR collective (lower.h: TG_STEP_COLLECTIVE): the op, its group and
 * the bytes each rank sends. */
void tg_manifest_collective(FILE *out, const tg_node *n);

/* Everything after the last kernel. */
void tg_manifest_tail(FILE *out);

#endif
