/* weights.c: parameters between safetensors files and the graph.
 *
 * The file is the user's: everything in it is checked against the model
 * before a single value is used, and every complaint names the file and
 * the tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"
#include "init.h"
#include "names.h" /* the optimizer's moments' prefixes */
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

/* The model's parameter (or, with with_state, state leaf) called name. */
static const tg_node *leaf_named(const tg_graph *g, const char *name, bool with_state) {
  for (int k = 0; k < g->n_nodes; k++)
    if (is_leaf(g->nodes[k], with_state) && !strcmp(g->nodes[k]->name, name)) return g->nodes[k];
  return NULL;
}

/* AdamW's moment of a parameter of g ("adam.m.wte.weight"): what a tg
 * checkpoint holds beside the weights, passed over when only the weights
 * are wanted. */
static bool is_moment_of_param(const tg_graph *g, const char *name) {
  const char *prefixes[2] = {TG_ADAM_M_PREFIX, TG_ADAM_V_PREFIX};
  for (int i = 0; i < 2; i++) {
    size_t n = strlen(prefixes[i]);
    if (!strncmp(name, prefixes[i], n) && tg_graph_leaf(g, TG_OP_param, name + n)) return true;
  }
  return false;
}

/* GPT2LMHeadModel's lm_head.weight, where the model ties its head to
 * wte.weight: it must be wte exactly, since the model has only one. */
static void check_tied_head(tg_ctx *ctx, const tg_st_file *f, const tg_st_tensor *head, const tg_st_tensor *wte) {
  tg_loc at = {f->path, 0, 0};
  if (!wte)
    tg_error(ctx, at, "tensor '%s' has no 'wte.weight' beside it: the model ties its output head to wte.weight, "
             "which the file lacks", head->name);
  char a[256], b[256];
  bool same = head->rank == wte->rank;
  for (int d = 0; same && d < head->rank; d++) same = head->shape[d] == wte->shape[d];
  if (!same)
    tg_error(ctx, at, "tensor '%s' has shape %s but '%s' has %s: the model ties its output head to wte.weight, so "
             "the two must be equal", head->name, tg_st_shape_str(head->shape, head->rank, a, sizeof a), wte->name,
             tg_st_shape_str(wte->shape, wte->rank, b, sizeof b));
  /* The same bytes in the same dtype are the same values; else compare
   * values a slice at a time (GPT-2's head is 38.6M elements: two double
   * copies of it would be 600 MB). */
  if (head->dtype == wte->dtype && head->nbytes == wte->nbytes && !memcmp(head->data, wte->data, head->nbytes)) return;
  enum { SLICE = 1 << 16 };
  int64_t numel = 1;
  for (int d = 0; d < head->rank; d++) numel *= head->shape[d];
  size_t hs = head->nbytes / (size_t)(numel ? numel : 1), ws = wte->nbytes / (size_t)(numel ? numel : 1);
  double *x = tg_xcalloc(SLICE, sizeof *x), *y = tg_xcalloc(SLICE, sizeof *y);
  int64_t bad = -1;
  double xv = 0, yv = 0;
  for (int64_t at0 = 0; at0 < numel && bad < 0; at0 += SLICE) {
    int64_t k = numel - at0 < SLICE ? numel - at0 : SLICE;
    tg_st_tensor a = {.dtype = head->dtype, .rank = 1, .shape = {k}, .data = (const char *)head->data + (size_t)at0 * hs,
                      .nbytes = (size_t)k * hs};
    tg_st_tensor b = {.dtype = wte->dtype, .rank = 1, .shape = {k}, .data = (const char *)wte->data + (size_t)at0 * ws,
                      .nbytes = (size_t)k * ws};
    tg_st_to_f64(&a, x);
    tg_st_to_f64(&b, y);
    for (int64_t i = 0; i < k && bad < 0; i++)
      if (x[i] != y[i] && !(x[i] != x[i] && y[i] != y[i])) {
        bad = at0 + i;
        xv = x[i];
        yv = y[i];
      }
  }
  free(x);
  free(y);
  if (bad >= 0)
    tg_error(ctx, at, "tensor '%s' differs from '%s' (element %lld: %.9g against %.9g): the model ties its output "
             "head to wte.weight and has no head of its own, so an untied head cannot be loaded",
             head->name, wte->name, (long long)bad, xv, yv);
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
  const tg_st_tensor *head = NULL, *wte = NULL;
  /* the tensor each value came from, in ctx's arena (freed with it, error or not) */
  const char **from = tg_alloc(ctx->arena, sizeof *from * ((size_t)g->n_nodes + 1));
  memset(from, 0, sizeof *from * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < f->n_tensors; i++) {
    const tg_st_tensor *t = &f->tensors[i];
    /* the model's own name first; else GPT2LMHeadModel's "transformer." taken off */
    const tg_node *n = leaf_named(g, t->name, with_state);
    const char *name = n ? t->name : tg_hf_param_name(t->name);
    if (!n) n = leaf_named(g, name, with_state);
    if (n && !strcmp(n->name, "wte.weight")) wte = t;
    if (!n && !strcmp(name, TG_HF_LM_HEAD) && tg_graph_leaf(g, TG_OP_param, "wte.weight")) {
      head = t;
      continue;
    }
    if (!n && tg_hf_is_buffer(name)) {
      skipped++;
      continue;
    }
    if (!n && !with_state && is_moment_of_param(g, name)) continue;
    if (!n)
      tg_error(ctx, at, "tensor '%s' is not a parameter of the model %s", t->name,
               g->source ? g->source : "");
    if (from[n->id])
      tg_error(ctx, at, "tensors '%s' and '%s' are both the model's parameter %s: keep one of them", from[n->id],
               t->name, n->name);
    from[n->id] = t->name;
    w->values[n->id] = take(ctx, g, f, t, n);
  }
  if (head) check_tied_head(ctx, f, head, wte);
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

char *tg_weights_config_text(const tg_graph *g, bool batch) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  if (!out) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  bool first = true;
  for (int i = 0; i < g->n_config; i++) {
    const tg_config_entry *e = &g->config[i];
    /* tgrun sets B and T from the batch (docs/tgrun.md): they are the run's, not the model's */
    if ((!strcmp(e->name, "B") || !strcmp(e->name, "T")) != batch) continue;
    /* nor is the tensor-parallel degree: a layout, not a size */
    if (!strcmp(e->name, TG_CONFIG_MESH_TENSOR) || (g->mesh_sym && !strcmp(e->name, g->mesh_sym))) continue;
    char num[40];
    double v = e->value;
    /* Sizes read as sizes; anything else in the shortest exact form. */
    if (isfinite(v) && v == floor(v) && fabs(v) < 1e15)
      snprintf(num, sizeof num, "%lld", (long long)v);
    else
      tg_fmt_double(v, num, sizeof num);
    fprintf(out, "%s%s=%s", first ? "" : " ", e->name, num);
    first = false;
  }
  fclose(out);
  return buf;
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
  /* "format": "pt" is what Hugging Face's loaders require of a PyTorch
   * file; tg's own tag and the model's constants (n_head is in no shape)
   * go under keys of their own. */
  char *config = tg_weights_config_text(g, false);
  tg_st_meta meta[3] = {{"format", "pt"}, {"tg_format", TG_WEIGHTS_FORMAT}, {"config", config}};
  bool ok = tg_st_write(path, ts, n, meta, *config ? 3 : 2, why, whylen);
  free(config);
  for (int k = 0; k < g->n_nodes; k++) free(cropped[k]);
  free(cropped);
  free(ts);
  return ok;
}
