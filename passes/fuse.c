/* fuse.c: groups the ops of a training step into kernels.
 *
 * Each unfused op reads its inputs from memory and writes its result back;
 * on a GPU that traffic, not arithmetic, is what a transformer step costs
 * outside its matmuls.  This pass decides which ops run together in one
 * kernel, keeping intermediate values in registers.  It does not rewrite
 * any op: it sets node->kernel and fills g->kernels (ir.h), and code
 * generation (and tg_interp_run_kernels) follows that.
 *
 * The algorithm is one greedy walk in graph order.  Leaves and views
 * (reshape, transpose, slice, expand: folded into their readers' indexing)
 * are in no kernel.  Elementwise ops whose inputs are all leaves or such
 * ops again ("free": constants, the scalar bias corrections, an iota mask)
 * are recomputed inside the first kernel that reads them.  Every other op
 * tries two kernels: the latest kernel among those producing its inputs
 * (producer fusion), then the most recently made kernel (sibling fusion:
 * the optimizer's per-parameter updates).  Joining a kernel never reads a
 * later kernel, so kernels in creation order are a valid schedule.  A
 * kernel has an iteration domain, and an op joins when it fits:
 *
 *   elementwise  one shape; an op of a shape that broadcasts into it is
 *                recomputed per element, a bigger one widens it.
 *   row          [rows..., C]: reductions over the last axis and every op
 *                on [rows..., C] or [rows..., 1] (layernorm, softmax,
 *                cross-entropy and their backward); an elementwise kernel
 *                becomes a row kernel when such a reduction reads its domain.
 *                It also takes column sums over groups of its rows (a sum
 *                over axis 1 of [rows/G, G, C], a reshape of a value of its
 *                domain: split_sums.c's row groups, layernorm's dγ and dβ),
 *                which make it a row-group kernel (a GPU block walks G rows
 *                and keeps each column's running sum); nothing in it may
 *                read those sums.
 *   reduce       reductions over leading axes (bias and layernorm weight
 *                gradients) with their elementwise prologue; nothing may
 *                read the sums in the same kernel (they are complete only
 *                when every block is done).
 *   matmul       one matmul; in the forward, an epilogue of elementwise ops
 *                on its output whose other operands are smaller (a bias)
 *                or leaves: bias + GELU, the vocab mask.  A full-size
 *                operand from elsewhere (a residual) ends the epilogue, so
 *                the residual add goes with the layernorm that follows it.
 *   multi        the optimizer phase: every parameter's elementwise update
 *                in one multi-tensor kernel; the sum of squares of all
 *                gradients is another, since the clip factor needs the
 *                whole sum (a grid-wide barrier) before any update.  The
 *                second stages of split sums (a sum of a sum) gathered by
 *                split_sums.c are one too.
 *   special      scatter_add, and the flash attention ops together.
 *
 * Phases mix only where that saves memory traffic: a backward op joins a
 * forward kernel when it reads a value of it that nothing else needs in
 * memory (the logits gradient joins softmax + cross-entropy).  Where an op could not join, the pass records
 * why; the report (tgc --report fusion) prints the kernels, those stops
 * and the bytes moved fused and unfused. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "sbuf.h"

typedef struct kstate {
  tg_type dom;        /* the iteration domain (see above) */
  uint32_t axes;      /* reduce: the reduced axes */
  tg_phase phase;
  bool epilogue;      /* matmul: may take an epilogue */
  bool flash;         /* special: flash attention ops */
  bool collective;    /* special: a collective (all_reduce, all_gather, reduce_scatter) */
} kstate;

typedef struct stop {
  int node, kernel;
  const char *why;
} stop;

typedef struct fuser {
  tg_graph *g;
  kstate *ks;
  int cap_ks;
  bool *free_;   /* recomputed where read */
  bool *barrier; /* a value complete only at its kernel's end */
  bool *outside; /* read by another kernel already: it is written to memory */
  bool *operand; /* read by a matmul or a special op, which read memory */
  bool *sent;    /* read by a collective, which sends it from memory: never recomputed */
  stop *stops;
  int n_stops, cap_stops;
} fuser;

/* ---- shapes ------------------------------------------------------------- */

static bool last_axis_only(const tg_node *n) {
  const tg_type *t = &n->in[0]->type;
  return t->rank >= 1 && n->axes == 1u << (t->rank - 1);
}

static bool is_indexing(tg_op op) { /* elementwise over their result's shape */
  return op == TG_OP_gather || op == TG_OP_pad || op == TG_OP_concat;
}

static bool is_elementwise(const tg_node *n) {
  return tg_ops[n->op].kind == TG_KIND_ELEMENTWISE || is_indexing(n->op);
}

static bool is_loose(const tg_node *n) {
  return tg_ops[n->op].kind == TG_KIND_LEAF || tg_is_view(n);
}

/* ---- joining a kernel --------------------------------------------------- */

/* A column sum over groups of a row kernel's rows: a sum over axis 1 of a
 * reshape of a [R0, R1, C] value of the domain to [R0·R1/G, G, C]. */
static bool group_sum(const tg_node *n, const tg_type *dom) {
  if (n->op != TG_OP_sum || n->axes != 2u || n->in[0]->op != TG_OP_reshape) return false;
  const tg_type *g = &n->in[0]->type, *x = &n->in[0]->in[0]->type;
  if (!tg_type_same_shape(x, dom) || x->rank != 3 || g->rank != 3) return false; /* rows [R0, R1]: the outer points */
  return g->dim[2].size == x->dim[2].size && g->dim[0].size * g->dim[1].size == x->dim[0].size * x->dim[1].size;
}

/* Does n read a value of kernel k that is complete only when k ends? */
static bool reads_barrier(const fuser *f, const tg_node *n, int k) {
  for (int i = 0; i < n->nin; i++) {
    const tg_node *b = tg_kernel_base(n->in[i]);
    if (b->kernel == k && f->barrier[b->id]) return true;
  }
  return false;
}

/* The value an input stands for: a free widening (is_free) is computed by
 * whichever kernel reads it, from the bf16 value it widens. */
static const tg_node *source(const fuser *f, const tg_node *in) {
  const tg_node *b = tg_kernel_base(in);
  while (f->free_[b->id] && tg_is_widening(b)) b = tg_kernel_base(b->in[0]);
  return b;
}

static bool reads_kernel(const fuser *f, const tg_node *n, int k) {
  for (int i = 0; i < n->nin; i++)
    if (source(f, n->in[i])->kernel == k) return true;
  return false;
}

/* GELU's backward on a backward matmul's product: dY @ Wᵀ times
 * gelu_grad(x), the one epilogue a backward matmul takes, since a GPU
 * applies it inside the GEMM (cuBLASLt's DGELU, codegen/lower.c) and the
 * product then never reaches memory.  It may join after the weight
 * gradient's matmul began a kernel: it reads only this product and a
 * recomputed gelu_grad, so no later kernel can need it earlier.  The
 * product's operands must come from memory: an operand computed in the
 * matmul's kernel (a free value placed there) would make the kernel more
 * than a GEMM and its epilogue. */
static bool gelu_backward(const fuser *f, const tg_node *n, int k) {
  if (n->op != TG_OP_mul || n->nin != 2) return false;
  for (int i = 0; i < 2; i++) {
    const tg_node *p = source(f, n->in[i]), *d = tg_kernel_base(n->in[1 - i]);
    if (p->op != TG_OP_matmul || p->kernel != k || d->op != TG_OP_gelu_grad || !f->free_[d->id]) continue;
    bool from_memory = true;
    for (int j = 0; j < p->nin; j++) from_memory = from_memory && !f->free_[tg_kernel_base(p->in[j])->id];
    if (from_memory) return true;
  }
  return false;
}

/* A matmul epilogue takes an elementwise op on the product's shape that
 * reads the kernel, and otherwise only leaves, recomputed values, or
 * smaller values (a bias row). */
/* The last kernel that computes: collectives placed after it (ZeRO stage
 * 3's gathers of weights, issued ahead of their readers: shard_params.c)
 * run apart on their own, so a node that reads none of them may still
 * join it; the kernels then run in index order, the collectives after. */
static int last_computing(const fuser *f) {
  int k = f->g->n_kernels - 1;
  while (k >= 0 && f->ks[k].collective) k--;
  return k;
}

static const char *epilogue_why(const fuser *f, const tg_node *n, int k) {
  const kstate *K = &f->ks[k];
  bool dgelu = !K->epilogue && gelu_backward(f, n, k);
  if (!K->epilogue && !dgelu)
    return "a backward matmul takes no epilogue but GELU's backward (its output feeds row and column reductions)";
  if (k != last_computing(f) && !dgelu) return "the matmul's epilogue ended when a later kernel began";
  if (tg_ops[n->op].kind != TG_KIND_ELEMENTWISE) return "a matmul's epilogue takes only elementwise ops";
  if (!tg_type_same_shape(&n->type, &K->dom)) return "the op's shape is not the matmul's output shape";
  if (!reads_kernel(f, n, k)) return "the op does not read the matmul's result";
  int64_t full = tg_type_numel(&K->dom);
  for (int i = 0; i < n->nin; i++) {
    const tg_node *b = source(f, n->in[i]);
    if (b->kernel == k || f->free_[b->id] || tg_ops[b->op].kind == TG_KIND_LEAF) continue;
    if (tg_type_numel(&b->type) >= full)
      return "a full-size operand from another kernel (a residual) ends the matmul's epilogue";
  }
  return NULL;
}

static const char *elementwise_join(fuser *f, const tg_node *n, int k) {
  kstate *K = &f->ks[k];
  /* an assign of the kernel's whole domain writes each element into its
   * leaf where it is computed (a decode step's key/value cache, decode.c) */
  if (n->op == TG_OP_assign && n->phase == TG_PHASE_FORWARD)
    return tg_type_same_shape(&n->type, &K->dom) && reads_kernel(f, n, k) ? NULL
                                                                            : "an assign of another shape";
  if (is_elementwise(n)) {
    if (tg_type_fits(&n->type, &K->dom)) return NULL;
    if (tg_type_fits(&K->dom, &n->type)) {
      K->dom = n->type; /* widen: what was computed broadcasts into it */
      return NULL;
    }
    return "its shape does not fit the kernel's domain";
  }
  if (n->op == TG_OP_sum || n->op == TG_OP_max) {
    const tg_type *in = &n->in[0]->type;
    if (!tg_type_fits(&K->dom, in)) return "the reduction's input shape does not fit the kernel's domain";
    K->dom = *in;
    if (last_axis_only(n)) {
      f->g->kernels[k].kind = TG_KERNEL_ROW;
    } else {
      f->g->kernels[k].kind = TG_KERNEL_REDUCE;
      K->axes = n->axes;
    }
    return NULL;
  }
  return "a different kind of op";
}

static const char *row_join(const fuser *f, const tg_node *n, int k) {
  const kstate *K = &f->ks[k];
  if (reads_barrier(f, n, k)) return "it reads the kernel's column sums, complete only when the kernel ends";
  if (group_sum(n, &K->dom)) return NULL;
  if (is_elementwise(n))
    return tg_type_fits(&n->type, &K->dom) ? NULL : "its shape is not [rows..., C] or [rows..., 1] of the row kernel";
  if (n->op == TG_OP_sum || n->op == TG_OP_max) {
    if (!last_axis_only(n)) return "a reduction over other axes than the last (another iteration space)";
    return tg_type_fits(&n->in[0]->type, &K->dom) ? NULL : "a reduction over rows of another shape";
  }
  return "a different kind of op";
}

static const char *reduce_join(const fuser *f, const tg_node *n, int k) {
  const kstate *K = &f->ks[k];
  if (reads_barrier(f, n, k)) return "it reads the kernel's column sums, complete only when the kernel ends";
  if (is_elementwise(n))
    return tg_type_fits(&n->type, &K->dom) ? NULL : "its shape does not fit the reduction's input";
  if (n->op == TG_OP_sum || n->op == TG_OP_max) {
    if (n->axes != K->axes) return "a reduction over other axes";
    return tg_type_same_shape(&n->in[0]->type, &K->dom) ? NULL : "a reduction of another shape";
  }
  return "a different kind of op";
}

/* The optimizer's kernel takes every op, except one that needs a global
 * sum of this kernel to be finished; adding such sums up (the scalar
 * accumulation of the squared norms) is still part of reducing. */
static const char *multi_join(const fuser *f, const tg_node *n, int k) {
  if (!reads_barrier(f, n, k)) return NULL;
  if (n->op == TG_OP_add && n->type.rank == 0) return NULL;
  return "it needs a global sum of this kernel to be complete (a grid-wide barrier)";
}

/* A backward op may join a forward kernel when it reads a value of that
 * kernel that is not otherwise written to memory: this is how the
 * gradient of the logits joins softmax + cross-entropy, so that the
 * probabilities are never stored.  The optimizer mixes with nothing. */
static const char *phase_why(const fuser *f, const tg_node *n, int k) {
  const kstate *K = &f->ks[k];
  if (n->phase == K->phase) return NULL;
  if (n->phase != TG_PHASE_BACKWARD || K->phase != TG_PHASE_FORWARD) return "the phase changes";
  /* a column sum over the rows a forward row kernel that the backward
   * joined already walks costs no other walk */
  if (f->g->kernels[k].kind == TG_KERNEL_ROW && group_sum(n, &K->dom)) return NULL;
  for (int i = 0; i < n->nin; i++) {
    const tg_node *b = source(f, n->in[i]);
    if (b->kernel == k && !f->outside[b->id]) return NULL;
  }
  return "the phase changes (and what it reads of the forward kernel is in memory anyway)";
}

/* Why n cannot join kernel k, or NULL when it can. */
static const char *why_not(fuser *f, const tg_node *n, int k) {
  const char *why = phase_why(f, n, k);
  if (why) return why;
  if (tg_op_is_collective(n->op)) return "a collective is a kernel of its own (it talks to the other ranks)";
  if (n->op == TG_OP_matmul) return "a matmul is a kernel of its own (with an optional epilogue)";
  if (n->op == TG_OP_scatter_add) return "scatter_add is a kernel of its own (blocks own table rows: no atomics)";
  switch (f->g->kernels[k].kind) {
  case TG_KERNEL_MATMUL: return epilogue_why(f, n, k);
  case TG_KERNEL_SPECIAL:
    return f->ks[k].flash && tg_op_is_flash_attention(n->op) ? NULL : "a special op's kernel takes nothing else";
  case TG_KERNEL_MULTI: return multi_join(f, n, k);
  case TG_KERNEL_ELEMENTWISE:
    return tg_op_is_flash_attention(n->op) ? "a special op" : elementwise_join(f, n, k);
  case TG_KERNEL_ROW: return tg_op_is_flash_attention(n->op) ? "a special op" : row_join(f, n, k);
  case TG_KERNEL_REDUCE: return tg_op_is_flash_attention(n->op) ? "a special op" : reduce_join(f, n, k);
  default: return "unknown kernel kind";
  }
}

/* ---- making kernels ----------------------------------------------------- */

static int new_kernel(fuser *f, const tg_node *n) {
  tg_kernel_kind kind;
  kstate s = {.dom = n->type, .phase = n->phase};
  if (n->op == TG_OP_matmul) {
    kind = TG_KERNEL_MATMUL;
    s.epilogue = n->phase == TG_PHASE_FORWARD;
  } else if (tg_op_is_flash_attention(n->op) || n->op == TG_OP_scatter_add || tg_op_is_collective(n->op)) {
    kind = TG_KERNEL_SPECIAL;
    s.flash = tg_op_is_flash_attention(n->op);
    s.collective = tg_op_is_collective(n->op);
  } else if (n->phase == TG_PHASE_OPTIMIZER || (n->op == TG_OP_sum && n->in[0]->op == TG_OP_sum)) {
    /* the optimizer; or the second stages of split sums (split_sums.c),
     * small and independent, which that pass gathered: one launch */
    kind = TG_KERNEL_MULTI;
  } else if ((n->op == TG_OP_sum || n->op == TG_OP_max) && last_axis_only(n)) {
    kind = TG_KERNEL_ROW;
    s.dom = n->in[0]->type;
  } else if (n->op == TG_OP_sum || n->op == TG_OP_max) {
    kind = TG_KERNEL_REDUCE;
    s.dom = n->in[0]->type;
    s.axes = n->axes;
  } else {
    kind = TG_KERNEL_ELEMENTWISE;
  }
  const char *file = n->loc.file ? strrchr(n->loc.file, '/') : NULL;
  file = file ? file + 1 : n->loc.file ? n->loc.file : "?";
  char name[256];
  snprintf(name, sizeof name, "%s@%s:%d", tg_ops[n->op].name, file, n->loc.line);
  int k = tg_graph_add_kernel(f->g, name, kind);
  if (k >= f->cap_ks) {
    f->cap_ks = 2 * k + 16;
    f->ks = tg_xrealloc(f->ks, sizeof *f->ks * (size_t)f->cap_ks);
  }
  f->ks[k] = s;
  return k;
}

static void add_stop(fuser *f, int node, int kernel, const char *why) {
  if (f->n_stops == f->cap_stops) {
    f->cap_stops = 2 * f->cap_stops + 16;
    f->stops = tg_xrealloc(f->stops, sizeof *f->stops * (size_t)f->cap_stops);
  }
  f->stops[f->n_stops++] = (stop){node, kernel, why};
}

/* The latest kernel that computes one of n's inputs, or -1; a free input
 * (placed later, where it is read) counts as the kernels of its own. */
static int producer_kernel(const fuser *f, const tg_node *n) {
  int k = -1;
  for (int i = 0; i < n->nin; i++) {
    const tg_node *b = tg_kernel_base(n->in[i]);
    int bk = f->free_[b->id] ? producer_kernel(f, b) : b->kernel;
    if (bk > k) k = bk;
  }
  return k;
}

/* Free: computed where it is read.  Values made from leaves alone (iota,
 * masks), and the widening of a bf16 value (precision.c), which is a load
 * and a shift: the kernel that reads the f32 value widens it, so that
 * what is stored between kernels is the bf16 one (half the bytes).  What
 * reads a widening is not free for that: its input was computed.  And
 * gelu_grad of a stored value, for the same reason: the GELU's input is
 * kept in memory anyway, and its derivative is cheap to recompute. */
static bool is_free(const fuser *f, const tg_node *n) {
  if (tg_ops[n->op].kind != TG_KIND_ELEMENTWISE || f->sent[n->id]) return false;
  if (tg_is_widening(n) && tg_ops[tg_kernel_base(n->in[0])->op].kind != TG_KIND_LEAF) return !f->operand[n->id];
  /* gelu_grad(x) too, with x in memory (the forward's GELU keeps it): the
   * backward matmul that multiplies by it computes it (DGELU) */
  if (n->op == TG_OP_gelu_grad) return !f->operand[n->id];
  for (int i = 0; i < n->nin; i++) {
    const tg_node *b = tg_kernel_base(n->in[i]);
    if (tg_ops[b->op].kind != TG_KIND_LEAF && (!f->free_[b->id] || tg_is_widening(b))) return false;
  }
  return true;
}

/* For a column sum over row groups (split_sums.c placed it just after the
 * row reduction it goes with): the kernel of that reduction, or -1.  A
 * kernel made since (the loss's sum) may stand between them. */
static int row_kernel_before(const fuser *f, const tg_node *n) {
  if (n->op != TG_OP_sum || n->axes != 2u || n->in[0]->op != TG_OP_reshape) return -1;
  /* the four nodes before it, not counting a collective placed among them
   * (ZeRO stage 3's gathers, issued ahead: shard_params.c) or its views */
  for (int i = n->id - 1, seen = 0; i >= 0 && seen < 4; i--) {
    const tg_node *m = f->g->nodes[i];
    if (tg_op_is_collective(tg_kernel_base(m)->op)) continue;
    seen++;
    if (m->op == TG_OP_sum && last_axis_only(m) && m->kernel >= 0 &&
        tg_type_same_shape(&m->in[0]->type, &n->in[0]->in[0]->type))
      return m->kernel;
  }
  return -1;
}

static void place(fuser *f, tg_node *n) {
  int p = producer_kernel(f, n), last = last_computing(f), row = row_kernel_before(f, n);
  int cand[3] = {p, last > p ? last : -1, row >= p && row != last ? row : -1};
  const char *first_why = NULL;
  int first_k = -1;
  for (int c = 0; c < 3; c++) {
    if (cand[c] < 0) continue;
    const char *why = why_not(f, n, cand[c]);
    if (!why) {
      n->kernel = cand[c];
      return;
    }
    if (!first_why) first_why = why, first_k = cand[c];
  }
  n->kernel = new_kernel(f, n);
  if (first_why) add_stop(f, n->id, first_k, first_why);
}

/* Free nodes go to the earliest kernel that reads them (through views);
 * reverse order sees every reader first.  One that no kernel reads gets a
 * kernel of its own. */
static void place_free(fuser *f) {
  tg_graph *g = f->g;
  int *first = tg_xrealloc(NULL, sizeof(int) * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < g->n_nodes; i++) first[i] = -1;
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    tg_node *n = g->nodes[i];
    if (f->free_[i]) n->kernel = first[i] >= 0 ? first[i] : new_kernel(f, n);
    if (n->kernel < 0) continue;
    for (int j = 0; j < n->nin; j++) {
      const tg_node *b = tg_kernel_base(n->in[j]);
      if (f->free_[b->id] && (first[b->id] < 0 || n->kernel < first[b->id])) first[b->id] = n->kernel;
    }
  }
  free(first);
}

/* After each kernel is placed: does n hold a value complete only at the
 * kernel's end (a sum across blocks), or read one? */
static void mark_barrier(fuser *f, const tg_node *n) {
  tg_kernel_kind kind = f->g->kernels[n->kernel].kind;
  bool across = (n->op == TG_OP_sum || n->op == TG_OP_max) &&
                (kind == TG_KERNEL_REDUCE || kind == TG_KERNEL_MULTI ||
                 (kind == TG_KERNEL_ROW && group_sum(n, &f->ks[n->kernel].dom)));
  f->barrier[n->id] = across || reads_barrier(f, n, n->kernel);
}

/* ---- the findings (findings.h) ------------------------------------------ */

static bool same_line(const tg_node *a, const tg_node *b) {
  if (a->loc.line != b->loc.line) return false;
  return a->loc.file == b->loc.file || (a->loc.file && b->loc.file && !strcmp(a->loc.file, b->loc.file));
}

static const char *short_file(const char *file) {
  const char *s = file ? strrchr(file, '/') : NULL;
  return s ? s + 1 : file ? file : "?";
}

/* The ops of a kernel grouped by source line, in first-seen order:
 * "std.tg:15 sum div sub; std.tg:16 mul sum div".  An op repeated on a
 * line is counted (mul x3) so a multi-tensor kernel stays one row.  What a
 * kernel holds, as one field of its finding. */
static char *ops_by_line(const tg_graph *g, const tg_kernel *K) {
  bool *seen = tg_xcalloc((size_t)K->n_nodes + 1, sizeof *seen);
  tg_sbuf out = {0};
  const char *sep = "";
  for (int a = 0; a < K->n_nodes; a++) {
    if (seen[a]) continue;
    const tg_node *n = g->nodes[K->nodes[a]];
    tg_sb_printf(&out, "%s%s:%d", sep, short_file(n->loc.file), n->loc.line);
    sep = "; ";
    /* each op of this line once, with its count, in first-seen order */
    for (int b = a; b < K->n_nodes; b++) {
      const tg_node *m = g->nodes[K->nodes[b]];
      if (seen[b] || !same_line(m, n)) continue;
      int count = 0;
      for (int c = b; c < K->n_nodes; c++) {
        const tg_node *o = g->nodes[K->nodes[c]];
        if (!seen[c] && o->op == m->op && same_line(o, n)) {
          count++;
          seen[c] = true;
        }
      }
      if (count > 1) tg_sb_printf(&out, " %s x%d", tg_ops[m->op].name, count);
      else tg_sb_printf(&out, " %s", tg_ops[m->op].name);
    }
  }
  free(seen);
  return tg_sb_take(&out);
}

/* Each kernel, each stop (why an op is not in the kernel it could have
 * joined), and the totals with the plan memplan will make of them. */
static void record(tg_findings *out, const fuser *f) {
  const tg_graph *g = f->g;
  int64_t fused = 0, unfused = 0;
  int matmuls = 0, ops = 0;
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    const tg_node *first = K->n_nodes ? g->nodes[K->nodes[0]] : NULL;
    tg_finding *x = tg_find(out, "fuse", "kernel", first ? first->id : -1, first ? first->loc : (tg_loc){0}, NULL);
    tg_finding_num(out, x, "kernel", k);
    tg_finding_text(out, x, "kind", tg_kernel_kind_name(K->kind));
    tg_finding_text(out, x, "name", K->name);
    tg_finding_num(out, x, "ops", K->n_nodes);
    tg_finding_num(out, x, "bytes_read", (double)K->bytes_read);
    tg_finding_num(out, x, "bytes_written", (double)K->bytes_written);
    tg_finding_num(out, x, "bytes_unfused", (double)K->bytes_unfused);
    char *by_line = ops_by_line(g, K);
    tg_finding_text(out, x, "ops_by_line", by_line);
    free(by_line);
    fused += K->bytes_read + K->bytes_written;
    unfused += K->bytes_unfused;
    matmuls += K->kind == TG_KERNEL_MATMUL;
    ops += K->n_nodes;
  }
  for (int s = 0; s < f->n_stops; s++) {
    const tg_node *n = g->nodes[f->stops[s].node];
    tg_finding *x = tg_find(out, "fuse", "stop", n->id, n->loc, f->stops[s].why);
    tg_finding_text(out, x, "op", tg_ops[n->op].name);
    tg_finding_num(out, x, "kernel", f->stops[s].kernel);
  }
  tg_finding *x = tg_find(out, "fuse", "summary", -1, (tg_loc){0}, NULL);
  tg_finding_num(out, x, "kernels", g->n_kernels);
  tg_finding_num(out, x, "matmuls", matmuls);
  tg_finding_num(out, x, "ops", ops);
  tg_finding_num(out, x, "stops", f->n_stops);
  tg_finding_num(out, x, "bytes_fused", (double)fused);
  tg_finding_num(out, x, "bytes_unfused", (double)unfused);
  /* the plan memplan will make, from the kernels just made; left on the
   * graph, where memplan takes its places rather than place again */
  f->g->memplan = tg_memplan_compute(f->g);
  tg_memplan_record_totals(out, x, f->g->memplan);
}

/* ---- the pass ------------------------------------------------------------ */

void tg_fuse(tg_ctx *ctx, tg_graph *g, tg_findings *findings) {
  if (g->n_kernels) tg_error(ctx, (tg_loc){g->source, 1, 1}, "the graph is already fused");
  fuser f = {.g = g};
  f.free_ = tg_xrealloc(NULL, (size_t)g->n_nodes + 1);
  f.barrier = tg_xrealloc(NULL, (size_t)g->n_nodes + 1);
  f.outside = tg_xrealloc(NULL, (size_t)g->n_nodes + 1);
  memset(f.outside, 0, (size_t)g->n_nodes + 1);
  memset(f.free_, 0, (size_t)g->n_nodes + 1);
  memset(f.barrier, 0, (size_t)g->n_nodes + 1);
  f.operand = tg_xcalloc((size_t)g->n_nodes + 1, 1);
  f.sent = tg_xcalloc((size_t)g->n_nodes + 1, 1);
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op == TG_OP_matmul || n->op == TG_OP_scatter_add || tg_op_is_flash_attention(n->op) ||
        tg_op_is_collective(n->op))
      for (int j = 0; j < n->nin; j++) f.operand[tg_kernel_base(n->in[j])->id] = true;
    if (tg_op_is_collective(n->op)) f.sent[tg_kernel_base(n->in[0])->id] = true;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *n = g->nodes[i];
    n->kernel = -1;
    if (is_loose(n)) continue;
    if (is_free(&f, n)) {
      f.free_[i] = true;
      continue;
    }
    place(&f, n);
    mark_barrier(&f, n);
    for (int j = 0; j < n->nin; j++) {
      const tg_node *b = tg_kernel_base(n->in[j]);
      if (b->kernel != n->kernel) f.outside[b->id] = true;
    }
  }
  place_free(&f);
  tg_kernels_derive(g);
  if (findings) record(findings, &f);
  free(f.ks);
  free(f.free_);
  free(f.barrier);
  free(f.outside);
  free(f.operand);
  free(f.sent);
  free(f.stops);
}
