/* cpu_backend.c: the CPU backend (backend.h), which runs a
 * fused, planned graph as generated C.
 *
 * The graph is lowered (codegen/lower.h), rendered as C (codegen/c/render_c.h),
 * built into a shared object with the system compiler (runtime/jit/ccjit.h,
 * cached on disk) and loaded with dlopen; its entry points are those of
 * codegen/c/step_abi.h.  Memory is host memory: a tensor is one aligned
 * buffer of its dtype, each leaf has one (its own, or the tensor bound to
 * it), and each compiled graph has the arena memplan planned and the
 * scratch lowering asked for. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ccjit.h"
#include "comm.h"
#include "backend_impl.h"
#include "cpu_gemm.h"
#include "lower.h"
#include "render_c.h"
#include "shard.h"
#include "step_abi.h"

typedef struct cpu_device {
  tg_device base;
  tg_cpu_gemm gemm;   /* the matmuls' library (cpu_gemm.h) */
  const char *cc_flags[8], *cc_libs[4]; /* cc's words: the fixed ones and the library's */
  int n_cc_flags, n_cc_libs;
  char describe[320];
  float *pack;        /* the all-reduce's packed buffer, grown as needed */
  int64_t pack_cap;
  double peak;        /* tg_device_peak_flops, once measured (0: not yet) */
  char peak_what[400];
} cpu_device;

typedef struct cpu_tensor {
  tg_tensor base;
  void *data;         /* numel elements of its dtype, 256-byte aligned */
  bool owned;         /* false: a leaf's own storage, freed with its exec */
} cpu_tensor;

typedef struct cpu_exec {
  tg_exec base;
  tg_program *p;
  void *so;
  tg_step_fn *step;
  int *profile;          /* the object's tg_profile switch */
  double *kernel_seconds;
  void **leaves;         /* per program leaf: the memory the step reads */
  cpu_tensor **own;      /* per program leaf: its own storage, made when first
                          * needed (a bound leaf never needs it) */
  tg_tensor **bound;     /* per program leaf: the tensor bound to it, or NULL */
  int *leaf_of;          /* per graph node: index into leaves, or -1 */
  char *arena, *scratch;
  bool from_cache;
  tg_compile_stats stats;
} cpu_exec;

/* -march=native: the object is built for this very machine (ccjit keys the
 * cache on the CPU).  No -ffast-math: the masked logits are -inf and the
 * reductions must keep their NaN and infinity semantics.  -fno-trapping-math
 * (tg never enables FP traps) lets gcc vectorise loops with a select between
 * a division and something else, and inline floorf: the GELU and softmax
 * loops. */
/* -O2, not -O3: the hot loops are `omp simd` loops, which gcc vectorises
 * at -O2 as well (-fopenmp forces it), and the matmuls are OpenBLAS's;
 * -O3 took twice as long to compile (baby Shakespeare's grad graph: 3.2 s
 * of CPU against 1.7 s) for no step time we could measure (30 steps each,
 * alternately, twice: docs/performance.md). */
static const char *const cc_flags[] = {"-O2", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-w"};
/* OpenBLAS is linked whichever library the matmuls use: sgemv and sbgemm are its */
static const char *const cc_libs[] = {"-lopenblas", "-lm"};
/* cpu_device's arrays hold these and the matmul library's one flag and one file */
_Static_assert(sizeof cc_flags / sizeof *cc_flags + 1 <= 8, "cpu_device.cc_flags too short");
_Static_assert(sizeof cc_libs / sizeof *cc_libs + 1 <= 4, "cpu_device.cc_libs too short");

static void *aligned_zeroed(tg_ctx *ctx, int64_t bytes) {
  size_t n = (size_t)((bytes + 255) / 256 * 256);
  void *p = aligned_alloc(256, n ? n : 256);
  if (!p) {
    if (ctx) tg_error(ctx, (tg_loc){0}, "out of memory allocating %lld bytes for the CPU backend", (long long)bytes);
    fprintf(stderr, "tg: out of memory allocating %lld bytes for the CPU backend\n", (long long)bytes);
    exit(1);
  }
  memset(p, 0, n ? n : 256);
  return p;
}

static int64_t numel_of(const tg_tensor *t) { return tg_type_numel(&t->type); }

/* ---- the device --------------------------------------------------------------- */

static tg_device *cpu_open(tg_ctx *ctx, const tg_device_opts *o) {
  if (o->precision != TG_PREC_F32) tg_error(ctx, (tg_loc){0}, "the cpu backend computes in f32 only");
  cpu_device *d = tg_xcalloc(1, sizeof(cpu_device));
  char why[300];
  if (!tg_cpu_gemm_choose(&d->gemm, why, sizeof why)) {
    free(d);
    tg_error(ctx, (tg_loc){0}, "the cpu backend has no matmul library: %s", why);
  }
  for (size_t i = 0; i < sizeof cc_flags / sizeof *cc_flags; i++) d->cc_flags[d->n_cc_flags++] = cc_flags[i];
  if (d->gemm.flag) d->cc_flags[d->n_cc_flags++] = d->gemm.flag;
  if (d->gemm.link[0]) d->cc_libs[d->n_cc_libs++] = d->gemm.link;
  for (size_t i = 0; i < sizeof cc_libs / sizeof *cc_libs; i++) d->cc_libs[d->n_cc_libs++] = cc_libs[i];
  snprintf(d->describe, sizeof d->describe, "generated C (cc -O2 -fopenmp), matmuls by %s", d->gemm.name);
  return &d->base;
}

static void cpu_close(tg_device *x) {
  cpu_device *d = (cpu_device *)x;
  tg_cpu_gemm_close(&d->gemm);
  free(d->pack);
  free(d);
}

static const char *cpu_describe(const tg_device *d) { return ((const cpu_device *)d)->describe; }

/* A CPU has no datasheet figure tg can look up, so its peak is measured:
 * the matmuls' library's sgemm (cpu_gemm.h) on one core, times the
 * threads the kernels run on (each product's rows are split between them,
 * each part on one core: render_c.c).  Cores that other work keeps busy
 * while it measures lower the figure, and MFU with it, which is what they
 * do to training too. */
static double cpu_peak_flops(tg_device *x, bool bf16, const char **what) {
  cpu_device *d = (cpu_device *)x;
  (void)bf16; /* the CPU computes in f32 */
  *what = d->peak_what;
  if (d->peak > 0) return d->peak;
  char why[160];
  double per_core = tg_cpu_gemm_flops_one_core(&d->gemm, why, sizeof why);
  if (!(per_core > 0)) {
    snprintf(d->peak_what, sizeof d->peak_what, "%s", why);
    return 0;
  }
  /* the kernels' OpenMP threads: OMP_NUM_THREADS (which tgrun sets to the
   * rank's share of the cores, or train.cfg's threads), else every core */
  const char *env = getenv("OMP_NUM_THREADS");
  long threads = env && atol(env) > 0 ? atol(env) : sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  d->peak = per_core * (double)threads;
  snprintf(d->peak_what, sizeof d->peak_what, "measured: %s sgemm 512x512x512 on one core, %.1f GFLOP/s, x %ld thread%s",
           d->gemm.name, per_core * 1e-9, threads, threads == 1 ? "" : "s");
  return d->peak;
}

/* The tensors packed into one buffer, one all-reduce, unpacked: fewer,
 * larger messages than one per tensor. */
static void cpu_allreduce_average(tg_device *x, tg_tensor *const *ts, int n) {
  cpu_device *d = (cpu_device *)x;
  if (tg_comm_size() == 1) return;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += numel_of(ts[i]);
  if (total > d->pack_cap) {
    free(d->pack);
    d->pack = aligned_zeroed(NULL, total * (int64_t)sizeof(float));
    d->pack_cap = total;
  }
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    memcpy(d->pack + at, ((cpu_tensor *)ts[i])->data, sizeof(float) * (size_t)numel_of(ts[i]));
    at += numel_of(ts[i]);
  }
  tg_comm_average(d->pack, at);
  at = 0;
  for (int i = 0; i < n; i++) {
    memcpy(((cpu_tensor *)ts[i])->data, d->pack + at, sizeof(float) * (size_t)numel_of(ts[i]));
    at += numel_of(ts[i]);
  }
}

/* ZeRO's reduce-scatter: the whole gradients packed rank by rank into the
 * device's pack buffer, one MPI reduce-scatter, this rank's block out into
 * the shards (backend.h). */
static void cpu_reduce_scatter(tg_device *x, tg_tensor *const *src, tg_tensor *const *dst, int n, float scale,
                               bool accumulate) {
  cpu_device *d = (cpu_device *)x;
  int ranks = tg_comm_size(), me = tg_comm_rank();
  int64_t total = 0;
  void **from = tg_xcalloc((size_t)n + 1, sizeof *from);
  int64_t *numel = tg_xcalloc((size_t)n + 1, sizeof *numel), *counts = tg_xcalloc((size_t)ranks, sizeof *counts);
  for (int i = 0; i < n; i++) {
    from[i] = ((cpu_tensor *)src[i])->data;
    numel[i] = numel_of(src[i]);
    total += numel[i];
    int64_t want = tg_shard_extent(numel[i], ranks, me, NULL);
    if ((dst[i] ? numel_of(dst[i]) : 0) != want) {
      fprintf(stderr, "tg: internal error: a reduce-scatter into a shard of %lld elements, not %lld\n",
              (long long)(dst[i] ? numel_of(dst[i]) : 0), (long long)want);
      abort();
    }
  }
  if (2 * total > d->pack_cap) { /* the packed gradients, then this rank's block */
    free(d->pack);
    d->pack = aligned_zeroed(NULL, 2 * total * (int64_t)sizeof(float));
    d->pack_cap = 2 * total;
  }
  tg_host_pack_shards(from, numel, n, (int)sizeof(float), ranks, d->pack, counts);
  float *mine = d->pack + total;
  tg_comm_reduce_scatter_average(d->pack, mine, counts);
  for (int i = 0; i < n; i++) {
    if (!dst[i]) continue;
    float *a = ((cpu_tensor *)dst[i])->data;
    int64_t m = numel_of(dst[i]);
    if (!accumulate)
      for (int64_t k = 0; k < m; k++) a[k] = mine[k] * scale;
    else
      for (int64_t k = 0; k < m; k++) a[k] += mine[k] * scale;
    mine += m;
  }
  free(from), free(numel), free(counts);
}

/* ZeRO's all-gather.  Tensors are gathered in groups of up to
 * GATHER_GROUP_BYTES: each rank's shards of a group packed into one
 * buffer, one MPI all-gather, unpacked (one collective per tensor cost
 * 52 round trips a step for a 4-layer GPT); a tensor larger than that is
 * gathered alone, in place, where each rank's part lies. */
enum { GATHER_GROUP_BYTES = 8 << 20 };

static void cpu_all_gather(tg_device *x, tg_tensor *const *ts, int n) {
  (void)x;
  int ranks = tg_comm_size();
  if (ranks == 1) return;
  int64_t *counts = tg_xcalloc((size_t)ranks, sizeof *counts), *displs = tg_xcalloc((size_t)ranks, sizeof *displs);
  char *buf = NULL;
  for (int i = 0; i < n;) {
    int elem = tg_dtype_size(ts[i]->type.dtype);
    int64_t bytes = numel_of(ts[i]) * elem;
    if (bytes >= GATHER_GROUP_BYTES) {
      tg_host_shard_layout(numel_of(ts[i]), ranks, counts, displs);
      tg_comm_all_gather_in_place(((cpu_tensor *)ts[i])->data, counts, displs, elem);
      i++;
      continue;
    }
    /* the group: tensors of this dtype while they fit */
    int j = i;
    int64_t total = 0;
    while (j < n && tg_dtype_size(ts[j]->type.dtype) == elem && total + numel_of(ts[j]) * elem < GATHER_GROUP_BYTES)
      total += numel_of(ts[j++]) * elem;
    buf = buf ? buf : tg_xmalloc(GATHER_GROUP_BYTES);
    void **from = tg_xcalloc((size_t)(j - i) + 1, sizeof *from);
    int64_t *numel = tg_xcalloc((size_t)(j - i) + 1, sizeof *numel);
    for (int k = i; k < j; k++) from[k - i] = ((cpu_tensor *)ts[k])->data, numel[k - i] = numel_of(ts[k]);
    /* every rank's block where it lies in the packed layout, then in place */
    tg_host_pack_shards(from, numel, j - i, elem, ranks, buf, counts);
    for (int q = 0, at = 0; q < ranks; at += (int)counts[q++]) displs[q] = at;
    tg_comm_all_gather_in_place(buf, counts, displs, elem);
    tg_host_unpack_shards(buf, from, numel, j - i, elem, ranks);
    free(from), free(numel);
    i = j;
  }
  free(buf), free(counts), free(displs);
}

/* ---- tensors ---------------------------------------------------------------------- */

static cpu_tensor *tensor_around(tg_device *d, const tg_type *t, void *data, bool owned) {
  cpu_tensor *x = tg_xcalloc(1, sizeof *x);
  x->base.d = d;
  x->base.type = *t;
  x->data = data;
  x->owned = owned;
  return x;
}

static tg_tensor *cpu_tensor_new(tg_device *d, const tg_type *t) {
  return &tensor_around(d, t, aligned_zeroed(NULL, tg_type_numel(t) * tg_dtype_size(t->dtype)), true)->base;
}

static tg_tensor *cpu_tensor_view(tg_tensor *t, int64_t offset, const tg_type *type) {
  char *at = (char *)((cpu_tensor *)t)->data + offset * tg_dtype_size(t->type.dtype);
  return &tensor_around(t->d, type, at, false)->base;
}

static void cpu_tensor_free(tg_tensor *t) {
  cpu_tensor *x = (cpu_tensor *)t;
  if (x->owned) free(x->data);
  free(x);
}

static void cpu_tensor_write(tg_tensor *t, const void *src, tg_host_type ht) {
  tg_host_to_storage(src, ht, ((cpu_tensor *)t)->data, t->type.dtype, numel_of(t));
}

static void cpu_tensor_read(const tg_tensor *t, void *dst, tg_host_type ht) {
  tg_host_from_storage(((const cpu_tensor *)t)->data, t->type.dtype, dst, ht, numel_of(t));
}

static uint64_t cpu_tensor_hash(const tg_tensor *t) {
  return tg_hash_bytes(((const cpu_tensor *)t)->data, (size_t)numel_of(t) * (size_t)tg_dtype_size(t->type.dtype));
}

/* ---- compiling ---------------------------------------------------------------------- */

/* A graph on its way to an exec: rendered, then built (maybe on another
 * thread), then loaded. */
typedef struct pending {
  const cpu_device *dev; /* its cc words */
  const tg_graph *g;
  tg_program *p;
  const char *src; /* in the context's arena */
  struct timespec t0, t1, t2;
  tg_so so;
  bool ok;
  char err[16384];
} pending;

static void render_graph(tg_ctx *ctx, const tg_graph *g, const tg_exec_opts *o, pending *P) {
  memset(P, 0, sizeof *P);
  P->g = g;
  clock_gettime(CLOCK_MONOTONIC, &P->t0);
  /* On a CPU recomputing the GELU's tanh, an exp or a division costs more
   * than the stores it saves; what adds and multiplies remake (layernorm's
   * normalised x) is cheaper remade: by default, only that. */
  P->p = tg_lower_ex(ctx, g, o->remat > 0 ? TG_REMAT_ALL : o->remat == 0 ? TG_REMAT_NONE : TG_REMAT_CHEAP);
  size_t len = 0;
  char *src = NULL;
  FILE *f = open_memstream(&src, &len);
  if (!f) tg_error(ctx, (tg_loc){g->source, 1, 1}, "out of memory rendering C");
  tg_render_c(f, P->p);
  fclose(f);
  /* in the context's arena: nothing to free when a later graph fails */
  P->src = tg_strdup(ctx->arena, src);
  free(src);
  if (o->source_path) {
    FILE *out = fopen(o->source_path, "w");
    if (!out || fwrite(P->src, 1, len, out) != len || fclose(out))
      tg_error(ctx, (tg_loc){o->source_path, 0, 0}, "cannot write the generated C");
  }
  clock_gettime(CLOCK_MONOTONIC, &P->t1);
}

/* cc: the only part that may run on another thread (ccjit is thread safe). */
static void build_graph(pending *P) {
  const cpu_device *d = P->dev;
  P->ok = tg_ccjit_build(P->src, d->cc_flags, d->n_cc_flags, d->cc_libs, d->n_cc_libs, &P->so, P->err, sizeof P->err);
  clock_gettime(CLOCK_MONOTONIC, &P->t2);
}

static double seconds(struct timespec a, struct timespec b) {
  return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

static tg_exec *load_graph(tg_device *d, tg_ctx *ctx, pending *P) {
  const tg_graph *g = P->g;
  tg_program *p = P->p;
  if (!P->ok) {
    if (ctx->err) fprintf(ctx->err, "%s\n", P->err);
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "the CPU backend could not build the generated C (above)");
  }
  static char err[4096];
  void *lib = dlopen(P->so.path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(err, sizeof err, "%s", dlerror());
    tg_so_free(&P->so);
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "cannot load the CPU backend's object: %s", err);
  }
  bool from_cache = P->so.from_cache;
  tg_so_free(&P->so);
  tg_step_fn *step = (tg_step_fn *)dlsym(lib, TG_STEP_SYMBOL);
  const long *arena = dlsym(lib, TG_ARENA_BYTES_SYMBOL);
  const int *n_leaves = dlsym(lib, TG_N_LEAVES_SYMBOL);
  if (!step || !arena || !n_leaves || *arena != p->arena_bytes || *n_leaves != p->n_leaves)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "the CPU backend's object does not match the program");

  cpu_exec *e = tg_xcalloc(1, sizeof *e);
  e->base.d = d;
  e->base.g = g;
  e->p = p;
  e->so = lib;
  e->step = step;
  e->from_cache = from_cache;
  e->stats = (tg_compile_stats){.front_seconds = seconds(P->t0, P->t1), .back_seconds = seconds(P->t1, P->t2),
                                .compiler = "cc", .kernels = 1, .units = 1, .cached = from_cache};
  e->profile = dlsym(lib, TG_PROFILE_SYMBOL);
  e->kernel_seconds = dlsym(lib, TG_KERNEL_SECONDS_SYMBOL);
  e->leaves = tg_xcalloc((size_t)p->n_leaves + 1, sizeof *e->leaves);
  e->own = tg_xcalloc((size_t)p->n_leaves + 1, sizeof *e->own);
  e->bound = tg_xcalloc((size_t)p->n_leaves + 1, sizeof *e->bound);
  e->leaf_of = tg_xmalloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < g->n_nodes; i++) e->leaf_of[i] = -1;
  for (int i = 0; i < p->n_leaves; i++) e->leaf_of[g->nodes[p->leaves[i]]->id] = i;
  e->arena = aligned_zeroed(ctx, p->arena_bytes);
  e->scratch = aligned_zeroed(ctx, p->scratch_bytes);
  return &e->base;
}

static tg_exec *cpu_compile(tg_device *d, tg_ctx *ctx, const tg_graph *g, const tg_exec_opts *o) {
  static pending P;
  render_graph(ctx, g, o, &P);
  P.dev = (const cpu_device *)d;
  build_graph(&P);
  return load_graph(d, ctx, &P);
}

/* Several graphs: rendered in turn, their cc runs one per core (each
 * thread takes the next graph), then loaded in turn; an error is reported
 * for the first graph that has one, after every cc has finished. */
typedef struct build_jobs {
  pending *P;
  int n, next;
  pthread_mutex_t lock;
} build_jobs;

static void *build_worker(void *arg) {
  build_jobs *J = arg;
  for (;;) {
    pthread_mutex_lock(&J->lock);
    int i = J->next++;
    pthread_mutex_unlock(&J->lock);
    if (i >= J->n) return NULL;
    build_graph(&J->P[i]);
  }
}

static void cpu_compile_all(tg_device *d, tg_ctx *ctx, const tg_graph *const *g, const tg_exec_opts *o, int n,
                            tg_exec **out) {
  pending *P = tg_alloc(ctx->arena, sizeof *P * (size_t)(n + 1));
  for (int i = 0; i < n; i++) render_graph(ctx, g[i], &o[i], &P[i]), P[i].dev = (const cpu_device *)d;
  build_jobs J = {P, n, 0, PTHREAD_MUTEX_INITIALIZER};
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const char *env = getenv("TG_COMPILE_THREADS");
  if (env && *env) cores = strtol(env, NULL, 10);
  int threads = cores < 1 ? 1 : cores > n ? n : (int)cores;
  pthread_t *t = tg_xcalloc((size_t)threads + 1, sizeof *t);
  int started = 0;
  for (int i = 1; i < threads && pthread_create(&t[i], NULL, build_worker, &J) == 0; i++) started++;
  build_worker(&J);
  for (int i = 1; i <= started; i++) pthread_join(t[i], NULL);
  free(t);
  /* the builds overlapped: a caller wanting the back end's wall time
   * measures it around this call */
  /* a failed build is reported only after every object is let go */
  for (int i = 0; i < n; i++)
    if (!P[i].ok) {
      for (int j = 0; j < n; j++) tg_so_free(&P[j].so);
      load_graph(d, ctx, &P[i]);
    }
  for (int i = 0; i < n; i++) out[i] = load_graph(d, ctx, &P[i]);
}

static void cpu_free(tg_exec *x) {
  cpu_exec *e = (cpu_exec *)x;
  for (int i = 0; i < e->p->n_leaves; i++)
    if (e->own[i]) {
      free(e->own[i]->data);
      free(e->own[i]);
    }
  free(e->own);
  free(e->bound);
  free(e->leaves);
  free(e->leaf_of);
  free(e->arena);
  free(e->scratch);
  /* The object stays loaded: it brought in libgomp, whose idle worker
   * threads would run unmapped code if it were unloaded under them. */
  free(e);
}

static bool cpu_from_cache(const tg_exec *e) { return ((const cpu_exec *)e)->from_cache; }
static tg_compile_stats cpu_compile_stats(const tg_exec *e) { return ((const cpu_exec *)e)->stats; }

/* Leaf i's own storage, made on first use: zeros, or ones for a
 * parameter or state whose initialiser says so. */
static cpu_tensor *own_leaf(cpu_exec *e, int i) {
  if (!e->own[i]) {
    const tg_node *n = e->base.g->nodes[e->p->leaves[i]];
    int64_t numel = tg_type_numel(&n->type);
    e->own[i] = tensor_around(e->base.d, &n->type, aligned_zeroed(NULL, numel * tg_dtype_size(n->type.dtype)), false);
    if (n->op != TG_OP_input && n->init.kind == TG_INIT_ONES) {
      double one = 1;
      for (int64_t k = 0; k < numel; k++)
        tg_host_to_storage(&one, TG_HOST_F64, (char *)e->own[i]->data + k * tg_dtype_size(n->type.dtype), n->type.dtype, 1);
    }
    if (!e->bound[i]) e->leaves[i] = e->own[i]->data;
  }
  return e->own[i];
}

static tg_tensor *cpu_leaf(tg_exec *x, const tg_node *n) {
  cpu_exec *e = (cpu_exec *)x;
  int i = e->leaf_of[n->id];
  if (i < 0) return NULL;
  return e->bound[i] ? e->bound[i] : &own_leaf(e, i)->base;
}

static void cpu_bind(tg_exec *x, const tg_node *n, tg_tensor *t) {
  cpu_exec *e = (cpu_exec *)x;
  int i = e->leaf_of[n->id];
  if (i < 0) return;
  e->leaves[i] = ((cpu_tensor *)t)->data;
  e->bound[i] = t;
}

/* ---- running ---------------------------------------------------------------------- */

/* Where a collective's operand starts in memory: its leaf or the arena. */
static char *operand_at(cpu_exec *e, const tg_layout *l, tg_dtype dt) {
  const tg_storage *s = &e->p->store[l->base];
  char *base = s->place == TG_PLACE_LEAF ? e->leaves[s->leaf] : e->arena + s->offset;
  return base + l->offset * tg_dtype_size(dt);
}

/* An IR collective (lower.h: TG_STEP_COLLECTIVE) over MPI: sums in f32
 * (lower.c refuses other dtypes for the sums), gathers of any dtype. */
static void run_collective(cpu_exec *e, const tg_node *n) {
  tg_collective_operands c = tg_collective_operands_of(e->p, n);
  tg_dtype dt = n->type.dtype;
  char *in = operand_at(e, &c.in, dt), *out = operand_at(e, &c.out, dt);
  int size = tg_dtype_size(dt), me = n->over_tensor ? tg_comm_tensor_rank() : tg_comm_rank();
  bool was = tg_comm_use_tensor(n->over_tensor);
  if (n->op == TG_OP_all_reduce || n->op == TG_OP_all_max) {
    memmove(out, in, (size_t)(c.in_numel * size));
    if (n->op == TG_OP_all_max) tg_comm_max_floats((float *)out, c.out_numel);
    else tg_comm_sum_floats((float *)out, c.out_numel);
  } else if (n->op == TG_OP_reduce_scatter) {
    tg_comm_reduce_scatter_sum((const float *)in, (float *)out, c.out_numel);
  } else {
    int64_t *counts = tg_xcalloc((size_t)n->ranks, sizeof *counts), *displs = tg_xcalloc((size_t)n->ranks, sizeof *displs);
    for (int q = 0; q < n->ranks; q++) counts[q] = c.in_numel, displs[q] = q * c.in_numel;
    memmove(out + displs[me] * size, in, (size_t)(c.in_numel * size));
    tg_comm_all_gather_in_place(out, counts, displs, size);
    free(counts), free(displs);
  }
  tg_comm_use_tensor(was);
}

/* The step's collective point after (or at) kernel k (step_abi.h): the
 * kernel's collective, then the hooks of the buckets it completes. */
static void at_collective_point(int k, void *ctx) {
  cpu_exec *e = ctx;
  const tg_node *n = tg_kernel_collective(e->p, k);
  if (n) run_collective(e, n);
  const tg_allreduce_plan *ar = e->base.g->allreduce;
  for (int b = 0; ar && b < ar->n_buckets; b++)
    if (ar->buckets[b].after_kernel == k) tg_exec_call_hook(&e->base, b);
}

static void cpu_run(tg_ctx *ctx, tg_exec *x) {
  (void)ctx;
  cpu_exec *e = (cpu_exec *)x;
  for (int i = 0; i < e->p->n_leaves; i++)
    if (!e->leaves[i]) own_leaf(e, i);
  e->step((void *const *)e->leaves, e->arena, e->scratch, at_collective_point, e);
}

/* Where a graph value's elements are, as a layout over a base in memory:
 * a leaf's storage or the arena.  NULL when the value is not in memory
 * (computed where it is read, or in scratch). */
static const char *base_of(cpu_exec *e, const tg_node *n, tg_layout *lay) {
  if (!tg_layout_of(e->p, n, lay)) return NULL;
  const tg_storage *s = &e->p->store[lay->base];
  if (s->place == TG_PLACE_LEAF) return e->leaves[s->leaf];
  if (s->place == TG_PLACE_ARENA) return e->arena + s->offset;
  return NULL;
}

static bool cpu_read(tg_exec *x, const tg_node *n, void *dst, tg_host_type ht) {
  cpu_exec *e = (cpu_exec *)x;
  const tg_graph *g = x->g;
  tg_layout lay;
  const char *base = base_of(e, n, &lay);
  if (!base) return false;
  /* only what lives to the end of the step: leaves and graph outputs */
  bool kept = e->p->store[lay.base].place == TG_PLACE_LEAF;
  for (int i = 0; i < g->memplan->n_buffers && !kept; i++)
    kept = g->memplan->buffers[i].node == lay.base && g->memplan->buffers[i].last == g->n_kernels;
  if (!kept) return false;
  const tg_type *t = &n->type;
  tg_dtype dt = g->nodes[lay.base]->type.dtype;
  int size = tg_dtype_size(dt);
  int64_t numel = tg_type_numel(t), coord[TG_MAX_RANK] = {0};
  for (int64_t i = 0; i < numel; i++) {
    int64_t off = lay.offset;
    for (int d = 0; d < t->rank; d++) off += coord[d] * lay.stride[d];
    char *out = (char *)dst + i * (ht == TG_HOST_F64 ? 8 : 4);
    tg_host_from_storage(base + off * size, dt, out, ht, 1);
    for (int d = t->rank - 1; d >= 0; d--) {
      if (++coord[d] < t->dim[d].size) break;
      coord[d] = 0;
    }
  }
  return true;
}

/* The f32 elements of n in memory now, in order, or NULL. */
static const float *contiguous_f32(cpu_exec *e, const tg_node *n) {
  tg_layout lay;
  const char *base = base_of(e, n, &lay);
  if (!base || n->type.dtype != TG_F32 || lay.offset) return NULL;
  int64_t s = 1;
  for (int d = n->type.rank - 1; d >= 0; d--) {
    if (n->type.dim[d].size > 1 && lay.stride[d] != s) return NULL;
    s *= n->type.dim[d].size;
  }
  return (const float *)base;
}

static tg_tensor *cpu_value(tg_exec *x, const tg_node *n) {
  const float *v = contiguous_f32((cpu_exec *)x, n);
  return v ? &tensor_around(x->d, &n->type, (void *)v, false)->base : NULL;
}

static void cpu_accumulate(tg_exec *x, const tg_node *n, tg_tensor *acc, float scale, bool first) {
  const float *g = contiguous_f32((cpu_exec *)x, n);
  if (!g) {
    fprintf(stderr, "tg: internal error: %s is not contiguous in memory to accumulate\n", n->name ? n->name : "a value");
    abort();
  }
  float *restrict a = ((cpu_tensor *)acc)->data;
  const float *restrict src = g;
  int64_t m = numel_of(acc);
  /* one micro-step (grad_accum = 1), the common case: a copy (it was a
   * scalar loop, 2% of baby Shakespeare's step and serial at 2 threads) */
  if (first && scale == 1.0f) memcpy(a, src, sizeof(float) * (size_t)m);
  else if (first)
    for (int64_t i = 0; i < m; i++) a[i] = src[i] * scale;
  else
    for (int64_t i = 0; i < m; i++) a[i] += src[i] * scale;
}

/* ---- profiling ------------------------------------------------------------------------- */

/* Timing every kernel costs two clock reads each: phases come from it too. */
static void cpu_profile(tg_exec *x, tg_profile_level level) {
  cpu_exec *e = (cpu_exec *)x;
  if (e->profile) *e->profile = level != TG_PROFILE_OFF;
}

static void cpu_phase_seconds(const tg_exec *x, double out[TG_NPHASES]) {
  const cpu_exec *e = (const cpu_exec *)x;
  const tg_graph *g = x->g;
  for (int p = 0; p < TG_NPHASES; p++) out[p] = 0;
  if (!e->kernel_seconds) return;
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    if (K->n_nodes) out[g->nodes[K->nodes[0]]->phase] += e->kernel_seconds[k];
  }
}

static void cpu_profile_print(const tg_exec *x, FILE *out, int top) {
  const cpu_exec *e = (const cpu_exec *)x;
  const tg_graph *g = x->g;
  if (!e->kernel_seconds) return;
  int n = g->n_kernels;
  double total;
  int *order = tg_kernels_by_time(e->kernel_seconds, n, &total);
  fprintf(out, "profile: %d kernels, %.1f ms in all; the longest:\n", n, total * 1e3);
  for (int i = 0; i < n && i < top; i++) {
    const tg_kernel *K = &g->kernels[order[i]];
    fprintf(out, "profile: %7.2f ms %5.1f%%  k%d %s \"%s\"\n", e->kernel_seconds[order[i]] * 1e3,
            total > 0 ? 100 * e->kernel_seconds[order[i]] / total : 0.0, order[i], tg_kernel_kind_name(K->kind), K->name);
  }
  free(order);
}

const tg_backend tg_backend_cpu = {
    .name = "cpu",
    .summary = "the fused step as generated C, built with cc -O2 -fopenmp and OpenBLAS (cached)",
    .source_suffix = ".c",
    .open = cpu_open,
    .close = cpu_close,
    .describe = cpu_describe,
    .peak_flops = cpu_peak_flops,
    .allreduce_average = cpu_allreduce_average,
    .reduce_scatter = cpu_reduce_scatter,
    .all_gather = cpu_all_gather,
    .tensor_view = cpu_tensor_view,
    .value = cpu_value,
    .tensor_new = cpu_tensor_new,
    .tensor_free = cpu_tensor_free,
    .tensor_write = cpu_tensor_write,
    .tensor_read = cpu_tensor_read,
    .tensor_hash = cpu_tensor_hash,
    .compile = cpu_compile,
    .free = cpu_free,
    .from_cache = cpu_from_cache,
    .compile_stats = cpu_compile_stats,
    .compile_all = cpu_compile_all,
    .leaf = cpu_leaf,
    .bind = cpu_bind,
    .run = cpu_run,
    .read = cpu_read,
    .accumulate = cpu_accumulate,
    .profile = cpu_profile,
    .profile_print = cpu_profile_print,
    .phase_seconds = cpu_phase_seconds,
};
