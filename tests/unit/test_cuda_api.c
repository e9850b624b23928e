/* test_cuda_api.c: tg's own declarations of the CUDA driver, cuBLASLt and
 * NCCL (runtime/cuda/cuda_api.h) against NVIDIA's headers, and the
 * loading of the real libraries.
 *
 * tg declares what it calls instead of including cuda.h, so that it
 * builds without the toolkit; a wrong value there would be a silent
 * disaster (a transposed matmul, a wrong data type).  So every constant
 * and the size of every struct tg passes by value is compared with the
 * toolkit's: a small program including cuda.h, cublasLt.h and nccl.h is
 * compiled with the system compiler and prints them.  Without the headers
 * the comparison is skipped, saying so.
 *
 * Loading: on a machine without a GPU driver, tg_cuda_api_load fails with
 * a message naming libcuda.so.1; with one, every member is filled. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_api.h"

typedef struct constant {
  const char *name;
  long long value;
} constant;

#define C(x) {#x, (long long)(x)}
static const constant ours[] = {
    C(CUDA_SUCCESS), C(CUDA_ERROR_INVALID_VALUE), C(CUDA_ERROR_OUT_OF_MEMORY), C(CUDA_ERROR_NOT_INITIALIZED),
    C(CUDA_ERROR_NO_DEVICE), C(CUDA_ERROR_INVALID_IMAGE), C(CUDA_ERROR_INVALID_HANDLE), C(CUDA_ERROR_NOT_FOUND),
    C(CUDA_ERROR_ILLEGAL_ADDRESS), C(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), C(CUDA_ERROR_ASSERT),
    C(CUDA_ERROR_LAUNCH_FAILED), C(CUDA_ERROR_NOT_SUPPORTED), C(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
    C(CUDA_ERROR_UNKNOWN), C(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), C(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
    C(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), C(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    C(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), C(CU_STREAM_NON_BLOCKING), C(CU_EVENT_DEFAULT),
    C(CU_EVENT_DISABLE_TIMING), C(CU_STREAM_CAPTURE_MODE_GLOBAL), C(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
    C(CU_STREAM_CAPTURE_MODE_RELAXED), C(CUBLAS_STATUS_SUCCESS), C(CUBLAS_STATUS_NOT_INITIALIZED),
    C(CUBLAS_STATUS_ALLOC_FAILED), C(CUBLAS_STATUS_INVALID_VALUE), C(CUBLAS_STATUS_ARCH_MISMATCH),
    C(CUBLAS_STATUS_EXECUTION_FAILED), C(CUBLAS_STATUS_INTERNAL_ERROR), C(CUBLAS_STATUS_NOT_SUPPORTED), C(CUDA_R_32F),
    C(CUDA_R_16F), C(CUDA_R_16BF), C(CUBLAS_COMPUTE_32F), C(CUBLAS_COMPUTE_32F_FAST_16BF),
    C(CUBLAS_COMPUTE_32F_FAST_TF32), C(CUBLAS_OP_N), C(CUBLAS_OP_T), C(CUBLASLT_ORDER_COL), C(CUBLASLT_ORDER_ROW),
    C(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE), C(CUBLASLT_MATMUL_DESC_SCALE_TYPE), C(CUBLASLT_MATMUL_DESC_POINTER_MODE),
    C(CUBLASLT_MATMUL_DESC_TRANSA), C(CUBLASLT_MATMUL_DESC_TRANSB), C(CUBLASLT_MATMUL_DESC_EPILOGUE),
    C(CUBLASLT_MATMUL_DESC_BIAS_POINTER), C(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE),
    C(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), C(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD),
    C(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE), C(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE),
    C(CUBLASLT_EPILOGUE_DEFAULT), C(CUBLASLT_EPILOGUE_BIAS), C(CUBLASLT_EPILOGUE_GELU), C(CUBLASLT_EPILOGUE_GELU_AUX),
    C(CUBLASLT_EPILOGUE_GELU_BIAS), C(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), C(CUBLASLT_EPILOGUE_DGELU),
    C(CUBLASLT_EPILOGUE_DGELU_BGRAD), C(CUBLASLT_EPILOGUE_BGRADA), C(CUBLASLT_EPILOGUE_BGRADB),
    C(CUBLASLT_MATRIX_LAYOUT_TYPE), C(CUBLASLT_MATRIX_LAYOUT_ORDER), C(CUBLASLT_MATRIX_LAYOUT_ROWS),
    C(CUBLASLT_MATRIX_LAYOUT_COLS), C(CUBLASLT_MATRIX_LAYOUT_LD), C(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT),
    C(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), C(CUBLASLT_MATMUL_PREF_SEARCH_MODE),
    C(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES), C(ncclSuccess), C(ncclInvalidArgument), C(ncclInvalidUsage), C(ncclInProgress), C(ncclFloat32), C(ncclBfloat16),
    C(ncclInt8), C(ncclUint8), C(ncclInt32), C(ncclUint32), C(ncclInt64), C(ncclUint64), C(ncclFloat16), C(ncclFloat64),
    C(ncclSum), C(ncclAvg),
    {"sizeof(cublasLtMatmulHeuristicResult_t)", (long long)sizeof(cublasLtMatmulHeuristicResult_t)},
    {"sizeof(cublasLtMatmulAlgo_t)", (long long)sizeof(cublasLtMatmulAlgo_t)},
    {"sizeof(ncclUniqueId)", (long long)sizeof(ncclUniqueId)},
    {"sizeof(CUdeviceptr)", (long long)sizeof(CUdeviceptr)},
};
#undef C
enum { N_OURS = sizeof ours / sizeof *ours };

static const char *toolkit(void) {
  static const char *const dirs[] = {"/usr/local/cuda/include"};
  const char *home = getenv("CUDA_HOME");
  static char buf[4096];
  if (home && *home) {
    snprintf(buf, sizeof buf, "%s/include", home);
    char h[4200];
    snprintf(h, sizeof h, "%s/cublasLt.h", buf);
    if (access(h, R_OK) == 0) return buf;
  }
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    char h[4200];
    snprintf(h, sizeof h, "%s/cublasLt.h", dirs[i]);
    if (access(h, R_OK) == 0) return dirs[i];
  }
  return NULL;
}

START_TEST(constants_are_nvidias) {
  const char *inc = toolkit();
  if (!inc) {
    printf("test_cuda_api: no CUDA toolkit headers (cublasLt.h): the comparison is skipped\n");
    return;
  }
  char dir[] = "/tmp/tg_cuda_api_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char src[256], exe[256], out[256], cmd[8192];
  snprintf(src, sizeof src, "%s/c.c", dir);
  snprintf(exe, sizeof exe, "%s/c", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  FILE *f = fopen(src, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "#include <stdio.h>\n#include <cuda.h>\n#include <cublasLt.h>\n#include <nccl.h>\nint main(void) {\n");
  for (int i = 0; i < N_OURS; i++) fprintf(f, "  printf(\"%%s %%lld\\n\", \"%s\", (long long)(%s));\n", ours[i].name, ours[i].name);
  fprintf(f, "  return 0;\n}\n");
  fclose(f);
  /* nccl.h may be beside the toolkit's headers or in /usr/local/include */
  snprintf(cmd, sizeof cmd, "cc -I%s -I/usr/local/include -o %s %s > %s/cc.log 2>&1 && %s > %s", inc, exe, src, dir, exe,
           out);
  int rc = system(cmd);
  if (rc != 0) {
    snprintf(cmd, sizeof cmd, "cat %s/cc.log", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_abort_msg("could not compile the program that prints NVIDIA's values (above)");
  }
  f = fopen(out, "r");
  ck_assert_ptr_nonnull(f);
  char name[256];
  long long v;
  int n = 0;
  while (fscanf(f, "%255s %lld", name, &v) == 2) {
    ck_assert_str_eq(name, ours[n].name);
    ck_assert_msg(v == ours[n].value, "%s is %lld in NVIDIA's headers, %lld in cuda_api.h", name, v, ours[n].value);
    n++;
  }
  fclose(f);
  ck_assert_int_eq(n, N_OURS);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(loading_says_what_is_missing) {
  tg_cuda_api api;
  char why[4096];
  if (tg_cuda_api_load(&api, why, sizeof why)) {
    /* a machine with a driver: every call tg makes is there */
    ck_assert(!api.emulated);
    ck_assert_ptr_nonnull(api.cuLaunchKernel);
    ck_assert_ptr_nonnull(api.cuGraphInstantiateWithFlags);
    ck_assert_ptr_nonnull(api.cublasLtMatmul);
    /* NCCL is optional; where it was found, ZeRO's collectives came with it */
    if (api.ncclAllReduce) {
      ck_assert_ptr_nonnull(api.ncclReduceScatter);
      ck_assert_ptr_nonnull(api.ncclAllGather);
    }
    ck_assert_ptr_nonnull(api.compile);
    printf("test_cuda_api: loaded %s\n", api.name);
  } else {
    ck_assert_msg(strstr(why, "libcuda.so.1") && strstr(why, "the CUDA driver"), "%s", why);
    printf("test_cuda_api: no driver here, as expected: %s\n", why);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_api");
  TCase *t = tcase_create("cuda_api");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, constants_are_nvidias);
  tcase_add_test(t, loading_says_what_is_missing);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run(suite()); }
