/* test_cuda_zero.c: ZeRO's collectives on the CUDA backend (backend.h:
 * tg_device_reduce_scatter, tg_device_all_gather, tg_tensor_view,
 * tg_exec_value), on the emulated device over 2 ranks.
 *
 * Started alone (as ctest starts it) the test runs itself again under
 * `mpirun -np 2`, as tgrun --nproc does; where there is no mpirun or no
 * MPI in this build, or TG_ZERO_TEST_ONE_RANK is set (the sanitizer build
 * sets it: LeakSanitizer reads Open MPI's allocations as leaks), it runs on
 * one rank.  Each rank runs every
 * test; a failed check on one rank leaves the other waiting in a
 * collective until the rank timeout (60 s here) ends the job.
 *
 * - The reduce-scatter against the CPU backend's on the same inputs, bit
 *   for bit, and against the average computed here: tensors whose sizes
 *   are not multiples of 128, one that fits in rank 0's shard (rank 1
 *   holds none of it), one whose shards are exact; sources and shards
 *   given as tensors and as views into larger ones; with a scale, written
 *   and accumulated.  TG_CUDA_SHARD_CHUNK cuts the staging small, so that
 *   the tensors go in several chunks (one tensor alone larger than one).
 * - The all-gather, in place, of f32 and bf16 tensors: every element ends
 *   as its owner rank left it, on both backends, bit for bit.
 * - In a step: a small model's gradients (tg_exec_value, freed in the
 *   hook) reduce-scattered into shards from its bucket hooks, over four
 *   runs (the first overwriting, then accumulating: the warm-up, the
 *   captured CUDA graph and its replay); the shards must hold exactly
 *   (overwrite ? 0 : shard) + scale * the ranks' average of the gradient
 *   read back from the device, averaged here as tg_comm_average does; and
 *   a tensor all-gathered from the last hook, every element its owner's. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "backends.h"
#include "cuda_api.h"
#include "comm.h"
#include "emu_api.h"
#include "init.h"
#include "passes.h"
#include "shard.h"

static int me, ranks;

/* A value that differs by element, tensor and rank, over many exponents:
 * rounding shows if the sums or scales are done otherwise. */
static float value(int64_t i, int tensor, int rank) {
  return (float)(sin(0.37 * (double)i + 1.3 * rank + 0.71 * tensor) * pow(2.0, (double)((i * 7 + tensor) % 13) - 6));
}

typedef struct side {
  tg_ctx *ctx;
  tg_device *dev;
  jmp_buf bail;
} side;

static void open_side(side *s, const char *backend) {
  s->ctx = tu_ctx();
  s->ctx->bail = &s->bail;
  if (setjmp(s->bail)) ck_abort_msg("%s: %s", backend, tu_errors(s->ctx));
  tg_device_opts o = {.precision = TG_PREC_F32};
  s->dev = tg_device_open_named(s->ctx, backend, &o);
  ck_assert_msg(tg_device_can_shard(s->dev), "backend %s cannot shard", backend);
}

static void close_side(side *s) {
  tg_device_close(s->dev);
  tu_ctx_free(s->ctx);
}

static tg_type vector(tg_dtype dt, int64_t n) {
  tg_type t = {.dtype = dt, .rank = 1};
  t.dim[0].size = n;
  return t;
}

/* The sizes: not multiples of 128, one under a shard (rank 1 of 2 holds
 * none), one exact, one large enough to be a chunk alone. */
static const int64_t sizes[] = {1000, 77, 300, 256, 4100, 1};
enum { N_TENSORS = sizeof sizes / sizeof *sizes };

static bool same_bits(const float *a, const float *b, int64_t n, int64_t *at) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], 4)) {
      *at = i;
      return false;
    }
  return true;
}

/* The reduce-scatter on one backend: tensors 0 and 2 as views (source
 * into one flat buffer, shard into another at an offset), the rest as
 * tensors of their own; returns the shards as read, tensor after tensor. */
static float *reduce_scatter_on(const char *backend, float scale, bool accumulate) {
  side s;
  open_side(&s, backend);
  tg_tensor *flat_src = NULL, *flat_dst = NULL, *src[N_TENSORS], *dst[N_TENSORS];
  tg_type ft = vector(TG_F32, 8192);
  flat_src = tg_tensor_new(s.dev, &ft);
  flat_dst = tg_tensor_new(s.dev, &ft);
  int64_t total = 0;
  for (int t = 0; t < N_TENSORS; t++) {
    int64_t len = tg_shard_extent(sizes[t], ranks, me, NULL);
    tg_type whole = vector(TG_F32, sizes[t]), part = vector(TG_F32, len);
    src[t] = t % 2 == 0 && t < 4 ? tg_tensor_view(flat_src, 1024 * t, &whole) : tg_tensor_new(s.dev, &whole);
    dst[t] = !len ? NULL : t % 2 == 0 && t < 4 ? tg_tensor_view(flat_dst, 128 + 1024 * t, &part)
                                               : tg_tensor_new(s.dev, &part);
    float *h = malloc(sizeof(float) * (size_t)sizes[t]);
    for (int64_t i = 0; i < sizes[t]; i++) h[i] = value(i, t, me);
    tg_tensor_write(src[t], h, TG_HOST_F32);
    for (int64_t i = 0; i < len; i++) h[i] = value(i, t + 10, 0); /* what accumulating adds to */
    if (len) tg_tensor_write(dst[t], h, TG_HOST_F32);
    free(h);
    total += len;
  }
  tg_device_reduce_scatter(s.dev, src, dst, N_TENSORS, scale, accumulate);
  float *out = calloc((size_t)total + 1, sizeof *out), *at = out;
  for (int t = 0; t < N_TENSORS; t++) {
    if (dst[t]) tg_tensor_read(dst[t], at, TG_HOST_F32), at += tg_type_numel(tg_tensor_type(dst[t]));
    tg_tensor_free(src[t]);
    if (dst[t]) tg_tensor_free(dst[t]);
  }
  tg_tensor_free(flat_src);
  tg_tensor_free(flat_dst);
  close_side(&s);
  return out;
}

START_TEST(reduce_scatter_matches_cpu) {
  static const struct {
    float scale;
    bool accumulate;
  } cases[] = {{1.0f, false}, {0.37f, false}, {0.37f, true}, {-3.0f, true}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    float scale = cases[c].scale;
    bool acc = cases[c].accumulate;
    float *cpu = reduce_scatter_on("cpu", scale, acc), *emu = reduce_scatter_on("cuda-emu", scale, acc);
    int64_t k = 0, at;
    for (int t = 0; t < N_TENSORS; t++) {
      int64_t first, len = tg_shard_extent(sizes[t], ranks, me, &first);
      /* the average as tg_comm_average makes it: the sum in rank order (2 ranks: either), times 1/ranks */
      float want[4200];
      for (int64_t i = 0; i < len; i++) {
        float sum = 0;
        for (int q = 0; q < ranks; q++) sum += value(first + i, t, q);
        float avg = sum * (1.0f / (float)ranks), x = avg * scale;
        want[i] = acc ? value(i, t + 10, 0) + x : x;
      }
      ck_assert_msg(same_bits(cpu + k, want, len, &at), "rank %d, tensor %d (%lld elements), scale %g%s: the CPU's "
                    "shard element %lld is %.9g, the average says %.9g", me, t, (long long)sizes[t], scale,
                    acc ? ", accumulated" : "", (long long)at, cpu[k + at], want[at]);
      ck_assert_msg(same_bits(emu + k, cpu + k, len, &at), "rank %d, tensor %d (%lld elements), scale %g%s: the "
                    "emulated device's shard element %lld is %.9g, the CPU's %.9g", me, t, (long long)sizes[t], scale,
                    acc ? ", accumulated" : "", (long long)at, emu[k + at], cpu[k + at]);
      k += len;
    }
    printf("rank %d of %d: reduce-scatter, scale %g, %s: %lld shard elements, the emulated device's bits are the "
           "CPU's\n", me, ranks, scale, acc ? "accumulated" : "written", (long long)k);
    free(cpu), free(emu);
  }
}
END_TEST

/* What rank `owner` holds of tensor t at element i before the gather, and
 * what the others hold there (which the gather must overwrite). */
static float owned(int64_t i, int t, int owner) { return value(i, t + 20, owner); }

static void *all_gather_on(const char *backend) {
  side s;
  open_side(&s, backend);
  tg_tensor *ts[N_TENSORS + 1];
  int64_t total = 0;
  for (int t = 0; t <= N_TENSORS; t++) {
    bool bf16 = t == N_TENSORS; /* the last, a bf16 copy of tensor 0's size */
    int64_t n = bf16 ? sizes[0] : sizes[t];
    tg_type ty = vector(bf16 ? TG_BF16 : TG_F32, n);
    ts[t] = tg_tensor_new(s.dev, &ty);
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      int owner = (int)(i / tg_shard_elements(n, ranks));
      h[i] = owner == me ? owned(i, t, me) : NAN;
    }
    tg_tensor_write(ts[t], h, TG_HOST_F32);
    free(h);
    total += n;
  }
  tg_device_all_gather(s.dev, ts, N_TENSORS + 1);
  float *out = malloc(sizeof(float) * (size_t)total), *at = out;
  for (int t = 0; t <= N_TENSORS; t++) {
    tg_tensor_read(ts[t], at, TG_HOST_F32);
    at += tg_type_numel(tg_tensor_type(ts[t]));
    tg_tensor_free(ts[t]);
  }
  close_side(&s);
  return out;
}

START_TEST(all_gather_matches_cpu) {
  float *cpu = all_gather_on("cpu"), *emu = all_gather_on("cuda-emu");
  int64_t k = 0, at;
  for (int t = 0; t <= N_TENSORS; t++) {
    bool bf16 = t == N_TENSORS;
    int64_t n = bf16 ? sizes[0] : sizes[t];
    float *want = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      want[i] = owned(i, t, (int)(i / tg_shard_elements(n, ranks)));
      if (bf16) { /* as the tensor keeps it: rounded to bf16 */
        uint32_t u;
        memcpy(&u, &want[i], 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&want[i], &u, 4);
      }
    }
    ck_assert_msg(same_bits(cpu + k, want, n, &at), "rank %d, tensor %d: the CPU's element %lld is %.9g, its owner "
                  "wrote %.9g", me, t, (long long)at, cpu[k + at], want[at]);
    ck_assert_msg(same_bits(emu + k, want, n, &at), "rank %d, tensor %d%s: the emulated device's element %lld is "
                  "%.9g, its owner wrote %.9g", me, t, bf16 ? " (bf16)" : "", (long long)at, emu[k + at], want[at]);
    k += n;
    free(want);
  }
  printf("rank %d of %d: all-gather of %d tensors (one bf16), %lld elements: every one its owner's, on both "
         "backends\n", me, ranks, N_TENSORS + 1, (long long)k);
  free(cpu), free(emu);
}
END_TEST

/* ---- in a step: the bucket hooks ----------------------------------------------------- */

typedef struct hooked {
  tg_device *dev;
  const tg_graph *g;
  tg_tensor **shard; /* per graph node: its gradient's shard, or NULL */
  float scale;
  bool accumulate;
  tg_tensor *gathered; /* all-gathered in the last bucket's hook */
} hooked;

static void on_bucket(tg_exec *e, int bucket, void *ctx) {
  hooked *h = ctx;
  const tg_bucket *B = &h->g->allreduce->buckets[bucket];
  tg_tensor **src = calloc((size_t)B->n_grads + 1, sizeof *src), **dst = calloc((size_t)B->n_grads + 1, sizeof *dst);
  for (int i = 0; i < B->n_grads; i++) {
    src[i] = tg_exec_value(e, h->g->nodes[B->grads[i]]);
    dst[i] = h->shard[B->grads[i]];
  }
  tg_device_reduce_scatter(h->dev, src, dst, B->n_grads, h->scale, h->accumulate);
  if (bucket == h->g->allreduce->n_buckets - 1) tg_device_all_gather(h->dev, &h->gathered, 1);
  for (int i = 0; i < B->n_grads; i++) tg_tensor_free(src[i]); /* the views; the work is queued or recorded */
  free(src), free(dst);
}

START_TEST(reduce_scatter_in_the_step) {
  static const char *const model = "config {\n  B = 2\n  T = 8\n  C = 40\n  H = 300\n}\n"
                                   "input x: f32[B, T, C]\n"
                                   "param w1: [C, H] = normal(0.5)\n"
                                   "param b1: [H] = normal(0.5)\n"
                                   "param w2: [H, 3] = normal(0.5)\n"
                                   "param b2: [3] = normal(0.5)\n"
                                   "h = tanh(x @ w1 + b1)\n"
                                   "output loss = sum((h @ w2 + b2) * (h @ w2 + b2))\n";
  char trace[64];
  snprintf(trace, sizeof trace, "/tmp/tg_zero_trace_%d", (int)getpid());
  remove(trace);
  setenv("TG_CUDA_TRACE", trace, 1); /* to see the step replayed as a graph */
  side s;
  open_side(&s, "cuda-emu");
  unsetenv("TG_CUDA_TRACE");
  tg_graph *g = tu_compile(s.ctx, "zero.tg", model, 0, NULL);
  tg_pipeline_opts po = {.precision = TG_PRECISION_F32, .grad = true};
  tg_run_pipeline(s.ctx, g, &po);
  tg_schedule_allreduce(s.ctx, g, 2048, NULL); /* small buckets: several hooks */
  ck_assert_int_ge(g->allreduce->n_buckets, 2);
  tg_exec_opts eo = {.name = "zero", .remat = -1};
  tg_exec *e = tg_exec_compile(s.dev, s.ctx, g, &eo);
  tg_type gt = vector(TG_F32, sizes[0]);
  hooked h = {s.dev, g, calloc((size_t)g->n_nodes, sizeof(tg_tensor *)), 0.25f, false, tg_tensor_new(s.dev, &gt)};
  float *gathered = malloc(sizeof(float) * (size_t)sizes[0]);
  int n_grads = 0;
  for (int b = 0; b < g->allreduce->n_buckets; b++)
    for (int i = 0; i < g->allreduce->buckets[b].n_grads; i++) {
      const tg_node *n = g->nodes[g->allreduce->buckets[b].grads[i]];
      int64_t len = tg_shard_extent(tg_type_numel(&n->type), ranks, me, NULL);
      tg_type t = vector(TG_F32, len);
      if (len) h.shard[n->id] = tg_tensor_new(s.dev, &t);
      n_grads++;
    }
  ck_assert_int_eq(n_grads, 4);
  for (int i = 0; i < g->n_nodes; i++) { /* the same weights on every rank, each rank its own batch */
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_input) continue;
    float *v = malloc(sizeof(float) * (size_t)tg_type_numel(&n->type));
    if (n->op == TG_OP_param) tg_param_init(n, 7, v);
    else
      for (int64_t k = 0; k < tg_type_numel(&n->type); k++) v[k] = value(k, 30, me);
    tg_tensor_write(tg_exec_leaf(e, n), v, TG_HOST_F32);
    free(v);
  }
  tg_exec_on_bucket(e, on_bucket, &h);
  float *want[8] = {0}; /* per gradient: the shard it should hold */
  for (int run = 0; run < 4; run++) {
    h.accumulate = run > 0;
    /* this rank's part of `gathered` (another each run), NaN elsewhere */
    int64_t s_elems = tg_shard_elements(sizes[0], ranks);
    for (int64_t i = 0; i < sizes[0]; i++) gathered[i] = i / s_elems == me ? owned(i, run, me) : NAN;
    tg_tensor_write(h.gathered, gathered, TG_HOST_F32);
    tg_exec_run(s.ctx, e);
    tg_tensor_read(h.gathered, gathered, TG_HOST_F32);
    for (int64_t i = 0; i < sizes[0]; i++) {
      float want = owned(i, run, (int)(i / s_elems));
      ck_assert_msg(!memcmp(&gathered[i], &want, 4), "rank %d, run %d: element %lld of the tensor all-gathered in "
                    "the hook is %.9g, its owner wrote %.9g", me, run, (long long)i, gathered[i], want);
    }
    for (int b = 0, k = 0; b < g->allreduce->n_buckets; b++)
      for (int i = 0; i < g->allreduce->buckets[b].n_grads; i++, k++) {
        const tg_node *n = g->nodes[g->allreduce->buckets[b].grads[i]];
        int64_t numel = tg_type_numel(&n->type), first, len = tg_shard_extent(numel, ranks, me, &first), at;
        float *grad = malloc(sizeof(float) * (size_t)numel);
        ck_assert(tg_exec_read(e, n, grad, TG_HOST_F32));
        tg_comm_average(grad, numel);
        if (!want[k]) want[k] = calloc((size_t)len + 1, sizeof(float));
        for (int64_t j = 0; j < len; j++) want[k][j] = (h.accumulate ? want[k][j] : 0) + grad[first + j] * h.scale;
        free(grad);
        if (!len) continue;
        float *got = malloc(sizeof(float) * (size_t)len);
        tg_tensor_read(h.shard[n->id], got, TG_HOST_F32);
        ck_assert_msg(same_bits(got, want[k], len, &at), "rank %d, run %d, the gradient of %%%d (%lld elements): "
                      "shard element %lld is %.9g, the average says %.9g", me, run, n->id, (long long)numel,
                      (long long)at, got[at], want[k][at]);
        free(got);
      }
  }
  printf("rank %d of %d: %d gradients in %d buckets reduce-scattered, and a tensor all-gathered, from the hooks over 4 "
         "runs (warm-up, capture, replay): every shard exact, every gathered element its owner's\n", me, ranks, n_grads,
         g->allreduce->n_buckets);
  for (int k = 0; k < 8; k++) free(want[k]);
  free(gathered);
  tg_tensor_free(h.gathered);
  for (int i = 0; i < g->n_nodes; i++)
    if (h.shard[i]) tg_tensor_free(h.shard[i]);
  free(h.shard);
  const int n_buckets = g->allreduce->n_buckets; /* g lives in the side's arena, freed next */
  tg_exec_free(e);
  close_side(&s);
  /* run by run: launched op by op twice (overwriting, then the accumulating
   * key's warm-up), captured, replayed */
  size_t bytes;
  char *text = tu_slurp(trace, &bytes);
  int replays = 0, collectives = 0;
  for (const char *p = text; (p = strstr(p, "graph ")); p++) replays++;
  for (const char *p = text; (p = strstr(p, "reduce-scatter of ")); p++) collectives++;
  ck_assert_msg(replays == 2, "%d launches of a captured step in %s, not 2 (the capture's and the replay's)", replays,
                trace);
  ck_assert_msg(collectives == 2 * n_buckets, "%d reduce-scatters run op by op, not one a bucket in 2 runs",
                collectives);
  free(text);
  remove(trace);
}
END_TEST

/* ---- the emulated NCCL's calls themselves ------------------------------------------------ */

#define NCK(call, want)                                                                                        \
  do {                                                                                                         \
    ncclResult_t r_ = (call);                                                                                  \
    ck_assert_msg(r_ == (want), "%s: %d, not %d: %s", #call, r_, (want), api.emu_last_error());                \
  } while (0)

/* What the backend does not use (out of place) must work; what NCCL
 * refuses or leaves undefined must be refused, with a message; nothing is
 * refused on one rank and run on the other (the checks come before MPI). */
START_TEST(emulated_nccl_calls) {
  tg_cuda_api api;
  tg_cuda_api_emulated(&api);
  CUcontext cu;
  ck_assert_int_eq(api.cuInit(0), CUDA_SUCCESS);
  ck_assert_int_eq(api.cuDevicePrimaryCtxRetain(&cu, 0), CUDA_SUCCESS);
  ck_assert_int_eq(api.cuCtxSetCurrent(cu), CUDA_SUCCESS);
  ncclUniqueId id;
  NCK(api.ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm;
  NCK(api.ncclCommInitRank(&comm, ranks, id, me), ncclSuccess);
  CUstream st;
  ck_assert_int_eq(api.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  enum { COUNT = 300 };
  CUdeviceptr whole, part;
  ck_assert_int_eq(api.cuMemAlloc(&whole, sizeof(float) * COUNT * (size_t)ranks), CUDA_SUCCESS);
  ck_assert_int_eq(api.cuMemAlloc(&part, sizeof(float) * COUNT), CUDA_SUCCESS);
  float *w = (float *)whole, *mine = (float *)part; /* the emulated device's memory is the host's */
  for (int i = 0; i < COUNT * ranks; i++) w[i] = value(i, 40, me);
  /* out of place: rank me's block of the average */
  NCK(api.ncclReduceScatter((void *)whole, (void *)part, COUNT, ncclFloat32, ncclAvg, comm, st), ncclSuccess);
  ck_assert_int_eq(api.cuStreamSynchronize(st), CUDA_SUCCESS);
  for (int i = 0; i < COUNT; i++) {
    float sum = 0;
    for (int q = 0; q < ranks; q++) sum += value(me * COUNT + i, 40, q);
    ck_assert_float_eq(mine[i], sum * (1.0f / (float)ranks));
  }
  /* out of place: every rank's block to every rank */
  for (int i = 0; i < COUNT; i++) mine[i] = value(i, 41, me);
  NCK(api.ncclAllGather((void *)part, (void *)whole, COUNT, ncclFloat32, comm, st), ncclSuccess);
  ck_assert_int_eq(api.cuStreamSynchronize(st), CUDA_SUCCESS);
  for (int i = 0; i < COUNT * ranks; i++) ck_assert_float_eq(w[i], value(i % COUNT, 41, i / COUNT));
  /* nothing to do */
  NCK(api.ncclReduceScatter((void *)whole, (void *)part, 0, ncclFloat32, ncclAvg, comm, st), ncclSuccess);
  NCK(api.ncclAllGather((void *)part, (void *)whole, 0, ncclBfloat16, comm, st), ncclSuccess);
  /* refused */
  static const struct {
    const char *what, *says;
  } refusals[] = {
      {"a reduce-scatter of bf16", "averages and sums f32 only"},
      {"a reduce-scatter's maximum (the emulation averages and sums only)", "averages and sums f32 only"},
      {"a reduce-scatter into its send buffer, not in place", "other than in place"},
      {"an all-gather from its receive buffer, not in place", "other than in place"},
      {"an all-gather of a type nccl.h lacks", "none of nccl.h's"},
      {"an all-gather of a NULL send buffer", "a NULL send buffer"},
      {"a reduce-scatter without a communicator", "no communicator"},
      {"counts past MPI's", "past what the emulated NCCL passes to MPI"},
  };
  const void *send = (const void *)whole;
  void *at_wrong = (void *)(whole + 4 * (me == 0 ? 1 : 0)); /* overlaps, never rank me's place */
  for (size_t k = 0; k < sizeof refusals / sizeof *refusals; k++) {
    ncclResult_t r;
    switch (k) {
    case 0: r = api.ncclReduceScatter(send, (void *)part, COUNT, ncclBfloat16, ncclAvg, comm, st); break;
    case 1: r = api.ncclReduceScatter(send, (void *)part, COUNT, ncclFloat32, (ncclRedOp_t)2, comm, st); break;
    case 2: r = api.ncclReduceScatter(send, at_wrong, COUNT, ncclFloat32, ncclAvg, comm, st); break;
    case 3: r = api.ncclAllGather(at_wrong, (void *)whole, COUNT, ncclFloat32, comm, st); break;
    case 4: r = api.ncclAllGather((void *)part, (void *)whole, COUNT, (ncclDataType_t)12, comm, st); break;
    case 5: r = api.ncclAllGather(NULL, (void *)whole, COUNT, ncclFloat32, comm, st); break;
    case 6: r = api.ncclReduceScatter(send, (void *)part, COUNT, ncclFloat32, ncclAvg, NULL, st); break;
    default: r = api.ncclAllGather((void *)part, (void *)whole, (size_t)1 << 31, ncclFloat32, comm, st); break;
    }
    ck_assert_msg(r == ncclInvalidArgument, "%s: %d, not refused", refusals[k].what, r);
    ck_assert_msg(strstr(api.emu_last_error(), refusals[k].says), "%s: the message is \"%s\"", refusals[k].what,
                  api.emu_last_error());
  }
  /* in place: the backend's way; both ranks' blocks right after */
  for (int i = 0; i < COUNT * ranks; i++) w[i] = value(i, 42, me);
  NCK(api.ncclReduceScatter((void *)whole, (void *)(whole + sizeof(float) * COUNT * (size_t)me), COUNT, ncclFloat32,
                            ncclAvg, comm, st),
      ncclSuccess);
  NCK(api.ncclAllGather((void *)(whole + sizeof(float) * COUNT * (size_t)me), (void *)whole, COUNT, ncclFloat32, comm,
                        st),
      ncclSuccess);
  ck_assert_int_eq(api.cuStreamSynchronize(st), CUDA_SUCCESS);
  for (int i = 0; i < COUNT * ranks; i++) {
    float sum = 0;
    for (int q = 0; q < ranks; q++) sum += value(i, 42, q);
    ck_assert_float_eq(w[i], sum * (1.0f / (float)ranks));
  }
  printf("rank %d of %d: the emulated NCCL's reduce-scatter and all-gather, in and out of place, and %zu refusals\n",
         me, ranks, sizeof refusals / sizeof *refusals);
  NCK(api.ncclCommDestroy(comm), ncclSuccess);
  api.cuStreamDestroy(st);
  api.cuMemFree(whole), api.cuMemFree(part);
  api.cuDevicePrimaryCtxRelease(0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_zero");
  TCase *t = tcase_create("cuda_zero");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, reduce_scatter_matches_cpu);
  tcase_add_test(t, all_gather_matches_cpu);
  tcase_add_test(t, reduce_scatter_in_the_step);
  tcase_add_test(t, emulated_nccl_calls);
  suite_add_tcase(s, t);
  return s;
}

int main(int argc, char **argv) {
  /* again as 2 ranks, as tgrun --nproc 2 starts them */
  if (!tu_mpi_start(&argc, &argv, 2, "TG_ZERO_TEST_ONE_RANK", &me, &ranks)) return 1;
  setenv("TG_CUDA_SHARD_CHUNK", "8192", 1);
  int rc = tu_run(suite());
  tg_comm_finalize();
  return rc;
}
