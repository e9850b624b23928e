/* hf_export.h: a model's weights as a Hugging Face GPT-2 directory, which
 * transformers' GPT2LMHeadModel.from_pretrained(DIR) reads as it is:
 *   DIR/model.safetensors  the parameters only, F32, under
 *                          GPT2LMHeadModel's names ("transformer.wte.weight",
 *                          ...), at their true (unpadded) shapes, no
 *                          lm_head.weight (tied to wte, as save_pretrained
 *                          writes it), __metadata__ {"format": "pt"};
 *   DIR/config.json        the GPT2Config (hf.h: tg_hf_config_json).
 * (The tokenizer and generation_config.json are runtime/train/export.c's.)
 * Each file is written atomically, the weights first: a config.json is
 * only ever beside complete weights.  The model must have gpt2.tg's config
 * constants n_layer, n_head, n_embd, vocab and block_size. */
#ifndef TG_HF_EXPORT_H
#define TG_HF_EXPORT_H

#include "ir.h"

/* values: per node id, at the graph's shapes (a tg_weights's values).
 * eot: config.json's bos/eos token id, negative for none (hf.h).
 * Makes DIR if missing.  Returns false with a message in why. */
bool tg_hf_export(const char *dir, const tg_graph *g, float *const *values, int64_t eot, char *why,
                  size_t whylen);

#endif
