/* export.c: `tgrun export` (export.h): a checkpoint as Hugging Face's
 * GPT-2 directory.
 *
 * It goes through the model rather than copying tensors by name, so that
 * what is exported is exactly what tgrun would train from the file: the
 * same loader (checkpoint.c, weights.c) with its checks, the model's
 * parameter set and shapes; only the front end runs, no pass and no
 * compiler, so it takes as long as reading and writing the file.
 *
 * The model is the one the checkpoint records (its "model" metadata, as
 * `tgrun sample` finds it), --model overriding; a file that names none (a
 * Hugging Face file, tgrun init's) is read as models/gpt2.tg.  Whatever the
 * model, it must compute what Hugging Face's GPT2LMHeadModel computes,
 * since config.json says GPT-2 and transformers builds GPT-2 from it: see
 * refuse_not_gpt2. */
#include "export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "file.h"
#include "generate.h"
#include "hf_export.h"
#include "json_text.h"
#include "safetensors.h"
#include "model_sizes.h"
#include "weights.h"
#include "program_dir.h"
#include "sbuf.h"
#include "tokenizer.h"

/* The files the export writes into out_dir: the model (hf_export.h), the
 * generation config, and the tokenizer: Hugging Face's GPT-2 BPE files
 * (vocab.json, merges.txt) or, for the char tokenizer, a tokenizer.json in
 * Hugging Face's `tokenizers` format (not tg's own tokenizer.json, which
 * `tgrun prepare` writes into a data directory); tokenizer_config.json
 * names the class AutoTokenizer makes. */
static const char *const written[] = {"model.safetensors", "config.json",    "generation_config.json",
                                      "vocab.json",        "merges.txt",     "tokenizer.json",
                                      "tokenizer_config.json"};
enum { n_written = sizeof written / sizeof *written };

/* An export must not replace what it reads: out_dir/model.safetensors
 * (or config.json) being the input itself, by any path, a link or a hard
 * link.  The same file is the same device and inode; the names are not
 * compared, since "d/./model.safetensors" and "d/model.safetensors" are one. */
static void refuse_own_input(tg_ctx *ctx, const tg_export_opts *o) {
  struct stat in, out;
  if (stat(o->checkpoint, &in) != 0) return; /* the loader says why it cannot be read */
  for (int i = 0; i < n_written; i++) {
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

/* A node's position in g (its id, which the front end keeps in order). */
static int pos_of(const tg_graph *g, const tg_node *n) {
  if (n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n) return n->id;
  for (int i = 0; n && i < g->n_nodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

static bool same_sizes(const tg_type *a, const tg_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i].size != b->dim[i].size) return false;
  return true;
}

/* Whether two nodes compute the same thing from the same operand positions:
 * op, operands, result type (sizes, not the constants' names) and the
 * attributes the op has.  The variable name, the location and a param's
 * initializer are no part of what the model computes and are ignored; a
 * leaf's name is (it is the tensor's name in the file, and an input's
 * role). */
static bool same_node(const tg_graph *ga, const tg_node *a, const tg_graph *gb, const tg_node *b) {
  if (a->op != b->op || a->nin != b->nin || !same_sizes(&a->type, &b->type)) return false;
  for (int i = 0; i < a->nin; i++)
    if (pos_of(ga, a->in[i]) != pos_of(gb, b->in[i])) return false;
  switch (tg_ops[a->op].attr) {
  case TG_ATTR_VALUE: return a->value == b->value || (a->value != a->value && b->value != b->value);
  case TG_ATTR_AXIS: return a->axis == b->axis;
  case TG_ATTR_RANKS: return a->ranks == b->ranks;
  case TG_ATTR_AXES: return a->axes == b->axes;
  case TG_ATTR_PERM: return !memcmp(a->perm, b->perm, sizeof a->perm);
  case TG_ATTR_SLICE: return a->axis == b->axis && a->start == b->start && a->len == b->len;
  case TG_ATTR_NAME: return !strcmp(a->name ? a->name : "", b->name ? b->name : "");
  case TG_ATTR_INIT: return !strcmp(a->name ? a->name : "", b->name ? b->name : "");
  case TG_ATTR_NONE:
  case TG_ATTR_DTYPE: return true;
  }
  return true;
}

static const char *describe(tg_ctx *ctx, const tg_node *n) {
  char ty[TG_TYPE_STR_MAX];
  return tg_sprintf(ctx->arena, "%s%s%s%s : %s at %s:%d:%d", tg_ops[n->op].name, n->name ? " '" : "",
                    n->name ? n->name : "", n->name ? "'" : "", tg_type_str(&n->type, ty, sizeof ty),
                    n->loc.file ? n->loc.file : "?", n->loc.line, n->loc.col);
}

/* config.json says GPT-2, and transformers builds GPT2LMHeadModel from it
 * whatever the weights were trained for: a model that computes anything
 * else (RMSNorm, SwiGLU, an untied head) would load with at most a warning
 * and generate garbage.  So the model must be GPT-2, judged by its graph,
 * not its file name: models/gpt2.tg (the GPT-2 that tests/torch checks
 * against transformers) is compiled with the same sizes, and the two front
 * end graphs must agree node for node: op, operands, shapes, attributes,
 * the names of parameters and inputs, the outputs.  This is the IR text
 * `tgc --emit ir` prints with the variable names, locations and
 * initializers left out, compared as structure rather than text.  A
 * parameter check alone (names, shapes, which are tied) would pass a model
 * with RMSNorm that kept LayerNorm's weight and bias, or GELU swapped for
 * ReLU; the graph comparison cannot be fooled so, and costs one more front
 * end run (no passes).  The parameters are compared first all the same,
 * since "no parameter h.0.ln_1.bias" says more than a node number.  Its
 * price: a GPT-2 written differently (x / 2 for x * 0.5, another order)
 * is refused too; models/gpt2.tg is the form to export. */
static void refuse_not_gpt2(tg_ctx *ctx, const tg_export_opts *o, const tg_graph *g, const tg_compile_opts *co) {
  const char *models = tg_program_models_dir();
  const char *ref_path = tg_sprintf(ctx->arena, "%s/gpt2.tg", models ? models : "models");
  tg_graph *ref = tg_compile_file(ctx, ref_path, co);
  if (!tg_verify(ctx, ref)) tg_bail(ctx);
  const char *what = NULL;
  for (int k = 0; k < ref->n_nodes && !what; k++) {
    const tg_node *p = ref->nodes[k];
    if (p->op != TG_OP_param) continue;
    const tg_node *q = tg_graph_leaf(g, TG_OP_param, p->name);
    char a[TG_TYPE_STR_MAX], b[TG_TYPE_STR_MAX];
    if (!q)
      what = tg_sprintf(ctx->arena, "GPT-2 has the parameter '%s' (%s), which the model lacks", p->name,
                        tg_type_str(&p->type, a, sizeof a));
    else if (!same_sizes(&p->type, &q->type))
      what = tg_sprintf(ctx->arena, "the parameter '%s' is %s in the model but %s in GPT-2", p->name,
                        tg_type_str(&q->type, a, sizeof a), tg_type_str(&p->type, b, sizeof b));
  }
  for (int k = 0; k < g->n_nodes && !what; k++) {
    const tg_node *q = g->nodes[k];
    if (q->op != TG_OP_param || tg_graph_leaf(ref, TG_OP_param, q->name)) continue;
    what = tg_sprintf(ctx->arena,
                      "the model has the parameter '%s', which GPT-2 lacks%s", q->name,
                      strstr(q->name, "head") ? " (an untied output head: GPT-2 ties its head to wte.weight, and "
                                                "transformers would drop this one)"
                                              : "");
  }
  int n = g->n_nodes < ref->n_nodes ? g->n_nodes : ref->n_nodes;
  for (int k = 0; k < n && !what; k++)
    if (!same_node(g, g->nodes[k], ref, ref->nodes[k]))
      what = tg_sprintf(ctx->arena, "the graphs part at node %%%d: the model computes %s where GPT-2 computes %s", k,
                        describe(ctx, g->nodes[k]), describe(ctx, ref->nodes[k]));
  if (!what && g->n_nodes != ref->n_nodes)
    what = tg_sprintf(ctx->arena, "the model's graph has %d nodes, GPT-2's %d (the first %d agree)", g->n_nodes,
                      ref->n_nodes, n);
  for (int i = 0; !what && i < (g->n_outputs > ref->n_outputs ? g->n_outputs : ref->n_outputs); i++)
    if (i >= g->n_outputs || i >= ref->n_outputs || strcmp(g->outputs[i].name, ref->outputs[i].name) ||
        pos_of(g, g->outputs[i].node) != pos_of(ref, ref->outputs[i].node))
      what = tg_sprintf(ctx->arena, "the model's outputs are not GPT-2's (output %d)", i);
  tg_graph_free(ref);
  if (what)
    tg_error(ctx, (tg_loc){g->source ? g->source : o->checkpoint, 0, 0},
             "not GPT-2: %s; the export writes Hugging Face's GPT2LMHeadModel, which would load these weights and "
             "compute something else (the graph is compared with %s at the same sizes)",
             what, ref_path);
}

static void write_text(tg_ctx *ctx, const tg_export_opts *o, const char *name, const char *text, size_t len) {
  char why[1024];
  const char *path = tg_sprintf(ctx->arena, "%s/%s", o->out_dir, name);
  if (!tg_write_file_atomic(path, text, len, why, sizeof why)) tg_error(ctx, (tg_loc){path, 0, 0}, "%s", why);
}

static void copy_file(tg_ctx *ctx, const tg_export_opts *o, const char *from, const char *name) {
  char why[1024], *text = NULL;
  size_t len = 0;
  if (!tg_read_whole_file(from, &text, &len, why, sizeof why)) tg_error(ctx, (tg_loc){from, 0, 0}, "%s", why);
  write_text(ctx, o, name, text, len);
  free(text);
}

/* The char tokenizer in Hugging Face's `tokenizers` format: a WordLevel
 * model over the characters (id i = the i-th piece), a pre-tokenizer that
 * makes each character a word of its own (a regex split isolating every
 * match of "any one character", newlines included), and the Fuse decoder,
 * which joins the pieces without the spaces WordLevel's default decoding
 * puts between words.  No added or special tokens: the char tokenizer has
 * none.  "<unk>" is not in the vocabulary, so a character the training
 * text did not have is an error, as in tg. */
static char *char_tokenizer_json(const tg_tokenizer *t) {
  tg_sbuf b = {0};
  tg_sb_puts(&b, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
                 "  \"added_tokens\": [],\n  \"normalizer\": null,\n"
                 "  \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"[\\\\s\\\\S]\"}, "
                 "\"behavior\": \"Isolated\", \"invert\": false},\n"
                 "  \"post_processor\": null,\n  \"decoder\": {\"type\": \"Fuse\"},\n"
                 "  \"model\": {\"type\": \"WordLevel\", \"unk_token\": \"<unk>\", \"vocab\": {");
  for (int32_t id = 0; id < tg_tok_vocab_size(t); id++) {
    size_t len = 0;
    const char *piece = tg_tok_piece(t, id, &len);
    tg_sb_puts(&b, id ? ",\n    " : "\n    ");
    tg_json_quote(&b, piece, len);
    tg_sb_printf(&b, ": %d", (int)id);
  }
  tg_sb_puts(&b, "\n  }}\n}\n");
  return tg_sb_take(&b);
}

/* The tokenizer the run trained with, for AutoTokenizer.from_pretrained,
 * and generation_config.json; the files of the other kind (an earlier
 * export's) are removed, so that the directory holds one tokenizer. */
static void write_tokenizer(tg_ctx *ctx, const tg_export_opts *o, const tg_tokenizer *t, int64_t block_size) {
  bool gpt2 = t && tg_tok_kind_of(t) == TG_TOK_GPT2;
  tg_sbuf b = {0};
  /* both: no clean-up of spaces (transformers' default would make " ." "."):
   * decode must give back the text as tg's tokenizer does */
  if (gpt2) {
    /* encoder.json and vocab.bpe are Hugging Face's vocab.json and merges.txt, byte for byte */
    const char *enc = tg_tok_source(t);
    const char *slash = strrchr(enc, '/');
    const char *bpe = slash ? tg_sprintf(ctx->arena, "%.*s/vocab.bpe", (int)(slash - enc), enc) : "vocab.bpe";
    copy_file(ctx, o, enc, "vocab.json");
    copy_file(ctx, o, bpe, "merges.txt");
    tg_sb_printf(&b,
                 "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"add_prefix_space\": false,\n"
                 "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
                 "  \"unk_token\": \"<|endoftext|>\",\n  \"clean_up_tokenization_spaces\": false,\n"
                 "  \"model_max_length\": %lld\n}\n",
                 (long long)block_size);
  } else if (t) {
    char *json = char_tokenizer_json(t);
    write_text(ctx, o, "tokenizer.json", json, strlen(json));
    free(json);
    tg_sb_printf(&b,
                 "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n"
                 "  \"clean_up_tokenization_spaces\": false,\n  \"model_max_length\": %lld\n}\n",
                 (long long)block_size);
  }
  static const char *const gpt2_files[] = {"vocab.json", "merges.txt"}, *const char_files[] = {"tokenizer.json"};
  for (int i = 0; i < 2 && (!t || !gpt2); i++) unlink(tg_sprintf(ctx->arena, "%s/%s", o->out_dir, gpt2_files[i]));
  if (!t || gpt2) unlink(tg_sprintf(ctx->arena, "%s/%s", o->out_dir, char_files[0]));
  if (t) write_text(ctx, o, "tokenizer_config.json", tg_sb_text(&b), strlen(tg_sb_text(&b)));
  else unlink(tg_sprintf(ctx->arena, "%s/tokenizer_config.json", o->out_dir));
  tg_sb_free(&b);
  /* generate() stops at the context length, past which GPT-2 has no
   * position; GPT-2's BPE starts and ends text with <|endoftext|> */
  if (gpt2)
    tg_sb_printf(&b, "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"max_length\": %lld\n}\n", TG_GPT2_EOT,
                 TG_GPT2_EOT, (long long)block_size);
  else
    tg_sb_printf(&b, "{\n  \"max_length\": %lld\n}\n", (long long)block_size);
  write_text(ctx, o, "generation_config.json", tg_sb_text(&b), strlen(tg_sb_text(&b)));
  tg_sb_free(&b);
}

/* --model, else the model the checkpoint records (as `tgrun sample`
 * finds it), else, for a file that records none, models/gpt2.tg. */
static const char *model_of(tg_ctx *ctx, const tg_export_opts *o) {
  if (o->model) return tg_model_file(ctx, o->model, "--model");
  tg_st_file *f = tg_st_read(ctx, o->checkpoint);
  const char *recorded = tg_st_meta_get(f, "model");
  recorded = recorded ? tg_strdup(ctx->arena, recorded) : NULL;
  tg_st_free(f);
  if (recorded)
    return tg_model_file(ctx, recorded, "the checkpoint's model (give --model if it has moved)");
  const char *models = tg_program_models_dir();
  return tg_sprintf(ctx->arena, "%s/gpt2.tg", models ? models : "models");
}

static int run(tg_ctx *ctx, const tg_export_opts *o, tg_graph **gp, tg_weights **wp, tg_tokenizer **tokp,
               int *lock_fd) {
  refuse_own_input(ctx, o);
  /* the file's sizes, then -D (the last of a name wins; they agree) */
  int n = 0;
  /* B and T are fixed (the export has no batch), so that a model whose
   * own defaults differ from gpt2.tg's still compares with it */
  static const tg_define one_row[2] = {{"B", 1, true, "the export (no batch)"}, {"T", 1, true, "the export (no batch)"}};
  tg_define *d = tg_model_sizes(ctx, o->checkpoint, one_row, 2, o->defines, o->n_defines, 0, &n);
  tg_compile_opts co = {d, n, o->include_dirs, o->n_include_dirs};
  *gp = tg_compile_file(ctx, model_of(ctx, o), &co);
  if (!tg_verify(ctx, *gp)) tg_bail(ctx);
  refuse_not_gpt2(ctx, o, *gp, &co);
  *wp = tg_ckpt_load(ctx, *gp, o->checkpoint, false, NULL);
  if (!*wp) tg_bail(ctx);
  refuse_non_finite(ctx, o, *gp, *wp);
  /* the tokenizer: --tokenizer, else the run's (as tgrun sample finds it);
   * a file with none beside it is exported without one */
  *tokp = tg_generate_tokenizer(ctx, o->checkpoint, o->tokenizer, o->tokenizer != NULL);
  double vocab = 0, block_size = 0;
  tg_graph_get_config(*gp, "vocab", &vocab);
  tg_graph_get_config(*gp, "block_size", &block_size);
  if (*tokp && tg_tok_vocab_size(*tokp) != (int32_t)vocab)
    tg_error(ctx, (tg_loc){o->checkpoint, 0, 0},
             "the model's vocab is %g but the tokenizer (%s) has %d ids: not the tokenizer it was trained with; "
             "name that one with --tokenizer",
             vocab, tg_tok_source(*tokp), (int)tg_tok_vocab_size(*tokp));
  bool gpt2 = *tokp && tg_tok_kind_of(*tokp) == TG_TOK_GPT2;
  *lock_fd = lock_out_dir(ctx, o);
  char why[1024];
  if (!tg_hf_export(o->out_dir, *gp, (*wp)->values, gpt2 ? TG_GPT2_EOT : -1, why, sizeof why))
    tg_error(ctx, (tg_loc){o->out_dir, 0, 0}, "%s", why);
  write_tokenizer(ctx, o, *tokp, (int64_t)block_size);
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
  if (*tokp)
    printf("wrote %s's %s tokenizer (%s) and generation_config.json\n", tg_tok_source(*tokp),
           tg_tok_kind_name(tg_tok_kind_of(*tokp)), gpt2 ? "vocab.json, merges.txt" : "tokenizer.json");
  else
    printf("wrote generation_config.json; no tokenizer: none beside %s (give --tokenizer to export one)\n",
           o->checkpoint);
  return 0;
}

int tg_export_run(const tg_export_opts *o) {
  tg_ctx *ctx = tg_ctx_new(stderr);
  /* what the run makes, freed after an error's longjmp too */
  tg_graph **gp = tg_xcalloc(1, sizeof *gp);
  tg_weights **wp = tg_xcalloc(1, sizeof *wp);
  tg_tokenizer **tokp = tg_xcalloc(1, sizeof *tokp);
  int *lock_fd = tg_xcalloc(1, sizeof *lock_fd);
  *lock_fd = -1;
  jmp_buf bail;
  ctx->bail = &bail;
  int status;
  if (setjmp(bail)) status = 1;
  else status = run(ctx, o, gp, wp, tokp, lock_fd);
  if (*lock_fd >= 0) close(*lock_fd); /* releases the lock; the file stays, harmlessly */
  free(lock_fd);
  if (*tokp) tg_tok_free(*tokp);
  free(tokp);
  tg_weights_free(*wp);
  if (*gp) tg_graph_free(*gp);
  free(gp);
  free(wp);
  tg_ctx_free(ctx);
  return status;
}
