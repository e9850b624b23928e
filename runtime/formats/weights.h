/* weights.h: a model's parameters to and from safetensors files.
 *
 * Tensors are matched to the graph's parameters by name (Hugging Face's
 * GPT-2 names, as models/gpt2.tg declares them) and must have the
 * parameter's shape; F32, BF16 and F16 files are accepted and converted.
 * Hugging Face's other spellings are taken too (hf.h): GPT2LMHeadModel's
 * "transformer." prefix, its lm_head.weight when it equals wte.weight (the
 * model ties them; an lm_head that differs is an error), the attention
 * buffers h.N.attn.bias and h.N.attn.masked_bias (passed over with a
 * note); and, without with_state, a tg checkpoint's AdamW moments are
 * passed over.  A missing tensor, an extra one, a wrong shape or dtype is
 * an error that names the file and the tensor. */
#ifndef TG_WEIGHTS_H
#define TG_WEIGHTS_H

#include "ir.h"

/* The __metadata__ of every weights file tg writes: "format": "pt" (what
 * Hugging Face's loaders require), "tg_format": TG_WEIGHTS_FORMAT, and
 * "config": the model's constants (tg_weights_config_text). */
#define TG_WEIGHTS_FORMAT "tg-weights-1"

/* Per graph node (indexed by node id): the values of each param (and of
 * each state leaf when asked), as malloc'ed float arrays; NULL elsewhere. */
typedef struct tg_weights {
  const tg_graph *g;
  float **values;
} tg_weights;

/* Reads path; with with_state, the state leaves (optimizer moments) may be
 * in the file too and are loaded if present (zeros otherwise).  Bails
 * through ctx on any mismatch. */
tg_weights *tg_weights_load(tg_ctx *ctx, const tg_graph *g, const char *path, bool with_state);

/* Fresh values from each leaf's initialiser (tg_param_init) and seed. */
tg_weights *tg_weights_init(const tg_graph *g, uint64_t seed);

/* Writes the params (and, with with_state, the state leaves) in graph
 * order as F32, atomically.  Returns false with a message on failure. */
bool tg_weights_save(const tg_weights *w, const char *path, bool with_state, char *why,
                     size_t whylen);

void tg_weights_free(tg_weights *w);

/* g's config constants as files record them, "n_layer=1 n_head=2 n_embd=16
 * vocab=32 block_size=8" in the model's order: without B and T (they shape
 * no parameter and a run may change them), or, with batch, only those.
 * malloc'ed. */
char *tg_weights_config_text(const tg_graph *g, bool batch);

/* Files hold tensors at their true shape, the graph at its padded one
 * (passes/pad_vocab.c: wte.weight is [50304, 768] in the graph, [50257, 768]
 * in a file).  The one place that decides this: t's type with every padded
 * dim at its config size (tg_dim_unpadded); t itself when nothing is padded.
 * Weights, optimizer state and tgrun's gradients all go through it. */
void tg_file_type(const tg_graph *g, const tg_type *t, tg_type *out);

/* Copies the leading box the two shapes share (each dim's smaller size)
 * from src (shape `from`) to dst (shape `to`, same rank) and zeroes the rest
 * of dst: with `to` the larger it pads with zeros, with `to` the smaller it
 * crops. */
void tg_copy_box(const float *src, const tg_type *from, float *dst, const tg_type *to);

#endif
