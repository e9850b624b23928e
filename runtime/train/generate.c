/* generate.c: `tgrun sample` (generate.h).
 *
 * Order, so that every mistake is reported before anything is compiled
 * for a device: the weights file is read for its metadata (a checkpoint
 * names its model and config), the tokenizer is loaded and the prompt
 * encoded, the model is compiled at B = 1, T = 1 and turned into the
 * decode step (passes/decode.c), the prompt is checked against the
 * step's context (the position table's rows), the weights are checked
 * against the graph; only then is the step compiled for the backend.
 *
 * Each sample starts from zeroed caches.  The prompt goes through the
 * decode step one token at a time (prefill by the same compiled graph:
 * one graph, and the prompt's cost is its length in steps); then each new
 * token is chosen from the last step's logits (the repetition penalty,
 * then greedy at temperature 0, else temperature, top-k and top-p:
 * runtime/train/sampler.c), written out and flushed, and fed back.  A
 * sample stops after max_new_tokens, or, with GPT-2's BPE, when the model
 * chooses <|endoftext|> (not written; keep_eot goes on).
 *
 * Past the context (slide_window): the caches hold block_size positions,
 * and GPT-2's positions are learned absolute embeddings, so when the
 * window moves by one token every cached key and value is stale (each was
 * computed at a position one too high).  nanoGPT's exact rule, each new
 * token sees exactly the last block_size tokens, would cost a forward
 * over block_size tokens for every token past the context: through this
 * one-token step, block_size steps a token.  Instead, when the caches are
 * full, they are rebuilt from the last block_size / 2 tokens at positions
 * 0 .. block_size / 2 - 1 (through the same step, as a prompt is), and
 * generation goes on: each token sees between block_size / 2 and
 * block_size tokens, and the rebuild's block_size / 2 steps come once
 * every block_size / 2 + 1 tokens, about one extra step per new token
 * (docs/tgrun.md has the timings).  The
 * first token after a rebuild is exactly the one a fresh run with that
 * window as its prompt would choose (tests/cli/run_sample.sh checks it). */
#include "generate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "host_memory.h"
#include "backend.h"
#include "backends.h"
#include "model_sizes.h"
#include "passes.h"
#include "prepare.h"
#include "rng.h"
#include "safetensors.h"
#include "sampler.h"
#include "tokenizer.h"
#include "train_config.h"
#include "program_dir.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* What a run holds; on the heap, so that an error's longjmp frees it. */
typedef struct gen {
  tg_tokenizer *tok;
  int32_t *prompt;
  tg_weights *w;
  tg_graph *g;
  tg_device *dev;
  tg_exec *e;
  float *logits;
  float *scratch;
  int32_t *window; /* the tokens at the caches' positions 0 .. block_size - 1 */
  uint8_t *present; /* the ids in the prompt and the text so far (the repetition penalty) */
  /* While text is being written, errors are held here and printed after
   * it, on a line of their own (hold_errors). */
  FILE *held;
  char *held_text;
  size_t held_len;
  bool mid_line; /* the text written so far does not end in a newline */
} gen;

/* From the first byte of text on, ctx's messages go to a buffer: an
 * error in the middle of a sample would otherwise be printed on the line
 * of the text (stdout and stderr are one terminal), after its last word.
 * guarded() ends the text's line and then prints them. */
static void hold_errors(tg_ctx *ctx, gen *s) {
  if (s->held) return;
  s->held = open_memstream(&s->held_text, &s->held_len);
  if (s->held) ctx->err = s->held;
}

static void wrote_text(gen *s, const char *text, size_t len) {
  if (len) s->mid_line = text[len - 1] != '\n';
}

static void gen_free(gen *s) {
  tg_exec_free(s->e);
  tg_device_close(s->dev);
  tg_weights_free(s->w);
  if (s->g) tg_graph_free(s->g);
  if (s->tok) tg_tok_free(s->tok);
  free(s->prompt);
  free(s->logits);
  free(s->scratch);
  free(s->window);
  free(s->present);
  free(s);
}

static bool is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static const char *dir_of(tg_ctx *ctx, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return ".";
  if (slash == path) return "/";
  return tg_sprintf(ctx->arena, "%.*s", (int)(slash - path), path);
}

/* The tokenizer: tokenizer.json (as `tgrun prepare` writes it, in the data
 * directory training reads) or GPT-2's two BPE files. */
tg_tokenizer *tg_generate_tokenizer(tg_ctx *ctx, const char *weights, const char *tokenizer, bool required) {
  const char *where = tokenizer ? tokenizer : dir_of(ctx, weights);
  const char *dir = where;
  char why[1024];
  if (!tokenizer) {
    /* a run's out_dir: its train.cfg names the data_dir whose tokenizer the
     * run trained with, as training finds it */
    const char *cfg = tg_sprintf(ctx->arena, "%s/train.cfg", where);
    const char *json = tg_sprintf(ctx->arena, "%s/tokenizer.json", where);
    if (!is_file(json) && is_file(cfg)) {
      tg_train_config c;
      tg_train_config_defaults(&c);
      bool ok = tg_train_config_load(ctx, cfg, &c);
      const char *data = ok && c.data_dir ? tg_strdup(ctx->arena, c.data_dir) : NULL;
      tg_train_config_free(&c);
      if (!ok) tg_bail(ctx);
      if (data && is_dir(data)) where = dir = data;
      else
        tg_error(ctx, (tg_loc){cfg, 0, 0}, "the run's data_dir '%s' (its tokenizer) is not there from here; name the "
                 "tokenizer with --tokenizer", data ? data : "");
    }
  }
  if (is_file(where)) dir = dir_of(ctx, where);
  else if (!is_dir(where))
    tg_error(ctx, (tg_loc){where, 0, 0}, "--tokenizer %s: no such file or directory", where);
  const char *json = tg_sprintf(ctx->arena, "%s/tokenizer.json", dir);
  const char *enc = tg_sprintf(ctx->arena, "%s/encoder.json", dir), *bpe = tg_sprintf(ctx->arena, "%s/vocab.bpe", dir);
  tg_tokenizer *t = NULL;
  if (!required && !is_file(json) && !(is_file(enc) && is_file(bpe))) return NULL;
  if (is_file(json)) t = tg_prepare_load_tokenizer(dir, why, sizeof why);
  else if (is_file(enc) && is_file(bpe)) t = tg_tok_gpt2_load(enc, bpe, why, sizeof why);
  else
    tg_error(ctx, (tg_loc){where, 0, 0},
             "no tokenizer in %s: it has neither tokenizer.json (a prepared data directory: give the run's "
             "data_dir) nor GPT-2's encoder.json and vocab.bpe; name one with --tokenizer", dir);
  if (!t) tg_error(ctx, (tg_loc){where, 0, 0}, "%s", why);
  return t;
}

/* The model's sizes from the weights file (hf.h: a tg file's recorded
 * config, or the shapes of Hugging Face's tensors and the config.json
 * beside them), checked against the caller's -D before anything is
 * compiled; then the -D (the last of a name wins); then B = 1, T = 1 (the
 * decode step's) and the tokenizer's vocabulary where nothing else says. */
static tg_define *defines_for(tg_ctx *ctx, const tg_generate_opts *o, int vocab, int *n_out) {
  int n = 0;
  tg_define *d = tg_model_sizes(ctx, o->weights, NULL, 0, o->defines, o->n_defines, 3, &n);
  bool vocab_given = false;
  for (int i = 0; i < n; i++) vocab_given |= !strcmp(d[i].name, "vocab");
  if (!vocab_given) d[n++] = (tg_define){"vocab", (double)vocab, true, "the tokenizer's vocabulary"};
  d[n++] = (tg_define){"B", 1, true, "sampling (one sequence)"};
  d[n++] = (tg_define){"T", 1, true, "sampling (one token a step)"};
  *n_out = n;
  return d;
}

static void put_token(tg_ctx *ctx, const tg_generate_opts *o, gen *s, int32_t id) {
  size_t len = 0;
  const char *piece = tg_tok_piece(s->tok, id, &len);
  if (!piece) tg_error(ctx, (tg_loc){o->weights, 0, 0}, "the model chose token %d, which the tokenizer does not have", id);
  if (fwrite(piece, 1, len, o->out) != len || fflush(o->out) != 0)
    tg_error(ctx, (tg_loc){"<stdout>", 0, 0}, "cannot write the text: %s", strerror(errno));
  wrote_text(s, piece, len);
}

/* The tokenizer, the prompt's tokens (np of them) and the decode step's
 * graph, through the pipeline, of the model the checkpoint or --model
 * names; the rows of its caches, and in *context the model's context
 * length (block_size), which the caches hold only when the sample needs
 * as many. */
static int64_t load_model(tg_ctx *ctx, const tg_generate_opts *o, gen *s, size_t *np, int32_t *vocab_size,
                          int64_t *context) {
  /* a checkpoint names its model and config */
  tg_st_file *f = tg_st_read(ctx, o->weights);
  const char *ck_model = tg_st_meta_get(f, "model");
  ck_model = ck_model ? tg_strdup(ctx->arena, ck_model) : NULL;
  tg_st_free(f);
  const char *model = o->model ? o->model : ck_model;
  if (!model)
    tg_error(ctx, (tg_loc){o->weights, 0, 0}, "%s names no model (it is not a tg checkpoint): give --model, e.g. "
             "--model models/gpt2.tg", o->weights);

  s->tok = tg_generate_tokenizer(ctx, o->weights, o->tokenizer, true);
  char why[1024];
  if (o->prompt_len == 0) tg_error(ctx, (tg_loc){o->prompt_name, 0, 0}, "the prompt is empty: give some text to continue");
  if (!tg_tok_encode(s->tok, o->prompt, o->prompt_len, &s->prompt, np, why, sizeof why))
    tg_error(ctx, (tg_loc){o->prompt_name, 0, 0}, "the prompt cannot be encoded by the %s tokenizer (%s): %s",
             tg_tok_kind_name(tg_tok_kind_of(s->tok)), tg_tok_source(s->tok), why);
  int32_t V = *vocab_size = tg_tok_vocab_size(s->tok);

  int nd = 0;
  tg_define *d = defines_for(ctx, o, V, &nd);
  tg_compile_opts co = {d, nd, o->include_dirs, o->n_include_dirs};
  const char *named_by = o->model ? "--model" : "the checkpoint's model (give --model if it has moved)";
  s->g = tg_compile_file(ctx, tg_model_file(ctx, model, named_by), &co);
  if (!tg_verify(ctx, s->g)) tg_bail(ctx);
  double vocab;
  if (tg_graph_get_config(s->g, "vocab", &vocab) && vocab < V)
    tg_error(ctx, (tg_loc){s->g->source, 1, 1}, "the model's vocab is %g but the tokenizer (%s) has %d ids", vocab,
             tg_tok_source(s->tok), V);
  /* caches for the prompt and the new tokens, not the whole context: the
   * step attends over every row of them (tg_decode).  Rounded up to 64
   * rows, so that samples of about the same length share compiled code;
   * at most the context (the pass takes the least), past which the window
   * slides as before. */
  int64_t want = (int64_t)*np + (o->max_new_tokens > 0 ? o->max_new_tokens : 0);
  tg_pipeline_opts po = {.decode = true, .kernels = true, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT,
                         .decode_positions = (want + 63) / 64 * 64};
  tg_run_pipeline(ctx, s->g, &po);
  const tg_node *cache = tg_graph_leaf(s->g, TG_OP_state, TG_DECODE_K_PREFIX "0");
  int64_t S = cache->type.dim[cache->type.rank - 2].size;
  *context = tg_decode_context(s->g);
  if (*context < S) *context = S; /* a table read through a cast, say: the caches' rows */
  if ((int64_t)*np > S)
    tg_error(ctx, (tg_loc){o->prompt_name, 0, 0}, "the prompt is %zu tokens, longer than the model's context of %lld "
             "(block_size): shorten it", *np, (long long)S);

  return S;
}

/* How many of the last tokens a full context is rebuilt from (the header
 * says why half): at least 1, so that a model of block_size 1 still
 * goes on, each token seeing only the one before it. */
static int64_t slide_keep(int64_t S) { return S / 2 > 0 ? S / 2 : 1; }

/* The caches are full (window holds S tokens, at positions 0 .. S - 1)
 * and another token is to be fed: keeps the last slide_keep(S) - 1 of
 * them at the front, to be run again from position 0 with the new token
 * after them; returns how many.  The cache rows past them need no
 * clearing: the step's attention reads rows 0 .. pos only. */
static int64_t slide_window(int32_t *window, int64_t S) {
  int64_t kept = slide_keep(S) - 1;
  memmove(window, window + S - kept, (size_t)kept * sizeof *window);
  return kept;
}

/* The weights (read into memory, then copied to the device's tensors) and
 * the key/value caches against the host's free memory, before either is
 * allocated: under an address-space limit (ulimit -v) OpenBLAS's
 * allocator spins instead of failing, so a sample that cannot fit is
 * refused here, with the numbers (host_memory.h). */
static void check_memory(tg_ctx *ctx, const tg_generate_opts *o, const tg_graph *g) {
  int64_t need = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param || g->nodes[i]->op == TG_OP_state)
      need += tg_type_numel(&g->nodes[i]->type) * 4 * (g->nodes[i]->op == TG_OP_param ? 2 : 1);
  char what[512];
  int64_t avail = tg_host_memory_available(tg_host_runtime_reserve(0), what, sizeof what);
  if (avail < 0 || need <= avail) return;
  double mib = 1024.0 * 1024.0;
  tg_error(ctx, (tg_loc){o->weights, 0, 0},
           "sampling needs about %.0f MiB (the weights twice, as read and on the device, and the key/value caches) "
           "but %.0f MiB are free (%s)",
           (double)need / mib, (double)avail / mib, what);
}

/* --weights names a file, or says what it names instead: "no such file"
 * for a directory or a device sent the user looking for a path that is
 * there. */
static void need_weights_file(tg_ctx *ctx, const char *path) {
  struct stat st;
  tg_loc at = {path, 0, 0};
  if (stat(path, &st) != 0)
    tg_error(ctx, at, "--weights %s: %s", path, errno == ENOENT ? "no such file" : strerror(errno));
  if (S_ISDIR(st.st_mode))
    tg_error(ctx, at, "--weights %s: is a directory; give the weights file in it (ckpt.safetensors, "
             "model.safetensors)", path);
  if (!S_ISREG(st.st_mode))
    tg_error(ctx, at, "--weights %s: not a regular file (a device, a pipe or a socket); give a .safetensors file",
             path);
}

/* The next token from the step's logits: the repetition penalty, then
 * greedy at temperature 0, else temperature, top-k and top-p. */
static int32_t choose_next(tg_ctx *ctx, const tg_generate_opts *o, gen *s, const tg_node *lg, int32_t V, double penalty,
                           double top_p, tg_rng *rng) {
  if (penalty != 1) tg_sample_penalize(s->logits, V, s->present, penalty);
  int32_t next = o->temperature == 0
                     ? tg_sample_greedy(s->logits, V)
                     : tg_sample_top_p(s->logits, V, o->temperature, (int32_t)o->top_k, top_p, rng, s->scratch);
  if (next < 0) tg_error(ctx, lg->loc, "cannot sample: the logits are NaN or all -inf");
  return next;
}

static int run(tg_ctx *ctx, const tg_generate_opts *o, gen *s, tg_generate_stats *st) {
  double t0 = now();
  need_weights_file(ctx, o->weights);
  size_t np = 0;
  int32_t V;
  int64_t context = 0;
  int64_t S = load_model(ctx, o, s, &np, &V, &context);
  check_memory(ctx, o, s->g);

  tg_ckpt_meta m;
  s->w = tg_ckpt_load(ctx, s->g, o->weights, false, &m);
  if (!s->w) tg_bail(ctx);
  double t1 = now();
  tg_device_opts dopts = {.precision = TG_PREC_F32};
  s->dev = tg_device_open_named(ctx, o->backend, &dopts);
  tg_exec_opts eo = {.name = "decode", .remat = -1};
  s->e = tg_exec_compile(s->dev, ctx, s->g, &eo);
  tg_exec_profile(s->e, o->profile_top > 0 ? TG_PROFILE_KERNELS : TG_PROFILE_OFF);
  double t2 = now();
  const tg_graph *g = s->g;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param) tg_tensor_write(tg_exec_leaf(s->e, g->nodes[i]), s->w->values[i], TG_HOST_F32);
  tg_weights_free(s->w);
  s->w = NULL;
  double t3 = now();
  st->compile_s = t2 - t1;
  st->load_s = (t1 - t0) + (t3 - t2);
  fprintf(o->info, "sample: %s on %s, context %lld", g->source, tg_device_describe(s->dev), (long long)context);
  if (S < context) fprintf(o->info, " (caches of %lld positions: the prompt and the new tokens)", (long long)S);
  fprintf(o->info, ", prompt %zu tokens; compiled in %.2f s, loaded in %.2f s\n", np, st->compile_s, st->load_s);

  const tg_node *lg = tg_graph_output(g, TG_OUTPUT_LOGITS);
  tg_tensor *idx_t = tg_exec_leaf(s->e, tg_graph_leaf(g, TG_OP_input, TG_INPUT_IDX));
  tg_tensor *pos_t = tg_exec_leaf(s->e, tg_graph_leaf(g, TG_OP_input, TG_INPUT_POS));
  if (!idx_t || !pos_t) tg_error(ctx, (tg_loc){g->source, 1, 1}, "the decode step needs the inputs idx and pos");
  s->logits = tg_xcalloc((size_t)tg_type_numel(&lg->type), sizeof *s->logits);
  s->scratch = tg_xcalloc((size_t)V + 16, sizeof *s->scratch);
  /* the caches, zeroed before each sample */
  int n_caches = 0;
  for (int i = 0; i < g->n_nodes; i++) n_caches += g->nodes[i]->op == TG_OP_state;
  tg_tensor **caches = tg_alloc(ctx->arena, sizeof *caches * (size_t)(n_caches + 1));
  int64_t most = 0;
  n_caches = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_state) {
      caches[n_caches++] = tg_exec_leaf(s->e, g->nodes[i]);
      int64_t k = tg_type_numel(&g->nodes[i]->type);
      most = k > most ? k : most;
    }
  float *zeros = tg_alloc(ctx->arena, sizeof *zeros * (size_t)(most + 1));
  memset(zeros, 0, sizeof *zeros * (size_t)(most + 1));

  s->window = tg_xcalloc((size_t)S + 1, sizeof *s->window);
  s->present = tg_xcalloc((size_t)V, sizeof *s->present);
  double top_p = o->top_p > 0 ? o->top_p : 1, penalty = o->repetition_penalty > 0 ? o->repetition_penalty : 1;
  bool stop_at_eot = !o->keep_eot && tg_tok_kind_of(s->tok) == TG_TOK_GPT2 && V > TG_GPT2_EOT;
  for (int k = 0; k < o->num_samples; k++) {
    if (k > 0) fprintf(o->out, "\n---------------\n");
    s->mid_line = false;
    tg_rng rng;
    tg_rng_seed(&rng, o->seed, (uint64_t)k);
    for (int c = 0; c < n_caches; c++) tg_tensor_write(caches[c], zeros, TG_HOST_F32);
    memset(s->present, 0, (size_t)V);
    for (size_t i = 0; i < np; i++) s->present[s->prompt[i]] = 1;
    memcpy(s->window, s->prompt, np * sizeof *s->window);
    hold_errors(ctx, s);
    if (fwrite(o->prompt, 1, o->prompt_len, o->out) != o->prompt_len || fflush(o->out) != 0)
      tg_error(ctx, (tg_loc){"<stdout>", 0, 0}, "cannot write the text: %s", strerror(errno));
    wrote_text(s, o->prompt, o->prompt_len);
    int64_t filled = 0, n = (int64_t)np; /* the caches hold window[0 .. filled) of window[0 .. n) */
    double ta = now();
    for (int made = 0;; ) {
      /* window[filled .. n) through the step (the prompt, a context
       * rebuild, or the last token): only the last one's logits matter */
      for (; filled < n; filled++) {
        int32_t pos = (int32_t)filled;
        tg_tensor_write(idx_t, &s->window[filled], TG_HOST_I32);
        tg_tensor_write(pos_t, &pos, TG_HOST_I32);
        tg_exec_run(ctx, s->e);
      }
      if (made == 0) {
        st->prefill_s += now() - ta;
        ta = now();
      }
      if (!tg_exec_read(s->e, lg, s->logits, TG_HOST_F32))
        tg_error(ctx, lg->loc, "internal: the logits are not in memory after the step");
      int32_t next = choose_next(ctx, o, s, lg, V, penalty, top_p, &rng);
      if (stop_at_eot && next == TG_GPT2_EOT) {
        fprintf(o->info, "\nsample: <|endoftext|> after %d new tokens; stopping this sample (--no-stop-at-eot goes "
                "on)\n", made);
        st->eot_stops++;
        break;
      }
      put_token(ctx, o, s, next);
      st->new_tokens++;
      if (++made == o->max_new_tokens) break; /* its own step would be wasted */
      s->present[next] = 1;
      if (n == S) {
        n = slide_window(s->window, S);
        filled = 0;
        st->slides++;
      }
      s->window[n++] = next;
    }
    st->decode_s += now() - ta;
    st->prompt_tokens += (int64_t)np;
  }
  fprintf(o->out, "\n");
  fflush(o->out);
  double per = st->decode_s > 0 ? (double)st->new_tokens / st->decode_s : 0;
  fprintf(o->info, "sample: %lld prompt tokens in %.3f s, %lld new tokens in %.3f s: %.2f tokens/s",
          (long long)st->prompt_tokens, st->prefill_s, (long long)st->new_tokens, st->decode_s, per);
  if (st->slides)
    fprintf(o->info, " (the context was rebuilt from its last %lld tokens %lld times)", (long long)slide_keep(S),
            (long long)st->slides);
  fprintf(o->info, "\n");
  if (o->profile_top > 0) tg_exec_profile_print(s->e, o->info, o->profile_top);
  return 0;
}

/* Runs with a context whose errors land here. */
static int guarded(const tg_generate_opts *o, tg_generate_stats *st) {
  tg_ctx *ctx = tg_ctx_new(stderr);
  gen *const s = tg_xcalloc(1, sizeof *s);
  jmp_buf bail;
  ctx->bail = &bail;
  int status;
  if (setjmp(bail)) status = 1;
  else status = run(ctx, o, s, st);
  if (s->held) {
    fclose(s->held);
    if (status != 0 && s->mid_line) {
      fputc('\n', o->out);
      fflush(o->out);
    }
    if (s->held_len) fwrite(s->held_text, 1, s->held_len, stderr);
    free(s->held_text);
  }
  gen_free(s);
  tg_ctx_free(ctx);
  return status;
}

int tg_generate(const tg_generate_opts *o, tg_generate_stats *stats) {
  tg_generate_stats local;
  tg_generate_stats *st = stats ? stats : &local;
  *st = (tg_generate_stats){0};
  return guarded(o, st);
}
