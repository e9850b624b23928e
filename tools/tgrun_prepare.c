/* tgrun_prepare.c: the command line of `tgrun prepare` (the work is
 * runtime/data/prepare.c). */
#include "tgrun_cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "prepare.h"

static const char usage[] =
    "usage: tgrun prepare --tokenizer char|gpt2 --input FILE --out DIR [options]\n"
    "\n"
    "Tokenizes a UTF-8 text file for training, as nanoGPT's prepare.py does: the\n"
    "first 90% of its characters become DIR/train.bin and the rest DIR/val.bin\n"
    "(token files in llm.c's format, which llm.c reads too), and DIR/tokenizer.json\n"
    "records the tokenizer so that training can turn samples back into text.\n"
    "\n"
    "  --tokenizer char   one token per character; the vocabulary is the distinct\n"
    "                     characters of the whole input (Tiny Shakespeare: 65)\n"
    "  --tokenizer gpt2   GPT-2's byte-level BPE (50,257 tokens)\n"
    "  --input FILE       the text, UTF-8\n"
    "  --out DIR          where to write; made if missing\n"
    "  --val-fraction X   the share of the characters kept for validation, in [0, 1)\n"
    "                     (default 0.1); the split is the same for both tokenizers\n"
    "  --gpt2-dir DIR     where GPT-2's encoder.json and vocab.bpe are (default\n"
    "                     $TG_DATA/gpt2, or ../shared/data/gpt2 when TG_DATA is unset)\n"
    "  --help\n"
    "\n"
    "Exit status: 0 on success, 1 for a bad input or tokenizer file, 2 for bad usage.\n";

static int usage_error(const char *fmt, const char *arg) { return tg_usage_error("tgrun prepare", fmt, arg); }

/* Fills o from argv; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, tg_prepare_opts *o) {
  *o = (tg_prepare_opts){.val_fraction = 0.1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 0;
    }
    const char **slot = !strcmp(a, "--tokenizer")  ? &o->tokenizer
                        : !strcmp(a, "--input")    ? &o->input
                        : !strcmp(a, "--out")      ? &o->out
                        : !strcmp(a, "--gpt2-dir") ? &o->gpt2_dir
                                                   : NULL;
    bool fraction = !strcmp(a, "--val-fraction");
    if (!slot && !fraction) return usage_error("unknown option '%s'", a);
    if (i + 1 >= argc) return usage_error("%s needs a value", a);
    const char *v = argv[++i];
    if (slot) {
      *slot = v;
      continue;
    }
    char *end;
    errno = 0;
    o->val_fraction = strtod(v, &end);
    if (end == v || *end || errno || !(o->val_fraction >= 0 && o->val_fraction < 1))
      return usage_error("--val-fraction %s: expected a number in [0, 1), e.g. 0.1", v);
  }
  if (!o->tokenizer) return usage_error("%s", "--tokenizer char|gpt2 is required");
  if (strcmp(o->tokenizer, "char") && strcmp(o->tokenizer, "gpt2"))
    return usage_error("--tokenizer %s: expected char or gpt2", o->tokenizer);
  if (!o->input) return usage_error("%s", "--input FILE is required");
  if (!o->out) return usage_error("%s", "--out DIR is required");
  if (!*o->out) return usage_error("%s", "--out needs a directory name");
  return -1;
}

int tgrun_prepare_main(int argc, char **argv) {
  tg_prepare_opts o;
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) return rc;
  char why[1024];
  why[0] = 0;
  if (tg_prepare(&o, why, sizeof why)) return 0;
  fprintf(stderr, "tgrun prepare: error: %s\n", why);
  return 1;
}
