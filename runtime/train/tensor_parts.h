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

#endif
