/* emu_api.c: the emulated device's table (emu_api.h): the driver's part
 * (emu_driver.c), cuBLASLt's (emu_blaslt.c) and NCCL's (emu_nccl.c). */
#include <string.h>

#include "emu_api.h"
#include "emu_internal.h"

void tg_cuda_api_emulated(tg_cuda_api *api) {
  memset(api, 0, sizeof *api);
  api->name = "emulated device";
  api->emulated = true;
  emu_driver_fill(api);
  emu_blaslt_fill(api);
  emu_nccl_fill(api);
}
