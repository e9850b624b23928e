/* tgrun_export.c: the command line of `tgrun export` (the work is
 * runtime/train/export.c). */
#include "tgrun_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "export.h"
#include "frontend.h"
#include "program_dir.h"

static const char usage[] =
    "usage: tgrun export CKPT --out DIR [-D NAME=VALUE ...] [--model MODEL.tg] [--tokenizer PATH] [-I DIR]\n"
    "\n"
    "Writes the weights of CKPT (a tg checkpoint, tgrun init/step output, or any\n"
    "weights file tgrun reads) as Hugging Face's GPT-2: DIR/model.safetensors (the\n"
    "parameters only, GPT2LMHeadModel's names, the true vocabulary),\n"
    "DIR/config.json (a GPT2Config), generation_config.json and the run's tokenizer\n"
    "(GPT-2 BPE: vocab.json, merges.txt; char: a tokenizers-format tokenizer.json),\n"
    "each written atomically.  transformers' AutoModelForCausalLM and AutoTokenizer\n"
    ".from_pretrained(DIR) load it as it is.  The model must be GPT-2.\n"
    "\n"
    "  --out DIR          where to write; made if missing\n"
    "  -D NAME=VALUE      a size the file does not give: n_head, for a Hugging Face\n"
    "                     file without config.json beside it (tg's own files record it)\n"
    "  --model FILE       the .tg model the weights are for (default: the one the\n"
    "                     checkpoint records, else models/gpt2.tg); it must be GPT-2\n"
    "                     (compared with models/gpt2.tg, graph by graph)\n"
    "  --tokenizer PATH   the tokenizer to export with it (default: the run's, as\n"
    "                     tgrun sample finds it: tokenizer.json or GPT-2's encoder.json\n"
    "                     and vocab.bpe beside CKPT, or the data_dir of the train.cfg\n"
    "                     beside it; none there: no tokenizer is exported)\n"
    "  -I DIR             also look for imports in DIR\n"
    "  --help\n"
    "\n"
    "Exit status: 0 on success, 1 for a bad file or a failed write, 2 for bad usage.\n";

static int usage_error(const char *fmt, const char *arg) { return tg_usage_error("tgrun export", fmt, arg); }

int tgrun_export_main(int argc, char **argv) {
  tg_export_opts o = {0};
  tg_define *defines = tg_xcalloc((size_t)argc + 1, sizeof *defines);
  char(*names)[128] = tg_xcalloc((size_t)argc + 1, sizeof *names);
  const char **incs = tg_xcalloc((size_t)argc + 64, sizeof *incs);
  int n_inc = 0, status = -1;
  for (int i = 1; i < argc && status < 0; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      status = 0;
      break;
    }
    bool takes = !strcmp(a, "--out") || !strcmp(a, "--model") || !strcmp(a, "--tokenizer") || !strcmp(a, "-D") || !strcmp(a, "-I");
    bool joined = (a[0] == '-' && (a[1] == 'D' || a[1] == 'I') && a[2]);
    if (!takes && !joined) {
      if (a[0] == '-' && a[1]) status = usage_error("unknown option '%s'", a);
      else if (o.checkpoint) status = usage_error("only one file to export, please (got another: '%s')", a);
      else o.checkpoint = a;
      continue;
    }
    if (takes && i + 1 >= argc) {
      status = usage_error("%s needs a value", a);
      break;
    }
    const char *v = joined ? a + 2 : argv[++i];
    char flag = joined ? a[1] : !strcmp(a, "-D") ? 'D' : !strcmp(a, "-I") ? 'I' : a[2];
    if (!strcmp(a, "--tokenizer")) flag = 't';
    if (flag == 'o') o.out_dir = v;
    else if (flag == 'm') o.model = v;
    else if (flag == 't') o.tokenizer = v;
    else if (flag == 'I') incs[n_inc++] = v;
    else if (!tg_define_parse(v, &defines[o.n_defines], names[o.n_defines], sizeof names[o.n_defines]))
      status = usage_error("-D %s: expected NAME=NUMBER, e.g. -D n_head=12", v);
    else o.n_defines++;
  }
  if (status < 0 && !o.checkpoint) status = usage_error("%s", "no file to export (e.g. out/ckpt.safetensors)");
  if (status < 0 && (!o.out_dir || !*o.out_dir)) status = usage_error("%s", "--out DIR is required");
  if (status < 0) {
    char *tg_path = tg_import_path(incs, &n_inc, argc + 64, tg_program_models_dir());
    o.defines = defines;
    o.include_dirs = incs;
    o.n_include_dirs = n_inc;
    status = tg_export_run(&o);
    free(tg_path);
  }
  free(defines);
  free(names);
  free(incs);
  return status;
}
