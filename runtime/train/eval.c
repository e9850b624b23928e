/* eval.c: `tgrun eval` (eval.h).
 *
 * Order, so that every mistake is reported before anything is compiled
 * for a device: the weights file's metadata (a checkpoint names its
 * model), the tokenizer (GPT-2's BPE, or an error), the HellaSwag file,
 * read and encoded whole (a bad line is an error at its line), the model
 * compiled at B = 4 and T = the longest example (its `T <= block_size`
 * assert refuses an example longer than the context, naming where T came
 * from), its vocabulary against the tokenizer's, the weights against the
 * graph; then the forward is compiled for the backend and every example
 * scored (hellaswag.c). */
#include "eval.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "backends.h"
#include "checkpoint.h"
#include "generate.h"
#include "hellaswag.h"
#include "model_sizes.h"
#include "passes.h"
#include "safetensors.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* What a run holds; on the heap, so that an error's longjmp frees it. */
typedef struct held {
  tg_tokenizer *tok;
  tg_graph *g;
  tg_weights *w;
  tg_device *dev;
  tg_exec *e;
  float *logits;
  FILE *out;
} held;

static void held_free(held *s) {
  tg_exec_free(s->e);
  tg_device_close(s->dev);
  tg_weights_free(s->w);
  if (s->g) tg_graph_free(s->g);
  if (s->tok) tg_tok_free(s->tok);
  free(s->logits);
  if (s->out) fclose(s->out);
  free(s);
}

static int run(tg_ctx *ctx, const tg_eval_opts *o, held *s) {
  double t0 = now();
  tg_st_file *f = tg_st_read(ctx, o->weights);
  const char *ck_model = tg_st_meta_get(f, "model");
  ck_model = ck_model ? tg_strdup(ctx->arena, ck_model) : NULL;
  tg_st_free(f);
  const char *model = o->model ? o->model : ck_model ? ck_model : "models/gpt2.tg";
  const char *named_by = o->model ? "--model" : ck_model ? "the checkpoint's model (give --model if it has moved)"
                                                         : "the default model (give --model)";

  s->tok = tg_generate_tokenizer(ctx, o->weights, o->tokenizer, true);
  const tg_hellaswag *h = tg_hellaswag_load(ctx, o->hellaswag, s->tok, o->limit, "--hellaswag");
  int32_t V = tg_tok_vocab_size(s->tok);

  int nd = 0;
  tg_define *d = tg_model_sizes(ctx, o->weights, NULL, 0, o->defines, o->n_defines, 3, &nd);
  bool vocab_given = false;
  for (int i = 0; i < nd; i++) vocab_given |= !strcmp(d[i].name, "vocab");
  if (!vocab_given) d[nd++] = (tg_define){"vocab", (double)V, true, "the tokenizer's vocabulary"};
  d[nd++] = (tg_define){"B", TG_HELLASWAG_ENDINGS, true, "HellaSwag (an example's 4 endings)"};
  d[nd++] = (tg_define){"T", (double)h->longest, true,
                        tg_sprintf(ctx->arena, "the longest HellaSwag example, line %lld of %s",
                                   (long long)h->longest_line, h->path)};
  tg_compile_opts co = {d, nd, o->include_dirs, o->n_include_dirs};
  s->g = tg_compile_file(ctx, tg_model_file(ctx, model, named_by), &co);
  if (!tg_verify(ctx, s->g)) tg_bail(ctx);
  double vocab = 0;
  if (!tg_graph_get_config(s->g, "vocab", &vocab) || vocab < V)
    tg_error(ctx, (tg_loc){o->weights, 0, 0},
             "the model's vocabulary (vocab %g) is not GPT-2's BPE (%d ids, %s): HellaSwag's tokens would not be "
             "the model's", vocab, V, tg_tok_source(s->tok));
  tg_hellaswag_expose_logits(ctx, s->g, s->g->source);
  tg_pipeline_opts po = {.kernels = true, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(ctx, s->g, &po);

  tg_ckpt_meta m;
  s->w = tg_ckpt_load(ctx, s->g, o->weights, false, &m);
  if (!s->w) tg_bail(ctx);
  if (o->out && !(s->out = fopen(o->out, "w")))
    tg_error(ctx, (tg_loc){o->out, 0, 0}, "--out %s: %s", o->out, strerror(errno));
  double t1 = now();
  tg_device_opts dopts = {.precision = TG_PREC_F32};
  s->dev = tg_device_open_named(ctx, o->backend, &dopts);
  tg_exec_opts eo = {.name = "hellaswag", .remat = -1};
  s->e = tg_exec_compile(s->dev, ctx, s->g, &eo);
  const tg_graph *g = s->g;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param) tg_tensor_write(tg_exec_leaf(s->e, g->nodes[i]), s->w->values[i], TG_HOST_F32);
  tg_weights_free(s->w);
  s->w = NULL;
  double t2 = now();
  fprintf(o->info, "eval: %s on %s, %lld HellaSwag example%s of %s, T %lld; compiled in %.2f s, loaded in %.2f s\n",
          g->source, tg_device_describe(s->dev), (long long)h->n, h->n == 1 ? "" : "s", h->path, (long long)h->longest,
          t2 - t1, t1 - t0);
  const tg_node *lg = tg_graph_output(g, TG_OUTPUT_LOGITS);
  s->logits = tg_xcalloc((size_t)tg_type_numel(&lg->type), sizeof *s->logits);
  tg_hellaswag_result r = tg_hellaswag_run(ctx, h, s->e, (int64_t)vocab, s->logits, s->out);
  if (s->out) {
    bool bad = ferror(s->out) != 0;
    if (fclose(s->out) != 0) bad = true;
    s->out = NULL;
    if (bad) tg_error(ctx, (tg_loc){o->out, 0, 0}, "--out %s: cannot write it", o->out);
  }
  double t3 = now();
  fprintf(o->info, "hellaswag acc %.4f acc_norm %.4f (%lld example%s; %lld and %lld right) in %.2f s\n", r.acc,
          r.acc_norm, (long long)r.n, r.n == 1 ? "" : "s", (long long)r.correct, (long long)r.correct_norm, t3 - t2);
  return 0;
}

int tg_eval_run(const tg_eval_opts *o) {
  tg_ctx *ctx = tg_ctx_new(stderr);
  held *const s = tg_xcalloc(1, sizeof *s);
  jmp_buf bail;
  ctx->bail = &bail;
  int status;
  if (setjmp(bail)) status = 1;
  else status = run(ctx, o, s);
  held_free(s);
  tg_ctx_free(ctx);
  return status;
}
