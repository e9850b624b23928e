/* comm.c: MPI for data parallelism (comm.h).
 *
 * No collective waits forever.  Each one is MPI's non-blocking form,
 * polled (sleeping between polls, not spinning) until it completes or
 * tg_comm_set_timeout's limit passes.  While it waits, a rank answers
 * pings on a communicator of its own.  A rank that times out pings every
 * other rank: those waiting in a collective answer at once, so the ones
 * that do not answer within a few seconds are named as failed, stopped
 * (SIGSTOP) or hung elsewhere.  Then MPI_Abort ends the whole job. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TG_HAVE_MPI
#include <mpi.h>
#endif

/* The data group's size and this rank's place in it: the whole world, or
 * after tg_comm_split_mesh the ranks that hold the same tensor part. */
static int ranks = 1, me = 0;
static int world_ranks = 1, world_me = 0;
static int tranks = 1, tme = 0; /* the tensor group (tg_comm_split_mesh) */
static bool on_tensor;          /* tg_comm_use_tensor: the IR's collectives over the tensor group */
static double timeout_s = 300;

void tg_comm_set_timeout(double seconds) {
  if (seconds > 0) timeout_s = seconds;
}

double tg_comm_timeout(void) { return timeout_s; }

#ifdef TG_HAVE_MPI
enum { PING_TAG = 7317, PONG_TAG = 7318 };
static MPI_Comm coll = MPI_COMM_NULL, pings = MPI_COMM_NULL, tcoll = MPI_COMM_NULL;
static unsigned long long seq; /* collectives started */

static double mono(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void nap(long polls) {
  /* past the first moments, sleep between polls: a rank waiting for a
   * slow or stopped one must not burn a core */
  if (polls < 2000) return;
  struct timespec ts = {0, polls > 20000 ? 1000000 : 50000};
  nanosleep(&ts, NULL);
}

/* Answers the pings of ranks that have timed out and ask who is alive. */
static void answer_pings(void) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, PING_TAG, pings, &flag, &st);
    if (!flag) return;
    int x;
    MPI_Recv(&x, 1, MPI_INT, st.MPI_SOURCE, PING_TAG, pings, MPI_STATUS_IGNORE);
    MPI_Send(&world_me, 1, MPI_INT, st.MPI_SOURCE, PONG_TAG, pings);
  }
}

/* Past the timeout: pings every other rank; a rank waiting in a
 * collective answers at once, so the ones that do not answer within a
 * few seconds are the ones that failed, stopped or hang elsewhere.  Names
 * them and ends the job. */
static _Noreturn void timed_out(const char *what) {
  MPI_Request *req = malloc(sizeof *req * 2 * (size_t)world_ranks);
  int *in = malloc(sizeof *in * (size_t)world_ranks);
  if (!req || !in) {
    fprintf(stderr, "tg: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
  }
  for (int j = 0; j < world_ranks; j++) {
    req[j] = req[world_ranks + j] = MPI_REQUEST_NULL;
    if (j == world_me) continue;
    MPI_Irecv(&in[j], 1, MPI_INT, j, PONG_TAG, pings, &req[j]);
    MPI_Isend(&world_me, 1, MPI_INT, j, PING_TAG, pings, &req[world_ranks + j]);
  }
  double grace = timeout_s < 5 ? timeout_s : 5, t0 = mono();
  long polls = 0;
  int all = 0;
  while (!all && mono() - t0 < grace) {
    answer_pings();
    MPI_Testall(world_ranks, req, &all, MPI_STATUSES_IGNORE);
    nap(++polls);
  }
  char missing[512] = "";
  size_t n = 0;
  int nmiss = 0;
  for (int j = 0; j < world_ranks; j++) {
    if (j == world_me) continue;
    int got = req[j] == MPI_REQUEST_NULL;
    if (!got) MPI_Test(&req[j], &got, MPI_STATUS_IGNORE);
    if (got) continue;
    if (n < sizeof missing - 16) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", nmiss ? ", " : "", j);
    nmiss++;
  }
  if (nmiss)
    fprintf(stderr,
            "tgrun: error: rank %d: waited %g s in %s (collective %llu) for rank%s %s, which did not answer: %s failed, "
            "stopped or hangs; ending the job (the limit is rank_timeout in train.cfg)\n",
            world_me, timeout_s, what, seq, nmiss > 1 ? "s" : "", missing, nmiss > 1 ? "they" : "it");
  else
    fprintf(stderr,
            "tgrun: error: rank %d: %s (collective %llu) did not complete within %g s, though every rank answers: the "
            "world_ranks wait in different collectives; ending the job (the limit is rank_timeout in train.cfg)\n",
            world_me, what, seq, timeout_s);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* Waits for the collective *op, polling and answering pings; past the
 * timeout, timed_out. */
static void wait_for(MPI_Request *op, const char *what) {
  double t0 = mono();
  long polls = 0;
  for (;;) {
    int done = 0;
    MPI_Test(op, &done, MPI_STATUS_IGNORE);
    if (done) return;
    answer_pings();
    nap(++polls);
    if (mono() - t0 > timeout_s) timed_out(what);
  }
}

/* Runs one collective, started by start() into op_, under the timeout. */
#define COLLECTIVE(what, start) \
  do {                          \
    MPI_Request op_;            \
    seq++;                      \
    start;                      \
    wait_for(&op_, what);       \
  } while (0)
#endif

/* The group the IR's collectives run over: the data group, or the tensor
 * group while tg_comm_use_tensor is on. */
#ifdef TG_HAVE_MPI
#define GROUP (on_tensor ? tcoll : coll)
#endif
#define GROUP_SIZE (on_tensor ? tranks : ranks)
#define GROUP_ME (on_tensor ? tme : me)

int tg_comm_size(void) { return ranks; }
int tg_comm_world_rank(void) { return world_me; }
int tg_comm_world_size(void) { return world_ranks; }
int tg_comm_tensor_rank(void) { return tme; }
int tg_comm_tensor_size(void) { return tranks; }

bool tg_comm_using_tensor(void) { return on_tensor; }

bool tg_comm_use_tensor(bool tensor) {
  bool was = on_tensor;
  on_tensor = tensor;
  return was;
}

bool tg_comm_split_mesh(int tp, char *why, size_t whylen) {
  if (tp < 1 || world_ranks % tp) {
    snprintf(why, whylen, "a tensor axis of %d ranks needs a multiple of %d ranks, and this run has %d: start it with "
             "tgrun --nproc %d (or mpirun -np %d)", tp, tp, world_ranks, world_ranks < tp ? tp : (world_ranks / tp + 1) * tp,
             world_ranks < tp ? tp : (world_ranks / tp + 1) * tp);
    return false;
  }
  if (tp == 1) return true;
#ifdef TG_HAVE_MPI
  /* tensor-parallel ranks adjacent (Megatron's order): world rank w is
   * tensor rank w % tp of data rank w / tp */
  MPI_Comm data;
  MPI_Comm_split(MPI_COMM_WORLD, world_me / tp, world_me % tp, &tcoll);
  MPI_Comm_split(MPI_COMM_WORLD, world_me % tp, world_me / tp, &data);
  MPI_Comm_free(&coll);
  coll = data;
  MPI_Comm_rank(tcoll, &tme);
  MPI_Comm_size(tcoll, &tranks);
  MPI_Comm_rank(coll, &me);
  MPI_Comm_size(coll, &ranks);
  return true;
#else
  snprintf(why, whylen, "a tensor axis of %d ranks needs MPI (install libopenmpi-dev and rebuild)", tp);
  return false;
#endif
}

int tg_comm_rank(void) { return me; }

int tg_comm_local_size(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  /* srun (PMIx or PMI-2) sets none of those: its tasks per node read
   * "8(x2)" or "8,7"; this node's is the first number when they agree,
   * and the count of the node's own tasks is not exported otherwise */
  const char *slurm = getenv("SLURM_LOCALID") ? getenv("SLURM_STEP_TASKS_PER_NODE") : NULL;
  if (!slurm && getenv("SLURM_LOCALID")) slurm = getenv("SLURM_TASKS_PER_NODE");
  if (slurm && atoi(slurm) > 0) return atoi(slurm);
  return 1;
}

int tg_comm_local_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v);
  }
  return 0;
}

void tg_comm_broadcast(void *buf, size_t n) {
  if (GROUP_SIZE == 1) return;
#ifdef TG_HAVE_MPI
  for (size_t at = 0; at < n; at += 1 << 30) {
    int c = (int)(n - at < (1u << 30) ? n - at : 1u << 30);
    COLLECTIVE("a broadcast", MPI_Ibcast((char *)buf + at, c, MPI_BYTE, 0, GROUP, &op_));
  }
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
  world_me = me, world_ranks = ranks;
  MPI_Comm_dup(MPI_COMM_WORLD, &coll);
  MPI_Comm_dup(MPI_COMM_WORLD, &pings);
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
  if (coll != MPI_COMM_NULL) MPI_Comm_free(&coll);
  if (tcoll != MPI_COMM_NULL) MPI_Comm_free(&tcoll);
  if (pings != MPI_COMM_NULL) MPI_Comm_free(&pings);
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
    COLLECTIVE("the gradients' all-reduce", MPI_Iallreduce(MPI_IN_PLACE, buf + at, c, MPI_FLOAT, MPI_SUM, coll, &op_));
    for (int i = 0; i < c; i++) buf[at + i] *= inv;
  }
#else
  (void)buf, (void)n;
#endif
}

#ifdef TG_HAVE_MPI
/* counts (and displacements) as MPI's ints; NULL displs: none */
/* One count a rank of the group the IR's collectives use now. */
static int *int_counts(const int64_t *counts, const char *what) {
  int group = GROUP_SIZE;
  int *c = malloc(sizeof *c * (size_t)group);
  if (!c) {
    fprintf(stderr, "tg: out of memory for %s\n", what);
    exit(1);
  }
  for (int q = 0; q < group; q++) {
    if (counts[q] < 0 || counts[q] > INT32_MAX) {
      fprintf(stderr, "tg: internal error: %s of %lld elements on rank %d: over MPI's 2^31 - 1\n", what,
              (long long)counts[q], q);
      abort();
    }
    c[q] = (int)counts[q];
  }
  return c;
}
#endif

void tg_comm_reduce_scatter_average(const float *send, float *recv, const int64_t *counts) {
  if (ranks == 1) {
    memmove(recv, send, sizeof(float) * (size_t)counts[0]);
    return;
  }
#ifdef TG_HAVE_MPI
  int *c = int_counts(counts, "a reduce-scatter");
  COLLECTIVE("the gradients' reduce-scatter", MPI_Ireduce_scatter(send, recv, c, MPI_FLOAT, MPI_SUM, coll, &op_));
  const float inv = 1.0f / (float)ranks;
  for (int i = 0; i < c[me]; i++) recv[i] *= inv;
  free(c);
#endif
}

void tg_comm_reduce_scatter_average_f64(const double *send, double *recv, const int64_t *counts) {
  if (ranks == 1) {
    memmove(recv, send, sizeof(double) * (size_t)counts[0]);
    return;
  }
#ifdef TG_HAVE_MPI
  int *c = int_counts(counts, "a reduce-scatter");
  COLLECTIVE("the gradients' reduce-scatter", MPI_Ireduce_scatter(send, recv, c, MPI_DOUBLE, MPI_SUM, coll, &op_));
  for (int i = 0; i < c[me]; i++) recv[i] /= ranks;
  free(c);
#endif
}

/* An in-place all-reduce of the IR's group, in chunks (MPI counts are
 * int): elem bytes an element of type t, reduced by op. */
#ifdef TG_HAVE_MPI
static void allreduce_in_place(void *buf, int64_t n, MPI_Datatype t, size_t elem, MPI_Op op, const char *what) {
  for (int64_t at = 0; at < n; at += 1 << 28) {
    int c = (int)(n - at < (1 << 28) ? n - at : 1 << 28);
    COLLECTIVE(what, MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + (size_t)at * elem, c, t, op, GROUP, &op_));
  }
}
#endif

void tg_comm_sum_floats(float *buf, int64_t n) {
  if (GROUP_SIZE == 1) return;
#ifdef TG_HAVE_MPI
  allreduce_in_place(buf, n, MPI_FLOAT, sizeof *buf, MPI_SUM, "an all_reduce");
#else
  (void)buf, (void)n;
#endif
}

void tg_comm_max_floats(float *buf, int64_t n) {
  if (GROUP_SIZE == 1) return;
#ifdef TG_HAVE_MPI
  allreduce_in_place(buf, n, MPI_FLOAT, sizeof *buf, MPI_MAX, "an all_max");
#else
  (void)buf, (void)n;
#endif
}

void tg_comm_max_doubles(double *buf, int64_t n) {
  if (GROUP_SIZE == 1) return;
#ifdef TG_HAVE_MPI
  allreduce_in_place(buf, n, MPI_DOUBLE, sizeof *buf, MPI_MAX, "an all_max");
#else
  (void)buf, (void)n;
#endif
}

void tg_comm_reduce_scatter_sum(const float *send, float *recv, int64_t block) {
  if (GROUP_SIZE == 1) {
    memmove(recv, send, sizeof(float) * (size_t)block);
    return;
  }
#ifdef TG_HAVE_MPI
  if (block > INT32_MAX) {
    fprintf(stderr, "tg: internal error: a reduce_scatter of %lld elements a rank: over MPI's 2^31 - 1\n", (long long)block);
    abort();
  }
  COLLECTIVE("a reduce_scatter", MPI_Ireduce_scatter_block(send, recv, (int)block, MPI_FLOAT, MPI_SUM, GROUP, &op_));
#endif
}

void tg_comm_all_gather_in_place(void *buf, const int64_t *counts, const int64_t *displs, int elem_bytes) {
  if (GROUP_SIZE == 1) return;
#ifdef TG_HAVE_MPI
  MPI_Datatype t = elem_bytes == 8 ? MPI_DOUBLE : elem_bytes == 4 ? MPI_FLOAT : elem_bytes == 2 ? MPI_UINT16_T : MPI_BYTE;
  int *c = int_counts(counts, "an all-gather");
  int *at = int_counts(displs, "an all-gather's offsets");
  COLLECTIVE("the parameters' all-gather", MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c, at, t, GROUP, &op_));
  free(c);
  free(at);
#else
  (void)buf, (void)counts, (void)displs, (void)elem_bytes;
#endif
}

void tg_comm_gather_to_root(const float *mine, float *all, const int64_t *counts, const int64_t *displs) {
  if (ranks == 1) {
    memmove(all + displs[0], mine, sizeof(float) * (size_t)counts[0]);
    return;
  }
#ifdef TG_HAVE_MPI
  int *c = int_counts(counts, "a gather");
  int *at = int_counts(displs, "a gather's offsets");
  COLLECTIVE("the optimizer state's gather", MPI_Igatherv(mine, c[me], MPI_FLOAT, all, c, at, MPI_FLOAT, 0, coll, &op_));
  free(c);
  free(at);
#else
  (void)mine, (void)all;
#endif
}

void tg_comm_sum_doubles(double *buf, int n) {
  if (GROUP_SIZE == 1) return;
#ifdef TG_HAVE_MPI
  if (GROUP_ME == 0) COLLECTIVE("a sum", MPI_Ireduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, 0, GROUP, &op_));
  else COLLECTIVE("a sum", MPI_Ireduce(buf, NULL, n, MPI_DOUBLE, MPI_SUM, 0, GROUP, &op_));
  COLLECTIVE("a sum's broadcast", MPI_Ibcast(buf, n, MPI_DOUBLE, 0, GROUP, &op_));
#else
  (void)buf, (void)n;
#endif
}

bool tg_comm_all_equal(uint64_t v) {
  if (ranks == 1) return true;
#ifdef TG_HAVE_MPI
  uint64_t lo = v, hi = v;
  COLLECTIVE("the replicas' check", MPI_Iallreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, coll, &op_));
  COLLECTIVE("the replicas' check", MPI_Iallreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, coll, &op_));
  return lo == hi;
#else
  (void)v;
  return true;
#endif
}

void tg_comm_barrier(void) {
#ifdef TG_HAVE_MPI
  if (ranks > 1) COLLECTIVE("a barrier", MPI_Ibarrier(coll, &op_));
#endif
}

void tg_comm_allgather_u64(uint64_t v, uint64_t *all) {
  all[0] = v;
  if (ranks == 1) return;
#ifdef TG_HAVE_MPI
  COLLECTIVE("the configurations' check", MPI_Iallgather(&v, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, coll, &op_));
#endif
}
