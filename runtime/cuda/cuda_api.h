/* cuda_api.h: the CUDA driver, cuBLASLt and NCCL calls the CUDA backend
 * makes, as one table of function pointers, and the two things that fill
 * it: the real libraries (cuda_api_load.c, dlopen'ed, never linked, so
 * that tgrun starts where there is no driver) and the emulated device
 * (emu/, host memory and host threads, so that CI runs every kernel).
 * Above this table the backend is the same code for both.
 *
 * The declarations are tg's own, not the toolkit headers': the build
 * needs no CUDA toolkit.  Names, values and signatures are NVIDIA's
 * (cuda.h, cublasLt.h, nccl.h of CUDA 12/13; tests/unit/test_cuda_api.c
 * checks every value against the toolkit's headers when they are present),
 * so the table reads like the documentation.  Only what tg calls is here.
 *
 * One more member, compile, turns the generated .cu into what
 * cuModuleLoadData takes: CUBIN from NVRTC on a real device, the path of
 * a shared object built by the host C++ compiler on the emulated one. */
#ifndef TG_CUDA_API_H
#define TG_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- driver API (cuda.h) ---------------------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_ASSERT = 710,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_UNKNOWN = 999,
};

typedef enum CUdevice_attribute {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
} CUdevice_attribute;

typedef enum CUfunction_attribute {
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
} CUfunction_attribute;

enum { CU_STREAM_NON_BLOCKING = 1 };
enum { CU_EVENT_DEFAULT = 0, CU_EVENT_DISABLE_TIMING = 2 };
/* cuEventRecordWithFlags: in a capture, an event-record node (a plain record
 * there only marks a dependency, and the event is never recorded by the
 * graph); invalid outside capture. */
enum { CU_EVENT_RECORD_DEFAULT = 0, CU_EVENT_RECORD_EXTERNAL = 1 };
typedef enum CUstreamCaptureMode {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
} CUstreamCaptureMode;

/* ---- cuBLASLt (cublasLt.h, cublas_api.h, library_types.h) ------------------- */

typedef int cublasStatus_t;
enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct { uint64_t data[8]; } cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct { uint64_t data[32]; } cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum cublasComputeType_t {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;
typedef enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum cublasLtOrder_t { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 } cublasLtOrder_t;
typedef enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0, /* int32 cublasComputeType_t */
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,   /* int32 cudaDataType of alpha, beta */
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,       /* int32 cublasOperation_t */
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,     /* uint32 cublasLtEpilogue_t */
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, /* void * (device) */
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
typedef enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
  CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;
typedef enum cublasLtMatrixLayoutAttribute_t {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,       /* int32 cublasLtOrder_t */
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,        /* uint64 */
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,        /* uint64 */
  CUBLASLT_MATRIX_LAYOUT_LD = 4,          /* int64 */
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5, /* int32 */
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6, /* int64, elements */
} cublasLtMatrixLayoutAttribute_t;
typedef enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, /* uint64 */
  /* uint32, default 256: algorithms that need A (B, C, D) aligned more
   * strictly than this are left out */
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

/* ---- NCCL (nccl.h) ------------------------------------------------------- */

typedef int ncclResult_t;
enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclInProgress = 7 };
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef enum ncclDataType_t {
  ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6,
  ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 /* the fp8 types of NCCL 2.24+ are not used */
} ncclDataType_t;
typedef enum ncclRedOp_t { ncclSum = 0, ncclMax = 2, ncclAvg = 4 } ncclRedOp_t;

/* ---- the table --------------------------------------------------------------- */

typedef struct tg_cuda_api {
  const char *name;   /* "CUDA driver 12.4" or "emulated device" */
  bool emulated;

  /* Source to the image cuModuleLoadData takes: arch is "sm_90" etc.  On
   * success *image is malloc'ed (the caller frees it); on failure why says
   * why, naming the kernels the compiler's messages point into. */
  bool (*compile)(const char *src, const char *src_name, const char *arch, void **image, size_t *size,
                  bool *from_cache, char *why, size_t whylen);

  /* driver */
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int *version);
  CUresult (*cuGetErrorName)(CUresult e, const char **s);
  CUresult (*cuGetErrorString)(CUresult e, const char **s);
  CUresult (*cuDeviceGetCount)(int *count);
  CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
  CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
  CUresult (*cuDeviceGetAttribute)(int *value, CUdevice_attribute attr, CUdevice dev);
  CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);
  CUresult (*cuMemAlloc)(CUdeviceptr *p, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr p);
  CUresult (*cuMemAllocHost)(void **p, size_t bytes); /* pinned host memory */
  CUresult (*cuMemFreeHost)(void *p);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
  CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream s);
  CUresult (*cuModuleLoadData)(CUmodule *m, const void *image);
  CUresult (*cuModuleUnload)(CUmodule m);
  CUresult (*cuModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
  CUresult (*cuFuncSetAttribute)(CUfunction f, CUfunction_attribute attr, int value);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared_bytes, CUstream s, void **args, void **extra);
  CUresult (*cuStreamCreate)(CUstream *s, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream s);
  CUresult (*cuStreamSynchronize)(CUstream s);
  CUresult (*cuStreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
  CUresult (*cuStreamBeginCapture)(CUstream s, CUstreamCaptureMode mode);
  CUresult (*cuStreamEndCapture)(CUstream s, CUgraph *g);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *e, CUgraph g, unsigned long long flags);
  CUresult (*cuGraphLaunch)(CUgraphExec e, CUstream s);
  CUresult (*cuGraphExecDestroy)(CUgraphExec e);
  CUresult (*cuGraphDestroy)(CUgraph g);
  CUresult (*cuEventCreate)(CUevent *e, unsigned flags);
  CUresult (*cuEventDestroy)(CUevent e);
  CUresult (*cuEventRecord)(CUevent e, CUstream s);
  CUresult (*cuEventRecordWithFlags)(CUevent e, CUstream s, unsigned flags);
  CUresult (*cuEventSynchronize)(CUevent e);
  CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);

  /* cuBLASLt */
  cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t *h);
  cublasStatus_t (*cublasLtDestroy)(cublasLtHandle_t h);
  const char *(*cublasLtGetStatusString)(cublasStatus_t s);
  cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                             cudaDataType scale);
  cublasStatus_t (*cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t d);
  cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                   const void *buf, size_t size);
  cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                               uint64_t cols, int64_t ld);
  cublasStatus_t (*cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t l);
  cublasStatus_t (*cublasLtMatrixLayoutSetAttribute)(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                     const void *buf, size_t size);
  cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t *p);
  cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t p);
  cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t p,
                                                         cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                         size_t size);
  cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                                   cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                   cublasLtMatmulPreference_t pref, int requested,
                                                   cublasLtMatmulHeuristicResult_t *results, int *returned);
  cublasStatus_t (*cublasLtMatmul)(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                                   cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b,
                                   const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D,
                                   cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t *algo, void *workspace,
                                   size_t workspace_bytes, CUstream s);

  /* NCCL: NULL members when no NCCL was found (one rank needs none) */
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *id);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t comm);
  ncclResult_t (*ncclCommAbort)(ncclComm_t comm);
  ncclResult_t (*ncclAllReduce)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                ncclComm_t comm, CUstream s);
  /* ZeRO: recvbuff's recvcount elements are rank r's block of sendbuff's
   * nranks x recvcount (in place: recvbuff == sendbuff + rank * recvcount);
   * every rank's sendcount elements of sendbuff to recvbuff + r * sendcount
   * (in place: sendbuff == recvbuff + rank * sendcount). */
  ncclResult_t (*ncclReduceScatter)(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm, CUstream stream);
  ncclResult_t (*ncclAllGather)(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                ncclComm_t comm, CUstream stream);
  ncclResult_t (*ncclGroupStart)(void);
  ncclResult_t (*ncclGroupEnd)(void);
  const char *(*ncclGetErrorString)(ncclResult_t r);

  /* Emulator only (NULL on a real device): before a cuLaunchKernel, what
   * the launch is for the checks' messages: the kernel's name, the .tg
   * lines it came from, and each argument's name and extent in bytes
   * (the value's buffer), so that an access outside it is caught even
   * inside one large allocation. */
  void (*emu_describe_launch)(const char *kernel, const char *where, int nargs, const char *const *arg_names,
                              const size_t *arg_bytes);
  /* Emulator only: the whole story of the last failed call (which check
   * failed, in which kernel, block, thread, argument and index), "" if none. */
  const char *(*emu_last_error)(void);
} tg_cuda_api;

/* Fills api from the real libraries: libcuda.so.1, libcublasLt.so.13 (or
 * .12, or unversioned; also under $CUDA_HOME/lib64 and /usr/local/cuda/lib64),
 * libnccl.so.2 (optional) and NVRTC (runtime/jit/nvrtc.h) for compile.
 * False with every place tried in why when the driver or cuBLASLt cannot be
 * loaded or lacks a function. */
bool tg_cuda_api_load(tg_cuda_api *api, char *why, size_t whylen);

/* The emulated device fills the same table: tg_cuda_api_emulated
 * (emu/emu_api.h). */

#endif
