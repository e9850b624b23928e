/* flash_c.h: flash attention as C (flash_c.c), for the CPU backend; what
 * it computes and the argument order are flash.h's. */
#ifndef TG_FLASH_C_H
#define TG_FLASH_C_H

#include <stdio.h>

#include "flash.h"

/* ---- C (CPU backend) ----------------------------------------------------
 * Each emits one C11 function `void fn(...)` with external linkage, for
 * `cc -O2 (or -O3) -fopenmp`.  It computes in f32, parallel with OpenMP
 * (`#pragma omp parallel for`), allocates nothing (its tiles are on the
 * stack, under 100 KiB a thread), and needs no header: it declares expf and
 * logf itself, which is compatible with <math.h> in the same file.  Link
 * with -lm.  Helpers it needs are emitted as static inline functions
 * named fn_*.  An unsupported shape emits an #error line with the reason. */
bool tg_flash_supported_c(const tg_flash_shape *s, char *why, size_t n);
void tg_flash_emit_c_fwd(FILE *out, const char *fn, const tg_flash_shape *s);
void tg_flash_emit_c_bwd(FILE *out, const char *fn, const tg_flash_shape *s);

#endif
