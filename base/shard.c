/* shard.c: how ZeRO cuts a tensor among the ranks (shard.h). */
#include "shard.h"

int64_t tg_shard_elements(int64_t numel, int ranks) {
  if (ranks < 1) ranks = 1;
  int64_t per = (numel + ranks - 1) / ranks;
  return (per + TG_SHARD_ALIGN - 1) / TG_SHARD_ALIGN * TG_SHARD_ALIGN;
}

int64_t tg_shard_extent(int64_t numel, int ranks, int rank, int64_t *first) {
  int64_t s = tg_shard_elements(numel, ranks);
  int64_t at = s * rank;
  if (first) *first = at < numel ? at : numel;
  if (at >= numel) return 0;
  return numel - at < s ? numel - at : s;
}
