/* render_cuda_runtime.c: the CUDA backend's own kernels (render_cuda.h), those
 * it needs besides the generated step: the gradient accumulation of the
 * bucket hooks.  Written here, beside the step's renderer, so that they
 * are spelled the same way (the memory macros that let the emulated device
 * check every access, the emulator's kernel table) and run on both the GPU
 * and the emulated device. */
#include "flash_cuda.h"
#include "render_cuda.h"

void tg_render_cuda_runtime(FILE *out) {
  fputs("// The CUDA backend's own kernels (codegen/cuda/render_cuda_runtime.c).\n", out);
  tg_cuda_emit_memory_macros(out);
  fputs("// tg kernel: tg_accumulate\n"
        "// The bucket hooks' gradient accumulation: acc = (first ? 0 : acc) + scale * g,\n"
        "// grid-stride, so that a fixed grid serves any size.\n"
        "extern \"C\" __global__ void tg_accumulate(TG_ARG(float) acc, TG_ARG(const float) g, float scale, int first,\n"
        "                                           long long n) {\n"
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
        "       i += (long long)gridDim.x * blockDim.x)\n"
        "    acc[i] = first ? g[i] * scale : acc[i] + g[i] * scale;\n"
        "}\n\n"
        "#ifndef __CUDA_ARCH__\n"
        "// The kernels by name, for the emulated device (runtime/cuda/emu/cuda_emu.h).\n"
        "TG_EMU_KERNEL_TABLE(\n"
        "  TG_EMU_KERNEL(tg_accumulate)\n"
        ")\n"
        "#endif\n",
        out);
}
