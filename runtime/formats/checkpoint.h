/* checkpoint.h: training checkpoints, so that a run can stop and go on.
 *
 * A checkpoint is one safetensors file (docs/checkpoints.md):
 *   - every parameter under its name in the model (Hugging Face's GPT-2
 *     names for gpt2.tg), F32, at its FILE shape (tg_file_type: the padded
 *     vocabulary stays inside the graph), so any safetensors reader, and
 *     tgrun's --weights, can take the weights straight out of it;
 *   - every optimizer state leaf ("adam.m.NAME", "adam.v.NAME"), F32, at
 *     its file shape too;
 *   - in __metadata__: "format" = "pt" (Hugging Face's key: transformers
 *     loads the file as PyTorch weights), "tg_format" = "tg-checkpoint-1"
 *     (files of older tgs have it as "format", and are read), "step" (optimizer
 *     steps done), "data_position" (the data loader's, opaque, decimal),
 *     "seed", "config" (the model's constants without the batch ones, as
 *     "n_layer=4 n_head=4 ..."), "batch" ("B=12 T=64", for information),
 *     when given "model" (the .tg path) and "writer" ("tgrun 0.1.0"), and
 *     "data_sha256": the SHA-256 of the tensors' bytes in file order, which
 *     every reader here checks (a damaged checkpoint is passed over or
 *     refused; a file without the key, from an older tg, is read unchecked).
 *
 * The loader trusts nothing: the strict reader first, then the format tag,
 * the metadata, the config against the graph's, and every tensor (present,
 * known, F32 or, for parameters only, BF16/F16, right shape).  Errors name
 * the file and the tensor.
 *
 * A run directory keeps the last good checkpoint: ckpt.safetensors, and the
 * one before it, ckpt.prev.safetensors.  A crash at any moment of a save
 * leaves at least one of the two complete, and tg_ckpt_latest finds it. */
#ifndef TG_CHECKPOINT_H
#define TG_CHECKPOINT_H

#include "ir.h"
#include "weights.h"

#define TG_CKPT_FORMAT "tg-checkpoint-1"
#define TG_CKPT_FILE "ckpt.safetensors"
#define TG_CKPT_PREV_FILE "ckpt.prev.safetensors"

typedef struct tg_ckpt_meta {
  int64_t step;           /* optimizer steps done; >= 0 */
  uint64_t data_position; /* the data loader's position, opaque to the checkpoint */
  uint64_t seed;          /* the run's seed */
  const char *model;      /* the .tg path; save: optional (NULL: not written) */
  const char *config;     /* load: the checkpoint's config text; save: ignored, taken from g */
  const char *batch;      /* load: "B=12 T=64" or NULL; save: ignored, taken from g */
  const char *writer;     /* e.g. "tgrun 0.1.0"; optional both ways */
} tg_ckpt_meta;

/* g's config constants as a checkpoint records and compares them,
 * "n_layer=1 n_head=2 n_embd=16 vocab=32 block_size=8", in the model's
 * order; B and T are left out because they shape no parameter and a run
 * may change them (a sampling graph has B=1).  malloc'ed. */
char *tg_ckpt_config_text(const tg_graph *g);

/* Writes a checkpoint to path, atomically (tg_st_write: temporary file,
 * fsync, rename, fsync of the directory).  values is per graph node id,
 * as tg_weights's: float arrays at the GRAPH shape for every param and
 * every state leaf of g (a tg_weights's values will do).  Returns false
 * with a message in why (the old file, if any, is kept). */
bool tg_ckpt_save(const char *path, const tg_graph *g, float *const *values,
                  const tg_ckpt_meta *m, char *why, size_t whylen);

/* Reads path into values at g's graph shapes (padding zero), and the
 * metadata into *m (strings in ctx's arena; m may be NULL).
 *   need_state true (resume): path must be a tg checkpoint with every
 *     state leaf of g; a plain weights file is refused with "... has no
 *     optimizer state: use init_from ...".
 *   need_state false (init_from, sampling): the weights only; state leaves
 *     get zeros.  A plain weights file (Hugging Face's model.safetensors,
 *     tgrun init's output) is handed to tg_weights_load, and *m is zero
 *     (step 0) with NULL strings.
 * Reports the first problem through ctx (naming the file and the tensor)
 * and returns NULL; does not bail (it sets its own ctx->bail meanwhile). */
tg_weights *tg_ckpt_load(tg_ctx *ctx, const tg_graph *g, const char *path, bool need_state,
                         tg_ckpt_meta *m);

/* Saves into the run directory dir (which must exist): renames an
 * existing DIR/ckpt.safetensors to DIR/ckpt.prev.safetensors (replacing
 * the older one), then writes DIR/ckpt.safetensors atomically.  So a crash
 * before the rename leaves both, one during the write leaves prev, and
 * one after leaves both again.  Temporary files that an earlier, crashed
 * process left behind (ckpt.safetensors.tmp.PID) are removed first. */
bool tg_ckpt_save_in_dir(const char *dir, const tg_graph *g, float *const *values,
                         const tg_ckpt_meta *m, char *why, size_t whylen);

/* The newest complete checkpoint in dir, as a malloc'ed path: ckpt.safetensors
 * if the strict reader accepts it and it has the format tag, else
 * ckpt.prev.safetensors on the same terms, else NULL.  Reads each
 * candidate whole; a candidate passed over is reported through ctx as a
 * note, with the reason.  NULL is not an error: the caller decides. */
char *tg_ckpt_latest(tg_ctx *ctx, const char *dir);

/* The step of the checkpoint tg_ckpt_load_latest would resume from, read
 * without a graph, so that a run can check it before compiling anything
 * (resuming with max_steps at or below it has nothing to do); -1 when no
 * candidate is usable (the load then reports why).  The file it read goes
 * to *used (malloc'ed) when used is not NULL and a step is returned.  It
 * reads the file whole, as the load does, to check the checksum: the load
 * after it then reads it from the page cache. */
int64_t tg_ckpt_latest_step(const char *dir, char **used);

/* Resume in one read: tries ckpt.safetensors, then ckpt.prev.safetensors,
 * passing over (with a note) a file that is damaged or not a checkpoint,
 * and loads the first complete one as tg_ckpt_load does.  A complete
 * checkpoint that does not fit g is an error, not a reason to fall back to
 * an older one.  No usable checkpoint at all is an error naming dir.  The
 * file used goes to *used (malloc'ed) when used is not NULL. */
tg_weights *tg_ckpt_load_latest(tg_ctx *ctx, const tg_graph *g, const char *dir, bool need_state,
                                tg_ckpt_meta *m, char **used);

#endif
