/* comm.h: the ranks of a data-parallel run, over MPI.
 *
 * tgrun is one process per rank.  Started by mpirun or srun (their
 * environment says so), it joins the MPI job; started alone it is rank 0
 * of 1 and never touches MPI, so a single-process run needs no MPI at all.
 * Built without MPI (no libopenmpi-dev), only the single-process case
 * exists and asking for more ranks is an error. */
#ifndef TG_COMM_H
#define TG_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Joins the MPI job when launched as one; sets *rank and *size (0 and 1
 * otherwise).  False with a message when the launch says MPI but this
 * build has none. */
bool tg_comm_init(int *argc, char ***argv, int *rank, int *size, char *why, size_t whylen);
void tg_comm_finalize(void);
/* This process's rank and the number of ranks (0 and 1 before tg_comm_init
 * and when not launched by mpirun or srun). */
int tg_comm_rank(void);
int tg_comm_size(void);
/* A mesh of data x tensor ranks (tensor parallelism, passes/shard_tensor.c):
 * world rank w is tensor rank w % tp of data rank w / tp.  After the split
 * tg_comm_rank and tg_comm_size, and every collective but the IR's under
 * tg_comm_use_tensor, are the data group's: the ranks that hold the same
 * tensor part (data parallelism, ZeRO, the run's checks).  False with a
 * message when the world is not a multiple of tp. */
bool tg_comm_split_mesh(int tp, char *why, size_t whylen);
int tg_comm_world_rank(void);
int tg_comm_world_size(void);
int tg_comm_tensor_rank(void); /* 0 and 1 without a mesh */
int tg_comm_tensor_size(void);
/* Whether the IR's collectives (tg_comm_sum_floats, _max_floats,
 * _max_doubles, _sum_doubles, _reduce_scatter_sum, _all_gather_in_place,
 * and tg_comm_broadcast: a tensor group's NCCL id) run over the tensor
 * group (true) or the data group; returns the old setting, for the caller
 * to restore.  tg_comm_using_tensor: the setting now. */
bool tg_comm_use_tensor(bool tensor);
bool tg_comm_using_tensor(void);
/* This process's rank among the ranks on its machine, from the launcher's
 * environment (Open MPI, MPICH, Slurm); 0 when not launched.  The CUDA
 * backend takes GPU number local_rank. */
int tg_comm_local_rank(void);
/* How many ranks share this machine, from the launcher's environment (Open
 * MPI, MPICH, PMI); 1 when not launched or not said.  Host memory is
 * theirs together. */
int tg_comm_local_size(void);
/* Rank 0's n bytes at buf, to every rank (the NCCL unique id). */
void tg_comm_broadcast(void *buf, size_t n);
/* Whether the environment is an mpirun/srun launch. */
bool tg_comm_launched(void);
/* Averages buf over the ranks: MPI_Allreduce's sum, then one division,
 * the same on every rank.  Open MPI's all-reduce algorithms (recursive
 * doubling, ring, reduce-scatter + allgather) give every rank the same
 * sum bits, so replicas stay identical; tgrun checks that every step. */
void tg_comm_average(float *buf, int64_t n);
/* ZeRO's reduce-scatter (base/shard.h): send holds one block for each
 * rank, one after another, counts[q] elements for rank q; recv receives
 * counts[rank] elements, the sum over the ranks of their blocks for this
 * rank, averaged as tg_comm_average averages (times 1/size; the _f64 form,
 * the reference interpreter's, divides as its all-reduce does).  Counts
 * above 2^31 - 1 elements are refused (abort: a bucket that large is a
 * planning error). */
void tg_comm_reduce_scatter_average(const float *send, float *recv, const int64_t *counts);
void tg_comm_reduce_scatter_average_f64(const double *send, double *recv, const int64_t *counts);
/* The IR's collectives (ir/ops.def) on f32, as sums (not averages):
 * all_reduce in place over n elements; reduce_scatter from send, one
 * block of `block` elements for each rank one after another, into recv,
 * this rank's block of the sum. */
void tg_comm_sum_floats(float *buf, int64_t n);
void tg_comm_reduce_scatter_sum(const float *send, float *recv, int64_t block);
/* The largest of every rank's buf, elementwise, into every rank's buf (the
 * IR's all_max: a softmax's shift over a vocabulary split across ranks);
 * the same bits on every rank, as a max is exact. */
void tg_comm_max_floats(float *buf, int64_t n);
void tg_comm_max_doubles(double *buf, int64_t n);
/* ZeRO's all-gather, in place: buf is one tensor of elements elem_bytes
 * wide (1, 2, 4 or 8) in which rank q owns counts[q] elements from
 * displs[q]; afterwards every rank holds every rank's part. */
void tg_comm_all_gather_in_place(void *buf, const int64_t *counts, const int64_t *displs, int elem_bytes);
/* Every rank's counts[rank] floats at mine into rank 0's all (a whole
 * tensor: rank q's part at displs[q]; all is ignored elsewhere): ZeRO's
 * shards of the optimizer state, gathered for a checkpoint. */
void tg_comm_gather_to_root(const float *mine, float *all, const int64_t *counts, const int64_t *displs);
/* Sums a few doubles over the ranks (losses, timings), same bits everywhere. */
void tg_comm_sum_doubles(double *buf, int n);
/* Whether every rank passed the same 64-bit value (a hash of its weights). */
bool tg_comm_all_equal(uint64_t v);
void tg_comm_barrier(void);
/* Every rank's v, in rank order, into all[0 .. size). */
void tg_comm_allgather_u64(uint64_t v, uint64_t *all);
/* No collective waits longer than this for the other ranks (default 300
 * s; train.cfg's rank_timeout): past it, the rank pings the others, names
 * those that do not answer (failed, stopped, hung) and ends the whole job
 * (MPI_Abort).  While waiting, a rank sleeps between polls. */
void tg_comm_set_timeout(double seconds);
double tg_comm_timeout(void);
bool tg_comm_available(void); /* built with MPI */

#endif
