/* test_checkpoint.c: training checkpoints (runtime/formats/checkpoint.c).
 *
 * A one-layer GPT-2 from models/gpt2.tg, through the whole training-step
 * pipeline so that the vocabulary is padded (wte is [64, 16] in the graph,
 * [32, 16] in files) and the AdamW moments exist as state leaves.  Its
 * values are arbitrary bit patterns (NaNs with payloads, negative zeros,
 * subnormals), so that "round trip" means bit for bit.
 *
 * Then every way a checkpoint can be wrong, each checked for a message
 * naming the file and the tensor or constant: truncated, a moment missing,
 * a wrong shape or dtype, an unknown tensor, bad metadata, another model's
 * config (n_head differs: every shape agrees, only the config can tell),
 * a plain weights file asked for optimizer state; and the run directory:
 * the previous checkpoint kept, crashes simulated by the files they leave.
 *
 * Files go to a fresh directory under /tmp, removed after each test. */
#include "testutil.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "passes.h"
#include "safetensors.h"
#include "weights.h"

static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_ckpt_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  DIR *d = opendir(dir);
  if (d) {
    for (struct dirent *e; (e = readdir(d));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[512];
      snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
      unlink(sub);
    }
    closedir(d);
  }
  rmdir(dir);
}

static const char *in_dir(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 512, "%s/%s", dir, name);
  return p;
}

/* ---- the model ----------------------------------------------------------- */

/* gpt2.tg at the tiny sizes (with extra -D's after them, the last of a
 * name winning), as a training step when step is set, else forward only. */
static tg_graph *model(tg_ctx *ctx, bool step, const char *extra1, const char *extra2) {
  const char *defs[9] = {"n_layer=1", "n_embd=16", "n_head=2", "vocab=32", "block_size=8",
                         "B=2",       "T=8"};
  int n = 7;
  if (extra1) defs[n++] = extra1;
  if (extra2) defs[n++] = extra2;
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), n, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.grad = step, .step = step, .adamw = tg_adamw_defaults,
                         .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(ctx, g, &po);
  ctx->bail = NULL; /* this frame's jmp_buf dies with it */
  return g;
}

static const tg_node *node(const tg_graph *g, const char *name) {
  for (int k = 0; k < g->n_nodes; k++)
    if (g->nodes[k]->name && !strcmp(g->nodes[k]->name, name) &&
        (g->nodes[k]->op == TG_OP_param || g->nodes[k]->op == TG_OP_state))
      return g->nodes[k];
  ck_abort_msg("no leaf %s", name);
  return NULL;
}

static uint32_t next_bits(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 32);
}

/* Every param and state leaf: arbitrary bits inside the file's box, zero
 * in the padding (which a file cannot hold), with the awkward floats at
 * the start of each. */
static tg_weights *arbitrary(const tg_graph *g, uint64_t seed) {
  tg_weights *w = tg_weights_init(g, 1);
  static const uint32_t special[] = {0x80000000u, 0x00000001u, 0x7fc00123u, 0xffbfffffu,
                                     0x7f800000u, 0xff800000u, 0x00800000u};
  for (int k = 0; k < g->n_nodes; k++) {
    if (!w->values[k]) continue;
    const tg_node *n = g->nodes[k];
    tg_type ft;
    tg_file_type(g, &n->type, &ft);
    int64_t numel = tg_type_numel(&ft);
    float *box = calloc((size_t)numel, sizeof *box);
    for (int64_t i = 0; i < numel; i++) {
      uint32_t u = i < 7 ? special[i] : next_bits(&seed);
      memcpy(&box[i], &u, sizeof u);
    }
    tg_copy_box(box, &ft, w->values[k], &n->type);
    free(box);
  }
  return w;
}

static int n_leaves(const tg_graph *g, tg_op op) {
  int n = 0;
  for (int k = 0; k < g->n_nodes; k++) n += g->nodes[k]->op == op;
  return n;
}

static void assert_same(const tg_graph *g, const tg_weights *a, const tg_weights *b, tg_op op) {
  for (int k = 0; k < g->n_nodes; k++) {
    if (g->nodes[k]->op != op) continue;
    ck_assert_msg(a->values[k] && b->values[k], "%s has no value", g->nodes[k]->name);
    size_t bytes = (size_t)tg_type_numel(&g->nodes[k]->type) * sizeof(float);
    ck_assert_msg(!memcmp(a->values[k], b->values[k], bytes), "%s differs", g->nodes[k]->name);
  }
}

static void assert_zero(const tg_graph *g, const tg_weights *w, tg_op op) {
  for (int k = 0; k < g->n_nodes; k++) {
    if (g->nodes[k]->op != op) continue;
    ck_assert_ptr_nonnull(w->values[k]);
    for (int64_t i = 0; i < tg_type_numel(&g->nodes[k]->type); i++)
      ck_assert_msg(w->values[k][i] == 0, "%s[%lld] is not zero", g->nodes[k]->name,
                    (long long)i);
  }
}

static const tg_ckpt_meta meta = {.step = 123,
                                  .data_position = 18446744073709551610ull,
                                  .seed = 9007199254740992ull,
                                  .model = "models/gpt2.tg",
                                  .writer = "test_checkpoint"};

static void save(const char *path, const tg_graph *g, const tg_weights *w, int64_t step) {
  char why[512];
  tg_ckpt_meta m = meta;
  m.step = step;
  ck_assert_msg(tg_ckpt_save(path, g, w->values, &m, why, sizeof why), "%s", why);
}

/* Loads path and asserts that it fails with a message holding the path
 * and each of the fragments. */
static void refused(const tg_graph *g, const char *path, bool need_state, const char *frag1,
                    const char *frag2) {
  tg_ctx *ctx = tu_ctx();
  tg_ckpt_meta m;
  tg_weights *w = tg_ckpt_load(ctx, g, path, need_state, &m);
  const char *err = tu_errors(ctx);
  ck_assert_msg(!w, "%s was accepted", path);
  ck_assert_msg(ctx->nerrors == 1, "%d errors: %s", ctx->nerrors, err);
  char head[600];
  snprintf(head, sizeof head, "%s: error: ", path);
  ck_assert_msg(!strncmp(err, head, strlen(head)), "the message does not start with '%s': %s",
                head, err);
  ck_assert_msg(strstr(err, frag1), "'%s' not in: %s", frag1, err);
  ck_assert_msg(!frag2 || strstr(err, frag2), "'%s' not in: %s", frag2, err);
  fprintf(stderr, "test_checkpoint: %s", err);
  tu_ctx_free(ctx);
}

/* ---- editing files: read, change, write back ------------------------------ */

typedef struct edit {
  const char *drop;             /* leave this tensor out */
  const char *reshape;          /* give this one the shape [n] ... */
  int64_t n;                    /* ... of its first n floats */
  const char *to_bf16;          /* store this one as BF16 */
  const char *add;              /* add a scalar tensor of this name */
  const char *meta_key, *meta_value; /* set (or, value NULL, drop) a metadata entry */
  const char *meta_key2, *meta_value2; /* and another */
  bool keep_sum;                /* keep data_sha256 (the data is not edited) */
  bool keep_whole_sum;          /* keep sha256, the metadata's and data's (to see an edit refused) */
} edit;

static void rewrite(const char *from, const char *to, const edit *e) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("cannot read %s: %s", from, tu_errors(ctx));
  tg_st_file *f = tg_st_read(ctx, from);
  ctx->bail = NULL;
  tg_st_tensor *ts = calloc((size_t)f->n_tensors + 1, sizeof *ts);
  uint16_t *half = NULL;
  static const float one = 1;
  int n = 0;
  for (int i = 0; i < f->n_tensors; i++) {
    tg_st_tensor t = f->tensors[i];
    if (e->drop && !strcmp(t.name, e->drop)) continue;
    if (e->reshape && !strcmp(t.name, e->reshape)) {
      t.rank = 1;
      t.shape[0] = e->n;
      t.nbytes = (size_t)e->n * sizeof(float);
    }
    if (e->to_bf16 && !strcmp(t.name, e->to_bf16)) {
      size_t numel = t.nbytes / 4;
      half = calloc(numel, sizeof *half);
      for (size_t j = 0; j < numel; j++) {
        float x;
        memcpy(&x, (const char *)t.data + 4 * j, 4);
        half[j] = tg_f32_to_bf16(x);
      }
      t.dtype = TG_BF16;
      t.data = half;
      t.nbytes = numel * 2;
    }
    ts[n++] = t;
  }
  if (e->add) ts[n++] = (tg_st_tensor){.name = e->add, .dtype = TG_F32, .data = &one, .nbytes = 4};
  tg_st_meta mt[16];
  int nm = 0;
  bool set = false;
  for (int i = 0; i < f->n_meta && nm < 15; i++) {
    /* an edit changes the data: without dropping the checksum, every
     * edited file would be refused for that alone, before the check the
     * edit is there to reach (as a file from an older tg would be read) */
    if (!strcmp(f->meta[i].key, "data_sha256") && !e->keep_sum) continue;
    if (!strcmp(f->meta[i].key, "sha256") && !e->keep_whole_sum) continue;
    if (e->meta_key2 && !strcmp(f->meta[i].key, e->meta_key2)) {
      if (e->meta_value2) mt[nm++] = (tg_st_meta){e->meta_key2, e->meta_value2};
      continue;
    }
    if (e->meta_key && !strcmp(f->meta[i].key, e->meta_key)) {
      set = true;
      if (!e->meta_value) continue;
      mt[nm++] = (tg_st_meta){e->meta_key, e->meta_value};
    } else {
      mt[nm++] = f->meta[i];
    }
  }
  if (e->meta_key && e->meta_value && !set) mt[nm++] = (tg_st_meta){e->meta_key, e->meta_value};
  char why[512];
  ck_assert_msg(tg_st_write(to, ts, n, mt, nm, why, sizeof why), "%s", why);
  free(half);
  free(ts);
  tg_st_free(f);
  tu_ctx_free(ctx);
}

/* ---- tests --------------------------------------------------------------- */

START_TEST(test_round_trip) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  ck_assert_int_eq(n_leaves(g, TG_OP_state), 2 * n_leaves(g, TG_OP_param));
  ck_assert_int_eq(node(g, "wte.weight")->type.dim[0].size, 64); /* padded in the graph */
  tg_weights *w = arbitrary(g, 7);
  const char *path = in_dir("c.safetensors");
  save(path, g, w, 123);

  /* What the file holds: file shapes, F32, the metadata. */
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_st_file *f = tg_st_read(ctx, path);
  ctx->bail = NULL;
  ck_assert_int_eq(f->n_tensors, 3 * n_leaves(g, TG_OP_param));
  ck_assert_str_eq(f->tensors[0].name, "wte.weight");
  const tg_st_tensor *t = tg_st_find(f, "adam.v.wte.weight");
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(t->dtype, TG_F32);
  ck_assert_int_eq(t->rank, 2);
  ck_assert_int_eq(t->shape[0], 32);
  ck_assert_int_eq(t->shape[1], 16);
  /* "format" is Hugging Face's key (transformers reads it as the
   * framework); tg's tag has its own */
  ck_assert_str_eq(tg_st_meta_get(f, "format"), "pt");
  ck_assert_str_eq(tg_st_meta_get(f, "tg_format"), "tg-checkpoint-1");
  ck_assert_str_eq(tg_st_meta_get(f, "step"), "123");
  ck_assert_str_eq(tg_st_meta_get(f, "data_position"), "18446744073709551610");
  ck_assert_str_eq(tg_st_meta_get(f, "seed"), "9007199254740992");
  ck_assert_str_eq(tg_st_meta_get(f, "config"), "n_layer=1 n_head=2 n_embd=16 vocab=32 block_size=8");
  ck_assert_str_eq(tg_st_meta_get(f, "batch"), "B=2 T=8");
  ck_assert_str_eq(tg_st_meta_get(f, "model"), "models/gpt2.tg");
  ck_assert_str_eq(tg_st_meta_get(f, "writer"), "test_checkpoint");
  ck_assert_int_eq((int)strlen(tg_st_meta_get(f, "sha256")), 64);
  ck_assert_int_eq((int)strlen(tg_st_meta_get(f, "data_sha256")), 64);
  tg_st_free(f);

  tg_ckpt_meta m;
  tg_weights *r = tg_ckpt_load(ctx, g, path, true, &m);
  ck_assert_msg(r, "%s", tu_errors(ctx));
  ck_assert_str_eq(tu_errors(ctx), "");
  assert_same(g, w, r, TG_OP_param);
  assert_same(g, w, r, TG_OP_state);
  ck_assert_int_eq(m.step, 123);
  ck_assert_uint_eq(m.data_position, 18446744073709551610ull);
  ck_assert_uint_eq(m.seed, 9007199254740992ull);
  ck_assert_str_eq(m.model, "models/gpt2.tg");
  ck_assert_str_eq(m.config, "n_layer=1 n_head=2 n_embd=16 vocab=32 block_size=8");
  ck_assert_str_eq(m.batch, "B=2 T=8");
  ck_assert_str_eq(m.writer, "test_checkpoint");

  /* Saved again from what was loaded: the same bytes. */
  const char *again = in_dir("again.safetensors");
  save(again, g, r, 123);
  FILE *a = fopen(path, "rb"), *b = fopen(again, "rb");
  for (int ca, cb;;) {
    ca = fgetc(a), cb = fgetc(b);
    ck_assert_int_eq(ca, cb);
    if (ca == EOF) break;
  }
  fclose(a), fclose(b);

  /* init_from: the weights only, the moments zero. */
  tg_weights *p = tg_ckpt_load(ctx, g, path, false, &m);
  ck_assert_msg(p, "%s", tu_errors(ctx));
  assert_same(g, w, p, TG_OP_param);
  assert_zero(g, p, TG_OP_state);
  ck_assert_int_eq(m.step, 123);

  /* Sampling: a forward graph of another batch shape takes the weights;
   * the moments are checked but have nowhere to go. */
  tg_graph *fwd = model(ctx, false, "B=1", "T=4");
  ck_assert_int_eq(n_leaves(fwd, TG_OP_state), 0);
  tg_weights *s = tg_ckpt_load(ctx, fwd, path, false, NULL);
  ck_assert_msg(s, "%s", tu_errors(ctx));
  for (int k = 0; k < fwd->n_nodes; k++)
    if (fwd->nodes[k]->op == TG_OP_param) {
      const tg_node *n = node(g, fwd->nodes[k]->name);
      size_t bytes = (size_t)tg_type_numel(&n->type) * sizeof(float);
      ck_assert(!memcmp(s->values[k], w->values[n->id], bytes));
    }
  tg_weights_free(s);
  tg_weights_free(p);
  tg_weights_free(r);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_truncated) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  tg_weights *w = arbitrary(g, 1);
  const char *path = in_dir("cut.safetensors");
  save(path, g, w, 5);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(truncate(path, st.st_size - 1), 0);
  refused(g, path, true, "truncated", NULL);
  ck_assert_int_eq(truncate(path, st.st_size / 2), 0);
  refused(g, path, false, "truncated", NULL);
  ck_assert_int_eq(truncate(path, 0), 0);
  refused(g, path, true, "cut.safetensors", NULL);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_tensors) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  tg_weights *w = arbitrary(g, 2);
  const char *good = in_dir("good.safetensors"), *bad = in_dir("bad.safetensors");
  save(good, g, w, 7);

  rewrite(good, bad, &(edit){.drop = "adam.v.h.0.mlp.c_fc.bias"});
  refused(g, bad, true, "tensor 'adam.v.h.0.mlp.c_fc.bias' is missing", NULL);
  rewrite(good, bad, &(edit){.drop = "h.0.ln_2.bias"});
  refused(g, bad, true, "tensor 'h.0.ln_2.bias' is missing", NULL);
  rewrite(good, bad, &(edit){.reshape = "h.0.ln_1.weight", .n = 8});
  refused(g, bad, true, "tensor 'h.0.ln_1.weight' has shape [8], but the model's parameter is f32[n_embd=16]",
          NULL);
  rewrite(good, bad, &(edit){.reshape = "adam.m.wpe.weight", .n = 128});
  refused(g, bad, true, "tensor 'adam.m.wpe.weight' has shape [128], but the model's optimizer state is f32[block_size=8, n_embd=16]",
          NULL);
  rewrite(good, bad, &(edit){.add = "h.1.ln_1.weight"});
  refused(g, bad, true, "tensor 'h.1.ln_1.weight' is neither a parameter nor optimizer state", NULL);
  rewrite(good, bad, &(edit){.to_bf16 = "adam.m.wte.weight"});
  refused(g, bad, true, "tensor 'adam.m.wte.weight' has dtype bf16", "F32");

  /* A parameter in BF16 is taken, converted. */
  rewrite(good, bad, &(edit){.to_bf16 = "h.0.attn.c_attn.weight"});
  tg_weights *r = tg_ckpt_load(ctx, g, bad, true, NULL);
  ck_assert_msg(r, "%s", tu_errors(ctx));
  const tg_node *n = node(g, "h.0.attn.c_attn.weight");
  for (int64_t i = 0; i < tg_type_numel(&n->type); i++) {
    float want = tg_bf16_to_f32(tg_f32_to_bf16(w->values[n->id][i]));
    ck_assert(!memcmp(&want, &r->values[n->id][i], 4));
  }
  tg_weights_free(r);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_metadata) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  tg_weights *w = arbitrary(g, 3);
  const char *good = in_dir("good.safetensors"), *bad = in_dir("bad.safetensors");
  save(good, g, w, 7);
  rewrite(good, bad, &(edit){.meta_key = "step", .meta_value = "-3"});
  refused(g, bad, true, "__metadata__ 'step' is '-3': expected a count of steps", NULL);
  rewrite(good, bad, &(edit){.meta_key = "data_position", .meta_value = "18446744073709551616"});
  refused(g, bad, true, "'data_position' is '18446744073709551616'", NULL);
  rewrite(good, bad, &(edit){.meta_key = "seed"});
  refused(g, bad, true, "has no 'seed'", NULL);
  rewrite(good, bad, &(edit){.meta_key = "tg_format", .meta_value = "tg-checkpoint-2"});
  refused(g, bad, false, "format is 'tg-checkpoint-2', which this tg does not read", NULL);
  /* an older tg's tag, under "format" */
  rewrite(good, bad, &(edit){.meta_key = "format", .meta_value = "tg-checkpoint-2", .meta_key2 = "tg_format"});
  refused(g, bad, false, "format is 'tg-checkpoint-2', which this tg does not read", NULL);
  char why[256];
  const tg_node *mw = node(g, "adam.m.wte.weight");
  float *keep = w->values[mw->id];
  w->values[mw->id] = NULL;
  ck_assert(!tg_ckpt_save(bad, g, w->values, &meta, why, sizeof why));
  ck_assert_msg(strstr(why, "no value for the model's optimizer state 'adam.m.wte.weight'"), "%s",
                why);
  w->values[mw->id] = keep;
  tg_ckpt_meta m = meta;
  m.step = -1;
  ck_assert(!tg_ckpt_save(bad, g, w->values, &m, why, sizeof why));
  ck_assert_msg(strstr(why, "step -1"), "%s", why);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

/* The checksum covers the metadata: an edit of the config (n_head), the
 * step or the seed with the checksums left in place is refused as a
 * damaged file (and passed over in a run directory), not loaded with the
 * wrong heads; the data's own checksum alone would not see it. */
START_TEST(test_metadata_checksum) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  tg_weights *w = arbitrary(g, 4);
  const char *good = in_dir("good.safetensors"), *bad = in_dir("bad.safetensors");
  save(good, g, w, 7);
  rewrite(good, bad, &(edit){.meta_key = "config", .meta_value = "n_layer=1 n_head=4 n_embd=16 vocab=32 block_size=8",
                             .keep_sum = true, .keep_whole_sum = true});
  refused(g, bad, false, "does not match the checksum in __metadata__ (sha256", "metadata and data");
  rewrite(good, bad, &(edit){.meta_key = "step", .meta_value = "8", .keep_sum = true, .keep_whole_sum = true});
  refused(g, bad, true, "does not match the checksum", NULL);
  rewrite(good, bad, &(edit){.meta_key = "seed", .meta_value = "1", .keep_sum = true, .keep_whole_sum = true});
  refused(g, bad, true, "does not match the checksum", NULL);
  /* the file unedited, rewritten the same way, still loads: the refusals
   * are the edits', not the rewriting's */
  rewrite(good, bad, &(edit){.keep_sum = true, .keep_whole_sum = true});
  tg_weights *r = tg_ckpt_load(ctx, g, bad, true, NULL);
  ck_assert_msg(r, "%s", tu_errors(ctx));
  tg_weights_free(r);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

/* A checkpoint of a tg from before "tg_format": its tag is under "format"
 * (with its checksum, which tg wrote then too); it is still a checkpoint,
 * read bit for bit, and a run directory holding one resumes from it. */
START_TEST(test_old_format_tag) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  tg_weights *w = arbitrary(g, 8);
  const char *good = in_dir("new.safetensors");
  save(good, g, w, 42);
  char run_dir[600];
  snprintf(run_dir, sizeof run_dir, "%s", in_dir("old_run"));
  ck_assert_int_eq(mkdir(run_dir, 0755), 0);
  char old[700];
  snprintf(old, sizeof old, "%s/" TG_CKPT_FILE, run_dir);
  rewrite(good, old, &(edit){.meta_key = "format", .meta_value = "tg-checkpoint-1", .meta_key2 = "tg_format",
                             .keep_sum = true});
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_st_file *f = tg_st_read(ctx, old);
  ctx->bail = NULL;
  ck_assert_str_eq(tg_st_meta_get(f, "format"), "tg-checkpoint-1");
  ck_assert_ptr_null(tg_st_meta_get(f, "tg_format"));
  ck_assert_ptr_nonnull(tg_st_meta_get(f, "data_sha256"));
  tg_st_free(f);
  tg_ckpt_meta m;
  tg_weights *r = tg_ckpt_load(ctx, g, old, true, &m);
  ck_assert_msg(r, "%s", tu_errors(ctx));
  assert_same(g, w, r, TG_OP_param);
  assert_same(g, w, r, TG_OP_state);
  ck_assert_int_eq(m.step, 42);
  tg_weights_free(r);
  char *used = NULL;
  r = tg_ckpt_load_latest(ctx, g, run_dir, true, &m, &used);
  ck_assert_msg(r, "%s", tu_errors(ctx));
  ck_assert_str_eq(used, old);
  ck_assert_str_eq(tu_errors(ctx), "");
  free(used);
  tg_weights_free(r);
  tg_weights_free(w);
  unlink(old); /* teardown removes files, not directories */
  rmdir(run_dir);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_other_model) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  /* n_head 4: every tensor has the same shape, only the config differs. */
  tg_graph *heads = model(ctx, true, "n_head=4", NULL);
  tg_weights *w = arbitrary(heads, 4);
  const char *path = in_dir("heads.safetensors");
  save(path, heads, w, 9);
  refused(g, path, true,
          "the checkpoint is of another model: n_head=4 in the checkpoint, n_head=2 in models/gpt2.tg",
          "model: 'n_layer=1 n_head=2 n_embd=16 vocab=32 block_size=8'");
  refused(g, path, false, "n_head=4 in the checkpoint", NULL);
  tg_weights_free(w);

  tg_graph *deep = model(ctx, true, "n_layer=2", NULL);
  w = arbitrary(deep, 4);
  path = in_dir("deep.safetensors");
  save(path, deep, w, 9);
  refused(g, path, true, "n_layer=2 in the checkpoint, n_layer=1 in models/gpt2.tg", NULL);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_plain_weights) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  /* Ordinary numbers: tg_weights_load goes through double, which quiets a
   * signalling NaN. */
  tg_weights *w = tg_weights_init(g, 5);
  const char *path = in_dir("w.safetensors");
  char why[256];
  ck_assert_msg(tg_weights_save(w, path, false, why, sizeof why), "%s", why);
  refused(g, path, true, "has no optimizer state", "use init_from");
  /* its metadata: Hugging Face's "format", tg's tag, the model's constants */
  {
    jmp_buf bail;
    ctx->bail = &bail;
    if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
    tg_st_file *f = tg_st_read(ctx, path);
    ctx->bail = NULL;
    ck_assert_str_eq(tg_st_meta_get(f, "format"), "pt");
    ck_assert_str_eq(tg_st_meta_get(f, "tg_format"), TG_WEIGHTS_FORMAT);
    ck_assert_str_eq(tg_st_meta_get(f, "config"), "n_layer=1 n_head=2 n_embd=16 vocab=32 block_size=8");
    tg_st_free(f);
  }

  /* As init_from: through tg_weights_load, step 0, zero moments. */
  tg_ckpt_meta m = meta;
  tg_weights *r = tg_ckpt_load(ctx, g, path, false, &m);
  ck_assert_msg(r, "%s", tu_errors(ctx));
  assert_same(g, w, r, TG_OP_param);
  assert_zero(g, r, TG_OP_state);
  ck_assert_int_eq(m.step, 0);
  ck_assert_ptr_null(m.config);
  tg_weights_free(r);

  /* A checkpoint saved from a graph without an optimizer has no moments. */
  tg_graph *fwd = model(ctx, false, NULL, NULL);
  tg_weights *fw = tg_weights_init(fwd, 1);
  const char *nostate = in_dir("nostate.safetensors");
  ck_assert_msg(tg_ckpt_save(nostate, fwd, fw->values, &meta, why, sizeof why), "%s", why);
  refused(g, nostate, true, "the checkpoint has no optimizer state", "use init_from");
  tg_weights_free(fw);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

static int64_t step_of(const char *path) {
  tg_ctx *ctx = tu_ctx();
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_st_file *f = tg_st_read(ctx, path);
  int64_t s = atoll(tg_st_meta_get(f, "step"));
  tg_st_free(f);
  tu_ctx_free(ctx);
  return s;
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static void save_dir(const tg_graph *g, const tg_weights *w, int64_t step) {
  char why[512];
  tg_ckpt_meta m = meta;
  m.step = step;
  ck_assert_msg(tg_ckpt_save_in_dir(dir, g, w->values, &m, why, sizeof why), "%s", why);
}

/* Resumes from dir and checks which file and step it got, and the notes. */
static void resume(const tg_graph *g, const char *want_file, int64_t want_step,
                   const char *note) {
  tg_ctx *ctx = tu_ctx();
  char *latest = tg_ckpt_latest(ctx, dir);
  ck_assert_ptr_nonnull(latest);
  ck_assert_str_eq(latest, in_dir(want_file));
  free(latest);
  tg_ckpt_meta m;
  char *used = NULL;
  tg_weights *w = tg_ckpt_load_latest(ctx, g, dir, true, &m, &used);
  ck_assert_msg(w, "%s", tu_errors(ctx));
  ck_assert_str_eq(used, in_dir(want_file));
  ck_assert_int_eq(m.step, want_step);
  const char *err = tu_errors(ctx);
  if (note) {
    char head[600];
    snprintf(head, sizeof head, "%s: note: passed over: ", in_dir("ckpt.safetensors"));
    ck_assert_msg(!strncmp(err, head, strlen(head)), "'%s' does not start with '%s'", err, head);
    ck_assert_msg(strstr(err, note), "'%s' not in: %s", note, err);
    fprintf(stderr, "test_checkpoint: %s", err);
  } else {
    ck_assert_str_eq(err, "");
  }
  free(used);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}

START_TEST(test_run_dir) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  tg_weights *w = arbitrary(g, 6);
  char cur[512], prev[512], tmp[512]; /* in_dir's buffers are reused */
  strcpy(cur, in_dir("ckpt.safetensors"));
  strcpy(prev, in_dir("ckpt.prev.safetensors"));
  strcpy(tmp, in_dir("ckpt.safetensors.tmp.999999999"));

  /* Nothing yet: no latest, and resuming is an error naming dir. */
  ck_assert_ptr_null(tg_ckpt_latest(ctx, dir));
  ck_assert_ptr_null(tg_ckpt_load_latest(ctx, g, dir, true, NULL, NULL));
  char head[600];
  snprintf(head, sizeof head, "%s: error: no checkpoint to resume from: no ckpt.safetensors or "
           "ckpt.prev.safetensors here", dir);
  ck_assert_msg(strstr(tu_errors(ctx), head), "%s", tu_errors(ctx));

  save_dir(g, w, 10);
  ck_assert(exists(cur) && !exists(prev));
  save_dir(g, w, 20);
  save_dir(g, w, 30);
  ck_assert_int_eq(step_of(cur), 30);
  ck_assert_int_eq(step_of(prev), 20);
  resume(g, "ckpt.safetensors", 30, NULL);

  /* A crash while writing step 40: ckpt already renamed to prev, and the
   * writer's temporary half written. */
  ck_assert_int_eq(rename(cur, prev), 0);
  FILE *t = fopen(tmp, "wb");
  fputs("half a checkpoint", t);
  fclose(t);
  resume(g, "ckpt.prev.safetensors", 30, NULL);
  /* The next save cleans up and keeps prev, the newest complete one. */
  save_dir(g, w, 40);
  ck_assert(!exists(tmp));
  ck_assert_int_eq(step_of(cur), 40);
  ck_assert_int_eq(step_of(prev), 30);

  /* ckpt damaged (truncated by something outside tg): prev, with a note. */
  struct stat st;
  ck_assert_int_eq(stat(cur, &st), 0);
  ck_assert_int_eq(truncate(cur, st.st_size / 3), 0);
  resume(g, "ckpt.prev.safetensors", 30, "(is the file truncated?)");

  /* ckpt with one flipped bit in its data (the header intact, so only the
   * checksum can tell): prev, with a note; loading it by name fails. */
  save_dir(g, w, 40);
  save_dir(g, w, 45);
  ck_assert_int_eq(step_of(prev), 40);
  ck_assert_int_eq(stat(cur, &st), 0);
  {
    FILE *d = fopen(cur, "r+b");
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(fseek(d, st.st_size - 5, SEEK_SET), 0);
    int c = fgetc(d);
    ck_assert_int_eq(fseek(d, st.st_size - 5, SEEK_SET), 0);
    fputc(c ^ 0x10, d);
    fclose(d);
  }
  resume(g, "ckpt.prev.safetensors", 40, "does not match the checksum in __metadata__");
  tg_ctx *c3 = tu_ctx();
  ck_assert_ptr_null(tg_ckpt_load(c3, g, cur, true, NULL));
  ck_assert_msg(strstr(tu_errors(c3), "the file was damaged or edited after it was written"), "%s", tu_errors(c3));
  tu_ctx_free(c3);

  /* ckpt not a checkpoint at all: prev, with a note. */
  ck_assert_int_eq(tg_weights_save(w, cur, false, head, sizeof head), true);
  resume(g, "ckpt.prev.safetensors", 40, "passed over: not a tg checkpoint");

  /* A complete checkpoint of another model is an error, not a fallback. */
  tg_graph *deep = model(ctx, true, "n_layer=2", NULL);
  tg_weights *dw = arbitrary(deep, 1);
  save(cur, deep, dw, 50);
  tg_ctx *c2 = tu_ctx();
  ck_assert_ptr_null(tg_ckpt_load_latest(c2, g, dir, true, NULL, NULL));
  ck_assert_msg(strstr(tu_errors(c2), "ckpt.safetensors: error: the checkpoint is of another model"),
                "%s", tu_errors(c2));
  tu_ctx_free(c2);

  /* Both damaged: nothing to resume from. */
  ck_assert_int_eq(truncate(cur, 10), 0);
  ck_assert_int_eq(truncate(prev, 10), 0);
  c2 = tu_ctx();
  ck_assert_ptr_null(tg_ckpt_latest(c2, dir));
  ck_assert_ptr_null(tg_ckpt_load_latest(c2, g, dir, true, NULL, NULL));
  ck_assert_msg(strstr(tu_errors(c2), "no checkpoint to resume from: neither ckpt.safetensors "
                                      "nor ckpt.prev.safetensors here is a complete tg checkpoint"),
                "%s", tu_errors(c2));
  tu_ctx_free(c2);

  /* A directory that does not exist. */
  char why[512];
  ck_assert(!tg_ckpt_save_in_dir(in_dir("nope"), g, w->values, &meta, why, sizeof why));
  ck_assert_msg(strstr(why, "nope"), "%s", why);

  tg_weights_free(dw);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

/* Real crashes: a child saves step after step, resuming from the latest
 * first as a run would, and is killed (SIGKILL) at a random moment; each
 * time the directory must hold a loadable checkpoint no older than the one
 * before.  (SIGKILL keeps what the kernel has; power loss is what the
 * fsyncs are for, and no test here can cut the power.) */
START_TEST(test_killed_mid_save) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = model(ctx, true, NULL, NULL);
  tg_weights *w = arbitrary(g, 8);
  int64_t last = -1;
  int from_prev = 0, temps = 0; /* how often a kill landed mid-save */
  srand(12345);
  for (int trial = 0; trial < 40; trial++) {
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      tg_ctx *c = tg_ctx_new(NULL);
      tg_ckpt_meta m = meta;
      m.step = 0;
      tg_weights *r = tg_ckpt_load_latest(c, g, dir, true, &m, NULL);
      if (!r && last >= 0) _exit(3);
      for (int64_t step = r ? m.step + 1 : 1;; step++) {
        m.step = step;
        char why[512];
        if (!tg_ckpt_save_in_dir(dir, g, w->values, &m, why, sizeof why)) _exit(4);
      }
    }
    /* The first time, let one save complete whatever the machine's load,
     * so that every later trial has something to lose. */
    char cur[512];
    strcpy(cur, in_dir("ckpt.safetensors"));
    for (int i = 0; trial == 0 && !exists(cur) && i < 10000; i++)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    nanosleep(&(struct timespec){0, (long)(rand() % 4000) * 1000}, NULL);
    kill(pid, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status), "the saver stopped by itself: %d", status);
    tg_ckpt_meta m;
    tg_ctx *c = tu_ctx();
    char *used = NULL;
    tg_weights *r = tg_ckpt_load_latest(c, g, dir, true, &m, &used);
    if (used) from_prev += strstr(used, "prev") != NULL;
    free(used);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) temps += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    if (!r && last < 0) { /* killed before its first save */
      tu_ctx_free(c);
      continue;
    }
    ck_assert_msg(r, "trial %d: %s", trial, tu_errors(c));
    ck_assert_str_eq(tu_errors(c), "");
    ck_assert_int_ge(m.step, last);
    assert_same(g, w, r, TG_OP_state);
    last = m.step;
    tg_weights_free(r);
    tu_ctx_free(c);
  }
  fprintf(stderr,
          "test_checkpoint: 40 kills; %d resumes from ckpt.prev, %d temporary files seen; "
          "the last resume at step %lld\n", from_prev, temps, (long long)last);
  ck_assert_int_gt(last, 0);
  tg_weights_free(w);
  tu_ctx_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("checkpoint");
  TCase *tc = tcase_create("checkpoint");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_truncated);
  tcase_add_test(tc, test_bad_tensors);
  tcase_add_test(tc, test_bad_metadata);
  tcase_add_test(tc, test_metadata_checksum);
  tcase_add_test(tc, test_old_format_tag);
  tcase_add_test(tc, test_other_model);
  tcase_add_test(tc, test_plain_weights);
  tcase_add_test(tc, test_run_dir);
  tcase_add_test(tc, test_killed_mid_save);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
