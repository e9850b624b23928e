/* device_code.h: the CUDA target's hand-written device code, embedded at
 * build time from the .cuh files beside it (codegen/embedded.h says how). */
#ifndef TG_DEVICE_CODE_H
#define TG_DEVICE_CODE_H

#include "embedded.h"

extern const char tg_cuda_memory_text[];  /* memory.cuh: TG_ARG, TG_PTR, TG_SHARED, ... */
extern const char tg_cuda_ptx_text[];     /* ptx.cuh: each PTX instruction with the emulator's twin */
extern const char tg_cuda_prelude_text[]; /* prelude.cuh: conversions, reductions, table search */

#endif
