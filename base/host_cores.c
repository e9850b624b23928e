/* host_cores.c: how many threads each rank of a run starts.
 *
 * OpenMP starts a thread per CPU by default, in every process.  With N
 * ranks on one machine that is N threads a core, and OpenMP's threads spin
 * while they wait at a barrier for one that has no core: tgrun --nproc 2
 * on 2 cores trained 6.7 times slower with the default than with one
 * thread a rank (docs/performance.md).  So the default divides the
 * machine among the ranks on it, unless the launcher bound each rank to
 * some CPUs, which is that division made already. */
#define _GNU_SOURCE
#include "host_cores.h"

#include <sched.h>
#include <unistd.h>

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int tg_host_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return online_cpus();
}

int tg_threads_per_rank(int64_t asked, int ranks_here, bool *oversubscribed) {
  int mine = tg_host_cores(), all = online_cpus();
  if (mine > all) all = mine;
  if (ranks_here < 1) ranks_here = 1;
  bool bound = mine < all; /* the launcher gave this rank its share */
  int threads;
  if (asked > 0) threads = asked > 1 << 20 ? 1 << 20 : (int)asked;
  else if (bound) threads = mine;
  else threads = all / ranks_here > 1 ? all / ranks_here : 1;
  if (oversubscribed) *oversubscribed = bound ? threads > mine : (int64_t)threads * ranks_here > all;
  return threads;
}
