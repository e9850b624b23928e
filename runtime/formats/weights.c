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

static bool is_leaf(const tg_node *n, bool with_state) {
  return n->op == TG_OP_param || (with_state && n->op == TG_OP_state);
}

static tg_weights *weights_new(const tg_graph *g) {
  tg_weights *w = tg_xcalloc(1, sizeof *w);
  w->g = g;
  w->values = tg_xcalloc((size_t)g->n_nodes, sizeof *w->values);
  return w;
}

void tg_weights_free(tg_weights *w) {
  if (!w) return;
  for (int i = 0; i < w->g->n_nodes; i++) free(w->values[i]);
  free(w->values);
  free(w);
}

void tg_file_type(const tg_graph *g, const tg_type *t, tg_type *out) {
  *out = *t;
  for (int d = 0; d < t->rank; d++) out->dim[d].size = tg_dim_unpadded(g, &t->dim[d]);
}

void tg_copy_box(const float *src, const tg_type *from, float *dst, const tg_type *to) {
  memset(dst, 0, (size_t)tg_type_numel(to) * sizeof *dst);
  int r = to->rank;
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  int64_t box[TG_MAX_RANK], idx[TG_MAX_RANK] = {0};
  for (int d = 0; d < r; d++)
    box[d] = from->dim[d].size < to->dim[d].size ? from->dim[d].size : to->dim[d].size;
  /* An odometer over the box's rows (all dims but the last), one memcpy per
   * row of box[r-1] contiguous elements. */
  for (;;) {
    int64_t s = 0, t = 0;
    for (int d = 0; d < r - 1; d++) {
      s = s * from->dim[d].size + idx[d];
      t = t * to->dim[d].size + idx[d];
    }
    s *= from->dim[r - 1].size;
    t *= to->dim[r - 1].size;
    memcpy(dst + t, src + s, (size_t)box[r - 1] * sizeof *dst);
    int d = r - 2;
    while (d >= 0 && ++idx[d] == box[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

/* Fresh values at the graph's (padded) shape: the initialiser runs at the
 * file's shape, so the real elements are those of the unpadded model (the
 * normal generator numbers elements by their index), and padded ones are
 * zero. */
static float *init_leaf(const tg_graph *g, const tg_node *n, uint64_t seed) {
  float *out = tg_xcalloc((size_t)tg_type_numel(&n->type), sizeof(float));
  tg_node unpadded = *n;
  tg_file_type(g, &n->type, &unpadded.type);
  if (tg_type_same_shape(&unpadded.type, &n->type)) {
    tg_param_init(n, seed, out);
    return out;
  }
  float *tmp = tg_xcalloc((size_t)tg_type_numel(&unpadded.type), sizeof(float));
  tg_param_init(&unpadded, seed, tmp);
  tg_copy_box(tmp, &unpadded.type, out, &n->type);
  free(tmp);
  return out;
}

tg_weights *tg_weights_init(const tg_graph *g, uint64_t seed) {
  tg_weights *w = weights_new(g);
  for (int i = 0; i < g->n_nodes; i++)
    if (is_leaf(g->nodes[i], true)) w->values[i] = init_leaf(g, g->nodes[i], seed);
  return w;
}

/* Checks one tensor against its leaf (at the file's shape) and converts it
 * to floats at the graph's shape, padded dims padded with zeros. */
static float *take(tg_ctx *ctx, const tg_graph *g, const tg_st_file *f, const tg_st_tensor *t,
                   const tg_node *n) {
  tg_loc at = {f->path, 0, 0};
  tg_type ft;
  tg_file_type(g, &n->type, &ft);
  if (!tg_dtype_is_float(t->dtype))
    tg_error(ctx, at, "tensor '%s' has dtype %s, but the model's parameter is a float tensor",
             t->name, tg_dtype_name(t->dtype));
  bool same = t->rank == ft.rank;
  for (int d = 0; same && d < t->rank; d++) same = t->shape[d] == ft.dim[d].size;
  if (!same) {
    char a[256], b[TG_TYPE_STR_MAX];
    tg_error(ctx, at, "tensor '%s' has shape %s, but the model's parameter is %s", t->name,
             tg_st_shape_str(t->shape, t->rank, a, sizeof a), tg_type_str(&ft, b, sizeof b));
  }
  int64_t numel = tg_type_numel(&ft);
  double *tmp = tg_xcalloc((size_t)numel, sizeof *tmp);
  tg_st_to_f64(t, tmp);
  float *vals = tg_xcalloc((size_t)numel, sizeof *vals);
  for (int64_t i = 0; i < numel; i++) vals[i] = (float)tmp[i];
  free(tmp);
  if (tg_type_same_shape(&ft, &n->type)) return vals;
  float *out = tg_xcalloc((size_t)tg_type_numel(&n->type), sizeof *out);
  tg_copy_box(vals, &ft, out, &n->type);
  free(vals);
  return out;
}

/* Hugging Face's GPT-2 checkpoints carry each layer's causal mask as a
 * buffer, "h.N.attn.bias" (and, in older ones, "h.N.attn.masked_bias"):
 * not parameters, and a model written from primitives builds its own mask.
 * Only these exact names are passed over, and only when the model has no
 * parameter of that name. */
static bool is_hf_mask_buffer(const char *name) {
  if (strncmp(name, "h.", 2) != 0) return false;
  const char *p = name + 2;
  if (*p < '0' || *p > '9') return false;
  while (*p >= '0' && *p <= '9') p++;
  return !strcmp(p, ".attn.bias") || !strcmp(p, ".attn.masked_bias");
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
  int skipped = 0;
  for (int i = 0; i < f->n_tensors; i++) {
    const tg_st_tensor *t = &f->tensors[i];
    const tg_node *n = NULL;
    for (int k = 0; k < g->n_nodes && !n; k++)
      if (is_leaf(g->nodes[k], with_state) && !strcmp(g->nodes[k]->name, t->name)) n = g->nodes[k];
    if (!n && is_hf_mask_buffer(t->name)) {
      skipped++;
      continue;
    }
    if (!n)
      tg_error(ctx, at, "tensor '%s' is not a parameter of the model %s", t->name,
               g->source ? g->source : "");
    w->values[n->id] = take(ctx, g, f, t, n);
  }
  if (skipped)
    tg_report(ctx, "note", at,
              "skipped %d Hugging Face attention buffers (h.N.attn.bias, h.N.attn.masked_bias): "
              "they hold the causal mask, which the model builds itself", skipped);
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (n->op == TG_OP_param && !w->values[k])
      tg_error(ctx, at, "tensor '%s' is missing: the model's parameter %s has no value here",
               n->name, n->name);
    if (n->op == TG_OP_state && !w->values[k]) w->values[k] = init_leaf(g, n, 0);
  }
  ctx->bail = outer;
  tg_st_free(f);
  return w;
}

bool tg_weights_save(const tg_weights *w, const char *path, bool with_state, char *why,
                     size_t whylen) {
  const tg_graph *g = w->g;
  tg_st_tensor *ts = tg_xcalloc((size_t)g->n_nodes, sizeof *ts);
  float **cropped = tg_xcalloc((size_t)g->n_nodes, sizeof *cropped); /* padded leaves only */
  int n = 0;
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *leaf = g->nodes[k];
    if (!is_leaf(leaf, with_state) || !w->values[k]) continue;
    tg_type ft;
    tg_file_type(g, &leaf->type, &ft);
    const float *data = w->values[k];
    if (!tg_type_same_shape(&ft, &leaf->type)) {
      cropped[k] = tg_xcalloc((size_t)tg_type_numel(&ft), sizeof(float));
      tg_copy_box(w->values[k], &leaf->type, cropped[k], &ft);
      data = cropped[k];
    }
    tg_st_tensor *t = &ts[n++];
    t->name = leaf->name;
    t->dtype = TG_F32;
    t->rank = ft.rank;
    for (int d = 0; d < t->rank; d++) t->shape[d] = ft.dim[d].size;
    t->data = data;
    t->nbytes = (size_t)tg_type_numel(&ft) * sizeof(float);
  }
  bool ok = tg_st_write(path, ts, n, NULL, 0, why, whylen);
  for (int k = 0; k < g->n_nodes; k++) free(cropped[k]);
  free(cropped);
  free(ts);
  return ok;
}
