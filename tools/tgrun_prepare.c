/* tgrun_prepare.c: the command line of `tgrun prepare` (the work is
 * runtime/data/prepare.c for one text file split 90/10, and
 * runtime/data/prepare_corpus.c for a corpus of documents in shards). */
#include "tgrun_cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "diag.h"
#include "prepare.h"
#include "prepare_corpus.h"

static const char usage[] =
    "usage: tgrun prepare --tokenizer char|gpt2 --input FILE --out DIR [options]\n"
    "       tgrun prepare --tokenizer gpt2 --input DIR|FILE.jsonl|FILE... --out DIR [corpus options]\n"
    "\n"
    "One text file: tokenizes it as nanoGPT's prepare.py does: the first 90% of\n"
    "its characters become DIR/train.bin and the rest DIR/val.bin (token files in\n"
    "llm.c's format, which llm.c reads too), and DIR/tokenizer.json records the\n"
    "tokenizer so that training can turn samples back into text.\n"
    "\n"
    "A corpus of documents (a directory, several --input files, a JSON-lines file,\n"
    "or any --shard-tokens): as llm.c's dev/data/fineweb.py, every document\n"
    "preceded by <|endoftext|>, tokenized on all cores, written in shards\n"
    "DIR/NAME_val_000000.bin (the first, for validation), DIR/NAME_train_000001.bin,\n"
    "...  A directory stands for its files in name order; a FILE.jsonl holds one\n"
    "document a line (its text in a field); any other file is one document.\n"
    "\n"
    "  --tokenizer char   one token per character; the vocabulary is the distinct\n"
    "                     characters of the whole input (Tiny Shakespeare: 65)\n"
    "  --tokenizer gpt2   GPT-2's byte-level BPE (50,257 tokens)\n"
    "  --input PATH       the text, UTF-8; repeat it for several files\n"
    "  --out DIR          where to write; made if missing\n"
    "  --val-fraction X   one text file: the share of the characters kept for\n"
    "                     validation, in [0, 1) (default 0.1)\n"
    "  --gpt2-dir DIR     where GPT-2's encoder.json and vocab.bpe are (default\n"
    "                     $TG_DATA/gpt2, or ../shared/data/gpt2 when TG_DATA is unset)\n"
    "corpus options:\n"
    "  --shard-tokens N   tokens a shard (default 100000000, llm.c's)\n"
    "  --text-field NAME  the JSON field holding a document's text (default text)\n"
    "  --name NAME        the shards' prefix (default: DIR's last component)\n"
    "  --threads N        tokenizing threads (default: every core)\n"
    "  --max-shards N     stop after N shards in all; --resume goes on later\n"
    "  --resume           go on with an interrupted preparation (DIR/prepare.state)\n"
    "  --help\n"
    "\n"
    "Exit status: 0 on success, 1 for a bad input or tokenizer file, 2 for bad usage.\n";

static int usage_error(const char *fmt, const char *arg) { return tg_usage_error("tgrun prepare", fmt, arg); }

enum { MAX_INPUTS = 1 << 16 };

typedef struct args {
  tg_prepare_opts one;
  tg_corpus_opts corpus;
  const char **inputs;
  bool corpus_flag; /* an option only a corpus has */
  bool fraction_given;
} args;

static int number(const char *opt, const char *v, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end || errno || n < lo || n > INT32_MAX) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s %%s: expected a whole number in [%lld, %d]", opt, (long long)lo, INT32_MAX);
    return usage_error(msg, v);
  }
  *out = n;
  return -1;
}

/* One option with a value; returns -1 to go on, else the exit status. */
static int option(args *a, const char *opt, const char *v) {
  tg_prepare_opts *o = &a->one;
  tg_corpus_opts *c = &a->corpus;
  int64_t n = 0; /* set by number() on success; zero keeps -O3's maybe-uninitialized quiet */
  int rc = -1;
  if (!strcmp(opt, "--tokenizer")) o->tokenizer = v;
  else if (!strcmp(opt, "--out")) o->out = c->out = v;
  else if (!strcmp(opt, "--gpt2-dir")) o->gpt2_dir = c->gpt2_dir = v;
  else if (!strcmp(opt, "--text-field")) c->text_field = v, a->corpus_flag = true;
  else if (!strcmp(opt, "--name")) c->name = v, a->corpus_flag = true;
  else if (!strcmp(opt, "--input")) {
    if (c->n_inputs == MAX_INPUTS) return usage_error("%s", "more than 65536 --input: name a directory instead");
    a->inputs[c->n_inputs++] = o->input = v;
  } else if (!strcmp(opt, "--shard-tokens")) {
    if ((rc = number(opt, v, 1, &n)) < 0) c->shard_tokens = n, a->corpus_flag = true;
  } else if (!strcmp(opt, "--max-shards")) {
    if ((rc = number(opt, v, 1, &n)) < 0) c->max_shards = n, a->corpus_flag = true;
  } else if (!strcmp(opt, "--threads")) {
    if ((rc = number(opt, v, 1, &n)) < 0) c->threads = (int)n;
  } else if (!strcmp(opt, "--val-fraction")) {
    char *end;
    errno = 0;
    o->val_fraction = strtod(v, &end);
    a->fraction_given = true;
    if (end == v || *end || errno || !(o->val_fraction >= 0 && o->val_fraction < 1))
      return usage_error("--val-fraction %s: expected a number in [0, 1), e.g. 0.1", v);
  } else {
    return usage_error("unknown option '%s'", opt);
  }
  return rc;
}

/* Fills a from argv; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, args *a) {
  a->one = (tg_prepare_opts){.val_fraction = 0.1};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
      fputs(usage, stdout);
      return 0;
    }
    if (!strcmp(o, "--resume")) {
      a->corpus.resume = a->corpus_flag = true;
      continue;
    }
    if (strncmp(o, "--", 2)) return usage_error("unknown option '%s'", o);
    if (i + 1 >= argc) return usage_error("%s needs a value", o);
    int rc = option(a, o, argv[++i]);
    if (rc >= 0) return rc;
  }
  if (!a->one.tokenizer) return usage_error("%s", "--tokenizer char|gpt2 is required");
  if (strcmp(a->one.tokenizer, "char") && strcmp(a->one.tokenizer, "gpt2"))
    return usage_error("--tokenizer %s: expected char or gpt2", a->one.tokenizer);
  if (!a->corpus.n_inputs) return usage_error("%s", "--input FILE is required");
  if (!a->one.out) return usage_error("%s", "--out DIR is required");
  if (!*a->one.out) return usage_error("%s", "--out needs a directory name");
  return -1;
}

/* A corpus: several inputs, a directory, JSON lines, or a corpus option. */
static bool is_corpus(const args *a) {
  if (a->corpus_flag || a->corpus.n_inputs > 1) return true;
  const char *in = a->corpus.inputs[0];
  struct stat st;
  size_t n = strlen(in);
  return (stat(in, &st) == 0 && S_ISDIR(st.st_mode)) || (n >= 6 && !strcmp(in + n - 6, ".jsonl"));
}

int tgrun_prepare_main(int argc, char **argv) {
  args a = {0};
  a.inputs = calloc(MAX_INPUTS, sizeof *a.inputs);
  if (!a.inputs) return 1;
  a.corpus.inputs = a.inputs;
  int rc = parse_args(argc, argv, &a);
  if (rc < 0 && is_corpus(&a)) {
    if (strcmp(a.one.tokenizer, "gpt2"))
      rc = usage_error("--tokenizer %s: a corpus of documents needs gpt2, whose <|endoftext|> separates them "
                       "(char reads one text file)", a.one.tokenizer);
    else if (a.fraction_given)
      rc = usage_error("%s", "--val-fraction: a corpus keeps its first shard for validation, as llm.c does "
                             "(--shard-tokens sets its size)");
  } else if (rc < 0 && a.corpus.threads) {
    rc = usage_error("%s", "--threads: one text file is tokenized on one thread (a corpus uses several)");
  }
  char why[1024];
  why[0] = 0;
  if (rc < 0) {
    bool ok = is_corpus(&a) ? tg_prepare_corpus(&a.corpus, why, sizeof why) : tg_prepare(&a.one, why, sizeof why);
    if (!ok) fprintf(stderr, "tgrun prepare: error: %s\n", why);
    rc = ok ? 0 : 1;
  }
  free(a.inputs);
  return rc;
}
