/* metrics.h: what a training run measures, and the three places it goes:
 *   - MFU, model FLOPs utilisation, counted as nanoGPT counts it;
 *   - the metrics file, one JSON object a line (JSON Lines), flushed line
 *     by line so that a crash loses at most the line being written, and
 *     read back for the loss plot;
 *   - the console: one fixed-width line a step, one an evaluation, and a
 *     legend printed once at the start that explains the columns.
 *
 * A step row and its JSON line:
 *   {"step":10,"loss":2.5131,"lr":0.0001,"grad_norm":0.812,"dt_ms":41.2,
 *    "fwd_ms":12,"bwd_ms":27.1,"tok_per_s":15872,"mfu":0.031,
 *    "time":1795766400.123,"elapsed_s":12.5}
 * fwd_ms and bwd_ms are left out when the backend does not time them; mfu
 * is null when peak_flops is unknown, and so is any other value that is not
 * finite (JSON has no NaN).  An evaluation row:
 *   {"step":250,"train_loss":2.1234,"val_loss":2.2345,"time":1795766700.5,"elapsed_s":312.9}
 * and with train.cfg's hellaswag, after val_loss:
 *   "hellaswag_acc":0.2859,"hellaswag_acc_norm":0.2955,"hellaswag_n":10042
 * time and elapsed_s are left out when unknown (rows of older files). 
 * Other keys in a line are ignored when reading, so rows may grow. */
#ifndef TG_METRICS_H
#define TG_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- MFU ------------------------------------------------------------------ */

/* The model as nanoGPT's estimate_mfu sees it. */
typedef struct tg_mfu_model {
  int64_t n_params;  /* N; nanoGPT leaves out the position embedding (wpe) */
  int64_t n_layer;   /* L */
  int64_t n_head;    /* H */
  int64_t head_size; /* Q = n_embd / n_head */
  int64_t seq_len;   /* T: tokens per sequence, train.cfg's block_size */
} tg_mfu_model;

/* 6N + 12·L·H·Q·T: the matmuls of the forward and backward passes (2N +
 * 4N per token) plus attention's scores and weighted sums. */
double tg_flops_per_token(const tg_mfu_model *m);
/* FLOPs of an optimizer step of tokens_per_step tokens (batch_size ×
 * block_size × grad_accum, on one device). */
double tg_flops_per_step(const tg_mfu_model *m, int64_t tokens_per_step);
/* Achieved over peak: flops_per_step / dt_s / peak_flops; NaN (unknown)
 * when peak_flops or dt_s is not above 0. */
double tg_mfu(double flops_per_step, double dt_s, double peak_flops);

/* ---- rows ----------------------------------------------------------------- */

typedef enum tg_metrics_kind { TG_METRICS_STEP, TG_METRICS_EVAL } tg_metrics_kind;

/* NaN marks a value that is unknown or absent. */
typedef struct tg_metrics_row {
  tg_metrics_kind kind;
  int64_t step;  /* optimizer steps done: 1 after the first; 0 before training */
  /* TG_METRICS_STEP */
  double loss;      /* mean over the step's grad_accum micro-batches */
  double lr;
  double grad_norm; /* global norm before clipping */
  double dt_ms;     /* wall time of the whole step */
  double fwd_ms, bwd_ms;
  double tok_per_s;
  double mfu;       /* a fraction: 0.031 is 3.1% */
  /* TG_METRICS_EVAL: mean losses over eval_batches batches of each split */
  double train_loss, val_loss;
  /* ... and with train.cfg's hellaswag, its accuracies (hellaswag.h) over
   * hellaswag_n examples; hellaswag_n 0: not scored (the keys left out) */
  double hellaswag_acc, hellaswag_acc_norm;
  int64_t hellaswag_n;
  /* both kinds: when the row was written, as unix seconds (UTC, to the
   * millisecond: pandas reads it with pd.to_datetime(unit="s")), and the
   * seconds since this run (or this resume of it) started */
  double time, elapsed_s;
  /* the console only, not the file: seconds left to max_steps at the pace
   * of this run so far (its steps, evaluations, checkpoints and samples) */
  double eta_s;
} tg_metrics_row;

/* A row of that kind and step with every value NaN, to be filled in. */
tg_metrics_row tg_metrics_row_blank(tg_metrics_kind kind, int64_t step);

/* The row's JSON object, without a newline, into buf (snprintf's contract:
 * returns the length it needs). */
int tg_metrics_json(char *buf, size_t n, const tg_metrics_row *r);

/* ---- the metrics file ----------------------------------------------------- */

typedef struct tg_metrics_file tg_metrics_file;

/* Creates (append false: a new run) or extends (append true: a resumed run)
 * the file.  When an earlier run died in the middle of a line, that torn
 * line is cut off first, so that every line stays valid JSON.  NULL with the reason
 * in why on failure. */
tg_metrics_file *tg_metrics_open(const char *path, bool append, char *why, size_t whylen);
/* Writes one line and flushes it to the kernel.  (Not fsync'ed: a crash of
 * the process loses nothing written; a crash of the machine may lose the
 * last lines, which a checkpoint's fsync does not protect either.) */
bool tg_metrics_append(tg_metrics_file *f, const tg_metrics_row *r, char *why, size_t whylen);
bool tg_metrics_close(tg_metrics_file *f, char *why, size_t whylen);

/* A metrics file read back, in file order.  When a step comes again (a run
 * resumed from a checkpoint older than its last line), the later rows of
 * that kind win and the earlier ones from that step on are dropped. */
typedef struct tg_metrics_log {
  tg_metrics_row *rows;
  int64_t n;
  int64_t n_bad;      /* lines that are no metrics row (a torn last line) */
  int64_t first_bad;  /* the line number of the first, or 0 */
  int64_t n_replaced; /* rows dropped for a resumed run's */
} tg_metrics_log;

bool tg_metrics_read(const char *path, tg_metrics_log *out, char *why, size_t whylen);
void tg_metrics_log_free(tg_metrics_log *log);

/* ---- the console ---------------------------------------------------------- */

typedef struct tg_log_columns {
  int64_t max_steps; /* sets the width of the step column */
  bool fwd_bwd;      /* the backend times the forward and backward passes */
  bool hellaswag;    /* evaluations score HellaSwag too (train.cfg's hellaswag) */
} tg_log_columns;

/* The lines below explained, column by column; print once at the start. */
void tg_log_legend(FILE *out, const tg_log_columns *c);
/* One line, fixed-width columns, without a newline (snprintf's contract):
 * step   10/2000 | loss  2.5131 | lr 1.00e-04 | norm  0.812 | dt   41.2 ms (fwd  12.0, bwd  27.1) |    15,872 tok/s | mfu  3.1% |    12s, eta  1m22s
 * "(fwd .., bwd ..)" only with c->fwd_bwd; "-" for what is unknown. */
int tg_log_step_line(char *buf, size_t n, const tg_log_columns *c, const tg_metrics_row *r);
/* step  250/2000 | eval | train loss  2.1234 | val loss  2.2345
 * and with HellaSwag scored:
 *   ... | hellaswag acc 0.2859 acc_norm 0.2955 (10042 examples) */
int tg_log_eval_line(char *buf, size_t n, const tg_log_columns *c, const tg_metrics_row *r);

#endif
