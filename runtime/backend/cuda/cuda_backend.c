/* cuda_backend.c: the CUDA backends (backend.h), two of them over one
 * table of driver, cuBLASLt and NCCL calls (cuda_api.h): "cuda" on a real
 * GPU, through the libraries dlopen'ed, and "cuda-emu" on the emulated
 * device (emu/), which runs the same generated .cu on the CPU so that CI
 * executes every kernel.  Above the table the code is the same for both.
 *
 * Compiling a graph: lower it (codegen/lower.h, recomputing epilogue
 * values: on a GPU the step is memory-bound), render the CUDA (one .cu for
 * the whole step), compile it for the device (NVRTC, cached; or the host
 * compiler for the emulator), load the module, and make the plan
 * (codegen/cuda/cuda_plan.h): every launch, matmul and all-reduce point in run
 * order, exactly what the manifest shows.  The graph's intermediates live
 * in one device allocation laid out by memplan (the arena, then the
 * scratch); leaves are tensors, the graph's own (made when first needed)
 * or bound ones shared with other graphs.  A multi-tensor launch (the
 * optimizer) reads its steps' buffers from tables in device memory
 * (tg_cuda_table), which are written before a run whenever a leaf has been
 * bound or made since the last write.
 *
 * Running: the plan's launches go to one compute stream.  Each matmul is a
 * cublasLtMatmul with fp32 accumulation and an algorithm chosen once per
 * shape (cached on the device).  At each all-reduce point the bucket hook
 * of the caller (tg_exec_on_bucket) has its work queued in order: the
 * accumulation kernel on the compute stream, the NCCL all-reduce on a
 * communication stream that waits for an event, so that communication
 * overlaps the rest of the backward; the compute stream waits for the
 * communication only at the end of the step.  The hooks are called before
 * anything is queued, to learn what they want this run ("record" them):
 * their wishes (first micro-step or not, last or not) are the key of a
 * CUDA graph.  The first run of a key is launched op by op (the warm-up);
 * the second is captured into a graph, which every later run of that key
 * replays with one launch.  Inputs (the batch, lr, step) are written into
 * their fixed tensors before a replay; outputs are read once per step.
 *
 * ZeRO (backend.h): a tensor view is a pointer into its tensor; a value's
 * memory, a pointer into the arena.  NCCL's reduce-scatter and all-gather
 * move one count for every rank, so each tensor's shards (base/shard.h) are
 * packed, padded to S elements, rank by rank into a staging buffer on the
 * device (tg_shard_pack, kept and grown as needed), NCCL runs in place on
 * it, and the result is unpacked: this rank's averaged block added into its
 * shards (tg_accumulate), or every rank's block back into the whole
 * tensors.  All of it goes on the communication stream after an event, as
 * the all-reduce does; in a bucket hook it is recorded and replayed with
 * the step, like the all-reduce.
 *
 * Errors name the call, the kernel or matmul, and the .tg lines it came
 * from.  TG_CUDA_SYNC=1 synchronises and checks after every launch (and
 * turns the graphs off), so that an error is pinned on the launch that
 * made it; TG_CUDA_GRAPHS=0 turns the graphs off alone; TG_CUDA_TRACE=FILE
 * appends a line per launch, matmul and all-reduce run one by one, and one
 * per replay of a captured step; TG_CUDA_SHARD_CHUNK=BYTES sets the
 * staging one ZeRO collective takes at most (SHARD_CHUNK_BYTES), so that a
 * test can cut small tensors into several chunks. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "cuda_api.h"
#include "cuda_kernels.h"
#include "cuda_plan.h"
#include "emu_api.h"
#include "backend_impl.h"
#include "lower.h"
#include "nvrtc.h"
#include "render_cuda.h"
#include "shard.h"
#include "traffic.h"

/* ---- the device ------------------------------------------------------------------ */

typedef struct algo_entry {
  uint64_t key;
  cublasLtMatmulAlgo_t algo;
  uint32_t fallback; /* the epilogue run as a kernel after the plain GEMM (lt_call) */
} algo_entry;

/* The most staging one ZeRO collective takes (its nranks blocks), unless
 * one tensor alone needs more: a bucket's or a model's tensors are moved in
 * chunks of this, one after another on the communication stream, so that
 * the staging buffer stays small beside the model.  Each chunk is one NCCL
 * call, large enough to run at NCCL's bandwidth. */
enum { SHARD_CHUNK_BYTES = 64 << 20 };

typedef struct cuda_exec cuda_exec;
typedef struct hook_list hook_list;

typedef struct cuda_device {
  tg_device base;
  tg_ctx *ctx; /* errors outside compile and run (tensor I/O) are reported here */
  tg_cuda_api api;
  CUdevice dev;
  CUcontext cuctx;
  char name[256], arch[16], describe[512];
  char memory_what[320]; /* where tg_device_memory_free's figure comes from */
  int sm_count;
  size_t total_mem;
  CUstream stream, comm_stream;
  cublasLtHandle_t lt;
  CUdeviceptr workspace;
  CUmodule rt_module;
  CUfunction k_accumulate;
  CUfunction k_lt_epilogue[2], k_lt_bgrad[2]; /* cuBLASLt's epilogues as kernels: [0] f32, [1] bf16 */
  CUfunction k_shard_pack[3], k_shard_unpack[3]; /* ZeRO's staging, elements of [0] 4, [1] 2, [2] 1 bytes */
  bool emulated;       /* the emulated device: the whole .cu is one module */
  ncclComm_t nccl;
  ncclComm_t nccl_tensor; /* tensor parallelism: the mesh's tensor axis (comm.h), or NULL */
  int tensor_ranks;
  int rank, nranks;
  algo_entry *algos;
  int n_algos, cap_algos;
  bool sync_each;      /* TG_CUDA_SYNC=1 */
  bool graphs;         /* capture and replay steps (off with TG_CUDA_SYNC or TG_CUDA_GRAPHS=0) */
  FILE *trace;         /* TG_CUDA_TRACE: what runs, a line each */
  cuda_exec *recording; /* the exec whose bucket hooks are being recorded */
  hook_list *recording_into; /* ... and the list of the bucket whose hook is called */
  CUdeviceptr shard_staging; /* ZeRO's collectives' staging buffer (0: none yet) */
  size_t shard_staging_bytes;
  size_t shard_chunk_bytes; /* SHARD_CHUNK_BYTES, or TG_CUDA_SHARD_CHUNK */
  uint64_t shard_staging_generation; /* bumped when it moves: captured steps hold its address */
  CUevent comm_ready, comm_over; /* a ZeRO collective outside a step: after the compute stream's work, before its next */
  char *staging;       /* host memory for conversions */
  size_t staging_cap;
} cuda_device;

typedef struct cuda_tensor {
  tg_tensor base;
  CUdeviceptr ptr;
  size_t bytes;
  bool owned; /* false: a leaf's own storage, freed with its exec */
  bool view;  /* a view (tg_tensor_view, tg_exec_value): the memory is another's */
} cuda_tensor;

/* One tensor of a ZeRO collective, by value, so that a hook's views may be
 * freed as soon as it returns. */
typedef struct shard_part {
  CUdeviceptr whole; /* the whole tensor: the gradient reduced, the parameter gathered */
  CUdeviceptr shard; /* reduce-scatter: this rank's shard of it (0: the rank holds none) */
  int64_t numel;     /* whole's */
  int elem;          /* bytes an element */
} shard_part;

/* What a bucket hook asked for, kept until its point in the step. */
typedef enum hook_kind { HOOK_ACCUMULATE, HOOK_ALLREDUCE, HOOK_REDUCE_SCATTER, HOOK_ALL_GATHER } hook_kind;
typedef struct hook_op {
  hook_kind kind;
  const tg_node *n;   /* ACCUMULATE: the value to add */
  cuda_tensor *acc;   /* ACCUMULATE: into this */
  float scale;        /* ACCUMULATE, REDUCE_SCATTER */
  bool first;         /* ACCUMULATE; REDUCE_SCATTER: overwrite the shards (not accumulate) */
  cuda_tensor **ts;   /* ALLREDUCE: these tensors */
  int n_ts;
  shard_part *parts;  /* REDUCE_SCATTER, ALL_GATHER: these tensors */
  int n_parts;
} hook_op;

struct hook_list {
  hook_op *ops;
  int n, cap;
};

typedef struct graph_entry {
  uint64_t key;
  int runs;           /* launched op by op so far (1: warmed up) */
  CUgraphExec exec;   /* the captured step, once made */
} graph_entry;

/* One matmul's descriptors, made once at compile time.  fallback: the
 * epilogue cuBLASLt had no algorithm for (0: none), which the desc then
 * leaves out and a kernel of the backend's runs after the GEMM. */
typedef struct lt_call {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
  uint32_t epilogue, fallback;
  uint32_t align[4]; /* the bytes A, B, C and D were taken to be aligned to (choose_algo) */
} lt_call;

struct cuda_exec {
  tg_exec base;
  tg_arena *arena;     /* the plan's */
  tg_program *p;
  tg_cuda_plan *plan;
  CUmodule *modules;   /* one per unit (cuda_kernels.h); the emulated device's one .cu: one */
  int n_modules;
  tg_compile_stats stats;
  CUfunction *fn;      /* per plan op: the launch's function */
  lt_call *lt;         /* per plan op: the matmul's descriptors */
  CUdeviceptr mem;     /* the arena, then the scratch */
  int64_t scratch_at;
  cuda_tensor **own, **bound; /* per program leaf */
  int *leaf_of;        /* per graph node: index into the leaves, or -1 */
  bool from_cache;
  hook_list *hooks;    /* per bucket: what the hook asked for this run */
  CUevent *bucket_ev;  /* per bucket: the gradients are complete */
  CUevent *coll_ev;    /* per plan op: an IR collective is done (on the communication stream) */
  CUevent coll_start;  /* an IR collective's input is ready (on the compute stream) */
  int *coll_pending;   /* IR collectives the compute stream has not yet waited for (plan ops) */
  CUevent comm_done;
  graph_entry *graphs;
  int n_graphs, cap_graphs;
  uint64_t generation; /* bumped by a bind: captured graphs hold pointers */
  /* The multi-tensor launches' tables (cuda_plan.h: tg_cuda_table), one
   * allocation: each launch's table t at table_at[op][t].  Their contents
   * are where the buffers are, so they are written before a run whenever
   * the generation has changed since (a bind, a leaf made); the kernels
   * take their addresses, which never change, so a captured graph stays
   * valid across a rewrite. */
  CUdeviceptr tables;
  size_t **table_at;
  size_t table_bytes;
  uint64_t *table_host;
  bool tables_written;
  uint64_t tables_generation;
  tg_profile_level profile;
  CUevent *op_ev;      /* TG_PROFILE_KERNELS: one before each op and one at the end */
  CUevent phase_ev[TG_NPHASES + 1];
  bool phase_started[TG_NPHASES];
  bool pending;        /* a profiled run whose times are not yet added */
  int kernel_runs;     /* the runs kernel_seconds adds up */
  double phase_seconds[TG_NPHASES];
  double *kernel_seconds; /* per fused kernel */
};

static cuda_device *dev_of(const tg_exec *e) { return (cuda_device *)e->d; }

/* ---- errors ----------------------------------------------------------------------- */

static const char *cu_error(cuda_device *d, CUresult r) {
  static char buf[1024];
  const char *name = NULL, *text = NULL;
  if (d->api.cuGetErrorName) d->api.cuGetErrorName(r, &name);
  if (d->api.cuGetErrorString) d->api.cuGetErrorString(r, &text);
  snprintf(buf, sizeof buf, "%s (%d): %s", name ? name : "CUDA error", r, text ? text : "");
  if (d->api.emu_last_error && *d->api.emu_last_error()) {
    size_t k = strlen(buf);
    snprintf(buf + k, sizeof buf - k, "\n%s", d->api.emu_last_error());
  }
  return buf;
}

/* The function a call expression calls: "A->cuLaunchKernel(f, ...)" gives
 * "cuLaunchKernel", for messages. */
static const char *call_name(const char *expr) {
  static char buf[128];
  const char *open = strchr(expr, '('), *start = expr;
  if (!open) return expr;
  for (const char *p = expr; p < open; p++)
    if (*p == '>' || *p == '.' || *p == ' ') start = p + 1;
  snprintf(buf, sizeof buf, "%.*s", (int)(open - start), start);
  return buf;
}

/* A failed driver call, its result r_ already in hand: the call's name. */
static void cu_fail(cuda_device *d, tg_ctx *ctx, CUresult r, const char *call, const char *what) {
  if (r == CUDA_SUCCESS) return;
  tg_error(ctx, (tg_loc){0}, "%s failed%s%s: %s%s", call, *what ? " for " : "", what, cu_error(d, r),
           d->sync_each ? "" : "\n(set TG_CUDA_SYNC=1 to check after every launch and pin the error on it)");
}

/* A failed driver call: the call, what it was for, and the hint. */
#define CU(d, ctx, call, what)                                                                                   \
  do {                                                                                                           \
    CUresult r_ = (call);                                                                                        \
    if (r_ != CUDA_SUCCESS)                                                                                      \
      tg_error((ctx), (tg_loc){0}, "%s failed%s%s: %s%s", call_name(#call), *(what) ? " for " : "", (what),      \
               cu_error((d), r_),                                                                                \
               (d)->sync_each ? "" : "\n(set TG_CUDA_SYNC=1 to check after every launch and pin the error on it)"); \
  } while (0)

static const char *lt_error(cuda_device *d, cublasStatus_t s) {
  static char buf[1024];
  const char *text = d->api.cublasLtGetStatusString ? d->api.cublasLtGetStatusString(s) : NULL;
  snprintf(buf, sizeof buf, "%s (%d)", text ? text : "cuBLAS status", s);
  if (d->api.emu_last_error && *d->api.emu_last_error()) {
    size_t k = strlen(buf);
    snprintf(buf + k, sizeof buf - k, "\n%s", d->api.emu_last_error());
  }
  return buf;
}

#define LT(d, ctx, call, what)                                                                                \
  do {                                                                                                        \
    cublasStatus_t s_ = (call);                                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                          \
      tg_error((ctx), (tg_loc){0}, "%s failed for %s: %s", call_name(#call), (what), lt_error((d), s_));      \
  } while (0)

#define NC(d, ctx, call, what)                                                                                \
  do {                                                                                                        \
    ncclResult_t n_ = (call);                                                                                 \
    if (n_ != ncclSuccess)                                                                                    \
      tg_error((ctx), (tg_loc){0}, "%s failed for %s: %s (%d)", call_name(#call), (what),                   \
               (d)->api.ncclGetErrorString ? (d)->api.ncclGetErrorString(n_) : "NCCL error", n_);             \
  } while (0)

/* ---- opening ------------------------------------------------------------------------ */

/* render_cuda_runtime.c's staging kernels, by element width (k_shard_pack's order) */
static const char *const shard_pack_names[3] = {"tg_shard_pack_b32", "tg_shard_pack_b16", "tg_shard_pack_b8"};
static const char *const shard_unpack_names[3] = {"tg_shard_unpack_b32", "tg_shard_unpack_b16", "tg_shard_unpack_b8"};

static tg_device *open_device(tg_ctx *ctx, const tg_device_opts *o, bool emulated) {
  cuda_device *d = tg_xcalloc(1, sizeof *d);
  d->ctx = ctx;
  d->emulated = emulated;
  if (emulated) {
    tg_cuda_api_emulated(&d->api);
  } else {
    char why[2048];
    if (!tg_cuda_api_load(&d->api, why, sizeof why)) {
      free(d);
      tg_error(ctx, (tg_loc){0}, "backend cuda: %s\n(backend cuda-emu runs the same CUDA on the CPU, emulated; "
               "backend cpu runs generated C)", why);
    }
  }
  if (o->precision != TG_PREC_F32) {
    free(d);
    tg_error(ctx, (tg_loc){0}, "the cuda backends compute in f32 so far");
  }
  const char *sync = getenv("TG_CUDA_SYNC"), *graphs = getenv("TG_CUDA_GRAPHS");
  d->sync_each = sync && *sync && strcmp(sync, "0");
  d->graphs = !d->sync_each && !(graphs && !strcmp(graphs, "0"));
  const char *chunk = getenv("TG_CUDA_SHARD_CHUNK");
  d->shard_chunk_bytes = chunk && atoll(chunk) > 0 ? (size_t)atoll(chunk) : SHARD_CHUNK_BYTES;
  const char *trace = getenv("TG_CUDA_TRACE");
  if (trace && *trace && !(d->trace = fopen(trace, "a")))
    tg_error(ctx, (tg_loc){0}, "TG_CUDA_TRACE: cannot open '%s' for appending", trace);
  tg_cuda_api *A = &d->api;
  CU(d, ctx, A->cuInit(0), "");
  int count = 0;
  CU(d, ctx, A->cuDeviceGetCount(&count), "");
  if (count == 0) tg_error(ctx, (tg_loc){0}, "backend %s: no CUDA device", emulated ? "cuda-emu" : "cuda");
  d->rank = tg_comm_rank();
  d->nranks = tg_comm_size();
  int which = emulated ? 0 : o->local_rank; /* an emulated device is each process's own */
  if (which >= count)
    tg_error(ctx, (tg_loc){0}, "rank %d is local rank %d of its machine, which has %d GPU%s: one GPU per rank (start "
             "at most %d ranks a machine)", d->rank, which, count, count == 1 ? "" : "s", count);
  CU(d, ctx, A->cuDeviceGet(&d->dev, which), "");
  CU(d, ctx, A->cuDeviceGetName(d->name, sizeof d->name, d->dev), "");
  int major = 0, minor = 0;
  CU(d, ctx, A->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev), "");
  CU(d, ctx, A->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev), "");
  CU(d, ctx, A->cuDeviceGetAttribute(&d->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev), "");
  CU(d, ctx, A->cuDeviceTotalMem(&d->total_mem, d->dev), "");
  if (major < 8)
    tg_error(ctx, (tg_loc){0}, "%s is compute capability %d.%d; tg's kernels need 8.0 or later (bf16 mma.sync)", d->name,
             major, minor);
  snprintf(d->arch, sizeof d->arch, "sm_%d%d", major, minor);
  CU(d, ctx, A->cuDevicePrimaryCtxRetain(&d->cuctx, d->dev), "");
  CU(d, ctx, A->cuCtxSetCurrent(d->cuctx), "");
  CU(d, ctx, A->cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING), "the compute stream");
  CU(d, ctx, A->cuStreamCreate(&d->comm_stream, CU_STREAM_NON_BLOCKING), "the communication stream");
  LT(d, ctx, A->cublasLtCreate(&d->lt), "the cuBLASLt handle");
  CU(d, ctx, A->cuMemAlloc(&d->workspace, TG_CUBLASLT_WORKSPACE), "cuBLASLt's workspace");

  /* the backend's own kernels (codegen/cuda/render_cuda_runtime.c) */
  char *src = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&src, &len);
  if (!f) tg_error(ctx, (tg_loc){0}, "out of memory");
  tg_render_cuda_runtime(f);
  fclose(f);
  void *image = NULL;
  size_t size = 0;
  bool cached;
  static char err[16384];
  bool built = A->compile(src, "tg_runtime.cu", d->arch, &image, &size, &cached, err, sizeof err);
  free(src);
  if (!built) tg_error(ctx, (tg_loc){0}, "the backend's own kernels: %s", err);
  CUresult r = A->cuModuleLoadData(&d->rt_module, image);
  free(image);
  cu_fail(d, ctx, r, "cuModuleLoadData", "the backend's own kernels");
  CU(d, ctx, A->cuModuleGetFunction(&d->k_accumulate, d->rt_module, "tg_accumulate"), "tg_accumulate");
  static const char *const epilogue_kernels[2][2] = {{"tg_lt_epilogue_f32", "tg_lt_epilogue_bf16"},
                                                     {"tg_lt_bgrad_f32", "tg_lt_bgrad_bf16"}};
  for (int t = 0; t < 2; t++) {
    CU(d, ctx, A->cuModuleGetFunction(&d->k_lt_epilogue[t], d->rt_module, epilogue_kernels[0][t]), epilogue_kernels[0][t]);
    CU(d, ctx, A->cuModuleGetFunction(&d->k_lt_bgrad[t], d->rt_module, epilogue_kernels[1][t]), epilogue_kernels[1][t]);
  }
  for (int w = 0; w < 3; w++) {
    CU(d, ctx, A->cuModuleGetFunction(&d->k_shard_pack[w], d->rt_module, shard_pack_names[w]), shard_pack_names[w]);
    CU(d, ctx, A->cuModuleGetFunction(&d->k_shard_unpack[w], d->rt_module, shard_unpack_names[w]),
       shard_unpack_names[w]);
  }
  CU(d, ctx, A->cuEventCreate(&d->comm_ready, CU_EVENT_DISABLE_TIMING), "ZeRO's collectives");
  CU(d, ctx, A->cuEventCreate(&d->comm_over, CU_EVENT_DISABLE_TIMING), "ZeRO's collectives");

  if (d->nranks > 1) {
    if (!A->ncclCommInitRank)
      tg_error(ctx, (tg_loc){0}, "%d ranks need NCCL, and no libnccl.so.2 was found (install NCCL or set CUDA_HOME)",
               d->nranks);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (d->rank == 0) NC(d, ctx, A->ncclGetUniqueId(&id), "the NCCL unique id");
    tg_comm_broadcast(&id, sizeof id);
    NC(d, ctx, A->ncclCommInitRank(&d->nccl, d->nranks, id, d->rank), "the NCCL communicator");
  }
  /* a second communicator over the mesh's tensor axis: its ranks' id from
   * its first, broadcast among them */
  d->tensor_ranks = tg_comm_tensor_size();
  if (d->tensor_ranks > 1) {
    if (!A->ncclCommInitRank)
      tg_error(ctx, (tg_loc){0}, "a tensor axis of %d ranks needs NCCL, and no libnccl.so.2 was found", d->tensor_ranks);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    bool was = tg_comm_use_tensor(true);
    if (tg_comm_tensor_rank() == 0) NC(d, ctx, A->ncclGetUniqueId(&id), "the tensor axis's NCCL unique id");
    tg_comm_broadcast(&id, sizeof id);
    NC(d, ctx, A->ncclCommInitRank(&d->nccl_tensor, d->tensor_ranks, id, tg_comm_tensor_rank()),
       "the tensor axis's NCCL communicator");
    tg_comm_use_tensor(was);
  }
  snprintf(d->describe, sizeof d->describe, "%s (%s, %d SMs, %.1f GiB), %s", d->name, d->arch, d->sm_count,
           (double)d->total_mem / (1 << 30), A->name);
  return &d->base;
}

static tg_device *cuda_open(tg_ctx *ctx, const tg_device_opts *o) { return open_device(ctx, o, false); }
static tg_device *emu_open(tg_ctx *ctx, const tg_device_opts *o) { return open_device(ctx, o, true); }

/* backend.h's tg_backend_probe: the device open_device would take, asked
 * for its name and memory with no context made (cuInit may run again:
 * later calls do nothing).  The emulated device answers as the H100 it
 * models (80 GiB; its name says it is emulated). */
static bool probe_device(bool emulated, int local_rank, tg_device_facts *out, char *why, size_t whylen) {
  cuda_device *d = tg_xcalloc(1, sizeof *d);
  bool ok = false;
  if (emulated) tg_cuda_api_emulated(&d->api);
  else if (!tg_cuda_api_load(&d->api, why, whylen)) goto done;
  tg_cuda_api *A = &d->api;
  int count = 0, which = emulated ? 0 : local_rank;
  CUdevice dev = 0;
  size_t bytes = 0;
  CUresult r;
  const char *call = "cuInit";
  if ((r = A->cuInit(0)) || (call = "cuDeviceGetCount", r = A->cuDeviceGetCount(&count))) goto failed;
  if (which >= count) {
    snprintf(why, whylen, "local rank %d needs GPU %d, and this machine has %d", local_rank, which, count);
    goto done;
  }
  if ((call = "cuDeviceGet", r = A->cuDeviceGet(&dev, which)) ||
      (call = "cuDeviceGetName", r = A->cuDeviceGetName(out->name, (int)sizeof out->name, dev)) ||
      (call = "cuDeviceTotalMem", r = A->cuDeviceTotalMem(&bytes, dev)))
    goto failed;
  out->memory_bytes = (double)bytes;
  ok = true;
  goto done;
failed:
  snprintf(why, whylen, "%s failed: %s", call, cu_error(d, r));
done:
  free(d);
  return ok;
}
static bool cuda_probe(int local_rank, tg_device_facts *out, char *why, size_t whylen) {
  return probe_device(false, local_rank, out, why, whylen);
}
static bool emu_probe(int local_rank, tg_device_facts *out, char *why, size_t whylen) {
  return probe_device(true, local_rank, out, why, whylen);
}

/* The real device's free memory; the emulated device's is host memory
 * (its 80 GiB are a model of an H100's, not a reservation), so the caller
 * asks the host for it. */
static int64_t cuda_memory_free(tg_device *x, const char **what) {
  cuda_device *d = (cuda_device *)x;
  if (d->emulated) return -1;
  size_t free_bytes = 0, total = 0;
  if (!d->api.cuMemGetInfo || d->api.cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return -1;
  snprintf(d->memory_what, sizeof d->memory_what, "cuMemGetInfo's free memory on %s", d->name);
  *what = d->memory_what;
  return (int64_t)free_bytes;
}

static void cuda_close(tg_device *x) {
  cuda_device *d = (cuda_device *)x;
  tg_cuda_api *A = &d->api;
  if (A->cuStreamSynchronize && d->stream) A->cuStreamSynchronize(d->stream);
  if (A->cuStreamSynchronize && d->comm_stream) A->cuStreamSynchronize(d->comm_stream);
  if (d->nccl && A->ncclCommDestroy) A->ncclCommDestroy(d->nccl);
  if (d->nccl_tensor && A->ncclCommDestroy) A->ncclCommDestroy(d->nccl_tensor);
  if (d->shard_staging) A->cuMemFree(d->shard_staging);
  if (d->comm_ready) A->cuEventDestroy(d->comm_ready);
  if (d->comm_over) A->cuEventDestroy(d->comm_over);
  if (d->rt_module) A->cuModuleUnload(d->rt_module);
  if (d->workspace) A->cuMemFree(d->workspace);
  if (d->lt) A->cublasLtDestroy(d->lt);
  if (d->comm_stream) A->cuStreamDestroy(d->comm_stream);
  if (d->stream) A->cuStreamDestroy(d->stream);
  if (d->cuctx) A->cuDevicePrimaryCtxRelease(d->dev);
  if (d->trace) fclose(d->trace);
  free(d->algos);
  free(d->staging);
  free(d);
}

static const char *cuda_describe(const tg_device *x) { return ((const cuda_device *)x)->describe; }

/* Dense peaks (no 2:4 sparsity) from NVIDIA's datasheets, in TFLOP/s: bf16
 * on the tensor cores, and plain f32.  The sheets print bf16 "with
 * sparsity"; the dense figure is half of it.  Found by the name the driver
 * reports (cuDeviceGetName: "NVIDIA H100 80GB HBM3"), the first entry whose
 * key appears in it as a whole word (tg_gpu_name_has), so the variants come
 * before their family (H100 PCIe before H100) and A10 does not match A100
 * or A10G. */
static const struct gpu_peak {
  const char *key;
  double bf16, f32;
  const char *source;
} gpu_peaks[] = {
    {"H100 PCIe", 756, 51, "NVIDIA H100 datasheet (PCIe)"},
    {"H100 NVL", 835, 60, "NVIDIA H100 datasheet (NVL)"},
    {"H200 NVL", 835, 60, "NVIDIA H200 datasheet (NVL)"},
    {"GH200", 989, 67, "NVIDIA GH200 datasheet (its H100 SXM GPU)"},
    {"H100", 989, 67, "NVIDIA H100 datasheet (SXM)"},
    {"H200", 989, 67, "NVIDIA H200 datasheet (SXM)"},
    {"A100", 312, 19.5, "NVIDIA A100 datasheet"},
    {"A10", 125, 31.2, "NVIDIA A10 datasheet"},
    {"L40S", 362, 91.6, "NVIDIA L40S datasheet"},
    {"L4", 121, 30.3, "NVIDIA L4 datasheet"},
    {"RTX 4090", 165.2, 82.6, "NVIDIA Ada GPU architecture whitepaper (RTX 4090, FP32 accumulate)"},
};

static double cuda_peak_flops(tg_device *x, bool bf16, const char **what) {
  cuda_device *d = (cuda_device *)x;
  if (d->emulated) {
    *what = "the emulated GPU has no peak of its own";
    return 0;
  }
  for (size_t i = 0; i < sizeof gpu_peaks / sizeof *gpu_peaks; i++)
    if (tg_gpu_name_has(d->name, gpu_peaks[i].key)) {
      *what = gpu_peaks[i].source;
      return (bf16 ? gpu_peaks[i].bf16 : gpu_peaks[i].f32) * 1e12;
    }
  *what = "a GPU missing from cuda_backend.c's table of peaks";
  return 0;
}

/* ---- tensors -------------------------------------------------------------------------- */

static void *staging(cuda_device *d, size_t n) {
  if (n > d->staging_cap) {
    free(d->staging);
    d->staging = tg_xmalloc(n);
    d->staging_cap = n;
  }
  return d->staging;
}

static cuda_tensor *tensor_alloc(cuda_device *d, const tg_type *t, bool owned) {
  cuda_tensor *x = tg_xcalloc(1, sizeof *x);
  x->base.d = &d->base;
  x->base.type = *t;
  x->bytes = (size_t)tg_type_numel(t) * (size_t)tg_dtype_size(t->dtype);
  x->owned = owned;
  CU(d, d->ctx, d->api.cuMemAlloc(&x->ptr, x->bytes ? x->bytes : 1), "a tensor");
  CU(d, d->ctx, d->api.cuMemsetD8Async(x->ptr, 0, x->bytes, d->stream), "zeroing a tensor");
  return x;
}

static tg_tensor *cuda_tensor_new(tg_device *x, const tg_type *t) { return &tensor_alloc((cuda_device *)x, t, true)->base; }

static void tensor_release(cuda_tensor *t) {
  cuda_device *d = (cuda_device *)t->base.d;
  if (!t->view) { /* a view frees nothing, so waits for nothing (a hook may free its views) */
    d->api.cuStreamSynchronize(d->stream);
    d->api.cuMemFree(t->ptr);
  }
  free(t);
}

static void cuda_tensor_free(tg_tensor *t) { tensor_release((cuda_tensor *)t); }

/* A tensor of type t over the device memory at p, which it does not own. */
static tg_tensor *view_at(cuda_device *d, CUdeviceptr p, const tg_type *t) {
  cuda_tensor *x = tg_xcalloc(1, sizeof *x);
  x->base.d = &d->base;
  x->base.type = *t;
  x->ptr = p;
  x->bytes = (size_t)tg_type_numel(t) * (size_t)tg_dtype_size(t->dtype);
  x->view = true;
  return &x->base;
}

static tg_tensor *cuda_tensor_view(tg_tensor *t, int64_t offset, const tg_type *type) {
  return view_at((cuda_device *)t->d, ((cuda_tensor *)t)->ptr + (CUdeviceptr)(offset * tg_dtype_size(t->type.dtype)),
                 type);
}

static void cuda_tensor_write(tg_tensor *x, const void *src, tg_host_type ht) {
  cuda_tensor *t = (cuda_tensor *)x;
  cuda_device *d = (cuda_device *)x->d;
  int64_t n = tg_type_numel(&x->type);
  const void *from = src;
  bool same = (ht == TG_HOST_F32 && x->type.dtype == TG_F32) || (ht == TG_HOST_I32 && x->type.dtype == TG_I32);
  if (!same) {
    void *s = staging(d, t->bytes + 1);
    tg_host_to_storage(src, ht, s, x->type.dtype, n);
    from = s;
  }
  /* from pageable memory the copy is staged before the call returns, and
   * it is ordered on the stream before anything queued after it */
  CU(d, d->ctx, d->api.cuMemcpyHtoDAsync(t->ptr, from, t->bytes, d->stream), "writing a tensor");
  if (d->sync_each) CU(d, d->ctx, d->api.cuStreamSynchronize(d->stream), "writing a tensor");
}

static void read_device(cuda_device *d, void *dst, CUdeviceptr src, size_t bytes, const char *what) {
  CU(d, d->ctx, d->api.cuStreamSynchronize(d->stream), what);
  CU(d, d->ctx, d->api.cuMemcpyDtoH(dst, src, bytes), what);
}

static void cuda_tensor_read(const tg_tensor *x, void *dst, tg_host_type ht) {
  const cuda_tensor *t = (const cuda_tensor *)x;
  cuda_device *d = (cuda_device *)x->d;
  void *s = staging(d, t->bytes + 1);
  read_device(d, s, t->ptr, t->bytes, "reading a tensor");
  tg_host_from_storage(s, x->type.dtype, dst, ht, tg_type_numel(&x->type));
}

static uint64_t cuda_tensor_hash(const tg_tensor *x) {
  const cuda_tensor *t = (const cuda_tensor *)x;
  cuda_device *d = (cuda_device *)x->d;
  void *s = staging(d, t->bytes + 1);
  read_device(d, s, t->ptr, t->bytes, "hashing a tensor");
  return tg_hash_bytes(s, t->bytes);
}

/* ---- all-reduce -------------------------------------------------------------------- */

static void enqueue_allreduce(cuda_device *d, tg_ctx *ctx, cuda_tensor *const *ts, int n) {
  tg_cuda_api *A = &d->api;
  NC(d, ctx, A->ncclGroupStart(), "an all-reduce");
  for (int i = 0; i < n; i++)
    NC(d, ctx, A->ncclAllReduce((const void *)ts[i]->ptr, (void *)ts[i]->ptr, (size_t)tg_type_numel(&ts[i]->base.type),
                                ncclFloat32, ncclAvg, d->nccl, d->comm_stream),
       "an all-reduce");
  NC(d, ctx, A->ncclGroupEnd(), "an all-reduce");
}

static void hook_push(hook_list *l, hook_op op) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 8;
    l->ops = tg_xrealloc(l->ops, sizeof *l->ops * (size_t)l->cap);
  }
  l->ops[l->n++] = op;
}

static void cuda_allreduce_average(tg_device *x, tg_tensor *const *ts, int n) {
  cuda_device *d = (cuda_device *)x;
  if (d->nranks == 1 || n == 0) return;
  if (d->recording_into) {
    cuda_tensor **copy = tg_xmalloc(sizeof *copy * (size_t)n);
    for (int i = 0; i < n; i++) copy[i] = (cuda_tensor *)ts[i];
    hook_push(d->recording_into, (hook_op){HOOK_ALLREDUCE, NULL, NULL, 0, false, copy, n, NULL, 0});
    return;
  }
  /* outside a step: now, and wait for it */
  enqueue_allreduce(d, d->ctx, (cuda_tensor *const *)ts, n);
  CU(d, d->ctx, d->api.cuStreamSynchronize(d->comm_stream), "an all-reduce");
}

/* ---- ZeRO: shards and their collectives ----------------------------------------------- */

static void launch_own(cuda_device *d, tg_ctx *ctx, CUfunction f, long long work, void **args, int n,
                       const char *const *names, const size_t *extents, const char *fn, const char *where, CUstream s);
static void launch_accumulate(cuda_device *d, tg_ctx *ctx, CUdeviceptr acc, CUdeviceptr g, long long n, float scale,
                              bool first, CUstream s, const char *where);

static int64_t shard_elements(const cuda_device *d, const shard_part *p) {
  return tg_shard_elements(p->numel, d->nranks);
}

/* The end of the chunk of parts that starts at `from`: as many as fit in
 * SHARD_CHUNK_BYTES of staging (one at least); *block gets the bytes of a
 * rank's block, every part's shard padded to S elements. */
static int chunk_end(const cuda_device *d, const shard_part *p, int n, int from, size_t *block) {
  size_t bytes = 0;
  int i = from;
  for (; i < n; i++) {
    size_t add = (size_t)shard_elements(d, &p[i]) * (size_t)p[i].elem;
    if (i > from && (bytes + add) * (size_t)d->nranks > d->shard_chunk_bytes) break;
    bytes += add;
  }
  *block = bytes;
  return i;
}

/* Makes the staging buffer large enough for the chunks of parts.  Moving
 * it waits for the work queued on it; the captured steps that name the old
 * one are never replayed again (record_hooks keys them by its generation). */
static void reserve_staging(cuda_device *d, const shard_part *p, int n) {
  size_t need = 0, block;
  for (int i = 0, end; i < n; i = end) {
    end = chunk_end(d, p, n, i, &block);
    if (block * (size_t)d->nranks > need) need = block * (size_t)d->nranks;
  }
  if (need <= d->shard_staging_bytes) return;
  tg_cuda_api *A = &d->api;
  CU(d, d->ctx, A->cuStreamSynchronize(d->stream), "ZeRO's staging buffer");
  CU(d, d->ctx, A->cuStreamSynchronize(d->comm_stream), "ZeRO's staging buffer");
  if (d->shard_staging) CU(d, d->ctx, A->cuMemFree(d->shard_staging), "ZeRO's staging buffer");
  d->shard_staging = 0, d->shard_staging_bytes = 0;
  CU(d, d->ctx, A->cuMemAlloc(&d->shard_staging, need),
     tg_sprintf(d->ctx->arena, "ZeRO's staging buffer of %zu bytes", need));
  d->shard_staging_bytes = need;
  d->shard_staging_generation++;
}

/* Part p's shards between its tensor and the chunk's staging (rank blocks
 * of `block` bytes, the part's at byte `at` of each) on the communication
 * stream: pack ranks q0 .. q0 + nq - 1 in, or unpack every rank out. */
static void shard_copy(cuda_device *d, tg_ctx *ctx, const shard_part *p, bool pack, size_t at, size_t block, int q0,
                       int nq) {
  const int w = p->elem == 4 ? 0 : p->elem == 2 ? 1 : 2;
  CUdeviceptr staging = d->shard_staging, whole = p->whole;
  long long numel = p->numel, s = shard_elements(d, p), blk = (long long)block / p->elem,
            at_el = (long long)at / p->elem, first = q0, count = nq;
  const size_t ext[] = {(size_t)d->nranks * block, (size_t)numel * (size_t)p->elem, 0, 0, 0, 0, 0, 0};
  if (pack) {
    void *args[] = {&staging, &whole, &numel, &s, &blk, &at_el, &first, &count};
    const char *names[] = {"pack", "t", "numel", "s", "block", "at", "q0", "nq"};
    launch_own(d, ctx, d->k_shard_pack[w], count * s, args, 8, names, ext, shard_pack_names[w],
               "ZeRO's shards into the staging buffer", d->comm_stream);
  } else {
    void *args[] = {&whole, &staging, &numel, &s, &blk, &at_el};
    const char *names[] = {"t", "pack", "numel", "s", "block", "at"};
    const size_t ext_out[] = {ext[1], ext[0], 0, 0, 0, 0};
    launch_own(d, ctx, d->k_shard_unpack[w], numel, args, 6, names, ext_out, shard_unpack_names[w],
               "ZeRO's shards from the staging buffer", d->comm_stream);
  }
}

/* The reduce-scatter, on the communication stream (which already waits for
 * the gradients): chunk by chunk, every rank's shards packed, NCCL's
 * average into this rank's block in place, and the block added into the
 * shards: shard = (overwrite ? 0 : shard) + scale * block, as the hooks'
 * accumulation adds.  One rank averages nothing: its shard is the whole. */
static void enqueue_reduce_scatter(cuda_device *d, tg_ctx *ctx, const shard_part *p, int n, float scale,
                                   bool overwrite) {
  const char *what = "ZeRO's gradient reduce-scatter";
  for (int i = 0, end; i < n; i = end) {
    size_t block = 0, at = 0;
    end = d->nranks > 1 ? chunk_end(d, p, n, i, &block) : n;
    CUdeviceptr mine = d->shard_staging + (CUdeviceptr)((size_t)d->rank * block);
    if (d->nranks > 1) {
      for (int k = i; k < end; at += (size_t)shard_elements(d, &p[k]) * 4, k++)
        shard_copy(d, ctx, &p[k], true, at, block, 0, d->nranks);
      NC(d, ctx,
         d->api.ncclReduceScatter((const void *)d->shard_staging, (void *)mine, block / 4, ncclFloat32, ncclAvg, d->nccl,
                                  d->comm_stream),
         what);
    }
    at = 0;
    for (int k = i; k < end; at += (size_t)shard_elements(d, &p[k]) * 4, k++) {
      long long len = tg_shard_extent(p[k].numel, d->nranks, d->rank, NULL);
      if (len) launch_accumulate(d, ctx, p[k].shard, d->nranks > 1 ? mine + at : p[k].whole, len, scale, overwrite,
                                 d->comm_stream, what);
    }
  }
}

/* The all-gather, in place, on the communication stream: chunk by chunk,
 * this rank's shards packed into its block, NCCL's all-gather in place,
 * and every block unpacked into the whole tensors.  One NCCL call over a
 * padded staging buffer rather than one in-place ncclBroadcast per rank
 * and tensor: nranks x tensors broadcasts (thousands for a large model on
 * 8 ranks) each pay NCCL's per-operation cost, even grouped, where the
 * all-gather is one ring pass at full bandwidth; the staging it costs is
 * bounded by the chunks (SHARD_CHUNK_BYTES), and the reduce-scatter packs
 * the same way.  Bytes are bytes here: the chunk goes as ncclUint8, so
 * tensors of any dtype share one call. */
static void enqueue_all_gather(cuda_device *d, tg_ctx *ctx, const shard_part *p, int n) {
  for (int i = 0, end; i < n; i = end) {
    size_t block = 0, at = 0;
    end = chunk_end(d, p, n, i, &block);
    CUdeviceptr mine = d->shard_staging + (CUdeviceptr)((size_t)d->rank * block);
    for (int k = i; k < end; at += (size_t)(shard_elements(d, &p[k]) * p[k].elem), k++)
      shard_copy(d, ctx, &p[k], true, at, block, d->rank, 1);
    NC(d, ctx,
       d->api.ncclAllGather((const void *)mine, (void *)d->shard_staging, block, ncclUint8, d->nccl, d->comm_stream),
       "ZeRO's parameter all-gather");
    at = 0;
    for (int k = i; k < end; at += (size_t)(shard_elements(d, &p[k]) * p[k].elem), k++)
      shard_copy(d, ctx, &p[k], false, at, block, 0, d->nranks);
  }
}

static void enqueue_shard_op(cuda_device *d, tg_ctx *ctx, const hook_op *h) {
  if (h->kind == HOOK_REDUCE_SCATTER) enqueue_reduce_scatter(d, ctx, h->parts, h->n_parts, h->scale, h->first);
  else enqueue_all_gather(d, ctx, h->parts, h->n_parts);
}

/* A ZeRO collective (h owns its parts): recorded in a bucket hook, to run
 * at its point in the step; elsewhere queued now, on the communication
 * stream after the work queued so far on the compute stream, and before
 * whatever is queued there next (the host does not wait). */
static void shard_collective(cuda_device *d, hook_op h) {
  if (d->nranks > 1) reserve_staging(d, h.parts, h.n_parts);
  if (d->recording_into) {
    hook_push(d->recording_into, h);
    return;
  }
  tg_cuda_api *A = &d->api;
  const char *what = h.kind == HOOK_REDUCE_SCATTER ? "ZeRO's gradient reduce-scatter" : "ZeRO's parameter all-gather";
  CU(d, d->ctx, A->cuEventRecord(d->comm_ready, d->stream), what);
  CU(d, d->ctx, A->cuStreamWaitEvent(d->comm_stream, d->comm_ready, 0), what);
  enqueue_shard_op(d, d->ctx, &h);
  CU(d, d->ctx, A->cuEventRecord(d->comm_over, d->comm_stream), what);
  CU(d, d->ctx, A->cuStreamWaitEvent(d->stream, d->comm_over, 0), what);
  if (d->sync_each) CU(d, d->ctx, A->cuStreamSynchronize(d->stream), what);
  free(h.parts);
}

static void cuda_reduce_scatter(tg_device *x, tg_tensor *const *src, tg_tensor *const *dst, int n, float scale,
                                bool accumulate) {
  cuda_device *d = (cuda_device *)x;
  if (n == 0) return;
  shard_part *parts = tg_xcalloc((size_t)n, sizeof *parts);
  for (int i = 0; i < n; i++) {
    int64_t numel = tg_type_numel(&src[i]->type), want = tg_shard_extent(numel, d->nranks, d->rank, NULL);
    int64_t have = dst[i] ? tg_type_numel(&dst[i]->type) : 0;
    if (have != want) {
      free(parts);
      tg_error(d->ctx, (tg_loc){0}, "internal: a reduce-scatter into a shard of %lld elements, not %lld",
               (long long)have, (long long)want);
    }
    parts[i] = (shard_part){((cuda_tensor *)src[i])->ptr, dst[i] ? ((cuda_tensor *)dst[i])->ptr : 0, numel, 4};
  }
  hook_op h = {.kind = HOOK_REDUCE_SCATTER, .scale = scale, .first = !accumulate, .parts = parts, .n_parts = n};
  shard_collective(d, h);
}

static void cuda_all_gather(tg_device *x, tg_tensor *const *ts, int n) {
  cuda_device *d = (cuda_device *)x;
  if (d->nranks == 1 || n == 0) return;
  shard_part *parts = tg_xcalloc((size_t)n, sizeof *parts);
  for (int i = 0; i < n; i++)
    parts[i] = (shard_part){((cuda_tensor *)ts[i])->ptr, 0, tg_type_numel(&ts[i]->type), tg_dtype_size(ts[i]->type.dtype)};
  shard_collective(d, (hook_op){.kind = HOOK_ALL_GATHER, .parts = parts, .n_parts = n});
}

/* ---- compiling ------------------------------------------------------------------------- */

static cudaDataType lt_type(tg_dtype t) { return t == TG_BF16 ? CUDA_R_16BF : t == TG_F16 ? CUDA_R_16F : CUDA_R_32F; }

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

static cublasLtMatrixLayout_t layout(cuda_device *d, tg_ctx *ctx, tg_dtype t, int64_t rows, int64_t cols, int64_t ld,
                                     int batch, int64_t stride, const char *what) {
  cublasLtMatrixLayout_t l;
  LT(d, ctx, d->api.cublasLtMatrixLayoutCreate(&l, lt_type(t), (uint64_t)rows, (uint64_t)cols, ld), what);
  if (batch > 1) {
    LT(d, ctx, d->api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), what);
    LT(d, ctx, d->api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                       sizeof stride),
       what);
  }
  return l;
}

/* cuBLASLt's best algorithm for c's descriptors within the workspace:
 * CUBLAS_STATUS_SUCCESS with one, else why not (NOT_SUPPORTED, or SUCCESS
 * with none found, as cublasLtMatmulAlgoGetHeuristic documents both). */
static cublasStatus_t heuristic(cuda_device *d, tg_ctx *ctx, const lt_call *c, cublasLtMatmulHeuristicResult_t *res,
                                const char *what) {
  tg_cuda_api *A = &d->api;
  cublasLtMatmulPreference_t pref;
  LT(d, ctx, A->cublasLtMatmulPreferenceCreate(&pref), what);
  uint64_t ws = TG_CUBLASLT_WORKSPACE;
  LT(d, ctx, A->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
     what);
  /* the pointers' alignment, so that no algorithm needing more is chosen
   * (cuBLASLt assumes 256 bytes unless told) */
  for (int i = 0; i < 4; i++)
    LT(d, ctx,
       A->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i, &c->align[i],
                                               sizeof c->align[i]),
       what);
  int found = 0;
  cublasStatus_t s = A->cublasLtMatmulAlgoGetHeuristic(d->lt, c->desc, c->a, c->b, c->c, c->c, pref, 1, res, &found);
  A->cublasLtMatmulPreferenceDestroy(pref);
  return s == CUBLAS_STATUS_SUCCESS && found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : s;
}

/* The alignment cuBLASLt may count on for an address (or offset from a
 * 256-byte aligned base): its lowest set bit, at most 256 (the heuristic's
 * default assumption). */
static uint32_t alignment_of(uint64_t at) { return at % 256 == 0 ? 256 : (uint32_t)(at & -at); }

static void choose_algo(cuda_device *d, tg_ctx *ctx, const tg_cuda_matmul *M, lt_call *c, const char *what);

/* The descriptors of one matmul, and its algorithm: chosen once per shape
 * by cuBLASLt's heuristic and kept on the device for every later graph. */
static void make_lt_call(cuda_device *d, tg_ctx *ctx, const tg_cuda_matmul *M, lt_call *c, const char *what) {
  tg_cuda_api *A = &d->api;
  LT(d, ctx, A->cublasLtMatmulDescCreate(&c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
  int32_t ta = M->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = M->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint32_t epi = M->aux_node >= 0 && M->aux_read ? CUBLASLT_EPILOGUE_DGELU
                 : M->aux_node >= 0             ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                 : M->bias_written              ? (strcmp(M->epilogue, "CUBLASLT_EPILOGUE_BGRADB") ? CUBLASLT_EPILOGUE_BGRADA
                                                                                                   : CUBLASLT_EPILOGUE_BGRADB)
                 : M->bias_node >= 0            ? CUBLASLT_EPILOGUE_BIAS
                                                : CUBLASLT_EPILOGUE_DEFAULT;
  LT(d, ctx, A->cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), what);
  LT(d, ctx, A->cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), what);
  LT(d, ctx, A->cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), what);
  if (M->bias_node >= 0) {
    /* the bias in D's type (the pointer is set before each call: matmul()) */
    int32_t bt = (int32_t)lt_type(M->c_type);
    LT(d, ctx, A->cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), what);
  }
  if (M->aux_node >= 0) {
    int64_t ld = M->aux_ld;
    LT(d, ctx, A->cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld), what);
  }
  c->a = layout(d, ctx, M->a_type, M->a_rows, M->a_cols, M->lda, M->batch_count, M->a_batch_stride, what);
  c->b = layout(d, ctx, M->b_type, M->b_rows, M->b_cols, M->ldb, M->batch_count, M->b_batch_stride, what);
  c->c = layout(d, ctx, M->c_type, M->m, M->n, M->ldc, M->batch_count, M->c_batch_stride, what);
  c->epilogue = epi;
  /* the pointers' alignment, the arena and every tensor being 256-byte
   * aligned: what the offsets leave (matmul() checks the pointers) */
  int64_t offset_bytes[4] = {M->a_offset * (int64_t)tg_dtype_size(M->a_type),
                             M->b_offset * (int64_t)tg_dtype_size(M->b_type),
                             M->c_offset * (int64_t)tg_dtype_size(M->c_type), 0};
  offset_bytes[3] = offset_bytes[2];
  for (int i = 0; i < 4; i++) c->align[i] = alignment_of((uint64_t)offset_bytes[i]);
  choose_algo(d, ctx, M, c, what);
}

/* The algorithm for c, for pointers aligned as c->align says: the device's
 * cached one for the same problem, else cuBLASLt's heuristic's (with the
 * epilogue, else without it: lt_call's fallback). */
static void choose_algo(cuda_device *d, tg_ctx *ctx, const tg_cuda_matmul *M, lt_call *c, const char *what) {
  tg_cuda_api *A = &d->api;
  const uint32_t epi = c->epilogue;
  uint64_t key = 1469598103934665603ull;
  int64_t f[] = {M->a_type, M->b_type, M->c_type, M->trans_a, M->trans_b, M->m, M->n, M->k, M->lda, M->ldb, M->ldc,
                 M->batch_count, M->a_batch_stride, M->b_batch_stride, M->c_batch_stride, epi,
                 /* alignment matters to the algorithm */
                 c->align[0], c->align[1], c->align[2]};
  for (size_t i = 0; i < sizeof f / sizeof *f; i++) key = mix(key, (uint64_t)f[i]);
  LT(d, ctx, A->cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), what);
  c->fallback = 0;
  for (int i = 0; i < d->n_algos; i++)
    if (d->algos[i].key == key) {
      c->algo = d->algos[i].algo;
      if ((c->fallback = d->algos[i].fallback)) {
        uint32_t plain = CUBLASLT_EPILOGUE_DEFAULT;
        LT(d, ctx, A->cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &plain, sizeof plain),
           what);
      }
      return;
    }
  cublasLtMatmulHeuristicResult_t res;
  cublasStatus_t s = heuristic(d, ctx, c, &res, what);
  /* No algorithm with the epilogue (cuBLASLt has BGRADA and BGRADB for one
   * transposition each, and may lack others for a type or shape): the plain
   * GEMM, then the epilogue as a kernel (matmul()).  The backend's kernels
   * take one column-major product of f32 or bf16, the plan's matmuls with
   * an epilogue. */
  if (s != CUBLAS_STATUS_SUCCESS && epi != CUBLASLT_EPILOGUE_DEFAULT && M->batch_count == 1 &&
      (M->c_type == TG_F32 || M->c_type == TG_BF16) && M->a_type == M->c_type && M->b_type == M->c_type) {
    uint32_t plain = CUBLASLT_EPILOGUE_DEFAULT;
    LT(d, ctx, A->cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &plain, sizeof plain), what);
    c->fallback = epi;
    s = heuristic(d, ctx, c, &res, what);
  }
  if (s != CUBLAS_STATUS_SUCCESS)
    tg_error(ctx, (tg_loc){0}, "cuBLASLt has no algorithm for %s (m %lld, n %lld, k %lld, batch %d%s): %s", what,
             (long long)M->m, (long long)M->n, (long long)M->k, M->batch_count,
             c->fallback ? ", nor without its epilogue" : "", lt_error(d, s));
  c->algo = res.algo;
  if (d->n_algos == d->cap_algos) {
    d->cap_algos = d->cap_algos ? 2 * d->cap_algos : 32;
    d->algos = tg_xrealloc(d->algos, sizeof *d->algos * (size_t)d->cap_algos);
  }
  d->algos[d->n_algos++] = (algo_entry){key, c->algo, c->fallback};
}


/* "kernel f_3fa2c91b0e (std.tg:15-17)", "matmul k3 (gpt2.tg:30)": for messages */
static const char *op_what(cuda_exec *e, int i) {
  const tg_cuda_op *op = &e->plan->ops[i];
  const char *where = e->plan->where[op->kernel];
  if (op->kind == TG_CUDA_LAUNCH) return tg_sprintf(e->arena, "kernel %s (%s)", op->launch.function, where);
  if (op->kind == TG_CUDA_MATMUL) return tg_sprintf(e->arena, "the matmul of k%d (%s)", op->kernel, where);
  if (op->node >= 0)
    return tg_sprintf(e->arena, "the %s of k%d (%s)", tg_ops[e->base.g->nodes[op->node]->op].name, op->kernel, where);
  return tg_sprintf(e->arena, "the collectives of bucket %d after k%d", op->bucket, op->kernel);
}

/* Compiling the units on several threads: each takes the next unit. */
typedef struct unit_jobs {
  tg_cuda_api *A;
  const char *arch;
  char **src;
  const char **name;
  void **image;
  size_t *size;
  bool *cached, *ok;
  char (*err)[8192];
  int n, next;
  pthread_mutex_t lock;
} unit_jobs;

static void *compile_units(void *arg) {
  unit_jobs *J = arg;
  for (;;) {
    pthread_mutex_lock(&J->lock);
    int i = J->next++;
    pthread_mutex_unlock(&J->lock);
    if (i >= J->n) return NULL;
    J->ok[i] = J->A->compile(J->src[i], J->name[i], J->arch, &J->image[i], &J->size[i], &J->cached[i], J->err[i],
                             sizeof J->err[i]);
  }
}

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The whole generated CUDA, when it is wanted: the emulated device compiles
 * it as one file, and --source writes it out.  NULL when neither. */
static char *render_source(cuda_device *d, tg_ctx *ctx, const tg_graph *g, const tg_exec_opts *o, cuda_exec *e,
                           const tg_cuda_kernels *ks) {
  char *src = NULL;
  size_t len = 0;
  if (o->source_path || d->emulated) {
    FILE *f = open_memstream(&src, &len);
    if (!f) {
      tg_arena_free(e->arena);
      free(e);
      tg_error(ctx, (tg_loc){g->source, 1, 1}, "out of memory rendering CUDA");
    }
    tg_render_cuda_from(f, e->p, e->plan, ks);
    fclose(f);
  }
  if (o->source_path) {
    FILE *out = fopen(o->source_path, "w");
    if (!out || fwrite(src, 1, len, out) != len || fclose(out)) {
      free(src);
      tg_arena_free(e->arena);
      free(e);
      tg_error(ctx, (tg_loc){o->source_path, 0, 0}, "cannot write the generated CUDA");
    }
  }
  return src;
}

static unit_jobs unit_jobs_make(tg_cuda_api *A, const char *arch, int n) {
  unit_jobs J = {A, arch, NULL, NULL, NULL, NULL, NULL, NULL, NULL, n, 0, PTHREAD_MUTEX_INITIALIZER};
  J.src = tg_xcalloc((size_t)n + 1, sizeof *J.src);
  J.name = tg_xcalloc((size_t)n + 1, sizeof *J.name);
  J.image = tg_xcalloc((size_t)n + 1, sizeof *J.image);
  J.size = tg_xcalloc((size_t)n + 1, sizeof *J.size);
  J.cached = tg_xcalloc((size_t)n + 1, sizeof *J.cached);
  J.ok = tg_xcalloc((size_t)n + 1, sizeof *J.ok);
  J.err = tg_xcalloc((size_t)n + 1, sizeof *J.err);
  return J;
}

/* The sources and images with the arrays (the names are the arena's). */
static void unit_jobs_free(unit_jobs *J) {
  for (int u = 0; u < J->n; u++) {
    free(J->src[u]);
    free(J->image[u]);
  }
  free(J->src), free(J->name), free(J->image), free(J->size), free(J->cached), free(J->ok), free(J->err);
}

/* Runs the jobs on up to `threads` threads, this one among them. */
static void unit_jobs_run(unit_jobs *J, int threads) {
  if (threads > J->n) threads = J->n;
  pthread_t *th = tg_xcalloc((size_t)threads + 1, sizeof *th);
  int started = 0;
  for (int i = 1; i < threads && pthread_create(&th[i], NULL, compile_units, J) == 0; i++) started++;
  compile_units(J);
  for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
  free(th);
}

/* Compiles the kernels and loads them as e's modules, with e->stats; src
 * (render_source's, taken) and name are the whole file's.  The emulated
 * device: the whole file, one host C++ compile; a GPU: each unit its own
 * NVRTC program, compiled in parallel and cached each. */
static void compile_modules(cuda_device *d, tg_ctx *ctx, const tg_graph *g, cuda_exec *e, const tg_cuda_kernels *ks,
                            char *src, const char *name, double t0) {
  tg_cuda_api *A = &d->api;
  int n = d->emulated ? 1 : ks->n_units;
  unit_jobs J = unit_jobs_make(A, d->arch, n);
  if (d->emulated) {
    J.src[0] = src, src = NULL;
    J.name[0] = name;
  } else {
    for (int u = 0; u < n; u++) {
      J.src[u] = tg_cuda_unit_source(ks, u);
      J.name[u] = tg_sprintf(e->arena, "%s.cu", ks->units[u].name);
    }
  }
  free(src);
  double t1 = seconds_now();
  unit_jobs_run(&J, d->emulated ? 1 : tg_nvrtc_threads());
  double t2 = seconds_now();
  int failed = -1;
  e->stats = (tg_compile_stats){.front_seconds = t1 - t0, .back_seconds = t2 - t1,
                                .compiler = d->emulated ? "host C++, emulated device" : "NVRTC",
                                .kernels = ks->n_units, .units = n};
  for (int u = 0; u < n; u++) {
    if (!J.ok[u] && failed < 0) failed = u;
    e->stats.cached += J.ok[u] && J.cached[u];
  }
  e->from_cache = e->stats.cached == n;
  if (failed >= 0) {
    const char *why = tg_sprintf(ctx->arena, "%s", J.err[failed]);
    unit_jobs_free(&J);
    tg_arena_free(e->arena);
    free(e);
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "the generated CUDA does not compile for %s: %s", d->arch, why);
  }
  e->modules = tg_xcalloc((size_t)n + 1, sizeof *e->modules);
  for (int u = 0; u < n; u++) {
    CUresult r = A->cuModuleLoadData(&e->modules[u], J.image[u]);
    if (r != CUDA_SUCCESS) {
      const char *what = tg_sprintf(ctx->arena, "%s", J.name[u]);
      unit_jobs_free(&J);
      for (int v = 0; v < u; v++) A->cuModuleUnload(e->modules[v]);
      free(e->modules);
      tg_arena_free(e->arena);
      free(e);
      cu_fail(d, ctx, r, "cuModuleLoadData", what);
    }
    e->n_modules++;
  }
  unit_jobs_free(&J);
}

/* The dynamic shared memory each function may take: without the opt-in a
 * block may use 48 KiB of static and dynamic shared memory together, so a
 * function that takes any dynamic shared memory opts in to the most that
 * any of its launches asks (the attribute counts the dynamic part alone;
 * the driver refuses a value whose sum with the static part passes the
 * device's per-block limit, and the emulated driver does the same). */
static void opt_in_shared(cuda_device *d, tg_ctx *ctx, cuda_exec *e) {
  int n_ops = e->plan->n_ops;
  for (int i = 0; i < n_ops; i++) {
    const tg_cuda_op *op = &e->plan->ops[i];
    if (op->kind != TG_CUDA_LAUNCH || !op->launch.shared_bytes) continue;
    size_t most = 0;
    bool first = true;
    for (int j = 0; j < n_ops; j++) {
      const tg_cuda_op *o = &e->plan->ops[j];
      if (o->kind != TG_CUDA_LAUNCH || e->fn[j] != e->fn[i]) continue;
      if (j < i && o->launch.shared_bytes) first = false; /* set already, at j */
      if (o->launch.shared_bytes > most) most = o->launch.shared_bytes;
    }
    if (first)
      CU(d, ctx, d->api.cuFuncSetAttribute(e->fn[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)most),
         op_what(e, i));
  }
}

/* Each launch's function (in the module of the unit that defines it) and
 * each matmul's cuBLASLt call. */
static void resolve_ops(cuda_device *d, tg_ctx *ctx, cuda_exec *e, const tg_cuda_kernels *ks) {
  tg_cuda_api *A = &d->api;
  int n_ops = e->plan->n_ops;
  e->fn = tg_xcalloc((size_t)n_ops + 1, sizeof *e->fn);
  e->lt = tg_xcalloc((size_t)n_ops + 1, sizeof *e->lt);
  for (int i = 0; i < n_ops; i++) {
    const tg_cuda_op *op = &e->plan->ops[i];
    if (op->kind == TG_CUDA_LAUNCH) {
      CUmodule m = e->modules[0];
      for (int u = 0; !d->emulated && u < ks->n_units; u++)
        for (int f = 0; f < ks->units[u].n_globals; f++)
          if (!strcmp(ks->units[u].globals[f], op->launch.function)) m = e->modules[u];
      CU(d, ctx, A->cuModuleGetFunction(&e->fn[i], m, op->launch.function), op_what(e, i));
    } else if (op->kind == TG_CUDA_MATMUL) {
      make_lt_call(d, ctx, &op->matmul, &e->lt[i], op_what(e, i));
    }
  }
  opt_in_shared(d, ctx, e);
}

/* The tables' places in one device buffer; their contents come before the first run. */
static void place_tables(cuda_device *d, tg_ctx *ctx, cuda_exec *e, const char *name) {
  tg_cuda_api *A = &d->api;
  int n_ops = e->plan->n_ops;
  e->table_at = tg_xcalloc((size_t)n_ops + 1, sizeof *e->table_at);
  for (int i = 0; i < n_ops; i++) {
    const tg_cuda_launch *L = &e->plan->ops[i].launch;
    if (e->plan->ops[i].kind != TG_CUDA_LAUNCH || !L->n_tables) continue;
    e->table_at[i] = tg_xcalloc((size_t)L->n_tables, sizeof **e->table_at);
    for (int t = 0; t < L->n_tables; t++) {
      e->table_at[i][t] = e->table_bytes;
      e->table_bytes += (tg_cuda_table_bytes(&L->tables[t]) + TG_CUDA_TABLE_ALIGN - 1) / TG_CUDA_TABLE_ALIGN *
                        TG_CUDA_TABLE_ALIGN;
    }
  }
  if (e->table_bytes) {
    e->table_host = tg_xcalloc(e->table_bytes / 8, 8);
    CU(d, ctx, A->cuMemAlloc(&e->tables, e->table_bytes),
       tg_sprintf(e->arena, "the %zu bytes of %s's multi-tensor tables", e->table_bytes, name));
  }
}

static tg_exec *cuda_compile(tg_device *x, tg_ctx *ctx, const tg_graph *g, const tg_exec_opts *o) {
  cuda_device *d = (cuda_device *)x;
  tg_cuda_api *A = &d->api;
  double t0 = seconds_now();
  tg_program *p = tg_lower_ex(ctx, g, o->remat != 0 ? TG_REMAT_ALL : TG_REMAT_NONE);
  cuda_exec *e = tg_xcalloc(1, sizeof *e);
  e->base.d = x;
  e->base.g = g;
  e->p = p;
  e->arena = tg_arena_new();
  e->plan = tg_cuda_plan_make(e->arena, p);
  const tg_cuda_kernels *ks = tg_cuda_kernels_make(e->arena, p, e->plan);
  char *src = render_source(d, ctx, g, o, e, ks);
  const char *name = tg_sprintf(ctx->arena, "%s.cu", o->name ? o->name : "step");
  compile_modules(d, ctx, g, e, ks, src, name, t0);
  resolve_ops(d, ctx, e, ks);
  place_tables(d, ctx, e, name);
  /* the arena and the scratch: one allocation, laid out by memplan */
  e->scratch_at = (p->arena_bytes + 255) / 256 * 256;
  size_t bytes = (size_t)(e->scratch_at + p->scratch_bytes);
  CU(d, ctx, A->cuMemAlloc(&e->mem, bytes ? bytes : 256), tg_sprintf(e->arena, "the %lld bytes of %s's intermediates",
                                                                   (long long)bytes, name));
  CU(d, ctx, A->cuMemsetD8Async(e->mem, 0, bytes, d->stream), name);
  e->own = tg_xcalloc((size_t)p->n_leaves + 1, sizeof *e->own);
  e->bound = tg_xcalloc((size_t)p->n_leaves + 1, sizeof *e->bound);
  e->leaf_of = tg_xmalloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < g->n_nodes; i++) e->leaf_of[i] = -1;
  for (int i = 0; i < p->n_leaves; i++) e->leaf_of[g->nodes[p->leaves[i]]->id] = i;
  int nb = g->allreduce ? g->allreduce->n_buckets : 0;
  e->hooks = tg_xcalloc((size_t)nb + 1, sizeof *e->hooks);
  e->bucket_ev = tg_xcalloc((size_t)nb + 1, sizeof *e->bucket_ev);
  for (int b = 0; b < nb; b++) CU(d, ctx, A->cuEventCreate(&e->bucket_ev[b], CU_EVENT_DISABLE_TIMING), name);
  CU(d, ctx, A->cuEventCreate(&e->comm_done, CU_EVENT_DISABLE_TIMING), name);
  CU(d, ctx, A->cuEventCreate(&e->coll_start, CU_EVENT_DISABLE_TIMING), name);
  e->coll_ev = tg_xcalloc((size_t)e->plan->n_ops + 1, sizeof *e->coll_ev);
  e->coll_pending = tg_xcalloc((size_t)e->plan->n_ops + 1, sizeof *e->coll_pending);
  for (int i = 0; i < e->plan->n_ops; i++)
    if (e->plan->ops[i].kind == TG_CUDA_COLLECTIVE && e->plan->ops[i].node >= 0)
      CU(d, ctx, A->cuEventCreate(&e->coll_ev[i], CU_EVENT_DISABLE_TIMING), name);
  for (int ph = 0; ph <= TG_NPHASES; ph++) CU(d, ctx, A->cuEventCreate(&e->phase_ev[ph], CU_EVENT_DEFAULT), name);
  e->kernel_seconds = tg_xcalloc((size_t)g->n_kernels + 1, sizeof *e->kernel_seconds);
  return &e->base;
}

static void drop_graphs(cuda_exec *e) {
  cuda_device *d = dev_of(&e->base);
  for (int i = 0; i < e->n_graphs; i++)
    if (e->graphs[i].exec) d->api.cuGraphExecDestroy(e->graphs[i].exec);
  free(e->graphs);
  e->graphs = NULL;
  e->n_graphs = e->cap_graphs = 0;
}

static void free_hooks(cuda_exec *e) {
  const tg_allreduce_plan *ar = e->base.g->allreduce;
  for (int b = 0; ar && b < ar->n_buckets; b++) {
    for (int i = 0; i < e->hooks[b].n; i++) free(e->hooks[b].ops[i].ts), free(e->hooks[b].ops[i].parts);
    e->hooks[b].n = 0;
  }
}

static void cuda_free(tg_exec *x) {
  cuda_exec *e = (cuda_exec *)x;
  cuda_device *d = dev_of(x);
  tg_cuda_api *A = &d->api;
  A->cuStreamSynchronize(d->stream);
  drop_graphs(e);
  free_hooks(e);
  const tg_allreduce_plan *ar = x->g->allreduce;
  for (int b = 0; ar && b < ar->n_buckets; b++) {
    free(e->hooks[b].ops);
    A->cuEventDestroy(e->bucket_ev[b]);
  }
  A->cuEventDestroy(e->comm_done);
  if (e->coll_start) A->cuEventDestroy(e->coll_start);
  for (int i = 0; e->coll_ev && i < e->plan->n_ops; i++)
    if (e->coll_ev[i]) A->cuEventDestroy(e->coll_ev[i]);
  for (int ph = 0; ph <= TG_NPHASES; ph++) A->cuEventDestroy(e->phase_ev[ph]);
  if (e->op_ev)
    for (int i = 0; i <= e->plan->n_ops; i++) A->cuEventDestroy(e->op_ev[i]);
  for (int i = 0; i < e->plan->n_ops; i++)
    if (e->lt[i].desc) {
      A->cublasLtMatmulDescDestroy(e->lt[i].desc);
      A->cublasLtMatrixLayoutDestroy(e->lt[i].a);
      A->cublasLtMatrixLayoutDestroy(e->lt[i].b);
      A->cublasLtMatrixLayoutDestroy(e->lt[i].c);
    }
  for (int i = 0; i < e->p->n_leaves; i++)
    if (e->own[i]) tensor_release(e->own[i]);
  A->cuMemFree(e->mem);
  if (e->tables) A->cuMemFree(e->tables);
  for (int i = 0; i < e->plan->n_ops; i++) free(e->table_at[i]);
  free(e->table_at);
  free(e->table_host);
  for (int u = 0; u < e->n_modules; u++) A->cuModuleUnload(e->modules[u]);
  free(e->modules);
  free(e->hooks);
  free(e->bucket_ev);
  free(e->coll_ev);
  free(e->coll_pending);
  free(e->op_ev);
  free(e->kernel_seconds);
  free(e->own);
  free(e->bound);
  free(e->leaf_of);
  free(e->fn);
  free(e->lt);
  tg_arena_free(e->arena);
  free(e);
}

static bool cuda_from_cache(const tg_exec *e) { return ((const cuda_exec *)e)->from_cache; }
static tg_compile_stats cuda_compile_stats(const tg_exec *e) { return ((const cuda_exec *)e)->stats; }

/* ---- leaves ---------------------------------------------------------------------------- */

static cuda_tensor *own_leaf(cuda_exec *e, int i) {
  if (!e->own[i]) {
    cuda_device *d = dev_of(&e->base);
    const tg_node *n = e->base.g->nodes[e->p->leaves[i]];
    e->own[i] = tensor_alloc(d, &n->type, false);
    if (n->op != TG_OP_input && n->init.kind == TG_INIT_ONES) {
      int64_t numel = tg_type_numel(&n->type);
      double *ones = tg_xmalloc(sizeof(double) * (size_t)(numel ? numel : 1));
      for (int64_t k = 0; k < numel; k++) ones[k] = 1;
      cuda_tensor_write(&e->own[i]->base, ones, TG_HOST_F64);
      free(ones);
    }
    e->generation++;
  }
  return e->own[i];
}

static tg_tensor *cuda_leaf(tg_exec *x, const tg_node *n) {
  cuda_exec *e = (cuda_exec *)x;
  int i = e->leaf_of[n->id];
  if (i < 0) return NULL;
  return e->bound[i] ? &e->bound[i]->base : &own_leaf(e, i)->base;
}

static void cuda_bind(tg_exec *x, const tg_node *n, tg_tensor *t) {
  cuda_exec *e = (cuda_exec *)x;
  int i = e->leaf_of[n->id];
  if (i < 0 || e->bound[i] == (cuda_tensor *)t) return;
  e->bound[i] = (cuda_tensor *)t;
  e->generation++; /* the captured graphs hold the old pointer */
  drop_graphs(e);
}

/* Where base value `node` lives on the device, and its extent in bytes. */
static CUdeviceptr value_ptr(cuda_exec *e, int node, size_t *bytes) {
  const tg_storage *s = &e->p->store[node];
  const tg_node *n = e->base.g->nodes[node];
  if (bytes) *bytes = (size_t)tg_type_numel(&n->type) * (size_t)tg_dtype_size(n->type.dtype);
  if (s->place == TG_PLACE_LEAF) {
    cuda_tensor *t = e->bound[s->leaf] ? e->bound[s->leaf] : own_leaf(e, s->leaf);
    if (bytes) *bytes = t->bytes;
    return t->ptr;
  }
  if (s->place == TG_PLACE_ARENA) return e->mem + (CUdeviceptr)s->offset;
  if (s->place == TG_PLACE_SCRATCH) return e->mem + (CUdeviceptr)(e->scratch_at + s->offset);
  return 0;
}

/* ---- running ------------------------------------------------------------------------------ */

static uint64_t table_where(void *ctx, int node, uint64_t *bytes) {
  size_t n = 0;
  CUdeviceptr p = value_ptr(ctx, node, &n);
  *bytes = n;
  return (uint64_t)p;
}

/* Writes every table where the buffers are now (cuda_plan.h), once per
 * generation: before the first run (leaves are made when first needed, so
 * not at load), and after a bind.  It waits for what is queued (which may
 * read the old tables) and for the copy to land before anything can read
 * the new ones: rebinding is rare. */
static void write_tables(cuda_exec *e, tg_ctx *ctx) {
  cuda_device *d = dev_of(&e->base);
  if (!e->table_bytes || (e->tables_written && e->tables_generation == e->generation)) return;
  for (int i = 0; i < e->plan->n_ops; i++) {
    const tg_cuda_launch *L = &e->plan->ops[i].launch;
    for (int t = 0; e->plan->ops[i].kind == TG_CUDA_LAUNCH && t < L->n_tables; t++)
      tg_cuda_table_fill(&L->tables[t], e->table_host + e->table_at[i][t] / 8, table_where, e);
  }
  CU(d, ctx, d->api.cuStreamSynchronize(d->stream), "writing the multi-tensor tables");
  CU(d, ctx, d->api.cuMemcpyHtoDAsync(e->tables, e->table_host, e->table_bytes, d->stream),
     "writing the multi-tensor tables");
  CU(d, ctx, d->api.cuStreamSynchronize(d->stream), "writing the multi-tensor tables");
  e->tables_written = true;
  e->tables_generation = e->generation;
}

static void launch(cuda_exec *e, tg_ctx *ctx, int i) {
  cuda_device *d = dev_of(&e->base);
  const tg_cuda_launch *L = &e->plan->ops[i].launch;
  int n = L->n_args + L->n_tables; /* the buffers, then the tables */
  /* the pointers must stay put until the launch is issued (or captured) */
  CUdeviceptr *ptr = tg_xcalloc((size_t)n + 1, sizeof *ptr);
  void **args = tg_xcalloc((size_t)n + 1, sizeof *args);
  size_t *extent = tg_xcalloc((size_t)n + 1, sizeof *extent);
  const char **names = tg_xcalloc((size_t)n + 1, sizeof *names);
  for (int a = 0; a < L->n_args; a++) {
    ptr[a] = value_ptr(e, L->args[a].node, &extent[a]);
    args[a] = &ptr[a];
    names[a] = tg_sprintf(e->arena, "b%d", L->args[a].node);
  }
  for (int t = 0; t < L->n_tables; t++) {
    int a = L->n_args + t;
    ptr[a] = e->tables + e->table_at[i][t];
    extent[a] = tg_cuda_table_bytes(&L->tables[t]);
    args[a] = &ptr[a];
    names[a] = L->tables[t].param;
  }
  if (d->api.emu_describe_launch)
    d->api.emu_describe_launch(L->function, e->plan->where[e->plan->ops[i].kernel], n, names, extent);
  CUresult r = d->api.cuLaunchKernel(e->fn[i], L->grid[0], L->grid[1], L->grid[2], L->block[0], L->block[1],
                                     L->block[2], (unsigned)L->shared_bytes, d->stream, args, NULL);
  free(ptr);
  free(args);
  free(extent);
  free(names);
  cu_fail(d, ctx, r, "cuLaunchKernel", op_what(e, i));
}

/* Launches fn, one of the backend's own grid-stride kernels, over `work`
 * items with n arguments on stream s, described for the emulated device
 * (names and byte extents); `where` says what it is for. */
static void launch_own(cuda_device *d, tg_ctx *ctx, CUfunction f, long long work, void **args, int n,
                       const char *const *names, const size_t *extents, const char *fn, const char *where, CUstream s) {
  unsigned blocks = (unsigned)((work + 255) / 256 < 8 * d->sm_count ? (work + 255) / 256 : 8 * d->sm_count);
  if (blocks == 0) blocks = 1;
  if (d->api.emu_describe_launch) d->api.emu_describe_launch(fn, where, n, names, extents);
  char what[512];
  snprintf(what, sizeof what, "%s (%s)", fn, where);
  CU(d, ctx, d->api.cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, s, args, NULL), what);
}

/* acc = (first ? 0 : acc) + scale * g over n f32 elements, on stream s. */
static void launch_accumulate(cuda_device *d, tg_ctx *ctx, CUdeviceptr acc, CUdeviceptr g, long long n, float scale,
                              bool first, CUstream s, const char *where) {
  int f = first;
  void *args[] = {&acc, &g, &scale, &f, &n};
  const char *names[] = {"acc", "g", "scale", "first", "n"};
  size_t ext[] = {(size_t)n * 4, (size_t)n * 4, 0, 0, 0};
  launch_own(d, ctx, d->k_accumulate, n, args, 5, names, ext, "tg_accumulate", where, s);
}

/* The epilogue cuBLASLt had no algorithm for (lt_call's fallback), after
 * the plain GEMM wrote D (at dd): render_cuda_runtime.c's kernels, on the
 * column-major m x n product of one type (make_lt_call checks). */
static void epilogue_kernel(cuda_exec *e, tg_ctx *ctx, int i, CUdeviceptr da, CUdeviceptr db, CUdeviceptr dd) {
  cuda_device *d = dev_of(&e->base);
  const tg_cuda_matmul *M = &e->plan->ops[i].matmul;
  const uint32_t epi = e->lt[i].fallback;
  const int bf16 = M->c_type == TG_BF16;
  const size_t es = tg_dtype_size(M->c_type);
  const char *what = tg_sprintf(e->arena, "the epilogue of %s: cuBLASLt has no algorithm with it", op_what(e, i));
  long long m = M->m, n = M->n;
  CUdeviceptr bias = M->bias_node >= 0 ? value_ptr(e, M->bias_node, NULL) : dd;
  if (epi == CUBLASLT_EPILOGUE_BGRADA || epi == CUBLASLT_EPILOGUE_BGRADB) {
    /* op(A)'s rows (over k) or op(B)'s columns, as stored column-major */
    bool of_a = epi == CUBLASLT_EPILOGUE_BGRADA, trans = of_a ? M->trans_a : M->trans_b;
    long long ld = of_a ? M->lda : M->ldb, k = M->k, count = of_a ? m : n;
    long long si = of_a == trans ? ld : 1, sp = of_a == trans ? 1 : ld;
    long long rows = of_a ? M->a_rows : M->b_rows, cols = of_a ? M->a_cols : M->b_cols;
    CUdeviceptr x = of_a ? da : db;
    void *args[] = {&x, &bias, &count, &k, &si, &sp};
    const char *names[] = {of_a ? "A" : "B", "bias", "count", "k", "si", "sp"};
    size_t ext[] = {(size_t)((cols - 1) * ld + rows) * es, (size_t)count * es, 0, 0, 0, 0};
    launch_own(d, ctx, d->k_lt_bgrad[bf16], count, args, 6, names, ext, bf16 ? "tg_lt_bgrad_bf16" : "tg_lt_bgrad_f32",
               what, d->stream);
    return;
  }
  int mode = epi == CUBLASLT_EPILOGUE_BIAS ? 0 : epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? 1 : 2;
  CUdeviceptr aux = M->aux_node >= 0 ? value_ptr(e, M->aux_node, NULL) : dd;
  long long ldd = M->ldc, ldaux = M->aux_node >= 0 ? M->aux_ld : M->ldc, mn = m * n;
  void *args[] = {&dd, &bias, &aux, &m, &n, &ldd, &ldaux, &mode};
  const char *names[] = {"D", "bias", "aux", "m", "n", "ldd", "ldaux", "mode"};
  size_t ext[] = {(size_t)((n - 1) * ldd + m) * es, (size_t)(mode <= 1 ? m : (n - 1) * ldd + m) * es,
                  (size_t)((n - 1) * ldaux + m) * es, 0, 0, 0, 0, 0};
  launch_own(d, ctx, d->k_lt_epilogue[bf16], mn, args, 8, names, ext,
             bf16 ? "tg_lt_epilogue_bf16" : "tg_lt_epilogue_f32", what, d->stream);
}

static void matmul(cuda_exec *e, tg_ctx *ctx, int i) {
  cuda_device *d = dev_of(&e->base);
  const tg_cuda_matmul *M = &e->plan->ops[i].matmul;
  const lt_call *c = &e->lt[i];
  float alpha = (float)M->alpha, beta = (float)M->beta;
  CUdeviceptr a = value_ptr(e, M->a_node, NULL) + (CUdeviceptr)(M->a_offset * tg_dtype_size(M->a_type));
  CUdeviceptr b = value_ptr(e, M->b_node, NULL) + (CUdeviceptr)(M->b_offset * tg_dtype_size(M->b_type));
  CUdeviceptr cc = value_ptr(e, M->node, NULL) + (CUdeviceptr)(M->c_offset * tg_dtype_size(M->c_type));
  /* a pointer less aligned than the algorithm was chosen for (a tensor
   * bound from elsewhere): choose again for what they are */
  const CUdeviceptr at[4] = {a, b, cc, cc};
  bool less = false;
  for (int x = 0; x < 4; x++) less = less || alignment_of(at[x]) < e->lt[i].align[x];
  if (less) {
    for (int x = 0; x < 4; x++) e->lt[i].align[x] = alignment_of(at[x]) < e->lt[i].align[x] ? alignment_of(at[x])
                                                                                         : e->lt[i].align[x];
    choose_algo(d, ctx, M, &e->lt[i], op_what(e, i));
  }
  if (M->bias_node >= 0 && !c->fallback) {
    CUdeviceptr bias = value_ptr(e, M->bias_node, NULL);
    LT(d, ctx, d->api.cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
       op_what(e, i));
  }
  if (M->aux_node >= 0 && !c->fallback) {
    CUdeviceptr aux = value_ptr(e, M->aux_node, NULL);
    LT(d, ctx, d->api.cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
       op_what(e, i));
  }
  LT(d, ctx,
     d->api.cublasLtMatmul(d->lt, c->desc, &alpha, (const void *)a, c->a, (const void *)b, c->b, &beta,
                           (const void *)cc, c->c, (void *)cc, c->c, &c->algo, (void *)d->workspace,
                           TG_CUBLASLT_WORKSPACE, d->stream),
     op_what(e, i));
  if (c->fallback) epilogue_kernel(e, ctx, i, a, b, cc);
}

/* The value n of e's graph as a contiguous f32 array on the device. */
static CUdeviceptr contiguous_f32(cuda_exec *e, const tg_node *n) {
  tg_layout lay;
  if (n->type.dtype != TG_F32 || !tg_layout_of(e->p, n, &lay)) return 0;
  int64_t s = 1;
  for (int k = n->type.rank - 1; k >= 0; k--) {
    if (n->type.dim[k].size > 1 && lay.stride[k] != s) return 0;
    s *= n->type.dim[k].size;
  }
  CUdeviceptr base = value_ptr(e, lay.base, NULL);
  return base ? base + (CUdeviceptr)(lay.offset * 4) : 0;
}

static void enqueue_accumulate(cuda_exec *e, tg_ctx *ctx, const hook_op *h) {
  cuda_device *d = dev_of(&e->base);
  CUdeviceptr g = contiguous_f32(e, h->n);
  if (!g) tg_error(ctx, h->n->loc, "internal: the gradient to accumulate is not contiguous in memory");
  launch_accumulate(d, ctx, h->acc->ptr, g, (long long)tg_type_numel(&h->acc->base.type), h->scale, h->first, d->stream,
                    "the gradient accumulation");
}

static tg_tensor *cuda_value(tg_exec *x, const tg_node *n) {
  CUdeviceptr p = contiguous_f32((cuda_exec *)x, n);
  return p ? view_at(dev_of(x), p, &n->type) : NULL;
}

static int phase_of(cuda_exec *e, int i) {
  const tg_kernel *K = &e->base.g->kernels[e->plan->ops[i].kernel];
  return K->n_nodes ? e->base.g->nodes[K->nodes[0]]->phase : TG_PHASE_FORWARD;
}

/* Records a phase-timing event.  In a capture a plain cuEventRecord makes
 * no node of the graph: replays would never record the event, and
 * synchronizing on it fails with CUDA_ERROR_CAPTURED_EVENT.  So in a
 * capture the record is an event-record node (CU_EVENT_RECORD_EXTERNAL),
 * which each replay records where it stands in the step, rather than one
 * record before and one after the graph launch: those would time only the
 * whole step, and the phases (forward, backward, optimizer) would be lost
 * under graphs.  A phase's time is then the same thing with and without
 * graphs: from its first operation's place in stream order to the next
 * phase's. */
static void record_phase(cuda_exec *e, tg_ctx *ctx, CUevent ev, bool capturing) {
  cuda_device *d = dev_of(&e->base);
  tg_cuda_api *A = &d->api;
  if (capturing) CU(d, ctx, A->cuEventRecordWithFlags(ev, d->stream, CU_EVENT_RECORD_EXTERNAL), "profiling");
  else CU(d, ctx, A->cuEventRecord(ev, d->stream), "profiling");
}

/* An IR collective (lower.h: TG_STEP_COLLECTIVE), plan op i, on the
 * communication stream once the compute stream has reached it: NCCL's
 * sum (f32; lower.c refuses other sums) or its all-gather, bytes as
 * bytes.  The compute stream waits for it where its output is first read
 * (tg_cuda_op.ready_at), so that a gather of parameters runs under the
 * kernels before; but at once where its input is an intermediate, whose
 * memory the kernels after it may reuse (memplan frees it after its last
 * reader, the collective).  One rank: a copy. */
static void enqueue_ir_collective(cuda_exec *e, tg_ctx *ctx, int i, int *n_pending) {
  cuda_device *d = dev_of(&e->base);
  tg_cuda_api *A = &d->api;
  const tg_cuda_op *op = &e->plan->ops[i];
  const tg_node *n = e->base.g->nodes[op->node];
  tg_collective_operands c = tg_collective_operands_of(e->p, n);
  size_t size = (size_t)tg_dtype_size(n->type.dtype);
  CUdeviceptr in = value_ptr(e, c.in.base, NULL) + (CUdeviceptr)((size_t)c.in.offset * size);
  CUdeviceptr out = value_ptr(e, c.out.base, NULL) + (CUdeviceptr)((size_t)c.out.offset * size);
  const char *what = op_what(e, i);
  CU(d, ctx, A->cuEventRecord(e->coll_start, d->stream), what);
  CU(d, ctx, A->cuStreamWaitEvent(d->comm_stream, e->coll_start, 0), what);
  ncclComm_t comm = n->over_tensor ? d->nccl_tensor : d->nccl;
  int group = n->over_tensor ? d->tensor_ranks : d->nranks;
  if (n->ranks != group)
    tg_error(ctx, n->loc, "%s: a collective over %d %sranks, but this run has %d", what, n->ranks,
             n->over_tensor ? "tensor " : "", group);
  if (group == 1 || !comm)
    CU(d, ctx, A->cuMemcpyDtoDAsync(out, in, (size_t)c.out_numel * size, d->comm_stream), what);
  else if (n->op == TG_OP_all_gather)
    NC(d, ctx, A->ncclAllGather((const void *)in, (void *)out, (size_t)c.in_numel * size, ncclUint8, comm,
                                d->comm_stream), what);
  else if (n->op == TG_OP_reduce_scatter)
    NC(d, ctx, A->ncclReduceScatter((const void *)in, (void *)out, (size_t)c.out_numel, ncclFloat32, ncclSum, comm,
                                    d->comm_stream), what);
  else
    NC(d, ctx, A->ncclAllReduce((const void *)in, (void *)out, (size_t)c.out_numel, ncclFloat32,
                                n->op == TG_OP_all_max ? ncclMax : ncclSum, comm, d->comm_stream), what);
  CU(d, ctx, A->cuEventRecord(e->coll_ev[i], d->comm_stream), what);
  if (e->p->store[c.in.base].place != TG_PLACE_LEAF || op->ready_at == i + 1)
    CU(d, ctx, A->cuStreamWaitEvent(d->stream, e->coll_ev[i], 0), what);
  else
    e->coll_pending[(*n_pending)++] = i;
}

/* Queues the whole step; returns whether communication was queued. */
static void enqueue(cuda_exec *e, tg_ctx *ctx, bool capturing) {
  cuda_device *d = dev_of(&e->base);
  tg_cuda_api *A = &d->api;
  bool comm = false, kernels = e->profile == TG_PROFILE_KERNELS && !capturing;
  bool phases = e->profile != TG_PROFILE_OFF;
  for (int ph = 0; ph < TG_NPHASES; ph++) e->phase_started[ph] = false;
  int last_phase = -1, n_pending = 0;
  for (int i = 0; i < e->plan->n_ops; i++) {
    const tg_cuda_op *op = &e->plan->ops[i];
    /* the IR collectives this op reads: the compute stream waits for them now */
    for (int j = 0; j < n_pending;)
      if (e->plan->ops[e->coll_pending[j]].ready_at == i) {
        CU(d, ctx, A->cuStreamWaitEvent(d->stream, e->coll_ev[e->coll_pending[j]], 0), op_what(e, i));
        e->coll_pending[j] = e->coll_pending[--n_pending];
      } else
        j++;
    if (kernels) CU(d, ctx, A->cuEventRecord(e->op_ev[i], d->stream), "profiling");
    if (phases && op->kind != TG_CUDA_COLLECTIVE) {
      int ph = phase_of(e, i);
      if (ph != last_phase && !e->phase_started[ph]) {
        record_phase(e, ctx, e->phase_ev[ph], capturing);
        e->phase_started[ph] = true;
      }
      last_phase = ph;
    }
    if (d->trace && !capturing) {
      if (op->kind == TG_CUDA_LAUNCH) fprintf(d->trace, "launch %s\n", op->launch.function);
      else if (op->kind == TG_CUDA_MATMUL && e->lt[i].fallback)
        fprintf(d->trace, "matmul k%d, then its epilogue as a kernel\n", op->kernel);
      else if (op->kind == TG_CUDA_MATMUL) fprintf(d->trace, "matmul k%d\n", op->kernel);
      else if (op->node >= 0) fprintf(d->trace, "%s k%d\n", tg_ops[e->base.g->nodes[op->node]->op].name, op->kernel);
      else fprintf(d->trace, "allreduce %d\n", op->bucket);
    }
    if (op->kind == TG_CUDA_LAUNCH) {
      launch(e, ctx, i);
    } else if (op->kind == TG_CUDA_MATMUL) {
      matmul(e, ctx, i);
    } else if (op->node >= 0) {
      enqueue_ir_collective(e, ctx, i, &n_pending);
      comm = true;
    } else {
      const hook_list *l = &e->hooks[op->bucket];
      for (int h = 0; h < l->n; h++) {
        const hook_op *ho = &l->ops[h];
        if (ho->kind == HOOK_ACCUMULATE) {
          if (d->trace && !capturing) fprintf(d->trace, "launch tg_accumulate\n");
          enqueue_accumulate(e, ctx, ho);
        } else {
          static const char *const kinds[] = {"", "all-reduce", "reduce-scatter", "all-gather"};
          if (d->trace && !capturing && ho->kind != HOOK_ALLREDUCE)
            fprintf(d->trace, "%s of %d tensors\n", kinds[ho->kind], ho->n_parts);
          /* the bucket is complete on the compute stream: the
           * communication stream waits for that, and only that */
          CU(d, ctx, A->cuEventRecord(e->bucket_ev[op->bucket], d->stream), op_what(e, i));
          CU(d, ctx, A->cuStreamWaitEvent(d->comm_stream, e->bucket_ev[op->bucket], 0), op_what(e, i));
          if (ho->kind == HOOK_ALLREDUCE) enqueue_allreduce(d, ctx, ho->ts, ho->n_ts);
          else enqueue_shard_op(d, ctx, ho);
          comm = true;
        }
      }
    }
    if (d->sync_each) CU(d, ctx, A->cuStreamSynchronize(d->stream), op_what(e, i));
  }
  if (comm) {
    /* the step ends when its communication does: what runs next on the
     * compute stream (the optimizer) sees the averaged gradients */
    CU(d, ctx, A->cuEventRecord(e->comm_done, d->comm_stream), "the end of the step's all-reduces");
    CU(d, ctx, A->cuStreamWaitEvent(d->stream, e->comm_done, 0), "the end of the step's all-reduces");
  }
  if (kernels) CU(d, ctx, A->cuEventRecord(e->op_ev[e->plan->n_ops], d->stream), "profiling");
  if (phases) record_phase(e, ctx, e->phase_ev[TG_NPHASES], capturing);
}

/* Calls the bucket hooks, recording what they ask for; returns the key of
 * this run's graph: everything a captured step holds, the memory a ZeRO
 * collective touches among it. */
static uint64_t record_hooks(cuda_exec *e) {
  cuda_device *d = dev_of(&e->base);
  free_hooks(e);
  uint64_t key = mix(1469598103934665603ull, e->generation);
  const tg_allreduce_plan *ar = e->base.g->allreduce;
  if (!e->base.hook || !ar) return key;
  bool shards = false;
  d->recording = e;
  for (int b = 0; b < ar->n_buckets; b++) {
    d->recording_into = &e->hooks[b];
    tg_exec_call_hook(&e->base, b);
    for (int h = 0; h < e->hooks[b].n; h++) {
      const hook_op *o = &e->hooks[b].ops[h];
      key = mix(mix(mix(key, (uint64_t)b), (uint64_t)o->kind), o->first);
      uint32_t sb;
      memcpy(&sb, &o->scale, 4);
      key = mix(mix(key, sb), o->kind == HOOK_ACCUMULATE ? (uint64_t)o->acc->ptr : (uint64_t)o->n_ts);
      for (int k = 0; k < o->n_parts; k++)
        key = mix(mix(mix(key, o->parts[k].whole), o->parts[k].shard), (uint64_t)o->parts[k].numel);
      shards = shards || o->n_parts;
    }
  }
  d->recording = NULL;
  d->recording_into = NULL;
  /* the staging buffer may have moved since (reserve_staging) */
  return shards ? mix(key, d->shard_staging_generation) : key;
}

static graph_entry *graph_for(cuda_exec *e, uint64_t key) {
  for (int i = 0; i < e->n_graphs; i++)
    if (e->graphs[i].key == key) return &e->graphs[i];
  if (e->n_graphs == e->cap_graphs) {
    e->cap_graphs = e->cap_graphs ? 2 * e->cap_graphs : 4;
    e->graphs = tg_xrealloc(e->graphs, sizeof *e->graphs * (size_t)e->cap_graphs);
  }
  e->graphs[e->n_graphs] = (graph_entry){key, 0, NULL};
  return &e->graphs[e->n_graphs++];
}

static void collect_times(cuda_exec *e);

static void cuda_run(tg_ctx *ctx, tg_exec *x) {
  cuda_exec *e = (cuda_exec *)x;
  cuda_device *d = dev_of(x);
  tg_cuda_api *A = &d->api;
  /* the last profiled run's times first: this run records the same
   * events again (a training step's micro-steps each add theirs) */
  collect_times(e);
  for (int i = 0; i < e->p->n_leaves; i++)
    if (!e->bound[i]) own_leaf(e, i);
  write_tables(e, ctx);
  uint64_t key = record_hooks(e);
  if (e->profile == TG_PROFILE_KERNELS && !e->op_ev) {
    e->op_ev = tg_xcalloc((size_t)e->plan->n_ops + 1, sizeof *e->op_ev);
    for (int i = 0; i <= e->plan->n_ops; i++) CU(d, ctx, A->cuEventCreate(&e->op_ev[i], CU_EVENT_DEFAULT), "profiling");
  }
  bool graphs = d->graphs && e->profile != TG_PROFILE_KERNELS;
  graph_entry *ge = graphs ? graph_for(e, key) : NULL;
  if (ge && !ge->exec && ge->runs >= 1) {
    /* warmed up: capture the step once, then replay it */
    CU(d, ctx, A->cuStreamBeginCapture(d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "capturing the step");
    enqueue(e, ctx, true);
    CUgraph graph;
    CU(d, ctx, A->cuStreamEndCapture(d->stream, &graph), "capturing the step");
    CUresult r = A->cuGraphInstantiateWithFlags(&ge->exec, graph, 0);
    A->cuGraphDestroy(graph);
    cu_fail(d, ctx, r, "cuGraphInstantiateWithFlags", "the captured step");
  }
  if (ge && ge->exec) {
    if (d->trace) fprintf(d->trace, "graph %d ops\n", e->plan->n_ops);
    CU(d, ctx, A->cuGraphLaunch(ge->exec, d->stream), "replaying the step");
  } else {
    enqueue(e, ctx, false);
    if (ge) ge->runs++;
  }
  e->pending = e->profile != TG_PROFILE_OFF;
  if (d->sync_each) CU(d, ctx, A->cuStreamSynchronize(d->stream), "the step");
}

/* Adds the last run's measured times (waiting for it). */
static void collect_times(cuda_exec *e) {
  if (!e->pending) return;
  cuda_device *d = dev_of(&e->base);
  tg_cuda_api *A = &d->api;
  e->pending = false;
  CU(d, d->ctx, A->cuEventSynchronize(e->phase_ev[TG_NPHASES]), "profiling");
  /* phases run in order: each lasts until the next one starts */
  for (int ph = 0; ph < TG_NPHASES; ph++) {
    if (!e->phase_started[ph]) continue;
    int next = TG_NPHASES;
    for (int q = ph + 1; q < TG_NPHASES; q++)
      if (e->phase_started[q]) {
        next = q;
        break;
      }
    float ms = 0;
    if (A->cuEventElapsedTime(&ms, e->phase_ev[ph], e->phase_ev[next]) == CUDA_SUCCESS) e->phase_seconds[ph] += ms / 1e3;
  }
  if (e->profile == TG_PROFILE_KERNELS && e->op_ev) {
    e->kernel_runs++;
    for (int i = 0; i < e->plan->n_ops; i++) {
      float ms = 0;
      if (A->cuEventElapsedTime(&ms, e->op_ev[i], e->op_ev[i + 1]) == CUDA_SUCCESS)
        e->kernel_seconds[e->plan->ops[i].kernel] += ms / 1e3;
    }
  }
}

static bool cuda_read(tg_exec *x, const tg_node *n, void *dst, tg_host_type ht) {
  cuda_exec *e = (cuda_exec *)x;
  cuda_device *d = dev_of(x);
  const tg_graph *g = x->g;
  tg_layout lay;
  if (!tg_layout_of(e->p, n, &lay)) return false;
  const tg_storage *s = &e->p->store[lay.base];
  bool kept = s->place == TG_PLACE_LEAF;
  for (int i = 0; i < g->memplan->n_buffers && !kept; i++)
    kept = g->memplan->buffers[i].node == lay.base && g->memplan->buffers[i].last == g->n_kernels;
  if (!kept) return false;
  size_t bytes;
  CUdeviceptr base = value_ptr(e, lay.base, &bytes);
  char *host = staging(d, bytes + 1);
  read_device(d, host, base, bytes, "reading a result");
  tg_dtype dt = g->nodes[lay.base]->type.dtype;
  int size = tg_dtype_size(dt);
  const tg_type *t = &n->type;
  int64_t numel = tg_type_numel(t), coord[TG_MAX_RANK] = {0};
  for (int64_t i = 0; i < numel; i++) {
    int64_t off = lay.offset;
    for (int k = 0; k < t->rank; k++) off += coord[k] * lay.stride[k];
    tg_host_from_storage(host + off * size, dt, (char *)dst + i * (ht == TG_HOST_F64 ? 8 : 4), ht, 1);
    for (int k = t->rank - 1; k >= 0; k--) {
      if (++coord[k] < t->dim[k].size) break;
      coord[k] = 0;
    }
  }
  return true;
}

static void cuda_accumulate(tg_exec *x, const tg_node *n, tg_tensor *acc, float scale, bool first) {
  cuda_exec *e = (cuda_exec *)x;
  cuda_device *d = dev_of(x);
  hook_op h = {HOOK_ACCUMULATE, n, (cuda_tensor *)acc, scale, first, NULL, 0, NULL, 0};
  if (d->recording == e) hook_push(d->recording_into, h);
  else enqueue_accumulate(e, d->ctx, &h);
}

/* ---- profiling --------------------------------------------------------------------------------- */

static void cuda_profile(tg_exec *x, tg_profile_level level) {
  cuda_exec *e = (cuda_exec *)x;
  if (e->profile != level) drop_graphs(e); /* the events are part of a captured step */
  e->profile = level;
}

static void cuda_phase_seconds(const tg_exec *x, double out[TG_NPHASES]) {
  cuda_exec *e = (cuda_exec *)x;
  collect_times(e);
  for (int p = 0; p < TG_NPHASES; p++) out[p] = e->phase_seconds[p];
}

static void cuda_profile_print(const tg_exec *x, FILE *out, int top) {
  cuda_exec *e = (cuda_exec *)x;
  collect_times(e);
  const tg_graph *g = x->g;
  int n = g->n_kernels;
  double total;
  int *order = tg_kernels_by_time(e->kernel_seconds, n, &total);
  fprintf(out, "profile: %d kernels, %.3f ms in all over %d run%s on %s; the longest:\n", n, total * 1e3,
          e->kernel_runs, e->kernel_runs == 1 ? "" : "s", dev_of(x)->name);
  for (int i = 0; i < n && i < top; i++) {
    const tg_kernel *K = &g->kernels[order[i]];
    fprintf(out, "profile: %8.3f ms %5.1f%%  k%d %s \"%s\" (%s)\n", e->kernel_seconds[order[i]] * 1e3,
            total > 0 ? 100 * e->kernel_seconds[order[i]] / total : 0.0, order[i], tg_kernel_kind_name(K->kind), K->name,
            e->plan->where[order[i]]);
  }
  free(order);
}

#define CUDA_BACKEND_FUNCTIONS                                                                                     \
  .source_suffix = ".cu", .default_precision = "bf16", .close = cuda_close, .describe = cuda_describe, .peak_flops = cuda_peak_flops, .memory_free = cuda_memory_free, .allreduce_average = cuda_allreduce_average, \
  .reduce_scatter = cuda_reduce_scatter, .all_gather = cuda_all_gather, .tensor_view = cuda_tensor_view, .value = cuda_value, \
  .tensor_new = cuda_tensor_new, .tensor_free = cuda_tensor_free, .tensor_write = cuda_tensor_write,                 \
  .tensor_read = cuda_tensor_read, .tensor_hash = cuda_tensor_hash, .compile = cuda_compile, .free = cuda_free,     \
  .from_cache = cuda_from_cache, .compile_stats = cuda_compile_stats, .leaf = cuda_leaf, .bind = cuda_bind, .run = cuda_run, .read = cuda_read,          \
  .accumulate = cuda_accumulate, .profile = cuda_profile, .profile_print = cuda_profile_print,                      \
  .phase_seconds = cuda_phase_seconds

const tg_backend tg_backend_cuda = {
    .name = "cuda",
    .summary = "the fused step as CUDA on an NVIDIA GPU: NVRTC, cuBLASLt, NCCL, CUDA graphs (dlopen'ed)",
    .open = cuda_open,
    .probe = cuda_probe,
    CUDA_BACKEND_FUNCTIONS,
};

const tg_backend tg_backend_cuda_emu = {
    .name = "cuda-emu",
    .summary = "the same CUDA on the emulated device: every kernel run on the CPU, with bounds and race checks",
    .open = emu_open,
    .probe = emu_probe,
    CUDA_BACKEND_FUNCTIONS,
};
