/* stop_signals.h: SIGTERM, SIGINT and SIGUSR1 stop training after its step
 * (train.h: TG_TRAIN_STOPPED), and they reach the process on one thread of
 * its own, never on a thread that runs kernels.
 *
 * Why a thread of their own: the kernel writes a signal's frame below the
 * interrupted thread's stack pointer, and some matmul libraries' JIT code
 * points the stack pointer into the heap while it runs (oneDNN before
 * 3.11.2: its f32 GEMM kernels, uxlfoundation/oneDNN#4845).  A signal
 * handled on such a thread overwrites heap memory and the run aborts later
 * in free().  So the thread that runs training, and every thread it starts
 * (OpenMP's workers, the backend's), blocks these signals; one thread,
 * named "tg-signals", leaves them open and does nothing else. */
#ifndef TG_STOP_SIGNALS_H
#define TG_STOP_SIGNALS_H

#include <stdbool.h>
#include <stddef.h>

/* Blocks the stop signals in the calling thread, and so in every thread it
 * starts from now on, and starts the thread that receives them.  Call it
 * first in a program that trains, before anything starts a thread: a thread
 * started earlier keeps the signals open.  Calls after the first do
 * nothing.  False (why says why) where the thread cannot start; the
 * signals are then left as they were. */
bool tg_stop_signals_route(char *why, size_t whylen);

/* on: the first stop signal is recorded (tg_stop_signal), a second ends
 * the process as that signal's default action does.  off: each ends the
 * process at once, and the record is cleared.  Routes them first
 * (tg_stop_signals_route) where that was not done. */
void tg_stop_signals_catch(bool on);

/* The stop signal received while catching (0: none). */
int tg_stop_signal(void);

#endif
