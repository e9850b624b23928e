/* test_dataloader.c: random batches as nanoGPT's get_batch, keyed by
 * (seed, global batch index) so that resuming and data parallelism follow
 * from the seed.
 *
 * Most files here hold ids[i] = i, so a sequence's first token is its
 * offset and every other token tells where it came from. */
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataloader.h"
#include "rng.h"
#include "tokens_file.h"

static char why[1024];
static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_loader_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  tu_remove_tree(dir);
}

/* Writes n tokens, ids[i] = (i * mul) % 65536, as dir/name and opens it. */
static tg_tokens *one_file(const char *name, size_t n, uint32_t mul) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((i * mul) % 65536);
  ck_assert_msg(tg_tokens_write(path, ids, n, why, sizeof why), "%s", why);
  free(ids);
  tg_tokens *t = tg_tokens_open(path, 0, why, sizeof why);
  ck_assert_msg(t, "%s", why);
  return t;
}

/* The same as a corpus of that one file. */
static tg_corpus *tokens(const char *name, size_t n, uint32_t mul) {
  tg_tokens *t = one_file(name, n, mul);
  return tg_corpus_of(name, &t, 1);
}

/* Checks that idx and targets are B windows of an ids[i] = i file, each
 * starting inside [0, n - T - 1], and returns their offsets in off. */
static void check_windows(const int32_t *idx, const int32_t *targets, int64_t B, int64_t T,
                          size_t n, int64_t *off) {
  for (int64_t b = 0; b < B; b++) {
    int64_t o = idx[b * T];
    REQUIRE(o >= 0 && o <= (int64_t)n - T - 1, "offset %lld outside [0, %lld]", (long long)o,
            (long long)n - T - 1);
    for (int64_t t = 0; t < T; t++) {
      REQUIRE(idx[b * T + t] == o + t, "idx[%lld][%lld] = %d, want %lld", (long long)b,
              (long long)t, idx[b * T + t], (long long)(o + t));
      /* targets: idx shifted by one */
      REQUIRE(targets[b * T + t] == o + t + 1, "targets[%lld][%lld] = %d, want %lld", (long long)b,
              (long long)t, targets[b * T + t], (long long)(o + t + 1));
    }
    if (off) off[b] = o;
  }
}

START_TEST(test_shapes_and_targets) {
  const int64_t B = 4, T = 16;
  const size_t n = 10000;
  tg_corpus *tk = tokens("train.bin", n, 1);
  tg_loader *l = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 1337, 0, why, sizeof why);
  ck_assert_msg(l, "%s", why);
  /* One int32 past each array's end, to see that nothing writes there. */
  int32_t *idx = malloc((B * T + 1) * sizeof *idx), *tgt = malloc((B * T + 1) * sizeof *tgt);
  idx[B * T] = tgt[B * T] = -7;
  int64_t off[4], want[4];
  for (uint64_t g = 0; g < 50; g++) {
    ck_assert_uint_eq(tg_loader_position(l), g);
    tg_loader_next(l, idx, tgt);
    check_windows(idx, tgt, B, T, n, off);
    tg_loader_offsets(tk, B, T, 0, 1337, g, want);
    for (int b = 0; b < B; b++) ck_assert_int_eq(off[b], want[b]);
  }
  ck_assert_uint_eq(tg_loader_position(l), 50);
  ck_assert_int_eq(idx[B * T], -7);
  ck_assert_int_eq(tgt[B * T], -7);
  free(idx);
  free(tgt);
  tg_loader_free(l);
  tg_corpus_close(tk);
}
END_TEST

/* Tokens that are not just positions: idx and targets copy the file. */
START_TEST(test_copies_tokens) {
  const int64_t B = 3, T = 7;
  const size_t n = 500;
  tg_corpus *tk = tokens("mul.bin", n, 40503);
  tg_loader *l = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 5, 0, why, sizeof why);
  ck_assert_msg(l, "%s", why);
  int32_t idx[21], tgt[21];
  int64_t off[3];
  for (uint64_t g = 0; g < 20; g++) {
    tg_loader_next(l, idx, tgt);
    tg_loader_offsets(tk, B, T, 0, 5, g, off);
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) {
        ck_assert_int_eq(idx[b * T + t], tk->shards[0]->ids[off[b] + t]);
        ck_assert_int_eq(tgt[b * T + t], tk->shards[0]->ids[off[b] + t + 1]);
      }
  }
  tg_loader_free(l);
  tg_corpus_close(tk);
}
END_TEST

/* The offsets cover [0, n - T - 1], both ends included, uniformly: with
 * 10 starting points and 40,000 draws, Pearson's chi-square (9 degrees of
 * freedom) stays below 44.8, its 1 - 1e-6 quantile, unless the draws are
 * biased; a modulo or off-by-one error shows as a count of 0 or a chi-square
 * in the thousands. */
START_TEST(test_offsets_uniform) {
  const int64_t B = 8, T = 5;
  const size_t n = T + 10;
  tg_corpus *tk = tokens("small.bin", n, 1);
  tg_loader *l = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 99, 0, why, sizeof why);
  ck_assert_msg(l, "%s", why);
  int32_t idx[40], tgt[40];
  int64_t off[8];
  long count[10] = {0};
  const int batches = 5000;
  for (int i = 0; i < batches; i++) {
    tg_loader_next(l, idx, tgt);
    check_windows(idx, tgt, B, T, n, off);
    for (int b = 0; b < B; b++) count[off[b]]++;
  }
  double expect = batches * B / 10.0, chi2 = 0;
  for (int i = 0; i < 10; i++) chi2 += (count[i] - expect) * (count[i] - expect) / expect;
  ck_assert_msg(chi2 < 44.8, "chi-square %g over 10 offsets", chi2);
  ck_assert(count[0] > 0 && count[9] > 0);
  tg_loader_free(l);
  tg_corpus_close(tk);

  /* Exactly T + 1 tokens: one sequence, at offset 0. */
  tk = tokens("exact.bin", T + 1, 1);
  l = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 99, 0, why, sizeof why);
  ck_assert_msg(l, "%s", why);
  for (int i = 0; i < 10; i++) {
    tg_loader_next(l, idx, tgt);
    check_windows(idx, tgt, B, T, T + 1, off);
    for (int b = 0; b < B; b++) ck_assert_int_eq(off[b], 0);
  }
  tg_loader_free(l);
  tg_corpus_close(tk);
}
END_TEST

static void draw(tg_loader *l, int count, int64_t BT, int32_t *idx, int32_t *tgt) {
  for (int i = 0; i < count; i++) tg_loader_next(l, idx + i * BT, tgt + i * BT);
}

START_TEST(test_seed_determines_batches) {
  const int64_t B = 4, T = 8;
  tg_corpus *tk = tokens("train.bin", 30000, 1);
  int32_t a[10 * 32], at[10 * 32], b[10 * 32], bt[10 * 32], c[10 * 32], ct[10 * 32];
  tg_loader *la = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 42, 0, why, sizeof why);
  tg_loader *lb = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 42, 0, why, sizeof why);
  tg_loader *lc = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 43, 0, why, sizeof why);
  ck_assert(la && lb && lc);
  draw(la, 10, B * T, a, at);
  draw(lb, 10, B * T, b, bt);
  draw(lc, 10, B * T, c, ct);
  ck_assert(memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0);
  ck_assert(memcmp(a, c, sizeof a) != 0); /* another seed, other batches */
  /* Successive batches of one run differ too. */
  ck_assert(memcmp(a, a + B * T, B * T * sizeof *a) != 0);
  tg_loader_free(la);
  tg_loader_free(lb);
  tg_loader_free(lc);
  tg_corpus_close(tk);
}
END_TEST

/* A loader made at position p continues the uninterrupted sequence. */
START_TEST(test_resume) {
  const int64_t B = 3, T = 8;
  tg_corpus *tk = tokens("train.bin", 30000, 1);
  int32_t a[10 * 24], at[10 * 24], b[6 * 24], bt[6 * 24];
  tg_loader *la = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 1, 2, 7, 0, why, sizeof why);
  ck_assert_msg(la, "%s", why);
  draw(la, 10, B * T, a, at);
  tg_loader *lb = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 1, 2, 7, 4, why, sizeof why);
  ck_assert_msg(lb, "%s", why);
  ck_assert_uint_eq(tg_loader_position(lb), 4);
  draw(lb, 6, B * T, b, bt);
  ck_assert_uint_eq(tg_loader_position(lb), 10);
  ck_assert(memcmp(a + 4 * B * T, b, sizeof b) == 0);
  ck_assert(memcmp(at + 4 * B * T, bt, sizeof bt) == 0);
  tg_loader_free(la);
  tg_loader_free(lb);

  /* Positions up to 2^63 - 1 are training batches; beyond, eval streams. */
  lb = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 7, TG_LOADER_EVAL_STREAM - 1, why, sizeof why);
  ck_assert_msg(lb, "%s", why);
  tg_loader_free(lb);
  ck_assert_ptr_null(tg_loader_new(tk, TG_ORDER_RANDOM, B, T, 0, 1, 7, TG_LOADER_EVAL_STREAM, why, sizeof why));
  ck_assert_msg(strstr(why, "position"), "%s", why);
  tg_corpus_close(tk);
}
END_TEST

/* R ranks at batch B see, together, exactly the batch one rank at R * B
 * sees, each rank its own slice in rank order: for training batches and
 * evaluation batches, at several positions, grad_accum not mattering
 * since g is what keys the stream. */
START_TEST(test_ranks_partition_the_global_batch) {
  const int64_t B = 2, T = 6;
  const int R = 3;
  const size_t n = 50000;
  tg_corpus *tk = tokens("train.bin", n, 1);
  tg_loader *one = tg_loader_new(tk, TG_ORDER_RANDOM, R * B, T, 0, 1, 1337, 3, why, sizeof why);
  tg_loader *rank[3];
  for (int r = 0; r < R; r++) {
    rank[r] = tg_loader_new(tk, TG_ORDER_RANDOM, B, T, r, R, 1337, 3, why, sizeof why);
    ck_assert_msg(rank[r], "%s", why);
  }
  int32_t all[36], allt[36], part[36], partt[36];
  for (int step = 0; step < 20; step++) {
    tg_loader_next(one, all, allt);
    for (int r = 0; r < R; r++) tg_loader_next(rank[r], part + r * B * T, partt + r * B * T);
    ck_assert(memcmp(all, part, sizeof all) == 0);
    ck_assert(memcmp(allt, partt, sizeof allt) == 0);
    /* Not three copies of one slice: the ranks' offsets are drawn apart. */
    ck_assert(memcmp(part, part + B * T, B * T * sizeof *part) != 0 ||
              memcmp(part, part + 2 * B * T, B * T * sizeof *part) != 0);

    tg_loader_eval_batch(tk, TG_ORDER_RANDOM, R * B, T, 9, step, 0, 1, all, allt);
    for (int r = 0; r < R; r++)
      tg_loader_eval_batch(tk, TG_ORDER_RANDOM, B, T, 9, step, r, R, part + r * B * T, partt + r * B * T);
    ck_assert(memcmp(all, part, sizeof all) == 0);
    ck_assert(memcmp(allt, partt, sizeof allt) == 0);
  }
  for (int r = 0; r < R; r++) tg_loader_free(rank[r]);
  tg_loader_free(one);

  /* The layout the lead's equivalence test uses: 2 ranks at b, 1 at 2b. */
  int64_t off1[8], off2[8];
  tg_loader_offsets(tk, 8, T, 0, 21, 5, off1);
  tg_loader_offsets(tk, 4, T, 0, 21, 5, off2);
  tg_loader_offsets(tk, 4, T, 1, 21, 5, off2 + 4);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(off1[i], off2[i]);
  tg_corpus_close(tk);
}
END_TEST

START_TEST(test_eval_batches) {
  const int64_t B = 4, T = 8;
  const size_t n = 20000;
  tg_corpus *tk = tokens("val.bin", n, 1);
  int32_t a[32], at[32], b[32], bt[32];
  int64_t off[4];
  int same_as_train = 0;
  for (int64_t k = 0; k < 20; k++) {
    tg_loader_eval_batch(tk, TG_ORDER_RANDOM, B, T, 1337, k, 0, 1, a, at);
    check_windows(a, at, B, T, n, off);
    /* The same batch at every evaluation. */
    tg_loader_eval_batch(tk, TG_ORDER_RANDOM, B, T, 1337, k, 0, 1, b, bt);
    ck_assert(memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0);
    /* Its own stream: not training batch k of the same seed. */
    int64_t train[4];
    tg_loader_offsets(tk, B, T, 0, 1337, (uint64_t)k, train);
    same_as_train += memcmp(off, train, sizeof off) == 0;
  }
  ck_assert_int_eq(same_as_train, 0);
  /* Evaluation batches differ from one another. */
  tg_loader_eval_batch(tk, TG_ORDER_RANDOM, B, T, 1337, 0, 0, 1, a, at);
  tg_loader_eval_batch(tk, TG_ORDER_RANDOM, B, T, 1337, 1, 0, 1, b, bt);
  ck_assert(memcmp(a, b, sizeof a) != 0);
  tg_corpus_close(tk);
}
END_TEST

/* Without a file: an abort skips the fixture's teardown, which would leave
 * the temporary directory behind. */
START_TEST(test_eval_bad_arguments_abort) {
  uint16_t ids[10] = {0};
  tg_tokens tk = {.path = "val.bin", .ids = ids, .n = 10}, *shards = &tk;
  tg_corpus c = {.name = "val", .shards = &shards, .n_shards = 1, .n = 10, .largest = 10};
  int32_t idx[64], tgt[64];
  ck_assert_ptr_nonnull(freopen("/dev/null", "w", stderr)); /* the expected message */
  tg_loader_eval_batch(&c, TG_ORDER_RANDOM, 2, 16, 1, 0, 0, 1, idx, tgt); /* 10 tokens, T = 16 */
}
END_TEST

START_TEST(test_too_short) {
  tg_corpus *tk = tokens("tiny.bin", 16, 1);
  ck_assert_ptr_null(tg_loader_new(tk, TG_ORDER_RANDOM, 4, 16, 0, 1, 1, 0, why, sizeof why));
  ck_assert_msg(strstr(why, "tiny.bin") && strstr(why, "16 tokens") && strstr(why, "T + 1 = 17"),
                "%s", why);
  ck_assert(!tg_loader_check(tk, TG_ORDER_RANDOM, 4, 16, 0, 1, why, sizeof why));
  ck_assert(tg_loader_check(tk, TG_ORDER_RANDOM, 4, 15, 0, 1, why, sizeof why));
  tg_corpus_close(tk);

  tk = tokens("empty.bin", 0, 1);
  ck_assert_ptr_null(tg_loader_new(tk, TG_ORDER_RANDOM, 1, 1, 0, 1, 1, 0, why, sizeof why));
  ck_assert_msg(strstr(why, "empty.bin") && strstr(why, "0 tokens"), "%s", why);
  tg_corpus_close(tk);
}
END_TEST

START_TEST(test_bad_arguments) {
  tg_corpus *tk = tokens("train.bin", 100, 1);
  static const struct {
    int64_t B, T;
    int rank, nranks;
    const char *msg;
  } cases[] = {
      {0, 8, 0, 1, "batch size 0"},
      {4, 0, 0, 1, "sequence length 0"},
      {4, -1, 0, 1, "sequence length -1"},
      {4, 8, 0, 0, "0 ranks"},
      {4, 8, 2, 2, "rank 2"},
      {4, 8, -1, 2, "rank -1"},
      {INT64_MAX / 2, 8, 0, 4, "too large"},
      {4, INT64_MAX, 0, 1, "too large"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ck_assert_ptr_null(tg_loader_new(tk, TG_ORDER_RANDOM, cases[i].B, cases[i].T, cases[i].rank, cases[i].nranks, 1,
                                     0, why, sizeof why));
    ck_assert_msg(strstr(why, cases[i].msg), "case %zu: '%s', want '%s'", i, why, cases[i].msg);
  }
  tg_corpus_close(tk);
}
END_TEST

/* Ids at or above the vocabulary never reach the loader: the token file
 * reader refuses them when given the vocabulary size. */
START_TEST(test_vocab_checked_on_open) {
  tg_corpus *tk = tokens("v.bin", 100, 1); /* ids 0 .. 99 */
  tg_corpus_close(tk);
  char path[256];
  snprintf(path, sizeof path, "%s/v.bin", dir);
  ck_assert_ptr_null(tg_tokens_open(path, 99, why, sizeof why));
  ck_assert_msg(strstr(why, "v.bin") && strstr(why, "99"), "%s", why);
  tg_tokens *t = tg_tokens_open(path, 100, why, sizeof why);
  ck_assert_msg(t, "%s", why);
  tg_tokens_close(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("dataloader");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_shapes_and_targets);
  tcase_add_test(tc, test_copies_tokens);
  tcase_add_test(tc, test_offsets_uniform);
  tcase_add_test(tc, test_seed_determines_batches);
  tcase_add_test(tc, test_resume);
  tcase_add_test(tc, test_ranks_partition_the_global_batch);
  tcase_add_test(tc, test_eval_batches);
  tcase_add_test(tc, test_too_short);
  tcase_add_test(tc, test_bad_arguments);
  tcase_add_test(tc, test_vocab_checked_on_open);
  suite_add_tcase(s, tc);
  /* An abort ends the whole run unless each test has its own process. */
  const char *fork = getenv("CK_FORK");
  if (!fork || strcmp(fork, "no") != 0) {
    TCase *abort_tc = tcase_create("abort");
    tcase_add_test_raise_signal(abort_tc, test_eval_bad_arguments_abort, SIGABRT);
    suite_add_tcase(s, abort_tc);
  }
  return tu_run(s);
}
