/* comm.c: MPI for data parallelism (comm.h).
 *
 * No collective waits forever.  Each one is MPI's non-blocking form,
 * polled (sleeping between polls, not spinning) until it completes or
 * tg_comm_set_timeout's limit passes.  So that a rank that times out can
 * say which rank is missing, every rank first sends each other rank a
 * small note, "I have reached collective number k", on a communicator of
 * its own; at a timeout the notes not received name the ranks that never
 * arrived (failed, stopped, or stuck elsewhere).  Then MPI_Abort ends the
 * whole job with that message. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TG_HAVE_MPI
#include <mpi.h>
#endif

static int ranks = 1, me = 0;
static double timeout_s = 300;

void tg_comm_set_timeout(double seconds) {
  if (seconds > 0) timeout_s = seconds;
}

double tg_comm_timeout(void) { return timeout_s; }

#ifdef TG_HAVE_MPI
enum { NOTE_TAG = 7317 };
static MPI_Comm coll = MPI_COMM_NULL, notes = MPI_COMM_NULL;
static unsigned long long seq; /* collectives started */

static double mono(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Starts a collective's notes: a receive of each other rank's note, and
 * this rank's note to each of them.  req holds 2 * ranks requests. */
static void notes_start(MPI_Request *req, unsigned long long *in, unsigned long long *out) {
  *out = ++seq;
  for (int j = 0; j < ranks; j++) {
    req[j] = req[ranks + j] = MPI_REQUEST_NULL;
    if (j == me) continue;
    MPI_Irecv(&in[j], 1, MPI_UNSIGNED_LONG_LONG, j, NOTE_TAG, notes, &req[j]);
    MPI_Isend(out, 1, MPI_UNSIGNED_LONG_LONG, j, NOTE_TAG, notes, &req[ranks + j]);
  }
}

/* Waits for the collective *op and the notes, polling; past the timeout,
 * names the ranks whose notes never came and aborts the job. */
static void wait_all(MPI_Request *op, MPI_Request *req, const char *what) {
  double t0 = mono();
  long polls = 0;
  for (;;) {
    int done = 0, notes_done = 0;
    MPI_Test(op, &done, MPI_STATUS_IGNORE);
    MPI_Testall(2 * ranks, req, &notes_done, MPI_STATUSES_IGNORE);
    if (done && notes_done) return;
    if (++polls > 2000) {
      /* past the first moments, sleep between polls: a rank waiting
       * for a slow or stopped one must not burn a core */
      struct timespec ts = {0, polls > 20000 ? 1000000 : 50000};
      nanosleep(&ts, NULL);
    }
    if (mono() - t0 <= timeout_s) continue;
    char missing[512] = "";
    size_t n = 0;
    int nmiss = 0;
    for (int j = 0; j < ranks; j++) {
      if (j == me || req[j] == MPI_REQUEST_NULL) continue;
      int got = 0;
      MPI_Test(&req[j], &got, MPI_STATUS_IGNORE);
      if (got) continue;
      if (n < sizeof missing - 16) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", nmiss ? ", " : "", j);
      nmiss++;
    }
    if (nmiss)
      fprintf(stderr,
              "tgrun: error: rank %d: rank%s %s did not reach %s (collective %llu) within %g s: %s failed, stopped "
              "or hangs elsewhere; ending the job (the limit is rank_timeout in train.cfg)\n",
              me, nmiss > 1 ? "s" : "", missing, what, seq, timeout_s, nmiss > 1 ? "they" : "it");
    else
      fprintf(stderr,
              "tgrun: error: rank %d: %s (collective %llu) did not complete within %g s although every rank reached "
              "it; ending the job (the limit is rank_timeout in train.cfg)\n",
              me, what, seq, timeout_s);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Runs one collective, started by start(), under the timeout. */
#define COLLECTIVE(what, start)                                                      \
  do {                                                                               \
    MPI_Request *req_ = malloc(sizeof(MPI_Request) * 2 * (size_t)ranks);             \
    unsigned long long *in_ = malloc(sizeof *in_ * (size_t)ranks), out_;             \
    if (!req_ || !in_) {                                                             \
      fprintf(stderr, "tg: out of memory\n");                                        \
      exit(1);                                                                       \
    }                                                                                \
    notes_start(req_, in_, &out_);                                                   \
    MPI_Request op_;                                                                 \
    start;                                                                           \
    wait_all(&op_, req_, what);                                                      \
    free(req_);                                                                      \
    free(in_);                                                                       \
  } while (0)
#endif

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
  for (size_t at = 0; at < n; at += 1 << 30) {
    int c = (int)(n - at < (1u << 30) ? n - at : 1u << 30);
    COLLECTIVE("a broadcast", MPI_Ibcast((char *)buf + at, c, MPI_BYTE, 0, coll, &op_));
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
  MPI_Comm_dup(MPI_COMM_WORLD, &coll);
  MPI_Comm_dup(MPI_COMM_WORLD, &notes);
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
  if (notes != MPI_COMM_NULL) MPI_Comm_free(&notes);
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

void tg_comm_sum_doubles(double *buf, int n) {
  if (ranks == 1) return;
#ifdef TG_HAVE_MPI
  if (me == 0) COLLECTIVE("a sum", MPI_Ireduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, 0, coll, &op_));
  else COLLECTIVE("a sum", MPI_Ireduce(buf, NULL, n, MPI_DOUBLE, MPI_SUM, 0, coll, &op_));
  COLLECTIVE("a sum's broadcast", MPI_Ibcast(buf, n, MPI_DOUBLE, 0, coll, &op_));
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
