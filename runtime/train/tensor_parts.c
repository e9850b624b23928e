/* tensor_parts.c: cutting a whole tensor into tensor-parallel parts and
 * joining them (tensor_parts.h). */
#include "tensor_parts.h"

#include <string.h>

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
