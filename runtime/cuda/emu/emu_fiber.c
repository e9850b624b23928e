/* emu_fiber.c: stack switching for the emulated device's threads (emu_fiber.h).
 *
 * The switch saves the registers the C ABI says a call preserves on the
 * stack being left, stores its stack pointer, loads the other's and pops
 * the same registers: a new fiber's stack is laid out as if it had been
 * switched away from just before a small start routine, which calls
 * fn(arg).  Floating-point control state (MXCSR and the x87 control word,
 * FPCR on aarch64) is callee-saved too and travels with the fiber. */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_STACK */
#include "emu_fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(TG_EMU_FIBER_UCONTEXT) || !(defined(__x86_64__) || defined(__aarch64__))
#define USE_UCONTEXT 1
#include <ucontext.h>
#else
#define USE_UCONTEXT 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define USE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define USE_ASAN 1
#endif
#endif
#ifndef USE_ASAN
#define USE_ASAN 0
#endif

#if USE_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
#endif

struct tg_fiber {
  void *sp;               /* saved stack pointer (assembly switch) */
#if USE_UCONTEXT
  ucontext_t uc;
#endif
  char *map;              /* the mapping: a guard page, then the stack; NULL for a host thread */
  size_t map_bytes;
  const void *stack_lo;   /* the stack ASan is told about when switching here */
  size_t stack_bytes;
  void (*fn)(void *);
  void *arg;
  tg_fiber *from;         /* the fiber that switched here last */
};

/* ---- the switch -------------------------------------------------------------- */

#if !USE_UCONTEXT && defined(__x86_64__)
/* tg_fiber_swap(&from->sp, to->sp).  The frame it leaves, from the saved
 * stack pointer up: MXCSR and the x87 control word (8 bytes), r15, r14,
 * r13, r12, rbx, rbp, the return address.  tg_fiber_start is "returned to"
 * by a new fiber's first switch, with fn in r13 and its argument in r12,
 * and rsp 16-byte aligned, so the call leaves fn's frame as the ABI wants. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl tg_fiber_swap\n"
        ".hidden tg_fiber_swap\n"
        ".type tg_fiber_swap, @function\n"
        "tg_fiber_swap:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size tg_fiber_swap, .-tg_fiber_swap\n"
        ".p2align 4\n"
        ".globl tg_fiber_start\n"
        ".hidden tg_fiber_start\n"
        ".type tg_fiber_start, @function\n"
        "tg_fiber_start:\n"
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size tg_fiber_start, .-tg_fiber_start\n");

void tg_fiber_swap(void **save_sp, void *next_sp);
void tg_fiber_start(void);

/* A new fiber's first frame below top (16-byte aligned): what
 * tg_fiber_swap pops, ending with the "return" into tg_fiber_start. */
static void *initial_frame(char *top, void (*entry)(tg_fiber *), tg_fiber *f) {
  uint64_t *s = (uint64_t *)top;
  *--s = (uint64_t)(uintptr_t)tg_fiber_start; /* return address */
  *--s = 0;                                   /* rbp: ends frame-pointer chains */
  *--s = 0;                                   /* rbx */
  *--s = (uint64_t)(uintptr_t)f;              /* r12: the argument */
  *--s = (uint64_t)(uintptr_t)entry;          /* r13: the function */
  *--s = 0;                                   /* r14 */
  *--s = 0;                                   /* r15 */
  uint32_t ctl[2] = {0x1f80, 0x037f};          /* MXCSR and x87 control word at their defaults */
  *--s = 0;
  memcpy(s, ctl, sizeof ctl);
  return s;
}
#elif !USE_UCONTEXT && defined(__aarch64__)
/* The frame, from the saved sp up: x19-x28, x29 (fp), x30 (lr), d8-d15,
 * FPCR, padding: 176 bytes.  A new fiber's lr is tg_fiber_start, with its
 * argument in x19 and fn in x20. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl tg_fiber_swap\n"
        ".hidden tg_fiber_swap\n"
        ".type tg_fiber_swap, %function\n"
        "tg_fiber_swap:\n"
        "  sub sp, sp, #176\n"
        "  stp x19, x20, [sp, #0]\n"
        "  stp x21, x22, [sp, #16]\n"
        "  stp x23, x24, [sp, #32]\n"
        "  stp x25, x26, [sp, #48]\n"
        "  stp x27, x28, [sp, #64]\n"
        "  stp x29, x30, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n"
        "  stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  mrs x9, fpcr\n"
        "  str x9, [sp, #160]\n"
        "  mov x9, sp\n"
        "  str x9, [x0]\n"
        "  mov sp, x1\n"
        "  ldr x9, [sp, #160]\n"
        "  msr fpcr, x9\n"
        "  ldp x19, x20, [sp, #0]\n"
        "  ldp x21, x22, [sp, #16]\n"
        "  ldp x23, x24, [sp, #32]\n"
        "  ldp x25, x26, [sp, #48]\n"
        "  ldp x27, x28, [sp, #64]\n"
        "  ldp x29, x30, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n"
        "  ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  add sp, sp, #176\n"
        "  ret\n"
        ".size tg_fiber_swap, .-tg_fiber_swap\n"
        ".p2align 4\n"
        ".globl tg_fiber_start\n"
        ".hidden tg_fiber_start\n"
        ".type tg_fiber_start, %function\n"
        "tg_fiber_start:\n"
        "  mov x0, x19\n"
        "  blr x20\n"
        "  brk #0\n"
        ".size tg_fiber_start, .-tg_fiber_start\n");

void tg_fiber_swap(void **save_sp, void *next_sp);
void tg_fiber_start(void);

static void *initial_frame(char *top, void (*entry)(tg_fiber *), tg_fiber *f) {
  uint64_t *s = (uint64_t *)(top - 176);
  memset(s, 0, 176);
  s[0] = (uint64_t)(uintptr_t)f;              /* x19 */
  s[1] = (uint64_t)(uintptr_t)entry;          /* x20 */
  s[11] = (uint64_t)(uintptr_t)tg_fiber_start; /* x30 (lr) */
  return s;                                    /* fp (x29) and FPCR start at 0 */
}
#endif

/* ---- fibers ----------------------------------------------------------------- */

static _Thread_local tg_fiber *thread_fiber;

/* Where every fiber starts: tell ASan which stack we came from, then run
 * fn, which never returns. */
static void fiber_entry(tg_fiber *self) {
#if USE_ASAN
  tg_fiber *from = self->from;
  __sanitizer_finish_switch_fiber(NULL, &from->stack_lo, &from->stack_bytes);
#endif
  self->fn(self->arg);
  abort(); /* fn must switch away for good instead of returning */
}

#if USE_UCONTEXT
/* makecontext passes int arguments: the fiber pointer in two halves. */
static void ucontext_entry(unsigned hi, unsigned lo) {
  fiber_entry((tg_fiber *)(uintptr_t)(((uint64_t)hi << 32) | lo));
}
#endif

tg_fiber *tg_fiber_for_thread(void) {
  if (!thread_fiber) thread_fiber = calloc(1, sizeof *thread_fiber);
  return thread_fiber;
}

static void prepare(tg_fiber *f) {
  char *lo = f->map + (size_t)sysconf(_SC_PAGESIZE);
  f->stack_lo = lo;
  f->stack_bytes = (size_t)(f->map + f->map_bytes - lo);
#if USE_UCONTEXT
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = lo;
  f->uc.uc_stack.ss_size = f->stack_bytes;
  f->uc.uc_link = NULL;
  uint64_t p = (uint64_t)(uintptr_t)f;
  makecontext(&f->uc, (void (*)(void))ucontext_entry, 2, (unsigned)(p >> 32), (unsigned)p);
#else
  f->sp = initial_frame(f->map + f->map_bytes, fiber_entry, f);
#endif
}

tg_fiber *tg_fiber_new(size_t stack_bytes, void (*fn)(void *), void *arg) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t bytes = (stack_bytes + page - 1) / page * page + page; /* the guard page below */
  tg_fiber *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (map == MAP_FAILED) {
    free(f);
    return NULL;
  }
  /* a stack overflow faults here instead of writing over the next mapping */
  mprotect(map, page, PROT_NONE);
  f->map = map;
  f->map_bytes = bytes;
  f->fn = fn;
  f->arg = arg;
  prepare(f);
  return f;
}

void tg_fiber_reset(tg_fiber *f) {
  if (f->map) prepare(f);
}

void tg_fiber_free(tg_fiber *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->map_bytes);
  if (f == thread_fiber) thread_fiber = NULL;
  free(f);
}

static void switch_to(tg_fiber *from, tg_fiber *to, bool final) {
  to->from = from;
#if USE_ASAN
  void *fake = NULL;
  __sanitizer_start_switch_fiber(final ? NULL : &fake, to->stack_lo, to->stack_bytes);
#else
  (void)final;
#endif
#if USE_UCONTEXT
  swapcontext(&from->uc, &to->uc);
#else
  tg_fiber_swap(&from->sp, to->sp);
#endif
#if USE_ASAN
  /* back in `from`: learn the bounds of the stack we came from (the host
   * thread's own, the first time) */
  tg_fiber *src = from->from;
  __sanitizer_finish_switch_fiber(fake, &src->stack_lo, &src->stack_bytes);
#endif
}

void tg_fiber_switch(tg_fiber *from, tg_fiber *to) { switch_to(from, to, false); }
void tg_fiber_switch_final(tg_fiber *from, tg_fiber *to) { switch_to(from, to, true); }

const char *tg_fiber_kind(void) {
#if USE_UCONTEXT
  return "ucontext";
#elif defined(__x86_64__)
  return "x86-64 assembly";
#else
  return "aarch64 assembly";
#endif
}
