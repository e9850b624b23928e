/* device_code.h: the CUDA target's hand-written device code, embedded at
 * build time from the .cuh files beside it (codegen/embedded.h says how). */
#ifndef TG_DEVICE_CODE_H
#define TG_DEVICE_CODE_H

#include "embedded.h"

extern const char tg_cuda_memory_text[];  /* memory.cuh: TG_ARG, TG_PTR, TG_SHARED, ... */
extern const char tg_cuda_ptx_text[];     /* ptx.cuh: each PTX instruction with the emulator's twin */
extern const char tg_cuda_prelude_text[]; /* prelude.cuh: conversions, reductions, table search */

/* Flash attention's kernels, with $P for the call site's prefix. */
extern const char tg_flash_helpers_text[];   /* flash_helpers.cuh */
extern const char tg_flash_fwd_text[];       /* flash_fwd.cuh: the forward kernel's body */
extern const char tg_flash_bwd_dkdv_text[];  /* flash_bwd_dkdv.cuh */
extern const char tg_flash_bwd_dq_text[];    /* flash_bwd_dq.cuh */

#endif
