/* test_cuda_emu_fiber.c: the emulated device's fibers (runtime/cuda/emu/emu_fiber.h).
 *
 * Built twice: as test_cuda_emu_fiber with the hand-written switch of this
 * machine, and as test_cuda_emu_fiber_ucontext with the ucontext fallback
 * (emu.cmake), so that both keep working.
 *
 * - Two fibers and the host pass control round in a fixed order many times,
 *   each keeping its locals (in callee-saved registers and on its stack)
 *   across switches, floating point included.
 * - Many fibers, switched among in a ring, each with a deep stack frame.
 * - A reset fiber starts its function afresh.
 * - The floating-point control state travels with the fiber: a fiber that
 *   changes the rounding mode does not change the host's. */
#include "testutil.h"

#include <fenv.h>
#include <stdint.h>
#include <string.h>

#include "emu_fiber.h"

static tg_fiber *host, *fib[64];
static int n_fib;
static int trace[4096], n_trace;

/* ---- ping-pong ------------------------------------------------------------- */

typedef struct pp {
  int id, rounds;
  tg_fiber *self, *next;
} pp;

static void pingpong(void *arg) {
  pp *p = arg;
  volatile double keep = p->id * 1.5; /* must survive the switches */
  long sum = 0;
  for (int r = 0; r < p->rounds; r++) {
    trace[n_trace++] = p->id;
    sum += r;
    tg_fiber_switch(p->self, p->next);
    ck_assert(keep == p->id * 1.5);
  }
  ck_assert_int_eq(sum, (long)p->rounds * (p->rounds - 1) / 2);
  trace[n_trace++] = -p->id;
  tg_fiber_switch_final(p->self, host);
}

START_TEST(two_fibers_take_turns) {
  host = tg_fiber_for_thread();
  ck_assert_ptr_nonnull(host);
  pp a = {1, 500, NULL, NULL}, b = {2, 500, NULL, NULL};
  a.self = tg_fiber_new(64 * 1024, pingpong, &a);
  b.self = tg_fiber_new(64 * 1024, pingpong, &b);
  ck_assert(a.self && b.self);
  a.next = b.self;
  b.next = a.self;
  n_trace = 0;
  /* a runs, switches to b, b to a, ... until a finishes its rounds and
   * goes to the host */
  tg_fiber_switch(host, a.self);
  ck_assert_int_eq(n_trace, 1001);
  for (int i = 0; i < 1000; i++) ck_assert_int_eq(trace[i], i % 2 ? 2 : 1);
  ck_assert_int_eq(trace[1000], -1);
  /* b is still waiting in its last round: let it finish */
  tg_fiber_switch(host, b.self);
  ck_assert_int_eq(trace[1001], -2);
  tg_fiber_free(a.self);
  tg_fiber_free(b.self);
  tg_fiber_free(host);
}
END_TEST

/* ---- a ring of fibers with deep frames --------------------------------------- */

static int ring_rounds;

static int deep(int depth, int x) {
  volatile char pad[1024]; /* 1 KiB a frame: 64 frames need 64 KiB of stack */
  pad[0] = (char)x;
  if (depth == 0) return pad[0];
  return deep(depth - 1, x) + (pad[0] & 1);
}

static void ring(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int r = 0; r < ring_rounds; r++) {
    ck_assert_int_eq(deep(64, id), id + 64 * (id & 1));
    trace[n_trace++] = id;
    tg_fiber_switch(fib[id], id + 1 < n_fib ? fib[id + 1] : host);
  }
  tg_fiber_switch_final(fib[id], host);
}

START_TEST(a_ring_of_fibers) {
  host = tg_fiber_for_thread();
  n_fib = 64;
  ring_rounds = 3;
  for (int i = 0; i < n_fib; i++) ck_assert_ptr_nonnull(fib[i] = tg_fiber_new(256 * 1024, ring, (void *)(intptr_t)i));
  n_trace = 0;
  for (int r = 0; r < ring_rounds; r++) tg_fiber_switch(host, fib[0]); /* each round: 0, 1, ..., 63, host */
  ck_assert_int_eq(n_trace, n_fib * ring_rounds);
  for (int i = 0; i < n_trace; i++) ck_assert_int_eq(trace[i], i % n_fib);
  for (int i = 0; i < n_fib; i++) tg_fiber_free(fib[i]);
  tg_fiber_free(host);
}
END_TEST

/* ---- reset ------------------------------------------------------------------------ */

static int starts;

static void counting(void *arg) {
  tg_fiber *self = *(tg_fiber **)arg;
  starts++;
  tg_fiber_switch(self, host); /* left here, never resumed: reset instead */
  ck_abort_msg("a reset fiber was resumed where it was left");
}

START_TEST(reset_starts_afresh) {
  host = tg_fiber_for_thread();
  tg_fiber *f = NULL;
  f = tg_fiber_new(64 * 1024, counting, &f);
  starts = 0;
  tg_fiber_switch(host, f);
  ck_assert_int_eq(starts, 1);
  for (int i = 0; i < 5; i++) {
    tg_fiber_reset(f);
    tg_fiber_switch(host, f);
  }
  ck_assert_int_eq(starts, 6);
  tg_fiber_free(f);
  tg_fiber_free(host);
}
END_TEST

/* ---- floating-point control state ------------------------------------------------- */

static void round_down(void *arg) {
  tg_fiber *self = *(tg_fiber **)arg;
  fesetround(FE_DOWNWARD);
  tg_fiber_switch(self, host);
  ck_assert_int_eq(fegetround(), FE_DOWNWARD); /* still its own mode */
  tg_fiber_switch_final(self, host);
}

START_TEST(rounding_mode_is_per_fiber) {
  host = tg_fiber_for_thread();
  tg_fiber *f = NULL;
  f = tg_fiber_new(64 * 1024, round_down, &f);
  ck_assert_int_eq(fegetround(), FE_TONEAREST);
  tg_fiber_switch(host, f);
  /* back on the host: its own mode (both switches save the control state) */
  ck_assert_int_eq(fegetround(), FE_TONEAREST);
  tg_fiber_switch(host, f);
  ck_assert_int_eq(fegetround(), FE_TONEAREST);
  tg_fiber_free(f);
  tg_fiber_free(host);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_emu_fiber");
  TCase *t = tcase_create(tg_fiber_kind());
  tcase_add_test(t, two_fibers_take_turns);
  tcase_add_test(t, a_ring_of_fibers);
  tcase_add_test(t, reset_starts_afresh);
  tcase_add_test(t, rounding_mode_is_per_fiber);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  printf("fibers: %s\n", tg_fiber_kind());
  return tu_run(suite());
}
