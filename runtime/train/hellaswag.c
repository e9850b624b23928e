/* hellaswag.c: HellaSwag's jsonl read, encoded and scored (hellaswag.h).
 *
 * Why the logits, and the losses on the host: the model's own loss output
 * is the mean over the whole batch, and an ending's loss needs the
 * cross-entropy at its own positions only.  A variant of the graph that
 * returns the loss at every position would need a new output in every
 * model; the logits are an output every GPT already names (`logits`, what
 * text samples read), so the forward compiled at B = 4 with that output is
 * the whole model side, and the cross-entropy of the few ending positions
 * of each row is computed here, in double, over the model's vocabulary
 * (the padded columns of pad_vocab left out).  The cost is reading back
 * 4 x T x Vp floats an example; T is the longest example's length, not
 * the model's context (rows are left-aligned and padded after their end:
 * causal attention makes the logits at a position depend only on the
 * tokens up to it, so the padding changes nothing that is scored). */
#include "hellaswag.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "ir.h"
#include "json.h"
#include "names.h"

/* Why a line is refused, and where in it (a byte offset). */
typedef struct line_error {
  size_t pos;
  char msg[600];
} line_error;

static bool refuse(line_error *err, size_t pos, const char *msg) {
  err->pos = pos;
  snprintf(err->msg, sizeof err->msg, "%s", msg);
  return false;
}

/* The tokens of text, copied into the arena; false with err on text the
 * tokenizer cannot encode. */
static bool encode(tg_arena *a, tg_tokenizer *tok, const char *text, size_t len, int32_t **out, int64_t *n,
                   const char *what, size_t pos, line_error *err) {
  int32_t *ids = NULL;
  size_t k = 0;
  char why[400];
  if (!tg_tok_encode(tok, text, len, &ids, &k, why, sizeof why)) {
    err->pos = pos;
    snprintf(err->msg, sizeof err->msg, "%s cannot be encoded: %s", what, why);
    return false;
  }
  *out = tg_alloc(a, sizeof **out * (k + 1));
  if (k) memcpy(*out, ids, k * sizeof *ids);
  free(ids);
  *n = (int64_t)k;
  return true;
}

/* One line's example; false with err.  The JSON's own tree lives in tmp,
 * the example's tokens in keep. */
static bool parse_line(tg_arena *tmp, tg_arena *keep, tg_tokenizer *tok, const char *text, size_t len,
                       tg_hellaswag_example *ex, line_error *err) {
  tg_json_error je;
  tg_json *o = tg_json_parse(tmp, text, len, NULL, &je);
  if (!o) {
    err->pos = je.pos;
    snprintf(err->msg, sizeof err->msg, "the line is not JSON: %s (each line of a HellaSwag file is one JSON object)",
             je.msg);
    return false;
  }
  if (o->kind != TG_JSON_OBJECT) return refuse(err, 0, "the line is not a JSON object (HellaSwag's lines are objects "
                                                       "with ctx, endings and label)");
  const tg_json *ctx = tg_json_get(o, "ctx"), *endings = tg_json_get(o, "endings"), *label = tg_json_get(o, "label");
  const char *missing = !ctx ? "ctx" : !endings ? "endings" : !label ? "label" : NULL;
  if (missing) {
    err->pos = 0;
    snprintf(err->msg, sizeof err->msg, "the example has no field '%s' (HellaSwag's lines have ctx, endings and "
             "label)", missing);
    return false;
  }
  if (ctx->kind != TG_JSON_STRING)
    return refuse(err, ctx->pos, tg_sprintf(tmp, "ctx is %s, not a string", tg_json_kind_name(ctx->kind)));
  if (endings->kind != TG_JSON_ARRAY || endings->n != TG_HELLASWAG_ENDINGS)
    return refuse(err, endings->pos,
                  endings->kind != TG_JSON_ARRAY
                      ? tg_sprintf(tmp, "endings is %s, not an array of 4 strings", tg_json_kind_name(endings->kind))
                      : tg_sprintf(tmp, "endings has %zu entries, not 4", endings->n));
  if (label->kind != TG_JSON_INT || label->u.i < 0 || label->u.i >= TG_HELLASWAG_ENDINGS)
    return refuse(err, label->pos,
                  label->kind == TG_JSON_INT
                      ? tg_sprintf(tmp, "label is %lld, out of range: it indexes the 4 endings, 0 to 3",
                                   (long long)label->u.i)
                      : tg_sprintf(tmp, "label is %s, not a whole number from 0 to 3", tg_json_kind_name(label->kind)));
  ex->label = (int)label->u.i;
  int32_t *ctx_ids;
  if (!encode(keep, tok, ctx->u.s, ctx->n, &ctx_ids, &ex->ctx_len, "ctx", ctx->pos, err)) return false;
  if (ex->ctx_len == 0) return refuse(err, ctx->pos, "ctx is empty: the first ending token needs a context to be "
                                                     "predicted from");
  for (int b = 0; b < TG_HELLASWAG_ENDINGS; b++) {
    const tg_json *e = &endings->u.items[b];
    if (e->kind != TG_JSON_STRING)
      return refuse(err, e->pos, tg_sprintf(tmp, "ending %d is %s, not a string", b, tg_json_kind_name(e->kind)));
    /* " " + ending, as llm.c: GPT-2's BPE attaches the space to the word */
    char *spaced = tg_alloc(tmp, e->n + 2);
    spaced[0] = ' ';
    memcpy(spaced + 1, e->u.s, e->n);
    int32_t *end_ids;
    int64_t k;
    if (!encode(tmp, tok, spaced, e->n + 1, &end_ids, &k, tg_sprintf(tmp, "ending %d", b), e->pos, err)) return false;
    ex->len[b] = ex->ctx_len + k;
    ex->rows[b] = tg_alloc(keep, sizeof *ex->rows[b] * (size_t)ex->len[b]);
    memcpy(ex->rows[b], ctx_ids, sizeof *ctx_ids * (size_t)ex->ctx_len);
    memcpy(ex->rows[b] + ex->ctx_len, end_ids, sizeof *end_ids * (size_t)k);
  }
  return true;
}

static bool blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
  return true;
}

const tg_hellaswag *tg_hellaswag_load(tg_ctx *ctx, const char *path, tg_tokenizer *tok, int64_t limit,
                                      const char *what_for) {
  tg_loc at = {path, 0, 0};
  if (tg_tok_kind_of(tok) != TG_TOK_GPT2)
    tg_error(ctx, at, "%s %s: HellaSwag is scored with GPT-2's BPE tokenizer, and this model's is the %s tokenizer "
             "(%s, %d ids): a model trained on GPT-2's BPE (tgrun prepare with its encoder.json and vocab.bpe) is "
             "needed", what_for, path, tg_tok_kind_name(tg_tok_kind_of(tok)), tg_tok_source(tok),
             tg_tok_vocab_size(tok));
  char *text = NULL, why[1024];
  size_t size = 0;
  if (!tg_read_whole_file(path, &text, &size, why, sizeof why)) tg_error(ctx, at, "%s: %s", what_for, why);
  /* the file's bytes go into the arena, so that an error below frees them with it */
  char *bytes = tg_alloc(ctx->arena, size + 1);
  memcpy(bytes, text, size);
  free(text);
  int64_t lines = 0;
  for (size_t i = 0; i < size; i++) lines += bytes[i] == '\n';
  tg_hellaswag *h = tg_alloc(ctx->arena, sizeof *h);
  h->path = tg_strdup(ctx->arena, path);
  h->ex = tg_alloc(ctx->arena, sizeof *h->ex * (size_t)(lines + 1));
  int64_t line = 0;
  for (size_t i = 0; i < size && (limit <= 0 || h->n < limit);) {
    size_t end = i;
    while (end < size && bytes[end] != '\n') end++;
    line++;
    if (!blank(bytes + i, end - i)) {
      tg_arena *tmp = tg_arena_new();
      line_error err = {0};
      tg_hellaswag_example *ex = &h->ex[h->n];
      ex->line = line;
      bool ok = parse_line(tmp, ctx->arena, tok, bytes + i, end - i, ex, &err);
      tg_arena_free(tmp);
      if (!ok) tg_error(ctx, (tg_loc){h->path, (int)line, (int)err.pos + 1}, "%s", err.msg);
      for (int b = 0; b < TG_HELLASWAG_ENDINGS; b++)
        if (ex->len[b] > h->longest) h->longest = ex->len[b], h->longest_line = line;
      h->n++;
    }
    i = end + 1;
  }
  if (h->n == 0) tg_error(ctx, at, "%s %s holds no examples (HellaSwag's jsonl: one JSON object a line)", what_for, path);
  return h;
}

void tg_hellaswag_score(const tg_hellaswag_example *ex, const float *logits, int64_t T, int64_t Vp, int64_t V,
                        tg_hellaswag_scores *out) {
  for (int b = 0; b < TG_HELLASWAG_ENDINGS; b++) {
    double sum = 0;
    /* the logits at t predict the token at t + 1 */
    for (int64_t t = ex->ctx_len - 1; t + 1 < ex->len[b]; t++) {
      const float *row = logits + ((int64_t)b * T + t) * Vp;
      double m = -INFINITY, z = 0;
      for (int64_t v = 0; v < V; v++) m = row[v] > m ? row[v] : m;
      for (int64_t v = 0; v < V; v++) z += exp((double)row[v] - m);
      sum += log(z) + m - (double)row[ex->rows[b][t + 1]];
    }
    out->tokens[b] = ex->len[b] - ex->ctx_len;
    out->sum[b] = sum;
    out->avg[b] = out->tokens[b] > 0 ? sum / (double)out->tokens[b] : 0;
  }
  out->pred = out->pred_norm = 0;
  for (int b = 1; b < TG_HELLASWAG_ENDINGS; b++) {
    if (out->sum[b] < out->sum[out->pred]) out->pred = b;
    if (out->avg[b] < out->avg[out->pred_norm]) out->pred_norm = b;
  }
}

static void write_example(FILE *f, const tg_hellaswag_example *ex, const tg_hellaswag_scores *s) {
  fprintf(f, "{\"line\":%lld,\"label\":%d,\"pred\":%d,\"pred_norm\":%d", (long long)ex->line, ex->label, s->pred,
          s->pred_norm);
  const char *keys[3] = {"sum_loss", "avg_loss", "tokens"};
  for (int k = 0; k < 3; k++) {
    fprintf(f, ",\"%s\":[", keys[k]);
    for (int b = 0; b < TG_HELLASWAG_ENDINGS; b++) {
      if (b) fputc(',', f);
      if (k == 2) fprintf(f, "%lld", (long long)s->tokens[b]);
      else fprintf(f, "%.9g", k == 0 ? s->sum[b] : s->avg[b]);
    }
    fputc(']', f);
  }
  fputs("}\n", f);
}

tg_hellaswag_result tg_hellaswag_run(tg_ctx *ctx, const tg_hellaswag *h, tg_exec *e, int64_t V, float *logits,
                                     FILE *per_example) {
  const tg_graph *g = tg_exec_graph(e);
  const tg_node *lg = tg_graph_output(g, TG_OUTPUT_LOGITS);
  const tg_node *idx_n = tg_graph_leaf(g, TG_OP_input, TG_INPUT_IDX);
  const tg_node *tgt_n = tg_graph_leaf(g, TG_OP_input, TG_INPUT_TARGETS);
  if (!lg || !idx_n || lg->type.rank != 3 || idx_n->type.rank != 2 ||
      idx_n->type.dim[0].size != TG_HELLASWAG_ENDINGS || idx_n->type.dim[1].size < h->longest)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "internal: the HellaSwag graph is not the forward at B = 4, T >= %lld "
             "with its logits", (long long)h->longest);
  int64_t T = idx_n->type.dim[1].size, Vp = lg->type.dim[2].size;
  size_t bt = (size_t)(TG_HELLASWAG_ENDINGS * T);
  /* in the arena (4 x T each): an error in a run (longjmp) must not leak them */
  int32_t *idx = tg_alloc(ctx->arena, sizeof *idx * bt), *tgt = tg_alloc(ctx->arena, sizeof *tgt * bt);
  tg_tensor *idx_t = tg_exec_leaf(e, idx_n), *tgt_t = tgt_n ? tg_exec_leaf(e, tgt_n) : NULL;
  tg_hellaswag_result res = {0};
  for (int64_t i = 0; i < h->n; i++) {
    const tg_hellaswag_example *ex = &h->ex[i];
    memset(idx, 0, sizeof *idx * bt); /* padding: token 0, never scored */
    memset(tgt, 0, sizeof *tgt * bt);
    for (int b = 0; b < TG_HELLASWAG_ENDINGS; b++) {
      memcpy(idx + b * T, ex->rows[b], sizeof *idx * (size_t)ex->len[b]);
      /* the targets only feed the model's loss output, which nothing reads */
      memcpy(tgt + b * T, ex->rows[b] + 1, sizeof *tgt * (size_t)(ex->len[b] - 1));
    }
    tg_tensor_write(idx_t, idx, TG_HOST_I32);
    if (tgt_t) tg_tensor_write(tgt_t, tgt, TG_HOST_I32);
    tg_exec_run(ctx, e);
    if (!tg_exec_read(e, lg, logits, TG_HOST_F32))
      tg_error(ctx, lg->loc, "internal: the logits are not in memory after the forward");
    tg_hellaswag_scores s;
    tg_hellaswag_score(ex, logits, T, Vp, V, &s);
    res.correct += s.pred == ex->label;
    res.correct_norm += s.pred_norm == ex->label;
    if (per_example) write_example(per_example, ex, &s);
  }
  res.n = h->n;
  res.acc = (double)res.correct / (double)res.n;
  res.acc_norm = (double)res.correct_norm / (double)res.n;
  return res;
}

void tg_hellaswag_expose_logits(tg_ctx *ctx, tg_graph *g, const char *model_path) {
  tg_node *logits = NULL;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->name && !strcmp(g->nodes[i]->name, TG_OUTPUT_LOGITS) && g->nodes[i]->phase == TG_PHASE_FORWARD)
      logits = g->nodes[i];
  if (!logits) tg_error(ctx, (tg_loc){model_path, 1, 1}, "the model names no value 'logits' [B, T, vocab]");
  tg_graph_add_output(g, TG_OUTPUT_LOGITS, logits);
}
