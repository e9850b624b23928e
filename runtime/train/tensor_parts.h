/* tensor_parts.h: a parameter's part on one rank of the mesh's tensor axis,
 * cut from the whole tensor and joined back (passes/shard_tensor.c splits
 * the graph; weights files and checkpoints hold whole tensors, so that a
 * run resumes with another tensor degree).
 *
 * A param split along axis a in g groups over N ranks: the axis seen as
 * [g, N, n / (g N)], rank r's part the [:, r, :] of it. */
#ifndef TG_TENSOR_PARTS_H
#define TG_TENSOR_PARTS_H

#include "ir.h"

/* The axis a param splits along (-1: none) and its groups. */
int tg_param_split_axis(const tg_node *param);

/* Rank r's part of whole (of type whole_t) into part. */
void tg_tensor_part_cut(const float *whole, const tg_type *whole_t, int axis, int groups, int ranks, int r, float *part);
/* The ranks' parts, one after another in parts (rank 0's first), joined
 * into whole. */
void tg_tensor_part_join(const float *parts, const tg_type *whole_t, int axis, int groups, int ranks, float *whole);

/* The parameter a leaf of an optimizer state graph belongs to: a param
 * itself, or the state leaf of one (AdamW's moments "adam.m.NAME",
 * "adam.v.NAME"); NULL for anything else. */
const tg_node *tg_tensor_owner(const tg_graph *g, const tg_node *leaf);

/* The whole model's leaves for checkpoints: each param and state leaf of
 * sg (a tensor rank's state graph, zero.h) at its whole shape, the one
 * whole_model (the model compiled unsplit) gives its parameter. */
tg_graph *tg_tensor_whole_state(tg_ctx *ctx, const tg_graph *sg, const tg_graph *whole_model);
/* Every tensor rank's values of sg's leaves (indexed by sg's node ids)
 * joined into whole tensors, indexed by wsg's (a collective over the
 * tensor group: every tensor rank calls it).  malloc'ed. */
float **tg_tensor_join_state(const tg_graph *sg, float *const *v, const tg_graph *wsg, int tp, int rank);
/* Split parameter p's part (of p's type) on every tensor rank joined
 * into whole (of whole_t): a collective over the tensor group. */
void tg_tensor_gather_whole(const float *part, const tg_node *p, const tg_type *whole_t, int tp, int rank,
                            float *whole);
/* Whole values of wsg's leaves cut to this rank's parts, indexed by sg's
 * node ids.  malloc'ed. */
float **tg_tensor_cut_state(const tg_graph *wsg, float *const *wv, const tg_graph *sg, int tp, int rank);

#endif
