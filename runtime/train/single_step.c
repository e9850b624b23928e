/* single_step.c: `tgrun init | grad | step` (single_step.h).
 *
 * grad and step read the batch first, compile the model with B and T from
 * it, check everything that can be checked before any compiling for a
 * device (token ids against the vocabulary, the batch against the model's
 * inputs, no other input left without a value), run the same pipeline as
 * tgc, load the weights, and run the graph on the backend asked for:
 * once for grad, N times for step. */
#include "single_step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch.h"
#include "checkpoint.h"
#include "backends.h"
#include "comm.h"
#include "model_sizes.h"
#include "safetensors.h"
#include "tensor_parts.h"
#include "weights.h"

/* Compiles the model; B and T follow the batch, and the model's sizes
 * the weights file (hf.h: n_layer, n_embd, vocab, block_size from its
 * shapes, n_head and the rest from its metadata or config.json), unless
 * given with -D; a -D that contradicts the file is an error here, before
 * anything is compiled. */
static tg_graph *compile(tg_ctx *ctx, const tg_single_opts *o, const tg_batch *b) {
  /* the batch's B and T before the -D: an explicit -D B=... still decides
   * (and a mismatch is then reported); a model without such constants
   * just does not take them */
  tg_define bt[2] = {{0}};
  int n_bt = 0;
  if (b) {
    bt[n_bt++] = (tg_define){"B", (double)b->B, true, "the batch file's B"};
    bt[n_bt++] = (tg_define){"T", (double)b->T, true, "the batch file's T"};
  }
  int n = 0;
  tg_define *all;
  if (o->weights) {
    all = tg_model_sizes(ctx, o->weights, bt, n_bt, o->defines, o->n_defines, 0, &n);
  } else {
    all = tg_alloc(ctx->arena, sizeof *all * (size_t)(o->n_defines + 2));
    if (n_bt) memcpy(all, bt, sizeof *bt * (size_t)n_bt);
    if (o->n_defines) memcpy(all + n_bt, o->defines, sizeof *all * (size_t)o->n_defines);
    n = n_bt + o->n_defines;
  }
  tg_compile_opts co = {all, n, o->include_dirs, o->n_include_dirs};
  tg_graph *g = tg_compile_file(ctx, o->model, &co);
  if (!tg_verify(ctx, g)) tg_bail(ctx);
  return g;
}

/* Checks that the model has inputs idx and targets of the batch's shape,
 * and no other input that tgrun would leave without a value. */
static void check_batch_inputs(tg_ctx *ctx, const tg_graph *g, const tg_batch *b, const char *path) {
  const char *names[2] = {TG_INPUT_IDX, TG_INPUT_TARGETS};
  for (int k = 0; k < 2; k++) {
    const tg_node *in = tg_graph_leaf(g, TG_OP_input, names[k]);
    if (!in)
      tg_error(ctx, (tg_loc){g->source, 1, 1}, "the model has no input '%s' to take the batch's",
               names[k]);
    if (in->type.rank != 2 || in->type.dim[0].size != b->B || in->type.dim[1].size != b->T) {
      char t[TG_TYPE_STR_MAX];
      tg_error(ctx, (tg_loc){path, 0, 0},
               "tensor '%s' is [%lld, %lld] but the model's input is %s (check -D B and -D T)",
               names[k], (long long)b->B, (long long)b->T, tg_type_str(&in->type, t, sizeof t));
    }
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_input || !strcmp(n->name, TG_INPUT_IDX) || !strcmp(n->name, TG_INPUT_TARGETS)) continue;
    if (n->phase == TG_PHASE_OPTIMIZER) continue; /* lr and step, set per step */
    tg_error(ctx, n->loc, "the model's input '%s' has no value: tgrun feeds only 'idx' and "
             "'targets' from the batch", n->name);
  }
}

static int save_weights(const tg_weights *w, const char *path) {
  char why[512];
  if (tg_weights_save(w, path, false, why, sizeof why)) return 0;
  fprintf(stderr, "tgrun: error: %s\n", why);
  return 1;
}

/* What grad and step hold; on the heap, so that it survives an error's
 * longjmp and is freed after it. */
typedef struct session {
  tg_batch *batch;
  tg_graph *g;
  tg_graph *whole;  /* with a tensor axis: the model unsplit, as weights files hold it; else NULL */
  int tp;           /* the tensor axis's ranks (1: none) */
  tg_weights *w;
  tg_device *dev;
  tg_exec *e;
} session;

static void session_free(session *s) {
  if (!s) return;
  tg_exec_free(s->e);
  tg_device_close(s->dev);
  tg_weights_free(s->w);
  if (s->g) tg_graph_free(s->g);
  if (s->whole) tg_graph_free(s->whole);
  tg_batch_free(s->batch);
  free(s);
}

/* The weights of split graph g, this rank's parts of the whole ones
 * (whole->g's), which are freed. */
static tg_weights *parts_of(const tg_graph *g, tg_weights *whole, int tp, int rank) {
  tg_weights *w = tg_xcalloc(1, sizeof *w);
  w->g = g;
  w->values = tg_tensor_cut_state(whole->g, whole->values, g, tp, rank);
  tg_weights_free(whole);
  return w;
}

static void open_session(tg_ctx *ctx, const tg_single_opts *o, bool step, session *s) {
  s->batch = tg_batch_load(ctx, o->batch);
  s->g = compile(ctx, o, s->batch);
  double vocab;
  if (tg_graph_get_config(s->g, "vocab", &vocab)) tg_batch_check_ids(ctx, s->batch, o->batch, (int64_t)vocab);
  tg_pipeline_opts popts = {.precision = o->policy, .grad = true, .step = step, .adamw = o->adamw,
                            .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  s->tp = tg_tensor_degree(s->g);
  if (s->tp > 1) {
    if (step) tg_error(ctx, (tg_loc){o->model, 1, 1}, "tgrun step with a tensor axis (mesh tensor > 1) is not supported yet: use grad, or train");
    if (tg_comm_world_size() != s->tp)
      tg_error(ctx, (tg_loc){o->model, 1, 1}, "the model's mesh has a tensor axis of %d ranks, but %d rank%s run%s: "
               "start grad on %d (mpirun -np %d tgrun grad ...), or set tp = 1",
               s->tp, tg_comm_world_size(), tg_comm_world_size() == 1 ? "" : "s", tg_comm_world_size() == 1 ? "s" : "",
               s->tp, s->tp);
    char why[256];
    if (!tg_comm_split_mesh(s->tp, why, sizeof why)) tg_error(ctx, (tg_loc){o->model, 1, 1}, "%s", why);
    popts.tensor_rank = tg_comm_tensor_rank();
  }
  tg_run_pipeline(ctx, s->g, &popts);
  check_batch_inputs(ctx, s->g, s->batch, o->batch);
  /* a tg checkpoint or a plain weights file (Hugging Face's, tgrun's):
   * whole tensors, read for the unsplit model and cut to this rank's parts */
  if (s->tp > 1) {
    s->whole = compile(ctx, o, s->batch);
    tg_pipeline_opts wopts = {.precision = o->policy, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT, .no_tensor_split = true};
    tg_run_pipeline(ctx, s->whole, &wopts);
  }
  tg_weights *read = tg_ckpt_load(ctx, s->whole ? s->whole : s->g, o->weights, false, NULL);
  if (!read) tg_bail(ctx);
  s->w = s->whole ? parts_of(s->g, read, s->tp, tg_comm_tensor_rank()) : read;
  tg_device_opts dopts = {.precision = o->precision};
  s->dev = tg_device_open_named(ctx, o->backend ? o->backend : "ref", &dopts);
  tg_exec_opts eo = {.name = step ? "step" : "grad", .source_path = o->keep_source, .remat = -1};
  s->e = tg_exec_compile(s->dev, ctx, s->g, &eo);
  tg_exec_profile(s->e, o->profile_top > 0 ? TG_PROFILE_KERNELS : TG_PROFILE_OFF);
  for (int i = 0; i < s->g->n_nodes; i++)
    if (s->w->values[i]) tg_tensor_write(tg_exec_leaf(s->e, s->g->nodes[i]), s->w->values[i], TG_HOST_F32);
  /* bf16: each parameter's copy, rounded to nearest even as the
   * optimizer's cast makes it (the step keeps it after) */
  for (int i = 0; i < s->g->n_nodes; i++) {
    const tg_node *p = s->g->nodes[i];
    const tg_node *copy = p->op == TG_OP_param ? tg_param_copy_of(s->g, p) : NULL;
    if (copy) tg_tensor_write(tg_exec_leaf(s->e, copy), s->w->values[i], TG_HOST_F32);
  }
  const char *names[2] = {TG_INPUT_IDX, TG_INPUT_TARGETS};
  const int32_t *vals[2] = {s->batch->idx, s->batch->targets};
  for (int k = 0; k < 2; k++)
    tg_tensor_write(tg_exec_leaf(s->e, tg_graph_leaf(s->g, TG_OP_input, names[k])), vals[k], TG_HOST_I32);
}

/* Runs body with a context whose errors land here; returns the status. */
typedef int (*command_fn)(tg_ctx *ctx, const tg_single_opts *o, session *s);

static int with_session(const tg_single_opts *o, command_fn body) {
  tg_ctx *ctx = tg_ctx_new(stderr);
  /* On the heap: what it holds must survive an error's longjmp. */
  session *const s = tg_xcalloc(1, sizeof *s);
  jmp_buf bail;
  ctx->bail = &bail;
  int status;
  if (setjmp(bail)) status = 1;
  else status = body(ctx, o, s);
  session_free(s);
  tg_ctx_free(ctx);
  return status;
}

static int do_init(tg_ctx *ctx, const tg_single_opts *o, session *s) {
  s->g = compile(ctx, o, NULL);
  s->w = tg_weights_init(s->g, o->seed);
  int st = save_weights(s->w, o->out);
  if (st == 0) printf("wrote %s: initial weights, seed %llu\n", o->out, (unsigned long long)o->seed);
  return st;
}

static int do_grad(tg_ctx *ctx, const tg_single_opts *o, session *s) {
  open_session(ctx, o, false, s);
  tg_exec_run(ctx, s->e);
  const tg_graph *g = s->g;
  /* loss first, then each parameter's gradient under the parameter's name */
  int n = 0;
  float loss_value = 0;
  tg_st_tensor *ts = tg_alloc(ctx->arena, sizeof *ts * (size_t)(g->n_outputs + 1));
  for (int i = 0; i < g->n_outputs; i++) {
    const char *name = g->outputs[i].name;
    const tg_node *node = g->outputs[i].node;
    const char *param = tg_gradient_param_name(name);
    if (!param && strcmp(name, TG_OUTPUT_LOSS)) continue;
    int64_t numel = tg_type_numel(&node->type);
    float *v = tg_alloc(ctx->arena, sizeof *v * (size_t)numel);
    if (!tg_exec_read(s->e, node, v, TG_HOST_F32))
      tg_error(ctx, node->loc, "internal: output '%s' is not in memory after the step", name);
    if (!param) loss_value = v[0];
    /* a split parameter's gradient whole, from every tensor rank's part */
    const tg_graph *fg = g;
    const tg_type *vt = &node->type;
    const tg_node *p = param && s->whole ? tg_graph_leaf(g, TG_OP_param, param) : NULL;
    if (p && tg_param_split_axis(p) >= 0) {
      const tg_node *W = tg_graph_leaf(s->whole, TG_OP_param, param);
      float *whole = tg_alloc(ctx->arena, sizeof *whole * (size_t)tg_type_numel(&W->type));
      tg_tensor_gather_whole(v, p, &W->type, s->tp, tg_comm_tensor_rank(), whole);
      v = whole;
      fg = s->whole, vt = &W->type;
    }
    /* At the parameter's file shape: a padded vocab (pad_vocab) is cropped. */
    tg_type ft;
    tg_file_type(fg, vt, &ft);
    float *out = tg_alloc(ctx->arena, sizeof *out * (size_t)tg_type_numel(&ft));
    tg_copy_box(v, vt, out, &ft);
    tg_st_tensor *t = &ts[n++];
    t->name = param ? param : name;
    t->dtype = TG_F32;
    t->rank = ft.rank;
    for (int d = 0; d < t->rank; d++) t->shape[d] = ft.dim[d].size;
    t->data = out;
    t->nbytes = (size_t)tg_type_numel(&ft) * sizeof *out;
  }
  if (tg_comm_world_rank() != 0) return 0; /* tensor ranks: the first writes the whole gradients */
  char why[512];
  if (!tg_st_write(o->out, ts, n, NULL, 0, why, sizeof why)) {
    fprintf(stderr, "tgrun: error: %s\n", why);
    return 1;
  }
  printf("loss %.8g\nwrote %s: loss and %d gradient%s\n", loss_value, o->out, n - 1, n == 2 ? "" : "s");
  return 0;
}

static double read_double(tg_ctx *ctx, session *s, const char *name) {
  const tg_node *n = tg_graph_output(s->g, name);
  double v;
  if (!n || !tg_exec_read(s->e, n, &v, TG_HOST_F64))
    tg_error(ctx, (tg_loc){s->g->source, 1, 1}, "internal: %s is not in memory after the step", name);
  return v;
}

static int do_step(tg_ctx *ctx, const tg_single_opts *o, session *s) {
  open_session(ctx, o, true, s);
  const tg_graph *g = s->g;
  tg_tensor *lr_in = tg_exec_leaf(s->e, tg_graph_leaf(g, TG_OP_input, TG_INPUT_LR));
  tg_tensor *step_in = tg_exec_leaf(s->e, tg_graph_leaf(g, TG_OP_input, TG_INPUT_STEP));
  for (long i = 1; i <= o->steps; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* as doubles: the interpreter in f64 keeps them exact; f32 devices round */
    double lr = o->lr, step = (double)i;
    tg_tensor_write(lr_in, &lr, TG_HOST_F64);
    tg_tensor_write(step_in, &step, TG_HOST_F64);
    tg_exec_run(ctx, s->e);
    double lossv = read_double(ctx, s, TG_OUTPUT_LOSS), normv = read_double(ctx, s, TG_OUTPUT_GRAD_NORM);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("step %ld/%ld  loss %.8g  grad_norm %.6g  lr %.3g  %.0f ms\n", i, o->steps, lossv, normv, o->lr, ms);
    fflush(stdout);
  }
  if (o->profile_top > 0) tg_exec_profile_print(s->e, stdout, o->profile_top);
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param) tg_exec_read(s->e, g->nodes[i], s->w->values[i], TG_HOST_F32);
  int st = save_weights(s->w, o->out);
  if (st == 0) printf("wrote %s: weights after %ld step%s\n", o->out, o->steps, o->steps == 1 ? "" : "s");
  return st;
}

int tg_single_init(const tg_single_opts *o) { return with_session(o, do_init); }
int tg_single_grad(const tg_single_opts *o) { return with_session(o, do_grad); }
int tg_single_step(const tg_single_opts *o) { return with_session(o, do_step); }
