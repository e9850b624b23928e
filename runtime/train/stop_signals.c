/* stop_signals.c: the stop signals on a thread of their own
 * (stop_signals.h says why). */
#define _GNU_SOURCE /* pthread_setname_np */
#include "stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const int stop_signals[] = {SIGTERM, SIGINT, SIGUSR1};

/* The first stop signal received while catching (0: none).  Written by the
 * handler on the signals' thread, read by the training loop on another:
 * an atomic, which lock-free is safe in a handler too. */
static atomic_int received;

static void stop_set(sigset_t *set) {
  sigemptyset(set);
  for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++) sigaddset(set, stop_signals[i]);
}

static void on_stop_signal(int sig) {
  int none = 0;
  if (atomic_compare_exchange_strong(&received, &none, sig)) return;
  /* the second: at once, as the signal's default would.  This thread has
   * the signal open, so raise() delivers it here, now. */
  signal(sig, SIG_DFL);
  raise(sig);
}

/* The signals' thread: opens them, then only waits for them.  Its handler
 * runs on its own stack, which nothing else uses. */
static void *receive_signals(void *unused) {
  (void)unused;
  sigset_t set;
  stop_set(&set);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  for (;;) pause();
  return NULL;
}

static pthread_mutex_t route_lock = PTHREAD_MUTEX_INITIALIZER;
static bool routed;

bool tg_stop_signals_route(char *why, size_t whylen) {
  pthread_mutex_lock(&route_lock);
  bool ok = true;
  if (!routed) {
    sigset_t set, old;
    stop_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    /* started with the signals blocked (inherited), it opens them itself:
     * no moment where neither thread takes them and they are lost */
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&thread, &attr, receive_signals, NULL);
    pthread_attr_destroy(&attr);
    if (err) {
      pthread_sigmask(SIG_SETMASK, &old, NULL);
      snprintf(why, whylen, "cannot start the thread that receives SIGTERM, SIGINT and SIGUSR1: %s", strerror(err));
      ok = false;
    } else {
      pthread_setname_np(thread, "tg-signals");
      routed = true;
    }
  }
  pthread_mutex_unlock(&route_lock);
  return ok;
}

void tg_stop_signals_catch(bool on) {
  char why[160];
  /* a program that did not route them (a test calling tg_train) still
   * gets them off its kernels' threads from here on; where even that
   * fails they are handled wherever they land, as before */
  if (on && !tg_stop_signals_route(why, sizeof why)) fprintf(stderr, "tgrun: warning: %s\n", why);
  for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_stop_signal : SIG_DFL;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(stop_signals[i], &sa, NULL);
  }
  if (!on) atomic_store(&received, 0);
}

int tg_stop_signal(void) { return atomic_load(&received); }
