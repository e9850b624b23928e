/* fuzz_tokens.c: the libFuzzer target for token files (llm.c's format:
 * runtime/data/tokens_file.h) and the data loader that reads them.
 *
 * Each input is the bytes of a would-be train.bin.  Its first two bytes,
 * when there are more than two, are taken as the vocabulary size to check
 * against (1 to 65,536); the rest is the file, written to a temporary file
 * and opened with tg_tokens_open, which maps it.  A file that is accepted
 * is then used the way training uses it, so that a validation gap shows as
 * an out-of-bounds read under ASan, or an id out of range, rather than
 * passing unnoticed:
 *   - every id is read and must lie below the vocabulary;
 *   - the size must be exactly the header and 2 bytes an id;
 *   - when the file holds a sequence (T + 1 tokens for a small T), a data
 *     loader draws a few batches and evaluation batches from it, and
 *     every id and target must come from the file;
 *   - written again with tg_tokens_write and reopened, the file must give
 *     the same ids.
 * A broken property aborts, which libFuzzer reports as a crash.
 *
 * Built two ways: with -fsanitize=fuzzer (clang) as fuzz_tokens, and with
 * replay_main.c as fuzz_tokens_replay, which any compiler builds and which
 * runs tests/fuzz/tokens_corpus under ctest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataloader.h"
#include "tokens_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_tokens: broken: %s\n", what);
    abort();
  }
}

static const char *scratch(int which) {
  static char path[2][64];
  if (!path[which][0]) snprintf(path[which], sizeof path[which], "/tmp/tg_fuzz_tokens.%ld.%d", (long)getpid(), which);
  return path[which];
}

static void use(const tg_tokens *t, int32_t vocab) {
  for (size_t i = 0; i < t->n; i++) check(t->ids[i] < vocab, "every id is below the vocabulary");
  check(t->map_size == TG_TOKENS_HEADER_BYTES + 2 * t->n, "the size is the header and 2 bytes an id");
  enum { B = 2, T = 3 };
  if (t->n < T + 1) return;
  char why[512];
  int32_t idx[B * T], tgt[B * T];
  tg_tokens *shard = (tg_tokens *)t;
  tg_corpus c = {.name = "fuzz", .shards = &shard, .n_shards = 1, .n = t->n, .largest = t->n};
  for (int rank = 0; rank < 2; rank++) {
    tg_loader *l = tg_loader_new(&c, rank ? TG_ORDER_SEQUENTIAL : TG_ORDER_RANDOM, B, T, rank, 2, 1337, 0, why,
                                 sizeof why);
    if (!l) continue; /* too short for this many slices: refused, with a reason */
    for (int k = 0; k < 3; k++) {
      tg_loader_next(l, idx, tgt);
      for (int i = 0; i < B * T; i++) check(idx[i] >= 0 && idx[i] < vocab && tgt[i] >= 0 && tgt[i] < vocab, "batch ids");
    }
    tg_loader_free(l);
  }
  tg_loader_eval_batch(&c, TG_ORDER_RANDOM, 1, T, 1337, 0, 0, 1, idx, tgt);
  for (int i = 0; i < T; i++) check(idx[i] >= 0 && idx[i] < vocab, "eval ids");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int32_t vocab = 65536;
  if (size > 2) {
    vocab = (int32_t)(data[0] | data[1] << 8);
    if (vocab == 0) vocab = 65536;
    data += 2, size -= 2;
  }
  FILE *f = fopen(scratch(0), "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  if (fclose(f) != 0) abort();
  char why[512];
  tg_tokens *t = tg_tokens_open(scratch(0), vocab, why, sizeof why);
  if (t) {
    use(t, vocab);
    int32_t *ids = malloc(sizeof *ids * (t->n + 1));
    if (!ids) abort();
    for (size_t i = 0; i < t->n; i++) ids[i] = t->ids[i];
    check(tg_tokens_write(scratch(1), ids, t->n, why, sizeof why), "an accepted file writes again");
    free(ids);
    tg_tokens *u = tg_tokens_open(scratch(1), vocab, why, sizeof why);
    check(u && u->n == t->n && (t->n == 0 || !memcmp(u->ids, t->ids, 2 * t->n)), "written again, the same ids");
    tg_tokens_close(u);
    tg_tokens_close(t);
  } else {
    check(why[0] != 0, "a refused file says why");
  }
  unlink(scratch(0));
  unlink(scratch(1));
  return 0;
}
