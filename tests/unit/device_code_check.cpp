// device_code_check.cpp: the CUDA target's hand-written device code
// (codegen/cuda/memory.cuh, ptx.cuh, prelude.cuh and codegen/gelu_kernel.h, in the
// order tg_cuda_print_prelude prints them) compiled on its own for the
// emulated device, as C++17 after runtime/cuda/emu/cuda_emu.h, under the
// project's warnings (-Wall -Wextra -Werror): the generated code is built
// at run time without -Werror, so this is where a warning in it shows.
// device_code_kernel.cuh calls every wrapper, so that each template is
// instantiated.  Built as an object, never run; test_device_code compiles
// the same files with NVRTC.
#include "cuda_emu.h"

#include "memory.cuh"
#include "ptx.cuh"
#include "prelude.cuh"
#define TG_GELU_FN __device__ __forceinline__
#include "gelu_kernel.h"
#undef TG_GELU_FN

#include "device_code_kernel.cuh"
