/* render_cuda_runtime.c: the CUDA backend's own kernels (render_cuda.h), those
 * it needs besides the generated step: the gradient accumulation of the
 * bucket hooks, ZeRO's packing of shards for NCCL's reduce-scatter and
 * all-gather, and the cuBLASLt epilogues as kernels, for a matmul whose
 * epilogue cuBLASLt has no algorithm for (the backend then runs the plain
 * GEMM and these after it: cuda_backend.c, make_lt_call).  Written here, beside the step's renderer, so that they
 * are spelled the same way (the memory macros that let the emulated device
 * check every access, the emulator's kernel table) and run on both the GPU
 * and the emulated device. */
#include "flash_cuda.h"
#include "render_cuda.h"

/* ZeRO's staging kernels (render_cuda.h), one pair for each element width. */
static void render_shard_kernels(FILE *out) {
  fputs("// ZeRO's staging buffer (cuda_backend.c): a tensor t of numel elements is cut\n"
        "// into shards of s elements (base/shard.h: rank q holds [q s, q s + s)); the\n"
        "// buffer holds `block` elements a rank, rank after rank, and this tensor's part\n"
        "// of each rank's block starts at element `at` of it.  pack copies shards q0 ..\n"
        "// q0 + nq - 1 into their blocks, zeros past t's end; unpack copies every\n"
        "// rank's shard back to its place in t.  T: the elements' bits (4, 2 or 1 bytes:\n"
        "// nothing is computed, so one kernel serves every type of a size).\n"
        "template <typename T, typename P, typename Q>\n"
        "static __device__ void tg_shard_pack(P pack, Q t, long long numel, long long s, long long block, long long at,\n"
        "                                     long long q0, long long nq) {\n"
        "  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < nq * s;\n"
        "       e += (long long)gridDim.x * blockDim.x) {\n"
        "    const long long q = q0 + e / s, j = e % s;\n"
        "    T v = 0;\n"
        "    if (q * s + j < numel) {\n"
        "      const T x = t[q * s + j];\n"
        "      v = x;\n"
        "    }\n"
        "    pack[q * block + at + j] = v;\n"
        "  }\n"
        "}\n"
        "template <typename T, typename P, typename Q>\n"
        "static __device__ void tg_shard_unpack(P t, Q pack, long long numel, long long s, long long block, long long at) {\n"
        "  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < numel;\n"
        "       e += (long long)gridDim.x * blockDim.x) {\n"
        "    const T x = pack[e / s * block + at + e % s];\n"
        "    t[e] = x;\n"
        "  }\n"
        "}\n",
        out);
  static const struct {
    int bits;
    const char *type;
  } widths[] = {{32, "unsigned int"}, {16, "unsigned short"}, {8, "unsigned char"}};
  for (int w = 0; w < 3; w++) {
    int b = widths[w].bits;
    const char *T = widths[w].type;
    fprintf(out,
            "// tg kernel: tg_shard_pack_b%d\n"
            "extern \"C\" __global__ void tg_shard_pack_b%d(TG_ARG(%s) pack, TG_ARG(const %s) t, long long numel, long long s,\n"
            "                                            long long block, long long at, long long q0, long long nq) {\n"
            "  tg_shard_pack<%s>(pack, t, numel, s, block, at, q0, nq);\n"
            "}\n"
            "// tg kernel: tg_shard_unpack_b%d\n"
            "extern \"C\" __global__ void tg_shard_unpack_b%d(TG_ARG(%s) t, TG_ARG(const %s) pack, long long numel, long long s,\n"
            "                                              long long block, long long at) {\n"
            "  tg_shard_unpack<%s>(t, pack, numel, s, block, at);\n"
            "}\n",
            b, b, T, T, T, b, b, T, T, T);
  }
}

void tg_render_cuda_runtime(FILE *out) {
  fputs("// The CUDA backend's own kernels (codegen/cuda/render_cuda_runtime.c).\n", out);
  tg_cuda_emit_memory_macros(out);
  fputs("// tg kernel: tg_accumulate\n"
        "// The bucket hooks' gradient accumulation: acc = (first ? 0 : acc) + scale * g,\n"
        "// grid-stride, so that a fixed grid serves any size; and ZeRO's reduce-scatter\n"
        "// adds its averaged block into the shards with it.  The product is rounded\n"
        "// before the sum (no fused multiply-add), as the CPU backend rounds it: the\n"
        "// same bits on both (backend.h).\n"
        "extern \"C\" __global__ void tg_accumulate(TG_ARG(float) acc, TG_ARG(const float) g, float scale, int first,\n"
        "                                           long long n) {\n"
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
        "       i += (long long)gridDim.x * blockDim.x) {\n"
        "    const float x = g[i];\n"
        "    const float product = __fmul_rn(x, scale);\n"
        "    if (first) {\n"
        "      acc[i] = product;\n"
        "    } else {\n"
        "      const float a = acc[i];\n"
        "      acc[i] = __fadd_rn(a, product);\n"
        "    }\n"
        "  }\n"
        "}\n\n"
        "// The cuBLASLt epilogues (cublasLt.h's definitions) on a column-major D\n"
        "// of m x n (leading dimension ldd) that the plain GEMM wrote: mode 0 BIAS,\n"
        "// D += bias[row]; 1 GELU_AUX_BIAS, x = D + bias[row], aux = x, D = gelu(x);\n"
        "// 2 DGELU, D *= gelu'(aux).  In f32 from D's stored value, so a bf16 D is\n"
        "// rounded twice where cuBLASLt rounds once (a bf16 ulp here and there).\n"
        "// T is D's, the bias's and aux's type: float, or bf16 as its bits.\n"
        "static __device__ __forceinline__ float tg_lt_get(float v) { return v; }\n"
        "static __device__ __forceinline__ float tg_lt_get(unsigned short v) { return __uint_as_float((unsigned)v << 16); }\n"
        "static __device__ __forceinline__ void tg_lt_put(float &to, float v) { to = v; }\n"
        "static __device__ __forceinline__ void tg_lt_put(unsigned short &to, float v) {\n"
        "  const unsigned u = __float_as_uint(v); // round to nearest even, NaN kept\n"
        "  to = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)0x7fff : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
        "}\n"
        "template <typename T, typename P, typename Q>\n"
        "static __device__ void tg_lt_epilogue(P d, Q bias, P aux, long long m, long long n, long long ldd, long long ldaux,\n"
        "                                      int mode) {\n"
        "  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < m * n;\n"
        "       e += (long long)gridDim.x * blockDim.x) {\n"
        "    const long long row = e % m, col = e / m;\n"
        "    const T stored = d[col * ldd + row];\n"
        "    float x = tg_lt_get(stored);\n"
        "    if (mode <= 1) {\n"
        "      const T b = bias[row];\n"
        "      x += tg_lt_get(b);\n"
        "    }\n"
        "    if (mode == 1) {\n"
        "      T a;\n"
        "      tg_lt_put(a, x);\n"
        "      aux[col * ldaux + row] = a;\n"
        "      x = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));\n"
        "    } else if (mode == 2) {\n"
        "      const T a = aux[col * ldaux + row];\n"
        "      const float z = tg_lt_get(a);\n"
        "      const float t = tanhf(0.7978845608028654f * (z + 0.044715f * z * z * z));\n"
        "      x *= 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 0.134145f * z * z);\n"
        "    }\n"
        "    T out;\n"
        "    tg_lt_put(out, x);\n"
        "    d[col * ldd + row] = out;\n"
        "  }\n"
        "}\n"
        "// tg kernel: tg_lt_epilogue_f32\n"
        "extern \"C\" __global__ void tg_lt_epilogue_f32(TG_ARG(float) d, TG_ARG(const float) bias, TG_ARG(float) aux,\n"
        "                                                long long m, long long n, long long ldd, long long ldaux, int mode) {\n"
        "  tg_lt_epilogue<float>(d, bias, aux, m, n, ldd, ldaux, mode);\n"
        "}\n"
        "// tg kernel: tg_lt_epilogue_bf16\n"
        "extern \"C\" __global__ void tg_lt_epilogue_bf16(TG_ARG(unsigned short) d, TG_ARG(const unsigned short) bias,\n"
        "                                                 TG_ARG(unsigned short) aux, long long m, long long n, long long ldd,\n"
        "                                                 long long ldaux, int mode) {\n"
        "  tg_lt_epilogue<unsigned short>(d, bias, aux, m, n, ldd, ldaux, mode);\n"
        "}\n\n"
        "// BGRADA and BGRADB: out[i] = sum over p < k of x[i * si + p * sp] (op(A)'s\n"
        "// rows or op(B)'s columns, the strides saying which and how it is stored),\n"
        "// an f32 sum in order per output, rounded once to out's type (x's).\n"
        "template <typename T, typename P, typename Q>\n"
        "static __device__ void tg_lt_bgrad(Q x, P out, long long count, long long k, long long si, long long sp) {\n"
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count;\n"
        "       i += (long long)gridDim.x * blockDim.x) {\n"
        "    float sum = 0.0f;\n"
        "    for (long long p = 0; p < k; p++) {\n"
        "      const T v = x[i * si + p * sp];\n"
        "      sum += tg_lt_get(v);\n"
        "    }\n"
        "    T r;\n"
        "    tg_lt_put(r, sum);\n"
        "    out[i] = r;\n"
        "  }\n"
        "}\n"
        "// tg kernel: tg_lt_bgrad_f32\n"
        "extern \"C\" __global__ void tg_lt_bgrad_f32(TG_ARG(const float) x, TG_ARG(float) out, long long count,\n"
        "                                             long long k, long long si, long long sp) {\n"
        "  tg_lt_bgrad<float>(x, out, count, k, si, sp);\n"
        "}\n"
        "// tg kernel: tg_lt_bgrad_bf16\n"
        "extern \"C\" __global__ void tg_lt_bgrad_bf16(TG_ARG(const unsigned short) x, TG_ARG(unsigned short) out,\n"
        "                                              long long count, long long k, long long si, long long sp) {\n"
        "  tg_lt_bgrad<unsigned short>(x, out, count, k, si, sp);\n"
        "}\n\n",
        out);
  render_shard_kernels(out);
  fputs("\n"
        "#ifndef __CUDA_ARCH__\n"
        "// The kernels by name, for the emulated device (runtime/cuda/emu/cuda_emu.h).\n"
        "TG_EMU_KERNEL_TABLE(\n"
        "  TG_EMU_KERNEL(tg_accumulate) TG_EMU_KERNEL(tg_lt_epilogue_f32) TG_EMU_KERNEL(tg_lt_epilogue_bf16)\n"
        "  TG_EMU_KERNEL(tg_lt_bgrad_f32) TG_EMU_KERNEL(tg_lt_bgrad_bf16)\n"
        "  TG_EMU_KERNEL(tg_shard_pack_b32) TG_EMU_KERNEL(tg_shard_unpack_b32) TG_EMU_KERNEL(tg_shard_pack_b16)\n"
        "  TG_EMU_KERNEL(tg_shard_unpack_b16) TG_EMU_KERNEL(tg_shard_pack_b8) TG_EMU_KERNEL(tg_shard_unpack_b8)\n"
        ")\n"
        "#endif\n",
        out);
}
