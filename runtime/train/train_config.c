/* train_config.c: reading, checking and printing train.cfg (see
 * train_config.h and docs/train-config.md).
 *
 * One table lists every key with its type, place in the struct, default and
 * range, so that parsing, range checks, printing and comparing cannot
 * disagree about the set of keys. */
#include "train_config.h"

#include "backends.h"
#include "dataloader.h"
#include "nearest.h"
#include "utf8.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum kind { K_STR, K_INT, K_FLOAT, K_BOOL } kind;

typedef struct key_info {
  const char *name;
  kind kind;
  size_t off;
  const char *def;    /* the default: the string itself, or a number or boolean as written */
  double lo, hi;      /* range of INT and FLOAT values */
  bool lo_open;       /* lo itself is refused (eps > 0) */
  bool hi_open;       /* hi itself is refused (beta2 < 1) */
  const char *(*check)(const char *s); /* STR: why s is refused, or NULL */
  const char *group;  /* printed as a comment before the first key of a group */
} key_info;

/* Counts and steps up to 2^53 stay exact in a double, so the JSON metrics,
 * the plot and every ratio computed from them see the same numbers. */
#define BIG 9007199254740992.0
#define DIM_MAX (16777216.0) /* 2^24: per-dimension limit of a batch */

static const char *check_nonempty(const char *s);
static const char *check_backend(const char *s);
static const char *check_precision(const char *s);
static const char *check_file_name(const char *s);
static const char *check_parallel(const char *s);
static const char *check_data_order(const char *s);

#define F(field) offsetof(tg_train_config, field)
static const key_info keys[] = {
    {"model", K_STR, F(model), "models/gpt2.tg", 0, 0, 0, 0, check_nonempty, "model and data"},
    {"data_dir", K_STR, F(data_dir), "data/shakespeare_char", 0, 0, 0, 0, check_nonempty, NULL},
    /* globs naming the shards (llm.c's -i and -j); "": data_dir's (corpus.h) */
    {"train_files", K_STR, F(train_files), "", 0, 0, 0, 0, NULL, NULL},
    {"val_files", K_STR, F(val_files), "", 0, 0, 0, 0, NULL, NULL},
    {"data_order", K_STR, F(data_order), "random", 0, 0, 0, 0, check_data_order, NULL},
    {"out_dir", K_STR, F(out_dir), "out", 0, 0, 0, 0, check_nonempty, NULL},
    {"backend", K_STR, F(backend), "cpu", 0, 0, 0, 0, check_backend, NULL},
    {"precision", K_STR, F(precision), "auto", 0, 0, 0, 0, check_precision, NULL},
    {"batch_size", K_INT, F(batch_size), "12", 1, DIM_MAX, 0, 0, NULL, "batch"},
    /* block_size 1: the CPU backend's lowering cannot yet (a where over
     * [1, 1] does not fit its kernel's domain), so the range starts at 2 */
    {"block_size", K_INT, F(block_size), "64", 2, DIM_MAX, 0, 0, NULL, NULL},
    {"grad_accum", K_INT, F(grad_accum), "1", 1, DIM_MAX, 0, 0, NULL, NULL},
    {"max_steps", K_INT, F(max_steps), "2000", 1, BIG, 0, 0, NULL, NULL},
    {"learning_rate", K_FLOAT, F(learning_rate), "1e-3", 0, INFINITY, 0, 0, NULL,
     "learning rate: linear warmup, then cosine decay to min_lr"},
    {"min_lr", K_FLOAT, F(min_lr), "1e-4", 0, INFINITY, 0, 0, NULL, NULL},
    {"warmup_steps", K_INT, F(warmup_steps), "100", 0, BIG, 0, 0, NULL, NULL},
    {"lr_decay_steps", K_INT, F(lr_decay_steps), "0", 0, BIG, 0, 0, NULL, NULL},
    /* at most 0.9999999: the step computes in f32, where a beta closer to 1
     * rounds to 1 and the bias correction divides by 1 - 1 */
    {"beta1", K_FLOAT, F(beta1), "0.9", 0, 0.9999999, 0, 0, NULL, "AdamW"},
    {"beta2", K_FLOAT, F(beta2), "0.99", 0, 0.9999999, 0, 0, NULL, NULL},
    {"eps", K_FLOAT, F(eps), "1e-8", 1e-30, INFINITY, 0, 0, NULL, NULL}, /* a normal f32: the step is f32 */
    {"weight_decay", K_FLOAT, F(weight_decay), "0.1", 0, INFINITY, 0, 0, NULL, NULL},
    {"grad_clip", K_FLOAT, F(grad_clip), "1.0", 0, INFINITY, 0, 0, NULL, NULL},
    {"eval_interval", K_INT, F(eval_interval), "250", 0, BIG, 0, 0, NULL, "evaluation and logging"},
    {"eval_batches", K_INT, F(eval_batches), "20", 1, DIM_MAX, 0, 0, NULL, NULL},
    /* HellaSwag at each evaluation, as llm.c at its val_loss_every */
    {"hellaswag", K_STR, F(hellaswag), "", 0, 0, 0, 0, NULL, NULL},
    {"hellaswag_examples", K_INT, F(hellaswag_examples), "0", 0, BIG, 0, 0, NULL, NULL},
    {"log_interval", K_INT, F(log_interval), "1", 1, BIG, 0, 0, NULL, NULL},
    {"sample_interval", K_INT, F(sample_interval), "500", 0, BIG, 0, 0, NULL, "samples"},
    {"sample_prompt", K_STR, F(sample_prompt), "\n", 0, 0, 0, 0, check_nonempty, NULL},
    /* at most 65536: a sample runs between steps, on rank 0 while the other
     * ranks wait (rank_timeout); a long text is `tgrun sample`'s job */
    {"sample_tokens", K_INT, F(sample_tokens), "200", 0, 65536, 0, 0, NULL, NULL},
    {"temperature", K_FLOAT, F(temperature), "0.8", 1e-30, INFINITY, 0, 0, NULL, NULL},
    {"top_k", K_INT, F(top_k), "200", 0, DIM_MAX, 0, 0, NULL, NULL},
    {"checkpoint_interval", K_INT, F(checkpoint_interval), "500", 0, BIG, 0, 0, NULL, "checkpoints"},
    {"resume", K_BOOL, F(resume), "false", 0, 0, 0, 0, NULL, NULL},
    {"reseed", K_BOOL, F(reseed), "false", 0, 0, 0, 0, NULL, NULL},
    {"overwrite", K_BOOL, F(overwrite), "false", 0, 0, 0, 0, NULL, NULL},
    {"init_from", K_STR, F(init_from), "", 0, 0, 0, 0, NULL, NULL},
    {"seed", K_INT, F(seed), "1337", 0, BIG, 0, 0, NULL, "the machine"},
    /* 65536 OpenMP threads crashed the run (SIGSEGV); 1024 work */
    {"threads", K_INT, F(threads), "0", 0, 1024, 0, 0, NULL, NULL},
    {"rank_timeout", K_INT, F(rank_timeout), "300", 1, 86400, 0, 0, NULL, NULL},
    /* ZeRO's stage (runtime/train/zero.c, docs/parallel.md); 3 is planned
     * (tgc --report memplan) but not yet run: refused in tg_train */
    {"zero", K_INT, F(zero), "0", 0, 3, 0, 0, NULL, NULL},
    /* the tensor-parallel degree: the model's "mesh tensor = tp" (passes/shard_tensor.c) */
    {"tp", K_INT, F(tp), "1", 1, 4096, 0, 0, NULL, NULL},
    /* auto: tgrun takes tp, zero, batch_size and grad_accum from the
     * parallel planner (tools/tgc_plan.c) for the run's ranks */
    {"parallel", K_STR, F(parallel), "manual", 0, 0, 0, 0, check_parallel, NULL},
    {"peak_flops", K_FLOAT, F(peak_flops), "0", 0, INFINITY, 0, 0, NULL, NULL},
    {"metrics_file", K_STR, F(metrics_file), "metrics.jsonl", 0, 0, 0, 0, check_file_name, NULL},
};
#undef F
_Static_assert(sizeof keys / sizeof *keys == TG_TRAIN_NKEYS, "TG_TRAIN_NKEYS is the table's size");

enum { NKEYS = TG_TRAIN_NKEYS, MAX_ERRORS = 20, MAX_NUMBER = 64 };

const char *tg_train_config_key(int i) { return i >= 0 && i < NKEYS ? keys[i].name : NULL; }

static int key_index(const char *name) {
  for (int i = 0; i < NKEYS; i++)
    if (!strcmp(keys[i].name, name)) return i;
  return -1;
}

/* ---- memory ------------------------------------------------------------- */

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(tg_xrealloc(NULL, n), s, n);
}

static char **str_at(tg_train_config *c, int k) { return (char **)((char *)c + keys[k].off); }
static int64_t *int_at(tg_train_config *c, int k) { return (int64_t *)((char *)c + keys[k].off); }
static double *float_at(tg_train_config *c, int k) { return (double *)((char *)c + keys[k].off); }
static bool *bool_at(tg_train_config *c, int k) { return (bool *)((char *)c + keys[k].off); }
#define CSTR(c, k) (*str_at((tg_train_config *)(c), k))
#define CINT(c, k) (*int_at((tg_train_config *)(c), k))
#define CFLOAT(c, k) (*float_at((tg_train_config *)(c), k))
#define CBOOL(c, k) (*bool_at((tg_train_config *)(c), k))

void tg_train_config_defaults(tg_train_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (int k = 0; k < NKEYS; k++) {
    const char *d = keys[k].def;
    switch (keys[k].kind) {
    case K_STR: CSTR(cfg, k) = xstrdup(d); break;
    case K_INT: CINT(cfg, k) = (int64_t)strtod(d, NULL); break;
    case K_FLOAT: CFLOAT(cfg, k) = strtod(d, NULL); break;
    case K_BOOL: CBOOL(cfg, k) = !strcmp(d, "true"); break;
    }
  }
}

void tg_train_config_free(tg_train_config *cfg) {
  if (!cfg) return;
  for (int k = 0; k < NKEYS; k++)
    if (keys[k].kind == K_STR) free(CSTR(cfg, k));
  for (int i = 0; i < cfg->n_defines; i++) free(cfg->defines[i].name);
  free(cfg->defines);
  free(cfg->path);
  memset(cfg, 0, sizeof *cfg);
}

int64_t tg_train_config_decay_steps(const tg_train_config *cfg) {
  return cfg->lr_decay_steps ? cfg->lr_decay_steps : cfg->max_steps;
}

/* ---- string values ------------------------------------------------------- */

static const char *check_nonempty(const char *s) { return *s ? NULL : "must not be empty"; }

/* The backends are the backends' registry's (runtime/backend/registry). */
static const char *check_backend(const char *s) { return tg_backend_find(s) ? NULL : "must name a backend"; }

static const char *check_precision(const char *s) {
  tg_precision_policy p;
  return !strcmp(s, "auto") || tg_precision_parse(s, &p) ? NULL
                                                          : "must be auto (the backend's: bf16 on cuda, f32 on cpu), "
                                                            "f32 or bf16";
}

static const char *check_parallel(const char *s) {
  return !strcmp(s, "manual") || !strcmp(s, "auto")
             ? NULL
             : "must be manual (tp, zero, batch_size and grad_accum as set) or auto (the planner's choice for the "
               "run's devices: docs/parallel.md)";
}

tg_precision_policy tg_train_config_precision(const tg_train_config *cfg) {
  const char *s = cfg->precision;
  const tg_backend *x = tg_backend_find(cfg->backend);
  if (!strcmp(s, "auto")) s = x ? tg_backend_default_precision(x) : "f32";
  tg_precision_policy p = TG_PRECISION_F32;
  tg_precision_parse(s, &p);
  return p;
}

/* The metrics file lives in out_dir; a path would let it escape, and the
 * name of a file the run writes itself would let the metrics overwrite or
 * append to it (a checkpoint, the log). */
static const char *check_data_order(const char *s) {
  tg_data_order o;
  return tg_data_order_parse(s, &o) ? NULL
         : "expected random (nanoGPT's random windows), sequential (llm.c's: the shards in order) or shuffled "
           "(sequential, the shards in a seeded order each epoch)";
}

static const char *check_file_name(const char *s) {
  static const char *const own[] = {"train.log", "train.cfg", "loss.svg", "report.html", "samples.txt", "kernels",
                                    "ckpt.safetensors", "ckpt.prev.safetensors", "tgrun.lock"};
  if (!*s) return "must not be empty";
  if (strchr(s, '/')) return "must be a file name inside out_dir, without '/'";
  if (!strcmp(s, ".") || !strcmp(s, "..")) return "must be a file name inside out_dir";
  for (size_t i = 0; i < sizeof own / sizeof *own; i++)
    if (!strcmp(s, own[i]))
      return "must not name a file the run writes itself (train.log, train.cfg, loss.svg, samples.txt, kernels, "
             "ckpt.safetensors, ckpt.prev.safetensors, tgrun.lock): choose another name, e.g. metrics.jsonl";
  if (!strncmp(s, "ckpt.", 5) && strstr(s, ".tmp"))
    return "must not name a checkpoint's temporary file (ckpt.*.tmp.*): choose another name, e.g. metrics.jsonl";
  return NULL;
}

/* ---- diagnostics -------------------------------------------------------- */

/* One parse: a file, or one command-line argument (file == NULL). */
typedef struct parser {
  tg_ctx *ctx;
  const char *file;
  const char *arg;
  int line;
  int nerrors;
} parser;

/* Quotes a command-line argument under the message, as diag.c quotes a
 * file's line: the argument has no line number, so the gutter is blank. */
static void quote_arg(FILE *out, const char *arg, int col) {
  enum { WIDTH = 200 };
  fprintf(out, "%5s | ", "");
  size_t n = strlen(arg);
  for (size_t i = 0; i < n && i < WIDTH; i++) {
    unsigned char c = (unsigned char)arg[i];
    fputc(c < 0x20 || c == 0x7f ? '?' : c, out);
  }
  if (n > WIDTH) fputs("...", out);
  int at = col > 1 ? col - 1 : 0;
  if (at > WIDTH) at = WIDTH;
  fprintf(out, "\n%5s | %*s^\n", "", at, "");
}

__attribute__((format(printf, 3, 4))) static void perr(parser *P, int col, const char *fmt, ...) {
  if (++P->nerrors > MAX_ERRORS) return;
  va_list ap;
  va_start(ap, fmt);
  if (P->file) {
    tg_vreport(P->ctx, "error", (tg_loc){P->file, P->line, col}, fmt, ap);
  } else {
    tg_vreport(P->ctx, "error", (tg_loc){"command line", 0, 0}, fmt, ap);
    if (P->ctx->err) quote_arg(P->ctx->err, P->arg, col);
  }
  va_end(ap);
}

/* ---- one line ----------------------------------------------------------- */

typedef struct value {
  const char *text; /* bare: the text; quoted: the decoded string */
  size_t len;
  bool quoted;
  int col;
  char *owned; /* the decoded string, freed by the caller */
} value;

static bool is_space(char c) { return c == ' ' || c == '\t'; }
static bool is_ident_start(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static bool is_ident(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

/* Refuses raw control characters: the printed config writes strings with
 * only the four escapes, so nothing else may get into one. */
static bool check_chars(parser *P, const char *s, size_t n, const char *line) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      perr(P, (int)(s + i - line) + 1, "control character 0x%02x in a value", c);
      return false;
    }
  }
  return true;
}

/* Decodes a quoted string starting at *p (the opening quote); on success
 * advances *p past the closing quote. */
static bool read_quoted(parser *P, const char *line, const char **p, const char *end, value *v) {
  const char *q = *p + 1;
  char *out = tg_xrealloc(NULL, (size_t)(end - q) + 1);
  size_t n = 0;
  for (;;) {
    if (q >= end) {
      perr(P, (int)(*p - line) + 1, "unterminated string (a string ends on its own line)");
      free(out);
      return false;
    }
    char c = *q;
    if (c == '"') break;
    if (c == '\\') {
      char e = q + 1 < end ? q[1] : 0;
      char d = e == 'n' ? '\n' : e == 't' ? '\t' : e == '"' ? '"' : e == '\\' ? '\\' : 0;
      if (!d) {
        if (e && (unsigned char)e >= 0x20 && e != 0x7f)
          perr(P, (int)(q - line) + 1, "unknown escape '\\%c' (the escapes are \\n \\t \\\" \\\\)", e);
        else
          perr(P, (int)(q - line) + 1, "unknown escape (the escapes are \\n \\t \\\" \\\\)");
        free(out);
        return false;
      }
      out[n++] = d;
      q += 2;
      continue;
    }
    if (((unsigned char)c < 0x20 && c != '\t') || c == 0x7f) {
      perr(P, (int)(q - line) + 1, "control character 0x%02x in a string (write \\n or \\t)",
           (unsigned char)c);
      free(out);
      return false;
    }
    out[n++] = c;
    q++;
  }
  out[n] = 0;
  v->text = v->owned = out;
  v->len = n;
  v->quoted = true;
  *p = q + 1;
  return true;
}

/* Splits `key = value` in line[0 .. len).  Returns 0 for a blank or comment
 * line, 1 with key and value set, -1 after reporting an error. */
static int split_line(parser *P, const char *line, size_t len, bool comments, const char **key,
                      size_t *key_len, int *key_col, value *v) {
  const char *p = line, *end = line + len;
  while (p < end && is_space(*p)) p++;
  if (p == end || (comments && *p == '#')) return 0;
  const char *k = p;
  while (p < end && (is_ident(*p) || *p == '.')) p++;
  if (p == k || !is_ident_start(*k)) {
    perr(P, (int)(k - line) + 1, "expected 'key = value'");
    return -1;
  }
  *key = k;
  *key_len = (size_t)(p - k);
  *key_col = (int)(k - line) + 1;
  while (p < end && is_space(*p)) p++;
  if (p == end || *p != '=') {
    /* the key quoted up to 60 bytes: a line of junk is as long as it is */
    perr(P, (int)(p - line) + 1, "expected '=' after '%.*s%s' (%s)", (int)(*key_len > 60 ? 60 : *key_len), k,
         *key_len > 60 ? "..." : "", P->file ? "lines are 'key = value'" : "write key=value");
    return -1;
  }
  p++;
  while (p < end && is_space(*p)) p++;
  *v = (value){0};
  v->col = (int)(p - line) + 1;
  if (p < end && *p == '"') {
    if (!read_quoted(P, line, &p, end, v)) return -1;
    while (p < end && is_space(*p)) p++;
    if (p < end && !(comments && *p == '#')) {
      perr(P, (int)(p - line) + 1, "unexpected text after the string");
      free(v->owned);
      return -1;
    }
    return 1;
  }
  const char *stop = p;
  while (stop < end && !(comments && *stop == '#')) stop++;
  while (stop > p && is_space(stop[-1])) stop--;
  if (stop == p) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)*key_len, k);
    int ki = key_index(name);
    perr(P, v->col, "no value for '%s'%s", name,
         ki >= 0 && keys[ki].kind == K_STR ? " (write \"\" for an empty string)" : "");
    return -1;
  }
  if (!check_chars(P, p, (size_t)(stop - p), line)) return -1;
  v->text = p;
  v->len = (size_t)(stop - p);
  return 1;
}

/* ---- values ------------------------------------------------------------- */

/* A decimal number: what strtod reads, minus hex, inf, nan and spaces;
 * *exact is the same text read as a long double (64 or more bits of
 * mantissa where the platform has them), which tells 2^53 + 1 from the
 * 2^53 it rounds to as a double. */
static bool read_number(const value *v, double *out, long double *exact) {
  if (v->quoted || v->len == 0 || v->len >= MAX_NUMBER) return false;
  char buf[MAX_NUMBER];
  memcpy(buf, v->text, v->len);
  buf[v->len] = 0;
  for (const char *p = buf; *p; p++)
    if (!strchr("0123456789.eE+-", *p)) return false;
  char *end;
  errno = 0;
  double d = strtod(buf, &end);
  if (end == buf || *end || errno == ERANGE || !isfinite(d)) return false;
  *out = d;
  *exact = strtold(buf, NULL);
  return true;
}

static void fmt_double(char *buf, size_t n, double d);

static void range_text(const key_info *K, char *buf, size_t n) {
  char lo[32], hi[32];
  fmt_double(lo, sizeof lo, K->lo);
  fmt_double(hi, sizeof hi, K->hi);
  if (isinf(K->hi))
    snprintf(buf, n, "%s %s", K->lo_open ? ">" : ">=", lo);
  else
    snprintf(buf, n, "in %c%s, %s%c", K->lo_open ? '(' : '[', lo, hi, K->hi_open ? ')' : ']');
}

static bool in_range(const key_info *K, double d) {
  return (K->lo_open ? d > K->lo : d >= K->lo) && (K->hi_open ? d < K->hi : d <= K->hi);
}

/* Sets keys[k] from v; false after reporting why not. */
static bool set_key(parser *P, tg_train_config *cfg, int k, const value *v) {
  const key_info *K = &keys[k];
  const char *name = K->name;
  int vl = (int)(v->len > 60 ? 60 : v->len);
  const char *more = v->len > 60 ? "..." : "";
  switch (K->kind) {
  case K_INT:
  case K_FLOAT: {
    const char *what = K->kind == K_INT ? "an integer" : "a number";
    double d;
    long double exact;
    if (v->quoted) {
      perr(P, v->col, "%s takes %s, not a string", name, what);
      return false;
    }
    if (!read_number(v, &d, &exact) || (K->kind == K_INT && (d != floor(d) || exact != floorl(exact)))) {
      perr(P, v->col, "%s takes %s, not '%.*s%s'", name, what, vl, v->text, more);
      return false;
    }
    /* an integer is taken only as written: one past 2^53 would round to
     * 2^53 and be accepted as another number */
    if (!in_range(K, d) || (K->kind == K_INT && exact != (long double)d)) {
      char r[96];
      range_text(K, r, sizeof r);
      perr(P, v->col, "%s must be %s, not %.*s%s", name, r, vl, v->text, more);
      return false;
    }
    if (K->kind == K_INT) CINT(cfg, k) = (int64_t)d;
    else CFLOAT(cfg, k) = d == 0 ? 0 : d; /* no -0: it would print as "-0" */
    return true;
  }
  case K_BOOL: {
    bool t = !v->quoted && v->len == 4 && !memcmp(v->text, "true", 4);
    bool f = !v->quoted && v->len == 5 && !memcmp(v->text, "false", 5);
    if (!t && !f) {
      if (v->quoted) perr(P, v->col, "%s takes true or false, not a string", name);
      else perr(P, v->col, "%s takes true or false, not '%.*s%s'", name, vl, v->text, more);
      return false;
    }
    CBOOL(cfg, k) = t;
    return true;
  }
  case K_STR: {
    char *s = tg_xrealloc(NULL, v->len + 1);
    memcpy(s, v->text, v->len);
    s[v->len] = 0;
    const char *why = K->check ? K->check(s) : NULL;
    if (why) {
      if (K->check == check_backend) {
        const char *near = tg_backend_suggest(s);
        if (near)
          perr(P, v->col, "unknown backend '%.*s%s'; did you mean '%s'? (%s)", vl, s, more, near,
               tg_backend_names_text());
        else
          perr(P, v->col, "unknown backend '%.*s%s' (%s)", vl, s, more, tg_backend_names_text());
      } else {
        perr(P, v->col, "%s %s", name, why);
      }
      free(s);
      return false;
    }
    free(CSTR(cfg, k));
    CSTR(cfg, k) = s;
    return true;
  }
  }
  return false;
}

static bool set_define(parser *P, tg_train_config *cfg, const char *name, int key_col,
                       const value *v, tg_cfg_origin origin) {
  if (!*name || !is_ident_start(*name) || strchr(name, '.')) {
    perr(P, key_col, "expected a config constant's name after 'model.' (model.n_layer = 4)");
    return false;
  }
  /* tgrun binds the model's B and T to the batch it feeds; two places to
   * say the same thing would only let them disagree. */
  if (!strcmp(name, "B") || !strcmp(name, "T")) {
    perr(P, key_col, "model.%s is set by tgrun from %s; set %s instead", name,
         *name == 'B' ? "batch_size" : "block_size", *name == 'B' ? "batch_size" : "block_size");
    return false;
  }
  double d;
  long double exact_unused; /* a model's constants are numbers, not integers: the compiler checks sizes */
  if (!read_number(v, &d, &exact_unused)) {
    if (v->quoted) perr(P, v->col, "model.%s takes a number, not a string", name);
    else
      perr(P, v->col, "model.%s takes a number, not '%.*s%s'", name, (int)(v->len > 60 ? 60 : v->len),
           v->text, v->len > 60 ? "..." : "");
    return false;
  }
  for (int i = 0; i < cfg->n_defines; i++)
    if (!strcmp(cfg->defines[i].name, name)) {
      cfg->defines[i].value = d == 0 ? 0 : d;
      cfg->defines[i].origin = origin;
      return true;
    }
  /* a model has a handful of constants; a file with thousands is broken
   * (and each one is a -D the compiler would look up) */
  if (cfg->n_defines >= TG_TRAIN_MAX_DEFINES) {
    perr(P, key_col, "too many model.NAME keys (at most %d): remove the ones the model does not have",
         TG_TRAIN_MAX_DEFINES);
    return false;
  }
  cfg->defines = tg_xrealloc(cfg->defines, (size_t)(cfg->n_defines + 1) * sizeof *cfg->defines);
  cfg->defines[cfg->n_defines++] = (tg_model_define){xstrdup(name), d == 0 ? 0 : d, origin};
  return true;
}

static void unknown_key(parser *P, const char *name, int col) {
  const char *known[NKEYS];
  for (int i = 0; i < NKEYS; i++) known[i] = keys[i].name;
  const char *near = tg_nearest(name, known, NKEYS);
  if (near) perr(P, col, "unknown key '%s'; did you mean '%s'?", name, near);
  else if (strchr(name, '.'))
    perr(P, col, "unknown key '%s' (only model.NAME has a dot)", name);
  else
    perr(P, col, "unknown key '%s' (a config constant of the model is set as 'model.%s')", name,
         name);
}

/* Which defines this parse has set, for duplicate checks: (name, line). */
typedef struct seen_define {
  char *name;
  int line;
} seen_define;

typedef struct seen {
  int key_line[NKEYS];
  seen_define *defs;
  int n_defs;
} seen;

/* Applies one split line; seen is NULL for the command line. */
static void apply(parser *P, tg_train_config *cfg, const char *key, size_t key_len, int key_col,
                  const value *v, seen *S) {
  char name[128];
  if (key_len >= sizeof name) {
    perr(P, key_col, "unknown key '%.40s...'", key);
    return;
  }
  memcpy(name, key, key_len);
  name[key_len] = 0;
  tg_cfg_origin origin = {P->file ? P->line : 0, P->file ? v->col : 0, P->file == NULL};
  if (!strncmp(name, "model.", 6)) {
    const char *d = name + 6;
    if (S)
      for (int i = 0; i < S->n_defs; i++)
        if (!strcmp(S->defs[i].name, d)) {
          perr(P, key_col, "duplicate key '%s' (first set at line %d)", name, S->defs[i].line);
          return;
        }
    if (!set_define(P, cfg, d, key_col, v, origin)) return;
    if (S) {
      S->defs = tg_xrealloc(S->defs, (size_t)(S->n_defs + 1) * sizeof *S->defs);
      S->defs[S->n_defs++] = (seen_define){xstrdup(d), P->line};
    }
    return;
  }
  int k = key_index(name);
  if (k < 0) {
    unknown_key(P, name, key_col);
    return;
  }
  if (S && S->key_line[k]) {
    perr(P, key_col, "duplicate key '%s' (first set at line %d)", name, S->key_line[k]);
    return;
  }
  if (S) S->key_line[k] = P->line; /* a bad value still counts as the first setting */
  if (set_key(P, cfg, k, v)) cfg->origin[k] = origin;
}

/* ---- files and arguments ------------------------------------------------ */

static bool parse_text(tg_ctx *ctx, const tg_source *src, tg_train_config *cfg) {
  parser P = {ctx, src->path, NULL, 0, 0};
  seen S = {{0}, NULL, 0};
  const char *p = src->text, *end = src->text + src->len;
  /* A UTF-8 byte-order mark, which some Windows editors put first: not
   * text, and invisible in an editor, so it is skipped rather than read as
   * a key that cannot be seen; columns count from after it, as shown. */
  if (end - p >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3;
  while (p < end && P.nerrors <= MAX_ERRORS) {
    P.line++;
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    size_t len = (size_t)(eol - p);
    if (len && p[len - 1] == '\r') len--; /* CRLF files */
    const char *key;
    size_t key_len;
    int key_col;
    value v;
    if (split_line(&P, p, len, true, &key, &key_len, &key_col, &v) == 1) {
      apply(&P, cfg, key, key_len, key_col, &v, &S);
      free(v.owned);
    }
    p = eol + 1;
  }
  if (P.nerrors > MAX_ERRORS)
    tg_report(ctx, "note", (tg_loc){src->path, 0, 0}, "too many errors; stopped at line %d",
              P.line);
  for (int i = 0; i < S.n_defs; i++) free(S.defs[i].name);
  free(S.defs);
  free(cfg->path);
  cfg->path = xstrdup(src->path);
  return P.nerrors == 0;
}

/* tg_source_load and tg_source_check_text bail on a bad file; turn that
 * into a NULL so that our callers need no jmp_buf of their own. */
static const tg_source *checked_source(tg_ctx *ctx, const char *path, const char *text,
                                       size_t len) {
  jmp_buf jb, *saved = ctx->bail;
  ctx->bail = &jb;
  if (setjmp(jb)) {
    ctx->bail = saved;
    return NULL;
  }
  const tg_source *src =
      text ? tg_source_add(ctx, path, text, len) : tg_source_load(ctx, path, (tg_loc){0});
  tg_source_check_text(ctx, src);
  ctx->bail = saved;
  return src;
}

bool tg_train_config_load(tg_ctx *ctx, const char *path, tg_train_config *cfg) {
  const tg_source *src = checked_source(ctx, path, NULL, 0);
  return src && parse_text(ctx, src, cfg);
}

bool tg_train_config_parse(tg_ctx *ctx, const char *name, const char *text, size_t len,
                           tg_train_config *cfg) {
  const tg_source *src = checked_source(ctx, name, text, len);
  return src && parse_text(ctx, src, cfg);
}

bool tg_train_config_override(tg_ctx *ctx, tg_train_config *cfg, const char *arg) {
  parser P = {ctx, NULL, arg, 0, 0};
  /* UTF-8 text, as a file must be: the effective config a run writes to
   * out_dir/train.cfg has to load again */
  size_t len = strlen(arg), bad = tg_utf8_check(arg, len);
  if (bad < len) {
    perr(&P, (int)bad + 1, "invalid UTF-8 byte 0x%02x (train.cfg and its KEY=VALUE arguments are UTF-8 text)",
         (unsigned char)arg[bad]);
    return false;
  }
  const char *key;
  size_t key_len;
  int key_col;
  value v;
  int r = split_line(&P, arg, strlen(arg), false, &key, &key_len, &key_col, &v);
  if (r == 0) perr(&P, 1, "expected 'key=value', e.g. max_steps=100");
  if (r != 1) return false;
  apply(&P, cfg, key, key_len, key_col, &v, NULL);
  free(v.owned);
  return P.nerrors == 0;
}

/* ---- rules between keys ------------------------------------------------- */

static tg_loc origin_loc(const tg_train_config *cfg, tg_cfg_origin o) {
  if (o.cmdline) return (tg_loc){"command line", 0, 0};
  if (o.line > 0 && cfg->path) return (tg_loc){cfg->path, o.line, o.col};
  return (tg_loc){NULL, 0, 0};
}

static bool is_set(tg_cfg_origin o) { return o.cmdline || o.line > 0; }

/* The later of two settings: the command line comes after the file. */
static bool later(tg_cfg_origin a, tg_cfg_origin b) {
  if (a.cmdline != b.cmdline) return a.cmdline;
  return a.line > b.line;
}

static const char *how_set(tg_cfg_origin o) {
  return o.cmdline ? ", from the command line" : o.line > 0 ? "" : ", the default";
}

/* Reports a broken rule between keys a and b at the later of their
 * settings, with a note where the other one was set. */
__attribute__((format(printf, 5, 6))) static void rule_error(tg_ctx *ctx,
                                                             const tg_train_config *cfg, int a,
                                                             int b, const char *fmt, ...) {
  tg_cfg_origin oa = cfg->origin[a], ob = cfg->origin[b];
  int at = later(ob, oa) ? b : a, other = at == a ? b : a;
  va_list ap;
  va_start(ap, fmt);
  tg_vreport(ctx, "error", origin_loc(cfg, cfg->origin[at]), fmt, ap);
  va_end(ap);
  tg_cfg_origin oo = cfg->origin[other];
  if (is_set(oo) && !oo.cmdline)
    tg_report(ctx, "note", origin_loc(cfg, oo), "%s is set here", keys[other].name);
}

bool tg_train_config_validate(tg_ctx *ctx, const tg_train_config *cfg) {
  int before = ctx->nerrors;
  int warm = key_index("warmup_steps"), max = key_index("max_steps");
  int lr = key_index("learning_rate"), min_lr = key_index("min_lr");
  int decay = key_index("lr_decay_steps"), resume = key_index("resume");
  int init = key_index("init_from"), batch = key_index("batch_size");
  const tg_cfg_origin *o = cfg->origin;
  if (cfg->warmup_steps > cfg->max_steps)
    /* Refused, not capped: a run that is all warmup never reaches its
     * learning_rate, which a short test run would not show. */
    rule_error(ctx, cfg, warm, max,
               "warmup_steps (%lld%s) must not exceed max_steps (%lld%s): set warmup_steps to at most "
               "%lld, or raise max_steps",
               (long long)cfg->warmup_steps, how_set(o[warm]), (long long)cfg->max_steps,
               how_set(o[max]), (long long)cfg->max_steps);
  if (cfg->min_lr > cfg->learning_rate)
    rule_error(ctx, cfg, min_lr, lr, "min_lr (%g%s) must not exceed learning_rate (%g%s)",
               cfg->min_lr, how_set(o[min_lr]), cfg->learning_rate, how_set(o[lr]));
  /* The cosine runs over [warmup_steps, lr_decay_steps]; ending before it
   * starts would drop the rate from its peak to min_lr in one step. */
  if (cfg->lr_decay_steps && cfg->lr_decay_steps < cfg->warmup_steps)
    rule_error(ctx, cfg, decay, warm,
               "lr_decay_steps (%lld%s) must be 0 (max_steps) or at least warmup_steps (%lld%s)",
               (long long)cfg->lr_decay_steps, how_set(o[decay]), (long long)cfg->warmup_steps,
               how_set(o[warm]));
  if (cfg->resume && cfg->overwrite)
    rule_error(ctx, cfg, resume, key_index("overwrite"),
               "resume = true continues out_dir's run and overwrite = true replaces it: set one of them");
  if (cfg->resume && *cfg->init_from)
    rule_error(ctx, cfg, resume, init,
               "resume = true continues from out_dir's checkpoint; it cannot also start from "
               "init_from '%s'",
               cfg->init_from);
  /* Counts of tokens are int64 everywhere; keep their products far away
   * from overflow (2^48 tokens a step is far beyond any machine). */
  double tokens = (double)cfg->batch_size * (double)cfg->block_size * (double)cfg->grad_accum;
  if (tokens > 281474976710656.0)
    tg_report(ctx, "error", origin_loc(cfg, o[batch]),
              "batch_size * block_size * grad_accum = %.3g tokens a step is too many (at most 2^48)",
              tokens);
  return ctx->nerrors == before;
}

/* ---- printing and comparing --------------------------------------------- */

/* The shortest decimal that reads back as the same double. */
static void fmt_double(char *buf, size_t n, double d) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) return;
  }
}

static void print_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '\n') fputs("\\n", out);
    else if (*s == '\t') fputs("\\t", out);
    else if (*s == '"') fputs("\\\"", out);
    else if (*s == '\\') fputs("\\\\", out);
    else fputc(*s, out);
  }
  fputc('"', out);
}

bool tg_train_config_print(FILE *out, const tg_train_config *cfg) {
  enum { W = 19 }; /* strlen("checkpoint_interval"): the '=' signs line up */
  char num[64];
  for (int k = 0; k < NKEYS; k++) {
    const key_info *K = &keys[k];
    if (K->group) fprintf(out, "%s# %s\n", k ? "\n" : "", K->group);
    fprintf(out, "%-*s = ", W, K->name);
    switch (K->kind) {
    case K_STR: print_string(out, CSTR(cfg, k)); break;
    case K_INT: fprintf(out, "%lld", (long long)CINT(cfg, k)); break;
    case K_FLOAT:
      fmt_double(num, sizeof num, CFLOAT(cfg, k));
      /* 1.0, not 1: the reader sees a float key at a glance. */
      fprintf(out, "%s%s", num, strpbrk(num, ".e") ? "" : ".0");
      break;
    case K_BOOL: fputs(CBOOL(cfg, k) ? "true" : "false", out); break;
    }
    fputc('\n', out);
    if (k == 0)
      for (int i = 0; i < cfg->n_defines; i++) {
        char key[160];
        snprintf(key, sizeof key, "model.%s", cfg->defines[i].name);
        fmt_double(num, sizeof num, cfg->defines[i].value);
        fprintf(out, "%-*s = %s\n", W, key, num);
      }
  }
  return fflush(out) == 0 && !ferror(out);
}

uint64_t tg_train_config_hash(const tg_train_config *cfg) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the printed config */
  if (!f) return h;
  tg_train_config_print(f, cfg);
  fclose(f);
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
  free(text);
  return h;
}

bool tg_train_config_equal(const tg_train_config *a, const tg_train_config *b) {
  for (int k = 0; k < NKEYS; k++) {
    switch (keys[k].kind) {
    case K_STR:
      if (strcmp(CSTR(a, k), CSTR(b, k))) return false;
      break;
    case K_INT:
      if (CINT(a, k) != CINT(b, k)) return false;
      break;
    case K_FLOAT:
      if (CFLOAT(a, k) != CFLOAT(b, k)) return false;
      break;
    case K_BOOL:
      if (CBOOL(a, k) != CBOOL(b, k)) return false;
      break;
    }
  }
  if (a->n_defines != b->n_defines) return false;
  for (int i = 0; i < a->n_defines; i++)
    if (strcmp(a->defines[i].name, b->defines[i].name) ||
        a->defines[i].value != b->defines[i].value)
      return false;
  return true;
}
