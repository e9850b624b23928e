/* weights.c: parameters between safetensors files and the graph.
 *
 * The file is the user's: everything in it is checked against the model
 * before a single value is used, and every complaint names the file and
 * the tensor. */
#include <stdlib.h>
#include <string.h>

#include "init.h"
#include "safetensors.h"
#include "weights.h"

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  return p;
}

static bool is_leaf(const tg_node *n, bool with_state) {
  return n->op == TG_OP_param || (with_state && n->op == TG_OP_state);
}

static tg_weights *weights_new(const tg_graph *g) {
  tg_weights *w = xcalloc(1, sizeof *w);
  w->g = g;
  w->values = xcalloc((size_t)g->n_nodes, sizeof *w->values);
  return w;
}

void tg_weights_free(tg_weights *w) {
  if (!w) return;
  for (int i = 0; i < w->g->n_nodes; i++) free(w->values[i]);
  free(w->values);
  free(w);
}

tg_weights *tg_weights_init(const tg_graph *g, uint64_t seed) {
  tg_weights *w = weights_new(g);
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (!is_leaf(n, true)) continue;
    w->values[i] = xcalloc((size_t)tg_type_numel(&n->type), sizeof(float));
    tg_param_init(n, seed, w->values[i]);
  }
  return w;
}

static const char *shape_str(const int64_t *shape, int rank, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* Checks one tensor against its leaf and converts it to floats. */
static float *take(tg_ctx *ctx, const tg_st_file *f, const tg_st_tensor *t, const tg_node *n) {
  tg_loc at = {f->path, 0, 0};
  if (!tg_dtype_is_float(t->dtype))
    tg_error(ctx, at, "tensor '%s' has dtype %s, but the model's parameter is a float tensor",
             t->name, tg_dtype_name(t->dtype));
  bool same = t->rank == n->type.rank;
  for (int d = 0; same && d < t->rank; d++) same = t->shape[d] == n->type.dim[d].size;
  if (!same) {
    char a[256], b[TG_TYPE_STR_MAX];
    tg_error(ctx, at, "tensor '%s' has shape %s, but the model's parameter is %s", t->name,
             shape_str(t->shape, t->rank, a, sizeof a), tg_type_str(&n->type, b, sizeof b));
  }
  int64_t numel = tg_type_numel(&n->type);
  double *tmp = xcalloc((size_t)numel, sizeof *tmp);
  tg_st_to_f64(t, tmp);
  float *out = xcalloc((size_t)numel, sizeof *out);
  for (int64_t i = 0; i < numel; i++) out[i] = (float)tmp[i];
  free(tmp);
  return out;
}

tg_weights *tg_weights_load(tg_ctx *ctx, const tg_graph *g, const char *path, bool with_state) {
  tg_st_file *f = tg_st_read(ctx, path);
  tg_weights *w = weights_new(g);
  /* Free what was made if a check fails, then pass the error on. */
  jmp_buf here, *outer = ctx->bail;
  ctx->bail = &here;
  if (setjmp(here)) {
    ctx->bail = outer;
    tg_weights_free(w);
    tg_st_free(f);
    tg_bail(ctx);
  }
  tg_loc at = {f->path, 0, 0};
  for (int i = 0; i < f->n_tensors; i++) {
    const tg_st_tensor *t = &f->tensors[i];
    const tg_node *n = NULL;
    for (int k = 0; k < g->n_nodes && !n; k++)
      if (is_leaf(g->nodes[k], with_state) && !strcmp(g->nodes[k]->name, t->name)) n = g->nodes[k];
    if (!n)
      tg_error(ctx, at, "tensor '%s' is not a parameter of the model %s", t->name,
               g->source ? g->source : "");
    w->values[n->id] = take(ctx, f, t, n);
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (n->op == TG_OP_param && !w->values[k])
      tg_error(ctx, at, "tensor '%s' is missing: the model's parameter %s has no value here",
               n->name, n->name);
    if (n->op == TG_OP_state && !w->values[k]) {
      w->values[k] = xcalloc((size_t)tg_type_numel(&n->type), sizeof(float));
      tg_param_init(n, 0, w->values[k]);
    }
  }
  ctx->bail = outer;
  tg_st_free(f);
  return w;
}

bool tg_weights_save(const tg_weights *w, const char *path, bool with_state, char *why,
                     size_t whylen) {
  const tg_graph *g = w->g;
  tg_st_tensor *ts = xcalloc((size_t)g->n_nodes, sizeof *ts);
  int n = 0;
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *leaf = g->nodes[k];
    if (!is_leaf(leaf, with_state) || !w->values[k]) continue;
    tg_st_tensor *t = &ts[n++];
    t->name = leaf->name;
    t->dtype = TG_F32;
    t->rank = leaf->type.rank;
    for (int d = 0; d < t->rank; d++) t->shape[d] = leaf->type.dim[d].size;
    t->data = w->values[k];
    t->nbytes = (size_t)tg_type_numel(&leaf->type) * sizeof(float);
  }
  bool ok = tg_st_write(path, ts, n, NULL, 0, why, whylen);
  free(ts);
  return ok;
}
