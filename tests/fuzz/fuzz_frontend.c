/* fuzz_frontend.c: the libFuzzer target for everything tgc does to its input.
 *
 * Each input is one file that tgc might be handed:
 *   - if it starts with "# tg IR " it is IR text, as tgc decides from the
 *     bytes too: checked as text and read back (ir/read.c);
 *   - otherwise it is .tg source: checked, parsed (Flex/Bison), elaborated
 *     with models/ on the import path (so `import "std.tg"` finds the real
 *     standard blocks).
 * Either way the graph is then verified and, if it verifies, written in
 * each of tgc's output forms (IR text, Graphviz, --stats).
 * Errors are the expected outcome for most inputs: they longjmp back here
 * through ctx->bail.  They are written, like everything else, to /dev/null:
 * not silenced with ctx->err = NULL, because printing a diagnostic (quoting
 * the offending line of arbitrary bytes under a caret) is code that runs on
 * bad input too, and must be fuzzed with the rest.  What the fuzzer
 * looks for is everything else: a sanitizer report, a crash, a leak, an
 * input that runs too long or eats too much memory.
 *
 * Built two ways (CMakeLists.txt): with -fsanitize=fuzzer as `fuzz_frontend`
 * (needs clang), and with replay_main.c as `fuzz_frontend_replay`, which any
 * compiler builds and ctest runs over tests/fuzz/corpus. */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The printers and the diagnostics must run, but their text is of no
 * interest; open the sink once rather than per input. */
static FILE *null_sink(void) {
  static FILE *sink;
  if (!sink) sink = fopen("/dev/null", "w");
  return sink;
}

/* Verifies, prints and frees a graph that was read or compiled: what tgc
 * does with it, for each of its --emit choices. */
static void check_graph(tg_ctx *ctx, tg_graph *g) {
  FILE *out = null_sink();
  if (tg_verify(ctx, g) && out) {
    tg_print_ir(out, g);
    tg_print_dot(out, g);
    tg_print_stats(out, g);
  }
  tg_graph_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char magic[] = "# tg IR ";
  static const char *const include_dirs[] = {TG_SOURCE_DIR "/models"};
  tg_ctx *ctx = tg_ctx_new(null_sink()); /* NULL if /dev/null fails: silent */
  /* Below tgc's defaults (base/diag.c), and still far above anything 4 KiB of
   * honest source builds, but small enough that a runaway loop such as
   * `for i in 0 .. 1000000000 { x = x + 1 }` fails by its limit in well under
   * a second, even under ASan, instead of tripping libFuzzer's per-input
   * timeout and being reported as a hang.  (That the elaborator honours its
   * limits at all is one of the things the fuzzer checks.) */
  ctx->node_limit = 100000;
  ctx->step_limit = 2000000;

  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail) == 0) {
    const char *text = (const char *)data;
    if (size >= sizeof magic - 1 && memcmp(data, magic, sizeof magic - 1) == 0) {
      const tg_source *src = tg_source_add(ctx, "fuzz.tgir", text, size);
      tg_source_check_text(ctx, src);
      check_graph(ctx, tg_read_ir(ctx, src));
    } else {
      tg_compile_opts opts = {.include_dirs = include_dirs, .n_include_dirs = 1};
      const tg_source *src = tg_source_add(ctx, "fuzz.tg", text, size);
      check_graph(ctx, tg_compile_source(ctx, src, &opts));
    }
  }
  /* Both paths end here: every error frees its own malloc'ed scratch before
   * bailing, and the arena takes everything else. */
  tg_ctx_free(ctx);
  return 0;
}
