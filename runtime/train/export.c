/* export.c: `tgrun export` (export.h): a checkpoint as Hugging Face's
 * GPT-2 directory.
 *
 * It goes through the model rather than copying tensors by name, so that
 * what is exported is exactly what tgrun would train from the file: the
 * same loader (checkpoint.c, weights.c) with its checks, the model's
 * parameter set and shapes; only the front end runs, no pass and no
 * compiler, so it takes as long as reading and writing the file. */
#include "export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "file.h"
#include "hf_export.h"
#include "model_sizes.h"
#include "weights.h"
#include "program_dir.h"

/* The files the export writes into out_dir (hf_export.h). */
static const char *const written[] = {"model.safetensors", "config.json"};

/* An export must not replace what it reads: out_dir/model.safetensors
 * (or config.json) being the input itself, by any path, a link or a hard
 * link.  The same file is the same device and inode; the names are not
 * compared, since "d/./model.safetensors" and "d/model.safetensors" are one. */
static void refuse_own_input(tg_ctx *ctx, const tg_export_opts *o) {
  struct stat in, out;
  if (stat(o->checkpoint, &in) != 0) return; /* the loader says why it cannot be read */
  for (int i = 0; i < 2; i++) {
    const char *path = tg_sprintf(ctx->arena, "%s/%s", o->out_dir, written[i]);
    if (stat(path, &out) == 0 && out.st_dev == in.st_dev && out.st_ino == in.st_ino)
      tg_error(ctx, (tg_loc){o->out_dir, 0, 0},
               "the export would replace its own input: %s is the file %s being exported; give --out another "
               "directory",
               path, o->checkpoint);
  }
}

/* Concurrent exports into one directory would each rename its own
 * model.safetensors and config.json into place, and could leave one's
 * weights beside the other's config.  Two renames cannot be made one
 * atomic step inside an existing directory, so an export holds an flock on
 * out_dir/.tgrun-export.lock while it writes, and a second one is refused
 * at once.  Returns the descriptor to close when done. */
static int lock_out_dir(tg_ctx *ctx, const tg_export_opts *o) {
  char why[512];
  if (!tg_make_dirs(o->out_dir, why, sizeof why)) tg_error(ctx, (tg_loc){o->out_dir, 0, 0}, "%s", why);
  const char *path = tg_sprintf(ctx->arena, "%s/.tgrun-export.lock", o->out_dir);
  bool busy;
  int fd = tg_lock_file(path, &busy, why, sizeof why);
  if (fd >= 0) return fd;
  if (busy)
    tg_error(ctx, (tg_loc){o->out_dir, 0, 0},
             "another tgrun export is writing into this directory (%s holds its lock: %s): wait for it to end, "
             "or export into another directory",
             path, why);
  tg_error(ctx, (tg_loc){o->out_dir, 0, 0}, "%s (--out must be writable)", why);
}

/* Training refuses a checkpoint with NaN or infinite weights; an export
 * of one would be a broken model that loads without a word. */
static void refuse_non_finite(tg_ctx *ctx, const tg_export_opts *o, const tg_graph *g, const tg_weights *w) {
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *p = g->nodes[k];
    if (p->op != TG_OP_param || !w->values[k]) continue;
    int64_t n = tg_type_numel(&p->type);
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(w->values[k][i]))
        tg_error(ctx, (tg_loc){o->checkpoint, 0, 0},
                 "tensor '%s' holds %s (element %lld of the model's shape): the export would write a broken model; "
                 "export an earlier checkpoint (a run directory keeps the one before in " TG_CKPT_PREV_FILE ")",
                 p->name, isnan(w->values[k][i]) ? "NaN" : "an infinity", (long long)i);
  }
}

static int run(tg_ctx *ctx, const tg_export_opts *o, tg_graph **gp, tg_weights **wp, int *lock_fd) {
  refuse_own_input(ctx, o);
  /* the file's sizes, then -D (the last of a name wins; they agree) */
  int n = 0;
  tg_define *d = tg_model_sizes(ctx, o->checkpoint, NULL, 0, o->defines, o->n_defines, 0, &n);
  tg_compile_opts co = {d, n, o->include_dirs, o->n_include_dirs};
  const char *models = tg_program_models_dir();
  const char *model = o->model ? o->model : tg_sprintf(ctx->arena, "%s/gpt2.tg", models ? models : "models");
  *gp = tg_compile_file(ctx, model, &co);
  if (!tg_verify(ctx, *gp)) tg_bail(ctx);
  *wp = tg_ckpt_load(ctx, *gp, o->checkpoint, false, NULL);
  if (!*wp) tg_bail(ctx);
  refuse_non_finite(ctx, o, *gp, *wp);
  *lock_fd = lock_out_dir(ctx, o);
  char why[1024];
  if (!tg_hf_export(o->out_dir, *gp, (*wp)->values, why, sizeof why))
    tg_error(ctx, (tg_loc){o->out_dir, 0, 0}, "%s", why);
  int64_t params = 0;
  int tensors = 0;
  for (int i = 0; i < (*gp)->n_nodes; i++)
    if ((*gp)->nodes[i]->op == TG_OP_param) {
      tg_type ft;
      tg_file_type(*gp, &(*gp)->nodes[i]->type, &ft);
      params += tg_type_numel(&ft);
      tensors++;
    }
  printf("wrote %s/model.safetensors (%d tensors, %lld parameters) and %s/config.json: GPT-2 for Hugging Face\n",
         o->out_dir, tensors, (long long)params, o->out_dir);
  return 0;
}

int tg_export_run(const tg_export_opts *o) {
  tg_ctx *ctx = tg_ctx_new(stderr);
  /* what the run makes, freed after an error's longjmp too */
  tg_graph **gp = tg_xcalloc(1, sizeof *gp);
  tg_weights **wp = tg_xcalloc(1, sizeof *wp);
  int *lock_fd = tg_xcalloc(1, sizeof *lock_fd);
  *lock_fd = -1;
  jmp_buf bail;
  ctx->bail = &bail;
  int status;
  if (setjmp(bail)) status = 1;
  else status = run(ctx, o, gp, wp, lock_fd);
  if (*lock_fd >= 0) close(*lock_fd); /* releases the lock; the file stays, harmlessly */
  free(lock_fd);
  tg_weights_free(*wp);
  if (*gp) tg_graph_free(*gp);
  free(gp);
  free(wp);
  tg_ctx_free(ctx);
  return status;
}
