/* hf.h: Hugging Face's GPT-2 files as tg reads and writes them.
 *
 * Hugging Face saves GPT-2 two ways: GPT2Model's state dict (wte.weight,
 * h.0.ln_1.weight, ...: the names of models/gpt2.tg) and GPT2LMHeadModel's
 * (the same under "transformer.", plus "lm_head.weight", which is wte
 * itself since the head is tied).  Older saves also hold each layer's
 * causal mask as buffers.  This module knows those conventions, and what a
 * weights file says about the size of its model: the dimensions that
 * tgrun takes from the file when nothing else sets them
 * (docs/tgrun.md#hugging-face-gpt-2).  The weights loader (weights.c) and
 * the export (hf_export.c) use it; it reads files but loads no weights. */
#ifndef TG_HF_H
#define TG_HF_H

#include "ir.h"
#include "safetensors.h"

#define TG_HF_PREFIX "transformer."
#define TG_HF_LM_HEAD "lm_head.weight"
/* models/std.tg's layernorm adds 1e-5 to the variance (torch.nn.LayerNorm's
 * default, GPT2Config's layer_norm_epsilon); tests/torch/run_hf_transformers.sh checks
 * that std.tg still says so. */
#define TG_HF_LAYERNORM_EPS "1e-05"

/* name without GPT2LMHeadModel's "transformer." prefix (a pointer into
 * name); name itself when it has none. */
const char *tg_hf_param_name(const char *name);

/* A buffer Hugging Face saves beside the parameters that is no parameter:
 * "h.N.attn.bias" and "h.N.attn.masked_bias" (the causal mask, which a
 * model written from primitives builds itself).  name without the prefix. */
bool tg_hf_is_buffer(const char *name);

/* One dimension of a model: a config constant's name as gpt2.tg has it
 * (n_layer, n_head, n_embd, vocab, block_size, or any constant of a tg
 * checkpoint's config), its value, and where it came from, for messages
 * ("w.safetensors (wte.weight [50257, 768])", "train.cfg:4 (model.n_layer)"). */
typedef struct tg_hf_dim {
  const char *name;
  double value;
  const char *from;
} tg_hf_dim;

enum { TG_HF_MAX_DIMS = 64 };

typedef struct tg_hf_dims {
  tg_hf_dim d[TG_HF_MAX_DIMS];
  int n;
} tg_hf_dims;

/* The dimensions a weights file shows (strings in ctx's arena):
 *   vocab and n_embd from wte.weight's shape, block_size from wpe.weight's,
 *   n_layer from the layers h.0 .. h.N-1 present (names with or without
 *   the prefix);
 *   every constant of the "config" in a tg file's __metadata__ (tg's
 *   checkpoints and weights files record it; n_head is only there);
 *   n_head (and the others, cross-checked) from a config.json beside the
 *   file (Hugging Face's GPT2Config: n_layer, n_head, n_embd, vocab_size,
 *   n_positions), when there is one.
 * Two sources that disagree are an error naming both.  A file that shows
 * nothing (not GPT-2's names, no metadata) gives no dimensions.  Bails
 * through ctx on an unreadable file or config.json. */
void tg_hf_dims_of_file(tg_ctx *ctx, const char *path, tg_hf_dims *out);

/* The same from a file already read (config.json is looked for beside
 * f->path). */
void tg_hf_dims_of(tg_ctx *ctx, const tg_st_file *f, tg_hf_dims *out);

/* The dimension called name, or NULL. */
const tg_hf_dim *tg_hf_dims_get(const tg_hf_dims *d, const char *name);

/* Checks settings made by the user (-D, model.NAME, the tokenizer's
 * vocabulary) against the file's dimensions: the first that differs is an
 * error naming both values and where each came from.  Call it before
 * compiling. */
void tg_hf_dims_check(tg_ctx *ctx, const tg_hf_dims *file, const tg_hf_dim *set, int n_set);

/* The GPT2Config that describes a model, as config.json text (malloc'ed):
 * model_type gpt2, architectures GPT2LMHeadModel, the sizes, gelu_new,
 * layer_norm_epsilon TG_HF_LAYERNORM_EPS, tied embeddings.  eot: the
 * tokenizer's end-of-text id (GPT-2's BPE: 50256), bos_token_id and
 * eos_token_id; negative where the tokenizer has none (char, or unknown):
 * both null, which GPT2Config takes. */
char *tg_hf_config_json(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t vocab,
                        int64_t block_size, int64_t eot);

#endif
