/* tensor_parts.c: cutting a whole tensor into tensor-parallel parts and
 * joining them (tensor_parts.h). */
#include "tensor_parts.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "names.h"

int tg_param_split_axis(const tg_node *p) {
  if (p->op != TG_OP_param || p->init.split == TG_SPLIT_NONE) return -1;
  return p->init.split == TG_SPLIT_COLUMNS ? p->type.rank - 1 : 0;
}

/* The whole tensor as [outer, groups, ranks, chunk * inner]: a rank's part
 * is, for each outer index and group, one run of chunk * inner values. */
typedef struct blocks {
  int64_t outer, run;
} blocks;

static blocks blocks_of(const tg_type *t, int axis, int groups, int ranks) {
  blocks b = {1, 1};
  for (int i = 0; i < axis; i++) b.outer *= t->dim[i].size;
  for (int i = axis + 1; i < t->rank; i++) b.run *= t->dim[i].size;
  b.run *= t->dim[axis].size / ((int64_t)groups * ranks);
  return b;
}

void tg_tensor_part_cut(const float *whole, const tg_type *whole_t, int axis, int groups, int ranks, int r, float *part) {
  blocks b = blocks_of(whole_t, axis, groups, ranks);
  for (int64_t o = 0; o < b.outer; o++)
    for (int gi = 0; gi < groups; gi++)
      memcpy(part + (o * groups + gi) * b.run, whole + ((o * groups + gi) * ranks + r) * b.run,
             sizeof(float) * (size_t)b.run);
}

void tg_tensor_part_join(const float *parts, const tg_type *whole_t, int axis, int groups, int ranks, float *whole) {
  blocks b = blocks_of(whole_t, axis, groups, ranks);
  int64_t part = b.outer * groups * b.run;
  for (int r = 0; r < ranks; r++)
    for (int64_t o = 0; o < b.outer; o++)
      for (int gi = 0; gi < groups; gi++)
        memcpy(whole + ((o * groups + gi) * ranks + r) * b.run, parts + r * part + (o * groups + gi) * b.run,
               sizeof(float) * (size_t)b.run);
}

const tg_node *tg_tensor_owner(const tg_graph *g, const tg_node *leaf) {
  if (leaf->op == TG_OP_param) return leaf;
  if (leaf->op != TG_OP_state || !leaf->name) return NULL;
  static const char *const prefixes[] = {TG_ADAM_M_PREFIX, TG_ADAM_V_PREFIX};
  for (int k = 0; k < 2; k++) {
    size_t n = strlen(prefixes[k]);
    if (!strncmp(leaf->name, prefixes[k], n)) return tg_graph_leaf(g, TG_OP_param, leaf->name + n);
  }
  return NULL;
}

tg_graph *tg_tensor_whole_state(tg_ctx *ctx, const tg_graph *sg, const tg_graph *whole_model) {
  tg_graph *w = tg_graph_new(ctx->arena);
  w->source = sg->source;
  w->mesh_sym = whole_model->mesh_sym;
  for (int i = 0; i < sg->n_config; i++) tg_graph_set_config(w, sg->config[i].name, sg->config[i].value);
  for (int i = 0; i < sg->n_nodes; i++) {
    const tg_node *n = sg->nodes[i], *p = tg_tensor_owner(sg, n);
    if (!p) continue;
    const tg_node *W = tg_graph_leaf(whole_model, TG_OP_param, p->name);
    if (!W) tg_error(ctx, n->loc, "internal: '%s' is not a parameter of the whole model", p->name);
    tg_node *c = tg_node_new(w, n->op, n->loc);
    c->name = n->name, c->init = n->init, c->type = W->type;
    c->type.dtype = n->type.dtype;
    const char *why = tg_graph_add(w, c);
    if (why) tg_error(ctx, n->loc, "internal: %s", why);
  }
  return w;
}

float **tg_tensor_join_state(const tg_graph *sg, float *const *v, const tg_graph *wsg, int tp, int rank) {
  float **out = tg_xcalloc((size_t)wsg->n_nodes + 1, sizeof *out);
  for (int i = 0; i < wsg->n_nodes; i++) {
    const tg_node *W = wsg->nodes[i];
    if ((W->op != TG_OP_param && W->op != TG_OP_state) || !W->name) continue;
    const tg_node *n = tg_graph_leaf(sg, W->op, W->name), *p = n ? tg_tensor_owner(sg, n) : NULL;
    if (!n || !v[n->id]) continue;
    int64_t part = tg_type_numel(&n->type), whole = tg_type_numel(&W->type);
    out[i] = tg_xcalloc((size_t)whole, sizeof(float));
    if (p && tg_param_split_axis(p) >= 0) tg_tensor_gather_whole(v[n->id], p, &W->type, tp, rank, out[i]);
    else memcpy(out[i], v[n->id], sizeof(float) * (size_t)part);
  }
  return out;
}

void tg_tensor_gather_whole(const float *part, const tg_node *p, const tg_type *whole_t, int tp, int rank,
                            float *whole) {
  int64_t n = tg_type_numel(&p->type);
  float *all = tg_xcalloc((size_t)(n * tp), sizeof *all);
  int64_t *counts = tg_xcalloc((size_t)tp, sizeof *counts), *displs = tg_xcalloc((size_t)tp, sizeof *displs);
  for (int q = 0; q < tp; q++) counts[q] = n, displs[q] = q * n;
  memcpy(all + displs[rank], part, sizeof(float) * (size_t)n);
  bool was = tg_comm_use_tensor(true);
  tg_comm_all_gather_in_place(all, counts, displs, (int)sizeof(float));
  tg_comm_use_tensor(was);
  tg_tensor_part_join(all, whole_t, tg_param_split_axis(p), p->init.split_groups, tp, whole);
  free(all), free(counts), free(displs);
}

float **tg_tensor_cut_state(const tg_graph *wsg, float *const *wv, const tg_graph *sg, int tp, int rank) {
  float **out = tg_xcalloc((size_t)sg->n_nodes + 1, sizeof *out);
  for (int i = 0; i < wsg->n_nodes; i++) {
    const tg_node *W = wsg->nodes[i];
    if ((W->op != TG_OP_param && W->op != TG_OP_state) || !W->name) continue;
    const tg_node *n = tg_graph_leaf(sg, W->op, W->name), *p = n ? tg_tensor_owner(sg, n) : NULL;
    if (!n || !wv[i]) continue;
    int64_t part = tg_type_numel(&n->type);
    out[n->id] = tg_xcalloc((size_t)part, sizeof(float));
    int axis = p ? tg_param_split_axis(p) : -1;
    if (axis < 0) memcpy(out[n->id], wv[i], sizeof(float) * (size_t)part);
    else tg_tensor_part_cut(wv[i], &W->type, axis, p->init.split_groups, tp, rank, out[n->id]);
  }
  return out;
}
