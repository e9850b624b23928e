/* host_cores.h: how many threads each rank of a run starts on this
 * machine's cores (host_cores.c). */
#ifndef TG_HOST_CORES_H
#define TG_HOST_CORES_H

#include <stdbool.h>
#include <stdint.h>

/* The CPUs this process may run on (its affinity mask; all online CPUs
 * where the mask cannot be read), at least 1. */
int tg_host_cores(void);

/* The threads a rank should start when `ranks_here` ranks share this
 * machine and the user asked for `asked` (0: choose).  Choosing: the
 * process's CPUs when its launcher bound it to some of them (the launcher
 * has divided the machine already), else the machine's CPUs divided
 * among its ranks, at least 1.  *oversubscribed (may be NULL) says
 * whether the threads asked for, with the other ranks', exceed the CPUs. */
int tg_threads_per_rank(int64_t asked, int ranks_here, bool *oversubscribed);

#endif
