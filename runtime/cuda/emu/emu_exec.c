/* emu_exec.c: blocks, threads as fibers, barriers and warp collectives (emu_exec.h).
 *
 * Scheduling.  A block's threads start in order of their linear id.  A
 * thread runs until it waits (a barrier, a warp collective) or exits; the
 * next to run is then a thread not yet started (on the exiting thread's
 * own fiber, or on a free one), else the oldest thread made ready again.
 * A wait completes when its last participant arrives: that thread moves
 * the others to the ready queue and carries on.  When nothing can run and
 * some thread has not exited, the block is deadlocked.  The order is fixed,
 * so every run does the same.
 *
 * Warp collectives hand operands through two slot arrays per warp used in
 * turn: a lane released from collective k reads slots[k % 2] while faster
 * lanes may already deposit for k + 1 in the other array; collective k + 2
 * cannot start filling slots[k % 2] before every lane has arrived at k + 1,
 * that is, has finished reading k.
 *
 * Per host thread (a launch runs on its caller's thread) there is one
 * executor: the fibers and their stacks, the thread and warp records, the
 * block's shared memory (dynamic first, then the static arrays in the
 * order the block first declares them, each 16-byte aligned) and its race
 * shadow, all kept for the next launch. */
#define _GNU_SOURCE /* dladdr */
#include "emu_exec.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_fiber.h"

extern char **environ;

enum { MAX_THREADS = 1024, MAX_WARPS = MAX_THREADS / TG_EMU_WARP_SIZE };
/* Shared memory of one block: the GPU's most (227 KiB) and some room. */
enum { ARENA_BYTES = 256 * 1024, MAX_SHARED_ARRAYS = 256 };
/* Fiber stacks: deep enough for kernel code built at -O1 (and ASan's
 * redzones); only the pages touched are ever backed by memory. */
#if defined(__SANITIZE_ADDRESS__)
enum { STACK_BYTES = 1024 * 1024 };
#else
enum { STACK_BYTES = 256 * 1024 };
#endif

typedef enum { UNSTARTED, RUNNING, READY, AT_BARRIER, AT_WARP, EXITED } thread_state;

struct pfiber;

typedef struct emu_thread {
  tg_emu_thread pub; /* first: the module's tg_emu_thread * is ours */
  thread_state state;
  int line;          /* where it waits */
  const char *what;  /* at what */
  struct pfiber *fiber;
} emu_thread;

typedef struct emu_warp {
  unsigned lanes;    /* lanes that exist */
  unsigned exited;
  unsigned arrived;  /* lanes at the pending collective */
  unsigned mask;     /* its mask, kind, name, line, first lane */
  int kind, line, first;
  const char *what;
  int parity;
  unsigned char slots[2][TG_EMU_WARP_SIZE * TG_EMU_SLOT_BYTES];
} emu_warp;

typedef struct exec exec;

typedef struct pfiber {
  tg_fiber *f;
  exec *x;
  emu_thread *t;     /* the thread it runs */
  struct pfiber *next_free;
} pfiber;

struct exec {
  tg_fiber *host;              /* the caller's stack: blocks start and end here */
  pfiber *free_fibers;
  pfiber **all_fibers;
  int n_fibers;
  emu_thread threads[MAX_THREADS];
  emu_warp warps[MAX_WARPS];
  unsigned warp_epoch[MAX_WARPS];
  emu_thread *ready[MAX_THREADS]; /* FIFO ring */
  int ready_head, ready_count;
  /* the block */
  const tg_emu_launch *L;
  tg_emu_block block;
  int next_start, exited, at_barrier, barrier_line;
  emu_thread *barrier_first;
  char *arena;                 /* 16-byte aligned */
  tg_emu_shadow *shadow;       /* one per byte of arena */
  size_t shared_used;          /* bytes of arena handed out */
  size_t static_shared;        /* of which static arrays */
  tg_emu_region regions[MAX_SHARED_ARRAYS];
  tg_emu_region *region_list[MAX_SHARED_ARRAYS];
  tg_emu_region dynamic;
  bool dynamic_made;
  /* the outcome */
  bool failed;
  int result;
  char msg[4096];
};

static _Thread_local exec *this_exec;

static exec *executor(void) {
  if (this_exec) return this_exec;
  exec *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->host = tg_fiber_for_thread();
  x->arena = aligned_alloc(64, ARENA_BYTES);
  x->shadow = calloc(ARENA_BYTES, sizeof *x->shadow);
  if (!x->host || !x->arena || !x->shadow) {
    free(x->arena);
    free(x->shadow);
    free(x);
    return NULL;
  }
  this_exec = x;
  return x;
}

void tg_emu_exec_release_thread(void) {
  exec *x = this_exec;
  if (!x) return;
  for (int i = 0; i < x->n_fibers; i++) {
    tg_fiber_free(x->all_fibers[i]->f);
    free(x->all_fibers[i]);
  }
  free(x->all_fibers);
  tg_fiber_free(x->host);
  free(x->arena);
  free(x->shadow);
  free(x);
  this_exec = NULL;
}

/* ---- messages -------------------------------------------------------------- */

static void thread_coords(const tg_emu_block *b, int linear, char *buf, size_t n) {
  unsigned bx = b->dim.x, by = b->dim.y;
  snprintf(buf, n, "(%u,%u,%u)", (unsigned)linear % bx, (unsigned)linear / bx % by, (unsigned)linear / (bx * by));
}

/* "kernel k3_w0 (what it is for), block (1,0,0)" */
static int launch_prefix(const exec *x, char *buf, size_t n) {
  const tg_emu_block *b = &x->block;
  return snprintf(buf, n, "kernel %s%s%s%s, block (%u,%u,%u)", x->L->kernel->name, x->L->where ? " (" : "",
                  x->L->where ? x->L->where : "", x->L->where ? ")" : "", b->idx.x, b->idx.y, b->idx.z);
}

/* The first line in the module's .cu on the call stack, "gpt2.cu:123", by
 * asking addr2line about the return addresses that lie in the module.
 * Empty when addr2line is missing or says nothing useful. */
static void source_line(const exec *x, char *out, size_t outlen) {
  out[0] = 0;
  const char *path = x->L->module_path, *src = x->L->module->source;
  if (!path || !src) return;
  const char *base = strrchr(src, '/');
  base = base ? base + 1 : src;
  void *pcs[64];
  int n = backtrace(pcs, 64);
  char addrs[64][24];
  char *argv[64 + 6];
  int argc = 0;
  argv[argc++] = "addr2line";
  argv[argc++] = "-i";
  argv[argc++] = "-e";
  argv[argc++] = (char *)path;
  for (int i = 0; i < n; i++) {
    Dl_info info;
    const char *pc = (const char *)pcs[i] - 1; /* inside the call, not after it */
    if (!dladdr(pc, &info) || !info.dli_fname || strcmp(info.dli_fname, path)) continue;
    snprintf(addrs[argc], sizeof addrs[argc], "%#lx", (unsigned long)(pc - (const char *)info.dli_fbase));
    argv[argc] = addrs[argc];
    argc++;
  }
  argv[argc] = NULL;
  if (argc == 4) return;
  int fds[2];
  if (pipe(fds)) return;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  pid_t pid;
  int rc = posix_spawnp(&pid, "addr2line", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  char text[8192];
  size_t got = 0;
  if (rc == 0) {
    for (;;) {
      ssize_t r = read(fds[0], text + got, sizeof text - 1 - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  close(fds[0]);
  text[got] = 0;
  size_t bl = strlen(base);
  for (char *line = text; *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = 0;
    char *colon = strrchr(line, ':');
    /* "/dir/gpt2.cu:123" or "gpt2.cu:123 (discriminator 2)": the file's base name must match */
    char *sp = strchr(line, ' ');
    if (sp) *sp = 0, colon = strrchr(line, ':');
    if (colon && colon - line >= (long)bl && !strncmp(colon - bl, base, bl) &&
        (colon - line == (long)bl || colon[-(long)bl - 1] == '/') && colon[1] >= '1' && colon[1] <= '9') {
      snprintf(out, outlen, "%s:%s", base, colon + 1);
      return;
    }
    if (!end) break;
    line = end + 1;
  }
}

static void set_failure(exec *x, int result, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_failure(exec *x, int result, const char *fmt, ...) {
  if (x->failed) return;
  x->failed = true;
  x->result = result;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->msg, sizeof x->msg, fmt, ap);
  va_end(ap);
}

/* ---- running threads ---------------------------------------------------------- */

static exec *exec_of(const tg_emu_thread *t) { return t->block->runtime; }

static void make_ready(exec *x, emu_thread *t) {
  t->state = READY;
  x->ready[(x->ready_head + x->ready_count++) % MAX_THREADS] = t;
}

static emu_thread *pop_ready(exec *x) {
  if (!x->ready_count) return NULL;
  emu_thread *t = x->ready[x->ready_head];
  x->ready_head = (x->ready_head + 1) % MAX_THREADS;
  x->ready_count--;
  return t;
}

static emu_thread *take_unstarted(exec *x) {
  if (x->next_start >= x->block.nthreads) return NULL;
  emu_thread *t = &x->threads[x->next_start++];
  t->state = RUNNING;
  return t;
}

static void fiber_main(void *arg);

/* A fiber to run t: a free one, or a new one (NULL when out of memory). */
static pfiber *fiber_for(exec *x, emu_thread *t) {
  pfiber *pf = x->free_fibers;
  if (pf) {
    x->free_fibers = pf->next_free;
  } else {
    pfiber **all = realloc(x->all_fibers, sizeof *all * (size_t)(x->n_fibers + 1));
    if (!all) return NULL;
    x->all_fibers = all;
    pf = calloc(1, sizeof *pf);
    if (!pf) return NULL;
    pf->x = x;
    pf->f = tg_fiber_new(STACK_BYTES, fiber_main, pf);
    if (!pf->f) {
      free(pf);
      return NULL;
    }
    x->all_fibers[x->n_fibers++] = pf;
  }
  pf->t = t;
  t->fiber = pf;
  return pf;
}

/* Leaves fiber `from` for whatever runs next: a ready thread, a thread not
 * yet started, else the host (the block is done, or deadlocked). */
static void run_next(exec *x, tg_fiber *from) {
  if (x->failed) {
    tg_fiber_switch(from, x->host);
    return;
  }
  emu_thread *t = pop_ready(x);
  if (t) {
    t->state = RUNNING;
    if (t->fiber->f != from) tg_fiber_switch(from, t->fiber->f);
    return;
  }
  t = take_unstarted(x);
  if (t) {
    pfiber *pf = fiber_for(x, t);
    if (!pf) {
      set_failure(x, TG_EMU_LAUNCH_FAILED, "out of memory for the stack of another thread");
      tg_fiber_switch(from, x->host);
      return;
    }
    tg_fiber_switch(from, pf->f);
    return;
  }
  tg_fiber_switch(from, x->host);
}

static void thread_exit(exec *x, emu_thread *t);

/* Each fiber runs thread after thread: the one it was given, then (on the
 * same stack) the next not yet started, until none is left. */
static void fiber_main(void *arg) {
  pfiber *pf = arg;
  exec *x = pf->x;
  for (;;) {
    emu_thread *t = pf->t;
    x->L->module->thread_main(&t->pub, x->L->kernel, x->L->args, x->L->regions);
    thread_exit(x, t);
    t->fiber = NULL;
    emu_thread *n = x->failed ? NULL : take_unstarted(x);
    if (n) {
      pf->t = n;
      n->fiber = pf;
      continue;
    }
    pf->t = NULL;
    pf->next_free = x->free_fibers;
    x->free_fibers = pf;
    run_next(x, pf->f); /* resumed when given a new thread */
  }
}

/* Thread t waits: run something else until it is made ready again. */
static void wait_here(exec *x, emu_thread *t) {
  run_next(x, t->fiber->f);
  /* resumed: ready, or the launch failed and the host resets this fiber */
}

/* ---- failures ------------------------------------------------------------------ */

static void fail_thread(exec *x, emu_thread *t, int result, const char *msg) __attribute__((noreturn));
static void fail_thread(exec *x, emu_thread *t, int result, const char *msg) {
  char pre[512], who[48], line[256];
  launch_prefix(x, pre, sizeof pre);
  thread_coords(&x->block, t->pub.linear, who, sizeof who);
  source_line(x, line, sizeof line);
  set_failure(x, result, "%s, thread %s: %s%s%s", pre, who, msg, line[0] ? "; at " : "", line);
  tg_fiber_switch_final(t->fiber->f, x->host);
  abort(); /* never resumed: the host resets the fiber */
}

static void fail_fmt(exec *x, emu_thread *t, int result, const char *fmt, ...) __attribute__((noreturn, format(printf, 4, 5)));
static void fail_fmt(exec *x, emu_thread *t, int result, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fail_thread(x, t, result, msg);
}

static void rt_fail(tg_emu_thread *pt, int result, const char *message) {
  fail_thread(exec_of(pt), (emu_thread *)pt, result, message);
}

/* "lanes 3, 5-7" for a mask of lanes */
static void lane_list(unsigned m, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int l = 0; l < 32 && k < n; l++) {
    if (!(m >> l & 1)) continue;
    int e = l;
    while (e + 1 < 32 && (m >> (e + 1) & 1)) e++;
    k += (size_t)snprintf(buf + k, n - k, "%s%d", k ? ", " : "", l);
    if (e > l && k < n) k += (size_t)snprintf(buf + k, n - k, "-%d", e);
    l = e;
  }
}

/* ---- barriers ------------------------------------------------------------------ */

static void rt_barrier(tg_emu_thread *pt, int line) {
  exec *x = exec_of(pt);
  emu_thread *t = (emu_thread *)pt;
  const int n = x->block.nthreads;
  if (x->exited)
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED,
             "__syncthreads (line %d) can never complete: %d of the block's %d threads have already exited "
             "(a barrier that not every thread reaches)",
             line, x->exited, n);
  if (x->at_barrier && line != x->barrier_line) {
    char other[48];
    thread_coords(&x->block, x->barrier_first->pub.linear, other, sizeof other);
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED,
             "reaches __syncthreads at line %d while thread %s and %d others wait at the __syncthreads at "
             "line %d: threads of a block must reach the same barrier",
             line, other, x->at_barrier - 1, x->barrier_line);
  }
  if (!x->at_barrier) x->barrier_line = line, x->barrier_first = t;
  if (++x->at_barrier < n) {
    t->state = AT_BARRIER;
    t->line = line;
    t->what = "__syncthreads";
    wait_here(x, t);
    return;
  }
  /* the last to arrive: everyone goes on */
  x->at_barrier = 0;
  x->block.barrier_epoch++;
  for (int i = 0; i < n; i++)
    if (x->threads[i].state == AT_BARRIER) make_ready(x, &x->threads[i]);
}

/* ---- warp collectives -------------------------------------------------------------- */

static const unsigned char *rt_warp_sync(tg_emu_thread *pt, int kind, const char *what, unsigned mask, int line,
                                         const void *ops, unsigned bytes) {
  exec *x = exec_of(pt);
  emu_thread *t = (emu_thread *)pt;
  emu_warp *w = &x->warps[pt->warp];
  const unsigned me = 1u << pt->lane, need = mask & w->lanes;
  char lanes[160];
  if (!(mask & me))
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED, "calls %s (line %d) with mask %#x, which does not include its own lane %d",
             what, line, mask, pt->lane);
  if (need & w->exited) {
    lane_list(need & w->exited, lanes, sizeof lanes);
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED, "%s (line %d, mask %#x) waits for lanes that have exited (%s)", what, line,
             mask, lanes);
  }
  if (bytes > TG_EMU_SLOT_BYTES)
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED, "%s hands %u bytes to a warp collective (at most %d)", what, bytes,
             TG_EMU_SLOT_BYTES);
  if (w->arrived) {
    if (w->kind != kind || w->mask != mask)
      fail_fmt(x, t, TG_EMU_LAUNCH_FAILED,
               "lanes of warp %d disagree: this lane (%d) is at %s (line %d, mask %#x) while lane %d waits at %s "
               "(line %d, mask %#x)",
               pt->warp, pt->lane, what, line, mask, w->first, w->what, w->line, w->mask);
  } else {
    w->kind = kind, w->what = what, w->mask = mask, w->line = line, w->first = pt->lane;
  }
  unsigned char *slots = w->slots[w->parity];
  if (bytes) memcpy(slots + pt->lane * TG_EMU_SLOT_BYTES, ops, bytes);
  w->arrived |= me;
  if (w->arrived != need) {
    t->state = AT_WARP;
    t->line = line;
    t->what = what;
    wait_here(x, t);
    return slots;
  }
  /* the last lane: the collective is complete */
  w->arrived = 0;
  w->parity ^= 1;
  if (need == w->lanes) x->warp_epoch[pt->warp]++;
  for (int l = 0; l < TG_EMU_WARP_SIZE; l++)
    if ((need >> l & 1) && l != pt->lane) make_ready(x, &x->threads[pt->warp * TG_EMU_WARP_SIZE + l]);
  return slots;
}

static void thread_exit(exec *x, emu_thread *t) {
  t->state = EXITED;
  x->exited++;
  emu_warp *w = &x->warps[t->pub.warp];
  const unsigned me = 1u << t->pub.lane;
  w->exited |= me;
  if (w->arrived && (w->mask & me)) {
    char lanes[160];
    lane_list(w->arrived, lanes, sizeof lanes);
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED, "exits while lanes %s of its warp wait for it at %s (line %d, mask %#x)", lanes,
             w->what, w->line, w->mask);
  }
  if (x->at_barrier) {
    char other[48];
    thread_coords(&x->block, x->barrier_first->pub.linear, other, sizeof other);
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED,
             "exits while %d threads of the block (thread %s first) wait at __syncthreads (line %d): a barrier "
             "that not every thread reaches",
             x->at_barrier, other, x->barrier_line);
  }
}

/* ---- shared memory ------------------------------------------------------------- */

static tg_emu_region *new_region(exec *x, emu_thread *t, const char *name, const void *site, size_t bytes) {
  if (x->block.n_shared >= MAX_SHARED_ARRAYS)
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED, "more than %d shared arrays in one block", MAX_SHARED_ARRAYS);
  size_t off = (x->shared_used + 15) & ~(size_t)15;
  if (off + bytes > x->L->shared_limit || off + bytes > ARENA_BYTES)
    fail_fmt(x, t, off + bytes > x->L->shared_limit ? 1 /* CUDA_ERROR_INVALID_VALUE, as the driver's refusal */
                                                    : TG_EMU_LAUNCH_FAILED,
             "shared array %s (%zu bytes) takes the block's shared memory to %zu bytes, over the %zu it may have", name,
             bytes, off + bytes, x->L->shared_limit);
  tg_emu_region *r = &x->regions[x->block.n_shared];
  r->lo = (uintptr_t)(x->arena + off);
  r->hi = r->lo + bytes;
  r->name = name;
  r->space = TG_EMU_SHARED;
  r->site = site;
  r->shadow = x->shadow + off;
  memset(r->shadow, 0, bytes * sizeof *r->shadow);
  x->region_list[x->block.n_shared++] = r;
  x->shared_used = off + bytes;
  return r;
}

static tg_emu_region *rt_shared_array(tg_emu_thread *pt, const void *site, const char *name, int line, size_t bytes) {
  exec *x = exec_of(pt);
  emu_thread *t = (emu_thread *)pt;
  for (int i = 0; i < x->block.n_shared; i++)
    if (x->region_list[i]->site == site) return x->region_list[i];
  if (x->static_shared + bytes > TG_EMU_STATIC_SHARED_LIMIT)
    fail_fmt(x, t, TG_EMU_LAUNCH_FAILED,
             "__shared__ %s (line %d, %zu bytes) takes the kernel's static shared memory to %zu bytes, over the "
             "%d a kernel may declare (ptxas refuses it; larger tiles need dynamic shared memory)",
             name, line, bytes, x->static_shared + bytes, TG_EMU_STATIC_SHARED_LIMIT);
  x->static_shared += bytes;
  return new_region(x, t, name, site, bytes);
}

static tg_emu_region *rt_dynamic_shared(tg_emu_thread *pt, const char *name) {
  exec *x = exec_of(pt);
  (void)name;
  return &x->dynamic; /* made at the block's start, at offset 0 */
}

static const tg_emu_rt runtime = {TG_EMU_ABI_VERSION, rt_barrier, rt_warp_sync, rt_fail, rt_shared_array,
                                  rt_dynamic_shared};

const tg_emu_rt *tg_emu_runtime(void) { return &runtime; }

/* ---- blocks ---------------------------------------------------------------------- */

/* "threads 0-127 wait at __syncthreads (line 30); threads 128-255 have exited" */
static void describe_deadlock(exec *x, char *buf, size_t n) {
  size_t k = 0;
  const int nt = x->block.nthreads;
  for (int i = 0; i < nt && k < n;) {
    const emu_thread *t = &x->threads[i];
    int j = i;
    while (j + 1 < nt && x->threads[j + 1].state == t->state && x->threads[j + 1].line == t->line &&
           x->threads[j + 1].what == t->what)
      j++;
    char a[48], b[48];
    thread_coords(&x->block, i, a, sizeof a);
    thread_coords(&x->block, j, b, sizeof b);
    const char *sep = k ? "; " : "";
    if (j > i) k += (size_t)snprintf(buf + k, n - k, "%sthreads %s to %s ", sep, a, b);
    else k += (size_t)snprintf(buf + k, n - k, "%sthread %s ", sep, a);
    if (k >= n) break;
    if (t->state == EXITED) k += (size_t)snprintf(buf + k, n - k, "%s exited", j > i ? "have" : "has");
    else if (t->state == AT_BARRIER || t->state == AT_WARP)
      k += (size_t)snprintf(buf + k, n - k, "wait%s at %s (line %d)", j > i ? "" : "s", t->what, t->line);
    else k += (size_t)snprintf(buf + k, n - k, "%s", t->state == UNSTARTED ? "never started" : "are runnable");
    i = j + 1;
  }
}

static void reset_block_fibers(exec *x) {
  for (int i = 0; i < x->block.nthreads; i++) {
    emu_thread *t = &x->threads[i];
    if (!t->fiber) continue;
    tg_fiber_reset(t->fiber->f);
    t->fiber->t = NULL;
    t->fiber->next_free = x->free_fibers;
    x->free_fibers = t->fiber;
    t->fiber = NULL;
  }
}

static bool run_block(exec *x, unsigned bx, unsigned by, unsigned bz) {
  const tg_emu_launch *L = x->L;
  tg_emu_block *b = &x->block;
  const int n = (int)(L->block[0] * L->block[1] * L->block[2]);
  b->idx = (tg_emu_uint3){bx, by, bz};
  b->barrier_epoch = 0;
  b->n_shared = 0;
  x->next_start = 0;
  x->exited = 0;
  x->at_barrier = 0;
  x->ready_head = x->ready_count = 0;
  x->static_shared = 0;
  x->shared_used = L->dynamic_shared;
  memset(x->shadow, 0, L->dynamic_shared * sizeof *x->shadow);
  x->dynamic = (tg_emu_region){(uintptr_t)x->arena, (uintptr_t)x->arena + L->dynamic_shared,
                               "the dynamic shared memory", TG_EMU_SHARED, NULL, x->shadow};
  if (L->dynamic_shared) x->region_list[b->n_shared++] = &x->dynamic; /* for cvta and ldmatrix */
  for (int i = 0; i < n; i++) {
    emu_thread *t = &x->threads[i];
    t->pub.idx = (tg_emu_uint3){(unsigned)i % L->block[0], (unsigned)i / L->block[0] % L->block[1],
                                (unsigned)i / (L->block[0] * L->block[1])};
    t->pub.linear = i;
    t->pub.warp = i / TG_EMU_WARP_SIZE;
    t->pub.lane = i % TG_EMU_WARP_SIZE;
    t->pub.block = b;
    t->state = UNSTARTED;
    t->fiber = NULL;
  }
  for (int w = 0; w * TG_EMU_WARP_SIZE < n; w++) {
    int lanes = n - w * TG_EMU_WARP_SIZE;
    x->warps[w] = (emu_warp){.lanes = lanes >= 32 ? 0xffffffffu : (1u << lanes) - 1};
    x->warp_epoch[w] = 0;
  }
  emu_thread *first = take_unstarted(x);
  pfiber *pf = fiber_for(x, first);
  if (!pf) {
    set_failure(x, TG_EMU_LAUNCH_FAILED, "out of memory for a fiber stack");
    return false;
  }
  tg_fiber_switch(x->host, pf->f);
  if (!x->failed && x->exited != n) {
    char pre[512], states[2048];
    launch_prefix(x, pre, sizeof pre);
    describe_deadlock(x, states, sizeof states);
    set_failure(x, TG_EMU_LAUNCH_FAILED, "%s: deadlock: no thread can go on: %s", pre, states);
  }
  if (x->failed) reset_block_fibers(x);
  return !x->failed;
}

int tg_emu_run(const tg_emu_launch *L, char *why, size_t whylen) {
  exec *x = executor();
  if (!x) {
    snprintf(why, whylen, "out of memory for the emulator's thread state");
    return TG_EMU_LAUNCH_FAILED;
  }
  if (x->L) {
    snprintf(why, whylen, "a kernel launched from inside a kernel (the emulator runs one launch at a time per thread)");
    return TG_EMU_LAUNCH_FAILED;
  }
  const unsigned n = L->block[0] * L->block[1] * L->block[2];
  if (!n || n > MAX_THREADS || L->dynamic_shared > L->shared_limit) {
    snprintf(why, whylen, "bad launch: %u threads a block (1 to %d), %zu bytes of dynamic shared memory (at most %zu)",
             n, MAX_THREADS, L->dynamic_shared, L->shared_limit);
    return TG_EMU_LAUNCH_FAILED;
  }
  x->L = L;
  x->failed = false;
  x->msg[0] = 0;
  tg_emu_block *b = &x->block;
  *b = (tg_emu_block){.dim = {L->block[0], L->block[1], L->block[2]},
                      .grid = {L->grid[0], L->grid[1], L->grid[2]},
                      .nthreads = (int)n,
                      .warp_epoch = x->warp_epoch,
                      .shared_base = (uintptr_t)x->arena,
                      .shared = x->region_list,
                      .kernel = L->kernel->name,
                      .runtime = x};
  bool ok = true;
  for (unsigned z = 0; ok && z < L->grid[2]; z++)
    for (unsigned y = 0; ok && y < L->grid[1]; y++)
      for (unsigned xx = 0; ok && xx < L->grid[0]; xx++) ok = run_block(x, xx, y, z);
  x->L = NULL;
  if (L->static_shared) *L->static_shared = x->static_shared;
  if (ok) return 0;
  snprintf(why, whylen, "%s", x->msg);
  return x->result;
}
