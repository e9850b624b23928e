/* backend.c: the backend interface's dispatch, and what backends share
 * (backend.h, backend_impl.h).
 *
 * Every call goes through the backend's table; the checks here (a leaf of
 * the right graph, a tensor of the right type) are made once for all
 * backends, so that a mistake in the caller is reported the same way
 * whichever backend runs. */
#include "backend.h"
#include "backend_impl.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "shard.h"
#include "half.h"

/* ---- devices ------------------------------------------------------------------ */

tg_device *tg_device_open(tg_ctx *ctx, const tg_backend *x, const tg_device_opts *o) {
  tg_device_opts def = {.precision = TG_PREC_F32};
  tg_device *d = x->open(ctx, o ? o : &def);
  d->x = x;
  return d;
}

void tg_device_close(tg_device *d) {
  if (d) d->x->close(d);
}

const char *tg_device_name(const tg_device *d) { return d->x->name; }

const char *tg_device_describe(const tg_device *d) { return d->x->describe(d); }

const char *tg_device_source_suffix(const tg_device *d) { return d->x->source_suffix; }

void tg_device_allreduce_average(tg_device *d, tg_tensor *const *ts, int n) {
  for (int i = 0; i < n; i++)
    if (ts[i]->d != d || ts[i]->type.dtype != TG_F32) {
      fprintf(stderr, "tg: internal error: all-reduce of a tensor of another device or not f32\n");
      abort();
    }
  d->x->allreduce_average(d, ts, n);
}

/* ---- ZeRO: shards and their collectives ------------------------------------------ */

static bool in_graph(const tg_graph *g, const tg_node *n);

static _Noreturn void misuse(const char *what) {
  fprintf(stderr, "tg: internal error: %s\n", what);
  abort();
}

double tg_device_peak_flops(tg_device *d, bool bf16, const char **what) {
  if (d->x->peak_flops) return d->x->peak_flops(d, bf16, what);
  *what = "the backend does not know its device's peak";
  return 0;
}

bool tg_backend_probe(const tg_backend *x, int local_rank, tg_device_facts *out, char *why, size_t whylen) {
  if (x->probe) return x->probe(local_rank, out, why, whylen);
  snprintf(why, whylen, "backend %s runs on the host: no device to ask", x->name);
  return false;
}

int64_t tg_device_memory_free(tg_device *d, const char **what) {
  return d->x->memory_free ? d->x->memory_free(d, what) : -1;
}

bool tg_device_can_shard(const tg_device *d) {
  return d->x->reduce_scatter && d->x->all_gather && d->x->tensor_view && d->x->value;
}

tg_tensor *tg_tensor_view(tg_tensor *t, int64_t offset, const tg_type *type) {
  if (!t->d->x->tensor_view) misuse("a tensor view on a backend without them");
  if (type->dtype != t->type.dtype || offset < 0 || offset + tg_type_numel(type) > tg_type_numel(&t->type))
    misuse("a tensor view outside its tensor or of another dtype");
  tg_tensor *v = t->d->x->tensor_view(t, offset, type);
  v->d = t->d;
  v->type = *type;
  return v;
}

tg_tensor *tg_exec_value(tg_exec *e, const tg_node *n) {
  if (!e->d->x->value) misuse("a value's memory on a backend without views");
  if (!in_graph(e->g, n) || n->type.dtype != TG_F32) misuse("the memory of a value of another graph, or not f32");
  tg_tensor *v = e->d->x->value(e, n);
  if (!v) misuse("a value that is not contiguous in memory");
  v->d = e->d;
  v->type = n->type;
  return v;
}

void tg_device_reduce_scatter(tg_device *d, tg_tensor *const *src, tg_tensor *const *dst, int n, float scale,
                              bool accumulate) {
  if (!d->x->reduce_scatter) misuse("a reduce-scatter on a backend without one");
  /* the shards' sizes are the backend's to check: it knows the ranks */
  for (int i = 0; i < n; i++)
    if (src[i]->d != d || src[i]->type.dtype != TG_F32 || (dst[i] && (dst[i]->d != d || dst[i]->type.dtype != TG_F32)))
      misuse("a reduce-scatter of another device's tensors, or not f32");
  d->x->reduce_scatter(d, src, dst, n, scale, accumulate);
}

void tg_device_all_gather(tg_device *d, tg_tensor *const *ts, int n) {
  if (!d->x->all_gather) misuse("an all-gather on a backend without one");
  for (int i = 0; i < n; i++)
    if (ts[i]->d != d) misuse("an all-gather of another device's tensor");
  d->x->all_gather(d, ts, n);
}

/* ---- tensors ---------------------------------------------------------------------- */

tg_tensor *tg_tensor_new(tg_device *d, const tg_type *t) {
  tg_tensor *x = d->x->tensor_new(d, t);
  x->d = d;
  x->type = *t;
  return x;
}

void tg_tensor_free(tg_tensor *t) {
  if (t) t->d->x->tensor_free(t);
}

const tg_type *tg_tensor_type(const tg_tensor *t) { return &t->type; }

void tg_tensor_write(tg_tensor *t, const void *src, tg_host_type ht) { t->d->x->tensor_write(t, src, ht); }

void tg_tensor_read(const tg_tensor *t, void *dst, tg_host_type ht) { t->d->x->tensor_read(t, dst, ht); }

uint64_t tg_tensor_hash(const tg_tensor *t) { return t->d->x->tensor_hash(t); }

/* ---- compiled graphs ---------------------------------------------------------------- */

tg_exec *tg_exec_compile(tg_device *d, tg_ctx *ctx, const tg_graph *g, const tg_exec_opts *o) {
  tg_exec_opts def = {.remat = -1};
  tg_exec *e = d->x->compile(d, ctx, g, o ? o : &def);
  e->d = d;
  e->g = g;
  return e;
}

void tg_exec_compile_all(tg_device *d, tg_ctx *ctx, const tg_graph *const *g, const tg_exec_opts *o, int n,
                         tg_exec **out) {
  if (d->x->compile_all) d->x->compile_all(d, ctx, g, o, n, out);
  else
    for (int i = 0; i < n; i++) out[i] = d->x->compile(d, ctx, g[i], &o[i]);
  for (int i = 0; i < n; i++) out[i]->d = d, out[i]->g = g[i];
}

void tg_exec_free(tg_exec *e) {
  if (!e) return;
  for (int i = 0; i < e->n_unread; i++) tg_tensor_free(e->unread_t[i]);
  free(e->unread), free(e->unread_t);
  e->d->x->free(e);
}

const tg_graph *tg_exec_graph(const tg_exec *e) { return e->g; }

bool tg_exec_from_cache(const tg_exec *e) { return e->d->x->from_cache(e); }
tg_compile_stats tg_exec_compile_stats(const tg_exec *e) {
  return e->d->x->compile_stats ? e->d->x->compile_stats(e) : (tg_compile_stats){0};
}

bool tg_exec_is_leaf(const tg_node *n) {
  return n->op == TG_OP_input || n->op == TG_OP_param || n->op == TG_OP_state;
}

static bool in_graph(const tg_graph *g, const tg_node *n) {
  return n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n;
}

tg_tensor *tg_exec_leaf(tg_exec *e, const tg_node *leaf) {
  if (!in_graph(e->g, leaf) || !tg_exec_is_leaf(leaf)) return NULL;
  tg_tensor *t = e->d->x->leaf(e, leaf);
  if (t) return t;
  /* a leaf the step never reads: a tensor apart, written to no effect */
  for (int i = 0; i < e->n_unread; i++)
    if (e->unread[i] == leaf) return e->unread_t[i];
  e->unread = tg_xrealloc(e->unread, sizeof *e->unread * (size_t)(e->n_unread + 1));
  e->unread_t = tg_xrealloc(e->unread_t, sizeof *e->unread_t * (size_t)(e->n_unread + 1));
  e->unread[e->n_unread] = leaf;
  return e->unread_t[e->n_unread++] = tg_tensor_new(e->d, &leaf->type);
}

void tg_exec_bind(tg_exec *e, const tg_node *leaf, tg_tensor *t) {
  char a[TG_TYPE_STR_MAX], b[TG_TYPE_STR_MAX];
  if (!in_graph(e->g, leaf) || !tg_exec_is_leaf(leaf) || t->d != e->d || !tg_type_equal(&leaf->type, &t->type)) {
    fprintf(stderr, "tg: internal error: binding %s '%s' %s to a tensor %s%s\n", leaf ? tg_ops[leaf->op].name : "?",
            leaf && leaf->name ? leaf->name : "?", leaf ? tg_type_str(&leaf->type, a, sizeof a) : "",
            tg_type_str(&t->type, b, sizeof b), t->d != e->d ? " of another device" : "");
    abort();
  }
  e->d->x->bind(e, leaf, t);
}

void tg_exec_run(tg_ctx *ctx, tg_exec *e) { e->d->x->run(ctx, e); }

bool tg_exec_read(tg_exec *e, const tg_node *n, void *dst, tg_host_type ht) {
  if (!in_graph(e->g, n)) return false;
  return e->d->x->read(e, n, dst, ht);
}

bool tg_exec_read_scalar(tg_exec *e, const char *name, float *v) {
  const tg_node *n = tg_graph_output(e->g, name);
  return n && tg_exec_read(e, n, v, TG_HOST_F32);
}

void tg_exec_on_bucket(tg_exec *e, tg_bucket_hook fn, void *ctx) {
  e->hook = fn;
  e->hook_ctx = ctx;
}

void tg_exec_call_hook(tg_exec *e, int bucket) {
  if (e->hook) e->hook(e, bucket, e->hook_ctx);
}

void tg_exec_accumulate(tg_exec *e, const tg_node *n, tg_tensor *acc, float scale, bool first) {
  if (!in_graph(e->g, n) || acc->d != e->d || acc->type.dtype != TG_F32 || n->type.dtype != TG_F32 ||
      tg_type_numel(&n->type) != tg_type_numel(&acc->type)) {
    fprintf(stderr, "tg: internal error: accumulating a value into a tensor of another shape or device\n");
    abort();
  }
  e->d->x->accumulate(e, n, acc, scale, first);
}

void tg_exec_profile(tg_exec *e, tg_profile_level level) { e->d->x->profile(e, level); }

void tg_exec_profile_print(const tg_exec *e, FILE *out, int top) { e->d->x->profile_print(e, out, top); }

void tg_exec_phase_seconds(const tg_exec *e, double out[TG_NPHASES]) { e->d->x->phase_seconds(e, out); }

/* ---- ZeRO's collectives in host memory -------------------------------------------- */

int64_t tg_host_pack_shards(void *const *src, const int64_t *numel, int n, int elem, int ranks, void *pack,
                            int64_t *counts) {
  char *out = pack;
  for (int q = 0; q < ranks; q++) {
    counts[q] = 0;
    for (int i = 0; i < n; i++) {
      int64_t first, len = tg_shard_extent(numel[i], ranks, q, &first);
      memcpy(out, (const char *)src[i] + first * elem, (size_t)(len * elem));
      out += len * elem;
      counts[q] += len;
    }
  }
  return (int64_t)(out - (char *)pack) / elem;
}

void tg_host_unpack_shards(const void *pack, void *const *dst, const int64_t *numel, int n, int elem, int ranks) {
  const char *in = pack;
  for (int q = 0; q < ranks; q++)
    for (int i = 0; i < n; i++) {
      int64_t first, len = tg_shard_extent(numel[i], ranks, q, &first);
      memcpy((char *)dst[i] + first * elem, in, (size_t)(len * elem));
      in += len * elem;
    }
}

void tg_host_shard_layout(int64_t numel, int ranks, int64_t *counts, int64_t *displs) {
  for (int q = 0; q < ranks; q++) counts[q] = tg_shard_extent(numel, ranks, q, &displs[q]);
}

/* ---- host arrays ------------------------------------------------------------------ */

void tg_host_to_f32(const void *src, tg_host_type ht, float *dst, int64_t numel) {
  if (ht == TG_HOST_F32) memcpy(dst, src, sizeof(float) * (size_t)numel);
  else if (ht == TG_HOST_F64)
    for (int64_t i = 0; i < numel; i++) dst[i] = (float)((const double *)src)[i];
  else
    for (int64_t i = 0; i < numel; i++) dst[i] = (float)((const int32_t *)src)[i];
}

void tg_host_to_f64(const void *src, tg_host_type ht, double *dst, int64_t numel) {
  if (ht == TG_HOST_F64) memcpy(dst, src, sizeof(double) * (size_t)numel);
  else if (ht == TG_HOST_F32)
    for (int64_t i = 0; i < numel; i++) dst[i] = ((const float *)src)[i];
  else
    for (int64_t i = 0; i < numel; i++) dst[i] = ((const int32_t *)src)[i];
}

void tg_host_from_f64(const double *src, void *dst, tg_host_type ht, int64_t numel) {
  if (ht == TG_HOST_F64) memcpy(dst, src, sizeof(double) * (size_t)numel);
  else if (ht == TG_HOST_F32)
    for (int64_t i = 0; i < numel; i++) ((float *)dst)[i] = (float)src[i];
  else
    for (int64_t i = 0; i < numel; i++) ((int32_t *)dst)[i] = (int32_t)src[i];
}

/* One element of a host array as a double (exact for f32 and i32). */
static double host_elem(const void *src, tg_host_type ht, int64_t i) {
  return ht == TG_HOST_F32 ? ((const float *)src)[i] : ht == TG_HOST_F64 ? ((const double *)src)[i]
                                                                          : ((const int32_t *)src)[i];
}

void tg_host_to_storage(const void *src, tg_host_type ht, void *dst, tg_dtype t, int64_t numel) {
  switch (t) {
  case TG_F32: tg_host_to_f32(src, ht, dst, numel); return;
  case TG_I32:
    if (ht == TG_HOST_I32) memcpy(dst, src, sizeof(int32_t) * (size_t)numel);
    else
      for (int64_t i = 0; i < numel; i++) ((int32_t *)dst)[i] = (int32_t)host_elem(src, ht, i);
    return;
  case TG_BOOL:
    for (int64_t i = 0; i < numel; i++) ((uint8_t *)dst)[i] = host_elem(src, ht, i) != 0;
    return;
  case TG_BF16:
    for (int64_t i = 0; i < numel; i++) ((uint16_t *)dst)[i] = tg_f32_to_bf16((float)host_elem(src, ht, i));
    return;
  case TG_F16:
    for (int64_t i = 0; i < numel; i++) ((uint16_t *)dst)[i] = tg_f32_to_f16((float)host_elem(src, ht, i));
    return;
  default: return;
  }
}

void tg_host_from_storage(const void *src, tg_dtype t, void *dst, tg_host_type ht, int64_t numel) {
  for (int64_t i = 0; i < numel; i++) {
    double v;
    switch (t) {
    case TG_F32: v = ((const float *)src)[i]; break;
    case TG_I32: v = ((const int32_t *)src)[i]; break;
    case TG_BOOL: v = ((const uint8_t *)src)[i] ? 1 : 0; break;
    case TG_BF16: v = tg_bf16_to_f32(((const uint16_t *)src)[i]); break;
    case TG_F16: v = tg_f16_to_f32(((const uint16_t *)src)[i]); break;
    default: v = 0; break;
    }
    if (ht == TG_HOST_F32) ((float *)dst)[i] = (float)v;
    else if (ht == TG_HOST_F64) ((double *)dst)[i] = v;
    else ((int32_t *)dst)[i] = (int32_t)v;
  }
}

uint64_t tg_hash_bytes(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

int *tg_kernels_by_time(const double *seconds, int n, double *total) {
  int *order = tg_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
  *total = 0;
  for (int k = 0; k < n; k++) order[k] = k, *total += seconds[k];
  for (int a = 1; a < n; a++) /* insertion sort: stable, and n is a few hundred */
    for (int b = a; b > 0 && seconds[order[b]] > seconds[order[b - 1]]; b--) {
      int t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  return order;
}
