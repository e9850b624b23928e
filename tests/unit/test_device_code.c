/* test_device_code.c: the code generators' hand-written device code
 * (codegen/cuda/memory.cuh, ptx.cuh, prelude.cuh, codegen/gelu_kernel.h), as the
 * prelude every generated unit is compiled after (tg_cuda_print_prelude),
 * compiles with NVRTC for sm_80 and sm_90 with nothing to say, together
 * with a kernel that calls every PTX wrapper (so that each template and
 * asm is instantiated).  The host side (the emulated device, C++17 under
 * -Wall -Wextra -Werror) is tests/unit/device_code_check.cpp, built with
 * the project.  Flash attention's kernels (codegen/cuda/flash_*.cuh, as
 * tg_flash_emit_cuda fills them in for a shape) compile with NVRTC with
 * nothing to say and on the host for the emulated device under -Wall
 * -Wextra -Werror.  Also: nothing but ptx.cuh's text names the emulator's
 * namespace, and the flash kernels call the wrappers. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_kernels.h"
#include "device_code.h"
#include "flash_cuda.h"
#include "nvrtc.h"

static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_device_code_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  setenv("TG_CACHE", dir, 1);
}

static void teardown(void) { tu_remove_tree(dir); }

/* tests/unit/device_code_kernel.cuh, embedded at build time: a kernel
 * calling every wrapper. */
extern const char tg_device_code_kernel[];

static char *prelude_and_kernel(void) {
  char *src = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&src, &len);
  ck_assert_ptr_nonnull(f);
  tg_cuda_print_prelude(f);
  fputs(tg_device_code_kernel, f);
  fclose(f);
  return src;
}

/* Compiles src (malloc'ed; freed) for arch and wants a cubin and an empty log. */
static void compiles_silently(char *src, const char *name, const char *arch) {
  tg_cubin cubin = {0};
  char why[8192];
  ck_assert_msg(tg_nvrtc_compile(src, name, arch, NULL, 0, &cubin, why, sizeof why), "%s: %s", arch, why);
  ck_assert_msg(cubin.size > 0, "%s: an empty cubin", arch);
  ck_assert_msg(cubin.log[0] == '\0', "%s: NVRTC has something to say:\n%s", arch, cubin.log);
  tg_cubin_free(&cubin);
  free(src);
}

START_TEST(test_sm80) { compiles_silently(prelude_and_kernel(), "device_code.cu", "sm_80"); }
END_TEST

START_TEST(test_sm90) { compiles_silently(prelude_and_kernel(), "device_code.cu", "sm_90"); }
END_TEST

/* A shape with GPT-2's layout (bf16, rows 16-byte aligned: the cp.async
 * path) or f32 operands (staged through registers). */
static tg_flash_shape flash_shape(bool bf16) {
  tg_flash_shape s = {.nb = 2, .nh = 2, .T = 100, .D = 64, .scale = 0.125};
  tg_flash_operand *ops[] = {&s.q, &s.k, &s.v, &s.o, &s.dout, &s.dq, &s.dk, &s.dv};
  for (int i = 0; i < 8; i++) {
    ops[i]->bf16 = bf16;
    ops[i]->stride[0] = 2 * 100 * 64, ops[i]->stride[1] = 100 * 64, ops[i]->stride[2] = 64, ops[i]->stride[3] = 1;
  }
  s.lse.stride[0] = 2 * 100, s.lse.stride[1] = 100, s.lse.stride[2] = 1;
  return s;
}

/* Both shapes' forward and backward kernels in one file. */
static char *flash_source(void) {
  char *src = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&src, &len);
  ck_assert_ptr_nonnull(f);
  tg_flash_shape a = flash_shape(true), b = flash_shape(false);
  tg_flash_emit_cuda(f, "fa", &a, false);
  tg_flash_emit_cuda_kernels(f, "fb", &a, true);
  tg_flash_emit_cuda_kernels(f, "fc", &b, false);
  tg_flash_emit_cuda_kernels(f, "fd", &b, true);
  fclose(f);
  return src;
}

START_TEST(test_flash_sm80) { compiles_silently(flash_source(), "flash.cu", "sm_80"); }
END_TEST

START_TEST(test_flash_sm90) { compiles_silently(flash_source(), "flash.cu", "sm_90"); }
END_TEST

/* The host compiler for the emulated device, under the project's warnings
 * but two: #pragma unroll is the GPU compiler's, and every backward kernel
 * takes all nine operands (flash.h), whether it uses them or not. */
START_TEST(test_flash_host_werror) {
  char *src = flash_source();
  char path[128], cmd[1024];
  snprintf(path, sizeof path, "%s/flash.cu", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(src, f);
  fclose(f);
  snprintf(cmd, sizeof cmd,
           "cc -x c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Wno-unknown-pragmas -Wno-unused-parameter "
           "-include %s/runtime/cuda/emu/cuda_emu.h %s",
           TG_SOURCE_DIR, path);
  ck_assert_msg(system(cmd) == 0, "the flash kernels do not build cleanly for the emulated device: %s", cmd);
  free(src);
}
END_TEST

/* The emulator's namespace is spelled in ptx.cuh alone: the prelude's other
 * parts, and a flash attention unit, call the tg_ wrappers. */
START_TEST(test_only_ptx_names_the_emulator) {
  ck_assert_ptr_nonnull(strstr(tg_cuda_ptx_text, "tg_emu::"));
  ck_assert_ptr_null(strstr(tg_cuda_memory_text, "tg_emu"));
  ck_assert_ptr_null(strstr(tg_cuda_prelude_text, "tg_emu"));
  ck_assert_ptr_null(strstr(tg_gelu_text, "tg_emu"));
  tg_flash_shape s = flash_shape(true);
  for (int backward = 0; backward < 2; backward++) {
    char *src = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&src, &len);
    ck_assert_ptr_nonnull(f);
    tg_flash_emit_cuda_kernels(f, "fl", &s, backward);
    fclose(f);
    ck_assert_msg(!strstr(src, "tg_emu"), "the flash kernels name the emulator");
    ck_assert_msg(strstr(src, "tg_mma_bf16("), "the flash kernels do not call the mma wrapper");
    free(src);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("device_code");
  TCase *t = tcase_create("nvrtc");
  tcase_set_timeout(t, 300);
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_sm80);
  tcase_add_test(t, test_sm90);
  tcase_add_test(t, test_only_ptx_names_the_emulator);
  tcase_add_test(t, test_flash_sm80);
  tcase_add_test(t, test_flash_sm90);
  tcase_add_test(t, test_flash_host_werror);
  suite_add_tcase(s, t);
  return tu_run(s);
}
