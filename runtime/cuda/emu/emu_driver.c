/* emu_driver.c: the emulated CUDA driver (emu_api.h): context, memory,
 * modules, launches, streams, events, stream capture and graphs.
 *
 * Handles are pointers to the structs below; every call checks a handle
 * against the live ones (a registry per kind), so a destroyed or made-up
 * handle is CUDA_ERROR_INVALID_HANDLE rather than a crash.  A kernel
 * function handle points into its module's array of them.
 *
 * Launches are described to the emulator by emu_describe_launch just
 * before cuLaunchKernel (names and extents of the pointer arguments); the
 * description belongs to the next launch from the same host thread, and a
 * captured launch keeps it for every replay.
 *
 * What the real driver refuses, this one refuses with the same CUresult:
 * the launch limits (block, __launch_bounds__, static plus dynamic shared
 * memory, parameter space), the capture rules, events last recorded in a
 * capture (CUDA_ERROR_CAPTURED_EVENT).  Work runs when issued, so streams
 * never overlap; every operation goes through the stream-order checker
 * (emu_order.c) first, with the vector clocks kept here: a stream's, the
 * legacy stream's, the host's (what it has synchronized with), an event's
 * (its record's), and at replay one per branch of the graph. */
#define _GNU_SOURCE /* strdup */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_emu.h"
#include "emu_exec.h"
#include "emu_internal.h"

static pthread_mutex_t device_lock = PTHREAD_MUTEX_INITIALIZER;
void emu_lock(void) { pthread_mutex_lock(&device_lock); }
void emu_unlock(void) { pthread_mutex_unlock(&device_lock); }

/* ---- errors ---------------------------------------------------------------- */

static _Thread_local char last_error[16384];

void emu_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
}

static const char *emu_last_error(void) { return last_error; }

static const struct {
  int code;
  const char *name, *text;
} error_names[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {EMU_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {EMU_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {EMU_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {EMU_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not initiated in this stream"},
    {EMU_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
     "capturing stream has unjoined work"},
    {EMU_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult get_error_name(CUresult e, const char **s) {
  for (size_t i = 0; i < sizeof error_names / sizeof *error_names; i++)
    if (error_names[i].code == e) {
      *s = error_names[i].name;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult get_error_string(CUresult e, const char **s) {
  for (size_t i = 0; i < sizeof error_names / sizeof *error_names; i++)
    if (error_names[i].code == e) {
      *s = error_names[i].text;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

static const char *error_name(CUresult e) {
  const char *s;
  return get_error_name(e, &s) == CUDA_SUCCESS ? s : "an unknown CUresult";
}

/* Sets the message and returns the result, for `return fail(...)`. */
static CUresult fail(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static CUresult fail(CUresult r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return r;
}

/* ---- registries of live handles --------------------------------------------- */

bool emu_reg_add(emu_registry *r, void *p) {
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 16;
    void **v = realloc(r->v, sizeof *v * (size_t)cap);
    if (!v) return false;
    r->v = v, r->cap = cap;
  }
  r->v[r->n++] = p;
  return true;
}

bool emu_reg_has(const emu_registry *r, const void *p) {
  for (int i = 0; p && i < r->n; i++)
    if (r->v[i] == p) return true;
  return false;
}

bool emu_reg_del(emu_registry *r, const void *p) {
  for (int i = 0; i < r->n; i++)
    if (r->v[i] == p) {
      r->v[i] = r->v[--r->n];
      if (!r->n) {
        free(r->v);
        *r = (emu_registry){0};
      }
      return true;
    }
  return false;
}

/* ---- the state ----------------------------------------------------------------- */

struct CUctx_st {
  int unused;
};

typedef struct alloc {
  uintptr_t lo, hi;
} alloc;

typedef struct desc {
  char *kernel, *where;
  int nargs;
  char **names;
  size_t *bytes;
} desc;

/* NODE_EVENT is an event-record node (cuEventRecordWithFlags with
 * CU_EVENT_RECORD_EXTERNAL); NODE_DEP (a plain cuEventRecord in the
 * capture) and NODE_WAIT (cuStreamWaitEvent on it) are no nodes of a real
 * graph, only the dependencies between its branches: replay runs nothing
 * for them, the stream-order checker follows them. */
typedef enum { NODE_KERNEL, NODE_MEMCPY, NODE_MEMSET, NODE_MATMUL, NODE_EVENT, NODE_HOST, NODE_DEP, NODE_WAIT } node_kind;

/* One operation of a graph, with everything it needs by value. */
typedef struct node {
  node_kind kind;
  int branch;                           /* 0: the capturing stream's; k: the k-th stream that joined */
  int dep;                              /* NODE_WAIT: the NODE_DEP it waits for */
  struct CUfunc_st *fn;                 /* kernel */
  unsigned grid[3], block[3], shared;
  unsigned char *argbytes;              /* the argument values, packed */
  desc *d;                              /* its description, or NULL */
  uintptr_t dst, src;                   /* memcpy, memset */
  size_t bytes;
  int copy_kind;                        /* 0 HtoD, 1 DtoH, 2 DtoD */
  unsigned char value;
  emu_lt_call matmul;
  emu_lt_runner run_matmul;
  struct CUevent_st *event;
  emu_host_fn host;                     /* a host operation (emulated NCCL) */
  const char *host_call;
  unsigned char host_arg[EMU_HOST_ARG_MAX];
  emu_access host_access[EMU_HOST_ACCESS_MAX];
  int n_host_access;
} node;

struct CUgraph_st {
  node *nodes;
  int n, cap;
  bool invalid;
  char why[512];
  struct CUstream_st *origin;
  int mode;
  pthread_t thread;
  int nbranches;              /* streams that joined */
};

struct CUgraphExec_st {
  node *nodes;
  int n;
  int nbranches;
  int *slots;                 /* per branch (from 1): its stream-order slot */
};

struct CUstream_st {
  unsigned flags;
  struct CUgraph_st *capture; /* recording into this graph */
  bool joined;                /* joined another stream's capture by waiting on its event */
  int last_op, rejoined;      /* last node it recorded; last of its nodes the origin has waited for */
  int branch;                 /* its branch of the capture */
  int slot;                   /* its stream-order slot */
  emu_vclock vc;              /* what is ordered before work issued on it now */
};

struct CUevent_st {
  unsigned flags;
  bool recorded;
  bool in_capture;             /* last recorded by a plain cuEventRecord in a capturing stream */
  double ms;                   /* when, on the host's monotonic clock */
  struct CUgraph_st *captured; /* recorded in this capture */
  struct CUstream_st *stream;  /* by this stream */
  int seq;                     /* after its node seq */
  int dep;                     /* its NODE_DEP in the capture */
  emu_vclock vc;               /* the recording stream's clock then */
};

struct CUfunc_st {
  struct CUmod_st *mod;
  const tg_emu_kernel *k;
  int max_dynamic_shared;      /* set by cuFuncSetAttribute, or -1: 48 KiB less the static */
  int max_threads;             /* __launch_bounds__'s first number, or 0 */
  long static_shared;          /* bytes, learnt at its first launch; -1 before */
};

struct CUmod_st {
  void *dl;
  char *path;
  const tg_emu_module *m;
  struct CUfunc_st *funcs;
  int nfuncs;
};

enum {
  MAX_SHARED_OPTIN = 227 * 1024,
  /* A block's shared memory, static and dynamic, without the opt-in: the
   * default CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES is this less
   * the kernel's static shared memory. */
  SHARED_WITHOUT_OPTIN = 48 * 1024,
  /* The kernel parameter space from CUDA 12.1 on Volta and later (this
   * device is 9.0, its driver 12.4): "CUDA 12.1 increases this parameter
   * limit from 4,096 bytes to 32,764 bytes on all device architectures
   * including NVIDIA Volta and above" (developer.nvidia.com/blog/
   * cuda-12-1-supports-large-kernel-parameters).  NVRTC refuses a kernel
   * over it ("Formal parameter space overflowed"), so no image with one
   * loads. */
  MAX_PARAM_BYTES = 32764,
};

static struct {
  bool initialized;
  int ctx_refs;
  CUresult sticky;
  alloc *allocs; /* sorted by lo */
  int n_allocs, cap_allocs;
  size_t allocated;
  emu_registry host_allocs, streams, events, graphs, execs, modules, captures;
  emu_vclock legacy_vc, host_vc; /* the legacy stream's clock; what the host has waited for */
  int slots_used;
} dev;

static struct CUctx_st primary;
static _Thread_local CUcontext current;
static _Thread_local desc *pending; /* emu_describe_launch for the next launch */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void emu_set_sticky(CUresult e) {
  if (!dev.sticky) dev.sticky = e;
}

CUresult emu_ctx_check(const char *call) {
  if (!dev.initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, "%s: cuInit has not been called", call);
  if (!dev.ctx_refs || current != &primary)
    return fail(EMU_ERROR_INVALID_CONTEXT, "%s: no current context (cuDevicePrimaryCtxRetain, then cuCtxSetCurrent)",
                call);
  if (dev.sticky)
    return fail(dev.sticky,
                "%s: %s: an earlier kernel or copy failed and left the context unusable, as on a GPU (release the "
                "primary context and retain it again to start over)",
                call, error_name(dev.sticky));
  return CUDA_SUCCESS;
}

/* ---- allocations ------------------------------------------------------------------- */

static int alloc_index(uintptr_t p) {
  int lo = 0, hi = dev.n_allocs - 1, found = -1;
  while (lo <= hi) { /* the last allocation starting at or below p */
    int mid = (lo + hi) / 2;
    if (dev.allocs[mid].lo <= p) found = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  return found >= 0 && p < dev.allocs[found].hi ? found : -1;
}

bool emu_find_alloc(uintptr_t p, uintptr_t *lo, uintptr_t *hi) {
  int i = alloc_index(p);
  if (i < 0) return false;
  *lo = dev.allocs[i].lo, *hi = dev.allocs[i].hi;
  return true;
}

bool emu_range_in(uintptr_t base, uintptr_t p, size_t n, const char *what, char *why, size_t whylen) {
  if (!n) return true;
  uintptr_t lo, hi;
  if (!emu_find_alloc(base, &lo, &hi)) {
    snprintf(why, whylen, "%s: %#llx is in no allocation of the device", what, (unsigned long long)base);
    return false;
  }
  if (p < lo) {
    snprintf(why, whylen, "%s: bytes [%#llx, +%zu) start %llu bytes before their allocation (%#llx, %llu bytes)", what,
             (unsigned long long)p, n, (unsigned long long)(lo - p), (unsigned long long)lo, (unsigned long long)(hi - lo));
    return false;
  }
  if (p + n > hi || p + n < p) {
    snprintf(why, whylen, "%s: bytes [%#llx, +%zu) run %llu bytes past the end of their allocation (%#llx, %llu bytes)",
             what, (unsigned long long)p, n, (unsigned long long)(p + n - hi), (unsigned long long)lo,
             (unsigned long long)(hi - lo));
    return false;
  }
  return true;
}

bool emu_range_ok(uintptr_t p, size_t n, const char *what, char *why, size_t whylen) {
  return emu_range_in(p, p, n, what, why, whylen);
}

/* ---- capture rules ---------------------------------------------------------------- */

static void invalidate(struct CUgraph_st *g, const char *why) {
  if (g->invalid) return;
  g->invalid = true;
  snprintf(g->why, sizeof g->why, "%s", why);
}

/* A call a GPU forbids while capturing (synchronous work, allocation):
 * whether this thread may not make it now; if so the captures it would
 * break are invalidated and the error set. */
static bool prohibited(const char *call) {
  bool bad = false;
  pthread_t self = pthread_self();
  for (int i = 0; i < dev.captures.n; i++) {
    struct CUgraph_st *g = dev.captures.v[i];
    if ((pthread_equal(g->thread, self) && g->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        (!pthread_equal(g->thread, self) && g->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      char why[256];
      snprintf(why, sizeof why, "%s was called while the stream was capturing", call);
      invalidate(g, why);
      bad = true;
    }
  }
  if (bad)
    fail(EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED,
         "%s: not allowed while a stream is capturing (it would synchronize with the device or allocate); the "
         "capture is now invalid",
         call);
  return bad;
}

static bool is_legacy(CUstream s) { return s == NULL || s == (CUstream)(uintptr_t)1 || s == (CUstream)(uintptr_t)2; }

static CUresult check_stream(CUstream s, const char *call) {
  if (is_legacy(s) || emu_reg_has(&dev.streams, s)) return CUDA_SUCCESS;
  return fail(CUDA_ERROR_INVALID_HANDLE, "%s: %p is not a live stream", call, (void *)s);
}

/* Work on the legacy stream waits for every blocking stream, which a
 * capturing stream cannot be waited for: an error that breaks the capture. */
static bool legacy_conflict(CUstream s, const char *call) {
  if (!is_legacy(s)) return false;
  for (int i = 0; i < dev.captures.n; i++) {
    struct CUgraph_st *g = dev.captures.v[i];
    if (!(g->origin->flags & CU_STREAM_NON_BLOCKING)) {
      invalidate(g, "work was issued to the legacy (NULL) stream while a blocking stream was capturing");
      fail(EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED,
           "%s on the legacy (NULL) stream while a blocking stream is capturing: it would wait for the capturing "
           "stream; the capture is now invalid",
           call);
      return true;
    }
  }
  return false;
}

static struct CUgraph_st *capturing(CUstream s) { return is_legacy(s) ? NULL : s->capture; }

static bool add_node(struct CUgraph_st *g, struct CUstream_st *s, const node *n) {
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    node *v = realloc(g->nodes, sizeof *v * (size_t)cap);
    if (!v) return false;
    g->nodes = v, g->cap = cap;
  }
  g->nodes[g->n] = *n;
  g->nodes[g->n].branch = s->branch;
  s->last_op = g->n++;
  return true;
}

/* A dependency of the capture (NODE_DEP, NODE_WAIT): no work of s, so
 * not its last operation. */
static bool add_dependency(struct CUgraph_st *g, struct CUstream_st *s, node_kind kind, int dep) {
  int last = s->last_op;
  node n = {.kind = kind, .dep = dep};
  if (!add_node(g, s, &n)) return false;
  s->last_op = last;
  return true;
}

/* ---- stream order (emu_order.c keeps the accesses) ---------------------------------- */

/* Slots are not given back: one reused while records of its last owner
 * remain could only hide a race, never invent one. */
static int new_slot(void) { return 1 + dev.slots_used++ % (EMU_SLOTS - 1); }

/* The clock of work issued on s now, and its slot.  What the host has
 * waited for is before it; the legacy stream waits for every blocking
 * stream, and they for it. */
static emu_vclock *issue_clock(CUstream s, int *slot) {
  if (is_legacy(s)) {
    for (int i = 0; i < dev.streams.n; i++) {
      struct CUstream_st *o = dev.streams.v[i];
      if (!(o->flags & CU_STREAM_NON_BLOCKING)) emu_vclock_join(&dev.legacy_vc, &o->vc);
    }
    emu_vclock_join(&dev.legacy_vc, &dev.host_vc);
    *slot = 0;
    return &dev.legacy_vc;
  }
  emu_vclock_join(&s->vc, &dev.host_vc);
  if (!(s->flags & CU_STREAM_NON_BLOCKING)) emu_vclock_join(&s->vc, &dev.legacy_vc);
  *slot = s->slot;
  return &s->vc;
}

static void stream_name(CUstream s, char *buf, size_t n) {
  if (is_legacy(s)) snprintf(buf, n, "the legacy stream");
  else snprintf(buf, n, "stream %p", (void *)s);
}

static size_t lt_type_bytes(int type) { return type == 2 || type == 14 ? 2 : 4; } /* R_16F, R_16BF; R_32F */

/* The elements a matrix layout spans, from its first to its last batch. */
static uint64_t lt_span(const emu_lt_layout *l) {
  if (!l->rows || !l->cols) return 0;
  uint64_t one = l->order == 1 ? (l->rows - 1) * (uint64_t)l->ld + l->cols : (l->cols - 1) * (uint64_t)l->ld + l->rows;
  return one + (l->batch > 1 ? (uint64_t)(l->batch - 1) * (uint64_t)l->stride : 0);
}

static emu_access span(uintptr_t lo, uintptr_t hi, bool write, const char *what) {
  return (emu_access){.lo = lo, .hi = hi, .write = write, .what = what};
}

static int matmul_accesses(const emu_lt_call *c, emu_access *acc) {
  const struct {
    uintptr_t p;
    const emu_lt_layout *l;
    bool write;
    const char *what;
  } ops[] = {{c->A, &c->a, false, "A"}, {c->B, &c->b, false, "B"}, {c->C, &c->c, false, "C"}, {c->D, &c->d, true, "D"}};
  int n = 0;
  for (int i = 0; i < 4; i++)
    if (ops[i].p) acc[n++] = span(ops[i].p, ops[i].p + lt_span(ops[i].l) * lt_type_bytes(ops[i].l->type),
                                          ops[i].write, ops[i].what);
  /* the bias is read (BIAS) or written (BGRAD), the aux matrix written
   * (GELU_AUX) or read (DGELU): counted as written, which covers both */
  if (c->op.bias) {
    int t = c->op.bias_type >= 0 ? c->op.bias_type : c->d.type;
    acc[n++] = span(c->op.bias, c->op.bias + c->d.rows * lt_type_bytes(t), true, "the bias vector");
  }
  if (c->op.aux)
    acc[n++] = span(c->op.aux, c->op.aux + (uint64_t)c->op.aux_ld * c->d.cols * lt_type_bytes(c->d.type), true,
                            "the aux matrix");
  return n;
}

/* The device bytes a node reads and writes, into acc (room for the
 * kernel's parameters plus 6).  A kernel's every pointer argument counts
 * as read and written (its description has no direction); a described
 * one spans its extent, another its allocation. */
static int node_accesses(const node *n, emu_access *acc) {
  switch (n->kind) {
  case NODE_KERNEL: {
    const tg_emu_kernel *k = n->fn->k;
    int m = 0;
    size_t off = 0;
    for (int i = 0; i < k->nparams; off += k->param_bytes[i], i++) {
      if (!k->param_checked[i]) continue;
      uintptr_t p, lo, hi;
      memcpy(&p, n->argbytes + off, sizeof p);
      const char *what = n->d ? n->d->names[i] : "a pointer argument";
      if (n->d && n->d->bytes[i]) acc[m++] = span(p, p + n->d->bytes[i], true, what);
      else if (emu_find_alloc(p, &lo, &hi)) acc[m++] = span(lo, hi, true, what);
    }
    return m;
  }
  case NODE_MEMCPY: {
    int m = 0;
    if (n->copy_kind != 1) acc[m++] = span(n->dst, n->dst + n->bytes, true, "the destination");
    if (n->copy_kind != 0) acc[m++] = span(n->src, n->src + n->bytes, false, "the source");
    return m;
  }
  case NODE_MEMSET: acc[0] = span(n->dst, n->dst + n->bytes, true, "the destination"); return 1;
  case NODE_MATMUL: return matmul_accesses(&n->matmul, acc);
  case NODE_HOST:
    memcpy(acc, n->host_access, sizeof *acc * (size_t)n->n_host_access);
    return n->n_host_access;
  default: return 0;
  }
}

static void node_name(const node *n, const char *stream, char *buf, size_t len) {
  static const char *const copies[] = {"cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync"};
  switch (n->kind) {
  case NODE_KERNEL:
    snprintf(buf, len, "kernel %s%s%s%s on %s", n->fn->k->name, n->d && n->d->where ? " (" : "",
             n->d && n->d->where ? n->d->where : "", n->d && n->d->where ? ")" : "", stream);
    return;
  case NODE_MEMCPY: snprintf(buf, len, "%s on %s", copies[n->copy_kind], stream); return;
  case NODE_MEMSET: snprintf(buf, len, "cuMemsetD8Async on %s", stream); return;
  case NODE_MATMUL: snprintf(buf, len, "cublasLtMatmul on %s", stream); return;
  case NODE_HOST: snprintf(buf, len, "%s on %s", n->host_call, stream); return;
  default: snprintf(buf, len, "an operation on %s", stream); return;
  }
}

/* Checks and records a node's accesses in stream order before it runs;
 * a race is a failed launch that, as any failed check, ruins the context. */
static CUresult order_node(const node *n, emu_vclock *vc, int slot, const char *stream, const char *call) {
  int max = (n->kind == NODE_KERNEL ? n->fn->k->nparams : 0) + 6;
  emu_access *acc = malloc(sizeof *acc * (size_t)max);
  char *name = malloc(200), *why = malloc(1024);
  CUresult r = CUDA_SUCCESS;
  if (!acc || !name || !why) {
    r = fail(CUDA_ERROR_OUT_OF_MEMORY, "%s: out of memory", call);
  } else {
    node_name(n, stream, name, 200);
    int m = 0, total = node_accesses(n, acc);
    for (int i = 0; i < total; i++) /* outside any allocation: the range checks report it */
      if (emu_find_alloc(acc[i].lo, &acc[i].alloc_lo, &acc[i].alloc_hi)) acc[m++] = acc[i];
    if (!emu_order_access(vc, slot, name, acc, m, why, 1024)) {
      r = fail(CUDA_ERROR_LAUNCH_FAILED, "%s: %s", call, why);
      emu_set_sticky(r);
    }
  }
  free(acc), free(name), free(why);
  return r;
}

/* An operation issued on s now (not captured): its stream order. */
static CUresult order_issued(const node *n, CUstream s, const char *call) {
  int slot;
  emu_vclock *vc = issue_clock(s, &slot);
  char stream[64];
  stream_name(s, stream, sizeof stream);
  return order_node(n, vc, slot, stream, call);
}

/* ---- init, device, context ------------------------------------------------------------ */

static CUresult emu_cuInit(unsigned flags) {
  if (flags) return fail(CUDA_ERROR_INVALID_VALUE, "cuInit: flags must be 0");
  emu_lock();
  dev.initialized = true;
  emu_unlock();
  return CUDA_SUCCESS;
}

static CUresult emu_cuDriverGetVersion(int *v) {
  if (!v) return fail(CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion: NULL");
  *v = 12040;
  return CUDA_SUCCESS;
}

static CUresult device_ok(CUdevice d, const char *call) {
  if (!dev.initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, "%s: cuInit has not been called", call);
  if (d != 0) return fail(CUDA_ERROR_INVALID_VALUE, "%s: device %d does not exist (the emulator has device 0)", call, d);
  return CUDA_SUCCESS;
}

static CUresult emu_cuDeviceGetCount(int *n) {
  if (!dev.initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount: cuInit has not been called");
  *n = 1;
  return CUDA_SUCCESS;
}

static CUresult emu_cuDeviceGet(CUdevice *d, int ordinal) {
  CUresult r = device_ok(ordinal, "cuDeviceGet");
  if (r == CUDA_SUCCESS) *d = 0;
  return r;
}

static CUresult emu_cuDeviceGetName(char *name, int len, CUdevice d) {
  CUresult r = device_ok(d, "cuDeviceGetName");
  if (r) return r;
  if (!name || len < 1) return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName: no buffer");
  snprintf(name, (size_t)len, "emulated device");
  return CUDA_SUCCESS;
}

static CUresult emu_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  CUresult r = device_ok(d, "cuDeviceGetAttribute");
  if (r) return r;
  switch ((int)a) {
  case 1: *v = 1024; return CUDA_SUCCESS;           /* MAX_THREADS_PER_BLOCK */
  case 2: case 3: *v = 1024; return CUDA_SUCCESS;   /* MAX_BLOCK_DIM_X, Y */
  case 4: *v = 64; return CUDA_SUCCESS;             /* MAX_BLOCK_DIM_Z */
  case 5: *v = 2147483647; return CUDA_SUCCESS;     /* MAX_GRID_DIM_X */
  case 6: case 7: *v = 65535; return CUDA_SUCCESS;  /* MAX_GRID_DIM_Y, Z */
  case 8: *v = 48 * 1024; return CUDA_SUCCESS;      /* MAX_SHARED_MEMORY_PER_BLOCK */
  case 10: *v = 32; return CUDA_SUCCESS;            /* WARP_SIZE */
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = MAX_SHARED_OPTIN; return CUDA_SUCCESS;
  default:
    return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute: the emulator does not know attribute %d", (int)a);
  }
}

static size_t total_memory(void) { return (size_t)TG_EMU_TOTAL_MEMORY_GIB << 30; }

static CUresult emu_cuDeviceTotalMem(size_t *bytes, CUdevice d) {
  CUresult r = device_ok(d, "cuDeviceTotalMem");
  if (r == CUDA_SUCCESS) *bytes = total_memory();
  return r;
}

static void node_free(node *n);
static void module_free(struct CUmod_st *m);

/* The last release of the primary context destroys it, with everything
 * made in it: the next retain starts afresh (and without a sticky error). */
static void destroy_context(void) {
  for (int i = 0; i < dev.n_allocs; i++) free((void *)dev.allocs[i].lo);
  free(dev.allocs);
  dev.allocs = NULL;
  dev.n_allocs = dev.cap_allocs = 0;
  dev.allocated = 0;
  for (int i = 0; i < dev.host_allocs.n; i++) free(dev.host_allocs.v[i]);
  for (int i = 0; i < dev.streams.n; i++) free(dev.streams.v[i]);
  for (int i = 0; i < dev.events.n; i++) free(dev.events.v[i]);
  for (int i = 0; i < dev.graphs.n; i++) {
    struct CUgraph_st *g = dev.graphs.v[i];
    for (int k = 0; k < g->n; k++) node_free(&g->nodes[k]);
    free(g->nodes);
    free(g);
  }
  for (int i = 0; i < dev.captures.n; i++) {
    struct CUgraph_st *g = dev.captures.v[i];
    for (int k = 0; k < g->n; k++) node_free(&g->nodes[k]);
    free(g->nodes);
    free(g);
  }
  for (int i = 0; i < dev.execs.n; i++) {
    struct CUgraphExec_st *e = dev.execs.v[i];
    for (int k = 0; k < e->n; k++) node_free(&e->nodes[k]);
    free(e->nodes);
    free(e->slots);
    free(e);
  }
  for (int i = 0; i < dev.modules.n; i++) module_free(dev.modules.v[i]);
  emu_registry *regs[] = {&dev.host_allocs, &dev.streams, &dev.events, &dev.graphs, &dev.execs, &dev.modules, &dev.captures};
  for (size_t i = 0; i < sizeof regs / sizeof *regs; i++) {
    free(regs[i]->v);
    *regs[i] = (emu_registry){0};
  }
  dev.sticky = CUDA_SUCCESS;
  emu_order_reset();
  dev.legacy_vc = dev.host_vc = (emu_vclock){{0}};
  dev.slots_used = 0;
  tg_emu_exec_release_thread();
}

static CUresult emu_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) {
  emu_lock();
  CUresult r = device_ok(d, "cuDevicePrimaryCtxRetain");
  if (!r) {
    dev.ctx_refs++;
    *ctx = &primary;
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuDevicePrimaryCtxRelease(CUdevice d) {
  emu_lock();
  CUresult r = device_ok(d, "cuDevicePrimaryCtxRelease");
  if (!r && dev.ctx_refs <= 0) r = fail(EMU_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease: not retained");
  if (!r && --dev.ctx_refs == 0) destroy_context();
  emu_unlock();
  return r;
}

static CUresult emu_cuCtxSetCurrent(CUcontext ctx) {
  if (!dev.initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, "cuCtxSetCurrent: cuInit has not been called");
  if (ctx && ctx != &primary) return fail(EMU_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: not the primary context");
  current = ctx;
  return CUDA_SUCCESS;
}

static CUresult emu_cuCtxSynchronize(void) {
  emu_lock();
  CUresult r = emu_ctx_check("cuCtxSynchronize");
  if (!r && prohibited("cuCtxSynchronize")) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!r) { /* the host has waited for everything */
    emu_vclock_join(&dev.host_vc, &dev.legacy_vc);
    for (int i = 0; i < dev.streams.n; i++) emu_vclock_join(&dev.host_vc, &((struct CUstream_st *)dev.streams.v[i])->vc);
  }
  emu_unlock();
  return r;
}

/* ---- memory ------------------------------------------------------------------------ */

static CUresult emu_cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  emu_lock();
  CUresult r = emu_ctx_check("cuMemGetInfo");
  if (!r) {
    *total_bytes = total_memory();
    *free_bytes = total_memory() - (dev.allocated < total_memory() ? dev.allocated : total_memory());
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  emu_lock();
  CUresult r = emu_ctx_check("cuMemAlloc");
  if (!r && prohibited("cuMemAlloc")) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!r && !bytes) r = fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc: 0 bytes");
  if (!r && bytes > total_memory() - (dev.allocated < total_memory() ? dev.allocated : total_memory()))
    r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: %zu bytes, more than the device has left", bytes);
  void *mem = NULL;
  if (!r && !(mem = aligned_alloc(256, (bytes + 255) / 256 * 256)))
    r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: the host has no %zu bytes to give", bytes);
  if (!r && dev.n_allocs == dev.cap_allocs) {
    int cap = dev.cap_allocs ? 2 * dev.cap_allocs : 64;
    alloc *a = realloc(dev.allocs, sizeof *a * (size_t)cap);
    if (!a) {
      free(mem);
      r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: out of memory");
    } else {
      dev.allocs = a, dev.cap_allocs = cap;
    }
  }
  if (!r) {
    /* 0xff bytes: NaN in f32 and bf16, so that a read of what was never
     * written shows in the results (GPU memory starts undefined too) */
    memset(mem, 0xff, bytes);
    uintptr_t lo = (uintptr_t)mem;
    int i = dev.n_allocs;
    while (i > 0 && dev.allocs[i - 1].lo > lo) {
      dev.allocs[i] = dev.allocs[i - 1];
      i--;
    }
    dev.allocs[i] = (alloc){lo, lo + bytes};
    dev.n_allocs++;
    dev.allocated += bytes;
    *p = (CUdeviceptr)lo;
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuMemFree(CUdeviceptr p) {
  emu_lock();
  CUresult r = emu_ctx_check("cuMemFree");
  if (!r && prohibited("cuMemFree")) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  int i = r ? -1 : alloc_index((uintptr_t)p);
  if (!r && (i < 0 || dev.allocs[i].lo != (uintptr_t)p))
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuMemFree: %#llx is not the start of an allocation", (unsigned long long)p);
  if (!r) {
    dev.allocated -= dev.allocs[i].hi - dev.allocs[i].lo;
    emu_order_forget(dev.allocs[i].lo);
    free((void *)dev.allocs[i].lo);
    memmove(&dev.allocs[i], &dev.allocs[i + 1], sizeof(alloc) * (size_t)(dev.n_allocs - i - 1));
    dev.n_allocs--;
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuMemAllocHost(void **p, size_t bytes) {
  emu_lock();
  CUresult r = emu_ctx_check("cuMemAllocHost");
  if (!r && prohibited("cuMemAllocHost")) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!r && !bytes) r = fail(CUDA_ERROR_INVALID_VALUE, "cuMemAllocHost: 0 bytes");
  if (!r) {
    void *m = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!m || !emu_reg_add(&dev.host_allocs, m)) {
      free(m);
      r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAllocHost: no %zu bytes", bytes);
    } else {
      *p = m;
    }
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuMemFreeHost(void *p) {
  emu_lock();
  CUresult r = emu_ctx_check("cuMemFreeHost");
  if (!r && !emu_reg_has(&dev.host_allocs, p))
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost: %p did not come from cuMemAllocHost", p);
  if (!r) {
    emu_reg_del(&dev.host_allocs, p);
    free(p);
  }
  emu_unlock();
  return r;
}

static const char *const copy_names[] = {"cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD"};

/* A copy's device ranges checked and the bytes moved. */
static CUresult do_copy(int kind, uintptr_t dst, uintptr_t src, size_t n, const char *call, CUresult bad) {
  char why[512];
  if ((kind != 1 && !emu_range_ok(dst, n, "the destination", why, sizeof why)) ||
      (kind != 0 && !emu_range_ok(src, n, "the source", why, sizeof why)))
    return fail(bad, "%s: %s", call, why);
  if (kind != 0 && !src) return fail(bad, "%s: NULL source", call);
  if (kind == 1 && !dst) return fail(bad, "%s: NULL destination", call);
  if (n) memmove((void *)dst, (const void *)src, n);
  return CUDA_SUCCESS;
}

static CUresult copy_sync(int kind, uintptr_t dst, uintptr_t src, size_t n) {
  emu_lock();
  CUresult r = emu_ctx_check(copy_names[kind]);
  if (!r && prohibited(copy_names[kind])) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  /* a synchronous copy is work on the legacy stream that the host waits for */
  node nd = {.kind = NODE_MEMCPY, .dst = dst, .src = src, .bytes = n, .copy_kind = kind};
  if (!r) r = order_issued(&nd, NULL, copy_names[kind]);
  if (!r) r = do_copy(kind, dst, src, n, copy_names[kind], CUDA_ERROR_INVALID_VALUE);
  if (!r) emu_vclock_join(&dev.host_vc, &dev.legacy_vc);
  emu_unlock();
  return r;
}

static CUresult copy_async(int kind, uintptr_t dst, uintptr_t src, size_t n, CUstream s) {
  static const char *const names[] = {"cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync"};
  emu_lock();
  CUresult r = emu_ctx_check(names[kind]);
  if (!r) r = check_stream(s, names[kind]);
  struct CUgraph_st *g = r ? NULL : capturing(s);
  if (g) {
    char why[512];
    if ((kind != 1 && !emu_range_ok(dst, n, "the destination", why, sizeof why)) ||
        (kind != 0 && !emu_range_ok(src, n, "the source", why, sizeof why)))
      r = fail(CUDA_ERROR_INVALID_VALUE, "%s: %s", names[kind], why);
    node nd = {.kind = NODE_MEMCPY, .dst = dst, .src = src, .bytes = n, .copy_kind = kind};
    if (!r && !add_node(g, s, &nd)) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "%s: out of memory", names[kind]);
  } else if (!r) {
    node nd = {.kind = NODE_MEMCPY, .dst = dst, .src = src, .bytes = n, .copy_kind = kind};
    if (legacy_conflict(s, names[kind])) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (!(r = order_issued(&nd, s, names[kind]))) r = do_copy(kind, dst, src, n, names[kind], CUDA_ERROR_INVALID_VALUE);
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) { return copy_sync(0, (uintptr_t)d, (uintptr_t)s, n); }
static CUresult emu_cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) { return copy_sync(1, (uintptr_t)d, (uintptr_t)s, n); }
static CUresult emu_cuMemcpyHtoDAsync(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  return copy_async(0, (uintptr_t)d, (uintptr_t)s, n, st);
}
static CUresult emu_cuMemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, CUstream st) {
  return copy_async(1, (uintptr_t)d, (uintptr_t)s, n, st);
}
static CUresult emu_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  return copy_async(2, (uintptr_t)d, (uintptr_t)s, n, st);
}

static CUresult do_memset(uintptr_t dst, unsigned char v, size_t n, CUresult bad) {
  char why[512];
  if (!emu_range_ok(dst, n, "the destination", why, sizeof why)) return fail(bad, "cuMemsetD8Async: %s", why);
  if (n) memset((void *)dst, v, n);
  return CUDA_SUCCESS;
}

static CUresult emu_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  emu_lock();
  CUresult r = emu_ctx_check("cuMemsetD8Async");
  if (!r) r = check_stream(s, "cuMemsetD8Async");
  struct CUgraph_st *g = r ? NULL : capturing(s);
  if (g) {
    char why[512];
    node nd = {.kind = NODE_MEMSET, .dst = (uintptr_t)dst, .bytes = n, .value = v};
    if (!emu_range_ok((uintptr_t)dst, n, "the destination", why, sizeof why))
      r = fail(CUDA_ERROR_INVALID_VALUE, "cuMemsetD8Async: %s", why);
    else if (!add_node(g, s, &nd)) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemsetD8Async: out of memory");
  } else if (!r) {
    node nd = {.kind = NODE_MEMSET, .dst = (uintptr_t)dst, .bytes = n, .value = v};
    if (legacy_conflict(s, "cuMemsetD8Async")) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (!(r = order_issued(&nd, s, "cuMemsetD8Async"))) r = do_memset((uintptr_t)dst, v, n, CUDA_ERROR_INVALID_VALUE);
  }
  emu_unlock();
  return r;
}

/* ---- modules ---------------------------------------------------------------------- */

static void module_free(struct CUmod_st *m) {
  if (m->dl) dlclose(m->dl);
  free(m->path);
  free(m->funcs);
  free(m);
}

/* A kernel's parameter space: each parameter at its alignment (that of
 * its size, at most 8: pointers, scalars, the tables' address-and-size
 * structs). */
static size_t param_space(const tg_emu_kernel *k) {
  size_t off = 0;
  for (int i = 0; i < k->nparams; i++) {
    size_t b = k->param_bytes[i], a = b >= 8 ? 8 : b >= 4 ? 4 : b >= 2 ? 2 : 1;
    off = (off + a - 1) / a * a + b;
  }
  return off;
}

static CUresult emu_cuModuleLoadData(CUmodule *out, const void *image) {
  emu_lock();
  CUresult r = emu_ctx_check("cuModuleLoadData");
  const char *path = image;
  if (!r && !path) r = fail(CUDA_ERROR_INVALID_VALUE, "cuModuleLoadData: no image");
  if (!r && path[0] == 0x7f && path[1] == 'E' && path[2] == 'L' && path[3] == 'F')
    r = fail(CUDA_ERROR_INVALID_IMAGE,
             "cuModuleLoadData: this is an ELF image (a CUBIN?); the emulated device loads the path of the shared "
             "object its compile made");
  struct CUmod_st *m = NULL;
  if (!r && !(m = calloc(1, sizeof *m))) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuModuleLoadData: out of memory");
  if (!r) {
    m->path = strdup(path);
    m->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!m->dl) {
      const char *e = dlerror();
      r = fail(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: cannot load %s: %s", path, e ? e : "?");
    }
  }
  if (!r) {
    const tg_emu_module *(*get)(void);
    void *sym = dlsym(m->dl, TG_EMU_MODULE_ENTRY);
    memcpy(&get, &sym, sizeof sym);
    m->m = sym ? get() : NULL;
    if (!m->m || m->m->abi != TG_EMU_ABI_VERSION)
      r = fail(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: %s is not a module of this emulator (%s)", path,
               !sym ? "no " TG_EMU_MODULE_ENTRY : "another ABI version: rebuild it");
  }
  if (!r) {
    m->m->attach(tg_emu_runtime());
    int n = 0;
    while (m->m->kernels[n].name) n++;
    m->funcs = calloc((size_t)(n ? n : 1), sizeof *m->funcs);
    m->nfuncs = n;
    const tg_emu_launch_bound *bounds = dlsym(m->dl, TG_EMU_LAUNCH_BOUNDS);
    for (int i = 0; m->funcs && i < n; i++) {
      const tg_emu_kernel *k = &m->m->kernels[i];
      int max_threads = 0;
      for (int b = 0; bounds && bounds[b].name; b++)
        if (!strcmp(bounds[b].name, k->name)) max_threads = bounds[b].max_threads;
      m->funcs[i] = (struct CUfunc_st){m, k, -1, max_threads, -1};
      size_t space = param_space(k);
      if (!r && space > MAX_PARAM_BYTES)
        r = fail(CUDA_ERROR_INVALID_IMAGE,
                 "cuModuleLoadData: kernel %s takes %zu bytes of parameters, over the %d of CUDA 12.1 and later on "
                 "sm_70 and later (NVRTC refuses it: \"Formal parameter space overflowed\")",
                 k->name, space, MAX_PARAM_BYTES);
    }
    if (!r && (!m->funcs || !emu_reg_add(&dev.modules, m)))
      r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuModuleLoadData: out of memory");
  }
  if (r && m) module_free(m);
  if (!r) *out = m;
  emu_unlock();
  return r;
}

static CUresult emu_cuModuleUnload(CUmodule m) {
  emu_lock();
  CUresult r = emu_ctx_check("cuModuleUnload");
  if (!r && !emu_reg_has(&dev.modules, m)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload: not a loaded module");
  if (!r) {
    emu_reg_del(&dev.modules, m);
    module_free(m);
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  emu_lock();
  CUresult r = emu_ctx_check("cuModuleGetFunction");
  if (!r && !emu_reg_has(&dev.modules, m)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleGetFunction: not a loaded module");
  if (!r) {
    r = fail(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction: the module has no kernel %s", name ? name : "(null)");
    for (int i = 0; name && i < m->nfuncs; i++)
      if (!strcmp(m->funcs[i].k->name, name)) {
        *f = &m->funcs[i];
        r = CUDA_SUCCESS;
        break;
      }
  }
  emu_unlock();
  return r;
}

static bool function_ok(CUfunction f) {
  for (int i = 0; f && i < dev.modules.n; i++) {
    struct CUmod_st *m = dev.modules.v[i];
    if (f >= m->funcs && f < m->funcs + m->nfuncs) return true;
  }
  return false;
}

static CUresult emu_cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  emu_lock();
  CUresult r = emu_ctx_check("cuFuncSetAttribute");
  if (!r && !function_ok(f)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuFuncSetAttribute: not a kernel function");
  if (!r) {
    /* "The sum of this value and the function attribute
     * CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES cannot exceed the device
     * attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"
     * (cuFuncSetAttribute): the static size is known here once the kernel
     * has run (its first launch checks the sum otherwise) */
    long static_shared = f->static_shared > 0 ? f->static_shared : 0;
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
      if (v < 0 || v > MAX_SHARED_OPTIN - static_shared)
        r = fail(CUDA_ERROR_INVALID_VALUE,
                 "cuFuncSetAttribute: %d bytes of dynamic shared memory for kernel %s (at most %d less its %ld "
                 "static)",
                 v, f->k->name, MAX_SHARED_OPTIN, static_shared);
      else f->max_dynamic_shared = v;
    } else if ((int)a != 9) { /* PREFERRED_SHARED_MEMORY_CARVEOUT is a hint: accepted */
      r = fail(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute: the emulator does not know attribute %d", (int)a);
    }
  }
  emu_unlock();
  return r;
}

/* ---- launches ---------------------------------------------------------------------- */

static void desc_free(desc *d) {
  if (!d) return;
  free(d->kernel);
  free(d->where);
  for (int i = 0; i < d->nargs; i++) free(d->names[i]);
  free(d->names);
  free(d->bytes);
  free(d);
}

static desc *desc_copy(const char *kernel, const char *where, int nargs, const char *const *names, const size_t *bytes) {
  desc *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->kernel = strdup(kernel ? kernel : "");
  d->where = where ? strdup(where) : NULL;
  d->nargs = nargs > 0 ? nargs : 0;
  d->names = calloc((size_t)d->nargs + 1, sizeof *d->names);
  d->bytes = calloc((size_t)d->nargs + 1, sizeof *d->bytes);
  if (!d->kernel || !d->names || !d->bytes || (where && !d->where)) {
    desc_free(d);
    return NULL;
  }
  for (int i = 0; i < d->nargs; i++) {
    char def[32];
    snprintf(def, sizeof def, "argument %d", i);
    d->names[i] = strdup(names && names[i] ? names[i] : def);
    d->bytes[i] = bytes ? bytes[i] : 0;
    if (!d->names[i]) {
      desc_free(d);
      return NULL;
    }
  }
  return d;
}

static void emu_describe_launch(const char *kernel, const char *where, int nargs, const char *const *names,
                                const size_t *bytes) {
  desc_free(pending);
  pending = desc_copy(kernel, where, nargs, names, bytes);
}

static void node_free(node *n) {
  if (n->kind == NODE_KERNEL) {
    free(n->argbytes);
    desc_free(n->d);
  }
}

static bool node_copy(node *dst, const node *src) {
  *dst = *src;
  if (src->kind != NODE_KERNEL) return true;
  size_t total = 0;
  for (int i = 0; i < src->fn->k->nparams; i++) total += src->fn->k->param_bytes[i];
  dst->argbytes = malloc(total ? total : 1);
  dst->d = src->d ? desc_copy(src->d->kernel, src->d->where, src->d->nargs, (const char *const *)src->d->names,
                              src->d->bytes)
                  : NULL;
  if (!dst->argbytes || (src->d && !dst->d)) {
    free(dst->argbytes);
    desc_free(dst->d);
    return false;
  }
  memcpy(dst->argbytes, src->argbytes, total);
  return true;
}

/* The most dynamic shared memory a launch of f may ask for: what
 * cuFuncSetAttribute allowed, else 48 KiB less its static shared memory
 * (once known) -- the driver refuses a launch whose static and dynamic
 * shared memory exceed what the block may have without the opt-in. */
static long max_dynamic(const struct CUfunc_st *f) {
  if (f->max_dynamic_shared >= 0) return f->max_dynamic_shared;
  return SHARED_WITHOUT_OPTIN - (f->static_shared > 0 ? f->static_shared : 0);
}

/* The static and dynamic shared memory a block of f may have with
 * `dynamic` bytes of the dynamic kind (checked as it declares its
 * arrays): 48 KiB, or with the opt-in v, as much as keeps static + v
 * within the device's opt-in limit. */
static size_t shared_limit(const struct CUfunc_st *f, unsigned dynamic) {
  if (f->max_dynamic_shared < 0) return SHARED_WITHOUT_OPTIN;
  return (size_t)(MAX_SHARED_OPTIN - f->max_dynamic_shared) + dynamic;
}

/* Runs a kernel node: the arguments' buffers (from the description, else
 * the allocations they point into), then the grid. */
static CUresult run_kernel(const node *n, const char *call) {
  size_t static_shared = 0;
  const tg_emu_kernel *k = n->fn->k;
  const int np = k->nparams;
  tg_emu_region *regions = calloc((size_t)np + 1, sizeof *regions);
  void **args = calloc((size_t)np + 1, sizeof *args);
  char (*names)[48] = calloc((size_t)np + 1, sizeof *names);
  if (!regions || !args || !names) {
    free(regions), free(args), free(names);
    return fail(CUDA_ERROR_OUT_OF_MEMORY, "%s: out of memory", call);
  }
  size_t off = 0;
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < np && !r; i++) {
    args[i] = n->argbytes + off;
    off += k->param_bytes[i];
    if (!k->param_checked[i]) continue;
    uintptr_t p;
    memcpy(&p, args[i], sizeof p);
    tg_emu_region *g = &regions[i];
    g->space = TG_EMU_GLOBAL;
    uintptr_t lo, hi;
    bool in = emu_find_alloc(p, &lo, &hi);
    if (n->d) {
      g->name = n->d->names[i];
      g->lo = p, g->hi = p + n->d->bytes[i];
      char why[512];
      if (n->d->bytes[i] && !emu_range_ok(p, n->d->bytes[i], n->d->names[i], why, sizeof why))
        r = fail(CUDA_ERROR_INVALID_VALUE,
                 "%s: kernel %s: the launch's description of argument %d is wrong: %s (so the emulator cannot check "
                 "accesses of it)",
                 call, k->name, i, why);
    } else if (in) {
      snprintf(names[i], sizeof names[i], "argument %d", i);
      g->name = names[i];
      g->lo = lo, g->hi = hi; /* undescribed: the whole allocation */
    } else {
      snprintf(names[i], sizeof names[i], "argument %d (%#llx, in no allocation)", i, (unsigned long long)p);
      g->name = names[i];
      g->lo = g->hi = p;
    }
  }
  if (!r) {
    tg_emu_launch L = {.module = n->fn->mod->m,
                       .module_path = n->fn->mod->path,
                       .kernel = k,
                       .where = n->d ? n->d->where : NULL,
                       .grid = {n->grid[0], n->grid[1], n->grid[2]},
                       .block = {n->block[0], n->block[1], n->block[2]},
                       .dynamic_shared = n->shared,
                       .shared_limit = shared_limit(n->fn, n->shared),
                       .static_shared = &static_shared,
                       .args = args,
                       .regions = regions};
    char *err = malloc(8192);
    int res = err ? tg_emu_run(&L, err, 8192) : CUDA_ERROR_OUT_OF_MEMORY;
    if (n->fn->static_shared < (long)static_shared) n->fn->static_shared = (long)static_shared;
    if (res == CUDA_ERROR_INVALID_VALUE) { /* refused for its shared memory: the driver's refusal, not sticky */
      r = fail(res, "%s: %s: %s (the emulator learns a kernel's static shared memory at its first launch, so this "
                    "launch ran until its first block declared it; a GPU refuses it before it runs)",
               call, error_name(res), err);
    } else if (res) {
      r = fail(res, "%s: %s: %s", call, error_name(res), err ? err : "out of memory");
      emu_set_sticky(res);
    }
    free(err);
  }
  free(regions), free(args), free(names);
  return r;
}

static CUresult emu_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, CUstream s, void **args, void **extra) {
  emu_lock();
  desc *d = pending;
  pending = NULL;
  CUresult r = emu_ctx_check("cuLaunchKernel");
  if (!r) r = check_stream(s, "cuLaunchKernel");
  if (!r && !function_ok(f)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: not a kernel function");
  const tg_emu_kernel *k = r ? NULL : f->k;
  if (!r && extra)
    r = fail(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernel: kernel %s: the emulator takes arguments through kernelParams, "
             "not extra", k->name);
  if (!r && (!gx || !gy || !gz || gx > 2147483647u || gy > 65535 || gz > 65535))
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: kernel %s: grid (%u,%u,%u) (each at least 1; y, z at most 65535)",
             k->name, gx, gy, gz);
  if (!r && (!bx || !by || !bz || bx > 1024 || by > 1024 || bz > 64 || (unsigned long long)bx * by * bz > 1024))
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: kernel %s: block (%u,%u,%u) (at most 1024 threads; z at most 64)",
             k->name, bx, by, bz);
  /* __launch_bounds__: CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK is "the
   * maximum number of threads per block, beyond which a launch of the
   * function would fail"; the driver says CUDA_ERROR_INVALID_VALUE (as
   * reported for a launch past a kernel's __launch_bounds__,
   * facebookresearch/TensorComprehensions#526) */
  if (!r && f->max_threads && (unsigned long long)bx * by * bz > (unsigned long long)f->max_threads)
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: kernel %s: block (%u,%u,%u) of %llu threads, over its "
             "__launch_bounds__(%d)", k->name, bx, by, bz, (unsigned long long)bx * by * bz, f->max_threads);
  if (!r && (long)shared > max_dynamic(f))
    r = fail(CUDA_ERROR_INVALID_VALUE,
             "cuLaunchKernel: kernel %s: %u bytes of dynamic shared memory, over the %ld allowed (%s)", k->name, shared,
             max_dynamic(f),
             f->max_dynamic_shared >= 0 ? "as set by cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)"
                                        : "48 KiB less its static shared memory; more needs cuFuncSetAttribute("
                                          "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  if (!r && k->nparams && !args)
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: kernel %s takes %d arguments and kernelParams is NULL", k->name,
             k->nparams);
  if (!r && d && strcmp(d->kernel, k->name))
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: emu_describe_launch described kernel %s, but this launches %s",
             d->kernel, k->name);
  if (!r && d && d->nargs != k->nparams)
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: kernel %s takes %d arguments; emu_describe_launch described %d",
             k->name, k->nparams, d->nargs);
  node n = {.kind = NODE_KERNEL, .fn = f, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .shared = shared, .d = d};
  if (!r) {
    size_t total = 0;
    for (int i = 0; i < k->nparams; i++) total += k->param_bytes[i];
    n.argbytes = malloc(total ? total : 1);
    if (!n.argbytes) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuLaunchKernel: out of memory");
    for (int i = 0, off = 0; !r && i < k->nparams; off += k->param_bytes[i], i++) {
      if (!args[i]) r = fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: kernel %s: kernelParams[%d] is NULL", k->name, i);
      else memcpy(n.argbytes + off, args[i], k->param_bytes[i]);
    }
  }
  struct CUgraph_st *g = r ? NULL : capturing(s);
  if (g) {
    if (!add_node(g, s, &n)) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuLaunchKernel: out of memory");
    else n.argbytes = NULL, n.d = NULL; /* the graph owns them now */
  } else if (!r) {
    if (legacy_conflict(s, "cuLaunchKernel")) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (!(r = order_issued(&n, s, "cuLaunchKernel"))) r = run_kernel(&n, "cuLaunchKernel");
  }
  free(n.argbytes);
  desc_free(n.d);
  emu_unlock();
  return r;
}

/* ---- streams and events -------------------------------------------------------------- */

static CUresult emu_cuStreamCreate(CUstream *s, unsigned flags) {
  emu_lock();
  CUresult r = emu_ctx_check("cuStreamCreate");
  if (!r && flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuStreamCreate: flags %#x", flags);
  struct CUstream_st *st = r ? NULL : calloc(1, sizeof *st);
  if (!r && (!st || !emu_reg_add(&dev.streams, st))) {
    free(st);
    r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuStreamCreate: out of memory");
  }
  if (!r) {
    st->flags = flags;
    st->last_op = st->rejoined = -1;
    st->slot = new_slot();
    *s = st;
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuStreamDestroy(CUstream s) {
  emu_lock();
  CUresult r = emu_ctx_check("cuStreamDestroy");
  if (!r && !emu_reg_has(&dev.streams, s)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy: not a live stream");
  if (!r && s->capture) {
    invalidate(s->capture, "a capturing stream was destroyed");
    if (s->capture->origin == s) s->capture->origin = NULL;
  }
  if (!r) {
    emu_reg_del(&dev.streams, s);
    free(s);
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuStreamSynchronize(CUstream s) {
  emu_lock();
  CUresult r = emu_ctx_check("cuStreamSynchronize");
  if (!r) r = check_stream(s, "cuStreamSynchronize");
  if (!r && capturing(s)) {
    invalidate(s->capture, "cuStreamSynchronize was called on the capturing stream");
    r = fail(EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamSynchronize: the stream is capturing; the capture is now invalid");
  }
  if (!r && legacy_conflict(s, "cuStreamSynchronize")) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!r) emu_vclock_join(&dev.host_vc, is_legacy(s) ? &dev.legacy_vc : &s->vc);
  emu_unlock();
  return r;
}

static CUresult emu_cuEventCreate(CUevent *e, unsigned flags) {
  emu_lock();
  CUresult r = emu_ctx_check("cuEventCreate");
  if (!r && flags & ~3u) r = fail(CUDA_ERROR_INVALID_VALUE, "cuEventCreate: flags %#x", flags);
  struct CUevent_st *ev = r ? NULL : calloc(1, sizeof *ev);
  if (!r && (!ev || !emu_reg_add(&dev.events, ev))) {
    free(ev);
    r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuEventCreate: out of memory");
  }
  if (!r) {
    ev->flags = flags;
    *e = ev;
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuEventDestroy(CUevent e) {
  emu_lock();
  CUresult r = emu_ctx_check("cuEventDestroy");
  if (!r && !emu_reg_has(&dev.events, e)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy: not a live event");
  if (!r) {
    emu_reg_del(&dev.events, e);
    free(e);
  }
  emu_unlock();
  return r;
}

/* cuEventRecord and cuEventRecordWithFlags.  In a capture a plain record
 * makes no node: "CU_EVENT_RECORD_EXTERNAL: when using stream capture,
 * create an event record node instead of the default behavior. This flag
 * is invalid when used outside of capture" (CUevent_record_flags, the
 * driver API's types).  The default behaviour marks a point other streams
 * of the capture may wait for (a dependency of the graph), and leaves the
 * event "last recorded in a capturing stream", on which
 * cuEventSynchronize, cuEventQuery and cuEventElapsedTime fail with
 * CUDA_ERROR_CAPTURED_EVENT (907: "the operation is not permitted on an
 * event which was last recorded in a capturing stream", cudaErrorCapturedEvent)
 * until it is recorded again outside a capture; replays never record it. */
static CUresult record_event(CUevent e, CUstream s, unsigned flags, const char *call) {
  emu_lock();
  CUresult r = emu_ctx_check(call);
  if (!r && !emu_reg_has(&dev.events, e)) r = fail(CUDA_ERROR_INVALID_HANDLE, "%s: not a live event", call);
  if (!r) r = check_stream(s, call);
  if (!r && flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) r = fail(CUDA_ERROR_INVALID_VALUE, "%s: flags %#x", call, flags);
  struct CUgraph_st *g = r ? NULL : capturing(s);
  if (!r && !g && flags & CU_EVENT_RECORD_EXTERNAL)
    r = fail(CUDA_ERROR_INVALID_VALUE, "%s: CU_EVENT_RECORD_EXTERNAL outside stream capture (it is for capture only)",
             call);
  if (!r && g && flags & CU_EVENT_RECORD_EXTERNAL) {
    node n = {.kind = NODE_EVENT, .event = e};
    if (!add_node(g, s, &n)) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "%s: out of memory", call);
  } else if (!r && g) {
    if (!add_dependency(g, s, NODE_DEP, 0)) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "%s: out of memory", call);
    e->captured = g;
    e->stream = s;
    e->seq = s->last_op;
    e->dep = g->n - 1;
    e->in_capture = true;
  } else if (!r) {
    if (legacy_conflict(s, call)) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else {
      int slot;
      e->vc = *issue_clock(s, &slot);
      e->captured = NULL;
      e->in_capture = false;
      e->recorded = true;
      e->ms = now_ms();
    }
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuEventRecord(CUevent e, CUstream s) { return record_event(e, s, 0, "cuEventRecord"); }
static CUresult emu_cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags) {
  return record_event(e, s, flags, "cuEventRecordWithFlags");
}

static CUresult captured_event(const char *call) {
  return fail(EMU_ERROR_CAPTURED_EVENT,
              "%s: CUDA_ERROR_CAPTURED_EVENT: the event was last recorded by a plain cuEventRecord in a capturing "
              "stream, which makes no node of the graph (replays never record it); record it outside the capture, or "
              "with cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL) for an event-record node",
              call);
}

static bool capture_live(const struct CUgraph_st *g) { return g && emu_reg_has(&dev.captures, g); }

static CUresult emu_cuEventSynchronize(CUevent e) {
  emu_lock();
  CUresult r = emu_ctx_check("cuEventSynchronize");
  if (!r && !emu_reg_has(&dev.events, e)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize: not a live event");
  if (!r && capture_live(e->captured)) {
    invalidate(e->captured, "cuEventSynchronize was called on an event recorded in the capture");
    r = fail(EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED,
             "cuEventSynchronize: the event was recorded by a capturing stream; the capture is now invalid");
  }
  if (!r && e->in_capture) r = captured_event("cuEventSynchronize");
  if (!r) emu_vclock_join(&dev.host_vc, &e->vc);
  emu_unlock();
  return r;
}

static CUresult emu_cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  emu_lock();
  CUresult r = emu_ctx_check("cuEventElapsedTime");
  if (!r && (!emu_reg_has(&dev.events, a) || !emu_reg_has(&dev.events, b)))
    r = fail(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: not a live event");
  if (!r && ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING))
    r = fail(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: an event was created with CU_EVENT_DISABLE_TIMING");
  if (!r && (a->in_capture || b->in_capture)) r = captured_event("cuEventElapsedTime");
  if (!r && (!a->recorded || !b->recorded))
    r = fail(EMU_ERROR_NOT_READY, "cuEventElapsedTime: an event has not been recorded (or only in a capture not yet replayed)");
  if (!r) *ms = (float)(b->ms - a->ms);
  emu_unlock();
  return r;
}

static CUresult emu_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  emu_lock();
  CUresult r = emu_ctx_check("cuStreamWaitEvent");
  if (!r) r = check_stream(s, "cuStreamWaitEvent");
  if (!r && !emu_reg_has(&dev.events, e)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuStreamWaitEvent: not a live event");
  if (!r && flags) r = fail(CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent: flags must be 0");
  if (!r && capture_live(e->captured)) {
    struct CUgraph_st *g = e->captured;
    if (is_legacy(s)) {
      r = fail(EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED,
               "cuStreamWaitEvent: the legacy stream cannot wait on an event of a capturing stream");
    } else if (!s->capture) {
      /* s joins the capture: its work from now on is part of the graph */
      s->capture = g;
      s->joined = true;
      s->last_op = s->rejoined = -1;
      s->branch = ++g->nbranches;
    } else if (s->capture != g) {
      r = fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamWaitEvent: the event belongs to another capture");
    } else if (s == g->origin && e->stream && e->stream->joined && e->seq > e->stream->rejoined) {
      e->stream->rejoined = e->seq; /* the origin waits for the joined stream's work so far */
    }
    if (!r && !add_dependency(g, s, NODE_WAIT, e->dep)) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuStreamWaitEvent: out of memory");
  } else if (!r) {
    /* everything issued has already run; the order checker learns that
     * the stream's work from now on comes after the event's */
    int slot;
    emu_vclock_join(issue_clock(s, &slot), &e->vc);
  }
  emu_unlock();
  return r;
}

/* ---- capture and graphs --------------------------------------------------------------- */

static CUresult emu_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
  emu_lock();
  CUresult r = emu_ctx_check("cuStreamBeginCapture");
  if (!r) r = check_stream(s, "cuStreamBeginCapture");
  if (!r && is_legacy(s))
    r = fail(EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture: the legacy (NULL) stream cannot capture");
  if (!r && s->capture) r = fail(CUDA_ERROR_INVALID_VALUE, "cuStreamBeginCapture: the stream is already capturing");
  if (!r && (int)mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    r = fail(CUDA_ERROR_INVALID_VALUE, "cuStreamBeginCapture: mode %d", (int)mode);
  struct CUgraph_st *g = r ? NULL : calloc(1, sizeof *g);
  if (!r && (!g || !emu_reg_add(&dev.captures, g))) {
    free(g);
    r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuStreamBeginCapture: out of memory");
  }
  if (!r) {
    g->origin = s;
    g->mode = mode;
    g->thread = pthread_self();
    s->capture = g;
    s->joined = false;
    s->last_op = s->rejoined = -1;
    s->branch = 0;
  }
  emu_unlock();
  return r;
}

static void graph_free(struct CUgraph_st *g) {
  for (int k = 0; k < g->n; k++) node_free(&g->nodes[k]);
  free(g->nodes);
  free(g);
}

static CUresult emu_cuStreamEndCapture(CUstream s, CUgraph *out) {
  emu_lock();
  CUresult r = emu_ctx_check("cuStreamEndCapture");
  if (!r) r = check_stream(s, "cuStreamEndCapture");
  if (!r && (is_legacy(s) || !s->capture)) r = fail(CUDA_ERROR_INVALID_VALUE, "cuStreamEndCapture: the stream is not capturing");
  if (!r && s->capture->origin != s)
    r = fail(EMU_ERROR_STREAM_CAPTURE_UNMATCHED, "cuStreamEndCapture: the capture was begun on another stream");
  if (!r) {
    struct CUgraph_st *g = s->capture;
    for (int i = 0; i < dev.streams.n; i++) {
      struct CUstream_st *o = dev.streams.v[i];
      if (o == s || o->capture != g) continue;
      if (!g->invalid && o->last_op > o->rejoined)
        invalidate(g, "a stream that joined the capture has work the capturing stream never waited for");
      o->capture = NULL;
      o->joined = false;
    }
    s->capture = NULL;
    emu_reg_del(&dev.captures, g);
    if (g->invalid) {
      r = fail(strstr(g->why, "never waited") ? EMU_ERROR_STREAM_CAPTURE_UNJOINED : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
               "cuStreamEndCapture: the capture is invalid: %s", g->why);
      graph_free(g);
      *out = NULL;
    } else if (!emu_reg_add(&dev.graphs, g)) {
      graph_free(g);
      r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuStreamEndCapture: out of memory");
    } else {
      *out = g;
    }
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags) {
  emu_lock();
  CUresult r = emu_ctx_check("cuGraphInstantiateWithFlags");
  if (!r && !emu_reg_has(&dev.graphs, g)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuGraphInstantiateWithFlags: not a graph");
  if (!r && flags) r = fail(CUDA_ERROR_NOT_SUPPORTED, "cuGraphInstantiateWithFlags: flags %#llx (the emulator takes 0)", flags);
  struct CUgraphExec_st *e = r ? NULL : calloc(1, sizeof *e);
  if (!r && (!e || !(e->nodes = calloc((size_t)g->n + 1, sizeof *e->nodes)) ||
             !(e->slots = calloc((size_t)g->nbranches + 1, sizeof *e->slots)))) {
    if (e) free(e->nodes);
    free(e);
    e = NULL;
    r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuGraphInstantiateWithFlags: out of memory");
  }
  for (int i = 0; !r && i < g->n; i++) {
    if (!node_copy(&e->nodes[i], &g->nodes[i])) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuGraphInstantiateWithFlags: out of memory");
    else e->n++;
  }
  if (!r) { /* the branches of joined streams run beside the launching stream's: their own slots */
    e->nbranches = g->nbranches;
    for (int b = 1; b <= e->nbranches; b++) e->slots[b] = new_slot();
  }
  if (!r && !emu_reg_add(&dev.execs, e)) r = fail(CUDA_ERROR_OUT_OF_MEMORY, "cuGraphInstantiateWithFlags: out of memory");
  if (r && e) {
    for (int i = 0; i < e->n; i++) node_free(&e->nodes[i]);
    free(e->nodes);
    free(e->slots);
    free(e);
  }
  if (!r) *out = e;
  emu_unlock();
  return r;
}

static CUresult run_node(const node *n, int index) {
  char call[64];
  snprintf(call, sizeof call, "cuGraphLaunch (node %d)", index);
  switch (n->kind) {
  case NODE_KERNEL:
    if (!function_ok(n->fn)) return fail(CUDA_ERROR_INVALID_HANDLE, "%s: the kernel's module was unloaded", call);
    return run_kernel(n, call);
  case NODE_MEMCPY: {
    CUresult r = do_copy(n->copy_kind, n->dst, n->src, n->bytes, call, CUDA_ERROR_ILLEGAL_ADDRESS);
    if (r) emu_set_sticky(r);
    return r;
  }
  case NODE_MEMSET: {
    CUresult r = do_memset(n->dst, n->value, n->bytes, CUDA_ERROR_ILLEGAL_ADDRESS);
    if (r) emu_set_sticky(r);
    return r;
  }
  case NODE_MATMUL: {
    char why[2048];
    cublasStatus_t st = n->run_matmul(&n->matmul, why, sizeof why);
    if (st == CUBLAS_STATUS_SUCCESS) return CUDA_SUCCESS;
    emu_set_sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
    return fail(CUDA_ERROR_ILLEGAL_ADDRESS, "%s: cublasLtMatmul: %s", call, why);
  }
  case NODE_HOST: {
    char why[1024] = "";
    CUresult r = n->host(n->host_arg, why, sizeof why);
    if (r) return fail(r, "%s: %s", call, why);
    return CUDA_SUCCESS;
  }
  case NODE_EVENT:
    if (emu_reg_has(&dev.events, n->event)) {
      n->event->recorded = true;
      n->event->ms = now_ms();
      n->event->captured = NULL;
      n->event->in_capture = false;
    }
    return CUDA_SUCCESS;
  case NODE_DEP:
  case NODE_WAIT: return CUDA_SUCCESS; /* dependencies only (replay_graph follows them) */
  }
  return CUDA_SUCCESS;
}

/* Runs a graph's nodes in order (which respects every dependency: they
 * were issued in an order that did), following its branches' stream
 * order: each branch starts after the launching stream's work so far,
 * and that stream's later work comes after all of them. */
static CUresult replay_graph(struct CUgraphExec_st *e, CUstream s) {
  int slot0;
  emu_vclock *base = issue_clock(s, &slot0);
  emu_vclock *branch = malloc(sizeof *branch * (size_t)(e->nbranches + 1));
  emu_vclock *at_dep = malloc(sizeof *at_dep * (size_t)(e->n + 1));
  if (!branch || !at_dep) {
    free(branch), free(at_dep);
    return fail(CUDA_ERROR_OUT_OF_MEMORY, "cuGraphLaunch: out of memory");
  }
  for (int b = 0; b <= e->nbranches; b++) branch[b] = *base;
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; !r && i < e->n; i++) {
    const node *n = &e->nodes[i];
    emu_vclock *vc = &branch[n->branch];
    if (n->kind == NODE_DEP) at_dep[i] = *vc;
    else if (n->kind == NODE_WAIT) emu_vclock_join(vc, &at_dep[n->dep]);
    else if (n->kind == NODE_EVENT && emu_reg_has(&dev.events, n->event)) n->event->vc = *vc;
    if (n->kind == NODE_DEP || n->kind == NODE_WAIT || n->kind == NODE_EVENT ||
        (n->kind == NODE_KERNEL && !function_ok(n->fn))) {
      r = run_node(n, i);
      continue;
    }
    char stream[96], call[64];
    snprintf(stream, sizeof stream, "branch %d of a graph replayed on %s%p", n->branch,
             is_legacy(s) ? "the legacy stream " : "stream ", (void *)s);
    snprintf(call, sizeof call, "cuGraphLaunch (node %d)", i);
    r = order_node(n, vc, n->branch ? e->slots[n->branch] : slot0, stream, call);
    if (!r) r = run_node(n, i);
  }
  for (int b = 0; b <= e->nbranches; b++) emu_vclock_join(base, &branch[b]);
  free(branch), free(at_dep);
  return r;
}

static CUresult emu_cuGraphLaunch(CUgraphExec e, CUstream s) {
  emu_lock();
  CUresult r = emu_ctx_check("cuGraphLaunch");
  if (!r && !emu_reg_has(&dev.execs, e)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuGraphLaunch: not an instantiated graph");
  if (!r) r = check_stream(s, "cuGraphLaunch");
  if (!r && capturing(s))
    r = fail(CUDA_ERROR_NOT_SUPPORTED, "cuGraphLaunch: the emulator cannot capture a graph launch into another graph");
  if (!r && legacy_conflict(s, "cuGraphLaunch")) r = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!r) r = replay_graph(e, s);
  emu_unlock();
  return r;
}

static CUresult emu_cuGraphExecDestroy(CUgraphExec e) {
  emu_lock();
  CUresult r = CUDA_SUCCESS;
  if (!emu_reg_has(&dev.execs, e)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuGraphExecDestroy: not an instantiated graph");
  else {
    emu_reg_del(&dev.execs, e);
    for (int i = 0; i < e->n; i++) node_free(&e->nodes[i]);
    free(e->nodes);
    free(e->slots);
    free(e);
  }
  emu_unlock();
  return r;
}

static CUresult emu_cuGraphDestroy(CUgraph g) {
  emu_lock();
  CUresult r = CUDA_SUCCESS;
  if (!emu_reg_has(&dev.graphs, g)) r = fail(CUDA_ERROR_INVALID_HANDLE, "cuGraphDestroy: not a graph");
  else {
    emu_reg_del(&dev.graphs, g);
    graph_free(g);
  }
  emu_unlock();
  return r;
}

bool emu_capture_matmul(CUstream s, const emu_lt_call *c, emu_lt_runner run, cublasStatus_t *status) {
  if (check_stream(s, "cublasLtMatmul") != CUDA_SUCCESS) {
    *status = CUBLAS_STATUS_INVALID_VALUE;
    return true;
  }
  struct CUgraph_st *g = capturing(s);
  node n = {.kind = NODE_MATMUL, .matmul = *c, .run_matmul = run};
  if (!g) {
    if (legacy_conflict(s, "cublasLtMatmul") || order_issued(&n, s, "cublasLtMatmul")) {
      *status = CUBLAS_STATUS_EXECUTION_FAILED;
      return true;
    }
    return false;
  }
  *status = add_node(g, s, &n) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
  return true;
}

bool emu_capture_host(CUstream s, const char *call, emu_host_fn fn, const void *arg, size_t n,
                      const emu_access *access, int n_access, CUresult *status) {
  if ((*status = check_stream(s, call)) != CUDA_SUCCESS) return true;
  struct CUgraph_st *g = capturing(s);
  node h = {.kind = NODE_HOST, .host = fn, .host_call = call, .n_host_access = n_access};
  if (n > sizeof h.host_arg || n_access < 0 || n_access > EMU_HOST_ACCESS_MAX) {
    *status = fail(CUDA_ERROR_INVALID_VALUE, "%s: %zu bytes of arguments and %d ranges to record (at most %d and %d)",
                   call, n, n_access, EMU_HOST_ARG_MAX, EMU_HOST_ACCESS_MAX);
    return true;
  }
  memcpy(h.host_arg, arg, n);
  memcpy(h.host_access, access, sizeof *access * (size_t)n_access);
  if (!g) {
    if (legacy_conflict(s, call)) {
      *status = EMU_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      return true;
    }
    return (*status = order_issued(&h, s, call)) != CUDA_SUCCESS;
  }
  *status = add_node(g, s, &h) ? CUDA_SUCCESS : fail(CUDA_ERROR_OUT_OF_MEMORY, "%s: out of memory", call);
  return true;
}

/* ---- the table ------------------------------------------------------------------------- */

void emu_driver_fill(tg_cuda_api *api) {
  api->compile = emu_compile;
  api->cuInit = emu_cuInit;
  api->cuDriverGetVersion = emu_cuDriverGetVersion;
  api->cuGetErrorName = get_error_name;
  api->cuGetErrorString = get_error_string;
  api->cuDeviceGetCount = emu_cuDeviceGetCount;
  api->cuDeviceGet = emu_cuDeviceGet;
  api->cuDeviceGetName = emu_cuDeviceGetName;
  api->cuDeviceGetAttribute = emu_cuDeviceGetAttribute;
  api->cuDeviceTotalMem = emu_cuDeviceTotalMem;
  api->cuDevicePrimaryCtxRetain = emu_cuDevicePrimaryCtxRetain;
  api->cuDevicePrimaryCtxRelease = emu_cuDevicePrimaryCtxRelease;
  api->cuCtxSetCurrent = emu_cuCtxSetCurrent;
  api->cuCtxSynchronize = emu_cuCtxSynchronize;
  api->cuMemGetInfo = emu_cuMemGetInfo;
  api->cuMemAlloc = emu_cuMemAlloc;
  api->cuMemFree = emu_cuMemFree;
  api->cuMemAllocHost = emu_cuMemAllocHost;
  api->cuMemFreeHost = emu_cuMemFreeHost;
  api->cuMemcpyHtoD = emu_cuMemcpyHtoD;
  api->cuMemcpyDtoH = emu_cuMemcpyDtoH;
  api->cuMemcpyHtoDAsync = emu_cuMemcpyHtoDAsync;
  api->cuMemcpyDtoHAsync = emu_cuMemcpyDtoHAsync;
  api->cuMemcpyDtoDAsync = emu_cuMemcpyDtoDAsync;
  api->cuMemsetD8Async = emu_cuMemsetD8Async;
  api->cuModuleLoadData = emu_cuModuleLoadData;
  api->cuModuleUnload = emu_cuModuleUnload;
  api->cuModuleGetFunction = emu_cuModuleGetFunction;
  api->cuFuncSetAttribute = emu_cuFuncSetAttribute;
  api->cuLaunchKernel = emu_cuLaunchKernel;
  api->cuStreamCreate = emu_cuStreamCreate;
  api->cuStreamDestroy = emu_cuStreamDestroy;
  api->cuStreamSynchronize = emu_cuStreamSynchronize;
  api->cuStreamWaitEvent = emu_cuStreamWaitEvent;
  api->cuStreamBeginCapture = emu_cuStreamBeginCapture;
  api->cuStreamEndCapture = emu_cuStreamEndCapture;
  api->cuGraphInstantiateWithFlags = emu_cuGraphInstantiateWithFlags;
  api->cuGraphLaunch = emu_cuGraphLaunch;
  api->cuGraphExecDestroy = emu_cuGraphExecDestroy;
  api->cuGraphDestroy = emu_cuGraphDestroy;
  api->cuEventCreate = emu_cuEventCreate;
  api->cuEventDestroy = emu_cuEventDestroy;
  api->cuEventRecord = emu_cuEventRecord;
  api->cuEventRecordWithFlags = emu_cuEventRecordWithFlags;
  api->cuEventSynchronize = emu_cuEventSynchronize;
  api->cuEventElapsedTime = emu_cuEventElapsedTime;
  api->emu_describe_launch = emu_describe_launch;
  api->emu_last_error = emu_last_error;
}
