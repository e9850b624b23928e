/* emu_nccl.c: NCCL for the emulated device, over MPI (runtime/comm).
 *
 * Each rank of `tgrun --nproc N` is its own process with its own emulated
 * device, whose memory is host memory; an all-reduce is then an MPI
 * average of that memory, in stream order: run at once on a stream that
 * runs everything at once, or recorded in a capture and run when the
 * graph is replayed.  Only what the CUDA backend asks of NCCL is here: a
 * communicator over every rank of the MPI job, an in-place or
 * out-of-place f32 average or sum (all-reduce and reduce-scatter: the
 * data-parallel average, ZeRO's, and the IR's sums), and an all-gather of
 * any type.  What real NCCL would refuse or leave
 * undefined is refused (a NULL buffer, a type it lacks, buffers that
 * overlap other than in nccl.h's in-place layout), and what only this
 * emulation lacks (another type or operation, counts past MPI's int)
 * says so.  A group (ncclGroupStart/End) changes nothing:
 * every rank issues the same calls in the same order, which is all MPI's
 * collectives need. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "emu_internal.h"

static const char ID_MAGIC[] = "tg emulated NCCL";

/* A communicator spans the MPI group that was current when it was made:
 * the data ranks, or with tg_comm_use_tensor on the mesh's tensor axis
 * (tensor parallelism's second communicator). */
struct ncclComm {
  int nranks, rank;
  bool tensor;
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
  bool tensor = tg_comm_using_tensor();
  int size = tensor ? tg_comm_tensor_size() : tg_comm_size(), me = tensor ? tg_comm_tensor_rank() : tg_comm_rank();
  if (nranks != size || rank != me) {
    emu_set_error("ncclCommInitRank: rank %d of %d, but this process is rank %d of the %d of its MPI group (the emulated "
                  "NCCL spans the group current when the communicator is made: the job's %s ranks)",
                  rank, nranks, me, size, tensor ? "tensor-parallel" : "data-parallel");
    return ncclInvalidUsage;
  }
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return ncclInvalidUsage;
  c->nranks = nranks, c->rank = rank, c->tensor = tensor;
  *comm = c;
  return ncclSuccess;
}

static ncclResult_t comm_destroy(ncclComm_t comm) {
  free(comm);
  return ncclSuccess;
}

/* A collective's arguments, copied into a captured graph. */
typedef struct coll_args {
  uintptr_t send, recv;
  size_t count; /* elements: the all-reduce's; a rank's for the reduce-scatter (recvcount) and all-gather (sendcount) */
  size_t elem;  /* bytes an element */
  bool sum;     /* ncclSum, not ncclAvg */
  bool max;     /* ncclMax (all-reduce only) */
  bool tensor;  /* the communicator's group: the tensor axis's ranks (struct ncclComm) */
} coll_args;

/* The group a collective runs over, made current for its MPI calls; the
 * old setting returned, for restore(). */
static bool enter_group(const coll_args *a) { return tg_comm_use_tensor(a->tensor); }
static int group_size(const coll_args *a) { return a->tensor ? tg_comm_tensor_size() : tg_comm_size(); }
static int group_rank(const coll_args *a) { return a->tensor ? tg_comm_tensor_rank() : tg_comm_rank(); }

/* Runs fn(a) in stream order on s: at once, or recorded in a capture to
 * run when the graph is replayed. */
static ncclResult_t in_stream_order(const char *call, CUstream s, emu_host_fn fn, const coll_args *a,
                                    const emu_access *access) {
  emu_lock();
  CUresult r = emu_ctx_check(call);
  if (!r && !emu_capture_host(s, call, fn, a, sizeof *a, access, 2, &r)) {
    char why[1024] = "";
    r = fn(a, why, sizeof why);
    if (r) {
      emu_set_sticky(r);
      emu_set_error("%s: %s", call, why);
    }
  }
  emu_unlock();
  return r ? ncclInvalidArgument : ncclSuccess;
}

/* The average or sum, in place in recv; the same bits on every rank
 * (tg_comm_average: one sum, then one division). */
static CUresult average(const void *arg, char *why, size_t whylen) {
  const coll_args *a = arg;
  if (!emu_range_ok(a->send, a->count * 4, "ncclAllReduce's send buffer", why, whylen) ||
      !emu_range_ok(a->recv, a->count * 4, "ncclAllReduce's receive buffer", why, whylen))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (a->send != a->recv) memmove((void *)a->recv, (const void *)a->send, a->count * 4);
  bool was = enter_group(a);
  if (a->max) tg_comm_max_floats((float *)a->recv, (int64_t)a->count);
  else if (a->sum) tg_comm_sum_floats((float *)a->recv, (int64_t)a->count);
  else tg_comm_average((float *)a->recv, (int64_t)a->count);
  tg_comm_use_tensor(was);
  return CUDA_SUCCESS;
}

static ncclResult_t all_reduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, CUstream s) {
  static const char call[] = "ncclAllReduce";
  if (!comm) {
    emu_set_error("%s: no communicator", call);
    return ncclInvalidArgument;
  }
  if (type != ncclFloat32 || (op != ncclAvg && op != ncclSum && op != ncclMax)) {
    emu_set_error("%s: the emulated NCCL averages, sums and takes the max of f32 only (ncclFloat32; ncclAvg, ncclSum "
                  "or ncclMax); got type %d, op %d", call, (int)type, (int)op);
    return ncclInvalidArgument;
  }
  coll_args a = {(uintptr_t)send, (uintptr_t)recv, count, 4, op == ncclSum, op == ncclMax, comm->tensor};
  const emu_access access[] = {{.lo = a.send, .hi = a.send + count * 4, .write = false, .what = "its send buffer"},
                               {.lo = a.recv, .hi = a.recv + count * 4, .write = true, .what = "its receive buffer"}};
  return in_stream_order(call, s, average, &a, access);
}

/* ---- ZeRO's reduce-scatter and all-gather -------------------------------------- */

/* The bytes of an element of a type of nccl.h; 0: none of its types. */
static size_t type_bytes(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8: return 1;
  case ncclFloat16:
  case ncclBfloat16: return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32: return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64: return 8;
  default: return 0;
  }
}

/* Whether the whole buffer (nranks blocks of count) and a rank's block
 * are placed as nccl.h allows: apart, or the block at rank's place in the
 * whole ("in place"); anything else NCCL leaves undefined.  Sets *in_place. */
static bool layout_ok(const char *call, uintptr_t whole, uintptr_t block, size_t bytes, int nranks, int rank,
                      const char *whole_name, const char *block_name, bool *in_place) {
  *in_place = block == whole + (uintptr_t)rank * bytes;
  if (*in_place || block + bytes <= whole || whole + (uintptr_t)nranks * bytes <= block) return true;
  emu_set_error("%s: %s overlaps %s other than in place (%s == %s + rank x count): NCCL's result would be undefined",
                call, block_name, whole_name, block_name, whole_name);
  return false;
}

/* The checks both calls share: a communicator, non-NULL buffers, counts
 * this emulation can pass to MPI (an int each, nranks of them). */
static bool shard_call_ok(const char *call, ncclComm_t comm, const void *send, const void *recv, size_t count,
                          size_t elem) {
  if (!comm) {
    emu_set_error("%s: no communicator", call);
    return false;
  }
  if (count && (!send || !recv)) {
    emu_set_error("%s: a NULL %s buffer", call, send ? "receive" : "send");
    return false;
  }
  if (count > (size_t)INT32_MAX / (size_t)comm->nranks || count * elem > (size_t)INT32_MAX) {
    emu_set_error("%s: %zu elements a rank on %d ranks: past what the emulated NCCL passes to MPI (2^31 - 1 in all)",
                  call, count, comm->nranks);
    return false;
  }
  return true;
}

/* The reduce-scatter: rank r's block of every rank's send, summed, and for
 * ncclAvg scaled as the all-reduce's average is (tg_comm_reduce_scatter_average);
 * in place through a copy, since MPI allows no overlap. */
static CUresult reduce_scatter_average(const void *arg, char *why, size_t whylen) {
  const coll_args *a = arg;
  int nranks = group_size(a);
  size_t bytes = a->count * 4;
  if (!emu_range_ok(a->send, bytes * (size_t)nranks, "ncclReduceScatter's send buffer", why, whylen) ||
      !emu_range_ok(a->recv, bytes, "ncclReduceScatter's receive buffer", why, whylen))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  int64_t *counts = malloc(sizeof *counts * (size_t)nranks);
  float *mine = malloc(bytes ? bytes : 1);
  if (!counts || !mine) {
    free(counts), free(mine);
    snprintf(why, whylen, "out of host memory");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (int q = 0; q < nranks; q++) counts[q] = (int64_t)a->count;
  bool was = enter_group(a);
  if (a->sum) tg_comm_reduce_scatter_sum((const float *)a->send, mine, (int64_t)a->count);
  else tg_comm_reduce_scatter_average((const float *)a->send, mine, counts);
  tg_comm_use_tensor(was);
  memcpy((void *)a->recv, mine, bytes);
  free(counts), free(mine);
  return CUDA_SUCCESS;
}

static ncclResult_t reduce_scatter(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                   ncclComm_t comm, CUstream s) {
  static const char call[] = "ncclReduceScatter";
  if (!shard_call_ok(call, comm, send, recv, count, 4)) return ncclInvalidArgument;
  if (type != ncclFloat32 || (op != ncclAvg && op != ncclSum)) {
    emu_set_error("%s: the emulated NCCL averages and sums f32 only (ncclFloat32, ncclAvg or ncclSum); got type %d, "
                  "op %d", call, (int)type, (int)op);
    return ncclInvalidArgument;
  }
  if (!count) return ncclSuccess;
  coll_args a = {(uintptr_t)send, (uintptr_t)recv, count, 4, op == ncclSum, false, comm->tensor};
  bool in_place;
  if (!layout_ok(call, a.send, a.recv, count * 4, comm->nranks, comm->rank, "sendbuff", "recvbuff", &in_place))
    return ncclInvalidArgument;
  const emu_access access[] = {
      {.lo = a.send, .hi = a.send + count * 4 * (size_t)comm->nranks, .write = false, .what = "its send buffer"},
      {.lo = a.recv, .hi = a.recv + count * 4, .write = true, .what = "its receive buffer"}};
  return in_stream_order(call, s, reduce_scatter_average, &a, access);
}

/* The all-gather: this rank's block to its place in recv (unless it is
 * there: in place), then every rank's block to every rank. */
static CUresult gather(const void *arg, char *why, size_t whylen) {
  const coll_args *a = arg;
  int nranks = group_size(a), me = group_rank(a);
  size_t bytes = a->count * a->elem;
  if (!emu_range_ok(a->send, bytes, "ncclAllGather's send buffer", why, whylen) ||
      !emu_range_ok(a->recv, bytes * (size_t)nranks, "ncclAllGather's receive buffer", why, whylen))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  int64_t *counts = malloc(sizeof *counts * 2 * (size_t)nranks);
  if (!counts) {
    snprintf(why, whylen, "out of host memory");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  int64_t *displs = counts + nranks;
  for (int q = 0; q < nranks; q++) counts[q] = (int64_t)a->count, displs[q] = (int64_t)a->count * q;
  char *mine = (char *)a->recv + (size_t)me * bytes;
  if ((uintptr_t)mine != a->send) memcpy(mine, (const void *)a->send, bytes);
  bool was = enter_group(a);
  tg_comm_all_gather_in_place((void *)a->recv, counts, displs, (int)a->elem);
  tg_comm_use_tensor(was);
  free(counts);
  return CUDA_SUCCESS;
}

static ncclResult_t all_gather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                               CUstream s) {
  static const char call[] = "ncclAllGather";
  size_t elem = type_bytes(type);
  if (!elem) {
    emu_set_error("%s: datatype %d is none of nccl.h's ncclInt8 .. ncclBfloat16", call, (int)type);
    return ncclInvalidArgument;
  }
  if (!shard_call_ok(call, comm, send, recv, count, elem)) return ncclInvalidArgument;
  if (!count) return ncclSuccess;
  coll_args a = {(uintptr_t)send, (uintptr_t)recv, count, elem, false, false, comm->tensor};
  bool in_place;
  if (!layout_ok(call, a.recv, a.send, count * elem, comm->nranks, comm->rank, "recvbuff", "sendbuff", &in_place))
    return ncclInvalidArgument;
  const emu_access access[] = {
      {.lo = a.send, .hi = a.send + count * elem, .write = false, .what = "its send buffer"},
      {.lo = a.recv, .hi = a.recv + count * elem * (size_t)comm->nranks, .write = true, .what = "its receive buffer"}};
  return in_stream_order(call, s, gather, &a, access);
}

static ncclResult_t group_start(void) { return ncclSuccess; }
static ncclResult_t group_end(void) { return ncclSuccess; }

void emu_nccl_fill(tg_cuda_api *api) {
  api->ncclGetUniqueId = get_unique_id;
  api->ncclCommInitRank = comm_init_rank;
  api->ncclCommDestroy = comm_destroy;
  api->ncclCommAbort = comm_destroy;
  api->ncclAllReduce = all_reduce;
  api->ncclReduceScatter = reduce_scatter;
  api->ncclAllGather = all_gather;
  api->ncclGroupStart = group_start;
  api->ncclGroupEnd = group_end;
  api->ncclGetErrorString = error_string;
}
