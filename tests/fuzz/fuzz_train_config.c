/* fuzz_train_config.c: the libFuzzer target for train.cfg.
 *
 * Each input is a would-be train.cfg.  When it holds a NUL byte, the part
 * before it is the file and each NUL-separated part after it is a
 * command-line KEY=VALUE override, as tgrun applies them.  Then:
 *   - tg_train_config_parse, the overrides, tg_train_config_validate,
 *     with diagnostics written to /dev/null (quoting a bad line under a
 *     caret is code that runs on bad input too);
 *   - a config that is accepted is printed (tg_train_config_print), read
 *     back, and must be equal (tg_train_config_equal) and hash the same
 *     (tg_train_config_hash): the effective config a run writes to
 *     out_dir/train.cfg must load as the same config.
 * A broken property aborts, which libFuzzer reports as a crash; after
 * every input everything is freed, so LeakSanitizer checks the error paths.
 *
 * Built two ways: with -fsanitize=fuzzer (clang) as fuzz_train_config, and
 * with replay_main.c as fuzz_train_config_replay, which any compiler builds
 * and which runs tests/fuzz/cfg_corpus under ctest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_train_config: broken: %s\n", what);
    abort();
  }
}

static FILE *devnull(void) {
  static FILE *f;
  if (!f) f = fopen("/dev/null", "w");
  return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  size_t file_len = 0;
  while (file_len < size && text[file_len]) file_len++;
  tg_ctx *ctx = tg_ctx_new(devnull());
  tg_train_config cfg;
  tg_train_config_defaults(&cfg);
  bool ok = tg_train_config_parse(ctx, "fuzz.cfg", text, file_len, &cfg);
  /* the overrides: NUL-separated, each a C string of its own */
  size_t at = file_len + 1;
  while (at < size) {
    size_t n = 0;
    while (at + n < size && text[at + n]) n++;
    char *arg = malloc(n + 1);
    if (!arg) abort();
    memcpy(arg, text + at, n);
    arg[n] = 0;
    ok = tg_train_config_override(ctx, &cfg, arg) && ok;
    free(arg);
    at += n + 1;
  }
  ok = ok && tg_train_config_validate(ctx, &cfg);
  if (ok) {
    char *printed = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&printed, &len);
    if (!f) abort();
    check(tg_train_config_print(f, &cfg), "print succeeds");
    fclose(f);
    tg_ctx *c2 = tg_ctx_new(devnull());
    tg_train_config back;
    tg_train_config_defaults(&back);
    bool ok2 = tg_train_config_parse(c2, "printed.cfg", printed, len, &back);
    if (!ok2) fprintf(stderr, "printed config:\n%s", printed);
    check(ok2, "the printed config reads back");
    check(tg_train_config_validate(c2, &back), "the printed config validates");
    check(tg_train_config_equal(&cfg, &back), "the printed config reads back equal");
    check(tg_train_config_hash(&cfg) == tg_train_config_hash(&back), "equal configs hash the same");
    tg_train_config_free(&back);
    tg_ctx_free(c2);
    free(printed);
  }
  tg_train_config_free(&cfg);
  tg_ctx_free(ctx);
  return 0;
}
