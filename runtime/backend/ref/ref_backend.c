/* ref_backend.c: the reference interpreter (interp.h) as a backend.
 *
 * Tensors are arrays of doubles, as the interpreter keeps every value;
 * binding a leaf points the interpreter at the tensor's array.  The graph
 * runs op by op (tg_interp_run), so every value is still there after the
 * run: the bucket hooks are called after it, in bucket order, which is
 * what a hook can observe of the compiled backends too (each bucket's
 * gradients complete, the later kernels not yet relevant to it). */
#include "interp.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "backend_impl.h"
#include "shard.h"

typedef struct ref_device {
  tg_device base;
  tg_precision prec;
} ref_device;

typedef struct ref_tensor {
  tg_tensor base;
  double *data;
  bool owned; /* false: the interpreter's own leaf storage */
} ref_tensor;

typedef struct ref_exec {
  tg_exec base;
  tg_interp *it;
  ref_tensor **leaf; /* per graph position: the tensor wrapping the leaf's storage, made on demand */
} ref_exec;

static int64_t numel_of(const tg_tensor *t) { return tg_type_numel(&t->type); }

static tg_device *ref_open(tg_ctx *ctx, const tg_device_opts *o) {
  (void)ctx;
  ref_device *d = tg_xcalloc(1, sizeof *d);
  d->prec = o->precision;
  return &d->base;
}

static void ref_close(tg_device *d) { free(d); }

static const char *ref_describe(const tg_device *d) {
  return ((const ref_device *)d)->prec == TG_PREC_F64 ? "the reference interpreter, in double precision"
                                                      : "the reference interpreter, rounding to f32";
}

static void ref_allreduce_average(tg_device *d, tg_tensor *const *ts, int n) {
  (void)d;
  if (tg_comm_size() == 1) return;
  for (int i = 0; i < n; i++) {
    double *v = ((ref_tensor *)ts[i])->data;
    int64_t m = numel_of(ts[i]);
    for (int64_t at = 0; at < m; at += 1 << 28) {
      int c = (int)(m - at < (1 << 28) ? m - at : 1 << 28);
      tg_comm_sum_doubles(v + at, c);
      for (int k = 0; k < c; k++) v[at + k] /= tg_comm_size();
    }
  }
}

/* ZeRO's collectives, in the interpreter's doubles (backend.h). */
static void ref_reduce_scatter(tg_device *d, tg_tensor *const *src, tg_tensor *const *dst, int n, float scale,
                               bool accumulate) {
  (void)d;
  int ranks = tg_comm_size(), me = tg_comm_rank();
  int64_t total = 0;
  void **from = tg_xcalloc((size_t)n + 1, sizeof *from);
  int64_t *numel = tg_xcalloc((size_t)n + 1, sizeof *numel), *counts = tg_xcalloc((size_t)ranks, sizeof *counts);
  for (int i = 0; i < n; i++) {
    from[i] = ((ref_tensor *)src[i])->data;
    numel[i] = numel_of(src[i]);
    total += numel[i];
    if ((dst[i] ? numel_of(dst[i]) : 0) != tg_shard_extent(numel[i], ranks, me, NULL)) {
      fprintf(stderr, "tg: internal error: a reduce-scatter into a tensor that is not this rank's shard\n");
      abort();
    }
  }
  double *pack = tg_xcalloc((size_t)(2 * total) + 1, sizeof *pack), *mine = pack + total;
  tg_host_pack_shards(from, numel, n, (int)sizeof(double), ranks, pack, counts);
  tg_comm_reduce_scatter_average_f64(pack, mine, counts);
  for (int i = 0; i < n; i++) {
    if (!dst[i]) continue;
    double *a = ((ref_tensor *)dst[i])->data;
    for (int64_t k = 0; k < numel_of(dst[i]); k++) a[k] = (accumulate ? a[k] : 0) + (double)scale * *mine++;
  }
  free(pack), free(from), free(numel), free(counts);
}

static void ref_all_gather(tg_device *d, tg_tensor *const *ts, int n) {
  (void)d;
  int ranks = tg_comm_size();
  if (ranks == 1) return;
  int64_t *counts = tg_xcalloc((size_t)ranks, sizeof *counts), *displs = tg_xcalloc((size_t)ranks, sizeof *displs);
  for (int i = 0; i < n; i++) {
    tg_host_shard_layout(numel_of(ts[i]), ranks, counts, displs);
    tg_comm_all_gather_in_place(((ref_tensor *)ts[i])->data, counts, displs, (int)sizeof(double));
  }
  free(counts), free(displs);
}

static ref_tensor *ref_wrap(tg_device *d, const tg_type *t, double *data) {
  ref_tensor *x = tg_xcalloc(1, sizeof *x);
  x->base.d = d;
  x->base.type = *t;
  x->data = data;
  return x;
}

static tg_tensor *ref_tensor_view(tg_tensor *t, int64_t offset, const tg_type *type) {
  return &ref_wrap(t->d, type, ((ref_tensor *)t)->data + offset)->base;
}

static tg_tensor *ref_tensor_new(tg_device *d, const tg_type *t) {
  ref_tensor *x = tg_xcalloc(1, sizeof *x);
  x->base.d = d;
  x->base.type = *t;
  x->data = tg_xcalloc((size_t)tg_type_numel(t) + 1, sizeof(double));
  x->owned = true;
  return &x->base;
}

static void ref_tensor_free(tg_tensor *t) {
  ref_tensor *x = (ref_tensor *)t;
  if (x->owned) free(x->data);
  free(x);
}

static void ref_tensor_write(tg_tensor *t, const void *src, tg_host_type ht) {
  tg_host_to_f64(src, ht, ((ref_tensor *)t)->data, numel_of(t));
}

static void ref_tensor_read(const tg_tensor *t, void *dst, tg_host_type ht) {
  tg_host_from_f64(((const ref_tensor *)t)->data, dst, ht, numel_of(t));
}

static uint64_t ref_tensor_hash(const tg_tensor *t) {
  return tg_hash_bytes(((const ref_tensor *)t)->data, sizeof(double) * (size_t)numel_of(t));
}

static tg_exec *ref_compile(tg_device *d, tg_ctx *ctx, const tg_graph *g, const tg_exec_opts *o) {
  (void)o;
  char why[256];
  if (!tg_interp_check(g, why, sizeof why))
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "%s: the reference interpreter keeps every value; try smaller -D sizes",
             why);
  tg_interp *it = tg_interp_new(g, ((ref_device *)d)->prec);
  if (!it) tg_error(ctx, (tg_loc){g->source, 1, 1}, "out of memory for the reference interpreter (try smaller -D sizes)");
  ref_exec *e = tg_xcalloc(1, sizeof *e);
  e->base.d = d;
  e->base.g = g;
  e->it = it;
  e->leaf = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *e->leaf);
  return &e->base;
}

static void ref_free(tg_exec *x) {
  ref_exec *e = (ref_exec *)x;
  for (int i = 0; i < e->base.g->n_nodes; i++)
    if (e->leaf[i]) ref_tensor_free(&e->leaf[i]->base);
  free(e->leaf);
  tg_interp_free(e->it);
  free(e);
}

static bool ref_from_cache(const tg_exec *e) {
  (void)e;
  return false;
}

static tg_tensor *ref_leaf(tg_exec *x, const tg_node *leaf) {
  ref_exec *e = (ref_exec *)x;
  if (!e->leaf[leaf->id]) {
    ref_tensor *t = tg_xcalloc(1, sizeof *t);
    t->base.d = x->d;
    t->base.type = leaf->type;
    t->data = tg_interp_leaf(e->it, leaf);
    e->leaf[leaf->id] = t;
  }
  return &e->leaf[leaf->id]->base;
}

static void ref_bind(tg_exec *x, const tg_node *leaf, tg_tensor *t) {
  ref_exec *e = (ref_exec *)x;
  tg_interp_bind_leaf(e->it, leaf, ((ref_tensor *)t)->data);
  if (e->leaf[leaf->id]) e->leaf[leaf->id]->data = ((ref_tensor *)t)->data;
}

static void ref_run(tg_ctx *ctx, tg_exec *x) {
  ref_exec *e = (ref_exec *)x;
  tg_interp_run(ctx, e->it);
  const tg_allreduce_plan *ar = x->g->allreduce;
  for (int b = 0; ar && b < ar->n_buckets; b++) tg_exec_call_hook(x, b);
}

static bool ref_read(tg_exec *x, const tg_node *n, void *dst, tg_host_type ht) {
  const double *v = tg_interp_value(((ref_exec *)x)->it, n);
  if (!v) return false;
  tg_host_from_f64(v, dst, ht, tg_type_numel(&n->type));
  return true;
}

static tg_tensor *ref_value(tg_exec *x, const tg_node *n) {
  const double *v = tg_interp_value(((ref_exec *)x)->it, n);
  return v ? &ref_wrap(x->d, &n->type, (double *)v)->base : NULL;
}

static void ref_accumulate(tg_exec *x, const tg_node *n, tg_tensor *acc, float scale, bool first) {
  const double *v = tg_interp_value(((ref_exec *)x)->it, n);
  double *a = ((ref_tensor *)acc)->data;
  for (int64_t i = 0; i < numel_of(acc); i++) a[i] = (first ? 0 : a[i]) + (double)scale * v[i];
}

static void ref_profile(tg_exec *e, tg_profile_level level) { (void)e, (void)level; }

static void ref_profile_print(const tg_exec *e, FILE *out, int top) {
  (void)e, (void)top;
  fprintf(out, "profile: the reference interpreter keeps no per-kernel times\n");
}

static void ref_phase_seconds(const tg_exec *e, double out[TG_NPHASES]) {
  (void)e;
  for (int p = 0; p < TG_NPHASES; p++) out[p] = 0;
}

const tg_backend tg_backend_ref = {
    .name = "ref",
    .summary = "the reference interpreter: op by op, in double precision (or rounding to f32); the oracle",
    .open = ref_open,
    .close = ref_close,
    .describe = ref_describe,
    .allreduce_average = ref_allreduce_average,
    .reduce_scatter = ref_reduce_scatter,
    .all_gather = ref_all_gather,
    .tensor_view = ref_tensor_view,
    .value = ref_value,
    .tensor_new = ref_tensor_new,
    .tensor_free = ref_tensor_free,
    .tensor_write = ref_tensor_write,
    .tensor_read = ref_tensor_read,
    .tensor_hash = ref_tensor_hash,
    .compile = ref_compile,
    .free = ref_free,
    .from_cache = ref_from_cache,
    .leaf = ref_leaf,
    .bind = ref_bind,
    .run = ref_run,
    .read = ref_read,
    .accumulate = ref_accumulate,
    .profile = ref_profile,
    .profile_print = ref_profile_print,
    .phase_seconds = ref_phase_seconds,
};
