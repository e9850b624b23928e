/* test_host_cores.c: the threads a rank starts (base/host_cores.c).  The
 * machine's CPUs divided among its ranks by default, at least one; what
 * is asked for is kept, and flagged when it and the other ranks' exceed
 * the CPUs; a process its launcher bound to some CPUs (set here with
 * sched_setaffinity, where the machine has more than one) gets those. */
#define _GNU_SOURCE
#include <check.h>
#include <sched.h>
#include <unistd.h>

#include "host_cores.h"

START_TEST(test_machine_divided_among_its_ranks) {
  int cores = tg_host_cores();
  ck_assert_int_ge(cores, 1);
  bool over = true;
  if (cores == (int)sysconf(_SC_NPROCESSORS_ONLN)) { /* not bound by whoever runs the test */
    ck_assert_int_eq(tg_threads_per_rank(0, 1, &over), cores);
    ck_assert(!over);
    ck_assert_int_eq(tg_threads_per_rank(0, 2, &over), cores / 2 > 1 ? cores / 2 : 1);
    ck_assert_int_eq(tg_threads_per_rank(0, 4 * cores, &over), 1); /* at least one */
    ck_assert_int_eq(tg_threads_per_rank(cores, 2, &over), cores);   /* asked: kept */
    ck_assert(over);                                                 /* 2 x cores */
    ck_assert_int_eq(tg_threads_per_rank(1, cores, &over), 1);
    ck_assert(!over);
  }
  ck_assert_int_eq(tg_threads_per_rank(3, 1, NULL), 3);
}
END_TEST

START_TEST(test_bound_rank_keeps_its_cpus) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return; /* nothing to bind to less */
  cpu_set_t one;
  CPU_ZERO(&one);
  cpu_set_t was;
  ck_assert_int_eq(sched_getaffinity(0, sizeof was, &was), 0);
  int first = 0;
  while (!CPU_ISSET(first, &was)) first++;
  CPU_SET(first, &one);
  ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
  bool over = true;
  ck_assert_int_eq(tg_host_cores(), 1);
  /* bound: the launcher divided the machine; the ranks' count does not divide again */
  ck_assert_int_eq(tg_threads_per_rank(0, 2, &over), 1);
  ck_assert(!over);
  ck_assert_int_eq(tg_threads_per_rank(2, 2, &over), 2);
  ck_assert(over);
  ck_assert_int_eq(sched_setaffinity(0, sizeof was, &was), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("host_cores");
  TCase *t = tcase_create("core");
  tcase_add_test(t, test_machine_divided_among_its_ranks);
  tcase_add_test(t, test_bound_rank_keeps_its_cpus);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
