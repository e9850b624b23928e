/* emu_internal.h: what the emulated driver's files share (not for the backend).
 *
 * emu_driver.c owns the state (the context, allocations, streams, events,
 * graphs, modules) behind one mutex, which every entry point takes; the
 * helpers here expect it held.  emu_blaslt.c is the cuBLASLt reference
 * GEMM; emu_compile.c builds modules. */
#ifndef TG_EMU_INTERNAL_H
#define TG_EMU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"

/* The device's memory as cuMemGetInfo reports it. */
enum { TG_EMU_TOTAL_MEMORY_GIB = 80 };

/* CUresults the table's enum does not list (NVIDIA's values). */
enum {
  EMU_ERROR_INVALID_CONTEXT = 201,
  EMU_ERROR_NOT_READY = 600,
  EMU_ERROR_MISALIGNED_ADDRESS = 716,
  EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  EMU_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
  EMU_ERROR_STREAM_CAPTURE_UNJOINED = 904,
  EMU_ERROR_CAPTURED_EVENT = 907,
};

/* The device lock: every entry point holds it while it works. */
void emu_lock(void);
void emu_unlock(void);

/* The story of the last failed call, for emu_last_error (per host thread). */
void emu_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The device allocation holding byte p: its bounds.  False if none. */
bool emu_find_alloc(uintptr_t p, uintptr_t *lo, uintptr_t *hi);

/* Whether bytes [p, p + n) lie in one allocation; if not, why (naming
 * `what`) into why.  n == 0 is always fine. */
bool emu_range_ok(uintptr_t p, size_t n, const char *what, char *why, size_t whylen);
/* The same, in the allocation holding byte `base` (an operand's start,
 * when p is one of its later pieces). */
bool emu_range_in(uintptr_t base, uintptr_t p, size_t n, const char *what, char *why, size_t whylen);

/* The context is usable from this thread (cuInit done, a current primary
 * context, no sticky error): CUDA_SUCCESS or why not, with emu_set_error. */
CUresult emu_ctx_check(const char *call);

/* An error that, as on a GPU, ruins the context: every later call returns it. */
void emu_set_sticky(CUresult e);

/* ---- stream order (emu_order.c) ------------------------------------------------ */

/* A vector clock: per slot (a stream, or a branch of a replayed graph),
 * the last of its operations known to have finished.  Slot 0 is the
 * legacy stream. */
enum { EMU_SLOTS = 64 };
typedef struct emu_vclock {
  uint32_t c[EMU_SLOTS];
} emu_vclock;
void emu_vclock_join(emu_vclock *into, const emu_vclock *from);

/* Bytes [lo, hi) an operation reads or writes (a write may read too). */
typedef struct emu_access {
  uintptr_t lo, hi;
  bool write;
  const char *what;           /* "argument 2 (out)", "the destination" */
  uintptr_t alloc_lo, alloc_hi; /* the allocation holding lo (emu_order_access's caller sets them) */
} emu_access;

/* An operation on the stream whose clock is vc, in slot `slot`: ticks the
 * clock, checks each access (each in an allocation, which it names)
 * against the earlier ones of other streams
 * (false, with both operations named in why, when one is not ordered
 * before it) and records them.  `op` names the operation and its stream. */
bool emu_order_access(emu_vclock *vc, int slot, const char *op, const emu_access *acc, int n, char *why,
                      size_t whylen);
/* An allocation freed: its records go. */
void emu_order_forget(uintptr_t alloc_lo);
/* The context destroyed: every record goes. */
void emu_order_reset(void);

/* The live handles of one kind (streams, events, cuBLASLt descriptors ...):
 * a call checks the handle it is given is here, so that a destroyed or
 * made-up one is an error, not a crash.  Defined in emu_driver.c. */
typedef struct emu_registry {
  void **v;
  int n, cap;
} emu_registry;

/* False when out of memory. */
bool emu_reg_add(emu_registry *r, void *p);
bool emu_reg_has(const emu_registry *r, const void *p);
/* False when p is not there; an emptied registry frees its array. */
bool emu_reg_del(emu_registry *r, const void *p);

/* ---- cuBLASLt calls (emu_blaslt.c) ---------------------------------------------- */

typedef struct emu_lt_layout {
  int type;        /* cudaDataType */
  int order;       /* cublasLtOrder_t */
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;  /* elements between batches */
} emu_lt_layout;

typedef struct emu_lt_desc {
  int compute, scale, pointer_mode, transa, transb;
  uint32_t epilogue;
  uintptr_t bias;
  int64_t bias_stride;
  uintptr_t aux;
  int64_t aux_ld, aux_stride;
  int32_t bias_type; /* -1: the default (D's type) */
} emu_lt_desc;

/* One cublasLtMatmul, by value: what a graph replays. */
typedef struct emu_lt_call {
  emu_lt_desc op;
  emu_lt_layout a, b, c, d;
  float alpha, beta;
  uintptr_t A, B, C, D;
} emu_lt_call;

/* Checks a call: CUBLAS_STATUS_SUCCESS, or NOT_SUPPORTED / INVALID_VALUE
 * with why.  Touches no memory. */
cublasStatus_t emu_lt_validate(const emu_lt_call *c, char *why, size_t whylen);
/* Validates (including that every range it touches lies in an
 * allocation) and runs it. */
cublasStatus_t emu_lt_run(const emu_lt_call *c, char *why, size_t whylen);

/* For cublasLtMatmul on a capturing stream: records it, with the function
 * that runs it when the graph is replayed (true).  On another stream:
 * checks its stream order (true, with *status set, when that fails), else
 * false (the caller runs it now).  *status is set when true.  (The runner is passed, not
 * named, so that the driver does not call into cuBLASLt's emulation,
 * which calls into it.) */
typedef cublasStatus_t (*emu_lt_runner)(const emu_lt_call *c, char *why, size_t whylen);
bool emu_capture_matmul(CUstream s, const emu_lt_call *c, emu_lt_runner run, cublasStatus_t *status);

/* An operation the host does in stream order (the emulated NCCL's
 * all-reduce): its arguments are copied, up to EMU_HOST_ARG_MAX bytes,
 * with the device bytes it reads and writes (for the stream-order
 * checker; `what` and `call` must outlive the graph: string literals).
 * It returns CUDA_SUCCESS, or an error with why. */
enum { EMU_HOST_ARG_MAX = 64, EMU_HOST_ACCESS_MAX = 2 };
typedef CUresult (*emu_host_fn)(const void *arg, char *why, size_t whylen);
/* For such an operation on a capturing stream: records it (true).  On
 * another stream: checks its stream order, true with the error in *status
 * when that fails, else false (the caller runs it now).  *status is set
 * when true.  Takes no lock: call it holding emu_lock. */
bool emu_capture_host(CUstream s, const char *call, emu_host_fn fn, const void *arg, size_t n,
                      const emu_access *access, int n_access, CUresult *status);

/* The table's members each part fills (emu_api.c puts them together). */
void emu_driver_fill(tg_cuda_api *api);
void emu_blaslt_fill(tg_cuda_api *api);
void emu_nccl_fill(tg_cuda_api *api);

/* ---- compiling (emu_compile.c) ------------------------------------------------ */

/* The kernels' __launch_bounds__ (the most threads a block may have),
 * which the host compiler never sees (cuda_emu.h defines the qualifier
 * away): emu_compile reads them from the source into a table the module
 * exports under this name, ended by a NULL name; cuModuleLoadData reads
 * it. */
typedef struct tg_emu_launch_bound {
  const char *name;
  int max_threads;
} tg_emu_launch_bound;
#define TG_EMU_LAUNCH_BOUNDS "tg_emu_launch_bounds"

bool emu_compile(const char *src, const char *src_name, const char *arch, void **image, size_t *size,
                 bool *from_cache, char *why, size_t whylen);

/* cuda_emu.h's text, embedded at build time (cmake/embed.cmake). */
extern const char tg_cuda_emu_header[];

#endif
