/* test_corpus.c: corpora of many shards (corpus.h) and the loader's orders
 * over them (dataloader.h): which files make a split, the messages for a
 * missing or damaged shard, llm.c's sequential order, shuffled shards,
 * random windows that never straddle two shards, resuming exactly across
 * shard and epoch boundaries, and counts past 2^32 tokens.
 *
 * Shards here hold consecutive ids: shard i starts at first_id(i), so a
 * token tells which shard and offset it came from. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "corpus.h"
#include "dataloader.h"
#include "tokens_file.h"

static char why[1024];
static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_corpus_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { tu_remove_tree(dir); }

/* dir/name with n ids first, first + 1, ... (mod 65536). */
static void write_shard(const char *name, size_t n, uint32_t first) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((first + i) % 65536);
  ck_assert_msg(tg_tokens_write(path, ids, n, why, sizeof why), "%s", why);
  free(ids);
}

/* Shard sizes that leave tails of several lengths for a step of 48. */
static const size_t sizes[] = {1000, 700, 1296, 97, 2049, 500}; /* 1296 = 27 x 48: no token to spare */
enum { NSHARDS = sizeof sizes / sizeof *sizes };

static uint32_t first_id(int i) { return (uint32_t)i * 10000; }

static tg_corpus *six_shards(void) {
  for (int i = 0; i < NSHARDS; i++) {
    char name[64];
    snprintf(name, sizeof name, "tiny_train_%06d.bin", i);
    write_shard(name, sizes[i], first_id(i));
  }
  tg_corpus *c = tg_corpus_open(dir, "train", "", 0, why, sizeof why);
  ck_assert_msg(c, "%s", why);
  return c;
}

/* The shard and offset a token came from. */
static void origin(int32_t id, int *shard, int64_t *off) {
  *shard = id / 10000;
  *off = id % 10000;
}

/* Draws `count` global batches of `slices` slices (one loader a slice, as
 * train.c's micro-steps and ranks) into out, [count][slices * B * T]. */
static void draw_steps(const tg_corpus *c, tg_data_order order, int64_t B, int64_t T, int slices, uint64_t seed,
                       uint64_t from, int count, int32_t *out, int32_t *tgt) {
  for (int s = 0; s < slices; s++) {
    tg_loader *l = tg_loader_new(c, order, B, T, s, slices, seed, from, why, sizeof why);
    ck_assert_msg(l, "%s", why);
    for (int k = 0; k < count; k++) {
      int64_t at = ((int64_t)k * slices + s) * B * T;
      tg_loader_next(l, out + at, tgt + at);
    }
    tg_loader_free(l);
  }
}

START_TEST(test_finds_shards_in_order) {
  tg_corpus *c = six_shards();
  ck_assert_int_eq(c->n_shards, NSHARDS);
  uint64_t total = 0;
  for (int i = 0; i < NSHARDS; i++) {
    total += sizes[i];
    ck_assert_uint_eq(c->shards[i]->n, sizes[i]);
    ck_assert_uint_eq(c->shards[i]->ids[0], first_id(i) % 65536);
  }
  ck_assert_uint_eq(c->n, total);
  ck_assert_uint_eq(c->largest, 2049);
  tg_corpus_close(c);

  /* a glob names them as well; a train.bin beside them wins */
  char pattern[256];
  snprintf(pattern, sizeof pattern, "%s/tiny_train_00000[12].bin", dir);
  c = tg_corpus_open(dir, "train", pattern, 0, why, sizeof why);
  ck_assert_msg(c && c->n_shards == 2 && c->n == 700 + 1296, "%s", why);
  tg_corpus_close(c);
  write_shard("train.bin", 33, 0);
  c = tg_corpus_open(dir, "train", "", 0, why, sizeof why);
  ck_assert_msg(c && c->n_shards == 1 && c->n == 33, "%s", why);
  tg_corpus_close(c);
}
END_TEST

START_TEST(test_bad_shards_named) {
  /* nothing there */
  ck_assert_ptr_null(tg_corpus_open(dir, "val", "", 0, why, sizeof why));
  ck_assert_msg(strstr(why, dir) && strstr(why, "*_val_*.bin"), "%s", why);
  ck_assert_ptr_null(tg_corpus_open("/nonexistent/dir", "val", "", 0, why, sizeof why));
  ck_assert_msg(strstr(why, "/nonexistent/dir"), "%s", why);
  char pattern[256];
  snprintf(pattern, sizeof pattern, "%s/nothing_*.bin", dir);
  ck_assert_ptr_null(tg_corpus_open(dir, "train", pattern, 0, why, sizeof why));
  ck_assert_msg(strstr(why, "train_files") && strstr(why, "no file matches"), "%s", why);

  /* a gap in the numbers */
  write_shard("c_val_000000.bin", 50, 0);
  write_shard("c_val_000001.bin", 50, 0);
  write_shard("c_val_000003.bin", 50, 0);
  ck_assert_ptr_null(tg_corpus_open(dir, "val", "", 0, why, sizeof why));
  ck_assert_msg(strstr(why, "shard 2 is missing") && strstr(why, "c_val_000001.bin"), "%s", why);
  write_shard("c_val_000002.bin", 50, 0);
  tg_corpus *c = tg_corpus_open(dir, "val", "", 0, why, sizeof why);
  ck_assert_msg(c && c->n_shards == 4, "%s", why);
  tg_corpus_close(c);

  /* a wrong header in one shard: that shard is named */
  char path[256];
  snprintf(path, sizeof path, "%s/c_val_000002.bin", dir);
  int fd = open(path, O_WRONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, "\x01\x02\x03\x04", 4, 0), 4);
  close(fd);
  ck_assert_ptr_null(tg_corpus_open(dir, "val", "", 0, why, sizeof why));
  ck_assert_msg(strstr(why, "c_val_000002.bin") && strstr(why, "bad magic"), "%s", why);

  /* an id beyond the vocabulary, in the third shard */
  write_shard("c_val_000002.bin", 50, 100);
  ck_assert_ptr_null(tg_corpus_open(dir, "val", "", 120, why, sizeof why));
  ck_assert_msg(strstr(why, "c_val_000002.bin") && strstr(why, "vocabulary"), "%s", why);
}
END_TEST

/* llm.c's order, checked against a plain walk over the shard sizes: each
 * step the next 3 x B x T + 1 tokens of a shard, tails skipped, epochs
 * wrapping; the slices are consecutive parts of the step. */
START_TEST(test_sequential_is_llmc_order) {
  tg_corpus *c = six_shards();
  enum { B = 2, T = 8, S = 3, STEP = S * B * T };
  /* the expected (shard, offset) of every step of two epochs */
  int want_shard[400];
  int64_t want_off[400];
  int n = 0;
  for (int e = 0; e < 2; e++)
    for (int i = 0; i < NSHARDS; i++)
      for (int64_t p = 0; p + STEP + 1 <= (int64_t)sizes[i]; p += STEP) want_shard[n] = i, want_off[n++] = p;
  ck_assert_int_lt(n, 400);
  int32_t *out = malloc((size_t)n * STEP * sizeof *out), *tgt = malloc((size_t)n * STEP * sizeof *tgt);
  draw_steps(c, TG_ORDER_SEQUENTIAL, B, T, S, 1, 0, n, out, tgt);
  for (int k = 0; k < n; k++) {
    const int32_t *x = out + (int64_t)k * STEP, *y = tgt + (int64_t)k * STEP;
    for (int64_t j = 0; j < STEP; j++) {
      int shard;
      int64_t off;
      origin(x[j], &shard, &off);
      /* row r = j / T of the step starts at r * T */
      REQUIRE(shard == want_shard[k] && off == want_off[k] + j, "step %d token %lld: shard %d offset %lld, want %d "
              "%lld", k, (long long)j, shard, (long long)off, want_shard[k], (long long)(want_off[k] + j));
      REQUIRE(y[j] == x[j] + 1, "step %d: targets are the next tokens", k);
    }
  }
  /* one loader at batch S * B sees the same tokens */
  int32_t *one = malloc((size_t)n * STEP * sizeof *one), *onet = malloc((size_t)n * STEP * sizeof *onet);
  draw_steps(c, TG_ORDER_SEQUENTIAL, S * B, T, 1, 1, 0, n, one, onet);
  ck_assert(memcmp(one, out, (size_t)n * STEP * sizeof *one) == 0);
  free(one);
  free(onet);
  free(out);
  free(tgt);
  tg_corpus_close(c);
}
END_TEST

/* Shuffled: each epoch reads every step of the sequential order once, in
 * another shard order each epoch, the same for the same seed. */
START_TEST(test_shuffled_epochs) {
  tg_corpus *c = six_shards();
  enum { B = 2, T = 8, STEP = B * T };
  uint64_t per_epoch = 0;
  for (int i = 0; i < NSHARDS; i++) per_epoch += (sizes[i] - 1) / STEP;
  int orders_differ = 0;
  int first_shards[4][NSHARDS];
  for (int e = 0; e < 4; e++) {
    int64_t seen[NSHARDS] = {0};
    int nfirst = 0, last = -1;
    tg_loader *l = tg_loader_new(c, TG_ORDER_SHUFFLED, B, T, 0, 1, 77, e * per_epoch, why, sizeof why);
    ck_assert_msg(l, "%s", why);
    for (uint64_t k = 0; k < per_epoch; k++) {
      int shard;
      uint64_t off, epoch;
      tg_loader_where(l, &shard, &off, &epoch);
      REQUIRE(epoch == (uint64_t)e, "epoch %llu, want %d", (unsigned long long)epoch, e);
      REQUIRE(off == (uint64_t)seen[shard] * STEP, "shard %d read out of order", shard);
      seen[shard]++;
      if (shard != last) {
        REQUIRE(seen[shard] == 1, "shard %d read in two runs", shard);
        first_shards[e][nfirst++] = shard;
        last = shard;
      }
      int32_t x[STEP], y[STEP];
      tg_loader_next(l, x, y);
      int s2;
      int64_t o2;
      origin(x[0], &s2, &o2);
      REQUIRE(s2 == shard && (uint64_t)o2 == off, "where() and next() disagree");
    }
    for (int i = 0; i < NSHARDS; i++) ck_assert_int_eq(seen[i], (sizes[i] - 1) / STEP);
    ck_assert_int_eq(nfirst, NSHARDS);
    if (e && memcmp(first_shards[e], first_shards[e - 1], sizeof first_shards[e])) orders_differ++;
    tg_loader_free(l);
  }
  ck_assert_int_ge(orders_differ, 2); /* 6! orders: three equal in a row would be a broken shuffle */
  tg_corpus_close(c);
}
END_TEST

/* Random windows: inside one shard each, every shard reachable. */
START_TEST(test_random_within_shards) {
  tg_corpus *c = six_shards();
  enum { B = 64, T = 96 };
  int hits[NSHARDS] = {0};
  int32_t *x = malloc(B * T * sizeof *x), *y = malloc(B * T * sizeof *y);
  int64_t off[B];
  tg_loader *l = tg_loader_new(c, TG_ORDER_RANDOM, B, T, 0, 1, 5, 0, why, sizeof why);
  ck_assert_msg(l, "%s", why);
  for (int k = 0; k < 50; k++) {
    tg_loader_offsets(c, B, T, 0, 5, (uint64_t)k, off);
    tg_loader_next(l, x, y);
    for (int b = 0; b < B; b++) {
      int shard;
      int64_t o;
      origin(x[b * T], &shard, &o);
      hits[shard]++;
      REQUIRE(o + T + 1 <= (int64_t)sizes[shard], "window at %lld runs past shard %d", (long long)o, shard);
      REQUIRE(y[b * T + T - 1] == x[b * T] + T, "window not consecutive");
      int64_t global = o;
      for (int i = 0; i < shard; i++) global += (int64_t)sizes[i];
      REQUIRE(global == off[b], "tg_loader_offsets gives %lld, the batch %lld", (long long)off[b],
              (long long)global);
    }
  }
  /* shard 3 (97 tokens) holds 1 start of 96; the others hundreds */
  for (int i = 0; i < NSHARDS; i++)
    if (i != 3) ck_assert_int_gt(hits[i], 0);
  tg_loader_free(l);
  free(x);
  free(y);
  tg_corpus_close(c);
}
END_TEST

/* A loader made at position p continues exactly where one that drew p
 * batches stopped, for every order and every p across several shard and
 * epoch boundaries. */
START_TEST(test_resume_across_shards) {
  tg_corpus *c = six_shards();
  enum { B = 2, T = 8, S = 2, STEP = S * B * T, N = 200 };
  int32_t *all = malloc(N * STEP * sizeof *all), *allt = malloc(N * STEP * sizeof *allt);
  int32_t *part = malloc(N * STEP * sizeof *part), *partt = malloc(N * STEP * sizeof *partt);
  for (tg_data_order o = TG_ORDER_RANDOM; o <= TG_ORDER_SHUFFLED; o++) {
    draw_steps(c, o, B, T, S, 9, 0, N, all, allt);
    /* steps per epoch: 31 + 21 + 40 + 3 + 64 + 15 = 174 < N */
    static const uint64_t at[] = {1, 30, 31, 32, 52, 53, 94, 95, 172, 173, 174, 199};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
      int rest = N - (int)at[i];
      draw_steps(c, o, B, T, S, 9, at[i], rest, part, partt);
      REQUIRE(!memcmp(part, all + at[i] * STEP, (size_t)rest * STEP * sizeof *part) &&
                  !memcmp(partt, allt + at[i] * STEP, (size_t)rest * STEP * sizeof *part),
              "order %s: resuming at %llu differs", tg_data_order_name(o), (unsigned long long)at[i]);
    }
  }
  free(all);
  free(allt);
  free(part);
  free(partt);
  tg_corpus_close(c);
}
END_TEST

/* A sequential step needs S x B x T + 1 tokens in one shard; the message
 * says so. */
START_TEST(test_step_too_large) {
  tg_corpus *c = six_shards();
  ck_assert(tg_loader_check(c, TG_ORDER_SEQUENTIAL, 8, 32, 0, 8, why, sizeof why)); /* 2048 + 1 <= 2049 */
  ck_assert(!tg_loader_check(c, TG_ORDER_SEQUENTIAL, 8, 32, 0, 9, why, sizeof why));
  ck_assert_msg(strstr(why, "2049 tokens in its largest shard") && strstr(why, "2305"), "%s", why);
  ck_assert(tg_loader_check(c, TG_ORDER_RANDOM, 8, 32, 0, 9, why, sizeof why));
  tg_corpus_close(c);
}
END_TEST

/* Three sparse shards of 2^31 - 1 tokens (llm.c's largest, no disk
 * written): 6.4 billion tokens, past what a 32-bit counter holds.  Marked
 * tokens near the end of the last shard come back from the step that the
 * arithmetic places there. */
START_TEST(test_past_four_billion_tokens) {
  const uint64_t n = INT32_MAX;
  tg_tokens *shards[3];
  for (int i = 0; i < 3; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/big_train_%06d.bin", dir, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    int32_t header[256] = {TG_TOKENS_MAGIC, TG_TOKENS_VERSION, INT32_MAX};
    ck_assert_int_eq(write(fd, header, sizeof header), (ssize_t)sizeof header);
    ck_assert_int_eq(ftruncate(fd, (off_t)(TG_TOKENS_HEADER_BYTES + 2 * n)), 0);
    if (i == 2) { /* ids 1..5 at the last whole step of T = 4 */
      uint16_t mark[5] = {1, 2, 3, 4, 5};
      off_t at = (off_t)(TG_TOKENS_HEADER_BYTES + 2 * (n - 1 - (n - 1) % 4 - 4));
      ck_assert_int_eq(pwrite(fd, mark, sizeof mark, at), (ssize_t)sizeof mark);
    }
    close(fd);
    shards[i] = tg_tokens_open(path, 0, why, sizeof why);
    ck_assert_msg(shards[i], "%s", why);
  }
  tg_corpus *c = tg_corpus_of("big", shards, 3);
  ck_assert_uint_eq(c->n, 3 * n);
  ck_assert(c->n > UINT32_MAX);
  uint64_t per_shard = (n - 1) / 4; /* steps of B = 1, T = 4 */
  uint64_t last = 3 * per_shard - 1;
  tg_loader *l = tg_loader_new(c, TG_ORDER_SEQUENTIAL, 1, 4, 0, 1, 1, last, why, sizeof why);
  ck_assert_msg(l, "%s", why);
  int shard;
  uint64_t off, epoch;
  tg_loader_where(l, &shard, &off, &epoch);
  ck_assert_int_eq(shard, 2);
  ck_assert_uint_eq(off, (per_shard - 1) * 4);
  ck_assert_uint_eq(epoch, 0);
  int32_t x[4], y[4];
  tg_loader_next(l, x, y);
  for (int t = 0; t < 4; t++) {
    ck_assert_int_eq(x[t], t + 1);
    ck_assert_int_eq(y[t], t + 2);
  }
  tg_loader_where(l, &shard, &off, &epoch); /* the next epoch */
  ck_assert_int_eq(shard, 0);
  ck_assert_uint_eq(off, 0);
  ck_assert_uint_eq(epoch, 1);
  tg_loader_free(l);
  /* random windows land in the third shard too: global offsets past 2^32 */
  int64_t offs[256];
  int past = 0;
  tg_loader_offsets(c, 256, 4, 0, 3, 0, offs);
  for (int b = 0; b < 256; b++) {
    ck_assert(offs[b] >= 0 && (uint64_t)offs[b] < 3 * n);
    past += (uint64_t)offs[b] > UINT32_MAX;
  }
  ck_assert_int_gt(past, 0);
  tg_corpus_close(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("corpus");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_finds_shards_in_order);
  tcase_add_test(tc, test_bad_shards_named);
  tcase_add_test(tc, test_sequential_is_llmc_order);
  tcase_add_test(tc, test_shuffled_epochs);
  tcase_add_test(tc, test_random_within_shards);
  tcase_add_test(tc, test_resume_across_shards);
  tcase_add_test(tc, test_step_too_large);
  tcase_add_test(tc, test_past_four_billion_tokens);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
