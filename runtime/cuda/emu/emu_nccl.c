/* emu_nccl.c: NCCL for the emulated device, over MPI (runtime/comm).
 *
 * Each rank of `tgrun --nproc N` is its own process with its own emulated
 * device, whose memory is host memory; an all-reduce is then an MPI
 * average of that memory, in stream order: run at once on a stream that
 * runs everything at once, or recorded in a capture and run when the
 * graph is replayed.  Only what the CUDA backend asks of NCCL is here: a
 * communicator over every rank of the MPI job, and an in-place or
 * out-of-place f32 average.  A group (ncclGroupStart/End) changes nothing:
 * every rank issues the same calls in the same order, which is all MPI's
 * collectives need. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "emu_internal.h"

static const char ID_MAGIC[] = "tg emulated NCCL";

struct ncclComm {
  int nranks, rank;
};

static const char *error_string(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
  case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
  default: return "unhandled error (emulated NCCL)";
  }
}

static ncclResult_t get_unique_id(ncclUniqueId *id) {
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
  return ncclSuccess;
}

static ncclResult_t comm_init_rank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || memcmp(id.internal, ID_MAGIC, sizeof ID_MAGIC)) {
    emu_set_error("ncclCommInitRank: the unique id did not come from ncclGetUniqueId");
    return ncclInvalidArgument;
  }
  if (nranks != tg_comm_size() || rank != tg_comm_rank()) {
    emu_set_error("ncclCommInitRank: rank %d of %d, but this process is rank %d of the %d of its MPI job (the emulated "
                  "NCCL spans the whole job)",
                  rank, nranks, tg_comm_rank(), tg_comm_size());
    return ncclInvalidUsage;
  }
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return ncclInvalidUsage;
  c->nranks = nranks, c->rank = rank;
  *comm = c;
  return ncclSuccess;
}

static ncclResult_t comm_destroy(ncclComm_t comm) {
  free(comm);
  return ncclSuccess;
}

typedef struct reduce_args {
  uintptr_t send, recv;
  size_t count;
} reduce_args;

/* The average, in place in recv; the same bits on every rank
 * (tg_comm_average: one sum, then one division). */
static CUresult average(const void *arg, char *why, size_t whylen) {
  const reduce_args *a = arg;
  if (!emu_range_ok(a->send, a->count * 4, "ncclAllReduce's send buffer", why, whylen) ||
      !emu_range_ok(a->recv, a->count * 4, "ncclAllReduce's receive buffer", why, whylen))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (a->send != a->recv) memmove((void *)a->recv, (const void *)a->send, a->count * 4);
  tg_comm_average((float *)a->recv, (int64_t)a->count);
  return CUDA_SUCCESS;
}

static ncclResult_t all_reduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, CUstream s) {
  static const char call[] = "ncclAllReduce";
  if (!comm) {
    emu_set_error("%s: no communicator", call);
    return ncclInvalidArgument;
  }
  if (type != ncclFloat32 || op != ncclAvg) {
    emu_set_error("%s: the emulated NCCL averages f32 only (ncclFloat32, ncclAvg); got type %d, op %d", call, (int)type,
                  (int)op);
    return ncclInvalidArgument;
  }
  reduce_args a = {(uintptr_t)send, (uintptr_t)recv, count};
  emu_lock();
  CUresult r = emu_ctx_check(call);
  const emu_access access[] = {{.lo = a.send, .hi = a.send + count * 4, .write = false, .what = "its send buffer"},
                               {.lo = a.recv, .hi = a.recv + count * 4, .write = true, .what = "its receive buffer"}};
  if (!r && !emu_capture_host(s, call, average, &a, sizeof a, access, 2, &r)) {
    char why[1024] = "";
    r = average(&a, why, sizeof why);
    if (r) {
      emu_set_sticky(r);
      emu_set_error("%s: %s", call, why);
    }
  }
  emu_unlock();
  return r ? ncclInvalidArgument : ncclSuccess;
}

static ncclResult_t group_start(void) { return ncclSuccess; }
static ncclResult_t group_end(void) { return ncclSuccess; }

void emu_nccl_fill(tg_cuda_api *api) {
  api->ncclGetUniqueId = get_unique_id;
  api->ncclCommInitRank = comm_init_rank;
  api->ncclCommDestroy = comm_destroy;
  api->ncclCommAbort = comm_destroy;
  api->ncclAllReduce = all_reduce;
  api->ncclGroupStart = group_start;
  api->ncclGroupEnd = group_end;
  api->ncclGetErrorString = error_string;
}
