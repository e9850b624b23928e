/* test_fuse.c: the fuse pass on GPT-2's training step.
 *
 * What must hold (the fusion requirements, each asserted on the full
 * 12-layer gpt2.tg step: forward, autodiff, AdamW): each layernorm
 * forward is one kernel; the residual add before a layernorm is in its
 * kernel; bias + GELU share a kernel; softmax + cross-entropy and the
 * gradient of the logits are one kernel that writes no [B, T, V] value but
 * that gradient; each layernorm backward spans at most two kernels; the
 * optimizer (clipping and AdamW of every parameter) at most three; every
 * matmul kernel holds one matmul and elementwise ops only.  Nodes are
 * found by their .tg locations (models/std.tg and models/gpt2.tg lines).
 *
 * Numerics: the fused graph run kernel by kernel (tg_interp_run_kernels,
 * which refuses to read a value no earlier kernel wrote) gives the same
 * loss, gradients and updated weights as the ordinary run, within 1e-12
 * (they are the same ops on the same values, so in fact exactly). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "interp.h"
#include "passes.h"
#include "testutil.h"

/* gpt2.tg with the -D overrides, through the whole pipeline of a training
 * step; fuse or not. */
static tg_graph *compile_step(tg_ctx *ctx, int n_defs, const char *const *defs, bool fuse) {
  tg_graph *g = tu_compile(ctx, "models/gpt2.tg", tu_read("models/gpt2.tg"), n_defs, defs);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("the passes failed: %s", tu_errors(ctx));
  tg_pipeline_opts po = {.grad = true, .step = true, .adamw = tg_adamw_defaults,
                         .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  if (!fuse) {
    tg_pad_vocab(ctx, g, po.pad_multiple);
    tg_flash_attn(ctx, g, NULL);
    tg_gelu(ctx, g, NULL);
    tg_autodiff(ctx, g);
    tg_append_adamw(ctx, g, &po.adamw, NULL);
    tg_split_sums(ctx, g); /* a rewrite, not fusion: the reference has it too */
  } else {
    tg_run_pipeline(ctx, g, &po);
  }
  ck_assert_msg(tg_verify(ctx, g), "%s", tu_errors(ctx));
  ctx->bail = NULL; /* this frame's jmp_buf dies with it */
  return g;
}

static bool at(const tg_node *n, const char *file, int lo, int hi) {
  return n->loc.file && strstr(n->loc.file, file) && n->loc.line >= lo && n->loc.line <= hi;
}

static bool computes(const tg_node *n) {
  return tg_ops[n->op].kind != TG_KIND_LEAF && !tg_is_view(n);
}

/* ---- the six requirements ------------------------------------------------- */

/* Forward layernorm instances: maximal runs of computing nodes at std.tg
 * lines 15-17 (its three lines); each run must be one kernel, and the node
 * before it that makes its input (the residual add or the embedding sum)
 * must be in that kernel too. */
static void check_layernorm_forward(const tg_graph *g) {
  int runs = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->phase != TG_PHASE_FORWARD || !computes(n) || !at(n, "std.tg", 15, 17)) continue;
    const tg_node *x = tg_kernel_base(n->in[0]); /* sum(x, -1): x */
    ck_assert_int_eq(n->op, TG_OP_sum);
    int k = n->kernel;
    ck_assert_int_ge(k, 0);
    ck_assert_msg(x->kernel == k, "the layernorm at %%%d is not in the kernel of its input %%%d (%s)", i,
                  x->id, tg_ops[x->op].name);
    if (at(x, "gpt2.tg", 68, 69)) ck_assert_int_eq(x->op, TG_OP_add); /* x = x + ... */
    int j = i;
    for (; j < g->n_nodes; j++) {
      const tg_node *m = g->nodes[j];
      if (!computes(m)) continue;
      if (!at(m, "std.tg", 15, 17)) break;
      ck_assert_msg(m->kernel == k, "layernorm node %%%d is in k%d, not k%d", j, m->kernel, k);
    }
    ck_assert_int_eq(g->kernels[k].kind, TG_KERNEL_ROW);
    runs++;
    i = j - 1;
  }
  ck_assert_int_eq(runs, 2 * 12 + 1);
}

/* The bias add of c_fc (gpt2.tg:64:31) and the GELU op (std.tg:22) of a
 * layer share one kernel: the matmul's epilogue.  In the backward, GELU's
 * derivative times the product dY @ Wᵀ is the epilogue of that matmul's
 * kernel (cuBLASLt's DGELU on a GPU), and nothing else is. */
static void check_bias_gelu(const tg_graph *g) {
  int found = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->phase != TG_PHASE_FORWARD || n->op != TG_OP_add || !at(n, "gpt2.tg", 64, 64) ||
        n->loc.col != 31)
      continue;
    found++;
    ck_assert_int_eq(g->kernels[n->kernel].kind, TG_KERNEL_MATMUL);
    int gelu = 0;
    for (int j = i + 1; j < g->n_nodes && (!computes(g->nodes[j]) || at(g->nodes[j], "std.tg", 22, 22)); j++)
      if (computes(g->nodes[j])) {
        ck_assert_int_eq(g->nodes[j]->kernel, n->kernel);
        gelu++;
      }
    ck_assert_int_eq(gelu, 1);
  }
  ck_assert_int_eq(found, 12);
  int dgelu = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_gelu_grad) continue;
    const tg_node *mul = NULL;
    for (int j = i + 1; j < g->n_nodes && !mul; j++)
      if (g->nodes[j]->op == TG_OP_mul && (g->nodes[j]->in[0] == n || g->nodes[j]->in[1] == n)) mul = g->nodes[j];
    ck_assert_ptr_nonnull(mul);
    const tg_node *product = mul->in[0] == n ? mul->in[1] : mul->in[0];
    ck_assert_int_eq(product->op, TG_OP_matmul);
    ck_assert_int_eq(mul->kernel, product->kernel);
    ck_assert_int_eq(g->kernels[mul->kernel].kind, TG_KERNEL_MATMUL);
    int members = 0;
    for (int j = 0; j < g->n_nodes; j++) members += g->nodes[j]->kernel == mul->kernel;
    ck_assert_int_eq(members, 3); /* the matmul, gelu_grad, the multiply */
    dgelu++;
  }
  ck_assert_int_eq(dgelu, 12);
}

/* Cross-entropy forward (std.tg lines 43-47 in the forward, but the loss's
 * mean over the batch) and the gradient of the logits (backward nodes of
 * std.tg 43-47 and the vocab mask's where at gpt2.tg:80) are in one kernel,
 * and the only [B, T, V] value it writes is that gradient. */
static void check_cross_entropy(const tg_graph *g) {
  int k = -1, fwd = 0, bwd = 0;
  const tg_node *dlogits = NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (!computes(n) || n->phase == TG_PHASE_OPTIMIZER) continue;
    bool ce = at(n, "std.tg", 43, 47) && n->type.rank == 3 && tg_type_numel(&n->type) > 1; /* not the mean */
    bool mask_grad = n->phase == TG_PHASE_BACKWARD && n->op == TG_OP_where && at(n, "gpt2.tg", 80, 80);
    if (!ce && !mask_grad) continue;
    if (k < 0) k = n->kernel;
    ck_assert_msg(n->kernel == k, "cross-entropy node %%%d (%s) is in k%d, not k%d", i,
                  tg_ops[n->op].name, n->kernel, k);
    fwd += n->phase == TG_PHASE_FORWARD;
    bwd += n->phase == TG_PHASE_BACKWARD;
    if (mask_grad) dlogits = n;
  }
  ck_assert_int_ge(fwd, 8);
  ck_assert_int_ge(bwd, 10);
  ck_assert_ptr_nonnull(dlogits);
  const tg_kernel *K = &g->kernels[k];
  ck_assert_int_eq(K->kind, TG_KERNEL_ROW);
  int64_t V = dlogits->type.dim[2].size;
  for (int o = 0; o < K->n_outputs; o++) {
    const tg_node *n = g->nodes[K->outputs[o]];
    bool btv = n->type.rank == 3 && n->type.dim[2].size == V;
    ck_assert_msg(!btv || n == dlogits, "the cross-entropy kernel writes %%%d (%s), a [B, T, V] value",
                  n->id, tg_ops[n->op].name);
  }
}

/* The second stage of a sum split_sums.c split (a sum of a sum). */
static bool second_stage(const tg_node *n) { return n->op == TG_OP_sum && n->in[0]->op == TG_OP_sum; }

/* Backward layernorm instances: runs of computing backward nodes at
 * std.tg 15-17 (another line ends a run); each spans at most 2 kernels.
 * The second stages of its weight gradients' sums are elsewhere (all the
 * step's in one kernel: checked here too). */
static void check_layernorm_backward(const tg_graph *g) {
  int runs = 0, stage2_kernel = -1, stage2 = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->phase == TG_PHASE_BACKWARD && second_stage(n)) {
      if (stage2_kernel < 0) stage2_kernel = n->kernel;
      ck_assert_int_eq(n->kernel, stage2_kernel);
      stage2++;
    }
  }
  ck_assert_int_ge(stage2, 4 * 12); /* per layer: 2 layernorms' dgamma and dbeta, biases too */
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->phase != TG_PHASE_BACKWARD || !computes(n) || second_stage(n) || !at(n, "std.tg", 15, 17)) continue;
    int ks[3] = {-1, -1, -1}, nk = 0, j = i;
    for (; j < g->n_nodes; j++) {
      const tg_node *m = g->nodes[j];
      if (!computes(m) || second_stage(m)) continue;
      if (!at(m, "std.tg", 15, 17) || m->phase != TG_PHASE_BACKWARD) break;
      bool seen = false;
      for (int a = 0; a < nk; a++) seen |= ks[a] == m->kernel;
      if (!seen) {
        ck_assert_msg(nk < 2, "a layernorm backward (from %%%d) spans a third kernel at %%%d", i, j);
        ks[nk++] = m->kernel;
      }
    }
    runs++;
    i = j - 1;
  }
  ck_assert_int_eq(runs, 2 * 12 + 1);
}

static void check_optimizer(const tg_graph *g) {
  int ks[3], nk = 0, n_opt = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->phase != TG_PHASE_OPTIMIZER || !computes(n)) continue;
    n_opt++;
    bool seen = false;
    for (int a = 0; a < nk; a++) seen |= ks[a] == n->kernel;
    if (!seen) {
      ck_assert_msg(nk < 3, "the optimizer spans a fourth kernel at %%%d", i);
      ks[nk++] = n->kernel;
    }
  }
  ck_assert_int_gt(n_opt, 148 * 15);
  for (int a = 0; a < nk; a++) ck_assert_int_eq(g->kernels[ks[a]].kind, TG_KERNEL_MULTI);
}

static void check_matmuls(const tg_graph *g) {
  int matmuls = 0;
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    int mm = 0;
    for (int a = 0; a < K->n_nodes; a++) {
      const tg_node *n = g->nodes[K->nodes[a]];
      mm += n->op == TG_OP_matmul;
      if (K->kind == TG_KERNEL_MATMUL && n->op != TG_OP_matmul)
        ck_assert_msg(tg_ops[n->op].kind == TG_KIND_ELEMENTWISE, "k%d's epilogue holds %s", k,
                      tg_ops[n->op].name);
    }
    ck_assert_int_eq(mm, K->kind == TG_KERNEL_MATMUL ? 1 : 0);
    matmuls += mm;
  }
  int in_graph = 0;
  for (int i = 0; i < g->n_nodes; i++) in_graph += g->nodes[i]->op == TG_OP_matmul;
  ck_assert_int_eq(matmuls, in_graph);
}

START_TEST(test_gpt2_requirements) {
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_step(ctx, 0, NULL, true);
  ck_assert_int_gt(g->n_kernels, 0);
  check_layernorm_forward(g);
  check_bias_gelu(g);
  check_cross_entropy(g);
  check_layernorm_backward(g);
  check_optimizer(g);
  check_matmuls(g);
  /* fusion moves less than the ops would one by one */
  int64_t fused = 0, unfused = 0;
  for (int k = 0; k < g->n_kernels; k++)
    fused += g->kernels[k].bytes_read + g->kernels[k].bytes_written, unfused += g->kernels[k].bytes_unfused;
  ck_assert_int_lt(3 * fused, unfused);
  tg_graph_free(g);
  tu_ctx_free(ctx);
}
END_TEST

/* ---- the text form and the verifier -------------------------------------- */

static char *print_graph(const tg_graph *g) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  tg_print_ir(f, g);
  fclose(f);
  return text;
}

START_TEST(test_text_round_trip) {
  static const char *const t[] = {"n_layer=1", "n_embd=16", "n_head=2", "vocab=50", "block_size=8", "B=2", "T=8"};
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_step(ctx, 7, t, true);
  char *a = print_graph(g);
  ck_assert_ptr_nonnull(strstr(a, "\nkernel k0 "));
  ck_assert_ptr_nonnull(strstr(a, " in k0 @ "));
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("read failed: %s", tu_errors(ctx));
  tg_graph *h = tg_read_ir(ctx, tg_source_add(ctx, "a.tgir", a, strlen(a)));
  ck_assert_int_eq(h->n_kernels, g->n_kernels);
  for (int k = 0; k < g->n_kernels; k++) {
    ck_assert_int_eq(h->kernels[k].n_outputs, g->kernels[k].n_outputs);
    ck_assert(h->kernels[k].bytes_unfused == g->kernels[k].bytes_unfused);
  }
  char *b = print_graph(h);
  ck_assert_str_eq(a, b);
  /* a node moved into an earlier kernel than what it reads: not a schedule */
  tg_node *late = NULL;
  for (int i = h->n_nodes - 1; i >= 0 && !late; i--)
    if (h->nodes[i]->kernel > 0 && !tg_is_view(h->nodes[i]) && tg_kernel_base(h->nodes[i]->in[0])->kernel > 0)
      late = h->nodes[i];
  ck_assert_ptr_nonnull(late);
  late->kernel = 0;
  ck_assert(!tg_verify(ctx, h));
  ck_assert_ptr_nonnull(strstr(tu_errors(ctx), "of the later kernel"));
  free(a);
  free(b);
  tu_ctx_free(ctx);
}
END_TEST

/* ---- numerics: fused, kernel by kernel, against the ordinary run ---------- */

static uint64_t rng_state;
static double uniform(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1;
}

static const tg_node *leaf_named(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (tg_ops[n->op].kind == TG_KIND_LEAF && n->name && !strcmp(n->name, name)) return n;
  }
  ck_abort_msg("no leaf %s", name);
  return NULL;
}

static void fill_leaves(const tg_graph *g, tg_interp *it, int64_t vocab) {
  rng_state = 7;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_input) continue;
    double *v = tg_interp_leaf(it, n);
    for (int64_t k = 0; k < tg_type_numel(&n->type); k++)
      v[k] = n->type.dtype == TG_I32 ? (double)((k * 7 + 3) % vocab) : 0.5 * uniform();
    if (!strcmp(n->name, TG_INPUT_LR)) v[0] = 1e-2;
    if (!strcmp(n->name, TG_INPUT_STEP)) v[0] = 1;
  }
}

static void compare(const double *a, const double *b, int64_t n, const char *what) {
  for (int64_t k = 0; k < n; k++)
    ck_assert_msg(fabs(a[k] - b[k]) <= 1e-12 * fmax(1, fabs(a[k])), "%s[%lld]: %.17g vs %.17g", what,
                  (long long)k, a[k], b[k]);
}

START_TEST(test_fused_run_agrees) {
  static const char *const t[] = {"n_layer=2", "n_embd=16", "n_head=2", "vocab=50", "block_size=8", "B=2", "T=8"};
  tg_ctx *ctx = tu_ctx();
  tg_graph *ref = compile_step(ctx, 7, t, false), *fu = compile_step(ctx, 7, t, true);
  ck_assert_int_eq(ref->n_nodes, fu->n_nodes);
  tg_interp *ir = tg_interp_new(ref, TG_PREC_F64), *ifu = tg_interp_new(fu, TG_PREC_F64);
  fill_leaves(ref, ir, 50);
  fill_leaves(fu, ifu, 50);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("run failed: %s", tu_errors(ctx));
  tg_interp_run(ctx, ir);
  tg_interp_run_kernels(ctx, ifu);
  /* the loss, every gradient, the grad norm */
  for (int o = 0; o < ref->n_outputs; o++) {
    const tg_node *a = ref->outputs[o].node, *b = fu->outputs[o].node;
    ck_assert_str_eq(ref->outputs[o].name, fu->outputs[o].name);
    compare(tg_interp_value(ir, a), tg_interp_value(ifu, b), tg_type_numel(&a->type), ref->outputs[o].name);
  }
  /* the updated parameters and moments */
  int leaves = 0;
  for (int i = 0; i < ref->n_nodes; i++) {
    const tg_node *n = ref->nodes[i];
    if (n->op != TG_OP_param && n->op != TG_OP_state) continue;
    compare(tg_interp_leaf(ir, n), tg_interp_leaf(ifu, leaf_named(fu, n->name)),
            tg_type_numel(&n->type), n->name);
    leaves++;
  }
  ck_assert_int_eq(leaves, 3 * (2 * 12 + 4));
  tg_interp_free(ir);
  tg_interp_free(ifu);
  tg_graph_free(ref);
  tg_graph_free(fu);
  tu_ctx_free(ctx);
}
END_TEST

/* The kernel-by-kernel run refuses a value that fusion keeps in registers:
 * a kernel that reads another's internal value (made so by hand). */
START_TEST(test_run_catches_unwritten_value) {
  static const char *const t[] = {"n_layer=1", "n_embd=16", "n_head=2", "vocab=50", "block_size=8", "B=2", "T=8"};
  tg_ctx *ctx = tu_ctx();
  tg_graph *g = compile_step(ctx, 7, t, true);
  /* a value one kernel writes for a later one, struck from the writer's
   * outputs: the reader must now fail */
  const tg_node *src = NULL;
  for (int i = 0; i < g->n_nodes && !src; i++) {
    const tg_node *n = g->nodes[i];
    if (!computes(n)) continue;
    for (int j = 0; j < n->nin && !src; j++) {
      const tg_node *b = tg_kernel_base(n->in[j]);
      if (b->kernel >= 0 && b->kernel < n->kernel) src = b;
    }
  }
  ck_assert_ptr_nonnull(src);
  tg_kernel *K = &g->kernels[src->kernel];
  int o = 0;
  while (o < K->n_outputs && K->outputs[o] != src->id) o++;
  ck_assert_int_lt(o, K->n_outputs);
  K->outputs[o] = K->outputs[--K->n_outputs];
  tg_interp *it = tg_interp_new(g, TG_PREC_F64);
  fill_leaves(g, it, 50);
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail) == 0) {
    tg_interp_run_kernels(ctx, it);
    ck_abort_msg("the run read a value no kernel wrote");
  }
  ck_assert_ptr_nonnull(strstr(tu_errors(ctx), "does not write to memory"));
  tg_interp_free(it);
  tu_ctx_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fuse");
  TCase *tc = tcase_create("fuse");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpt2_requirements);
  tcase_add_test(tc, test_text_round_trip);
  tcase_add_test(tc, test_fused_run_agrees);
  tcase_add_test(tc, test_run_catches_unwritten_value);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
