/* cuda_emu.h: CUDA for the host, so that generated .cu kernels run on the
 * emulated device with every memory access checked.
 *
 * The emulator's compile step (emu_compile.c) puts this text in front of
 * the generated source and builds the whole as C++17 with the host
 * compiler into a shared object; the emulated driver (emu_driver.c) loads
 * it and runs its kernels (emu_exec.c).  The text is embedded in the
 * library at build time, so nothing is looked up at run time and the
 * compile cache's key covers it.
 *
 * Two parts:
 *
 *  1. The ABI between a module and the emulator, in C (emu_exec.c and
 *     emu_driver.c include this file for it): the thread and block state
 *     the built-ins read, the regions (buffers) the checks know, the calls
 *     into the emulator that switch threads, and the kernel table a module
 *     exports.
 *
 *  2. (C++ only) The CUDA built-ins the generated code uses: thread and
 *     block indices, __syncthreads, warp shuffles and votes, atomics, vector
 *     types, math, bf16/f16 conversions, and the emulations of the PTX
 *     instructions that codegen keeps behind small device functions (mma,
 *     ldmatrix, cvt, ex2, lg2, cvta, cp.async).  And the spellings codegen
 *     uses for memory (TG_ARG, TG_PTR, TG_SHARED, TG_LD4): raw pointers on
 *     the GPU (the .cu defines them under __CUDA_ARCH__), checked pointers
 *     here, which know the buffer they point into.
 *
 * Each CUDA thread runs as a fiber; a block's fibers switch only at
 * barriers and warp collectives (emu_exec.c), so a warp collective is: each
 * lane deposits its operands, waits for the rest of the warp, then computes
 * its own result from everyone's operands.  The current thread is one
 * thread-local pointer, set when a fiber starts and restored after every
 * call that may switch.
 *
 * Shared memory checks keep, per byte of each __shared__ array, the
 * last writer and the readers since, with the block's barrier count and the
 * warp's sync count at the time; an access that conflicts with another
 * thread's with no barrier between (or, within one warp, no __syncwarp or
 * warp collective) is a race, and reading a byte no thread of the block has
 * written is reported as uninitialised.  Bytes, not words: the GPU's shared
 * memory is byte-addressed, so two threads storing neighbouring bf16 values
 * (one 4-byte word) do not race on a GPU and must not here. */
#ifndef TG_CUDA_EMU_H
#define TG_CUDA_EMU_H

/* ===== 1. the ABI (C and C++) ============================================ */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  TG_EMU_ABI_VERSION = 2,
  TG_EMU_WARP_SIZE = 32,
  TG_EMU_SLOT_BYTES = 32, /* operands one lane hands a warp collective */
};

/* What a check reports; the driver returns it from cuLaunchKernel. */
enum {
  TG_EMU_ILLEGAL_ADDRESS = 700,    /* CUDA_ERROR_ILLEGAL_ADDRESS: outside a buffer */
  TG_EMU_MISALIGNED_ADDRESS = 716, /* CUDA_ERROR_MISALIGNED_ADDRESS */
  TG_EMU_LAUNCH_FAILED = 719,      /* CUDA_ERROR_LAUNCH_FAILED: races, deadlocks, misuse */
};

typedef struct tg_emu_uint3 {
  unsigned x, y, z;
} tg_emu_uint3;

enum tg_emu_space { TG_EMU_GLOBAL = 0, TG_EMU_SHARED = 1 };

/* Per byte of shared memory: who touched it since the block began.
 * Threads are numbered 1 + their linear id so that zeroed memory means
 * "nobody". */
typedef struct tg_emu_shadow {
  int writer;                /* last writer, 0: never written in this block */
  unsigned write_epoch;      /* the block's barrier count at that write */
  unsigned write_warp_epoch; /* the writer's warp's sync count at that write */
  int atomic;                /* the last write was an atomic */
  int reader;                /* a reader since the last write; -1: several; 0: none */
  int reader_warp;           /* the warp of every such reader, -1 if they span warps */
  unsigned read_epoch;       /* barrier count at the last read */
  unsigned read_warp_epoch;  /* that reader's warp's sync count at the last read */
  int pending;               /* a cp.async writing it has not been waited for */
} tg_emu_shadow;

/* A buffer the checks know: a kernel's pointer argument or a shared array. */
typedef struct tg_emu_region {
  uintptr_t lo, hi;      /* bytes [lo, hi) */
  const char *name;      /* "b12", "ks", "argument 3" */
  int space;             /* TG_EMU_GLOBAL or TG_EMU_SHARED */
  const void *site;      /* shared: the declaration it belongs to */
  tg_emu_shadow *shadow; /* shared: one per byte from lo; NULL for global */
} tg_emu_region;

struct tg_emu_block;

/* A cp.async copy in flight: issued, not yet completed by a wait_group. */
typedef struct tg_emu_async {
  const tg_emu_region *r;    /* the shared array it writes */
  uintptr_t dst, src;        /* host addresses */
  unsigned bytes, group;     /* the commit group it belongs to */
} tg_emu_async;

enum { TG_EMU_ASYNC_MAX = 64 }; /* copies one thread may have in flight */

/* One CUDA thread of the running block. */
typedef struct tg_emu_thread {
  tg_emu_uint3 idx;          /* threadIdx */
  int linear;                /* x + y * blockDim.x + z * blockDim.x * blockDim.y */
  int warp, lane;            /* linear / 32, linear % 32 */
  struct tg_emu_block *block;
  void *runtime;             /* the emulator's own state for it */
  /* cp.async: copies in flight, and the groups committed so far (the
   * number of the group a new copy joins) */
  int n_async;
  unsigned async_group;
  tg_emu_async async[TG_EMU_ASYNC_MAX];
} tg_emu_thread;

typedef struct tg_emu_block {
  tg_emu_uint3 idx, dim, grid; /* blockIdx, blockDim, gridDim */
  int nthreads;
  unsigned barrier_epoch;      /* __syncthreads completed so far */
  unsigned *warp_epoch;        /* per warp: whole-warp syncs completed so far */
  uintptr_t shared_base;       /* shared addresses (cvta.to.shared) count from here */
  tg_emu_region *const *shared; /* the block's shared arrays so far */
  int n_shared;
  const char *kernel;          /* for messages */
  void *runtime;
} tg_emu_block;

/* The emulator's entry points a module calls (emu_exec.c). */
typedef struct tg_emu_rt {
  int abi;
  /* __syncthreads: returns when every thread of the block has arrived. */
  void (*barrier)(tg_emu_thread *t, int line);
  /* A warp collective: hands in this lane's operands (at most
   * TG_EMU_SLOT_BYTES) and returns, once every lane of mask has arrived at
   * the same kind of collective, the 32 lanes' operand slots
   * (TG_EMU_SLOT_BYTES apart), valid until this lane's next collective.
   * Completing one with every lane of the warp counts as a warp sync. */
  const unsigned char *(*warp_sync)(tg_emu_thread *t, int kind, const char *what, unsigned mask, int line,
                                    const void *operands, unsigned bytes);
  /* Reports a failed check and abandons the launch: never returns.  (The
   * emulator finds the kernel's source line from the call stack.) */
  void (*fail)(tg_emu_thread *t, int result, const char *message);
  /* The block's instance of the shared array declared at site (allocated
   * on the block's first call). */
  tg_emu_region *(*shared_array)(tg_emu_thread *t, const void *site, const char *name, int line, size_t bytes);
  /* The block's dynamic shared memory (the launch's shared_bytes). */
  tg_emu_region *(*dynamic_shared)(tg_emu_thread *t, const char *name);
} tg_emu_rt;

/* One kernel of a module: how to call it from the driver's void **args. */
typedef struct tg_emu_kernel {
  const char *name;                   /* NULL ends a module's table */
  int nparams;
  const unsigned short *param_bytes;  /* each parameter's size in *args[i] */
  const unsigned char *param_checked; /* 1: TG_ARG pointer (gets a region); 0: plain value */
  void (*run)(void *const *args, const tg_emu_region *regions);
} tg_emu_kernel;

typedef struct tg_emu_module {
  int abi;                     /* TG_EMU_ABI_VERSION */
  const char *source;          /* the .cu's name, as line numbers refer to it */
  const tg_emu_kernel *kernels;
  void (*attach)(const tg_emu_rt *rt);
  /* Runs kernel k as thread t (on t's fiber); returns when t exits. */
  void (*thread_main)(tg_emu_thread *t, const tg_emu_kernel *k, void *const *args, const tg_emu_region *regions);
} tg_emu_module;

/* The function a module exports, found with dlsym. */
#define TG_EMU_MODULE_ENTRY "tg_emu_module_get"

/* Warp collective kinds (lanes must agree on the kind and the mask). */
enum {
  TG_EMU_SHFL_IDX = 1,
  TG_EMU_SHFL_UP,
  TG_EMU_SHFL_DOWN,
  TG_EMU_SHFL_XOR,
  TG_EMU_VOTE_BALLOT,
  TG_EMU_VOTE_ANY,
  TG_EMU_VOTE_ALL,
  TG_EMU_SYNCWARP,
  TG_EMU_MMA_M16N8K16_BF16,
  TG_EMU_LDMATRIX,
};

#ifdef __cplusplus
}
#endif

/* ===== 2. CUDA for the host (C++17) ======================================= */

#ifdef __cplusplus

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <type_traits>
#include <utility>

/* ---- qualifiers ------------------------------------------------------------ */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__ static
/* Alignment of shared arrays is the emulator's (16 bytes); vector loads are
 * checked for alignment against the address itself. */
#define __align__(n)
/* Raw __shared__ would be unchecked and shared by every block on this host
 * thread: the generated code says TG_SHARED, and so must tests. */
#define __shared__ tg_emu_error_declare_shared_memory_with_TG_SHARED

/* ---- vector types ------------------------------------------------------------ */

typedef tg_emu_uint3 uint3;
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct __attribute__((aligned(8))) float2 { float x, y; };
struct float3 { float x, y, z; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct int3 { int x, y, z; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(16))) double2 { double x, y; };
struct __attribute__((aligned(4))) ushort2 { unsigned short x, y; };
struct __attribute__((aligned(4))) uchar4 { unsigned char x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

enum { warpSize = TG_EMU_WARP_SIZE };

namespace tg_emu {

/* ---- the running thread ------------------------------------------------------ */

inline const tg_emu_rt *rt;
/* The CUDA thread this host thread is running now.  Initial-exec: a module
 * is dlopen'ed, and this one pointer fits the static TLS left for that. */
static thread_local tg_emu_thread *cur __attribute__((tls_model("initial-exec")));

/* A failed check: reported with the thread, block and kernel, and the
 * source line the emulator finds on the call stack. */
[[noreturn]] __attribute__((format(printf, 2, 3))) inline void fail(int result, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rt->fail(cur, result, msg);
  __builtin_unreachable();
}

/* Thread (x,y,z) of linear id l in block b, for messages. */
struct coords {
  char s[48];
  coords(const tg_emu_block *b, int l) {
    unsigned bx = b->dim.x, by = b->dim.y;
    snprintf(s, sizeof s, "(%u,%u,%u)", (unsigned)l % bx, (unsigned)l / bx % by, (unsigned)l / (bx * by));
  }
};

/* Calls into the emulator that may switch fibers; cur is restored after. */
inline void barrier(int line) {
  tg_emu_thread *me = cur;
  rt->barrier(me, line);
  cur = me;
}

inline const unsigned char *warp_sync(int kind, const char *what, unsigned mask, int line, const void *ops,
                                      unsigned bytes) {
  tg_emu_thread *me = cur;
  const unsigned char *slots = rt->warp_sync(me, kind, what, mask, line, ops, bytes);
  cur = me;
  return slots;
}

/* ---- names of element types, for messages -------------------------------------- */

template <typename T> inline const char *type_name() { return sizeof(T) == 1 ? "byte" : "element"; }
template <> inline const char *type_name<float>() { return "float"; }
template <> inline const char *type_name<double>() { return "double"; }
template <> inline const char *type_name<int>() { return "int"; }
template <> inline const char *type_name<unsigned>() { return "unsigned"; }
template <> inline const char *type_name<unsigned short>() { return "unsigned short"; }
template <> inline const char *type_name<short>() { return "short"; }
template <> inline const char *type_name<unsigned char>() { return "unsigned char"; }
template <> inline const char *type_name<long long>() { return "long long"; }
template <> inline const char *type_name<unsigned long long>() { return "unsigned long long"; }
template <> inline const char *type_name<float4>() { return "float4"; }
template <> inline const char *type_name<float2>() { return "float2"; }

/* ---- shared-memory race checks ------------------------------------------------- */

enum access { READ = 0, WRITE = 1, ATOMIC = 2 };

inline const char *describe_access(int kind) { return kind == READ ? "reads" : kind == WRITE ? "writes" : "atomically updates"; }

/* The accesses of thread t at barrier epoch e and warp epoch we, and an
 * earlier one by thread `other` (linear id) at epochs (oe, owe): ordered
 * when a barrier came between, or, within one warp, a warp sync. */
inline bool ordered(const tg_emu_thread *t, int other, unsigned oe, unsigned owe) {
  const tg_emu_block *b = t->block;
  if (oe != b->barrier_epoch) return true;
  return other / TG_EMU_WARP_SIZE == t->warp && owe != b->warp_epoch[t->warp];
}

[[noreturn]] __attribute__((noinline)) inline void race(const tg_emu_region *r, uintptr_t a, size_t elem, const char *tn, int kind,
                              const char *what_other, int other) {
  const tg_emu_thread *t = cur;
  char who[64] = "other threads";
  if (other >= 0) snprintf(who, sizeof who, "thread %s", coords(t->block, other).s);
  fail(TG_EMU_LAUNCH_FAILED,
       "shared memory race: this thread %s %s[%lld] (%s, byte %lld of the array), which %s %s with no "
       "__syncthreads between%s",
       describe_access(kind), r->name, (long long)((a - r->lo) / elem), tn, (long long)(a - r->lo), who, what_other,
       other >= 0 && other / TG_EMU_WARP_SIZE == t->warp ? " (nor __syncwarp: they are in the same warp)" : "");
}

[[noreturn]] __attribute__((noinline)) inline void uninitialised(const tg_emu_region *r, uintptr_t a, size_t elem,
                                                                  const char *tn, int kind, uintptr_t byte) {
  fail(TG_EMU_LAUNCH_FAILED,
       "%s %s[%lld] (%s, byte %lld of the array), which no thread of this block has written: shared memory "
       "starts undefined (a missing __syncthreads before the read, or a store that never happened)",
       describe_access(kind), r->name, (long long)((a - r->lo) / elem), tn, (long long)byte);
}

[[noreturn]] __attribute__((noinline)) inline void in_flight(const tg_emu_region *r, uintptr_t a, size_t elem,
                                                              const char *tn, int kind, int other) {
  const tg_emu_thread *t = cur;
  char who[64] = "this thread";
  if (other != t->linear) snprintf(who, sizeof who, "thread %s", coords(t->block, other).s);
  fail(TG_EMU_LAUNCH_FAILED,
       "this thread %s %s[%lld] (%s, byte %lld of the array), which a cp.async by %s still writes: no "
       "cp.async.wait_group has completed that copy yet (wait for its group, then __syncthreads, before the "
       "tile is touched)",
       describe_access(kind), r->name, (long long)((a - r->lo) / elem), tn, (long long)(a - r->lo), who);
}

/* Checks and records an access of n bytes at a in shared array r. */
inline void shared_access(const tg_emu_region *r, uintptr_t a, size_t n, size_t elem, const char *tn, int kind) {
  const tg_emu_thread *t = cur;
  const tg_emu_block *b = t->block;
  const int me = t->linear + 1;
  const unsigned e = b->barrier_epoch, we = b->warp_epoch[t->warp];
  for (uintptr_t w = a - r->lo, last = a + n - 1 - r->lo; w <= last; w++) {
    tg_emu_shadow *s = &r->shadow[w];
    if (s->pending) in_flight(r, a, elem, tn, kind, s->writer - 1);
    if (kind != WRITE) {
      if (!s->writer) uninitialised(r, a, elem, tn, kind, w);
      if (s->writer != me && !(kind == ATOMIC && s->atomic) && !ordered(t, s->writer - 1, s->write_epoch, s->write_warp_epoch))
        race(r, a, elem, tn, kind, s->atomic ? "updated atomically" : "wrote", s->writer - 1);
    }
    if (kind != READ) {
      if (s->writer && s->writer != me && !(kind == ATOMIC && s->atomic) &&
          !ordered(t, s->writer - 1, s->write_epoch, s->write_warp_epoch))
        race(r, a, elem, tn, kind, s->atomic ? "updated atomically" : "wrote", s->writer - 1);
      if (s->reader && s->reader != me && s->read_epoch == e &&
          !(s->reader_warp == t->warp && s->read_warp_epoch != we))
        race(r, a, elem, tn, kind, "read", s->reader > 0 ? s->reader - 1 : -1);
      s->writer = me;
      s->write_epoch = e;
      s->write_warp_epoch = we;
      s->atomic = kind == ATOMIC;
      s->reader = 0;
    }
    if (kind == READ) {
      if (!s->reader || s->read_epoch != e) {
        s->reader = me;
        s->reader_warp = t->warp;
      } else if (s->reader != me) {
        s->reader = -1;
        if (s->reader_warp != t->warp) s->reader_warp = -1;
      }
      s->read_epoch = e;
      s->read_warp_epoch = we;
    }
  }
}

/* ---- checked pointers ------------------------------------------------------------- */

template <typename T> class ptr;

[[noreturn]] __attribute__((noinline)) inline void out_of_bounds(const tg_emu_region *r, uintptr_t a, size_t n, size_t elem, const char *tn) {
  if (!r)
    fail(TG_EMU_ILLEGAL_ADDRESS,
         "dereferences %#llx, a pointer that does not come from a kernel argument or a shared array "
         "(a null pointer, or one made from an integer)",
         (unsigned long long)a);
  long long count = (long long)((r->hi - r->lo) / elem);
  long long idx = a >= r->lo ? (long long)((a - r->lo) / elem) : -(long long)((r->lo - a + elem - 1) / elem);
  char where[96];
  if (a < r->lo) snprintf(where, sizeof where, "%lld before the start", -idx);
  else if (idx == count) snprintf(where, sizeof where, "one past the end");
  else snprintf(where, sizeof where, "%lld past the end", idx - count + 1);
  /* undescribed arguments are named "argument 3" already */
  const char *kind = r->space == TG_EMU_SHARED ? "shared array " : strncmp(r->name, "argument", 8) ? "argument " : "";
  fail(TG_EMU_ILLEGAL_ADDRESS, "accesses %s[%lld] (%zu bytes at byte offset %lld), %s of %s%s (%lld %s%s, %llu bytes)",
       r->name, idx, n, a >= r->lo ? (long long)(a - r->lo) : -(long long)(r->lo - a), where, kind, r->name, count, tn,
       count == 1 ? "" : "s", (unsigned long long)(r->hi - r->lo));
}

[[noreturn]] __attribute__((noinline)) inline void misaligned(const tg_emu_region *r, uintptr_t a, size_t n) {
  fail(TG_EMU_MISALIGNED_ADDRESS, "a %zu-byte access at byte offset %lld of %s is not %zu-byte aligned (address %#llx)", n,
       r ? (long long)(a - r->lo) : 0LL, r ? r->name : "?", n, (unsigned long long)a);
}

/* Bytes [a, a + n) must lie in r and be aligned to `align`. */
inline void check(const tg_emu_region *r, uintptr_t a, size_t n, size_t align, size_t elem, const char *tn) {
  if (__builtin_expect(!r || a < r->lo || a + n > r->hi || a + n < a, 0)) out_of_bounds(r, a, n, elem, tn);
  if (__builtin_expect(a & (align - 1), 0)) misaligned(r, a, align);
}

/* An element of memory through a checked pointer: reading it and writing
 * it are told apart, so that shared memory can be checked for races. */
template <typename T> class ref {
  using V = std::remove_cv_t<T>;
  uintptr_t a_;
  const tg_emu_region *r_;

 public:
  ref(uintptr_t a, const tg_emu_region *r) : a_(a), r_(r) {}
  V get() const {
    if (r_->shadow) shared_access(r_, a_, sizeof(V), sizeof(V), type_name<V>(), READ);
    V v;
    memcpy(&v, (const void *)a_, sizeof v);
    return v;
  }
  void set(const V &v) {
    static_assert(!std::is_const<T>::value, "a store through a pointer to const");
    if (r_->shadow) shared_access(r_, a_, sizeof(V), sizeof(V), type_name<V>(), WRITE);
    memcpy((void *)a_, &v, sizeof v);
  }
  operator V() const { return get(); }

 private:
  /* `c ? p[i] : 0` with p to non-const float: C++ would convert the load to
   * the other operand's type (int: the one implicit conversion it finds,
   * float then int) where the GPU gives float ? float : int a float.  This
   * constructor, declared and never defined, makes the conversion the other
   * way possible too, so the expression is ambiguous: a compile error (with
   * gcc and clang alike; a deleted one does not do it for clang) instead of
   * a silent int.  `c ? p[i] : 0.0f` is unaffected.  (Loads through
   * pointers to const, every input of generated code, are plain values:
   * ptr::operator[].) */
  template <typename X, typename = std::enable_if_t<std::is_arithmetic<X>::value && !std::is_same<X, V>::value>>
  ref(X);

 public:
  ref &operator=(const V &v) {
    set(v);
    return *this;
  }
  ref &operator=(const ref &o) {
    set(o.get());
    return *this;
  }
  template <typename X> ref &operator+=(const X &x) { V v = get(); v += x; set(v); return *this; }
  template <typename X> ref &operator-=(const X &x) { V v = get(); v -= x; set(v); return *this; }
  template <typename X> ref &operator*=(const X &x) { V v = get(); v *= x; set(v); return *this; }
  template <typename X> ref &operator/=(const X &x) { V v = get(); v /= x; set(v); return *this; }
  template <typename X> ref &operator|=(const X &x) { V v = get(); v |= x; set(v); return *this; }
  template <typename X> ref &operator&=(const X &x) { V v = get(); v &= x; set(v); return *this; }
  template <typename X> ref &operator^=(const X &x) { V v = get(); v ^= x; set(v); return *this; }
  ref &operator++() { return *this += 1; }
  ref &operator--() { return *this -= 1; }
  /* &p[i]: a checked pointer to the element (atomicAdd(&p[i], x)) */
  ptr<T> operator&() const { return ptr<T>(a_, r_); }
};

/* A pointer into global or shared memory that knows its buffer: every
 * access is checked against the buffer's bounds and alignment, and shared
 * accesses against the race shadow.  Arithmetic may leave the buffer (as
 * on the GPU); only an access outside it is an error. */
template <typename T> class ptr {
 public:
  uintptr_t a = 0;
  const tg_emu_region *r = nullptr;

  ptr() = default;
  ptr(decltype(nullptr)) {}
  ptr(uintptr_t addr, const tg_emu_region *reg) : a(addr), r(reg) {}
  template <typename U, typename = std::enable_if_t<std::is_convertible<U *, T *>::value>>
  ptr(const ptr<U> &o) : a(o.a), r(o.r) {}

  /* An element: through a pointer to const, its value (checked, and
   * recorded as a read of shared memory); otherwise a ref, which tells
   * reads from writes. */
  using element = std::conditional_t<std::is_const<T>::value, std::remove_cv_t<T>, ref<T>>;
  template <typename I, typename = std::enable_if_t<std::is_integral<I>::value>> element operator[](I i) const {
    uintptr_t x = a + (uintptr_t)((long long)i * (long long)sizeof(T));
    check(r, x, sizeof(T), alignof(T), sizeof(T), type_name<std::remove_cv_t<T>>());
    return ref<T>(x, r);
  }
  element operator*() const { return (*this)[0]; }
  template <typename I, typename = std::enable_if_t<std::is_integral<I>::value>> ptr operator+(I n) const {
    return ptr(a + (uintptr_t)((long long)n * (long long)sizeof(T)), r);
  }
  template <typename I, typename = std::enable_if_t<std::is_integral<I>::value>> ptr operator-(I n) const {
    return ptr(a - (uintptr_t)((long long)n * (long long)sizeof(T)), r);
  }
  template <typename U> long long operator-(const ptr<U> &o) const { return ((long long)a - (long long)o.a) / (long long)sizeof(T); }
  template <typename I> ptr &operator+=(I n) { return *this = *this + n; }
  template <typename I> ptr &operator-=(I n) { return *this = *this - n; }
  ptr &operator++() { return *this += 1; }
  ptr &operator--() { return *this -= 1; }
  ptr operator++(int) { ptr old = *this; *this += 1; return old; }
  ptr operator--(int) { ptr old = *this; *this -= 1; return old; }
  template <typename U> bool operator==(const ptr<U> &o) const { return a == o.a; }
  template <typename U> bool operator!=(const ptr<U> &o) const { return a != o.a; }
  template <typename U> bool operator<(const ptr<U> &o) const { return a < o.a; }
  explicit operator bool() const { return a != 0; }
  /* p->field for struct elements: checked for bounds, not for races */
  T *operator->() const {
    check(r, a, sizeof(T), alignof(T), sizeof(T), type_name<std::remove_cv_t<T>>());
    return (T *)a;
  }
};
template <typename T, typename I, typename = std::enable_if_t<std::is_integral<I>::value>>
ptr<T> operator+(I n, const ptr<T> &p) { return p + n; }

/* TG_LD4(p, i): four floats from p[i] as one 16-byte load (16-byte aligned). */
template <typename T, typename I> inline float4 ld4(const ptr<T> &p, I i) {
  static_assert(sizeof(T) == 4, "TG_LD4 reads four 4-byte elements");
  uintptr_t x = p.a + (uintptr_t)((long long)i * 4);
  check(p.r, x, 16, 16, sizeof(T), type_name<std::remove_cv_t<T>>());
  if (p.r->shadow) shared_access(p.r, x, 16, sizeof(T), type_name<std::remove_cv_t<T>>(), READ);
  float4 v;
  memcpy(&v, (const void *)x, 16);
  return v;
}

/* ---- shared memory ------------------------------------------------------------------ */

struct shared_site {
  const char *name;
  int line;
};

/* The block's instance of the array declared at site. */
template <typename T> inline ptr<T> shared_array(const shared_site *site, long long count) {
  tg_emu_thread *t = cur;
  const tg_emu_block *b = t->block;
  for (int i = 0; i < b->n_shared; i++)
    if (b->shared[i]->site == site) return ptr<T>(b->shared[i]->lo, b->shared[i]);
  const tg_emu_region *r = rt->shared_array(t, site, site->name, site->line, (size_t)count * sizeof(T));
  return ptr<T>(r->lo, r);
}

template <typename T> inline ptr<T> dynamic_shared(const char *name) {
  const tg_emu_region *r = rt->dynamic_shared(cur, name);
  return ptr<T>(r->lo, r);
}

/* The shared array holding bytes [addr, addr + n) of the block's shared
 * window (addr as cvta.to.shared gives it), or a failed check naming who. */
inline const tg_emu_region *shared_at(unsigned addr, size_t n, const char *what, int lane) {
  const tg_emu_block *b = cur->block;
  uintptr_t a = b->shared_base + addr;
  for (int i = 0; i < b->n_shared; i++) {
    const tg_emu_region *r = b->shared[i];
    if (a >= r->lo && a < r->hi) {
      if (a + n > r->hi)
        fail(TG_EMU_ILLEGAL_ADDRESS, "%s: lane %d's %zu bytes at shared address %#x run past the end of %s (%llu bytes)",
             what, lane, n, addr, r->name, (unsigned long long)(r->hi - r->lo));
      return r;
    }
  }
  fail(TG_EMU_ILLEGAL_ADDRESS, "%s: lane %d's shared address %#x is in no shared array of this block", what, lane, addr);
}

}  // namespace tg_emu

/* The spellings codegen uses for memory (the .cu defines the GPU's). */
#define TG_ARG(T) ::tg_emu::ptr<T>
#define TG_PTR(T) ::tg_emu::ptr<T>
#define TG_SHARED(T, name, count)                                          \
  static const ::tg_emu::shared_site name##_tg_site = {#name, __LINE__};   \
  const ::tg_emu::ptr<T> name = ::tg_emu::shared_array<T>(&name##_tg_site, (count))
#define TG_SHARED_DYNAMIC(T, name) const ::tg_emu::ptr<T> name = ::tg_emu::dynamic_shared<T>(#name)
#define TG_LD4(p, i) ::tg_emu::ld4((p), (i))
/* A buffer a kernel reads from a table in memory (a multi-tensor kernel's,
 * codegen/cuda/cuda_plan.h: tg_cuda_table): a checked pointer over the bytes the
 * table gives with its address, as a described launch argument is. */
#define TG_TABLE_PTR(T, name, buf)                                                                          \
  const tg_emu_region name##_tg_region = {(uintptr_t)(buf).addr, (uintptr_t)((buf).addr + (buf).bytes), #name, \
                                          TG_EMU_GLOBAL, nullptr, nullptr};                                 \
  const ::tg_emu::ptr<T> name((uintptr_t)(buf).addr, &name##_tg_region)

/* ---- thread and block indices ------------------------------------------------------ */

#define threadIdx (::tg_emu::cur->idx)
#define blockIdx (::tg_emu::cur->block->idx)
#define blockDim (::tg_emu::cur->block->dim)
#define gridDim (::tg_emu::cur->block->grid)

/* ---- barriers and warp collectives ------------------------------------------------ */

inline void __syncthreads(int line = __builtin_LINE()) { ::tg_emu::barrier(line); }
inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE()) {
  ::tg_emu::warp_sync(TG_EMU_SYNCWARP, "__syncwarp", mask, line, nullptr, 0);
}
inline void __threadfence() {}
inline void __threadfence_block() {}

namespace tg_emu {

/* The lanes of the calling thread's warp that exist (a block's last warp
 * may be partial). */
inline unsigned warp_lanes() {
  const tg_emu_thread *t = cur;
  int n = t->block->nthreads - t->warp * TG_EMU_WARP_SIZE;
  return n >= TG_EMU_WARP_SIZE ? 0xffffffffu : (1u << n) - 1;
}

template <typename T> inline T shfl(int kind, const char *what, unsigned mask, T v, int arg, int width, int line) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffles move values of up to 8 bytes");
  if (width < 1 || width > TG_EMU_WARP_SIZE || (width & (width - 1)))
    fail(TG_EMU_LAUNCH_FAILED, "%s: width %d is not a power of 2 up to 32", what, width);
  const unsigned char *slots = warp_sync(kind, what, mask, line, &v, sizeof v);
  const int lane = cur->lane, seg = lane & ~(width - 1);
  int src;
  switch (kind) {
  case TG_EMU_SHFL_IDX: src = seg + (arg & (width - 1)); break;
  case TG_EMU_SHFL_UP: src = lane - arg >= seg ? lane - arg : lane; break;
  case TG_EMU_SHFL_DOWN: src = lane + arg < seg + width ? lane + arg : lane; break;
  default: src = (lane ^ arg) < seg + width ? lane ^ arg : lane; break;
  }
  /* a source outside the mask has no defined value: take our own */
  if (src < 0 || src >= TG_EMU_WARP_SIZE || !(mask & warp_lanes() & (1u << src))) src = lane;
  T r;
  memcpy(&r, slots + src * TG_EMU_SLOT_BYTES, sizeof r);
  return r;
}

inline unsigned vote(int kind, const char *what, unsigned mask, int pred, int line) {
  int p = pred != 0;
  const unsigned char *slots = warp_sync(kind, what, mask, line, &p, sizeof p);
  unsigned bits = 0, m = mask & warp_lanes();
  for (int l = 0; l < TG_EMU_WARP_SIZE; l++) {
    int x;
    memcpy(&x, slots + l * TG_EMU_SLOT_BYTES, sizeof x);
    if ((m >> l & 1) && x) bits |= 1u << l;
  }
  return bits;
}

}  // namespace tg_emu

template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, int line = __builtin_LINE()) {
  return ::tg_emu::shfl(TG_EMU_SHFL_IDX, "__shfl_sync", mask, v, src, width, line);
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, int line = __builtin_LINE()) {
  return ::tg_emu::shfl(TG_EMU_SHFL_UP, "__shfl_up_sync", mask, v, (int)delta, width, line);
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, int line = __builtin_LINE()) {
  return ::tg_emu::shfl(TG_EMU_SHFL_DOWN, "__shfl_down_sync", mask, v, (int)delta, width, line);
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, int line = __builtin_LINE()) {
  return ::tg_emu::shfl(TG_EMU_SHFL_XOR, "__shfl_xor_sync", mask, v, lane_mask, width, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, int line = __builtin_LINE()) {
  return ::tg_emu::vote(TG_EMU_VOTE_BALLOT, "__ballot_sync", mask, pred, line);
}
inline int __any_sync(unsigned mask, int pred, int line = __builtin_LINE()) {
  return ::tg_emu::vote(TG_EMU_VOTE_ANY, "__any_sync", mask, pred, line) != 0;
}
inline int __all_sync(unsigned mask, int pred, int line = __builtin_LINE()) {
  return ::tg_emu::vote(TG_EMU_VOTE_ALL, "__all_sync", mask, pred, line) == (mask & ::tg_emu::warp_lanes());
}
/* Every lane of the warp that exists and has not exited: the emulator runs
 * a warp's lanes one after another, so "converged" is the whole warp. */
inline unsigned __activemask() { return ::tg_emu::warp_lanes(); }

/* ---- atomics --------------------------------------------------------------------------- */

namespace tg_emu {

/* The old value at p, then op(old) stored; checked like any access, and
 * as an atomic for the race checks (atomics do not race each other).
 * Blocks may run on several host threads, so global memory is updated with
 * a real atomic. */
template <typename T, typename F> inline T atomic_rmw(const ptr<T> &p, F op) {
  check(p.r, p.a, sizeof(T), alignof(T), sizeof(T), type_name<T>());
  if (p.r->shadow) shared_access(p.r, p.a, sizeof(T), sizeof(T), type_name<T>(), ATOMIC);
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 4- or 8-byte values");
  using U = std::conditional_t<sizeof(T) == 4, unsigned, unsigned long long>;
  U *word = (U *)p.a;
  U old = __atomic_load_n(word, __ATOMIC_RELAXED), next;
  T o, n;
  do {
    memcpy(&o, &old, sizeof o);
    n = op(o);
    memcpy(&next, &n, sizeof next);
  } while (!__atomic_compare_exchange_n(word, &old, next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return o;
}

}  // namespace tg_emu

template <typename T> inline T atomicAdd(const ::tg_emu::ptr<T> &p, T v) {
  return ::tg_emu::atomic_rmw(p, [v](T o) { return (T)(o + v); });
}
template <typename T> inline T atomicSub(const ::tg_emu::ptr<T> &p, T v) {
  return ::tg_emu::atomic_rmw(p, [v](T o) { return (T)(o - v); });
}
template <typename T> inline T atomicMax(const ::tg_emu::ptr<T> &p, T v) {
  return ::tg_emu::atomic_rmw(p, [v](T o) { return o < v ? v : o; });
}
template <typename T> inline T atomicMin(const ::tg_emu::ptr<T> &p, T v) {
  return ::tg_emu::atomic_rmw(p, [v](T o) { return v < o ? v : o; });
}
template <typename T> inline T atomicExch(const ::tg_emu::ptr<T> &p, T v) {
  return ::tg_emu::atomic_rmw(p, [v](T) { return v; });
}
template <typename T> inline T atomicCAS(const ::tg_emu::ptr<T> &p, T cmp, T v) {
  return ::tg_emu::atomic_rmw(p, [cmp, v](T o) { return o == cmp ? v : o; });
}
/* on plain pointers (locals): no other thread can see them */
template <typename T> inline T atomicAdd(T *p, T v) { T o = *p; *p = (T)(o + v); return o; }

/* ---- bit casts and integer intrinsics ------------------------------------------------ */

inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float f) { int x; memcpy(&x, &f, 4); return x; }
inline unsigned __float_as_uint(float f) { unsigned x; memcpy(&x, &f, 4); return x; }
inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double d) { long long x; memcpy(&x, &d, 8); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }

inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

/* ---- math: libm's float functions are CUDA's; these are CUDA's own ------------------ */

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
/* glibc's math.h declares __expf and its kin itself (the same functions as
 * expf ...), so the fast-math intrinsics are macros onto libm's. */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __powf(x, y) powf((x), (y))
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
/* CUDA never merges __fmul_rn or __fadd_rn into a fused multiply-add; the
 * host compiler (-ffp-contract=fast) would, once the call is inlined.  So
 * the product leaves through a volatile and the sum's operands come in
 * through them: each is rounded to float, as on the GPU. */
inline float __fadd_rn(float a, float b) {
  volatile float x = a, y = b;
  return x + y;
}
inline float __fmul_rn(float a, float b) {
  volatile float p = a * b;
  return p;
}
inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline float __int2float_rn(int x) { return (float)x; }
/* a monotonic count of nanoseconds stands in for the SM's cycle counter */
inline long long clock64() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- bf16 and f16 ------------------------------------------------------------------ */

namespace tg_emu {

/* f32 to bf16, rounded to nearest even; NaN becomes the canonical 0x7fff
 * (cvt.rn.bf16.f32). */
inline unsigned short f32_to_bf16_rn(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned)h << 16); }

/* IEEE half to float (cvt.f32.f16): exact. */
inline float f16_to_f32(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (man << 13)); /* inf, nan (payload kept) */
  if (exp) return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
  if (!man) return __uint_as_float(sign);
  /* subnormal: man * 2^-24, exact in float */
  float f = (float)man * 5.9604644775390625e-8f;
  return sign ? -f : f;
}

/* float to IEEE half rounded to nearest even (cvt.rn.f16.f32): overflow to
 * infinity, subnormals kept, NaN to the canonical 0x7fff. */
inline unsigned short f32_to_f16_rn(float f) {
  unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fff;
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* rounds to at least 65520: infinity */
  if (a >= 0x38800000u) {                                        /* normal half: 2^-14 and up */
    unsigned r = a - 0x38000000u;                                /* rebias the exponent (127 -> 15) */
    r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    return (unsigned short)(sign | r);
  }
  if (a < 0x33000000u) return (unsigned short)sign; /* below half the smallest subnormal: 0 */
  /* subnormal half: the significand shifted into place, rounded to nearest even */
  unsigned exp = a >> 23, man = (a & 0x7fffffu) | 0x800000u, shift = 126 - exp; /* 14..24 */
  unsigned r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) r++;
  return (unsigned short)(sign | r);
}

/* cvt.rn.bf16x2.f32 d, hi, lo: hi rounded into the upper half, lo the lower. */
inline unsigned cvt_rn_bf16x2_f32(float hi, float lo) {
  return ((unsigned)f32_to_bf16_rn(hi) << 16) | f32_to_bf16_rn(lo);
}

inline bool is_subnormal(float x) { return x != 0.0f && fabsf(x) < 1.17549435e-38f; }

/* ex2.approx.ftz.f32: 2^x with subnormal inputs and results flushed to
 * zero (the GPU's is within 2 ulp; exp2f is within 1). */
inline float ex2_approx_ftz(float x) {
  if (is_subnormal(x)) x = 0.0f;
  float y = exp2f(x);
  return is_subnormal(y) ? copysignf(0.0f, y) : y;
}

/* lg2.approx.ftz.f32: log2 x, a subnormal input counting as zero (-inf). */
inline float lg2_approx_ftz(float x) {
  if (is_subnormal(x)) x = copysignf(0.0f, x);
  return log2f(x);
}

/* ---- tensor-core and shared-memory PTX ------------------------------------------ */

/* cvta.to.shared: a generic pointer into shared memory as the block's
 * 32-bit shared address. */
template <typename T> inline unsigned cvta_to_shared(const ptr<T> &p) {
  if (!p.r || p.r->space != TG_EMU_SHARED)
    fail(TG_EMU_ILLEGAL_ADDRESS, "cvta.to.shared of a pointer that is not into shared memory (%s %s)",
         p.r ? "it points into argument" : "it points", p.r ? p.r->name : "nowhere the emulator knows");
  return (unsigned)(p.a - cur->block->shared_base);
}

/* A 16-bit element of shared memory at a shared address, read (and
 * race-checked) by the calling lane. */
inline unsigned short shared_u16(const tg_emu_region *r, unsigned addr) {
  uintptr_t a = cur->block->shared_base + addr;
  shared_access(r, a, 2, 2, "16-bit element", READ);
  unsigned short v;
  memcpy(&v, (const void *)a, 2);
  return v;
}

/* ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16: num 8x8 matrices of
 * 16-bit elements; lane 8m + r gives the address of row r of matrix m.
 * Lane l receives, in register m, elements (l/4, 2(l%4)) and (l/4,
 * 2(l%4)+1) of matrix m, lower column in the low half; with .trans the
 * matrix is read column-major: elements (2(l%4), l/4) and (2(l%4)+1, l/4).
 * (PTX ISA, "Warp-level matrix load instruction: ldmatrix".) */
inline void ldmatrix(int num, bool trans, unsigned addr, unsigned *out, int line) {
  const char *what = trans ? (num == 1 ? "ldmatrix .x1 .trans" : num == 2 ? "ldmatrix .x2 .trans" : "ldmatrix .x4 .trans")
                           : (num == 1 ? "ldmatrix .x1" : num == 2 ? "ldmatrix .x2" : "ldmatrix .x4");
  if (warp_lanes() != 0xffffffffu) fail(TG_EMU_LAUNCH_FAILED, "%s needs all 32 lanes of the warp", what);
  const unsigned char *slots = warp_sync(TG_EMU_LDMATRIX, what, 0xffffffffu, line, &addr, sizeof addr);
  unsigned rows[32];
  const tg_emu_region *regs[32];
  for (int l = 0; l < 8 * num; l++) {
    memcpy(&rows[l], slots + l * TG_EMU_SLOT_BYTES, sizeof rows[l]);
    if (rows[l] & 15) fail(TG_EMU_MISALIGNED_ADDRESS, "%s: lane %d's row address %#x is not 16-byte aligned", what, l, rows[l]);
    regs[l] = shared_at(rows[l], 16, what, l);
  }
  const int lane = cur->lane, g = lane >> 2, t = lane & 3;
  for (int m = 0; m < num; m++) {
    unsigned v = 0;
    for (int i = 0; i < 2; i++) {
      int row = trans ? 2 * t + i : g, col = trans ? g : 2 * t + i;
      int src = 8 * m + row;
      v |= (unsigned)shared_u16(regs[src], rows[src] + 2 * (unsigned)col) << (16 * i);
    }
    out[m] = v;
  }
}

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c with
 * d = c (in place).  Lane l, g = l/4, t = l%4 holds (PTX ISA, "Matrix
 * Fragments for mma.m16n8k16 with floating point type"):
 *   a[0] = A(g, 2t..2t+1)  a[1] = A(g+8, 2t..)  a[2] = A(g, 2t+8..)  a[3] = A(g+8, 2t+8..)
 *   b[0] = B(2t..2t+1, g)  b[1] = B(2t+8..2t+9, g)
 *   c[i] = C(g + 8 (i >= 2), 2t + (i & 1))
 * each pair with its lower index in the low 16 bits.  The products of bf16
 * values are exact in float; the 16 of them and c are summed in double and
 * rounded once, which the tensor core's sum (some order, float or wider)
 * approaches to within a few ulp of the result. */
inline void mma_m16n8k16_bf16(float *c, const unsigned *a, unsigned b0, unsigned b1, int line) {
  const char *what = "mma.sync.m16n8k16 (bf16)";
  if (warp_lanes() != 0xffffffffu) fail(TG_EMU_LAUNCH_FAILED, "%s needs all 32 lanes of the warp", what);
  unsigned ops[6] = {a[0], a[1], a[2], a[3], b0, b1};
  const unsigned char *slots = warp_sync(TG_EMU_MMA_M16N8K16_BF16, what, 0xffffffffu, line, ops, sizeof ops);
  auto reg = [slots](int lane, int i) {
    unsigned v;
    memcpy(&v, slots + lane * TG_EMU_SLOT_BYTES + 4 * i, 4);
    return v;
  };
  auto half = [](unsigned v, int k) { return bf16_to_f32((unsigned short)(v >> (16 * (k & 1)))); };
  const int lane = cur->lane, g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; i++) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    double sum = c[i];
    for (int k = 0; k < 16; k++) {
      /* A(row, k): lane 4(row % 8) + (k % 8)/2, register (row >= 8) + 2 (k >= 8) */
      float x = half(reg(4 * (row & 7) + ((k & 7) >> 1), (row >= 8) + 2 * (k >= 8)), k);
      /* B(k, col): lane 4 col + (k % 8)/2, register 4 + (k >= 8) */
      float y = half(reg(4 * col + ((k & 7) >> 1), 4 + (k >= 8)), k);
      sum += (double)x * (double)y;
    }
    c[i] = (float)sum;
  }
}

/* cp.async.{ca,cg}.shared.global [dst], [src], bytes, as the GPU does it:
 * the copy joins this thread's open group (cp.async.commit_group closes it)
 * and lands when cp.async.wait_group completes its group.  Until then its
 * bytes are marked in flight: any access to them (a read of the tile before
 * its wait, a store into it) fails the launch.  The wait records the copy
 * as this thread's write at that moment, so another thread must still pass
 * a __syncthreads after the wait before reading it (the race checks).
 * Copies still in flight when the thread exits land then. */
template <typename T> inline void cp_async(unsigned dst, const ptr<T> &src, int bytes, int line) {
  (void)line;
  tg_emu_thread *t = cur;
  if (bytes != 4 && bytes != 8 && bytes != 16) fail(TG_EMU_LAUNCH_FAILED, "cp.async of %d bytes (4, 8 or 16)", bytes);
  check(src.r, src.a, (size_t)bytes, (size_t)bytes, sizeof(T), type_name<std::remove_cv_t<T>>());
  if (src.r->space != TG_EMU_GLOBAL) fail(TG_EMU_ILLEGAL_ADDRESS, "cp.async from %s, which is not global memory", src.r->name);
  if (dst % (unsigned)bytes) fail(TG_EMU_MISALIGNED_ADDRESS, "cp.async to shared address %#x, not %d-byte aligned", dst, bytes);
  const tg_emu_region *r = shared_at(dst, (size_t)bytes, "cp.async", t->lane);
  uintptr_t a = t->block->shared_base + dst;
  if (t->n_async == TG_EMU_ASYNC_MAX)
    fail(TG_EMU_LAUNCH_FAILED, "more than %d cp.async copies in flight in one thread (the emulator's limit)",
         TG_EMU_ASYNC_MAX);
  shared_access(r, a, (size_t)bytes, 1, "byte", WRITE);
  for (uintptr_t w = a - r->lo, last = a + (size_t)bytes - 1 - r->lo; w <= last; w++) r->shadow[w].pending = 1;
  t->async[t->n_async++] = {r, a, src.a, (unsigned)bytes, t->async_group};
}

/* Lands copy c: its bytes, recorded as written by this thread now. */
inline void cp_async_land(const tg_emu_async *c) {
  const tg_emu_thread *t = cur;
  memcpy((void *)c->dst, (const void *)c->src, c->bytes);
  for (uintptr_t w = c->dst - c->r->lo, last = c->dst + c->bytes - 1 - c->r->lo; w <= last; w++) {
    tg_emu_shadow *s = &c->r->shadow[w];
    s->pending = 0;
    s->writer = t->linear + 1;
    s->write_epoch = t->block->barrier_epoch;
    s->write_warp_epoch = t->block->warp_epoch[t->warp];
    s->atomic = 0;
    s->reader = 0;
  }
}

/* cp.async.commit_group: later copies join a new group. */
inline void cp_async_commit() { cur->async_group++; }

/* cp.async.wait_group n: lands every copy but those of the n most recently
 * committed groups (and of the open one, which a wait never covers). */
inline void cp_async_wait(int n, int line) {
  (void)line;
  tg_emu_thread *t = cur;
  int kept = 0;
  for (int i = 0; i < t->n_async; i++) {
    const tg_emu_async c = t->async[i];
    if (c.group + (unsigned)n < t->async_group) cp_async_land(&c);
    else t->async[kept++] = c;
  }
  t->n_async = kept;
}

}  // namespace tg_emu

/* ---- minimal __half and __nv_bfloat16 --------------------------------------------- */

struct __half { unsigned short x; };
struct __nv_bfloat16 { unsigned short x; };
inline __half __float2half(float f) { return {::tg_emu::f32_to_f16_rn(f)}; }
inline __half __float2half_rn(float f) { return {::tg_emu::f32_to_f16_rn(f)}; }
inline float __half2float(__half h) { return ::tg_emu::f16_to_f32(h.x); }
inline __nv_bfloat16 __float2bfloat16(float f) { return {::tg_emu::f32_to_bf16_rn(f)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {::tg_emu::f32_to_bf16_rn(f)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return ::tg_emu::bf16_to_f32(h.x); }

/* ---- the module's kernel table ------------------------------------------------------ */

namespace tg_emu {

/* How a kernel parameter is made from the driver's *args[i]. */
template <typename P> struct param {
  static constexpr unsigned short bytes = sizeof(P);
  static constexpr unsigned char checked = 0;
  static P make(void *arg, const tg_emu_region *) {
    P v;
    memcpy(&v, arg, sizeof v);
    return v;
  }
};
template <typename T> struct param<ptr<T>> {
  static constexpr unsigned short bytes = sizeof(void *);
  static constexpr unsigned char checked = 1;
  static ptr<T> make(void *arg, const tg_emu_region *r) {
    uintptr_t raw;
    memcpy(&raw, arg, sizeof raw);
    return ptr<T>(raw, r);
  }
};

template <typename F, F f> struct kernel_entry;
template <typename... P, void (*f)(P...)> struct kernel_entry<void (*)(P...), f> {
  static constexpr unsigned short bytes[sizeof...(P) + 1] = {param<P>::bytes..., 0};
  static constexpr unsigned char checked[sizeof...(P) + 1] = {param<P>::checked..., 0};
  template <size_t... I> static void call(void *const *args, const tg_emu_region *regions, std::index_sequence<I...>) {
    (void)args, (void)regions;
    f(param<P>::make(args[I], regions + I)...);
  }
  static void run(void *const *args, const tg_emu_region *regions) {
    call(args, regions, std::index_sequence_for<P...>());
  }
  static tg_emu_kernel info(const char *name) { return {name, (int)sizeof...(P), bytes, checked, &run}; }
};

inline void attach(const tg_emu_rt *r) { rt = r; }
inline void thread_main(tg_emu_thread *t, const tg_emu_kernel *k, void *const *args, const tg_emu_region *regions) {
  cur = t;
  t->n_async = 0;
  t->async_group = 0;
  k->run(args, regions);
  cur = t;
  for (int i = 0; i < t->n_async; i++) cp_async_land(&t->async[i]);
  t->n_async = 0;
}

}  // namespace tg_emu

/* The .cu ends with (under #ifndef __CUDA_ARCH__)
 *     TG_EMU_KERNEL_TABLE(TG_EMU_KERNEL(k0_w0) TG_EMU_KERNEL(k1_w1) ...)
 * which lists its kernels for the emulator. */
extern const tg_emu_kernel tg_emu_kernel_table[];
#define TG_EMU_KERNEL(name) ::tg_emu::kernel_entry<decltype(&name), &name>::info(#name),
extern const char *const tg_emu_source_name;
#define TG_EMU_KERNEL_TABLE(...)                                                               \
  const tg_emu_kernel tg_emu_kernel_table[] = {__VA_ARGS__ {nullptr, 0, nullptr, nullptr, nullptr}}; \
  const char *const tg_emu_source_name = __FILE__;

extern "C" __attribute__((visibility("default"))) const tg_emu_module *tg_emu_module_get(void) {
  static const tg_emu_module m = {TG_EMU_ABI_VERSION, tg_emu_source_name, tg_emu_kernel_table, ::tg_emu::attach,
                                  ::tg_emu::thread_main};
  return &m;
}

#endif /* __cplusplus */
#endif /* TG_CUDA_EMU_H */
