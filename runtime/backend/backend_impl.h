/* backend_impl.h: what a backend fills in (backend.h).
 *
 * Like QBE's struct Target: one table of functions per backend, defined in
 * the backend's own file (tg_backend_ref in backend/ref, tg_backend_cpu in
 * backend/cpu) and listed by the registry (backend/registry).  Each backend's
 * device, exec and tensor structs start with the common part below, so
 * that backend.c can dispatch and keep the bookkeeping every backend
 * would otherwise repeat (types, names, hooks). */
#ifndef TG_BACKEND_IMPL_H
#define TG_BACKEND_IMPL_H

#include "backend.h"

struct tg_device {
  const tg_backend *x;
};

struct tg_tensor {
  tg_device *d;
  tg_type type;
};

struct tg_exec {
  tg_device *d;
  const tg_graph *g;
  tg_bucket_hook hook;
  void *hook_ctx;
  /* tg_exec_leaf's tensors for leaves the compiled step has no memory for
   * (nothing reads them: codegen/lower.c), so that writing one is
   * harmless; freed with the exec */
  const tg_node **unread;
  tg_tensor **unread_t;
  int n_unread;
};

struct tg_backend {
  const char *name;    /* how users choose it: --backend NAME, backend = "NAME" */
  const char *summary; /* one line for --help */
  const char *source_suffix; /* what tg_exec_opts.source_path receives: ".c", ".cu"; NULL: none */
  const char *default_precision; /* the precision policy a run on it gets unless it asks
                                  * (passes.h): "bf16" on a GPU; NULL: "f32" */

  tg_device *(*open)(tg_ctx *ctx, const tg_device_opts *o);
  /* backend.h's tg_backend_probe; NULL: the host's backends */
  bool (*probe)(int local_rank, tg_device_facts *out, char *why, size_t whylen);
  void (*close)(tg_device *d);
  const char *(*describe)(const tg_device *d);
  void (*allreduce_average)(tg_device *d, tg_tensor *const *ts, int n);
  /* backend.h's tg_device_peak_flops; NULL: unknown */
  double (*peak_flops)(tg_device *d, bool bf16, const char **what);
  /* backend.h's tg_device_memory_free; NULL: host memory */
  int64_t (*memory_free)(tg_device *d, const char **what);
  /* ZeRO (backend.h); NULL in a backend without them: tg_device_can_shard says no */
  void (*reduce_scatter)(tg_device *d, tg_tensor *const *src, tg_tensor *const *dst, int n, float scale, bool accumulate);
  void (*all_gather)(tg_device *d, tg_tensor *const *ts, int n);
  tg_tensor *(*tensor_view)(tg_tensor *t, int64_t offset, const tg_type *type);
  tg_tensor *(*value)(tg_exec *e, const tg_node *n);

  tg_tensor *(*tensor_new)(tg_device *d, const tg_type *t);
  void (*tensor_free)(tg_tensor *t);
  void (*tensor_write)(tg_tensor *t, const void *src, tg_host_type ht);
  void (*tensor_read)(const tg_tensor *t, void *dst, tg_host_type ht);
  uint64_t (*tensor_hash)(const tg_tensor *t);

  tg_exec *(*compile)(tg_device *d, tg_ctx *ctx, const tg_graph *g, const tg_exec_opts *o);
  /* NULL: tg_exec_compile_all calls compile for each graph in turn */
  void (*compile_all)(tg_device *d, tg_ctx *ctx, const tg_graph *const *g, const tg_exec_opts *o, int n,
                      tg_exec **out);
  void (*free)(tg_exec *e);
  bool (*from_cache)(const tg_exec *e);
  tg_compile_stats (*compile_stats)(const tg_exec *e); /* NULL: nothing compiled */
  tg_tensor *(*leaf)(tg_exec *e, const tg_node *leaf);
  void (*bind)(tg_exec *e, const tg_node *leaf, tg_tensor *t);
  void (*run)(tg_ctx *ctx, tg_exec *e);
  bool (*read)(tg_exec *e, const tg_node *n, void *dst, tg_host_type ht);
  void (*accumulate)(tg_exec *e, const tg_node *n, tg_tensor *acc, float scale, bool first);

  void (*profile)(tg_exec *e, tg_profile_level level);
  void (*profile_print)(const tg_exec *e, FILE *out, int top);
  void (*phase_seconds)(const tg_exec *e, double out[TG_NPHASES]);
};

/* Whether n is a leaf a runtime fills: an input, a param or a state. */
bool tg_exec_is_leaf(const tg_node *n);
/* Calls e's bucket hook, if any (backends, at each bucket's point). */
void tg_exec_call_hook(tg_exec *e, int bucket);

/* Host arrays to and from a device's own element type, for backends that
 * keep tensors in host memory: numel elements; i32 host arrays go only to
 * and from i32 and bool storage. */
void tg_host_to_f32(const void *src, tg_host_type ht, float *dst, int64_t numel);
void tg_host_to_f64(const void *src, tg_host_type ht, double *dst, int64_t numel);
void tg_host_from_f64(const double *src, void *dst, tg_host_type ht, int64_t numel);
/* Storage of dtype t (f32, bf16, f16, i32, bool) to and from host arrays. */
void tg_host_to_storage(const void *src, tg_host_type ht, void *dst, tg_dtype t, int64_t numel);
void tg_host_from_storage(const void *src, tg_dtype t, void *dst, tg_host_type ht, int64_t numel);
/* ZeRO's collectives, for backends whose tensors are host memory: the n
 * whole tensors src[i] (numel[i] elements of elem bytes) packed into pack
 * rank by rank, each rank's shard of each (base/shard.h), counts[q] the
 * elements of rank q's block; returns the elements packed.  The shard
 * layout of one tensor: rank q's counts[q] elements from displs[q]. */
int64_t tg_host_pack_shards(void *const *src, const int64_t *numel, int n, int elem, int ranks, void *pack,
                            int64_t *counts);
/* The inverse: every rank's shards from pack back into the whole tensors. */
void tg_host_unpack_shards(const void *pack, void *const *dst, const int64_t *numel, int n, int elem, int ranks);
void tg_host_shard_layout(int64_t numel, int ranks, int64_t *counts, int64_t *displs);
/* FNV-1a over bytes. */
uint64_t tg_hash_bytes(const void *p, size_t n);
/* The kernels 0 .. n-1 by seconds[k], longest first, ties in kernel order
 * (malloc'ed, never NULL), and their sum into *total: the profile_print
 * functions' table. */
int *tg_kernels_by_time(const double *seconds, int n, double *total);

#endif
