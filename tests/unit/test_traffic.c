/* test_traffic.c: the traffic report (codegen/cuda/traffic.c) against figures
 * worked out by hand for small models.
 *
 * y = sum(x @ w + b, -1) with x [256, 64] f32, w [64, 32], b [32]:
 *   cuBLASLt   reads w (64·32·4 = 8192 B) and x (256·64·4 = 65536 B),
 *              writes the product (256·32·4 = 32768 B), 2·256·32·64 FLOPs;
 *   the bias add is recomputed by its reader, so the epilogue has no
 *   launch, and the row kernel reads the product and b (32768 + 128 B)
 *   and writes y (256·4 = 1024 B), one block per row.
 * Without recomputation (the CPU's lowering), the epilogue reads the
 * product and b and writes x @ w + b, which the row kernel then reads.
 * In bf16 the same model multiplies bf16 copies: x is cast by the
 * matmul's kernel before the product (65536 B read, 32768 B written), the weight copy is bf16
 * (4096 B), the product bf16 (16384 B), and the matmul's FLOPs run on
 * the tensor cores.
 * y = x @ w + b as the output (nothing recomputes it): one cuBLASLt call
 * with the BIAS epilogue, which reads w, x and b (128 B) and writes y; the
 * product is never stored.  y = GELU(x @ w + b), GELU written out as
 * std.tg writes it: one call with GELU_AUX_BIAS, which also writes the
 * GELU's input (the aux, for a backward).
 * Layernorm over rows of C points walks each row three times (the mean,
 * the variance, the output); the row cache keeps what a later walk needs,
 * so x is read once: in registers for C = 768 (3 steps of a block), in
 * shared memory for C = 16384 (x, 64 KiB, kept; d would pass the 110 KiB
 * budget, so the last walk recomputes it from the kept x), and not at all
 * for C = 40000 (160 KB: x is read three times).
 * GPT-2 124M's step at B=16, T=1024 (what `tgc --report traffic` counts):
 * no launch is flagged (the gradient norm, the bias and layernorm weight
 * gradients and the embedding's backward all run on at least 4 x 132
 * blocks with short chains), each layernorm's backward is one row-group
 * launch, and the step moves at most BUDGET_GB (63.3 before the row cache,
 * the bias and GELU epilogues and flash attention's output laid out as the
 * projection reads it, 48.9 before GELU's backward became a DGELU
 * epilogue, 47.7 before layernorm's backward became one kernel, the bias
 * gradients moved into the weight-gradient GEMMs and each flash backward
 * launch stopped being counted as writing all of dq, dk and dv, 44.0
 * before flash's backward wrote them into the qkv gradient's columns and
 * the embedding's rows were scattered into the tied head's gradient in
 * place, 41.9 before the embedding's backward summed its rows in shared
 * memory: 10 rows a block, not 64, so 5,031 blocks each read the 64 KB of
 * indices, which L2 serves, +0.28 GB, and the table is read and written
 * whole rather than hit rows read and written per source row, +0.20 GB,
 * for a launch expected to be 10 ms shorter on an H100; a budget that a
 * change moving more bytes must answer for).
 * A whole-tensor sum of 16.8 MB on one block is flagged twice over (too
 * few blocks for its bytes, a 16384-element chain per thread).  And the
 * roofline time of a launch is its bytes over the bandwidth or its FLOPs
 * over the peak, whichever is longer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "lower.h"
#include "passes.h"
#include "testutil.h"
#include "traffic.h"

/* GPT-2 124M's step at B=16 in GB (the comment above) */
#define BUDGET_GB 42.4

static const char *const linear = "config {\n"
                                  "  N = 256\n"
                                  "  C = 64\n"
                                  "  K = 32\n"
                                  "}\n"
                                  "input x: f32[N, C]\n"
                                  "param w: [C, K] = normal(0.02)\n"
                                  "param b: [K] = zeros\n"
                                  "output y = sum(x @ w + b, -1)\n";

/* x @ w + b's inputs, for the models that use them otherwise than linear */
#define AFFINE_INPUTS                                                           \
  "config {\n  N = 256\n  C = 64\n  K = 32\n}\n"                               \
  "input x: f32[N, C]\n"                                                        \
  "param w: [C, K] = normal(0.02)\n"                                            \
  "param b: [K] = zeros\n"

static tg_traffic *count_ex(tg_ctx *c, const char *text, tg_precision_policy p, bool remat, bool grad) {
  tg_graph *g = tu_compile(c, "t.tg", text, 0, NULL);
  jmp_buf bail;
  c->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("compiling failed: %s", tu_errors(c));
  tg_pipeline_opts po = {.precision = p, .kernels = true, .grad = grad};
  tg_run_pipeline(c, g, &po);
  tg_program *prog = tg_lower_ex(c, g, remat ? TG_REMAT_ALL : TG_REMAT_NONE);
  c->bail = NULL;
  return tg_traffic_count(g->arena, tg_cuda_plan_make(g->arena, prog), tg_gpu_find("h100"));
}

static tg_traffic *count(tg_ctx *c, const char *text, tg_precision_policy p, bool remat) {
  return count_ex(c, text, p, remat, false);
}

static const tg_cuda_op *op_of(const tg_traffic *t, int i) { return &t->plan->ops[t->launch[i].op]; }

START_TEST(test_linear_by_hand) {
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count(c, linear, TG_PRECISION_F32, true);
  ck_assert_int_eq(t->n, 2);
  const tg_launch_traffic *mm = &t->launch[0], *row = &t->launch[1];
  ck_assert(op_of(t, 0)->kind == TG_CUDA_MATMUL);
  ck_assert_int_eq(mm->category, TG_TRAFFIC_MATMUL);
  ck_assert_int_eq(mm->bytes_read, 8192 + 65536);
  ck_assert_int_eq(mm->bytes_written, 32768);
  ck_assert(mm->flops == 2.0 * 256 * 32 * 64);
  ck_assert(!mm->tensor_cores);
  ck_assert_int_eq(row->category, TG_TRAFFIC_ROW);
  ck_assert_int_eq(row->bytes_read, 32768 + 128);
  ck_assert_int_eq(row->bytes_written, 1024);
  ck_assert_int_eq(row->blocks, 256);
  ck_assert_ptr_null(row->flag);
  ck_assert_int_eq(t->bytes_read + t->bytes_written, 8192 + 65536 + 32768 + 32768 + 128 + 1024);
  /* the roofline: bytes over 3.35 TB/s, or FLOPs over 67 TFLOP/s of f32 */
  double want = fmax((double)(row->bytes_read + row->bytes_written) / 3.35e12, row->flops / 67e12);
  ck_assert(fabs(row->seconds - want) <= 1e-15);
  ck_assert(fabs(t->seconds - (mm->seconds + row->seconds)) <= 1e-15);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_linear_without_recomputing) {
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count(c, linear, TG_PRECISION_F32, false);
  ck_assert_int_eq(t->n, 3);
  ck_assert_int_eq(t->launch[1].category, TG_TRAFFIC_EPILOGUE);
  ck_assert_int_eq(t->launch[1].bytes_read, 32768 + 128);
  ck_assert_int_eq(t->launch[1].bytes_written, 32768);
  ck_assert_int_eq(t->launch[2].bytes_read, 32768);
  ck_assert_int_eq(t->launch[2].bytes_written, 1024);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_linear_bf16) {
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count(c, linear, TG_PRECISION_BF16, true);
  ck_assert_int_eq(t->n, 3);
  /* x cast for the matmul, by its kernel before the product */
  ck_assert_int_eq(t->launch[0].category, TG_TRAFFIC_EPILOGUE);
  ck_assert_int_eq(t->launch[0].bytes_read, 65536);
  ck_assert_int_eq(t->launch[0].bytes_written, 32768);
  const tg_launch_traffic *mm = &t->launch[1];
  ck_assert_int_eq(mm->bytes_read, 4096 + 32768);
  ck_assert_int_eq(mm->bytes_written, 16384);
  ck_assert(mm->tensor_cores);
  double want = fmax((double)(mm->bytes_read + mm->bytes_written) / 3.35e12, mm->flops / 790e12);
  ck_assert(fabs(mm->seconds - want) <= 1e-15);
  /* the row kernel adds the bias copy (32 bf16) as it reads the product */
  ck_assert_int_eq(t->launch[2].bytes_read, 16384 + 64);
  ck_assert_int_eq(t->launch[2].bytes_written, 1024);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_bias_in_the_gemm) {
  tg_ctx *c = tu_ctx();
  static const char *const text = AFFINE_INPUTS "output y = x @ w + b\n";
  tg_traffic *t = count(c, text, TG_PRECISION_F32, true);
  ck_assert_int_eq(t->n, 1);
  const tg_cuda_op *op = op_of(t, 0);
  ck_assert(op->kind == TG_CUDA_MATMUL);
  ck_assert_str_eq(op->matmul.epilogue, "CUBLASLT_EPILOGUE_BIAS");
  ck_assert_int_ge(op->matmul.bias_node, 0);
  ck_assert_int_eq(t->launch[0].bytes_read, 8192 + 65536 + 128);
  ck_assert_int_eq(t->launch[0].bytes_written, 32768);
  /* the CPU's lowering keeps the add as a kernel */
  tg_ctx *c2 = tu_ctx();
  ck_assert_int_eq(count(c2, text, TG_PRECISION_F32, false)->n, 2);
  tu_ctx_free(c2);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_gelu_in_the_gemm) {
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count(c,
                        AFFINE_INPUTS "h = x @ w + b\n"
                                      "output y = 0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + 0.044715 * h * h * h)))\n",
                        TG_PRECISION_F32, true);
  ck_assert_int_eq(t->n, 1);
  const tg_cuda_op *op = op_of(t, 0);
  ck_assert_str_eq(op->matmul.epilogue, "CUBLASLT_EPILOGUE_GELU_AUX_BIAS");
  ck_assert_int_ge(op->matmul.aux_node, 0);
  ck_assert_int_eq(op->matmul.aux_ld, 32);
  ck_assert_int_eq(t->launch[0].bytes_read, 8192 + 65536 + 128);
  ck_assert_int_eq(t->launch[0].bytes_written, 32768 + 32768);
  tu_ctx_free(c);
  /* not GELU (another constant): the epilogue stays a kernel */
  c = tu_ctx();
  t = count(c,
            AFFINE_INPUTS "h = x @ w + b\n"
                          "output y = 0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + 0.05 * h * h * h)))\n",
            TG_PRECISION_F32, true);
  ck_assert_int_eq(t->n, 2);
  ck_assert_str_eq(op_of(t, 0)->matmul.epilogue, "CUBLASLT_EPILOGUE_DEFAULT");
  tu_ctx_free(c);
}
END_TEST

/* GELU's backward in the GEMM that makes its gradient: loss =
 * sum(y * y * t), y = GELU(x @ w + b) @ w2, with w2 [32, 16], t [256, 16].
 * The gradient of GELU's output is dy @ w2ᵀ (dy = 2·y·t, computed by a
 * kernel of its own), which only GELU's backward reads: one cuBLASLt call
 * with DGELU reads dy (256·16·4 = 16384 B), w2 (2048 B) and the GELU's
 * input that the forward's GELU_AUX_BIAS kept (256·32·4 = 32768 B, the
 * same buffer), and writes dy @ w2ᵀ · gelu'(x @ w + b) (32768 B); no
 * launch multiplies a stored product afterwards. */
START_TEST(test_gelu_backward_in_the_gemm) {
  static const char *const gelu_model = AFFINE_INPUTS
      "param w2: [K, 16] = normal(0.02)\n"
      "input t: f32[N, 16]\n"
      "h = x @ w + b\n"
      "a = 0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + 0.044715 * h * h * h)))\n"
      "y = a @ w2\n"
      "output loss = sum(y * y * t)\n";
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count_ex(c, gelu_model, TG_PRECISION_F32, true, true);
  int dgelu = -1, aux_written = -1;
  for (int i = 0; i < t->n; i++) {
    const tg_cuda_op *op = op_of(t, i);
    ck_assert_int_ne(t->launch[i].category, TG_TRAFFIC_EPILOGUE);
    if (op->kind != TG_CUDA_MATMUL) continue;
    if (!strcmp(op->matmul.epilogue, "CUBLASLT_EPILOGUE_DGELU")) {
      ck_assert_int_eq(dgelu, -1);
      dgelu = i;
    } else if (!strcmp(op->matmul.epilogue, "CUBLASLT_EPILOGUE_GELU_AUX_BIAS")) {
      aux_written = op->matmul.aux_node;
    }
  }
  ck_assert_int_ge(dgelu, 0);
  const tg_cuda_matmul *M = &op_of(t, dgelu)->matmul;
  ck_assert_int_eq(M->aux_node, aux_written);
  ck_assert(M->aux_read);
  ck_assert_int_eq(M->aux_ld, 32);
  ck_assert_int_eq(t->launch[dgelu].bytes_read, 16384 + 2048 + 32768);
  ck_assert_int_eq(t->launch[dgelu].bytes_written, 32768);
  tu_ctx_free(c);
  /* GELU spelled otherwise (another constant): neither GELU epilogue (the
   * bias may still fold), and GELU's backward stays the chain rule's terms */
  c = tu_ctx();
  const char *near = "0.044715 * h * h * h";
  char other[1024];
  const char *at = strstr(gelu_model, near);
  snprintf(other, sizeof other, "%.*s0.05 * h * h * h%s", (int)(at - gelu_model), gelu_model, at + strlen(near));
  t = count_ex(c, other, TG_PRECISION_F32, true, true);
  for (int i = 0; i < t->n; i++)
    if (op_of(t, i)->kind == TG_CUDA_MATMUL) ck_assert_int_lt(op_of(t, i)->matmul.aux_node, 0);
  tu_ctx_free(c);
}
END_TEST

/* A bias's gradient in the GEMM of its weight's: y = x @ w + b over
 * x [4, 64, 64] (B, T, C), z = y @ w2, loss = sum(z * z * t).  dy = dz
 * w2ᵀ is a GEMM's; the bias gradient is dy summed over B and T
 * (split_sums: over T in a reduce kernel of its own, then over B before
 * the end); the weight's gradient xᵀ dy contracts the same dy over the
 * same 256 rows, so that GEMM writes the bias gradient too
 * (BGRADA: dy is cuBLASLt's A, one sum per row of its D): it reads x
 * (256·64·4 = 65536 B) and dy (256·32·4 = 32768 B) and writes dw
 * (64·32·4 = 8192 B) and db (32·4 = 128 B); no launch writes db or sums
 * dy over T. */
START_TEST(test_bias_gradient_in_the_gemm) {
  static const char *const model = "config {\n  B = 4\n  T = 64\n  C = 64\n  K = 32\n}\n"
                                   "input x: f32[B, T, C]\n"
                                   "input t: f32[B, T, 16]\n"
                                   "param w: [C, K] = normal(0.02)\n"
                                   "param b: [K] = zeros\n"
                                   "param w2: [K, 16] = normal(0.02)\n"
                                   "z = (x @ w + b) @ w2\n"
                                   "output loss = sum(z * z * t)\n";
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count_ex(c, model, TG_PRECISION_F32, true, true);
  int bgrad = -1;
  for (int i = 0; i < t->n; i++) {
    const tg_cuda_op *op = op_of(t, i);
    if (op->kind == TG_CUDA_MATMUL && op->matmul.bias_written) {
      ck_assert_int_eq(bgrad, -1);
      bgrad = i;
    }
  }
  ck_assert_int_ge(bgrad, 0);
  const tg_cuda_matmul *M = &op_of(t, bgrad)->matmul;
  ck_assert_str_eq(M->epilogue, "CUBLASLT_EPILOGUE_BGRADA");
  ck_assert_int_eq(M->m, 32); /* one sum per output column of tg's product */
  ck_assert_int_eq(M->k, 256);
  ck_assert_int_eq(t->launch[bgrad].bytes_read, 65536 + 32768);
  ck_assert_int_eq(t->launch[bgrad].bytes_written, 8192 + 128);
  const tg_graph *g = t->plan->p->g;
  ck_assert_int_eq(g->nodes[M->bias_node]->type.rank, 3); /* the [1, 1, K] stage-2 sum */
  for (int i = 0; i < t->n; i++) {
    const tg_cuda_op *op = op_of(t, i);
    if (op->kind != TG_CUDA_LAUNCH) continue;
    for (int a = 0; a < op->launch.n_args; a++) {
      const tg_cuda_arg *arg = &op->launch.args[a];
      const tg_node *n = g->nodes[arg->node];
      ck_assert_msg(!(arg->written && arg->node == M->bias_node), "%s writes the bias gradient", op->launch.function);
      /* the stage-1 sum, [B, 1, K], is not made */
      ck_assert_msg(!(arg->written && n->op == TG_OP_sum && n->type.rank == 3 && n->type.dim[0].size == 4 &&
                      n->type.dim[1].size == 1),
                    "%s still sums dy over T", op->launch.function);
    }
  }
  tu_ctx_free(c);
  /* the CPU's lowering keeps the two sums */
  c = tu_ctx();
  t = count_ex(c, model, TG_PRECISION_F32, false, true);
  for (int i = 0; i < t->n; i++)
    if (op_of(t, i)->kind == TG_CUDA_MATMUL) ck_assert(!op_of(t, i)->matmul.bias_written);
  tu_ctx_free(c);
}
END_TEST

/* A tied embedding (x = wte[idx], logits = x wteᵀ), f32: wte's gradient is
 * the head's product gᵀ x, which the GEMM writes [V, C] as wte lies
 * (autodiff: weight_grad), and the embedding's rows are scattered into
 * that buffer in place.  By hand, V = 512, C = 64, 256 indices: the
 * scatter (512 blocks of one table row each: tg_cuda_scatter_rows) reads
 * the source rows dx, 256 x 64 f32 = 65536 B, every index once a block,
 * 512 x 256 x 4 = 524288 B, and, summing its rows in shared memory
 * (emit.h: TG_SCATTER_SHARED_FLOATS), the table once, 512 x 64 x 4 =
 * 131072 B, which it writes once.  No copy of the table, and no other
 * launch writes a [V, C] value. */
START_TEST(test_tied_embedding_in_place) {
  static const char *const model = "config {\n  B = 4\n  T = 64\n  V = 512\n  C = 64\n}\n"
                                   "input idx: i32[B, T]\n"
                                   "param wte: [V, C] = normal(0.02)\n"
                                   "x = gather(wte, idx)\n"
                                   "logits = x @ transpose(wte)\n"
                                   "output loss = sum(logits * logits)\n";
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count_ex(c, model, TG_PRECISION_F32, true, true);
  const tg_graph *g = t->plan->p->g;
  int scatter = -1;
  for (int i = 0; i < t->n; i++) {
    if (t->launch[i].category != TG_TRAFFIC_EMBEDDING) continue;
    ck_assert_int_eq(scatter, -1);
    scatter = i;
  }
  ck_assert_int_ge(scatter, 0);
  const tg_launch_traffic *s = &t->launch[scatter];
  ck_assert_int_eq(s->blocks, 512);
  /* + 1024: the count also notes the body's own read of the indices
   * (emit.c, scatter_code), one pass over them more than the blocks make */
  ck_assert_int_eq(s->bytes_read, 65536 + 524288 + 1024 + 131072);
  ck_assert_int_eq(s->bytes_written, 131072);
  ck_assert_ptr_null(s->flag);
  /* the table the scatter writes is the GEMM's product's buffer */
  const tg_cuda_launch *L = &op_of(t, scatter)->launch;
  int table = -1;
  for (int a = 0; a < L->n_args; a++)
    if (L->args[a].written) table = L->args[a].node;
  ck_assert_int_ge(table, 0);
  const tg_node *sc = g->nodes[table];
  ck_assert_int_eq(sc->op, TG_OP_scatter_add);
  ck_assert_int_eq(sc->nin, 3);
  const tg_node *G = sc->in[2];
  ck_assert_int_eq(G->op, TG_OP_matmul);
  const tg_program *p = t->plan->p;
  ck_assert_int_eq(p->store[sc->id].place, TG_PLACE_ARENA);
  ck_assert_int_eq(p->store[G->id].place, TG_PLACE_ARENA);
  ck_assert_int_eq(p->store[sc->id].offset, p->store[G->id].offset);
  for (int i = 0; i < t->n; i++) {
    const tg_cuda_op *op = op_of(t, i);
    if (i == scatter || op->kind != TG_CUDA_LAUNCH) continue;
    for (int a = 0; a < op->launch.n_args; a++) {
      const tg_node *n = g->nodes[op->launch.args[a].node];
      ck_assert_msg(!(op->launch.args[a].written && n->type.rank == 2 && n->type.dim[0].size == 512 &&
                      n->type.dim[1].size == 64),
                    "%s writes a [V, C] value", op->launch.function);
    }
  }
  tu_ctx_free(c);
}
END_TEST

static tg_traffic *layernorm(tg_ctx *c, int rows, int cols) {
  char text[512];
  snprintf(text, sizeof text,
           "config {\n  N = %d\n  C = %d\n}\n"
           "input x: f32[N, C]\n"
           "d = x - sum(x, -1) / C\n"
           "output y = d * rsqrt(sum(d * d, -1) / C + 1e-5)\n",
           rows, cols);
  return count(c, text, TG_PRECISION_F32, true);
}

START_TEST(test_rows_read_once) {
  const int cols[] = {768, 16384, 40000}, reads[] = {1, 1, 3};
  const size_t shared[] = {0, 16384 * 4, 0};
  for (int i = 0; i < 3; i++) {
    tg_ctx *c = tu_ctx();
    tg_traffic *t = layernorm(c, 64, cols[i]);
    ck_assert_int_eq(t->n, 1);
    const tg_launch_traffic *L = &t->launch[0];
    ck_assert_int_eq(L->category, TG_TRAFFIC_ROW);
    ck_assert_int_eq(L->bytes_read, (int64_t)reads[i] * 64 * cols[i] * 4);
    ck_assert_int_eq(L->bytes_written, (int64_t)64 * cols[i] * 4);
    ck_assert_uint_eq(op_of(t, 0)->launch.shared_bytes, shared[i]);
    tu_ctx_free(c);
  }
}
END_TEST

/* Layernorm's backward as one row-group kernel (split_sums.c, fuse.c):
 * 4 x 32 rows of C = 64 in f32, h = x * s normalised, loss = sum(y * g).
 * The backward joins the forward's row kernel (it reads the forward's
 * values), and dγ, dβ go in with it as sums over groups of 16 rows: one
 * launch of 128 / 16 = 8 blocks that reads x and g once (2 x 32768 B) and
 * s, w, b (3 x 256 B), and writes y * g for the loss's sum, dh * x for
 * ds's sum (2 x 32768 B) and the partial sums of dγ and dβ ([8, 1, 64]:
 * 2 x 2048 B).  The only reductions left are the loss and ds (a sum of
 * dh, which needs the row sums: not grouped); the stage 2s are the
 * optimizer's. */
static const char *const layernorm_step = "config {\n  B = 4\n  T = 32\n  C = 64\n}\n"
                                          "input x: f32[B, T, C]\n"
                                          "input g: f32[B, T, C]\n"
                                          "param s: [C] = ones\n"
                                          "param w: [C] = ones\n"
                                          "param b: [C] = zeros\n"
                                          "h = x * s\n"
                                          "d = h - sum(h, -1) / C\n"
                                          "output loss = sum((d * rsqrt(sum(d * d, -1) / C + 1e-5) * w + b) * g)\n";

START_TEST(test_layernorm_backward_one_kernel) {
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count_ex(c, layernorm_step, TG_PRECISION_F32, true, true);
  const tg_launch_traffic *L = &t->launch[0];
  ck_assert_int_eq(L->category, TG_TRAFFIC_ROW);
  ck_assert_int_eq(L->blocks, 128 / TG_ROW_GROUP);
  ck_assert_int_eq(L->bytes_read, 2 * 32768 + 3 * 256);
  ck_assert_int_eq(L->bytes_written, 2 * 32768 + 2 * 2048);
  int rows = 0, reduces = 0;
  for (int i = 0; i < t->n; i++) {
    rows += t->launch[i].category == TG_TRAFFIC_ROW;
    reduces += t->launch[i].category == TG_TRAFFIC_REDUCE;
  }
  ck_assert_int_eq(rows, 1);
  ck_assert_int_eq(reduces, 2);
  tu_ctx_free(c);
}
END_TEST

/* GPT-2's whole bf16 training step at one -D override, lowered for CUDA. */
static tg_program *gpt2_step(tg_ctx *c, const char *define) {
  const char *const defs[] = {define};
  tg_graph *g = tu_compile(c, "models/gpt2.tg", tu_read("models/gpt2.tg"), 1, defs);
  jmp_buf bail;
  c->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("compiling failed: %s", tu_errors(c));
  tg_pipeline_opts po = {.precision = TG_PRECISION_BF16, .grad = true, .step = true, .adamw = tg_adamw_defaults,
                         .pad_multiple = TG_PAD_MULTIPLE_DEFAULT};
  tg_run_pipeline(c, g, &po);
  tg_program *p = tg_lower_ex(c, g, TG_REMAT_ALL);
  c->bail = NULL;
  return p;
}

START_TEST(test_gpt2_step) {
  tg_ctx *c = tu_ctx();
  tg_program *p = gpt2_step(c, "B=16");
  const tg_graph *g = p->g;
  tg_traffic *t = tg_traffic_count(g->arena, tg_cuda_plan_make(g->arena, p), tg_gpu_find("h100"));
  for (int i = 0; i < t->n; i++)
    ck_assert_msg(!t->launch[i].flag, "launch %d (%s) is flagged: %s", i, op_of(t, i)->launch.function,
                  t->launch[i].flag);
  ck_assert_int_eq(t->n_flagged, 0);
  /* each of the 25 layernorms' backward is one row-group launch (16 rows
   * a block: 1,024 blocks), and no reduce launch is left for dγ or dβ */
  int groups = 0;
  for (int i = 0; i < t->n; i++) {
    const tg_kernel *K = &g->kernels[op_of(t, i)->kernel];
    groups += t->launch[i].category == TG_TRAFFIC_ROW && t->launch[i].blocks == 16 * 1024 / TG_ROW_GROUP;
    ck_assert_msg(!(K->kind == TG_KERNEL_REDUCE && strstr(K->name, "std.tg:17")), "a layernorm weight gradient in %s",
                  K->name);
  }
  ck_assert_int_eq(groups, 25);
  /* the attention's backward writes dq, dk and dv into the columns of the
   * [B, T, 3C] gradient (no launch reassembles them), and every bias
   * gradient is its weight-gradient GEMM's: no reduce launch is left but
   * the loss's sum and the position embedding's */
  int reduces = 0, bgrads = 0, flash_into = 0;
  for (int i = 0; i < t->n; i++) {
    const tg_cuda_op *op = op_of(t, i);
    reduces += t->launch[i].category == TG_TRAFFIC_REDUCE;
    bgrads += op->kind == TG_CUDA_MATMUL && op->matmul.bias_written;
    if (op->kind == TG_CUDA_LAUNCH && strstr(op->launch.function, "_bwd_dq")) {
      const tg_cuda_arg *a = op->launch.args;
      const tg_type *gt = &g->nodes[a[6].node]->type;
      flash_into += a[6].node == a[7].node && a[7].node == a[8].node && gt->rank == 3 && gt->dim[2].size == 3 * 768;
    }
  }
  ck_assert_int_eq(flash_into, 12);
  ck_assert_int_eq(bgrads, 48);
  ck_assert_int_le(reduces, 2);
  double gb = (double)(t->bytes_read + t->bytes_written) / 1e9;
  printf("GPT-2 124M, B=16: %d launches, none flagged, %.2f GB a step\n", t->n, gb);
  ck_assert_msg(gb <= BUDGET_GB, "the step moves %.2f GB (budget %.1f)", gb, BUDGET_GB);
  tu_ctx_free(c);
}
END_TEST

/* What tg_cuda_kernels_make keeps of each step as it renders it (the
 * plan's step_bytes) counts as emitting the step again would: every
 * launch's bytes the same both ways, on GPT-2's whole bf16 step. */
START_TEST(test_counted_as_rendered) {
  tg_ctx *c = tu_ctx();
  tg_program *p = gpt2_step(c, "n_layer=2");
  const tg_graph *g = p->g;
  tg_cuda_plan *plan = tg_cuda_plan_make(g->arena, p);
  ck_assert_ptr_null(plan->step_bytes);
  tg_cuda_kernels_make(g->arena, p, plan);
  ck_assert_ptr_nonnull(plan->step_bytes);
  tg_traffic *kept = tg_traffic_count(g->arena, plan, tg_gpu_find("h100"));
  tg_step_bytes **step_bytes = plan->step_bytes;
  plan->step_bytes = NULL; /* each step emitted again */
  tg_traffic *emitted = tg_traffic_count(g->arena, plan, tg_gpu_find("h100"));
  plan->step_bytes = step_bytes;
  ck_assert_int_eq(kept->n, emitted->n);
  int waves = 0;
  for (int i = 0; i < kept->n; i++) {
    ck_assert_int_eq(kept->launch[i].bytes_read, emitted->launch[i].bytes_read);
    ck_assert_int_eq(kept->launch[i].bytes_written, emitted->launch[i].bytes_written);
    waves += op_of(kept, i)->kind == TG_CUDA_LAUNCH;
  }
  ck_assert_int_gt(waves, 20);
  ck_assert_int_gt(kept->bytes_read, 0);
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_serial_sum_is_flagged) {
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count(c,
                        "config {\n  N = 4096\n  C = 1024\n}\n"
                        "input x: f32[N, C]\n"
                        "output s = sum(x * x)\n",
                        TG_PRECISION_F32, true);
  ck_assert_int_eq(t->n, 1);
  const tg_launch_traffic *L = &t->launch[0];
  ck_assert_int_eq(L->bytes_read, 4096 * 1024 * 4);
  ck_assert_int_eq(L->blocks, 1);
  ck_assert_int_eq(L->chain, 4096 * 1024 / 256);
  ck_assert_ptr_nonnull(L->flag);
  ck_assert_ptr_nonnull(strstr(L->flag, "1 blocks for 17 MB (want >= 528)"));
  ck_assert_int_eq(t->n_flagged, 1);
  ck_assert(L->flops == 2.0 * 4096 * 1024); /* the products, then the sum's adds */
  tu_ctx_free(c);
}
END_TEST

START_TEST(test_report_lines) {
  tg_ctx *c = tu_ctx();
  tg_traffic *t = count(c, linear, TG_PRECISION_F32, true);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  tg_traffic_print(f, t, 256);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(text, "roofline on H100 SXM (3.35 TB/s, 790 TFLOP/s bf16, 67 TFLOP/s f32, 132 SMs)"));
  ck_assert_ptr_nonnull(strstr(text, "cublasLtMatmul"));
  ck_assert_ptr_nonnull(strstr(text, "traffic:   matmul"));
  ck_assert_ptr_nonnull(strstr(text, "traffic: total: 2 launches (0 flagged)"));
  ck_assert_ptr_nonnull(strstr(text, "tokens/s (256 tokens a step)"));
  for (const char *p = text; *p; p = strchr(p, '\n') + 1) ck_assert(!strncmp(p, "traffic: ", 9));
  free(text);
  ck_assert_ptr_nonnull(tg_gpu_find("h200"));
  ck_assert_ptr_null(tg_gpu_find("h100x"));
  tu_ctx_free(c);
}
END_TEST

/* The spec of the GPU a driver names: its family by whole word (the names
 * as cuDeviceGetName gives them), nothing for a GPU the report does not
 * know, and each spec's memory, the planner's default. */
START_TEST(test_gpu_for_device) {
  ck_assert_ptr_eq(tg_gpu_for_device("NVIDIA H100 80GB HBM3"), tg_gpu_find("h100"));
  ck_assert_ptr_eq(tg_gpu_for_device("NVIDIA H100 PCIe"), tg_gpu_find("h100"));
  ck_assert_ptr_eq(tg_gpu_for_device("NVIDIA H200"), tg_gpu_find("h200"));
  ck_assert_ptr_eq(tg_gpu_for_device("NVIDIA A100-SXM4-80GB"), tg_gpu_find("a100"));
  ck_assert_ptr_null(tg_gpu_for_device("NVIDIA GH200 480GB"));
  ck_assert_ptr_null(tg_gpu_for_device("NVIDIA A10"));
  ck_assert_ptr_null(tg_gpu_for_device("NVIDIA H1000"));
  ck_assert_ptr_null(tg_gpu_for_device("emulated device"));
  ck_assert_ptr_null(tg_gpu_for_device(""));
  ck_assert(tg_gpu_find("h100")->memory_bytes == 80e9);
  ck_assert(tg_gpu_find("h200")->memory_bytes == 141e9);
}
END_TEST

int main(void) {
  Suite *s = suite_create("traffic");
  TCase *t = tcase_create("core");
  tcase_add_test(t, test_linear_by_hand);
  tcase_add_test(t, test_linear_without_recomputing);
  tcase_add_test(t, test_linear_bf16);
  tcase_add_test(t, test_rows_read_once);
  tcase_add_test(t, test_bias_in_the_gemm);
  tcase_add_test(t, test_gelu_in_the_gemm);
  tcase_add_test(t, test_gelu_backward_in_the_gemm);
  tcase_add_test(t, test_bias_gradient_in_the_gemm);
  tcase_add_test(t, test_layernorm_backward_one_kernel);
  tcase_add_test(t, test_tied_embedding_in_place);
  tcase_add_test(t, test_gpt2_step);
  tcase_add_test(t, test_counted_as_rendered);
  tcase_add_test(t, test_serial_sum_is_flagged);
  tcase_add_test(t, test_report_lines);
  tcase_add_test(t, test_gpu_for_device);
  suite_add_tcase(s, t);
  return tu_run(s);
}
