/* export.c: `tgrun export` (export.h): a checkpoint as Hugging Face's
 * GPT-2 directory.
 *
 * It goes through the model rather than copying tensors by name, so that
 * what is exported is exactly what tgrun would train from the file: the
 * same loader (checkpoint.c, weights.c) with its checks, the model's
 * parameter set and shapes; only the front end runs, no pass and no
 * compiler, so it takes as long as reading and writing the file. */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "hf_export.h"
#include "model_sizes.h"
#include "weights.h"

static int run(tg_ctx *ctx, const tg_export_opts *o, tg_graph **gp, tg_weights **wp) {
  /* the file's sizes, then -D (the last of a name wins; they agree) */
  int n = 0;
  tg_define *d = tg_model_sizes(ctx, o->checkpoint, NULL, 0, o->defines, o->n_defines, 0, &n);
  tg_compile_opts co = {d, n, o->include_dirs, o->n_include_dirs};
  const char *model = o->model ? o->model : tg_sprintf(ctx->arena, "%s/gpt2.tg", TG_TRAIN_MODELS_DIR);
  *gp = tg_compile_file(ctx, model, &co);
  if (!tg_verify(ctx, *gp)) tg_bail(ctx);
  *wp = tg_ckpt_load(ctx, *gp, o->checkpoint, false, NULL);
  if (!*wp) tg_bail(ctx);
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
  jmp_buf bail;
  ctx->bail = &bail;
  int status;
  if (setjmp(bail)) status = 1;
  else status = run(ctx, o, gp, wp);
  tg_weights_free(*wp);
  if (*gp) tg_graph_free(*gp);
  free(gp);
  free(wp);
  tg_ctx_free(ctx);
  return status;
}
