/* traffic.h: what each launch of the CUDA step moves and computes, and the
 * time a named GPU would need at its roofline (traffic.c).
 *
 * The bytes are counted from the lowered code itself, not from the graph:
 * a nest's loads and stores are the ones its statements make (emit.h's
 * access list: a value read through a view counts the view's distinct
 * elements; a row read in two sweeps of a kernel counts twice; a value
 * recomputed from others counts those others), a cuBLASLt call reads its
 * operands and writes its result (a scratch product an epilogue then
 * reads again counts twice), flash attention reads and writes its
 * operands once per launch.  What is not counted: caches (every access is
 * taken to go to HBM, except a broadcast view, whose distinct elements
 * are counted once), the runtime's own work (gradient accumulation
 * across micro-steps, the all-reduce) and the optimizer's copies of
 * inputs made by the training loop.
 *
 * The roofline time of a launch is the larger of its bytes over the HBM
 * bandwidth and its FLOPs over the peak rate of what it runs on (bf16
 * tensor cores for bf16 matmuls and flash attention, f32 FMA otherwise).
 * It is a lower bound: no launch overhead, perfect overlap, full
 * bandwidth.
 *
 * A launch that does not fit a GPU is flagged: one touching more than
 * 16 MB on fewer than 4 blocks per SM, or one whose threads walk a
 * dependent chain of more than 1024 elements (a loop carrying a sum). */
#ifndef TG_TRAFFIC_H
#define TG_TRAFFIC_H

#include <stdio.h>

#include "cuda_plan.h"

typedef struct tg_gpu_spec {
  const char *name;          /* "h100": what --gpu takes */
  const char *description;   /* "H100 SXM" */
  double hbm_bytes_per_s;    /* 3.35e12 */
  double bf16_flops_per_s;   /* dense tensor-core bf16 */
  double f32_flops_per_s;    /* f32 FMA (CUDA cores) */
  int sms;
  double l2_bytes;
  double memory_bytes;       /* the HBM, as sold: 80e9; the planner's default device memory */
  const char *driver_key;    /* in the name the driver reports for it: "H100" */
} tg_gpu_spec;

/* The GPUs the report knows, by name ("h100", "h200", "a100"); NULL for an
 * unknown name.  tg_gpu_names() lists them for messages. */
const tg_gpu_spec *tg_gpu_find(const char *name);
const char *tg_gpu_names(void);

/* The spec of the GPU a driver names ("NVIDIA H200", "NVIDIA H100 80GB
 * HBM3": the entry whose driver_key is in it as a whole word; a PCIe or
 * NVL variant gets its family's SXM figures); NULL when none is. */
const tg_gpu_spec *tg_gpu_for_device(const char *driver_name);
/* Whether key is in a driver's GPU name as a whole word ("H100" is in
 * "NVIDIA H100 80GB HBM3", not in "NVIDIA H1000"; "A10" not in "A100"). */
bool tg_gpu_name_has(const char *driver_name, const char *key);

typedef enum tg_traffic_category {
  TG_TRAFFIC_MATMUL,      /* cuBLASLt calls */
  TG_TRAFFIC_EPILOGUE,    /* a matmul kernel's nests: operands made for it, bias, GELU */
  TG_TRAFFIC_ATTENTION,   /* flash attention */
  TG_TRAFFIC_ROW,         /* row kernels: layernorm, softmax, cross-entropy */
  TG_TRAFFIC_ELEMENTWISE,
  TG_TRAFFIC_REDUCE,      /* column and whole-tensor sums */
  TG_TRAFFIC_EMBEDDING,   /* the embedding's backward (scatter-add) */
  TG_TRAFFIC_OPTIMIZER,   /* the multi-tensor AdamW step and the gradient norm */
  TG_TRAFFIC_NCATEGORIES
} tg_traffic_category;

const char *tg_traffic_category_name(tg_traffic_category c);

typedef struct tg_launch_traffic {
  int op;                    /* index into the plan's ops */
  tg_traffic_category category;
  int64_t bytes_read, bytes_written;
  double flops;
  bool tensor_cores;         /* its FLOPs run at the bf16 tensor rate */
  long long blocks;
  int threads;               /* per block */
  int64_t chain;             /* the longest run of dependent elements one thread walks */
  double seconds;            /* roofline time */
  bool compute_bound;
  const char *flag;          /* why it does not fit a GPU, or NULL */
} tg_launch_traffic;

typedef struct tg_traffic {
  const tg_cuda_plan *plan;
  const tg_gpu_spec *gpu;
  tg_launch_traffic *launch; /* launches and matmuls, in run order */
  int n;
  int64_t bytes_read, bytes_written;
  double flops, seconds;
  int n_flagged;
  struct {
    int launches;
    int64_t bytes;
    double flops, seconds;
  } by_category[TG_TRAFFIC_NCATEGORIES];
} tg_traffic;

/* Counts every launch and matmul of plan for gpu (allocated in a). */
tg_traffic *tg_traffic_count(tg_arena *a, const tg_cuda_plan *plan, const tg_gpu_spec *gpu);

/* The report: one row per launch in run order, then the categories and
 * the totals, with the tokens a second tokens_per_step implies (0: not
 * printed).  Every line starts with "traffic: ". */
void tg_traffic_print(FILE *out, const tg_traffic *t, int64_t tokens_per_step);

#endif
