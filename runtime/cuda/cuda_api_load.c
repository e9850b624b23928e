/* cuda_api_load.c: the real CUDA driver, cuBLASLt and NCCL, loaded with
 * dlopen into the table of cuda_api.h; NVRTC compiles.
 *
 * The driver's symbols are looked up under the names its header maps the
 * calls to (cuMemAlloc is cuMemAlloc_v2 since CUDA 3.2, and so on), so
 * the table calls what a program compiled against cuda.h would call. */
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "dynlib.h"
#include "nvrtc.h"

static bool nvrtc_compile(const char *src, const char *src_name, const char *arch, void **image, size_t *size,
                          bool *from_cache, char *why, size_t whylen) {
  tg_cubin c = {0};
  if (!tg_nvrtc_compile(src, src_name, arch, NULL, 0, &c, why, whylen)) return false;
  *image = c.data;
  *size = c.size;
  *from_cache = c.from_cache;
  free(c.log);
  return true;
}

#define FN(lib, field, sym) ok = ok && tg_dynlib_fn(lib, sym, &api->field, &tried)

static bool load_driver(tg_cuda_api *api, tg_sbuf *why) {
  static const char *const names[] = {"libcuda.so.1"};
  tg_sbuf tried = {0};
  void *lib = tg_dynlib_open(names, 1, false, &tried);
  bool ok = lib != NULL;
  FN(lib, cuInit, "cuInit");
  FN(lib, cuDriverGetVersion, "cuDriverGetVersion");
  FN(lib, cuGetErrorName, "cuGetErrorName");
  FN(lib, cuGetErrorString, "cuGetErrorString");
  FN(lib, cuDeviceGetCount, "cuDeviceGetCount");
  FN(lib, cuDeviceGet, "cuDeviceGet");
  FN(lib, cuDeviceGetName, "cuDeviceGetName");
  FN(lib, cuDeviceGetAttribute, "cuDeviceGetAttribute");
  FN(lib, cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  FN(lib, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  FN(lib, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  FN(lib, cuCtxSetCurrent, "cuCtxSetCurrent");
  FN(lib, cuCtxSynchronize, "cuCtxSynchronize");
  FN(lib, cuMemGetInfo, "cuMemGetInfo_v2");
  FN(lib, cuMemAlloc, "cuMemAlloc_v2");
  FN(lib, cuMemFree, "cuMemFree_v2");
  FN(lib, cuMemAllocHost, "cuMemAllocHost_v2");
  FN(lib, cuMemFreeHost, "cuMemFreeHost");
  FN(lib, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  FN(lib, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  FN(lib, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  FN(lib, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  FN(lib, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  FN(lib, cuMemsetD8Async, "cuMemsetD8Async");
  FN(lib, cuModuleLoadData, "cuModuleLoadData");
  FN(lib, cuModuleUnload, "cuModuleUnload");
  FN(lib, cuModuleGetFunction, "cuModuleGetFunction");
  FN(lib, cuFuncSetAttribute, "cuFuncSetAttribute");
  FN(lib, cuLaunchKernel, "cuLaunchKernel");
  FN(lib, cuStreamCreate, "cuStreamCreate");
  FN(lib, cuStreamDestroy, "cuStreamDestroy_v2");
  FN(lib, cuStreamSynchronize, "cuStreamSynchronize");
  FN(lib, cuStreamWaitEvent, "cuStreamWaitEvent");
  FN(lib, cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  FN(lib, cuStreamEndCapture, "cuStreamEndCapture");
  FN(lib, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  FN(lib, cuGraphLaunch, "cuGraphLaunch");
  FN(lib, cuGraphExecDestroy, "cuGraphExecDestroy");
  FN(lib, cuGraphDestroy, "cuGraphDestroy");
  FN(lib, cuEventCreate, "cuEventCreate");
  FN(lib, cuEventDestroy, "cuEventDestroy_v2");
  FN(lib, cuEventRecord, "cuEventRecord");
  FN(lib, cuEventRecordWithFlags, "cuEventRecordWithFlags");
  FN(lib, cuEventSynchronize, "cuEventSynchronize");
  FN(lib, cuEventElapsedTime, "cuEventElapsedTime");
  if (!ok) {
    tg_sb_printf(why, "the CUDA driver (tried %s; is there an NVIDIA GPU and its driver?)", tg_sb_text(&tried));
    if (lib) dlclose(lib);
  }
  tg_sb_free(&tried);
  return ok;
}

static bool load_cublaslt(tg_cuda_api *api, tg_sbuf *why) {
  static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
  tg_sbuf tried = {0};
  void *lib = tg_dynlib_open(names, 3, true, &tried);
  bool ok = lib != NULL;
  FN(lib, cublasLtCreate, "cublasLtCreate");
  FN(lib, cublasLtDestroy, "cublasLtDestroy");
  FN(lib, cublasLtGetStatusString, "cublasLtGetStatusString");
  FN(lib, cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate");
  FN(lib, cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy");
  FN(lib, cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  FN(lib, cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  FN(lib, cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  FN(lib, cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  FN(lib, cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  FN(lib, cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  FN(lib, cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  FN(lib, cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  FN(lib, cublasLtMatmul, "cublasLtMatmul");
  if (!ok) {
    tg_sb_printf(why, "%scuBLASLt (tried %s; install the CUDA toolkit's libcublasLt or set CUDA_HOME)",
                 why->n ? "; " : "", tg_sb_text(&tried));
    if (lib) dlclose(lib);
  }
  tg_sb_free(&tried);
  return ok;
}

/* Optional: one rank needs no NCCL; a run with several says so when it
 * finds the members NULL. */
static void load_nccl(tg_cuda_api *api) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so"};
  void *lib = tg_dynlib_open(names, 2, true, NULL);
  bool ok = lib != NULL;
  tg_sbuf tried = {0};
  FN(lib, ncclGetUniqueId, "ncclGetUniqueId");
  FN(lib, ncclCommInitRank, "ncclCommInitRank");
  FN(lib, ncclCommDestroy, "ncclCommDestroy");
  FN(lib, ncclCommAbort, "ncclCommAbort");
  FN(lib, ncclAllReduce, "ncclAllReduce");
  FN(lib, ncclReduceScatter, "ncclReduceScatter");
  FN(lib, ncclAllGather, "ncclAllGather");
  FN(lib, ncclGroupStart, "ncclGroupStart");
  FN(lib, ncclGroupEnd, "ncclGroupEnd");
  FN(lib, ncclGetErrorString, "ncclGetErrorString");
  tg_sb_free(&tried);
  if (!ok) {
    api->ncclGetUniqueId = NULL, api->ncclCommInitRank = NULL, api->ncclCommDestroy = NULL;
    api->ncclCommAbort = NULL, api->ncclAllReduce = NULL, api->ncclReduceScatter = NULL, api->ncclAllGather = NULL;
    api->ncclGroupStart = NULL;
    api->ncclGroupEnd = NULL, api->ncclGetErrorString = NULL;
    if (lib) dlclose(lib);
  }
}

#undef FN

bool tg_cuda_api_load(tg_cuda_api *api, char *why, size_t whylen) {
  memset(api, 0, sizeof *api);
  tg_sbuf missing = {0};
  bool ok = load_driver(api, &missing);
  ok = load_cublaslt(api, &missing) && ok;
  if (!ok) {
    tg_why(why, whylen, "cannot load %s", tg_sb_text(&missing));
    tg_sb_free(&missing);
    return false;
  }
  tg_sb_free(&missing);
  load_nccl(api);
  int v = 0;
  api->cuDriverGetVersion(&v);
  static char name[64];
  snprintf(name, sizeof name, "CUDA driver %d.%d", v / 1000, v % 1000 / 10);
  api->name = name;
  api->emulated = false;
  api->compile = nvrtc_compile;
  return true;
}
