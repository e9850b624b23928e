/* emu_exec.h: running one kernel launch on the emulated device.
 *
 * The grid's blocks run one after another on the calling host thread (the
 * results are the same on every run: nothing depends on timing).  A
 * block's threads are fibers (emu_fiber.h) that run until they reach a
 * barrier or a warp collective, where the next runnable thread takes over;
 * a thread that finishes hands its fiber to the next thread not yet
 * started, so a block without barriers runs its threads one after another
 * on one stack.
 *
 * What stops a launch, with CUresult and message:
 *   700 ILLEGAL_ADDRESS     an access outside its buffer (cuda_emu.h)
 *   716 MISALIGNED_ADDRESS  an access not aligned to its size
 *   719 LAUNCH_FAILED       a shared-memory race or uninitialised read;
 *                           threads at different __syncthreads; a barrier
 *                           some threads never reach (they exited); lanes of
 *                           a warp at different collectives or masks, or a
 *                           collective naming a lane that exited; a deadlock
 *                           (every thread left waiting); too much static
 *                           shared memory (over 48 KiB: ptxas refuses it)
 *     1 INVALID_VALUE       static and dynamic shared memory over shared_limit
 *                           (the driver refuses such a launch)
 * The message names the kernel, the block and thread, what failed, and the
 * source line (from the call stack, through addr2line when it is there). */
#ifndef TG_EMU_EXEC_H
#define TG_EMU_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda_emu.h"

typedef struct tg_emu_launch {
  const tg_emu_module *module;
  const char *module_path;  /* the shared object, for source lines (may be NULL) */
  const tg_emu_kernel *kernel;
  const char *where;        /* what the kernel is for (emu_describe_launch), or NULL */
  unsigned grid[3], block[3];
  size_t dynamic_shared;    /* bytes */
  size_t shared_limit;      /* the most shared memory a block may have, static and dynamic */
  size_t *static_shared;    /* if not NULL: set to the static shared memory its blocks declared */
  void *const *args;        /* as cuLaunchKernel's */
  const tg_emu_region *regions; /* per parameter: its buffer (checked parameters) */
} tg_emu_launch;

/* Shared memory a kernel may declare statically (more needs the dynamic
 * kind and an opt-in, as on the GPU). */
enum { TG_EMU_STATIC_SHARED_LIMIT = 48 * 1024 };

/* Runs every block of L.  0 (CUDA_SUCCESS) or the CUresult of the failed
 * check, with the story in why. */
int tg_emu_run(const tg_emu_launch *L, char *why, size_t whylen);

/* The emulator's entry points for modules (tg_emu_module.attach). */
const tg_emu_rt *tg_emu_runtime(void);

/* Frees this host thread's fibers and buffers (they are otherwise kept
 * for the next launch). */
void tg_emu_exec_release_thread(void);

#endif
