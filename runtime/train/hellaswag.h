/* hellaswag.h: HellaSwag, scored as llm.c scores it (dev/data/hellaswag.py
 * and the eval of train_gpt2.cu), for `tgrun eval` (eval.c) and the
 * training loop's `hellaswag` key (train.c).
 *
 * The file is HellaSwag's validation jsonl as distributed: one JSON object
 * a line with (among others, which are not read) `ctx` (a string),
 * `endings` (4 strings) and `label` (0 to 3).  Each example becomes 4 rows
 * of GPT-2 BPE tokens: tokens(ctx) followed by tokens(" " + ending), each
 * part encoded on its own as llm.c does.  An ending's loss is the model's
 * cross-entropy over the ending's tokens only (the logits at position t
 * predict the token at t + 1, so the first ending token is predicted from
 * the last context token).  Two answers per example, llm.c's names:
 *   acc       the ending with the lowest summed loss;
 *   acc_norm  the ending with the lowest average loss (the sum over its
 *             number of tokens): what llm.c's C training loop reports as
 *             "HellaSwag".
 * (The Eleuther harness's acc_norm normalises by the ending's length in
 * bytes instead; llm.c's, and so tg's, by tokens.)  A tie goes to the
 * first ending, as torch.argmin and llm.c pick. */
#ifndef TG_HELLASWAG_H
#define TG_HELLASWAG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "diag.h"
#include "tokenizer.h"

enum { TG_HELLASWAG_ENDINGS = 4 };

typedef struct tg_hellaswag_example {
  int64_t line;                           /* in the file, from 1 */
  int label;                              /* the right ending, 0 to 3 */
  int64_t ctx_len;                        /* tokens of ctx, at least 1 */
  int64_t len[TG_HELLASWAG_ENDINGS];      /* tokens of each row: ctx_len + the ending's */
  int32_t *rows[TG_HELLASWAG_ENDINGS];    /* the rows' tokens */
} tg_hellaswag_example;

typedef struct tg_hellaswag {
  const char *path;
  tg_hellaswag_example *ex;
  int64_t n;
  int64_t longest;      /* tokens of the longest row */
  int64_t longest_line; /* its example's line */
} tg_hellaswag;

/* Reads path and encodes its first `limit` examples (0: all) with tok,
 * which must be GPT-2's BPE.  Everything lives in ctx's arena.  A missing
 * file, a line that is not a JSON object, a missing or mistyped field, a
 * label out of range, another tokenizer: tg_error through ctx, at the
 * file's line and column (what_for says who named the file, for the
 * message: "--hellaswag", "hellaswag in train.cfg"). */
const tg_hellaswag *tg_hellaswag_load(tg_ctx *ctx, const char *path, tg_tokenizer *tok, int64_t limit,
                                      const char *what_for);

/* One example's losses under the logits of its 4 rows: logits [4, T, Vp]
 * (row b's tokens at positions 0 .. len[b] - 1; Vp >= V columns, of which
 * the first V are the model's vocabulary). */
typedef struct tg_hellaswag_scores {
  double sum[TG_HELLASWAG_ENDINGS];   /* summed cross-entropy over the ending's tokens (nats) */
  double avg[TG_HELLASWAG_ENDINGS];   /* ... over their number */
  int64_t tokens[TG_HELLASWAG_ENDINGS]; /* the ending's tokens */
  int pred, pred_norm;                /* argmin of sum, of avg */
} tg_hellaswag_scores;

void tg_hellaswag_score(const tg_hellaswag_example *ex, const float *logits, int64_t T, int64_t Vp, int64_t V,
                        tg_hellaswag_scores *out);

typedef struct tg_hellaswag_result {
  int64_t n, correct, correct_norm;
  double acc, acc_norm; /* correct / n, correct_norm / n */
} tg_hellaswag_result;

/* Runs every example through e, the model's forward compiled at B = 4 and
 * T >= h->longest with the output `logits` (tg_hellaswag_expose_logits),
 * V the model's vocabulary; logits is the caller's buffer of the logits'
 * size (the caller's, so that an error's longjmp leaks nothing).
 * per_example, if not NULL, gets one JSON line an example (its line,
 * label, the 4 losses, tokens and answers). */
tg_hellaswag_result tg_hellaswag_run(tg_ctx *ctx, const tg_hellaswag *h, tg_exec *e, int64_t V, float *logits,
                                     FILE *per_example);

/* Makes the model's value `logits` (its head's output, [B, T, vocab]) an
 * output of g, for what reads the logits (text samples, HellaSwag); bails
 * naming model_path when the model has none. */
void tg_hellaswag_expose_logits(tg_ctx *ctx, tg_graph *g, const char *model_path);

#endif
