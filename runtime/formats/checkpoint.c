/* checkpoint.c: training checkpoints in safetensors (see checkpoint.h).
 *
 * The safetensors reader and writer, tg_file_type and tg_copy_box do the
 * format and the padding; this file decides what a checkpoint must hold
 * and refuses anything else.  F32 tensors are copied bit for bit, never
 * through double: a resumed run must continue from exactly the numbers it
 * stopped with, NaN payloads and negative zeros included. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "file.h"
#include "names.h" /* the optimizer's and the weight copies' prefixes */
#include "safetensors.h"
#include "sha256.h"

/* ---- the config text ------------------------------------------------- */

/* The run's B and T apart: weights.c's one spelling of a model's constants. */
static char *constants_text(const tg_graph *g, bool batch) { return tg_weights_config_text(g, batch); }

char *tg_ckpt_config_text(const tg_graph *g) { return constants_text(g, false); }

/* ---- saving ------------------------------------------------------------ */

/* ---- the checksum ------------------------------------------------------- */

static int by_data(const void *a, const void *b) {
  const tg_st_tensor *x = *(const tg_st_tensor *const *)a, *y = *(const tg_st_tensor *const *)b;
  const char *p = x->data, *q = y->data;
  return p < q ? -1 : p > q;
}

static int by_key(const void *a, const void *b) {
  return strcmp(((const tg_st_meta *)a)->key, ((const tg_st_meta *)b)->key);
}

/* The SHA-256, as lower-case hex, of the tensors' bytes in the order they
 * lie in the file (the writer's order); with meta (n_meta entries), of the
 * metadata first: every entry but "sha256" and "data_sha256", sorted by
 * key, each key and value preceded by its length (8 bytes, little-endian),
 * so that no edit of a key, a value or where one ends goes unseen. */
static void file_sha256(const tg_st_tensor *ts, int n, bool in_file, const tg_st_meta *meta, int n_meta,
                        char hex[TG_SHA256_HEX]) {
  tg_sha256 h;
  tg_sha256_init(&h);
  tg_st_meta *sorted = tg_xcalloc((size_t)n_meta + 1, sizeof *sorted);
  if (n_meta) memcpy(sorted, meta, (size_t)n_meta * sizeof *sorted);
  qsort(sorted, (size_t)n_meta, sizeof *sorted, by_key);
  for (int i = 0; i < n_meta; i++) {
    if (!strcmp(sorted[i].key, "sha256") || !strcmp(sorted[i].key, "data_sha256")) continue;
    const char *part[2] = {sorted[i].key, sorted[i].value};
    for (int j = 0; j < 2; j++) {
      uint64_t len = strlen(part[j]);
      unsigned char le[8];
      for (int b = 0; b < 8; b++) le[b] = (unsigned char)(len >> (8 * b));
      tg_sha256_update(&h, le, 8);
      tg_sha256_update(&h, part[j], len);
    }
  }
  free(sorted);
  const tg_st_tensor **order = tg_xcalloc((size_t)n + 1, sizeof *order);
  for (int i = 0; i < n; i++) order[i] = &ts[i];
  if (in_file) qsort(order, (size_t)n, sizeof *order, by_data);
  for (int i = 0; i < n; i++) tg_sha256_update(&h, order[i]->data, order[i]->nbytes);
  tg_sha256_final(&h, NULL, hex);
  free(order);
}

/* Whether f matches its checksum: "sha256", over the metadata and the
 * data, or in a file of a tg from before it (which has only
 * "data_sha256"), the data alone; a file with neither passes.  On a
 * mismatch, why says so. */
static bool checksum_ok(const tg_st_file *f, char *why, size_t whylen) {
  const char *whole = tg_st_meta_get(f, "sha256"), *data = tg_st_meta_get(f, "data_sha256");
  const char *want = whole ? whole : data;
  if (!want) return true;
  char got[TG_SHA256_HEX];
  file_sha256(f->tensors, f->n_tensors, true, f->meta, whole ? f->n_meta : 0, got);
  if (!strcmp(got, want)) return true;
  return tg_why(why, whylen,
                "the file does not match the checksum in __metadata__ (%s %.12s..., the %s hashes to %.12s...): the "
                "file was damaged or edited after it was written",
                whole ? "sha256" : "data_sha256", want, whole ? "metadata and data" : "data", got);
}

/* A parameter's bf16 copy (passes/precision.c): state the step keeps but
 * the parameter determines, so a checkpoint neither holds nor needs it. */
static bool derived(const tg_node *n) {
  return n->op == TG_OP_state && n->name && !strncmp(n->name, TG_BF16_COPY_PREFIX, strlen(TG_BF16_COPY_PREFIX));
}

bool tg_ckpt_save(const char *path, const tg_graph *g, float *const *values,
                  const tg_ckpt_meta *m, char *why, size_t whylen) {
  if (!g || !values || !m) return tg_why(why, whylen, "no graph, values or metadata");
  if (m->step < 0) return tg_why(why, whylen, "step %lld: a checkpoint counts steps from 0",
                                 (long long)m->step);
  tg_st_tensor *ts = tg_xcalloc((size_t)g->n_nodes, sizeof *ts);
  float **cropped = tg_xcalloc((size_t)g->n_nodes, sizeof *cropped);
  bool ok = true;
  int n = 0;
  /* Parameters first, then the optimizer state: the head of the header
   * reads like a weights file. */
  for (int pass = 0; pass < 2 && ok; pass++)
    for (int k = 0; k < g->n_nodes && ok; k++) {
      const tg_node *leaf = g->nodes[k];
      if (leaf->op != (pass == 0 ? TG_OP_param : TG_OP_state) || derived(leaf)) continue;
      if (!values[k]) {
        ok = tg_why(why, whylen, "%s: no value for the model's %s '%s'", path,
                    pass == 0 ? "parameter" : "optimizer state", leaf->name);
        break;
      }
      tg_type ft;
      tg_file_type(g, &leaf->type, &ft);
      const float *data = values[k];
      if (!tg_type_same_shape(&ft, &leaf->type)) {
        cropped[k] = tg_xcalloc((size_t)tg_type_numel(&ft), sizeof(float));
        tg_copy_box(values[k], &leaf->type, cropped[k], &ft);
        data = cropped[k];
      }
      tg_st_tensor *t = &ts[n++];
      t->name = leaf->name;
      t->dtype = TG_F32;
      t->rank = ft.rank;
      for (int d = 0; d < ft.rank; d++) t->shape[d] = ft.dim[d].size;
      t->data = data;
      t->nbytes = (size_t)tg_type_numel(&ft) * sizeof(float);
    }
  char step[24], pos[24], seed[24];
  snprintf(step, sizeof step, "%lld", (long long)m->step);
  snprintf(pos, sizeof pos, "%llu", (unsigned long long)m->data_position);
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)m->seed);
  char *config = tg_ckpt_config_text(g), *batch = constants_text(g, true);
  char sum[TG_SHA256_HEX], whole[TG_SHA256_HEX];
  if (ok) file_sha256(ts, n, false, NULL, 0, sum);
  tg_st_meta meta[11];
  int nm = 0;
  /* "format" is Hugging Face's key, which its loaders read as the
   * framework: "pt" lets transformers load the weights as they are; tg's
   * own tag has a key of its own (files of older tgs put it in "format") */
  meta[nm++] = (tg_st_meta){"format", "pt"};
  meta[nm++] = (tg_st_meta){"tg_format", TG_CKPT_FORMAT};
  meta[nm++] = (tg_st_meta){"step", step};
  meta[nm++] = (tg_st_meta){"data_position", pos};
  meta[nm++] = (tg_st_meta){"seed", seed};
  meta[nm++] = (tg_st_meta){"config", config};
  if (*batch) meta[nm++] = (tg_st_meta){"batch", batch};
  if (m->model) meta[nm++] = (tg_st_meta){"model", m->model};
  if (m->writer) meta[nm++] = (tg_st_meta){"writer", m->writer};
  /* data_sha256 as well, for the tgs before sha256, which check it */
  if (ok) meta[nm++] = (tg_st_meta){"data_sha256", sum};
  if (ok) {
    file_sha256(ts, n, false, meta, nm, whole);
    meta[nm++] = (tg_st_meta){"sha256", whole};
  }
  if (ok) ok = tg_st_write(path, ts, n, meta, nm, why, whylen);
  free(config);
  free(batch);
  for (int k = 0; k < g->n_nodes; k++) free(cropped[k]);
  free(cropped);
  free(ts);
  return ok;
}

/* ---- loading ------------------------------------------------------------ */

/* Strict decimal: digits only, no sign, no leading zero, no overflow. */
static bool parse_u64(const char *s, uint64_t max, uint64_t *out) {
  if (!s || !*s || (s[0] == '0' && s[1])) return false;
  uint64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return false;
    unsigned d = (unsigned)(*p - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

static const char *need_meta(tg_ctx *ctx, const tg_st_file *f, const char *key) {
  const char *v = tg_st_meta_get(f, key);
  if (!v)
    tg_error(ctx, (tg_loc){f->path, 0, 0},
             "the checkpoint's __metadata__ has no '%s' (a " TG_CKPT_FORMAT
             " file has tg_format, step, data_position, seed and config)", key);
  return v;
}

static uint64_t meta_number(tg_ctx *ctx, const tg_st_file *f, const char *key, uint64_t max,
                            const char *what) {
  const char *v = need_meta(ctx, f, key);
  uint64_t x;
  if (!parse_u64(v, max, &x))
    tg_error(ctx, (tg_loc){f->path, 0, 0}, "__metadata__ '%s' is '%s': expected %s", key, v, what);
  return x;
}

/* Reports the first constant in which two config texts differ, then both
 * texts whole: "n_layer=2 here, n_layer=1 in the model" says at once what
 * a list of ten constants would hide. */
_Noreturn static void config_mismatch(tg_ctx *ctx, const tg_st_file *f, const tg_graph *g,
                                      const char *have, const char *want) {
  char a[128] = "?", b[128] = "?";
  const char *p = have, *q = want;
  for (;;) {
    size_t la = strcspn(p, " "), lb = strcspn(q, " ");
    if (la != lb || strncmp(p, q, la)) {
      snprintf(a, sizeof a, "%.*s", (int)(la < 100 ? la : 100), p);
      snprintf(b, sizeof b, "%.*s", (int)(lb < 100 ? lb : 100), q);
      if (!la) strcpy(a, "nothing more");
      if (!lb) strcpy(b, "nothing more");
      break;
    }
    if (!p[la] && !q[lb]) break;
    p += la + (p[la] != 0);
    q += lb + (q[lb] != 0);
  }
  tg_error(ctx, (tg_loc){f->path, 0, 0},
           "the checkpoint is of another model: %s in the checkpoint, %s in %s "
           "(checkpoint: '%s'; model: '%s')",
           a, b, g->source ? g->source : "the model", have, want);
}

/* A checkpoint's tensors are the graph's params and states. */
static const tg_node *find_leaf(const tg_graph *g, const char *name) {
  const tg_node *n = tg_graph_leaf(g, TG_OP_param, name);
  return n ? n : tg_graph_leaf(g, TG_OP_state, name);
}

static bool is_moment_name(const char *name, const char **param) {
  size_t lm = strlen(TG_ADAM_M_PREFIX), lv = strlen(TG_ADAM_V_PREFIX);
  if (!strncmp(name, TG_ADAM_M_PREFIX, lm)) *param = name + lm;
  else if (!strncmp(name, TG_ADAM_V_PREFIX, lv)) *param = name + lv;
  else return false;
  return true;
}

/* Checks t against the leaf's file type: the dtype (optimizer state only
 * F32: a resume must not start from rounded moments) and the shape. */
static void check_tensor(tg_ctx *ctx, const tg_graph *g, const tg_st_file *f,
                         const tg_st_tensor *t, const tg_type *type, bool is_state) {
  tg_loc at = {f->path, 0, 0};
  const char *what = is_state ? "optimizer state" : "parameter";
  tg_type ft;
  tg_file_type(g, type, &ft);
  if (is_state ? t->dtype != TG_F32 : !tg_dtype_is_float(t->dtype))
    tg_error(ctx, at, "tensor '%s' has dtype %s, but the model's %s is %s", t->name,
             tg_dtype_name(t->dtype), what, is_state ? "F32 (moments are never rounded)"
                                                     : "a float tensor");
  bool same = t->rank == ft.rank;
  for (int d = 0; same && d < t->rank; d++) same = t->shape[d] == ft.dim[d].size;
  if (!same) {
    char a[256], b[TG_TYPE_STR_MAX];
    tg_error(ctx, at, "tensor '%s' has shape %s, but the model's %s is %s", t->name,
             tg_st_shape_str(t->shape, t->rank, a, sizeof a), what, tg_type_str(&ft, b, sizeof b));
  }
}

/* t's values at the leaf's graph shape; t already checked. */
static float *take(const tg_graph *g, const tg_st_tensor *t, const tg_node *n) {
  tg_type ft;
  tg_file_type(g, &n->type, &ft);
  int64_t numel = tg_type_numel(&ft);
  float *vals = tg_xcalloc((size_t)numel, sizeof *vals);
  if (t->dtype == TG_F32) {
    memcpy(vals, t->data, t->nbytes); /* unaligned in the file: memcpy, not a cast */
  } else {
    double *tmp = tg_xcalloc((size_t)numel, sizeof *tmp);
    tg_st_to_f64(t, tmp);
    for (int64_t i = 0; i < numel; i++) vals[i] = (float)tmp[i];
    free(tmp);
  }
  if (tg_type_same_shape(&ft, &n->type)) return vals;
  float *out = tg_xcalloc((size_t)tg_type_numel(&n->type), sizeof *out);
  tg_copy_box(vals, &ft, out, &n->type);
  free(vals);
  return out;
}

static tg_weights *weights_new(const tg_graph *g) {
  tg_weights *w = tg_xcalloc(1, sizeof *w);
  w->g = g;
  w->values = tg_xcalloc((size_t)g->n_nodes, sizeof *w->values);
  return w;
}

static const char *arena_dup(tg_ctx *ctx, const char *s) { return s ? tg_strdup(ctx->arena, s) : NULL; }

/* The checks and the copy, on a file already read; bails through ctx.
 * Fills *w (made by the caller, so that the caller can free it on a bail). */
static void load_checkpoint(tg_ctx *ctx, const tg_graph *g, const tg_st_file *f, bool need_state,
                            tg_weights *w, tg_ckpt_meta *m) {
  tg_loc at = {f->path, 0, 0};
  char why[512];
  if (!checksum_ok(f, why, sizeof why)) tg_error(ctx, at, "%s", why);
  int64_t step = (int64_t)meta_number(ctx, f, "step", INT64_MAX, "a count of steps, 0 or more");
  uint64_t pos = meta_number(ctx, f, "data_position", UINT64_MAX, "an unsigned decimal integer");
  uint64_t seed = meta_number(ctx, f, "seed", UINT64_MAX, "an unsigned decimal integer");
  const char *config = need_meta(ctx, f, "config");
  char *want = tg_ckpt_config_text(g);
  if (strcmp(config, want)) {
    const char *w2 = tg_strdup(ctx->arena, want);
    free(want);
    config_mismatch(ctx, f, g, config, w2);
  }
  free(want);

  const char *model = g->source ? g->source : "";
  int n_state = 0;
  for (int i = 0; i < f->n_tensors; i++) {
    const tg_st_tensor *t = &f->tensors[i];
    const tg_node *n = find_leaf(g, t->name);
    const char *pname;
    if (!n && is_moment_name(t->name, &pname)) {
      /* A moment of a graph without an optimizer (sampling, evaluation):
       * known, checked, not used. */
      const tg_node *p = find_leaf(g, pname);
      if (p && p->op == TG_OP_param) {
        check_tensor(ctx, g, f, t, &p->type, true);
        n_state++;
        continue;
      }
    }
    if (!n)
      tg_error(ctx, at, "tensor '%s' is neither a parameter nor optimizer state of the model %s",
               t->name, model);
    bool is_state = n->op == TG_OP_state;
    check_tensor(ctx, g, f, t, &n->type, is_state);
    n_state += is_state;
    if (!is_state || need_state) w->values[n->id] = take(g, t, n);
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (n->op == TG_OP_param && !w->values[k])
      tg_error(ctx, at, "tensor '%s' is missing: the model's parameter %s has no value here",
               n->name, n->name);
    if (n->op != TG_OP_state || w->values[k] || derived(n)) continue;
    if (need_state && n_state == 0)
      tg_error(ctx, at, "the checkpoint has no optimizer state (it was saved without it): "
                        "use init_from to start from its weights");
    if (need_state)
      tg_error(ctx, at, "tensor '%s' is missing: the optimizer state of the model has no value here",
               n->name);
    w->values[k] = tg_xcalloc((size_t)tg_type_numel(&n->type), sizeof(float));
  }
  if (m) {
    *m = (tg_ckpt_meta){step, pos, seed, arena_dup(ctx, tg_st_meta_get(f, "model")),
                        arena_dup(ctx, config), arena_dup(ctx, tg_st_meta_get(f, "batch")),
                        arena_dup(ctx, tg_st_meta_get(f, "writer"))};
  }
}

typedef enum { FILE_CHECKPOINT, FILE_PLAIN } file_kind;

/* tg's tag of a file: "tg_format", or in a file of a tg before it wrote
 * that key, "format" (then "tg-checkpoint-1"); NULL for a file of anyone
 * else. */
static const char *tg_tag(const tg_st_file *f) {
  const char *tag = tg_st_meta_get(f, "tg_format");
  if (tag) return tag;
  tag = tg_st_meta_get(f, "format");
  return tag && !strncmp(tag, "tg-", 3) ? tag : NULL;
}

/* What the format tag says; bails on a tag of a tg format this tg does not
 * know, which a newer tg wrote. */
static file_kind classify(tg_ctx *ctx, const tg_st_file *f) {
  const char *format = tg_tag(f);
  if (format && !strcmp(format, TG_CKPT_FORMAT)) return FILE_CHECKPOINT;
  if (format && !strncmp(format, "tg-checkpoint-", 14))
    tg_error(ctx, (tg_loc){f->path, 0, 0},
             "the checkpoint's format is '%s', which this tg does not read (it reads "
             TG_CKPT_FORMAT ")", format);
  return FILE_PLAIN; /* Hugging Face's say "pt"; tgrun's weights "tg-weights-1" */
}

_Noreturn static void refuse_plain(tg_ctx *ctx, const tg_st_file *f) {
  tg_error(ctx, (tg_loc){f->path, 0, 0},
           "the file has no optimizer state: it is not a tg checkpoint (its __metadata__ has "
           "no tg_format '" TG_CKPT_FORMAT "'); use init_from to start from its weights");
}

/* Loads from f (owned: freed here) or, for a plain weights file with
 * need_state false, through tg_weights_load.  NULL after an error. */
static tg_weights *load_owned(tg_ctx *ctx, const tg_graph *g, tg_st_file *f, bool need_state,
                              tg_ckpt_meta *m) {
  tg_weights *volatile w = NULL;
  tg_st_file *volatile vf = f;
  char *volatile path = NULL;
  jmp_buf here, *outer = ctx->bail;
  ctx->bail = &here;
  if (setjmp(here)) {
    ctx->bail = outer;
    tg_weights_free(w);
    tg_st_free(vf);
    free(path);
    return NULL;
  }
  if (classify(ctx, f) == FILE_PLAIN) {
    if (need_state) refuse_plain(ctx, f);
    path = strdup(f->path);
    vf = NULL;
    tg_st_free(f);
    /* A second read, once per run: the weights-file rules (conversions,
     * Hugging Face's mask buffers) stay in one place. */
    w = tg_weights_load(ctx, g, path, false);
    free(path);
    path = NULL;
    if (m) *m = (tg_ckpt_meta){0};
  } else {
    w = weights_new(g);
    load_checkpoint(ctx, g, f, need_state, w, m);
    vf = NULL;
    tg_st_free(f);
  }
  ctx->bail = outer;
  return w;
}

tg_weights *tg_ckpt_load(tg_ctx *ctx, const tg_graph *g, const char *path, bool need_state,
                         tg_ckpt_meta *m) {
  jmp_buf here, *outer = ctx->bail;
  ctx->bail = &here;
  if (setjmp(here)) {
    ctx->bail = outer;
    return NULL;
  }
  tg_st_file *f = tg_st_read(ctx, path);
  ctx->bail = outer;
  return load_owned(ctx, g, f, need_state, m);
}

/* ---- the run directory ------------------------------------------------- */

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--; /* "out/" and "out" name the same files */
  size_t len = n + 1 + strlen(name) + 1;
  char *p = tg_xcalloc(len, 1);
  snprintf(p, len, "%.*s%s%s", (int)n, dir, !n || dir[n - 1] == '/' ? "" : "/", name);
  return p;
}

/* tg_st_write's temporaries are ckpt.safetensors.tmp.PID; one of another
 * process is what a crash left (two runs never share a directory), and may
 * be as large as a checkpoint. */
static void remove_stale_temps(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  const char *prefix = TG_CKPT_FILE ".tmp.";
  size_t lp = strlen(prefix);
  char mine[32];
  snprintf(mine, sizeof mine, "%ld", (long)getpid());
  for (struct dirent *e; (e = readdir(d));) {
    const char *s = e->d_name;
    if (strncmp(s, prefix, lp) || !s[lp] || strspn(s + lp, "0123456789") != strlen(s + lp) ||
        !strcmp(s + lp, mine))
      continue;
    char *p = join(dir, s);
    (void)unlink(p);
    free(p);
  }
  closedir(d);
}

bool tg_ckpt_save_in_dir(const char *dir, const tg_graph *g, float *const *values,
                         const tg_ckpt_meta *m, char *why, size_t whylen) {
  if (!dir || !*dir) return tg_why(why, whylen, "no directory for the checkpoint");
  struct stat st;
  if (stat(dir, &st) != 0)
    return tg_why(why, whylen, "cannot use the directory '%s': %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return tg_why(why, whylen, "'%s' is not a directory", dir);
  remove_stale_temps(dir);
  char *cur = join(dir, TG_CKPT_FILE), *prev = join(dir, TG_CKPT_PREV_FILE);
  bool ok = true;
  /* The only moment with a single complete checkpoint is the write below,
   * and then it is prev.  A missing ckpt (the previous write failed) keeps
   * prev, which is then the newest complete one. */
  if (rename(cur, prev) == 0)
    tg_sync_dir(dir);
  else if (errno != ENOENT)
    ok = tg_why(why, whylen, "cannot rename '%s' to '%s': %s", cur, prev, strerror(errno));
  if (ok) ok = tg_ckpt_save(cur, g, values, m, why, whylen);
  free(cur);
  free(prev);
  return ok;
}

static void pass_over(tg_ctx *ctx, const char *path, const char *why) {
  tg_report(ctx, "note", (tg_loc){path, 0, 0}, "passed over: %s", why);
}

/* A candidate read with a ctx of its own, so that a damaged file is a note
 * for the caller, not an error.  NULL (after the note) when damaged or not
 * a checkpoint, or (silently) when absent. */
static tg_st_file *read_candidate(tg_ctx *ctx, const char *path, int *seen) {
  struct stat st;
  if (stat(path, &st) != 0 && errno == ENOENT) return NULL;
  ++*seen;
  tg_ctx *quiet = tg_ctx_new(NULL);
  jmp_buf here;
  quiet->bail = &here;
  tg_st_file *volatile f = NULL;
  if (setjmp(here)) {
    pass_over(ctx, path, quiet->message);
    tg_ctx_free(quiet);
    return NULL;
  }
  f = tg_st_read(quiet, path);
  const char *format = tg_tag(f);
  char why[512];
  if (!format || strcmp(format, TG_CKPT_FORMAT)) {
    pass_over(ctx, path, "not a tg checkpoint (no tg_format '" TG_CKPT_FORMAT "' in __metadata__)");
    tg_st_free(f);
    f = NULL;
  } else if (!checksum_ok(f, why, sizeof why)) {
    pass_over(ctx, path, why);
    tg_st_free(f);
    f = NULL;
  }
  tg_ctx_free(quiet);
  return f;
}

char *tg_ckpt_latest(tg_ctx *ctx, const char *dir) {
  const char *names[] = {TG_CKPT_FILE, TG_CKPT_PREV_FILE};
  int seen = 0;
  for (int i = 0; i < 2; i++) {
    char *path = join(dir, names[i]);
    tg_st_file *f = read_candidate(ctx, path, &seen);
    if (f) {
      tg_st_free(f);
      return path;
    }
    free(path);
  }
  return NULL;
}

int64_t tg_ckpt_latest_step(const char *dir, char **used) {
  /* A quiet ctx: the notes on files passed over, and any error, are the
   * load's to report; here they only mean "cannot tell". */
  tg_ctx *quiet = tg_ctx_new(NULL);
  jmp_buf here;
  quiet->bail = &here;
  const char *names[] = {TG_CKPT_FILE, TG_CKPT_PREV_FILE};
  tg_st_file *volatile f = NULL;
  char *volatile path = NULL;
  volatile int64_t step = -1;
  if (used) *used = NULL;
  if (setjmp(here) == 0) {
    int seen = 0;
    for (int i = 0; i < 2 && !f; i++) {
      free(path);
      path = join(dir, names[i]);
      f = read_candidate(quiet, path, &seen);
    }
    if (f) step = (int64_t)meta_number(quiet, f, "step", INT64_MAX, "a count of steps, 0 or more");
  }
  tg_st_free(f);
  if (step >= 0 && used) *used = path;
  else free(path);
  tg_ctx_free(quiet);
  return step;
}

tg_weights *tg_ckpt_load_latest(tg_ctx *ctx, const tg_graph *g, const char *dir, bool need_state,
                                tg_ckpt_meta *m, char **used) {
  const char *names[] = {TG_CKPT_FILE, TG_CKPT_PREV_FILE};
  if (used) *used = NULL;
  int seen = 0;
  for (int i = 0; i < 2; i++) {
    char *path = join(dir, names[i]);
    tg_st_file *f = read_candidate(ctx, path, &seen);
    if (!f) {
      free(path);
      continue;
    }
    tg_weights *w = load_owned(ctx, g, f, need_state, m);
    if (w && used) *used = path;
    else free(path);
    return w;
  }
  tg_report(ctx, "error", (tg_loc){dir, 0, 0},
            "no checkpoint to resume from: %s", seen ? "neither " TG_CKPT_FILE " nor "
            TG_CKPT_PREV_FILE " here is a complete tg checkpoint" : "no " TG_CKPT_FILE
            " or " TG_CKPT_PREV_FILE " here");
  return NULL;
}
