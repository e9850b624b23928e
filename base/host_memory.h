/* host_memory.h: how much memory this process can still take on the host
 * (host_memory.c), for the checks that refuse a run before it allocates.
 *
 * Three limits apply, and the smallest wins: the machine's (MemAvailable
 * in /proc/meminfo), a cgroup's (a container's or a Slurm job's
 * memory.max less memory.current) and the address-space limit (RLIMIT_AS:
 * `ulimit -v`, `prlimit --as`, set by some clusters), less the address
 * space the process already maps.  Under RLIMIT_AS an allocation that
 * fails does not always fail cleanly: OpenBLAS's allocator retries without
 * end, so a run that does not fit must be refused before it starts. */
#ifndef TG_HOST_MEMORY_H
#define TG_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of address space a process of tg maps beyond its planned tensors:
 * the compiled kernels and their libraries (OpenBLAS's buffers among
 * them) and a stack for each of `threads` threads (0: OMP_NUM_THREADS
 * where set, else one per core).  It
 * counts against RLIMIT_AS only: most of it is reserved, never touched,
 * so MemAvailable and a cgroup do not see it. */
int64_t tg_host_runtime_reserve(int64_t threads);

/* The bytes this process can still take: the smallest of the three limits
 * above, where reserve (tg_host_runtime_reserve) is taken off RLIMIT_AS's
 * headroom first; -1 when none is known.  what (whatlen bytes) says which
 * limit it is and how to raise it, for messages. */
int64_t tg_host_memory_available(int64_t reserve, char *what, size_t whatlen);

#endif
