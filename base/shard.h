/* shard.h: how ZeRO cuts a tensor among the ranks (shard.c).
 *
 * One rule for the memory plan (passes/zero_plan.c), the collectives
 * (runtime/comm, the backends) and the sharded optimizer
 * (runtime/train/zero.c), so that what tgc reports is what tgrun holds.
 * A tensor is flattened (row-major) and cut into `ranks` shards of the
 * same number of elements, ceil(numel / ranks) rounded up to
 * TG_SHARD_ALIGN: rank q holds elements [q·S, q·S + S) where they exist.
 * Equal shards are what NCCL's reduce-scatter and all-gather move (one
 * count for every rank), and 128 elements start every shard on a 256-byte
 * boundary for bf16 as for f32, so a shard can be a kernel's buffer.  The
 * last ranks' shards end in padding (or are all padding, for a tensor of
 * fewer than (ranks - 1)·S elements): they hold fewer real elements. */
#ifndef TG_SHARD_H
#define TG_SHARD_H

#include <stdint.h>

enum { TG_SHARD_ALIGN = 128 };

/* S: the elements of each rank's shard of a tensor of numel elements,
 * padding included. */
int64_t tg_shard_elements(int64_t numel, int ranks);
/* The real elements rank holds of that tensor (0 .. S), the first of them
 * at element *first of the whole (rank·S). */
int64_t tg_shard_extent(int64_t numel, int ranks, int rank, int64_t *first);

#endif
