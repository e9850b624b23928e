/* emu_fiber.h: cooperative fibers for the emulated device's CUDA threads.
 *
 * Each CUDA thread of a block runs on a fiber; fibers switch only where
 * the emulator decides (barriers, warp collectives, thread exit), so a
 * switch is a plain function call that saves the callee-saved registers
 * and swaps stacks: hand-written for x86-64 and aarch64 (tens of
 * nanoseconds), ucontext elsewhere or when TG_EMU_FIBER_UCONTEXT is
 * defined (glibc's swapcontext makes a sigprocmask system call per switch,
 * far too slow for a switch per lane per shuffle).
 *
 * Stacks are mmap'ed once with a guard page below them and reused: a fiber
 * runs its function forever (the emulator's loop takes thread after thread)
 * and is only reset, never freed, when a launch abandons it.
 *
 * Under AddressSanitizer every switch is announced with
 * __sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber, so
 * that ASan knows which stack is live (and does not report the other
 * stacks' frames as overflows when it unwinds or unpoisons). */
#ifndef TG_EMU_FIBER_H
#define TG_EMU_FIBER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tg_fiber tg_fiber;

/* The host thread's own stack as a fiber, to switch away from and back to
 * (one per host thread, made on first use, freed by tg_fiber_free). */
tg_fiber *tg_fiber_for_thread(void);

/* A fiber that, when first switched to, runs fn(arg) on a stack of
 * stack_bytes (rounded up to pages).  fn must never return: it switches
 * away for good instead.  NULL when memory runs out. */
tg_fiber *tg_fiber_new(size_t stack_bytes, void (*fn)(void *), void *arg);

/* Saves the running context into `from` (which must be the running fiber)
 * and resumes `to`. Returns when something switches back to `from`. */
void tg_fiber_switch(tg_fiber *from, tg_fiber *to);

/* Like tg_fiber_switch, for a fiber that will never be resumed from where
 * it is (it will be reset first): lets ASan drop its fake stack. */
void tg_fiber_switch_final(tg_fiber *from, tg_fiber *to);

/* Makes the next switch to f start fn(arg) afresh (f must not be running). */
void tg_fiber_reset(tg_fiber *f);

void tg_fiber_free(tg_fiber *f);

/* "x86-64 assembly", "aarch64 assembly" or "ucontext". */
const char *tg_fiber_kind(void);

#endif
