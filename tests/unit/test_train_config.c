/* test_train_config.c: train.cfg, read, checked and printed.
 *
 * Most tests are about refusals: a config file is typed by hand, so every
 * mistake must come back as one clear message at the right line and column,
 * and nothing may slip through as a silently wrong run. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train_config.h"

static tg_ctx *ctx;
static tg_train_config cfg;

static void setup(void) {
  ctx = tu_ctx();
  tg_train_config_defaults(&cfg);
}

static void teardown(void) {
  tg_train_config_free(&cfg);
  tu_ctx_free(ctx);
}

static bool parse(const char *text) {
  return tg_train_config_parse(ctx, "t.cfg", text, strlen(text), &cfg);
}

static void ok(const char *text) {
  ck_assert_msg(parse(text), "refused:\n%s\nwith:\n%s", text, tu_errors(ctx));
}

/* Parses text into a fresh config and checks that it fails with exactly
 * `want` (the message and its quoted line) among the errors. */
static void bad(const char *text, const char *want) {
  tg_ctx *c = tu_ctx();
  tg_train_config t;
  tg_train_config_defaults(&t);
  bool accepted = tg_train_config_parse(c, "t.cfg", text, strlen(text), &t);
  const char *errs = tu_errors(c);
  ck_assert_msg(!accepted, "accepted:\n%s", text);
  ck_assert_msg(strstr(errs, want), "for:\n%s\ngot:\n%s\nwant:\n%s", text, errs, want);
  tg_train_config_free(&t);
  tu_ctx_free(c);
}

/* Applies overrides after text, then validates; checks for `want`. */
static void bad_rule(const char *text, const char *override, const char *want) {
  tg_ctx *c = tu_ctx();
  tg_train_config t;
  tg_train_config_defaults(&t);
  ck_assert(tg_train_config_parse(c, "t.cfg", text, strlen(text), &t));
  if (override) ck_assert(tg_train_config_override(c, &t, override));
  ck_assert_msg(!tg_train_config_validate(c, &t), "validated:\n%s", text);
  const char *errs = tu_errors(c);
  ck_assert_msg(strstr(errs, want), "got:\n%s\nwant:\n%s", errs, want);
  tg_train_config_free(&t);
  tu_ctx_free(c);
}

START_TEST(test_defaults) {
  /* The values docs/train-config.md promises. */
  ck_assert_str_eq(cfg.model, "models/gpt2.tg");
  ck_assert_int_eq(cfg.n_defines, 0);
  ck_assert_str_eq(cfg.data_dir, "data/shakespeare_char");
  ck_assert_str_eq(cfg.out_dir, "out");
  ck_assert_str_eq(cfg.backend, "cpu");
  ck_assert_int_eq(cfg.batch_size, 12);
  ck_assert_int_eq(cfg.block_size, 64);
  ck_assert_int_eq(cfg.grad_accum, 1);
  ck_assert_int_eq(cfg.max_steps, 2000);
  ck_assert(cfg.learning_rate == 1e-3 && cfg.min_lr == 1e-4);
  ck_assert_int_eq(cfg.warmup_steps, 100);
  ck_assert_int_eq(cfg.lr_decay_steps, 0);
  ck_assert_int_eq(tg_train_config_decay_steps(&cfg), 2000);
  ck_assert(cfg.beta1 == 0.9 && cfg.beta2 == 0.99 && cfg.eps == 1e-8);
  ck_assert(cfg.weight_decay == 0.1 && cfg.grad_clip == 1.0);
  ck_assert_int_eq(cfg.eval_interval, 250);
  ck_assert_int_eq(cfg.eval_batches, 20);
  ck_assert_int_eq(cfg.log_interval, 1);
  ck_assert_int_eq(cfg.sample_interval, 500);
  ck_assert_str_eq(cfg.sample_prompt, "\n");
  ck_assert_int_eq(cfg.sample_tokens, 200);
  ck_assert(cfg.temperature == 0.8);
  ck_assert_int_eq(cfg.top_k, 200);
  ck_assert_int_eq(cfg.checkpoint_interval, 500);
  ck_assert(!cfg.resume);
  ck_assert_str_eq(cfg.init_from, "");
  ck_assert_int_eq(cfg.seed, 1337);
  ck_assert_int_eq(cfg.threads, 0);
  ck_assert(cfg.peak_flops == 0);
  ck_assert_str_eq(cfg.metrics_file, "metrics.jsonl");
  ck_assert(tg_train_config_validate(ctx, &cfg));
}
END_TEST

START_TEST(test_values) {
  ok("# a comment\n"
     "\n"
     "   batch_size=4   # trailing comment\n"
     "max_steps = 1e4\n"          /* an integer written as a float */
     "learning_rate = 6e-4\n"
     "min_lr = 0\n"
     "resume = true\n"
     "data_dir = data/my set \t\n" /* bare: trimmed, inner space kept */
     "out_dir = \"runs/#1\"   # '#' inside quotes is text\n"
     "sample_prompt = \"ROMEO:\\n\\t\\\"hi\\\" \\\\\"\n"
     "init_from = \"\"\n"
     "backend = ref\r\n"         /* CRLF */
     "model.n_layer = 4\n"
     "model.n_embd=128\n"
     "model.dropout = 0.5\n"
     "model.n_layer_2 = -3\n");
  ck_assert_int_eq(cfg.batch_size, 4);
  ck_assert_int_eq(cfg.max_steps, 10000);
  ck_assert(cfg.learning_rate == 6e-4 && cfg.min_lr == 0);
  ck_assert(cfg.resume);
  ck_assert_str_eq(cfg.data_dir, "data/my set");
  ck_assert_str_eq(cfg.out_dir, "runs/#1");
  ck_assert_str_eq(cfg.sample_prompt, "ROMEO:\n\t\"hi\" \\");
  ck_assert_str_eq(cfg.init_from, "");
  ck_assert_str_eq(cfg.backend, "ref");
  /* model.NAME in the order given, for the -D defines. */
  ck_assert_int_eq(cfg.n_defines, 4);
  ck_assert_str_eq(cfg.defines[0].name, "n_layer");
  ck_assert(cfg.defines[0].value == 4);
  ck_assert_int_eq(cfg.defines[0].origin.line, 13);
  ck_assert_str_eq(cfg.defines[1].name, "n_embd");
  ck_assert(cfg.defines[1].value == 128);
  ck_assert_str_eq(cfg.defines[2].name, "dropout");
  ck_assert(cfg.defines[2].value == 0.5);
  ck_assert(cfg.defines[3].value == -3);
  /* Untouched keys keep their defaults. */
  ck_assert_int_eq(cfg.block_size, 64);
  ck_assert_str_eq(tu_errors(ctx), "");
}
END_TEST

START_TEST(test_example_config) {
  ck_assert_msg(tg_train_config_load(ctx, tu_path("configs/baby_shakespeare_char.cfg"), &cfg),
                "%s", tu_errors(ctx));
  ck_assert(tg_train_config_validate(ctx, &cfg));
  ck_assert_int_eq(cfg.n_defines, 4);
  const char *names[] = {"n_layer", "n_head", "n_embd", "block_size"};
  const double values[] = {4, 4, 128, 64};
  for (int i = 0; i < 4; i++) {
    ck_assert_str_eq(cfg.defines[i].name, names[i]);
    ck_assert(cfg.defines[i].value == values[i]);
  }
  ck_assert_int_eq(cfg.batch_size, 12);
  ck_assert_int_eq(cfg.block_size, 64);
  ck_assert_int_eq(cfg.max_steps, 2000);
  ck_assert(cfg.learning_rate == 1e-3 && cfg.min_lr == 1e-4);
  ck_assert_int_eq(cfg.warmup_steps, 100);
  ck_assert_int_eq(cfg.lr_decay_steps, 0); /* follows max_steps */
  ck_assert_int_eq(tg_train_config_decay_steps(&cfg), 2000);
  ck_assert(cfg.beta2 == 0.99);
  ck_assert_int_eq(cfg.eval_interval, 250);
  ck_assert_int_eq(cfg.eval_batches, 20);
  ck_assert_str_eq(cfg.sample_prompt, "\n");
}
END_TEST

/* Prints cfg, parses the text into a fresh config, and checks both that
 * the values survive and that printing again gives the same bytes. */
static void round_trip(const tg_train_config *c) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert(tg_train_config_print(f, c));
  fclose(f);
  tg_ctx *c2 = tu_ctx();
  tg_train_config back;
  tg_train_config_defaults(&back);
  ck_assert_msg(tg_train_config_parse(c2, "printed.cfg", text, len, &back), "%s\n%s", text,
                tu_errors(c2));
  ck_assert_msg(tg_train_config_equal(c, &back), "changed by a round trip:\n%s", text);
  char *again = NULL;
  size_t len2 = 0;
  f = open_memstream(&again, &len2);
  ck_assert(tg_train_config_print(f, &back));
  fclose(f);
  ck_assert_str_eq(again, text);
  free(again);
  free(text);
  tg_train_config_free(&back);
  tu_ctx_free(c2);
}

START_TEST(test_round_trip) {
  round_trip(&cfg);
  ok("learning_rate = 3e-4\n"
     "min_lr = 0.1e-4\n"
     "beta2 = 0.95\n"
     "eps = 1e-12\n"
     "weight_decay = 0.30000000000000004\n" /* needs all 17 digits */
     "peak_flops = 312e12\n"
     "model.n_layer = 12\n"
     "model.scale = 1.2345678901234567\n"
     "model.tiny = 1e-300\n"
     "sample_prompt = \"a \\\"b\\\" \\\\c\\n\\td # e \xc3\xa9\"\n"
     "model = \"my models/m.tg\"\n"
     "init_from = \"w.safetensors\"\n"
     "seed = 9007199254740992\n"
     "resume = false\n");
  round_trip(&cfg);
  tg_train_config one;
  tg_train_config_defaults(&one);
  ck_assert(!tg_train_config_equal(&one, &cfg));
  tg_train_config_free(&one);
}
END_TEST

START_TEST(test_print_format) {
  ok("model.n_layer = 4\ngrad_clip = 1\n");
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert(tg_train_config_print(f, &cfg));
  fclose(f);
  /* model.NAME right after model; '=' aligned; floats look like floats. */
  ck_assert_ptr_nonnull(strstr(text, "# model and data\n"
                                     "model               = \"models/gpt2.tg\"\n"
                                     "model.n_layer       = 4\n"
                                     "data_dir            = \"data/shakespeare_char\"\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ngrad_clip           = 1.0\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nsample_prompt       = \"\\n\"\n"));
  ck_assert_ptr_nonnull(strstr(text, "\neps                 = 1e-08\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nresume              = false\n"));
  /* Every key, once. */
  for (int k = 0; k < TG_TRAIN_NKEYS; k++) {
    char line[64];
    snprintf(line, sizeof line, "\n%-19s = ", tg_train_config_key(k));
    const char *at = strstr(text, line);
    ck_assert_msg(at && !strstr(at + 1, line), "key %s", tg_train_config_key(k));
  }
  free(text);
}
END_TEST

START_TEST(test_messages) {
  /* The house style: place, message, the line and a caret. */
  bad("max_steps = 10\nlearning_rat = 1e-3\n",
      "t.cfg:2:1: error: unknown key 'learning_rat'; did you mean 'learning_rate'?\n"
      "    2 | learning_rat = 1e-3\n"
      "      | ^\n");
  bad("beta2 = 1\n",
      "t.cfg:1:9: error: beta2 must be in [0, 0.9999999], not 1\n"
      "    1 | beta2 = 1\n"
      "      |         ^\n");
  bad("max_steps = 100\n# again\nmax_steps = 200\n",
      "t.cfg:3:1: error: duplicate key 'max_steps' (first set at line 1)\n");
}
END_TEST

START_TEST(test_malformed) {
  bad("batch_size 12\n", "t.cfg:1:12: error: expected '=' after 'batch_size'");
  bad("batch_size\n", "t.cfg:1:11: error: expected '=' after 'batch_size'");
  bad("= 4\n", "t.cfg:1:1: error: expected 'key = value'");
  bad("  9lives = 1\n", "t.cfg:1:3: error: expected 'key = value'");
  bad("max_steps =\n", "t.cfg:1:12: error: no value for 'max_steps'\n");
  bad("init_from =   # none\n", "no value for 'init_from' (write \"\" for an empty string)");
  bad("model = \"a\" b\n", "t.cfg:1:13: error: unexpected text after the string");
  bad("model = \"abc\n", "t.cfg:1:9: error: unterminated string");
  bad("sample_prompt = \"a\\qb\"\n",
      "t.cfg:1:19: error: unknown escape '\\q' (the escapes are \\n \\t \\\" \\\\)");
  bad("sample_prompt = \"a\\\"\n", "t.cfg:1:17: error: unterminated string");
  bad("sample_prompt = a\rb\n", "control character 0x0d");
  /* Not text at all: refused before any line is read. */
  bad("max_steps = 1\n\x01\x02\n", "t.cfg:2:1: error: this is not a text file: control byte 0x01");
}
END_TEST

START_TEST(test_unknown_keys) {
  bad("learnign_rate = 1\n", "unknown key 'learnign_rate'; did you mean 'learning_rate'?");
  bad("max_step = 1\n", "unknown key 'max_step'; did you mean 'max_steps'?");
  bad("Batch_Size = 1\n", "unknown key 'Batch_Size'; did you mean 'batch_size'?");
  /* A config constant without its prefix. */
  bad("n_layer = 4\n",
      "unknown key 'n_layer' (a config constant of the model is set as 'model.n_layer')");
  bad("optim.lr = 1\n", "unknown key 'optim.lr' (only model.NAME has a dot)");
  bad("model. = 1\n", "t.cfg:1:1: error: expected a config constant's name after 'model.'");
  bad("model.a.b = 1\n", "expected a config constant's name after 'model.'");
  bad("model.B = 8\n", "model.B is set by tgrun from batch_size; set batch_size instead");
  bad("model.T = 64\n", "model.T is set by tgrun from block_size; set block_size instead");
}
END_TEST

START_TEST(test_types) {
  bad("block_size = 1.5\n", "t.cfg:1:14: error: block_size takes an integer, not '1.5'");
  bad("batch_size = \"12\"\n", "batch_size takes an integer, not a string");
  bad("batch_size = twelve\n", "batch_size takes an integer, not 'twelve'");
  bad("max_steps = 0x10\n", "max_steps takes an integer, not '0x10'");
  bad("learning_rate = fast\n", "learning_rate takes a number, not 'fast'");
  bad("learning_rate = inf\n", "learning_rate takes a number, not 'inf'");
  bad("learning_rate = nan\n", "learning_rate takes a number, not 'nan'");
  bad("learning_rate = 1e999\n", "learning_rate takes a number, not '1e999'");
  bad("learning_rate = 1e-3 2\n", "learning_rate takes a number, not '1e-3 2'");
  bad("resume = yes\n", "resume takes true or false, not 'yes'");
  bad("resume = 1\n", "resume takes true or false, not '1'");
  bad("resume = \"true\"\n", "resume takes true or false, not a string");
  bad("model.n_layer = four\n", "model.n_layer takes a number, not 'four'");
  bad("model.n_layer = \"4\"\n", "model.n_layer takes a number, not a string");
  bad("backend = cpx\n", "unknown backend 'cpx'; did you mean 'cpu'? (ref, cpu, cuda, cuda-emu)");
  bad("backend = tpu\n", "unknown backend 'tpu'; did you mean 'cpu'? (ref, cpu, cuda, cuda-emu)");
  bad("backend = vulkan\n", "unknown backend 'vulkan' (ref, cpu, cuda, cuda-emu)");
}
END_TEST

START_TEST(test_ranges) {
  bad("beta1 = -0.1\n", "beta1 must be in [0, 0.9999999], not -0.1");
  bad("beta2 = 1.0\n", "beta2 must be in [0, 0.9999999], not 1.0");
  bad("eps = 0\n", "eps must be >= 1e-30, not 0");
  bad("temperature = 0\n", "temperature must be >= 1e-30, not 0");
  bad("temperature = -1\n", "temperature must be >= 1e-30, not -1");
  bad("top_k = -1\n", "top_k must be in [0, 16777216], not -1");
  bad("learning_rate = -1e-3\n", "learning_rate must be >= 0, not -1e-3");
  bad("min_lr = -0.5\n", "min_lr must be >= 0, not -0.5");
  bad("weight_decay = -1\n", "weight_decay must be >= 0, not -1");
  bad("grad_clip = -1\n", "grad_clip must be >= 0, not -1");
  bad("batch_size = 0\n", "batch_size must be in [1, 16777216], not 0");
  bad("grad_accum = 0\n", "grad_accum must be in [1, 16777216], not 0");
  bad("max_steps = 0\n", "max_steps must be in [1, 9007199254740992], not 0");
  bad("max_steps = 1e20\n", "max_steps must be in [1, 9007199254740992], not 1e20");
  bad("warmup_steps = -1\n", "warmup_steps must be in [0, 9007199254740992], not -1");
  bad("eval_batches = 0\n", "eval_batches must be in [1, 16777216], not 0");
  bad("log_interval = 0\n", "log_interval must be in [1, 9007199254740992], not 0");
  bad("seed = -3\n", "seed must be in [0, 9007199254740992], not -3");
  bad("seed = 9007199254740993\n", "seed must be in [0, 9007199254740992], not 9007199254740993");
  bad("max_steps = 9.007199254740993e15\n", "max_steps must be in [1, 9007199254740992], not 9.007199254740993e15");
  bad_rule("resume = true\noverwrite = true\n", NULL, "set one of them");
  bad("threads = 100000\n", "threads must be in [0, 1024], not 100000");
  bad("peak_flops = -1\n", "peak_flops must be >= 0, not -1");
  bad("model = \"\"\n", "model must not be empty");
  bad("sample_prompt = \"\"\n", "sample_prompt must not be empty");
  bad("metrics_file = logs/m.jsonl\n", "metrics_file must be a file name inside out_dir, without '/'");
  bad("metrics_file = ..\n", "metrics_file must be a file name inside out_dir");
  /* The edges themselves are fine. */
  ok("beta1 = 0\nbeta2 = 0.999999\ntop_k = 0\nmin_lr = 0\nlearning_rate = 0\n"
     "grad_clip = 0\nwarmup_steps = 0\nsample_tokens = 0\neval_interval = 0\n");
}
END_TEST

START_TEST(test_every_error_reported) {
  /* One run of the parser tells about every bad line, and a good line
   * among them still takes effect. */
  const char *text = "batch_size = 0\nmax_steps = 7\nbeta2 = 2\nfoo = 1\n";
  ck_assert(!parse(text));
  ck_assert_int_eq(ctx->nerrors, 3);
  ck_assert_int_eq(cfg.max_steps, 7);
  ck_assert_int_eq(cfg.batch_size, 12);
  /* A file of garbage stops after a screenful. */
  char *junk = malloc(100 * 8 + 1);
  for (int i = 0; i < 100; i++) memcpy(junk + 8 * i, "garbage\n", 8);
  junk[800] = 0;
  tg_ctx *c = tu_ctx();
  tg_train_config t;
  tg_train_config_defaults(&t);
  ck_assert(!tg_train_config_parse(c, "junk.cfg", junk, 800, &t));
  ck_assert_int_eq(c->nerrors, 20);
  ck_assert_ptr_nonnull(strstr(tu_errors(c), "junk.cfg: note: too many errors; stopped at line 21"));
  tg_train_config_free(&t);
  tu_ctx_free(c);
  free(junk);
}
END_TEST

START_TEST(test_missing_file) {
  ck_assert(!tg_train_config_load(ctx, "/nonexistent/train.cfg", &cfg));
  ck_assert_ptr_nonnull(strstr(tu_errors(ctx), "/nonexistent/train.cfg:1:1: error: cannot open "
                                              "'/nonexistent/train.cfg': No such file or directory"));
  ck_assert_ptr_null(ctx->bail); /* left as it was */
}
END_TEST

START_TEST(test_overrides) {
  ok("max_steps = 100\nmodel.n_layer = 4\nmodel.n_head = 4\n");
  ck_assert(tg_train_config_override(ctx, &cfg, "max_steps=300"));
  ck_assert(tg_train_config_override(ctx, &cfg, "max_steps = 400")); /* the last one wins */
  ck_assert_int_eq(cfg.max_steps, 400);
  int k = 0;
  while (tg_train_config_key(k) && strcmp(tg_train_config_key(k), "max_steps")) k++;
  ck_assert_ptr_nonnull(tg_train_config_key(k));
  ck_assert(cfg.origin[k].cmdline);
  ck_assert(!cfg.origin[k - 1].cmdline);
  /* A define keeps its place; a new one goes last. */
  ck_assert(tg_train_config_override(ctx, &cfg, "model.n_layer=2"));
  ck_assert(tg_train_config_override(ctx, &cfg, "model.vocab=65"));
  ck_assert_int_eq(cfg.n_defines, 3);
  ck_assert_str_eq(cfg.defines[0].name, "n_layer");
  ck_assert(cfg.defines[0].value == 2 && cfg.defines[0].origin.cmdline);
  ck_assert_str_eq(cfg.defines[2].name, "vocab");
  /* '#' is no comment on the command line; quotes and escapes still work. */
  ck_assert(tg_train_config_override(ctx, &cfg, "sample_prompt=#1 ROMEO:"));
  ck_assert_str_eq(cfg.sample_prompt, "#1 ROMEO:");
  ck_assert(tg_train_config_override(ctx, &cfg, "sample_prompt=\"\\nJULIET:\""));
  ck_assert_str_eq(cfg.sample_prompt, "\nJULIET:");
  ck_assert(tg_train_config_validate(ctx, &cfg));
  ck_assert_str_eq(tu_errors(ctx), "");

  ck_assert(!tg_train_config_override(ctx, &cfg, "learnig_rate=1"));
  ck_assert(!tg_train_config_override(ctx, &cfg, "batch_size=abc"));
  ck_assert(!tg_train_config_override(ctx, &cfg, "max_steps"));
  ck_assert(!tg_train_config_override(ctx, &cfg, ""));
  ck_assert(!tg_train_config_override(ctx, &cfg, "sample_prompt=\x01"));
  ck_assert_str_eq(tu_errors(ctx),
                   "command line: error: unknown key 'learnig_rate'; did you mean 'learning_rate'?\n"
                   "      | learnig_rate=1\n"
                   "      | ^\n"
                   "command line: error: batch_size takes an integer, not 'abc'\n"
                   "      | batch_size=abc\n"
                   "      |            ^\n"
                   "command line: error: expected '=' after 'max_steps' (write key=value)\n"
                   "      | max_steps\n"
                   "      |          ^\n"
                   "command line: error: expected 'key=value', e.g. max_steps=100\n"
                   "      | \n"
                   "      | ^\n"
                   "command line: error: control character 0x01 in a value\n"
                   "      | sample_prompt=?\n"
                   "      |               ^\n");
  /* Failed overrides changed nothing. */
  ck_assert_int_eq(cfg.batch_size, 12);
  ck_assert_str_eq(cfg.sample_prompt, "\nJULIET:");
}
END_TEST

START_TEST(test_override_not_utf8) {
  /* found by fuzz_train_config: an override of bytes that are not UTF-8
   * was taken, and the effective config it wrote could not be read back */
  ck_assert(!tg_train_config_override(ctx, &cfg, "model=\xff\xfe.tg"));
  ck_assert_msg(strstr(tu_errors(ctx), "command line: error: invalid UTF-8 byte 0xff"), "%s", tu_errors(ctx));
  ck_assert(tg_train_config_override(ctx, &cfg, "sample_prompt=\xc3\xa9"));
  ck_assert_str_eq(cfg.sample_prompt, "\xc3\xa9");
}
END_TEST

START_TEST(test_rules_between_keys) {
  /* Reported where the later of the two values was set, with the other
   * one's place in a note. */
  bad_rule("max_steps = 50\n", NULL,
           "t.cfg:1:13: error: warmup_steps (100, the default) must not exceed max_steps (50): set "
           "warmup_steps to at most 50, or raise max_steps\n"
           "    1 | max_steps = 50\n");
  bad_rule("warmup_steps = 10\nmax_steps = 5\n", NULL,
           "t.cfg:2:13: error: warmup_steps (10) must not exceed max_steps (5): set warmup_steps to "
           "at most 5, or raise max_steps\n"
           "    2 | max_steps = 5\n"
           "      |             ^\n"
           "t.cfg:1:16: note: warmup_steps is set here\n");
  bad_rule("min_lr = 0.01\n", "learning_rate=1e-3",
           "command line: error: min_lr (0.01) must not exceed learning_rate (0.001, from the "
           "command line)\n"
           "t.cfg:1:10: note: min_lr is set here\n");
  bad_rule("warmup_steps = 100\nlr_decay_steps = 50\n", NULL,
           "t.cfg:2:18: error: lr_decay_steps (50) must be 0 (max_steps) or at least warmup_steps "
           "(100)");
  bad_rule("resume = true\ninit_from = w.safetensors\n", NULL,
           "t.cfg:2:13: error: resume = true continues from out_dir's checkpoint; it cannot also "
           "start from init_from 'w.safetensors'");
  bad_rule("batch_size = 16777216\nblock_size = 16777216\ngrad_accum = 2\n", NULL,
           "t.cfg:1:14: error: batch_size * block_size * grad_accum = 5.63e+14 tokens a step is "
           "too many (at most 2^48)");
  /* A bad value in the file is fixed by the command line: all is well. */
  tg_train_config_free(&cfg);
  tg_train_config_defaults(&cfg);
  ok("max_steps = 50\nwarmup_steps = 10\nlr_decay_steps = 10\n");
  ck_assert(tg_train_config_override(ctx, &cfg, "warmup_steps=60"));
  ck_assert(!tg_train_config_validate(ctx, &cfg));
  ck_assert(tg_train_config_override(ctx, &cfg, "max_steps=60"));
  ck_assert(tg_train_config_override(ctx, &cfg, "lr_decay_steps=0"));
  ck_assert(tg_train_config_validate(ctx, &cfg));
  ck_assert_int_eq(tg_train_config_decay_steps(&cfg), 60);
}
END_TEST

START_TEST(test_docs_name_every_key) {
  /* docs/train-config.md has a table row for every key. */
  const char *doc = tu_read("docs/train-config.md");
  for (int k = 0; k < TG_TRAIN_NKEYS; k++) {
    char row[64];
    snprintf(row, sizeof row, "\n| `%s` |", tg_train_config_key(k));
    ck_assert_msg(strstr(doc, row), "docs/train-config.md has no row for %s", tg_train_config_key(k));
  }
  ck_assert_ptr_null(tg_train_config_key(TG_TRAIN_NKEYS));
  ck_assert_ptr_nonnull(strstr(doc, "\n| `model.NAME` |"));
}
END_TEST

/* Every numeric key's documented range (docs/train-config.md's table),
 * tried at its bounds and one step beyond each: the bounds parse, the
 * values beyond are refused.  So the docs and the code cannot drift. */
static double bound_value(const char *t) {
  if (!strcmp(t, "2^53")) return 9007199254740992.0;
  if (!strcmp(t, "2^24")) return 16777216.0;
  return strtod(t, NULL);
}

static void try_text(const char *key, const char *value, bool want_ok) {
  char text[512];
  snprintf(text, sizeof text, "%s = %s\n", key, value);
  bool got = parse(text);
  ck_assert_msg(got == want_ok, "%s: %s (documented range says %s)", text, got ? "accepted" : "refused",
                want_ok ? "accept" : "refuse");
  tg_train_config_free(&cfg);
  tg_train_config_defaults(&cfg);
}

static void try_value(const char *key, double v, bool integer, bool want_ok) {
  char value[400];
  if (integer) snprintf(value, sizeof value, "%.0f", v);
  else snprintf(value, sizeof value, "%.17g", v);
  try_text(key, value, want_ok);
}

START_TEST(test_documented_ranges) {
  const char *doc = tu_read("docs/train-config.md");
  int tried = 0;
  for (int k = 0; k < TG_TRAIN_NKEYS; k++) {
    const char *key = tg_train_config_key(k);
    char row[64];
    snprintf(row, sizeof row, "\n| `%s` | ", key);
    const char *at = strstr(doc, row);
    ck_assert_msg(at, "no row for %s", key);
    at += strlen(row);
    char type[96];
    size_t n = strcspn(at, "|");
    ck_assert(n < sizeof type);
    memcpy(type, at, n);
    type[n] = 0;
    while (n && type[n - 1] == ' ') type[--n] = 0;
    bool integer = !strncmp(type, "integer", 7), real = !strncmp(type, "float", 5);
    if (!integer && !real) continue; /* strings and booleans: test_types, test_ranges */
    const char *r = type + (integer ? 7 : 5);
    double lo, hi = INFINITY;
    bool lo_open = false, hi_open = false;
    char a[32], b[32], close;
    if (sscanf(r, " in [%31[^,], %31[^])]%c", a, b, &close) == 3) {
      lo = bound_value(a), hi = bound_value(b), hi_open = close == ')';
    } else if (sscanf(r, " \xe2\x89\xa5 %31s", a) == 1) { /* ≥ */
      lo = bound_value(a);
    } else if (sscanf(r, " > %31s", a) == 1) {
      lo = bound_value(a), lo_open = true;
    } else {
      ck_abort_msg("cannot read the range '%s' of %s", type, key);
      continue;
    }
    /* one step: 1 for integers; for floats the next double */
    double below = integer ? lo - 1 : nextafter(lo, -INFINITY), above_lo = integer ? lo + 1 : nextafter(lo, INFINITY);
    try_value(key, lo, integer, !lo_open);
    try_value(key, lo_open ? above_lo : below, integer, lo_open);
    if (isfinite(hi)) {
      double beyond = integer ? hi + 1 : nextafter(hi, INFINITY);
      if (integer && hi >= 9007199254740992.0) beyond = hi * 2; /* 2^53 + 1 is no double */
      try_value(key, hi_open ? nextafter(hi, -INFINITY) : hi, integer, true);
      try_value(key, hi_open ? hi : beyond, integer, false);
      /* 2^53 + 1 written out: refused, not rounded to the 2^53 it reads as a double */
      if (integer && hi == 9007199254740992.0) try_text(key, "9007199254740993", false);
    } else {
      try_value(key, 1e300, integer, true);
      try_text(key, "1e400", false); /* beyond a double: refused, not infinity */
    }
    tried++;
  }
  ck_assert_int_ge(tried, 25);
  /* and the count of model.NAME keys: 256 are fine, 257 refused */
  char *text = malloc(300 * 24);
  size_t len = 0;
  for (int i = 0; i < 257; i++) len += (size_t)sprintf(text + len, "model.k%d = 1\n", i);
  ck_assert(!parse(text));
  ck_assert_ptr_nonnull(strstr(tu_errors(ctx), "too many model.NAME keys (at most 256)"));
  ck_assert_int_eq(cfg.n_defines, 256);
  free(text);
}
END_TEST

/* A pathological file (100 000 keys) is refused after a screenful of
 * errors, without reading on: the parser's work is bounded, not
 * quadratic in the keys (it took 32 s). */
START_TEST(test_pathological_file) {
  const char *forms[] = {"model.k%d = 1\n", "key%d = 1\n", "seed = %d\n"};
  for (int f = 0; f < 3; f++) {
    size_t cap = 100000 * 24, len = 0;
    char *text = malloc(cap);
    for (int i = 0; i < 100000; i++) len += (size_t)snprintf(text + len, cap - len, forms[f], i);
    tg_ctx *c = tu_ctx();
    tg_train_config t;
    tg_train_config_defaults(&t);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert(!tg_train_config_parse(c, "big.cfg", text, len, &t));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_msg(strstr(tu_errors(c), "too many errors; stopped at line"), "%s", tu_errors(c));
    ck_assert_int_le(t.n_defines, 256);
    printf("100000 lines of '%.*s': refused in %.3f s\n", (int)strcspn(forms[f], " "), forms[f],
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    tg_train_config_free(&t);
    tu_ctx_free(c);
    free(text);
  }
}
END_TEST

/* A UTF-8 byte-order mark before the first key is skipped (Windows
 * editors write one); one anywhere else is still an error.  A line of junk
 * megabytes long gives a message of a few hundred bytes: the key it quotes
 * is cut at 60 bytes, as the quoted line is. */
START_TEST(test_bom_and_long_junk) {
  ok("\xEF\xBB\xBFmax_steps = 10\nwarmup_steps = 1\n");
  ck_assert_int_eq(cfg.max_steps, 10);
  bad("max_steps = 10\n\xEF\xBB\xBFseed = 1\n", "t.cfg:2:1: error: expected 'key = value'");
  size_t n = 10 * 1000 * 1000;
  char *junk = malloc(n + 2);
  memset(junk, 'x', n);
  junk[n] = '\n';
  junk[n + 1] = 0;
  tg_ctx *c = tu_ctx();
  tg_train_config t;
  tg_train_config_defaults(&t);
  ck_assert(!tg_train_config_parse(c, "t.cfg", junk, n + 1, &t));
  const char *errs = tu_errors(c);
  ck_assert_msg(strlen(errs) < 1000, "a %zu-byte message", strlen(errs));
  ck_assert_msg(strstr(errs, "expected '=' after 'xxxxxxxxxx") && strstr(errs, "x...' (lines are 'key = value')"),
                "%s", errs);
  tg_train_config_free(&t);
  tu_ctx_free(c);
  free(junk);
}
END_TEST

int main(void) {
  Suite *s = suite_create("train_config");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_values);
  tcase_add_test(tc, test_example_config);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_print_format);
  tcase_add_test(tc, test_messages);
  tcase_add_test(tc, test_malformed);
  tcase_add_test(tc, test_unknown_keys);
  tcase_add_test(tc, test_types);
  tcase_add_test(tc, test_ranges);
  tcase_add_test(tc, test_every_error_reported);
  tcase_add_test(tc, test_missing_file);
  tcase_add_test(tc, test_overrides);
  tcase_add_test(tc, test_rules_between_keys);
  tcase_add_test(tc, test_override_not_utf8);
  tcase_add_test(tc, test_docs_name_every_key);
  tcase_add_test(tc, test_documented_ranges);
  tcase_add_test(tc, test_pathological_file);
  tcase_add_test(tc, test_bom_and_long_junk);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
