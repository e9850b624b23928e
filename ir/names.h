/* names.h: the names by which a graph meets the code that runs it.
 *
 * A model (.tg) declares its inputs and outputs, the passes add more
 * (gradients, the optimizer's inputs and state, the decode step's cache),
 * and the runtime binds its buffers to them, reads its results from them and
 * saves them in checkpoints.  Every one of those places spells the name from
 * here, so the contract is written once and a rename is one edit.  The
 * models (the .tg files under models/) must declare the model-side names as spelled here. */
#ifndef TG_NAMES_H
#define TG_NAMES_H

/* ---- inputs ------------------------------------------------------------- */

/* The token ids, i32 [B, T]: a model's input, and the batch files' tensor
 * that fills it (runtime/formats/batch.c). */
#define TG_INPUT_IDX "idx"
/* The next token of each position, i32 [B, T]: the loss's labels, and the
 * batch files' second tensor. */
#define TG_INPUT_TARGETS "targets"
/* The learning rate, an f32 scalar the adamw pass adds as an input, set by
 * the training loop each step. */
#define TG_INPUT_LR "lr"
/* The 1-based optimizer step number, an f32 scalar input the adamw pass
 * adds (Adam's bias corrections). */
#define TG_INPUT_STEP "step"
/* A ZeRO optimizer's sum of squares on a rank that holds no element of
 * any gradient: zeros, f32 [1], its part of the norm's all_reduce. */
#define TG_INPUT_NO_SQUARES "no_squares"
/* The decode step's token position, i32 [1], an input the decode pass adds
 * in place of the position table's iota. */
#define TG_INPUT_POS "pos"

/* ---- outputs ------------------------------------------------------------ */

/* The scalar training loss a model outputs; autodiff differentiates it. */
#define TG_OUTPUT_LOSS "loss"
/* The next-token logits [B, T, vocab]: the value of that name in a model's
 * forward, made an output for sampling and the decode step's only output. */
#define TG_OUTPUT_LOGITS "logits"
/* The global gradient norm before clipping, an f32 scalar output of the
 * adamw pass. */
#define TG_OUTPUT_GRAD_NORM "grad_norm"

/* ---- prefixes of names made per parameter or per layer ------------------- */

/* Autodiff's gradient outputs, one per parameter: "grad:wte.weight". */
#define TG_GRAD_PREFIX "grad:"
/* A parameter's bf16 copy, a state leaf the forward reads and the optimizer
 * rewrites each step (precision's weight copies): "bf16.wte.weight". */
#define TG_BF16_COPY_PREFIX "bf16."
/* ZeRO stage 3: this rank's shard of a weight leaf, an input leaf of the
 * model's graphs (passes/shard_params.c): "shard:wte.weight",
 * "shard:bf16.wte.weight". */
#define TG_SHARD_PREFIX "shard:"
/* AdamW's first and second moments, state leaves per parameter, and the
 * names checkpoints keep them under: "adam.m.wte.weight". */
#define TG_ADAM_M_PREFIX "adam.m."
#define TG_ADAM_V_PREFIX "adam.v."
/* The decode step's key and value caches, state leaves per attention layer
 * L in graph order: "kv.k.0", "kv.v.0". */
#define TG_DECODE_K_PREFIX "kv.k."
#define TG_DECODE_V_PREFIX "kv.v."

#endif
