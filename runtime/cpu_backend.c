/* cpu_backend.c: generated C, built, loaded and run (cpu_backend.h). */
#include "cpu_backend.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "ccjit.h"
#include "lower.h"
#include "render.h"

typedef void (*step_fn)(void *const *, char *, char *, void (*)(int, void *), void *);

struct tg_cpu {
  const tg_graph *g;
  tg_program *p;
  void *so;
  step_fn step;
  int *profile;          /* the object's tg_profile switch */
  double *kernel_seconds;
  void **leaves;      /* per program leaf */
  int *leaf_of;       /* per graph node: index into leaves, or -1 */
  char *arena, *scratch;
  bool from_cache;
  void (*allreduce)(int, void *);
  void *allreduce_ctx;
  bool *bound;           /* per program leaf: memory the caller owns */
};

/* -march=native: the object is built for this very machine (ccjit keys the
 * cache on the CPU).  No -ffast-math: the masked logits are -inf and the
 * reductions must keep their NaN and infinity semantics.  -fno-trapping-math
 * (tg never enables FP traps) lets gcc vectorise loops with a select between
 * a division and something else, and inline floorf: the GELU and softmax
 * loops. */
static const char *const cc_flags[] = {"-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-w"};
static const char *const cc_libs[] = {"-lopenblas", "-lm"};

static void *aligned_zeroed(tg_ctx *ctx, int64_t bytes) {
  size_t n = (size_t)((bytes + 255) / 256 * 256);
  void *p = aligned_alloc(256, n ? n : 256);
  if (!p) tg_error(ctx, (tg_loc){0}, "out of memory allocating %lld bytes for the CPU backend", (long long)bytes);
  memset(p, 0, n ? n : 256);
  return p;
}

tg_cpu *tg_cpu_new(tg_ctx *ctx, const tg_graph *g, const char *c_path) {
  return tg_cpu_new_program(ctx, tg_lower(ctx, g), c_path);
}

tg_cpu *tg_cpu_new_program(tg_ctx *ctx, tg_program *p, const char *c_path) {
  const tg_graph *g = p->g;
  char *src = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&src, &len);
  if (!f) tg_error(ctx, (tg_loc){g->source, 1, 1}, "out of memory rendering C");
  tg_render_c(f, p);
  fclose(f);
  if (c_path) {
    FILE *o = fopen(c_path, "w");
    if (!o || fwrite(src, 1, len, o) != len || fclose(o)) {
      free(src);
      tg_error(ctx, (tg_loc){c_path, 0, 0}, "cannot write the generated C");
    }
  }
  tg_so so = {0};
  static char err[16384];
  bool ok = tg_ccjit_build(src, cc_flags, sizeof cc_flags / sizeof *cc_flags, cc_libs,
                           sizeof cc_libs / sizeof *cc_libs, &so, err, sizeof err);
  free(src);
  if (!ok) {
    if (ctx->err) fprintf(ctx->err, "%s\n", err);
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "the CPU backend could not build the generated C (above)");
  }
  tg_cpu *c = calloc(1, sizeof *c);
  if (!c) tg_error(ctx, (tg_loc){0}, "out of memory");
  c->g = g;
  c->p = p;
  c->from_cache = so.from_cache;
  c->so = dlopen(so.path, RTLD_NOW | RTLD_LOCAL);
  if (!c->so) {
    snprintf(err, sizeof err, "%s", dlerror());
    tg_so_free(&so);
    free(c);
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "cannot load the CPU backend's object: %s", err);
  }
  tg_so_free(&so);
  c->step = (step_fn)dlsym(c->so, "tg_step");
  const long *arena = dlsym(c->so, "tg_arena_bytes");
  const int *n_leaves = dlsym(c->so, "tg_n_leaves");
  if (!c->step || !arena || !n_leaves || *arena != p->arena_bytes || *n_leaves != p->n_leaves) {
    tg_cpu_free(c);
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "the CPU backend's object does not match the program");
  }
  c->profile = dlsym(c->so, "tg_profile");
  c->kernel_seconds = dlsym(c->so, "tg_kernel_seconds");
  c->leaves = calloc((size_t)p->n_leaves + 1, sizeof *c->leaves);
  c->bound = calloc((size_t)p->n_leaves + 1, sizeof *c->bound);
  c->leaf_of = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  if (!c->leaves || !c->leaf_of || !c->bound) tg_error(ctx, (tg_loc){0}, "out of memory");
  for (int i = 0; i < g->n_nodes; i++) c->leaf_of[i] = -1;
  for (int i = 0; i < p->n_leaves; i++) {
    const tg_node *n = g->nodes[p->leaves[i]];
    c->leaf_of[n->id] = i;
    c->leaves[i] = aligned_zeroed(ctx, tg_type_numel(&n->type) * tg_dtype_size(n->type.dtype));
  }
  c->arena = aligned_zeroed(ctx, p->arena_bytes);
  c->scratch = aligned_zeroed(ctx, p->scratch_bytes);
  return c;
}

void tg_cpu_free(tg_cpu *c) {
  if (!c) return;
  if (c->leaves)
    for (int i = 0; i < c->p->n_leaves; i++)
      if (!c->bound[i]) free(c->leaves[i]);
  free(c->leaves);
  free(c->bound);
  free(c->leaf_of);
  free(c->arena);
  free(c->scratch);
  /* The object stays loaded: it brought in libgomp, whose idle worker
   * threads would run unmapped code if it were unloaded under them. */
  free(c);
}

void *tg_cpu_leaf(tg_cpu *c, const tg_node *n) {
  if (n->id < 0 || n->id >= c->g->n_nodes || c->g->nodes[n->id] != n || c->leaf_of[n->id] < 0) return NULL;
  return c->leaves[c->leaf_of[n->id]];
}

void tg_cpu_run(tg_cpu *c) { c->step((void *const *)c->leaves, c->arena, c->scratch, c->allreduce, c->allreduce_ctx); }

void tg_cpu_set_allreduce(tg_cpu *c, void (*fn)(int bucket, void *ctx), void *ctx) {
  c->allreduce = fn;
  c->allreduce_ctx = ctx;
}

void tg_cpu_bind_leaf(tg_cpu *c, const tg_node *n, void *mem) {
  int i = c->leaf_of[n->id];
  if (!c->bound[i]) free(c->leaves[i]);
  c->leaves[i] = mem;
  c->bound[i] = true;
}

float *tg_cpu_value(tg_cpu *c, const tg_node *n) {
  tg_layout lay;
  if (n->type.dtype != TG_F32 || !tg_layout_of(c->p, n, &lay) || lay.offset) return NULL;
  /* only a contiguous view: the value's own elements in order */
  int64_t s = 1;
  for (int d = n->type.rank - 1; d >= 0; d--) {
    if (n->type.dim[d].size > 1 && lay.stride[d] != s) return NULL;
    s *= n->type.dim[d].size;
  }
  const tg_storage *st = &c->p->store[lay.base];
  if (st->place == TG_PLACE_LEAF) return c->leaves[st->leaf];
  if (st->place == TG_PLACE_ARENA) return (float *)(c->arena + st->offset);
  return NULL;
}

bool tg_cpu_from_cache(const tg_cpu *c) { return c->from_cache; }

const tg_graph *tg_cpu_graph(const tg_cpu *c) { return c->g; }

void tg_cpu_phase_seconds(const tg_cpu *c, double out[TG_NPHASES]) {
  for (int p = 0; p < TG_NPHASES; p++) out[p] = 0;
  if (!c->kernel_seconds) return;
  for (int k = 0; k < c->g->n_kernels; k++) {
    const tg_kernel *K = &c->g->kernels[k];
    if (K->n_nodes) out[c->g->nodes[K->nodes[0]]->phase] += c->kernel_seconds[k];
  }
}

void tg_cpu_profile(tg_cpu *c, bool on) {
  if (c->profile) *c->profile = on;
}

void tg_cpu_profile_print(const tg_cpu *c, FILE *out, int top) {
  const tg_graph *g = c->g;
  if (!c->kernel_seconds) return;
  int n = g->n_kernels;
  int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!order) return;
  double total = 0;
  for (int k = 0; k < n; k++) order[k] = k, total += c->kernel_seconds[k];
  for (int a = 1; a < n; a++) /* insertion sort by time, longest first */
    for (int b = a; b > 0 && c->kernel_seconds[order[b]] > c->kernel_seconds[order[b - 1]]; b--) {
      int t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  fprintf(out, "profile: %d kernels, %.1f ms in all; the longest:\n", n, total * 1e3);
  for (int i = 0; i < n && i < top; i++) {
    const tg_kernel *K = &g->kernels[order[i]];
    fprintf(out, "profile: %7.2f ms %5.1f%%  k%d %s \"%s\"\n", c->kernel_seconds[order[i]] * 1e3,
            total > 0 ? 100 * c->kernel_seconds[order[i]] / total : 0.0, order[i], tg_kernel_kind_name(K->kind), K->name);
  }
  free(order);
}

static float elem(const void *base, tg_dtype t, int64_t i) {
  switch (t) {
  case TG_F32: return ((const float *)base)[i];
  case TG_I32: return (float)((const int32_t *)base)[i];
  case TG_BOOL: return ((const uint8_t *)base)[i] ? 1.0f : 0.0f;
  case TG_BF16: {
    uint32_t u = (uint32_t)((const uint16_t *)base)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  default: return (float)((const _Float16 *)base)[i];
  }
}

bool tg_cpu_read(tg_cpu *c, const tg_node *n, float *dst) {
  tg_layout lay;
  if (!tg_layout_of(c->p, n, &lay)) return false;
  const tg_storage *s = &c->p->store[lay.base];
  const tg_node *b = c->g->nodes[lay.base];
  /* only what lives to the end of the step: leaves and graph outputs */
  bool kept = s->place == TG_PLACE_LEAF;
  for (int i = 0; i < c->g->memplan->n_buffers && !kept; i++)
    kept = c->g->memplan->buffers[i].node == lay.base && c->g->memplan->buffers[i].last == c->g->n_kernels;
  if (!kept) return false;
  const char *base = s->place == TG_PLACE_LEAF ? c->leaves[s->leaf] : c->arena + s->offset;
  const tg_type *t = &n->type;
  int64_t numel = tg_type_numel(t), coord[TG_MAX_RANK] = {0};
  for (int64_t e = 0; e < numel; e++) {
    int64_t off = lay.offset;
    for (int d = 0; d < t->rank; d++) off += coord[d] * lay.stride[d];
    dst[e] = elem(base, b->type.dtype, off);
    for (int d = t->rank - 1; d >= 0; d--) {
      if (++coord[d] < t->dim[d].size) break;
      coord[d] = 0;
    }
  }
  return true;
}
