/* hf.c: Hugging Face's GPT-2 conventions (hf.h): names, buffers, the
 * dimensions a weights file shows, config.json.
 *
 * The dimensions are read before a model is compiled, so that a file of
 * another size is reported at once with both numbers, instead of as a
 * tensor of the wrong shape after the whole compile, and so that a file's
 * model needs no -D or model.NAME lines to be loaded at all. */
#include "hf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "file.h"
#include "json.h"
#include "sbuf.h"

const char *tg_hf_param_name(const char *name) {
  size_t n = strlen(TG_HF_PREFIX);
  return strncmp(name, TG_HF_PREFIX, n) == 0 && name[n] ? name + n : name;
}

/* "h.N." at name: N's value and the rest after the dot; false otherwise. */
static bool layer_of(const char *name, long *layer, const char **rest) {
  if (strncmp(name, "h.", 2) != 0) return false;
  const char *p = name + 2;
  if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return false;
  long v = 0;
  while (*p >= '0' && *p <= '9') {
    if (v > 1000000) return false;
    v = v * 10 + (*p++ - '0');
  }
  if (*p != '.') return false;
  *layer = v;
  *rest = p + 1;
  return true;
}

bool tg_hf_is_buffer(const char *name) {
  long layer;
  const char *rest;
  return layer_of(name, &layer, &rest) && (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias"));
}

/* ---- dimensions ---------------------------------------------------------- */

const tg_hf_dim *tg_hf_dims_get(const tg_hf_dims *d, const char *name) {
  for (int i = 0; i < d->n; i++)
    if (!strcmp(d->d[i].name, name)) return &d->d[i];
  return NULL;
}

static const char *num(char *buf, size_t n, double v) {
  if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, n, "%lld", (long long)v);
  else snprintf(buf, n, "%.17g", v);
  return buf;
}

/* Adds a dimension; the same name with another value is an error naming
 * both sources. */
static void put(tg_ctx *ctx, const char *path, tg_hf_dims *out, const char *name, double v, const char *from) {
  const tg_hf_dim *have = tg_hf_dims_get(out, name);
  if (have) {
    if (have->value == v) return;
    char a[40], b[40];
    tg_error(ctx, (tg_loc){path, 0, 0}, "the file's sizes disagree: %s is %s in %s but %s in %s", name,
             num(a, sizeof a, have->value), have->from, num(b, sizeof b, v), from);
  }
  if (out->n == TG_HF_MAX_DIMS)
    tg_error(ctx, (tg_loc){path, 0, 0}, "more than %d config constants in the file's metadata", TG_HF_MAX_DIMS);
  out->d[out->n++] = (tg_hf_dim){tg_strdup(ctx->arena, name), v, from};
}

/* A tensor by its tg name, stored with or without the prefix. */
static const tg_st_tensor *find_param(tg_ctx *ctx, const tg_st_file *f, const char *name) {
  const tg_st_tensor *t = tg_st_find(f, name);
  return t ? t : tg_st_find(f, tg_sprintf(ctx->arena, TG_HF_PREFIX "%s", name));
}

static void from_shapes(tg_ctx *ctx, const tg_st_file *f, tg_hf_dims *out) {
  char s[256];
  const tg_st_tensor *wte = find_param(ctx, f, "wte.weight"), *wpe = find_param(ctx, f, "wpe.weight");
  if (wte && wte->rank == 2) {
    const char *from = tg_sprintf(ctx->arena, "%s (%s %s)", f->path, wte->name,
                                  tg_st_shape_str(wte->shape, 2, s, sizeof s));
    put(ctx, f->path, out, "vocab", (double)wte->shape[0], from);
    put(ctx, f->path, out, "n_embd", (double)wte->shape[1], from);
  }
  if (wpe && wpe->rank == 2)
    put(ctx, f->path, out, "block_size", (double)wpe->shape[0],
        tg_sprintf(ctx->arena, "%s (%s %s)", f->path, wpe->name, tg_st_shape_str(wpe->shape, 2, s, sizeof s)));
  long top = -1;
  for (int i = 0; i < f->n_tensors; i++) {
    long layer;
    const char *rest;
    if (layer_of(tg_hf_param_name(f->tensors[i].name), &layer, &rest) && layer > top) top = layer;
  }
  if (top >= 0)
    put(ctx, f->path, out, "n_layer", (double)(top + 1),
        tg_sprintf(ctx->arena, "%s (layers h.0 .. h.%ld)", f->path, top));
}

/* "n_layer=1 n_head=2 ...": the config a tg file records (checkpoint.c). */
static void from_config_text(tg_ctx *ctx, const tg_st_file *f, tg_hf_dims *out) {
  const char *text = tg_st_meta_get(f, "config");
  if (!text) return;
  const char *from = tg_sprintf(ctx->arena, "%s (its __metadata__ config)", f->path);
  for (const char *p = text; *p;) {
    while (*p == ' ') p++;
    size_t len = strcspn(p, " ");
    if (!len) break;
    const char *eq = memchr(p, '=', len);
    char name[128];
    char *end = NULL;
    double v = eq ? strtod(eq + 1, &end) : 0;
    if (!eq || (size_t)(eq - p) >= sizeof name || eq == p || end != p + len)
      tg_error(ctx, (tg_loc){f->path, 0, 0}, "__metadata__ config '%s': expected NAME=NUMBER items", text);
    snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
    put(ctx, f->path, out, name, v, from);
    p += len;
  }
}

static char *dir_of(tg_ctx *ctx, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return tg_strdup(ctx->arena, ".");
  if (slash == path) return tg_strdup(ctx->arena, "/");
  return tg_sprintf(ctx->arena, "%.*s", (int)(slash - path), path);
}

/* The JSON value as config.json has it, for messages: "relu", 1e-06, false. */
static const char *json_text(tg_ctx *ctx, const tg_json *v) {
  char b[40];
  switch (v->kind) {
  case TG_JSON_NULL: return "null";
  case TG_JSON_FALSE: return "false";
  case TG_JSON_TRUE: return "true";
  case TG_JSON_INT: return tg_sprintf(ctx->arena, "%lld", (long long)v->u.i);
  case TG_JSON_REAL: return tg_strdup(ctx->arena, num(b, sizeof b, v->u.d));
  case TG_JSON_STRING: return tg_sprintf(ctx->arena, "\"%.60s\"", v->u.s);
  default: return v->kind == TG_JSON_ARRAY ? "an array" : "an object";
  }
}

/* The GPT2Config fields that change the function a model computes, beyond
 * its sizes: each either matches what models/gpt2.tg and std.tg compute, or
 * the file is refused naming the field, its value and the difference.
 * Loading such a model as standard GPT-2 would train it, sample from it
 * and export it (with gelu_new, 1e-05, tied embeddings) as another model
 * without a word.  Left alone: the dropouts (attn_pdrop, resid_pdrop,
 * embd_pdrop: training only, and tg trains without dropout, as GPT-2 is
 * fine-tuned often), reorder_and_upcast_attn (it only moves the scaling
 * before the product and computes the scores in f32, which tg's attention
 * does in every precision: the same function), and fields of other heads
 * or of generation (summary_*, bos/eos_token_id, use_cache). */
static void check_function_fields(tg_ctx *ctx, const char *path, const tg_json *root, const tg_hf_dims *dims) {
  tg_loc at = {path, 0, 0};
  const tg_json *v = tg_json_get(root, "activation_function");
  if (v && (v->kind != TG_JSON_STRING ||
            (strcmp(v->u.s, "gelu_new") && strcmp(v->u.s, "gelu_pytorch_tanh") && strcmp(v->u.s, "gelu_fast"))))
    tg_error(ctx, at,
             "activation_function is %s, but tg's GPT-2 computes GELU's tanh approximation (std.tg's gelu: "
             "\"gelu_new\", also called \"gelu_pytorch_tanh\")%s: this model cannot be loaded as it is",
             json_text(ctx, v),
             v->kind == TG_JSON_STRING && !strcmp(v->u.s, "gelu") ? "; \"gelu\" is the exact erf form, another function"
                                                                   : "");
  v = tg_json_get(root, "layer_norm_epsilon");
  double eps = atof(TG_HF_LAYERNORM_EPS);
  if (v && !((v->kind == TG_JSON_REAL && v->u.d == eps) || (v->kind == TG_JSON_INT && (double)v->u.i == eps)))
    tg_error(ctx, at,
             "layer_norm_epsilon is %s, but std.tg's layernorm adds %s to the variance: this model cannot be loaded "
             "as it is",
             json_text(ctx, v), TG_HF_LAYERNORM_EPS);
  static const struct {
    const char *key;
    bool want;
    const char *meaning;
  } flags[] = {
      {"scale_attn_weights", true, "tg's attention divides the scores by sqrt(n_embd / n_head)"},
      {"scale_attn_by_inverse_layer_idx", false, "tg's attention does not divide layer i's scores by i + 1"},
      {"tie_word_embeddings", true, "tg's GPT-2 ties the output head to wte.weight; an untied lm_head would be dropped"},
      {"add_cross_attention", false, "tg's GPT-2 has no cross-attention layers"},
  };
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
    v = tg_json_get(root, flags[i].key);
    if (v && v->kind != (flags[i].want ? TG_JSON_TRUE : TG_JSON_FALSE))
      tg_error(ctx, at, "%s is %s, but %s: this model cannot be loaded as it is (tg needs %s)", flags[i].key,
               json_text(ctx, v), flags[i].meaning, flags[i].want ? "true" : "false");
  }
  v = tg_json_get(root, "n_inner");
  const tg_hf_dim *embd = tg_hf_dims_get(dims, "n_embd");
  if (v && v->kind != TG_JSON_NULL && !(v->kind == TG_JSON_INT && embd && (double)v->u.i == 4 * embd->value))
    tg_error(ctx, at,
             "n_inner is %s, but tg's GPT-2 has an MLP 4 * n_embd wide (%s): this model cannot be loaded as it is",
             json_text(ctx, v), embd ? tg_sprintf(ctx->arena, "%.0f", 4 * embd->value) : "n_embd unknown");
}

/* A GPT2Config's sizes, from config.json beside the file. */
static void from_config_json(tg_ctx *ctx, const tg_st_file *f, tg_hf_dims *out) {
  const char *path = tg_sprintf(ctx->arena, "%s/config.json", dir_of(ctx, f->path));
  struct stat st;
  if (stat(path, &st) != 0) return;
  char *text = NULL, why[512];
  size_t len = 0;
  if (!tg_read_whole_file(path, &text, &len, why, sizeof why)) tg_error(ctx, (tg_loc){path, 0, 0}, "%s", why);
  tg_json_error err;
  tg_json_opts jo = {.max_depth = 16, .max_values = 100000};
  const tg_json *root = tg_json_parse(ctx->arena, text, len, &jo, &err);
  free(text);
  if (!root) tg_error(ctx, (tg_loc){path, 0, 0}, "not valid JSON: %s at byte %zu", err.msg, err.pos);
  if (root->kind != TG_JSON_OBJECT) tg_error(ctx, (tg_loc){path, 0, 0}, "expected a JSON object (a GPT2Config)");
  const tg_json *type = tg_json_get(root, "model_type");
  if (type && (type->kind != TG_JSON_STRING || strcmp(type->u.s, "gpt2")))
    tg_error(ctx, (tg_loc){path, 0, 0},
             "model_type is not \"gpt2\": this config.json beside %s describes another kind of model (move one of "
             "the two files elsewhere)",
             f->path);
  static const char *const keys[][2] = {{"n_layer", "n_layer"},   {"n_head", "n_head"},
                                        {"n_embd", "n_embd"},     {"vocab_size", "vocab"},
                                        {"n_positions", "block_size"}};
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    const tg_json *v = tg_json_get(root, keys[k][0]);
    if (!v) continue;
    if (v->kind != TG_JSON_INT || v->u.i < 1 || v->u.i > ((int64_t)1 << 40))
      tg_error(ctx, (tg_loc){path, 0, 0}, "%s is not a positive integer", keys[k][0]);
    put(ctx, f->path, out, keys[k][1], (double)v->u.i, tg_sprintf(ctx->arena, "%s (%s)", path, keys[k][0]));
  }
  check_function_fields(ctx, path, root, out);
}

void tg_hf_dims_of(tg_ctx *ctx, const tg_st_file *f, tg_hf_dims *out) {
  out->n = 0;
  from_shapes(ctx, f, out);
  from_config_text(ctx, f, out);
  from_config_json(ctx, f, out);
}

void tg_hf_dims_of_file(tg_ctx *ctx, const char *path, tg_hf_dims *out) {
  tg_st_file *f = tg_st_read(ctx, path);
  jmp_buf here, *outer = ctx->bail;
  ctx->bail = &here;
  if (setjmp(here)) {
    ctx->bail = outer;
    tg_st_free(f);
    tg_bail(ctx);
  }
  tg_hf_dims_of(ctx, f, out);
  ctx->bail = outer;
  tg_st_free(f);
}

void tg_hf_dims_check(tg_ctx *ctx, const tg_hf_dims *file, const tg_hf_dim *set, int n_set) {
  for (int i = 0; i < n_set; i++) {
    const tg_hf_dim *have = tg_hf_dims_get(file, set[i].name);
    if (!have || have->value == set[i].value) continue;
    char a[40], b[40];
    tg_error(ctx, (tg_loc){set[i].from, 0, 0},
             "%s = %s here, but the weights are of a model with %s = %s (%s): remove this setting (the file's "
             "value is used) or use weights of the size you set",
             set[i].name, num(a, sizeof a, set[i].value), set[i].name, num(b, sizeof b, have->value), have->from);
  }
}

char *tg_hf_config_json(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t vocab, int64_t block_size,
                        int64_t eot) {
  tg_sbuf b = {0};
  char id[24] = "null";
  if (eot >= 0) snprintf(id, sizeof id, "%lld", (long long)eot);
  tg_sb_printf(&b,
                 "{\n"
                 "  \"activation_function\": \"gelu_new\",\n"
                 "  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
                 "  \"attn_pdrop\": 0.0,\n"
                 "  \"bos_token_id\": %s,\n"
                 "  \"embd_pdrop\": 0.0,\n"
                 "  \"eos_token_id\": %s,\n"
                 "  \"initializer_range\": 0.02,\n"
                 "  \"layer_norm_epsilon\": %s,\n"
                 "  \"model_type\": \"gpt2\",\n"
                 "  \"n_ctx\": %lld,\n"
                 "  \"n_embd\": %lld,\n"
                 "  \"n_head\": %lld,\n"
                 "  \"n_inner\": null,\n"
                 "  \"n_layer\": %lld,\n"
                 "  \"n_positions\": %lld,\n"
                 "  \"resid_pdrop\": 0.0,\n"
                 "  \"scale_attn_weights\": true,\n"
                 "  \"tie_word_embeddings\": true,\n"
                 "  \"torch_dtype\": \"float32\",\n"
                 "  \"vocab_size\": %lld\n"
                 "}\n",
                 id, id, TG_HF_LAYERNORM_EPS, (long long)block_size, (long long)n_embd, (long long)n_head,
                 (long long)n_layer, (long long)block_size, (long long)vocab);
  return tg_sb_take(&b);
}
