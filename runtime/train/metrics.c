/* metrics.c: MFU, the metrics file and the console log (see metrics.h). */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "diag.h" /* tg_why */
#include "json.h"

/* ---- MFU ------------------------------------------------------------------ */

double tg_flops_per_token(const tg_mfu_model *m) {
  /* In double: 12·L·H·Q·T overflows nothing there, and MFU is a ratio. */
  return 6.0 * (double)m->n_params +
         12.0 * (double)m->n_layer * (double)m->n_head * (double)m->head_size * (double)m->seq_len;
}

double tg_flops_per_step(const tg_mfu_model *m, int64_t tokens_per_step) {
  return tg_flops_per_token(m) * (double)tokens_per_step;
}

double tg_mfu(double flops_per_step, double dt_s, double peak_flops) {
  if (!(peak_flops > 0) || !(dt_s > 0) || !isfinite(flops_per_step)) return NAN;
  return flops_per_step / dt_s / peak_flops;
}

/* ---- rows ----------------------------------------------------------------- */

tg_metrics_row tg_metrics_row_blank(tg_metrics_kind kind, int64_t step) {
  return (tg_metrics_row){.kind = kind, .step = step, .loss = NAN, .lr = NAN, .grad_norm = NAN, .dt_ms = NAN,
                          .fwd_ms = NAN, .bwd_ms = NAN, .tok_per_s = NAN, .mfu = NAN, .train_loss = NAN,
                          .val_loss = NAN, .hellaswag_acc = NAN, .hellaswag_acc_norm = NAN, .hellaswag_n = 0,
                          .time = NAN, .elapsed_s = NAN, .eta_s = NAN};
}

/* snprintf that keeps appending into one buffer and counts what it needed. */
typedef struct out {
  char *buf;
  size_t n, len;
} out;

__attribute__((format(printf, 2, 3))) static void put(out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->len < o->n ? o->n - o->len : 0;
  int k = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
  va_end(ap);
  if (k > 0) o->len += (size_t)k;
}

static int finish(out *o) {
  if (o->n && o->len >= o->n) o->buf[o->n - 1] = 0;
  return (int)o->len;
}

/* 9 significant digits: enough for a float32 loss to read back exactly. */
static void json_num(out *o, const char *key, double v) {
  if (isfinite(v)) put(o, ",\"%s\":%.9g", key, v);
  else put(o, ",\"%s\":null", key);
}

int tg_metrics_json(char *buf, size_t n, const tg_metrics_row *r) {
  out o = {buf, n, 0};
  put(&o, "{\"step\":%lld", (long long)r->step);
  if (r->kind == TG_METRICS_EVAL) {
    json_num(&o, "train_loss", r->train_loss);
    json_num(&o, "val_loss", r->val_loss);
    if (r->hellaswag_n > 0) {
      json_num(&o, "hellaswag_acc", r->hellaswag_acc);
      json_num(&o, "hellaswag_acc_norm", r->hellaswag_acc_norm);
      put(&o, ",\"hellaswag_n\":%lld", (long long)r->hellaswag_n);
    }
  } else {
    json_num(&o, "loss", r->loss);
    json_num(&o, "lr", r->lr);
    json_num(&o, "grad_norm", r->grad_norm);
    json_num(&o, "dt_ms", r->dt_ms);
    if (!isnan(r->fwd_ms)) json_num(&o, "fwd_ms", r->fwd_ms);
    if (!isnan(r->bwd_ms)) json_num(&o, "bwd_ms", r->bwd_ms);
    json_num(&o, "tok_per_s", r->tok_per_s);
    json_num(&o, "mfu", r->mfu);
  }
  /* %.3f: a unix time needs 10 digits before the point, more than %.9g keeps */
  if (isfinite(r->time)) put(&o, ",\"time\":%.3f", r->time);
  if (isfinite(r->elapsed_s)) put(&o, ",\"elapsed_s\":%.3f", r->elapsed_s);
  put(&o, "}");
  return finish(&o);
}

/* ---- the metrics file ----------------------------------------------------- */

struct tg_metrics_file {
  FILE *fp;
  char *path;
};

/* Cuts a torn last line (a run killed in the middle of a write): the file
 * ends after its last newline, or is empty.  False with errno set when the
 * file cannot be read or truncated. */
static bool cut_torn_line(FILE *fp) {
  if (fseek(fp, 0, SEEK_END) != 0) return false;
  long size = ftell(fp);
  if (size < 0) return false;
  long keep = size;
  char buf[4096];
  while (keep > 0) {
    long from = keep > (long)sizeof buf ? keep - (long)sizeof buf : 0;
    size_t n = (size_t)(keep - from);
    if (fseek(fp, from, SEEK_SET) != 0 || fread(buf, 1, n, fp) != n) return false;
    size_t i = n;
    while (i > 0 && buf[i - 1] != '\n') i--;
    if (i > 0) {
      keep = from + (long)i;
      break;
    }
    keep = from;
  }
  if (keep < size && (fflush(fp) != 0 || ftruncate(fileno(fp), (off_t)keep) != 0)) return false;
  return fseek(fp, 0, SEEK_END) == 0;
}

tg_metrics_file *tg_metrics_open(const char *path, bool append, char *why, size_t whylen) {
  FILE *fp = fopen(path, append ? "a+" : "w");
  if (!fp) {
    tg_why(why, whylen, "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  if (append && !cut_torn_line(fp)) {
    tg_why(why, whylen, "cannot cut the torn last line of '%s': %s", path, strerror(errno));
    fclose(fp);
    return NULL;
  }
  tg_metrics_file *f = malloc(sizeof *f);
  char *p = malloc(strlen(path) + 1);
  if (!f || !p) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  f->fp = fp;
  f->path = strcpy(p, path);
  return f;
}

bool tg_metrics_append(tg_metrics_file *f, const tg_metrics_row *r, char *why, size_t whylen) {
  char line[512];
  int k = tg_metrics_json(line, sizeof line - 1, r);
  if (k < 0 || (size_t)k >= sizeof line - 1) return tg_why(why, whylen, "metrics line too long");
  line[k] = '\n';
  /* One fwrite and a flush: the line reaches the kernel whole or not at
   * all as far as this process is concerned. */
  if (fwrite(line, 1, (size_t)k + 1, f->fp) != (size_t)k + 1 || fflush(f->fp) != 0)
    return tg_why(why, whylen, "cannot write '%s': %s", f->path, strerror(errno));
  return true;
}

bool tg_metrics_close(tg_metrics_file *f, char *why, size_t whylen) {
  if (!f) return true;
  bool ok = fclose(f->fp) == 0;
  if (!ok) tg_why(why, whylen, "cannot write '%s': %s", f->path, strerror(errno));
  free(f->path);
  free(f);
  return ok;
}

/* ---- reading it back ------------------------------------------------------ */

/* A value: a number, or null for NaN; absent keys give NaN too. */
static bool get_num(const tg_json *o, const char *key, double *v) {
  const tg_json *m = tg_json_get(o, key);
  *v = NAN;
  if (!m || m->kind == TG_JSON_NULL) return true;
  if (m->kind == TG_JSON_INT) *v = (double)m->u.i;
  else if (m->kind == TG_JSON_REAL) *v = m->u.d;
  else return false;
  return true;
}

static bool row_from_json(const tg_json *o, tg_metrics_row *r) {
  if (!o || o->kind != TG_JSON_OBJECT) return false;
  const tg_json *step = tg_json_get(o, "step");
  if (!step || step->kind != TG_JSON_INT || step->u.i < 0) return false;
  bool eval = tg_json_get(o, "val_loss") != NULL;
  *r = tg_metrics_row_blank(eval ? TG_METRICS_EVAL : TG_METRICS_STEP, step->u.i);
  if (!get_num(o, "time", &r->time) || !get_num(o, "elapsed_s", &r->elapsed_s)) return false;
  if (eval) {
    const tg_json *n = tg_json_get(o, "hellaswag_n");
    if (n && n->kind == TG_JSON_INT && n->u.i > 0) r->hellaswag_n = n->u.i;
    return get_num(o, "val_loss", &r->val_loss) && get_num(o, "train_loss", &r->train_loss) &&
           get_num(o, "hellaswag_acc", &r->hellaswag_acc) && get_num(o, "hellaswag_acc_norm", &r->hellaswag_acc_norm);
  }
  return get_num(o, "loss", &r->loss) && get_num(o, "lr", &r->lr) &&
         get_num(o, "grad_norm", &r->grad_norm) && get_num(o, "dt_ms", &r->dt_ms) &&
         get_num(o, "fwd_ms", &r->fwd_ms) && get_num(o, "bwd_ms", &r->bwd_ms) &&
         get_num(o, "tok_per_s", &r->tok_per_s) && get_num(o, "mfu", &r->mfu);
}

/* Adds r; a step that does not move forward drops the earlier rows of its
 * kind from that step on (the run resumed from an older checkpoint). */
static void add_row(tg_metrics_log *log, size_t *cap, const tg_metrics_row *r, int64_t *last) {
  if (last[r->kind] >= r->step) {
    int64_t k = 0;
    for (int64_t i = 0; i < log->n; i++) {
      const tg_metrics_row *x = &log->rows[i];
      if (x->kind == r->kind && x->step >= r->step) log->n_replaced++;
      else log->rows[k++] = *x;
    }
    log->n = k;
  }
  last[r->kind] = r->step;
  if ((size_t)log->n == *cap) {
    *cap = *cap ? 2 * *cap : 256;
    tg_metrics_row *rows = realloc(log->rows, *cap * sizeof *rows);
    if (!rows) {
      fprintf(stderr, "tg: out of memory\n");
      exit(1);
    }
    log->rows = rows;
  }
  log->rows[log->n++] = *r;
}

bool tg_metrics_read(const char *path, tg_metrics_log *log, char *why, size_t whylen) {
  memset(log, 0, sizeof *log);
  FILE *fp = fopen(path, "rb");
  if (!fp) return tg_why(why, whylen, "cannot open '%s': %s", path, strerror(errno));
  enum { LINES_PER_ARENA = 1024 };
  tg_arena *arena = tg_arena_new();
  tg_json_opts opts = {4, 64};
  char *line = NULL;
  size_t line_cap = 0, cap = 0;
  int64_t last[2] = {-1, -1}, lineno = 0;
  ssize_t len;
  while ((len = getline(&line, &line_cap, fp)) >= 0) {
    lineno++;
    if (lineno % LINES_PER_ARENA == 0) {
      tg_arena_free(arena);
      arena = tg_arena_new();
    }
    size_t n = (size_t)len;
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) n--;
    if (!n) continue;
    tg_json_error err;
    tg_metrics_row r;
    if (row_from_json(tg_json_parse(arena, line, n, &opts, &err), &r)) {
      add_row(log, &cap, &r, last);
    } else {
      if (!log->n_bad) log->first_bad = lineno;
      log->n_bad++;
    }
  }
  bool ok = !ferror(fp);
  if (!ok) tg_why(why, whylen, "cannot read '%s': %s", path, strerror(errno));
  free(line);
  tg_arena_free(arena);
  fclose(fp);
  if (!ok) tg_metrics_log_free(log);
  return ok;
}

void tg_metrics_log_free(tg_metrics_log *log) {
  if (!log) return;
  free(log->rows);
  memset(log, 0, sizeof *log);
}

/* ---- the console ---------------------------------------------------------- */

static int digits(int64_t v) {
  int d = 1;
  for (; v >= 10; v /= 10) d++;
  return d;
}

/* v with fmt ("%*.*f" or "%*.*e") in width, or "nan"/"inf"/"-inf" there. */
static void fixed(out *o, int width, int prec, char conv, double v) {
  if (isfinite(v)) put(o, conv == 'e' ? "%*.*e" : "%*.*f", width, prec, v);
  else put(o, "%*s", width, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

/* 15872.4 -> "15,872"; a thousands separator makes 7-digit rates readable. */
static void with_commas(char *buf, size_t n, double v) {
  if (!isfinite(v) || v < 0 || v >= 1e15) {
    snprintf(buf, n, isfinite(v) ? "%.3g" : "-", v);
    return;
  }
  char d[24];
  int k = snprintf(d, sizeof d, "%lld", (long long)llround(v));
  size_t j = 0;
  for (int i = 0; i < k && j + 2 < n; i++) {
    if (i && (k - i) % 3 == 0) buf[j++] = ',';
    buf[j++] = d[i];
  }
  buf[j] = 0;
}

/* Seconds as a person reads a span of time: "42s", "3m05s", "2h07m",
 * "3d04h"; "-" when unknown. */
static void duration(char *buf, size_t n, double s) {
  if (!isfinite(s) || s < 0 || s >= 1e9) {
    snprintf(buf, n, "-");
    return;
  }
  long long t = llround(s);
  if (t < 60) snprintf(buf, n, "%llds", t);
  else if (t < 3600) snprintf(buf, n, "%lldm%02llds", t / 60, t % 60);
  else if (t < 86400) snprintf(buf, n, "%lldh%02lldm", t / 3600, t / 60 % 60);
  else snprintf(buf, n, "%lldd%02lldh", t / 86400, t / 3600 % 24);
}

static void step_col(out *o, const tg_log_columns *c, int64_t step) {
  int64_t max = c->max_steps > 0 ? c->max_steps : 0;
  put(o, "step %*lld/%lld", digits(max), (long long)step, (long long)max);
}

int tg_log_step_line(char *buf, size_t n, const tg_log_columns *c, const tg_metrics_row *r) {
  out o = {buf, n, 0};
  step_col(&o, c, r->step);
  /* Widths that hold GPT-2's first steps (loss 10.98, norm above 10)
   * as well as the last, so that the columns stay put. */
  put(&o, " | loss ");
  fixed(&o, 7, 4, 'f', r->loss);
  put(&o, " | lr ");
  fixed(&o, 8, 2, 'e', r->lr);
  put(&o, " | norm ");
  fixed(&o, 6, 3, 'f', r->grad_norm);
  put(&o, " | dt ");
  fixed(&o, 6, 1, 'f', r->dt_ms);
  put(&o, " ms");
  if (c->fwd_bwd) {
    put(&o, " (fwd ");
    if (isnan(r->fwd_ms)) put(&o, "%5s", "-");
    else fixed(&o, 5, 1, 'f', r->fwd_ms);
    put(&o, ", bwd ");
    if (isnan(r->bwd_ms)) put(&o, "%5s", "-");
    else fixed(&o, 5, 1, 'f', r->bwd_ms);
    put(&o, ")");
  }
  char tok[40];
  with_commas(tok, sizeof tok, r->tok_per_s);
  put(&o, " | %9s tok/s | mfu ", tok);
  if (isfinite(r->mfu)) put(&o, "%4.1f%%", 100 * r->mfu);
  else put(&o, "%5s", "-");
  if (isfinite(r->elapsed_s)) {
    char took[24], left[24];
    duration(took, sizeof took, r->elapsed_s);
    duration(left, sizeof left, r->eta_s);
    put(&o, " | %6s, eta %6s", took, left);
  }
  return finish(&o);
}

int tg_log_eval_line(char *buf, size_t n, const tg_log_columns *c, const tg_metrics_row *r) {
  out o = {buf, n, 0};
  step_col(&o, c, r->step);
  put(&o, " | eval | train loss ");
  fixed(&o, 7, 4, 'f', r->train_loss);
  put(&o, " | val loss ");
  fixed(&o, 7, 4, 'f', r->val_loss);
  if (r->hellaswag_n > 0)
    put(&o, " | hellaswag acc %.4f acc_norm %.4f (%lld example%s)", r->hellaswag_acc, r->hellaswag_acc_norm,
        (long long)r->hellaswag_n, r->hellaswag_n == 1 ? "" : "s");
  return finish(&o);
}

void tg_log_legend(FILE *f, const tg_log_columns *c) {
  fputs("each step prints a line:\n"
        "  step   optimizer steps done / max_steps\n"
        "  loss   training loss of the step, the mean over its grad_accum micro-batches\n"
        "  lr     learning rate of the step\n"
        "  norm   global gradient norm, before clipping to grad_clip\n",
        f);
  if (c->fwd_bwd)
    fputs("  dt     wall time of the whole step in ms; fwd and bwd: its forward and backward "
          "passes\n",
          f);
  else
    fputs("  dt     wall time of the whole step in ms\n", f);
  fputs("  tok/s  tokens trained per second\n"
        "  mfu    model FLOPs utilisation: FLOP/s achieved (6N + 12*L*H*Q*T a token, as nanoGPT\n"
        "         counts) over the peak: peak_flops in train.cfg, else the device's own (a GPU's\n"
        "         datasheet, a CPU's measured sgemm: the 'mfu:' line above says which); '-' while\n"
        "         it is unknown\n"
        "  eta    wall time since the run (or its resume) started, and the time left to\n"
        "         max_steps at its pace so far\n"
        "each evaluation prints train and val loss: the mean over eval_batches batches of each "
        "split\n",
        f);
  if (c->hellaswag)
    fputs("  and HellaSwag's acc and acc_norm (hellaswag in train.cfg): the fractions of its examples\n"
          "  whose ending of lowest summed, and of lowest average, loss a token is the right one\n",
          f);
}
