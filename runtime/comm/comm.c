/* comm.c: MPI for data parallelism (comm.h). */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef TG_HAVE_MPI
#include <mpi.h>
#endif

static int ranks = 1, me = 0;

int tg_comm_size(void) { return ranks; }

int tg_comm_rank(void) { return me; }

int tg_comm_local_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v);
  }
  return 0;
}

void tg_comm_broadcast(void *buf, size_t n) {
  if (ranks == 1) return;
#ifdef TG_HAVE_MPI
  MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
#else
  (void)buf, (void)n;
#endif
}

bool tg_comm_launched(void) {
  /* Open MPI's mpirun, MPICH/Hydra (PMI), and Slurm's srun */
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
         (getenv("SLURM_NTASKS") && getenv("SLURM_PROCID") && atoi(getenv("SLURM_NTASKS")) > 1);
}

bool tg_comm_available(void) {
#ifdef TG_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool tg_comm_init(int *argc, char ***argv, int *rank, int *size, char *why, size_t whylen) {
  *rank = 0, *size = 1;
  if (!tg_comm_launched()) return true;
#ifdef TG_HAVE_MPI
  (void)why, (void)whylen;
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  *rank = me, *size = ranks;
  return true;
#else
  (void)argc, (void)argv;
  snprintf(why, whylen, "started by mpirun or srun, but this tgrun was built without MPI "
           "(install libopenmpi-dev and rebuild)");
  return false;
#endif
}

void tg_comm_finalize(void) {
#ifdef TG_HAVE_MPI
  if (ranks > 1 || tg_comm_launched()) MPI_Finalize();
#endif
}

void tg_comm_average(float *buf, int64_t n) {
  if (ranks == 1) return;
#ifdef TG_HAVE_MPI
  /* in chunks: MPI counts are int */
  const float inv = 1.0f / (float)ranks;
  for (int64_t at = 0; at < n; at += 1 << 28) {
    int c = (int)(n - at < (1 << 28) ? n - at : 1 << 28);
    MPI_Allreduce(MPI_IN_PLACE, buf + at, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < c; i++) buf[at + i] *= inv;
  }
#else
  (void)buf, (void)n;
#endif
}

void tg_comm_sum_doubles(double *buf, int n) {
  if (ranks == 1) return;
#ifdef TG_HAVE_MPI
  if (me == 0) MPI_Reduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  else MPI_Reduce(buf, NULL, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Bcast(buf, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
#else
  (void)buf, (void)n;
#endif
}

bool tg_comm_all_equal(uint64_t v) {
  if (ranks == 1) return true;
#ifdef TG_HAVE_MPI
  uint64_t lo = v, hi = v;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
#else
  (void)v;
  return true;
#endif
}

void tg_comm_barrier(void) {
#ifdef TG_HAVE_MPI
  if (ranks > 1) MPI_Barrier(MPI_COMM_WORLD);
#endif
}
