/* tgrun_train.c: the command line of `tgrun train.cfg [KEY=VALUE ...]`:
 * the config file, its overrides, joining the ranks (the work is
 * runtime/train/train.c). */
#include "tgrun_cli.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "comm.h"
#include "prepare.h"
#include "program_dir.h"
#include "stop_signals.h"
#include "tgc_plan.h"
#include "tokenizer.h"
#include "train.h"
#include "train_config.h"

static const char train_usage[] =
    "usage: tgrun train.cfg [KEY=VALUE ...]\n"
    "       tgrun --nproc N train.cfg [KEY=VALUE ...]\n"
    "\n"
    "Trains as train.cfg says (docs/train-config.md: every key and its default);\n"
    "KEY=VALUE arguments override the file.  The run directory (out_dir) gets\n"
    "train.log, metrics.jsonl, loss.svg, samples.txt, checkpoints, the generated\n"
    "kernels (kernels/*.c) and the fusion report (kernels/fusion.txt).\n"
    "--nproc N runs N data-parallel ranks with mpirun; tgrun also runs as a rank\n"
    "when started by mpirun or srun itself (zero = 1|2|3 shards the optimizer\n"
    "state, the gradients, the parameters; tp = N splits each layer across N tensor\n"
    "ranks, parallel = auto lets the planner choose: docs/parallel.md).  SIGTERM, SIGINT or SIGUSR1 stop training after its step,\n"
    "with a checkpoint (resume = true continues); a second one ends it at once.\n"
    "\n"
    "Exit status: 0 on success, 1 for a bad config, model or data or a failed run,\n"
    "2 for bad usage, 75 when a signal stopped the run with its checkpoint.\n";


/* The config as loaded, overridden and validated; returns -1 to go on,
 * else the exit status. */
static int load_config(tg_ctx *ctx, int argc, char **argv, tg_train_config *cfg) {
  tg_train_config_defaults(cfg);
  jmp_buf bail;
  ctx->bail = &bail;
  int status = -1;
  if (setjmp(bail)) status = 1;
  else if (!tg_train_config_load(ctx, argv[1], cfg)) status = 1;
  else {
    for (int i = 2; i < argc && status < 0; i++)
      if (!tg_train_config_override(ctx, cfg, argv[i])) status = 2;
    if (status < 0 && !tg_train_config_validate(ctx, cfg)) status = 1;
  }
  ctx->bail = NULL;
  return status;
}

/* Several ranks each load the same train.cfg and would each print the
 * same errors, interleaved mid-line.  So each holds its messages, and one
 * allgather of the statuses decides: rank 0 reports if it failed, else
 * the first rank that did (a file that differs between machines); every
 * rank then ends with that status, the others quietly.  Returns the
 * agreed status (-1: go on). */
static int agree_on_config(int status, int rank, int nranks, const char *held, size_t held_len) {
  uint64_t *all = calloc((size_t)nranks, sizeof *all);
  if (!all) return status < 0 ? 1 : status;
  tg_comm_allgather_u64(status < 0 ? 0 : (uint64_t)status, all);
  int reporter = -1;
  for (int i = 0; i < nranks && reporter < 0; i++)
    if (all[i]) reporter = i;
  int agreed = reporter < 0 ? -1 : (int)all[reporter];
  free(all);
  if (rank == (reporter < 0 ? 0 : reporter)) {
    if (reporter > 0) fprintf(stderr, "tgrun: rank %d (rank 0 loaded its configuration):\n", rank);
    fwrite(held, 1, held_len, stderr);
  }
  return agreed;
}

/* parallel = auto: tp, zero, the micro-batch and the accumulation from
 * the planner (tgc_plan.c) for the run's ranks, keeping the step's tokens
 * (batch_size x grad_accum x ranks sequences).  Every rank plans (the same
 * compilations, the same answer); rank 0 prints the table.  Returns -1 to
 * go on, else the exit status. */
static int plan_layout(tg_train_config *cfg, int rank, int nranks) {
  if (strcmp(cfg->parallel, "auto")) return -1;
  const char *refusal = strncmp(cfg->backend, "cuda", 4) ? "plans for GPUs (backend = cuda); on the cpu and ref "
                                                            "backends set tp and zero yourself"
                        : cfg->tp != 1 || cfg->zero != 0 ? "chooses tp and zero itself: remove them, or set parallel = manual"
                                                          : NULL;
  char why[512], probe_why[600];
  /* the GPUs this run will have: their memory, and their roofline when the
   * traffic report knows the model (else an H100's) */
  tg_device_facts facts = {0};
  const tg_backend *backend = refusal ? NULL : tg_backend_find(cfg->backend);
  if (backend && !tg_backend_probe(backend, tg_comm_local_rank(), &facts, why, sizeof why)) {
    snprintf(probe_why, sizeof probe_why, "cannot ask the GPU what it is: %s", why);
    refusal = probe_why;
  }
  const tg_gpu_spec *gpu = tg_gpu_for_device(facts.name);
  tg_tokenizer *tok = refusal ? NULL : tg_prepare_load_tokenizer(cfg->data_dir, why, sizeof why);
  if (!refusal && !tok) refusal = why;
  if (refusal) {
    if (rank == 0) fprintf(stderr, "tgrun: error: %s: parallel = auto %s\n", cfg->path, refusal);
    return 1;
  }
  tg_arena *arena = tg_arena_new();
  tg_define *d = tg_alloc(arena, sizeof *d * (size_t)(cfg->n_defines + 4));
  int n = 0;
  for (int i = 0; i < cfg->n_defines; i++) d[n++] = (tg_define){cfg->defines[i].name, cfg->defines[i].value, false, "train.cfg"};
  d[n++] = (tg_define){"vocab", (double)tg_tok_vocab_size(tok), true, "the tokenizer"};
  d[n++] = (tg_define){"T", (double)cfg->block_size, true, "block_size"};
  d[n++] = (tg_define){"B", (double)(cfg->batch_size * cfg->grad_accum), true, "batch_size x grad_accum"};
  tg_tok_free(tok);
  const char *incs[1] = {tg_program_models_dir()};
  tgc_plan_opts o = {.arena = arena, .model = cfg->model, .defines = d, .n_defines = n, .include_dirs = incs,
                     .n_include_dirs = incs[0] ? 1 : 0, .devices = nranks,
                     .devices_per_node = tg_comm_local_size() > 0 ? tg_comm_local_size() : 8,
                     .device_bytes = facts.memory_bytes, .device_name = facts.name,
                     .link = tgc_plan_find_link(nranks > tg_comm_local_size() ? "ib" : "nvlink"),
                     .gpu = gpu ? gpu : tg_gpu_find("h100"),
                     .precision = tg_train_config_precision(cfg),
                     .out = rank == 0 ? stdout : NULL};
  tgc_plan_choice c;
  int status = tgc_plan_parallel(&o, &c);
  tg_arena_free(arena);
  if (status) return status;
  cfg->tp = c.tp, cfg->zero = c.zero, cfg->batch_size = c.micro_batch, cfg->grad_accum = c.accum;
  static char note[256];
  snprintf(note, sizeof note, "parallel = auto: the planner chose data %d x tensor %d, zero %d, batch_size %d x "
           "grad_accum %d (the table: tgc %s --plan-parallel --devices %d)", nranks / c.tp, c.tp, c.zero,
           c.micro_batch, c.accum, cfg->model, nranks);
  cfg->parallel_note = note;
  fflush(stdout);
  return -1;
}

int tgrun_train_main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help")) {
    fputs(train_usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  char why[1024];
  /* first, before MPI or anything else starts a thread: every thread
   * started from here on inherits the stop signals blocked */
  if (!tg_stop_signals_route(why, sizeof why)) {
    fprintf(stderr, "tgrun: error: %s\n", why);
    return 1;
  }
  int rank, nranks;
  if (!tg_comm_init(&argc, &argv, &rank, &nranks, why, sizeof why)) {
    fprintf(stderr, "tgrun: error: %s\n", why);
    return 1;
  }
  tg_ctx *ctx = tg_ctx_new(stderr);
  char *held = NULL;
  size_t held_len = 0;
  FILE *hold = nranks > 1 ? open_memstream(&held, &held_len) : NULL;
  if (hold) ctx->err = hold;
  tg_train_config cfg;
  int status = load_config(ctx, argc, argv, &cfg);
  tg_ctx_free(ctx);
  if (hold) {
    fclose(hold);
    status = agree_on_config(status, rank, nranks, held, held_len);
    free(held);
  }
  if (status < 0) status = plan_layout(&cfg, rank, nranks);
  if (status < 0) status = tg_train(&cfg, rank, nranks);
  tg_train_config_free(&cfg);
  /* a stop on a signal is agreed by every rank: they end together */
  if (status && status != TG_TRAIN_STOPPED && nranks > 1) {
    fflush(stderr);
    /* one rank's error must not leave the others waiting in a collective */
    exit(status);
  }
  tg_comm_finalize();
  return status;
}
