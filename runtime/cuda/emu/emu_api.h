/* emu_api.h: the emulated CUDA device behind tg_cuda_api (cuda_api.h).
 *
 * tg_cuda_api_emulated(api) fills the table with a device that runs
 * everything on the host, checking as it goes (docs/cuda-emu.md):
 *
 *   device     "emulated device", compute capability 9.0, 132 SMs, 227 KiB
 *              of opt-in shared memory a block, 80 GiB of memory
 *   memory     host memory; cuMemAlloc returns a host address as the
 *              CUdeviceptr (256-byte aligned, filled with 0xff bytes, a NaN
 *              in f32 and bf16, so that reading what was never written
 *              shows); every allocation is tracked, and copies, sets,
 *              kernels and matmuls are checked against them
 *   compile    the .cu behind cuda_emu.h, built by the host C++ compiler
 *              into a cached shared object whose path is the image
 *   kernels    cuLaunchKernel runs the whole grid before it returns
 *              (emu_exec.h); a failed check returns
 *              CUDA_ERROR_ILLEGAL_ADDRESS (outside a buffer),
 *              CUDA_ERROR_MISALIGNED_ADDRESS or CUDA_ERROR_LAUNCH_FAILED
 *              (races, deadlocks), which, as on a GPU, every later call
 *              returns until the primary context is released and retained
 *              again; emu_last_error() tells the whole story
 *   streams    work runs when it is issued, in issue order, so a stream is
 *              always complete; events record the host's clock
 *   graphs     a capturing stream records launches, copies, sets, matmuls
 *              and event records (arguments by value, as the driver
 *              captures them); a launch of the instantiated graph replays
 *              them in order.  What capture forbids on a GPU (synchronous
 *              calls, cuMemAlloc, work on the legacy stream) fails with
 *              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the
 *              capture
 *   cuBLASLt   a reference GEMM (emu_blaslt.c) honouring the whole
 *              descriptor
 *   NCCL       over MPI (emu_nccl.c): each rank's emulated device is its
 *              own process, and an all-reduce averages host memory in
 *              stream order (recorded in a capture like any other work)
 *
 * Every call takes one lock, so calls from several host threads are safe
 * (and run one at a time, as one device would). */
#ifndef TG_EMU_API_H
#define TG_EMU_API_H

#include "cuda_api.h"

/* Fills api with the emulated device. */
void tg_cuda_api_emulated(tg_cuda_api *api);

#endif
