/* test_hf.c: runtime/formats/hf.c, Hugging Face's GPT-2 conventions: the
 * names, the buffers, the model's sizes a file shows and where each came
 * from, disagreements between the file's sources and with explicit
 * settings, and config.json out. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"
#include "json.h"
#include "safetensors.h"

static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_hf_test_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { tu_remove_tree(dir); }

static const char *in_dir(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 512, "%s/%s", dir, name);
  return p;
}

/* A GPT-2-shaped file of zeros: vocab V, n_embd C, P positions, L layers
 * (a few tensors a layer: the sizes read only names and shapes), with
 * names under prefix, and metadata config when not NULL. */
static void write_model(const char *path, const char *prefix, int V, int C, int P, int L, const char *config) {
  static float zeros[1 << 16];
  tg_st_tensor ts[64];
  char names[64][64];
  int n = 0;
  snprintf(names[n], 64, "%swte.weight", prefix);
  ts[n] = (tg_st_tensor){.name = names[n], .dtype = TG_F32, .rank = 2, .shape = {V, C}, .data = zeros,
                         .nbytes = (size_t)V * C * 4};
  n++;
  snprintf(names[n], 64, "%swpe.weight", prefix);
  ts[n] = (tg_st_tensor){.name = names[n], .dtype = TG_F32, .rank = 2, .shape = {P, C}, .data = zeros,
                         .nbytes = (size_t)P * C * 4};
  n++;
  for (int l = 0; l < L; l++) {
    snprintf(names[n], 64, "%sh.%d.ln_1.weight", prefix, l);
    ts[n] = (tg_st_tensor){.name = names[n], .dtype = TG_F32, .rank = 1, .shape = {C}, .data = zeros,
                           .nbytes = (size_t)C * 4};
    n++;
    snprintf(names[n], 64, "%sh.%d.attn.bias", prefix, l); /* a buffer: counts as a layer too */
    ts[n] = (tg_st_tensor){.name = names[n], .dtype = TG_F32, .rank = 4, .shape = {1, 1, P, P}, .data = zeros,
                           .nbytes = (size_t)P * P * 4};
    n++;
  }
  tg_st_meta meta[2] = {{"format", "pt"}, {"config", config}};
  char why[512];
  ck_assert_msg(tg_st_write(path, ts, n, meta, config ? 2 : 1, why, sizeof why), "%s", why);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* Reads path's sizes; returns NULL with the message in *err on an error. */
static const tg_hf_dims *dims_of(tg_ctx *ctx, const char *path, const char **err) {
  static tg_hf_dims d;
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) {
    ctx->bail = NULL;
    *err = tu_errors(ctx);
    return NULL;
  }
  tg_hf_dims_of_file(ctx, path, &d);
  ctx->bail = NULL;
  *err = NULL;
  return &d;
}

static double value(const tg_hf_dims *d, const char *name) {
  const tg_hf_dim *x = tg_hf_dims_get(d, name);
  ck_assert_msg(x, "no %s", name);
  return x->value;
}

START_TEST(test_names) {
  ck_assert_str_eq(tg_hf_param_name("transformer.h.0.ln_1.weight"), "h.0.ln_1.weight");
  ck_assert_str_eq(tg_hf_param_name("wte.weight"), "wte.weight");
  ck_assert_str_eq(tg_hf_param_name("transformer."), "transformer."); /* nothing after it: not the prefix */
  ck_assert(tg_hf_is_buffer("h.0.attn.bias"));
  ck_assert(tg_hf_is_buffer("h.11.attn.masked_bias"));
  ck_assert(!tg_hf_is_buffer("h.0.attn.c_attn.bias"));
  ck_assert(!tg_hf_is_buffer("h.x.attn.bias"));
  ck_assert(!tg_hf_is_buffer("h.01.attn.bias"));
  ck_assert(!tg_hf_is_buffer("transformer.h.0.attn.bias")); /* the caller takes the prefix off first */
}
END_TEST

START_TEST(test_sizes_from_shapes) {
  tg_ctx *ctx = tu_ctx();
  char path[512];
  snprintf(path, sizeof path, "%s", in_dir("w.safetensors"));
  const char *err;
  write_model(path, "transformer.", 50, 8, 16, 3, NULL);
  const tg_hf_dims *d = dims_of(ctx, path, &err);
  ck_assert_msg(d, "%s", err);
  ck_assert_int_eq(d->n, 4); /* no n_head: no config.json, no metadata */
  ck_assert(value(d, "vocab") == 50 && value(d, "n_embd") == 8 && value(d, "block_size") == 16);
  ck_assert(value(d, "n_layer") == 3);
  ck_assert_ptr_null(tg_hf_dims_get(d, "n_head"));
  ck_assert_msg(strstr(tg_hf_dims_get(d, "vocab")->from, "(transformer.wte.weight [50, 8])"), "%s",
                tg_hf_dims_get(d, "vocab")->from);
  ck_assert_msg(strstr(tg_hf_dims_get(d, "n_layer")->from, "(layers h.0 .. h.2)"), "%s",
                tg_hf_dims_get(d, "n_layer")->from);

  /* config.json beside it gives n_head; its other sizes agree */
  write_text(in_dir("config.json"), "{\"model_type\": \"gpt2\", \"n_layer\": 3, \"n_head\": 2, \"n_embd\": 8, "
                                    "\"vocab_size\": 50, \"n_positions\": 16}");
  d = dims_of(ctx, path, &err);
  ck_assert_msg(d, "%s", err);
  ck_assert(value(d, "n_head") == 2);
  ck_assert_msg(strstr(tg_hf_dims_get(d, "n_head")->from, "config.json (n_head)"), "%s",
                tg_hf_dims_get(d, "n_head")->from);

  /* explicit settings: the same pass, another is an error naming both */
  tg_hf_dim same[2] = {{"n_layer", 3, "here"}, {"n_head", 2, "there"}};
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("%s", tu_errors(ctx));
  tg_hf_dims_check(ctx, d, same, 2);
  ctx->bail = NULL;
  tg_hf_dim other = {"n_head", 4, "command line (-D n_head=4)"};
  ctx->bail = &bail;
  if (setjmp(bail) == 0) {
    tg_hf_dims_check(ctx, d, &other, 1);
    ck_abort_msg("n_head 4 against 2 passed");
  }
  ctx->bail = NULL;
  const char *msg = tu_errors(ctx);
  ck_assert_msg(strstr(msg, "command line (-D n_head=4): error: n_head = 4 here, but the weights are of a model "
                            "with n_head = 2 ("),
                "%s", msg);
  ck_assert_msg(strstr(msg, "config.json (n_head))"), "%s", msg);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_disagreements) {
  tg_ctx *ctx = tu_ctx();
  char path[512];
  snprintf(path, sizeof path, "%s", in_dir("w.safetensors"));
  const char *err;
  write_model(path, "", 50, 8, 16, 3, NULL);
  /* config.json of another depth */
  write_text(in_dir("config.json"), "{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_head\": 2}");
  ck_assert_ptr_null(dims_of(ctx, path, &err));
  ck_assert_msg(strstr(err, "the file's sizes disagree: n_layer is 3 in ") && strstr(err, "(layers h.0 .. h.2) but 12 in ")
                    && strstr(err, "config.json (n_layer)"),
                "%s", err);
  tu_ctx_free(ctx);
  ctx = tu_ctx();
  write_text(in_dir("config.json"), "{\"model_type\": \"llama\"}");
  ck_assert_ptr_null(dims_of(ctx, path, &err));
  ck_assert_msg(strstr(err, "config.json: error: model_type is not \"gpt2\""), "%s", err);
  tu_ctx_free(ctx);
  ctx = tu_ctx();
  write_text(in_dir("config.json"), "{\"n_head\": 2.5}");
  ck_assert_ptr_null(dims_of(ctx, path, &err));
  ck_assert_msg(strstr(err, "n_head is not a positive integer"), "%s", err);
  tu_ctx_free(ctx);
  ctx = tu_ctx();
  write_text(in_dir("config.json"), "{\"n_head\": 2,}");
  ck_assert_ptr_null(dims_of(ctx, path, &err));
  ck_assert_msg(strstr(err, "config.json: error: not valid JSON"), "%s", err);
  tu_ctx_free(ctx);
  remove(in_dir("config.json"));

  /* a tg file's metadata: every constant, checked against the shapes */
  ctx = tu_ctx();
  write_model(path, "", 50, 8, 16, 3, "n_layer=3 n_head=4 n_embd=8 vocab=50 block_size=16 ratio=0.5");
  const tg_hf_dims *d = dims_of(ctx, path, &err);
  ck_assert_msg(d, "%s", err);
  ck_assert(value(d, "n_head") == 4 && value(d, "ratio") == 0.5);
  write_model(path, "", 50, 8, 16, 3, "n_layer=3 n_head=4 n_embd=16");
  ck_assert_ptr_null(dims_of(ctx, path, &err));
  ck_assert_msg(strstr(err, "n_embd is 8 in ") && strstr(err, "but 16 in ") && strstr(err, "its __metadata__ config"),
                "%s", err);
  tu_ctx_free(ctx);
  ctx = tu_ctx();
  write_model(path, "", 50, 8, 16, 3, "n_layer 3");
  ck_assert_ptr_null(dims_of(ctx, path, &err));
  ck_assert_msg(strstr(err, "expected NAME=NUMBER items"), "%s", err);
  tu_ctx_free(ctx);
}
END_TEST

START_TEST(test_config_json) {
  char *text = tg_hf_config_json(12, 12, 768, 50257, 1024, 50256);
  tg_arena *a = tg_arena_new();
  tg_json_error err;
  const tg_json *j = tg_json_parse(a, text, strlen(text), NULL, &err);
  ck_assert_msg(j, "%s: %s", err.msg, text);
  ck_assert_str_eq(tg_json_get(j, "model_type")->u.s, "gpt2");
  ck_assert_str_eq(tg_json_get(j, "activation_function")->u.s, "gelu_new");
  ck_assert_str_eq(tg_json_get(j, "architectures")->u.items[0].u.s, "GPT2LMHeadModel");
  ck_assert_int_eq(tg_json_get(j, "n_layer")->u.i, 12);
  ck_assert_int_eq(tg_json_get(j, "n_embd")->u.i, 768);
  ck_assert_int_eq(tg_json_get(j, "vocab_size")->u.i, 50257);
  ck_assert_int_eq(tg_json_get(j, "n_positions")->u.i, 1024);
  ck_assert_int_eq(tg_json_get(j, "n_ctx")->u.i, 1024);
  ck_assert(tg_json_get(j, "layer_norm_epsilon")->u.d == 1e-5);
  ck_assert_int_eq(tg_json_get(j, "tie_word_embeddings")->kind, TG_JSON_TRUE);
  ck_assert_int_eq(tg_json_get(j, "bos_token_id")->u.i, 50256);
  ck_assert_int_eq(tg_json_get(j, "eos_token_id")->u.i, 50256);
  free(text);
  /* a tokenizer without an end-of-text token (char): null ids */
  text = tg_hf_config_json(2, 2, 16, 65, 32, -1);
  j = tg_json_parse(a, text, strlen(text), NULL, &err);
  ck_assert_msg(j, "%s: %s", err.msg, text);
  ck_assert_int_eq(tg_json_get(j, "bos_token_id")->kind, TG_JSON_NULL);
  ck_assert_int_eq(tg_json_get(j, "eos_token_id")->kind, TG_JSON_NULL);
  ck_assert_int_eq(tg_json_get(j, "vocab_size")->u.i, 65);
  tg_arena_free(a);
  free(text);
}
END_TEST

/* The GPT2Config fields that change the function: the standard ones (as
 * tg exports them, and Hugging Face's gpt2 with its dropouts) load; every
 * other value is refused naming the field and its value. */
START_TEST(test_function_fields) {
  char path[512];
  snprintf(path, sizeof path, "%s", in_dir("w.safetensors"));
  write_model(path, "", 50, 8, 16, 3, NULL);
  const char *err;
  char *exported = tg_hf_config_json(3, 2, 8, 50, 16, -1);
  write_text(in_dir("config.json"), exported);
  free(exported);
  tg_ctx *ctx = tu_ctx();
  ck_assert_msg(dims_of(ctx, path, &err), "tg's own config.json refused: %s", err);
  tu_ctx_free(ctx);
  write_text(in_dir("config.json"),
             "{\"model_type\": \"gpt2\", \"n_head\": 2, \"activation_function\": \"gelu_pytorch_tanh\", "
             "\"attn_pdrop\": 0.1, \"resid_pdrop\": 0.1, \"embd_pdrop\": 0.1, \"reorder_and_upcast_attn\": true, "
             "\"scale_attn_by_inverse_layer_idx\": false, \"n_inner\": 32}");
  ctx = tu_ctx();
  ck_assert_msg(dims_of(ctx, path, &err), "the same function refused: %s", err);
  tu_ctx_free(ctx);
  static const char *const refused[][2] = {
      {"\"activation_function\": \"relu\"", "activation_function is \"relu\", but"},
      {"\"activation_function\": \"gelu\"", "\"gelu\" is the exact erf form"},
      {"\"layer_norm_epsilon\": 1e-6", "layer_norm_epsilon is 9.9999999999999995e-07, but std.tg's layernorm adds 1e-05"},
      {"\"scale_attn_weights\": false", "scale_attn_weights is false, but tg's attention divides"},
      {"\"scale_attn_by_inverse_layer_idx\": true", "scale_attn_by_inverse_layer_idx is true"},
      {"\"tie_word_embeddings\": false", "tie_word_embeddings is false"},
      {"\"add_cross_attention\": true", "add_cross_attention is true"},
      {"\"n_inner\": 64", "n_inner is 64, but tg's GPT-2 has an MLP 4 * n_embd wide (32)"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    char json[256];
    snprintf(json, sizeof json, "{\"model_type\": \"gpt2\", \"n_head\": 2, %s}", refused[i][0]);
    write_text(in_dir("config.json"), json);
    ctx = tu_ctx();
    ck_assert_msg(!dims_of(ctx, path, &err), "%s was accepted", refused[i][0]);
    ck_assert_msg(strstr(err, "config.json: error: ") && strstr(err, refused[i][1]) &&
                      strstr(err, "cannot be loaded as it is"),
                  "%s: %s", refused[i][0], err);
    tu_ctx_free(ctx);
  }
  remove(in_dir("config.json"));
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf");
  TCase *tc = tcase_create("hf");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_sizes_from_shapes);
  tcase_add_test(tc, test_disagreements);
  tcase_add_test(tc, test_config_json);
  tcase_add_test(tc, test_function_fields);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
