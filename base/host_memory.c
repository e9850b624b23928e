/* host_memory.c: the memory a process can still take on the host
 * (host_memory.h). */
#include "host_memory.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* what the runtime maps whatever its size: see tg_host_runtime_reserve */
enum { RESERVE_BASE_MIB = 256 };

static int64_t read_number_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char buf[64] = {0};
  bool ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  if (!ok || !strncmp(buf, "max", 3)) return -1;
  char *end;
  long long v = strtoll(buf, &end, 10);
  return end == buf ? -1 : v;
}

/* The address space mapped now (VmSize): /proc/self/statm's first field,
 * in pages; 0 where it cannot be read. */
static int64_t address_space_used(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long pages = 0;
  if (f) {
    if (fscanf(f, "%lld", &pages) != 1) pages = 0;
    fclose(f);
  }
  return (int64_t)pages * (int64_t)sysconf(_SC_PAGESIZE);
}

int64_t tg_host_runtime_reserve(int64_t threads) {
  const char *omp = getenv("OMP_NUM_THREADS"); /* what OpenMP will start */
  if (threads <= 0 && omp) threads = strtoll(omp, NULL, 10);
  if (threads <= 0) threads = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
  struct rlimit st;
  /* a thread's stack is RLIMIT_STACK's size (glibc's default), 8 MiB where unset */
  int64_t stack = getrlimit(RLIMIT_STACK, &st) == 0 && st.rlim_cur != RLIM_INFINITY ? (int64_t)st.rlim_cur : 8 << 20;
  /* measured with prlimit --as on a tiny model (x86-64, glibc, OpenBLAS):
   * with 1 thread it needs an RLIMIT_AS between 250 and 300 MB, with 2
   * between 300 and 450, with 4 between 450 and 600, of which some 11 MB
   * are mapped at the check; the rest is OpenBLAS's buffers, the C
   * library's per-thread malloc arenas (64 MiB each) and the stacks.  The
   * reserve errs a little above that. */
  return ((int64_t)RESERVE_BASE_MIB << 20) + threads * (stack + (64 << 20));
}

int64_t tg_host_memory_available(int64_t reserve, char *what, size_t whatlen) {
  int64_t avail = -1;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    long long kb;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) avail = (int64_t)kb * 1024;
    fclose(f);
  }
  snprintf(what, whatlen, "MemAvailable in /proc/meminfo");
  int64_t max = read_number_file("/sys/fs/cgroup/memory.max");
  int64_t cur = read_number_file("/sys/fs/cgroup/memory.current");
  if (max > 0 && cur >= 0 && (avail < 0 || max - cur < avail)) {
    avail = max > cur ? max - cur : 0;
    snprintf(what, whatlen, "the cgroup's memory.max less memory.current");
  }
  struct rlimit as;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    double mib = 1024.0 * 1024.0;
    int64_t limit = (int64_t)as.rlim_cur, used = address_space_used();
    int64_t head = limit - used - reserve;
    if (head < 0) head = 0;
    if (avail < 0 || head < avail) {
      avail = head;
      snprintf(what, whatlen,
               "RLIMIT_AS, the address-space limit (ulimit -v, prlimit --as), is %.0f MiB, of which %.0f MiB are "
               "mapped already and %.0f MiB are kept for the kernels' libraries and threads: raise the limit to at "
               "least the run's need plus %.0f MiB, or use fewer threads (threads in train.cfg, OMP_NUM_THREADS)",
               (double)limit / mib, (double)used / mib, (double)reserve / mib, (double)(used + reserve) / mib);
    }
  }
  return avail;
}
