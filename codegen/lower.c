/* lower.c: from fused kernels to the loop-nest form of lower.h.
 *
 * A kernel's nodes are sorted into steps by what the fuse pass made of
 * them (ir.h: tg_kernel_kind):
 *
 *   elementwise, row, reduce  one nest over the kernel's domain (its
 *                             largest shape);
 *   multi                     the optimizer: a nest per reduction (each
 *                             tensor's sum of squares) and a nest per shape
 *                             of stored values (each parameter's m, v and
 *                             new value), so every tensor is its own loop;
 *   matmul                    a gemm, then its epilogue as a nest;
 *   special                   a flash attention step, or a scatter;
 *   collective                an all_reduce, all_gather or reduce_scatter:
 *                             a step with no code, which the backend runs
 *                             at the step's collective point.
 *
 * Values cross steps only through memory: each kernel output has an
 * arena place (planned here, as the memplan pass plans, once recomputation
 * is chosen), a leaf is the runtime's, and a value only
 * its own kernel reads in another step (the product before its epilogue,
 * a tensor's sum before the sums are added) gets scratch memory.
 * Everything else is recomputed where it is read, as the fuse pass
 * intended.  An assign writes its value straight into its leaf; that is
 * safe only when nothing after it reads the leaf's old value, which is
 * checked here. */
#include "lower.h"

#include "passes.h" /* tg_memplan_place */

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *tg_storage_ctype(tg_dtype t) {
  switch (t) {
  case TG_F32: return "float";
  case TG_BF16: case TG_F16: return "unsigned short";
  case TG_I32: return "int";
  case TG_BOOL: return "unsigned char";
  default: return "?";
  }
}

const char *tg_compute_ctype(tg_dtype t) {
  switch (t) {
  case TG_F32: case TG_BF16: case TG_F16: return "float";
  case TG_I32: return "int";
  case TG_BOOL: return "int";
  default: return "?";
  }
}

bool tg_varies(const tg_type *t, const tg_type *dom, int axis) {
  int j = axis - (dom->rank - t->rank);
  return j >= 0 && j < t->rank && t->dim[j].size > 1;
}

static bool is_reduction(const tg_node *n) { return n->op == TG_OP_sum || n->op == TG_OP_max; }

static bool is_leaf_op(const tg_node *n) { return n->op == TG_OP_input || n->op == TG_OP_param || n->op == TG_OP_state; }

/* A leaf the step has memory for: one something reads (an assign reads
 * the leaf it writes) or an output shows.  A leaf nothing reads (a master
 * weight the forward reads only as its bf16 copy; a whole weight read
 * from its ZeRO shard) takes no memory and no argument. */
static bool is_stored_leaf(const tg_program *p, int i) { return p->leaf_index[i] >= 0; }

/* ---- layouts ------------------------------------------------------------- */

/* The strides of a reshape of a strided tensor without copying, when they
 * exist: dims are grouped into chunks contiguous in memory, and each chunk
 * of the new shape must cover whole chunks of the old one (the rule
 * PyTorch's view() follows). */
static bool reshape_strides(const tg_type *from, const int64_t *fs, const tg_type *to, int64_t *ts) {
  if (from->rank == 0) {
    for (int i = 0; i < to->rank; i++) ts[i] = 0;
    return true;
  }
  int vd = to->rank - 1;
  int64_t chunk = fs[from->rank - 1], tn = 1, vn = 1;
  for (int td = from->rank - 1; td >= 0; td--) {
    tn *= from->dim[td].size;
    if (td == 0 || (from->dim[td - 1].size != 1 && fs[td - 1] != tn * chunk)) {
      while (vd >= 0 && (vn < tn || to->dim[vd].size == 1)) {
        ts[vd] = vn * chunk;
        vn *= to->dim[vd].size;
        vd--;
      }
      if (vn != tn) return false;
      if (td > 0) {
        chunk = fs[td - 1];
        tn = vn = 1;
      }
    }
  }
  return vd == -1;
}

/* The strides of a value as it lies in memory: row-major, or in the axis
 * order p->order gives it. */
static void memory_strides(const tg_program *p, const tg_node *n, int64_t *stride) {
  const int *ord = p->order ? p->order[n->id] : NULL;
  int64_t s = 1;
  for (int k = n->type.rank - 1; k >= 0; k--) {
    int a = ord ? ord[k] : k;
    stride[a] = n->type.dim[a].size == 1 ? 0 : s;
    s *= n->type.dim[a].size;
  }
}

bool tg_layout_of(const tg_program *p, const tg_node *n, tg_layout *out) {
  if (tg_is_view(n)) {
    tg_layout in;
    if (!tg_layout_of(p, n->in[0], &in)) return false;
    const tg_type *it = &n->in[0]->type, *ot = &n->type;
    out->base = in.base;
    out->offset = in.offset;
    switch (n->op) {
    case TG_OP_transpose:
      for (int i = 0; i < ot->rank; i++) out->stride[i] = in.stride[n->perm[i]];
      return true;
    case TG_OP_slice:
      for (int i = 0; i < ot->rank; i++) out->stride[i] = in.stride[i];
      out->offset += n->start * in.stride[n->axis];
      return true;
    case TG_OP_expand:
      for (int i = 0; i < ot->rank; i++) {
        int j = i - (ot->rank - it->rank);
        out->stride[i] = j < 0 || it->dim[j].size == 1 ? 0 : in.stride[j];
      }
      return true;
    case TG_OP_reshape: return reshape_strides(it, in.stride, ot, out->stride);
    default: return false;
    }
  }
  /* an assign's value is kept in its leaf (a decode step's cache, read
   * after its in-place update) */
  if (n->op == TG_OP_assign) {
    if (!tg_layout_of(p, n->in[0], out)) return false;
    out->base = n->id; /* the kernels name the leaf's memory by the assign */
    return true;
  }
  if (p->store[n->id].place == TG_PLACE_NONE) return false;
  out->base = n->id;
  out->offset = 0;
  memory_strides(p, n, out->stride);
  return true;
}

/* ---- building nests ------------------------------------------------------ */

typedef struct ivec {
  int *v;
  int n, cap;
} ivec;

static void push(ivec *a, int x) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 8;
    int *v = tg_xcalloc((size_t)a->cap, sizeof *v);
    if (a->n) memcpy(v, a->v, sizeof *v * (size_t)a->n);
    free(a->v);
    a->v = v;
  }
  a->v[a->n++] = x;
}

typedef struct lowerer {
  tg_ctx *ctx;
  const tg_graph *g;
  tg_program *p;
  bool *stored;   /* per node: written to memory by its step */
  int *sweep_of;  /* per node: the sweep it needs finished before it (0: none) */
  tg_arena *arena;
  /* the steps of the kernel being lowered, and the nodes each owns */
  tg_step *steps;
  ivec *members;
  int n_steps, cap_steps;
  int kernel;     /* the kernel being lowered */
  tg_mem_plan *plan; /* the arena's plan, made once recomputation is chosen */
  tg_remat remat;    /* what is recomputed instead of stored (lower.h) */
  int *bias_add;  /* per kernel: the bias add its GEMM computes (fold_bias), or -1 */
  int *gelu_out;  /* per kernel: the GELU of that add the GEMM computes, or -1 */
  int *dgelu_out; /* per kernel: product * gelu_grad(x) its GEMM computes (fold_dgelu), or -1 */
  int *bgrad_out; /* per kernel: the bias gradient its GEMM writes (fold_bgrad), or -1 */
  bool *bgrad_of_a; /* per kernel: ... summed from the GEMM's operand a (else b) */
  int *writer;    /* per node: the kernel writing it when not its own (fold_bgrad), else -1 */
  int *folded_into; /* per kernel: the kernel whose GEMM does its work (fold_bgrad), else -1 */
  int *grad_into; /* per node: a flash backward output's place, the [B, T, 3C] sum it is
                   * padded into (fold_flash_grads), else -1 */
  int64_t *grad_col; /* ... and its first column there */
  bool *seen;     /* per node, false between uses (lower_kernel's waves) */
  bool *in_place; /* per node: a scatter_add that updates its initial table's
                   * buffer (find_in_place_scatters) */
  struct ivec marked; /* the nodes cross_reads marked in seen, to clear */
} lowerer;

static int *arena_ints(tg_arena *a, const ivec *v) {
  int *r = tg_alloc(a, sizeof(int) * (size_t)(v->n ? v->n : 1));
  if (v->n) memcpy(r, v->v, sizeof(int) * (size_t)v->n);
  return r;
}

static void nest_axes(tg_nest *nest, const tg_type *dom, uint32_t inner) {
  nest->dom = *dom;
  nest->inner = inner;
  nest->n_outer = nest->n_inner = 0;
  nest->outer_count = nest->inner_count = 1;
  for (int a = 0; a < dom->rank; a++) {
    if (inner >> a & 1) {
      nest->inner_axes[nest->n_inner++] = a;
      nest->inner_count *= dom->dim[a].size;
    } else {
      nest->outer_axes[nest->n_outer++] = a;
      nest->outer_count *= dom->dim[a].size;
    }
  }
}

/* Does n vary along an inner axis of the nest (so it is computed inside the
 * sweeps)? */
static bool varies_inner(const tg_nest *nest, const tg_type *t) {
  for (int i = 0; i < nest->n_inner; i++)
    if (tg_varies(t, &nest->dom, nest->inner_axes[i])) return true;
  return false;
}

/* The sweep after which n's value is known: one past the latest sweep that
 * finishes a reduction n depends on within `step` (memoised in sweep_of,
 * which holds that number + 1 once known). */
static int sweep_level(lowerer *L, const tg_node *n, int step) {
  const tg_node *b = tg_kernel_base(n);
  /* step numbers restart in each kernel: only this kernel's nodes count */
  if (b->kernel != L->kernel || L->p->step_of[b->id] != step || tg_ops[b->op].kind == TG_KIND_LEAF) return 0;
  if (L->sweep_of[b->id]) return L->sweep_of[b->id] - 1;
  int level = 0;
  for (int i = 0; i < b->nin; i++) {
    int l = sweep_level(L, b->in[i], step);
    if (l > level) level = l;
  }
  if (is_reduction(b)) level++; /* finished by the sweep numbered `level` (1-based) */
  L->sweep_of[b->id] = level + 1;
  return level;
}

/* A column sum over groups of a row kernel's rows (the fuse pass's
 * row-group kernels, lower.h): not a reduction of the sweeps. */
static bool is_group_sum(const lowerer *L, const tg_node *n) {
  return n->op == TG_OP_sum && n->axes == 2u && n->in[0]->op == TG_OP_reshape &&
         L->g->kernels[n->kernel].kind == TG_KERNEL_ROW;
}

/* Fills a nest's sweeps and post-stores from the reductions and stored
 * values of `step` (the nodes given, in graph order). */
static void fill_nest(lowerer *L, tg_nest *nest, const ivec *nodes, int step) {
  int n_sweeps = 0;
  ivec col = {0}, col_sweep = {0};
  for (int i = 0; i < nodes->n; i++) {
    const tg_node *n = L->g->nodes[nodes->v[i]];
    if (is_group_sum(L, n)) {
      /* accumulated in the first sweep that has its input */
      int l = sweep_level(L, n->in[0], step) + 1;
      push(&col, n->id);
      push(&col_sweep, l);
      if (l > n_sweeps) n_sweeps = l;
      nest->group = n->in[0]->type.dim[1].size;
      continue;
    }
    int l = sweep_level(L, n, step);
    if (is_reduction(n) && l > n_sweeps) n_sweeps = l;
    if (!is_reduction(n) && L->stored[n->id] && varies_inner(nest, &n->type) && l + 1 > n_sweeps) n_sweeps = l + 1;
  }
  ivec *red = tg_xcalloc((size_t)n_sweeps + 1, sizeof *red), *st = tg_xcalloc((size_t)n_sweeps + 1, sizeof *st);
  ivec post = {0};
  for (int i = 0; i < nodes->n; i++) {
    const tg_node *n = L->g->nodes[nodes->v[i]];
    if (is_group_sum(L, n)) continue;
    int l = sweep_level(L, n, step);
    if (is_reduction(n)) push(&red[l - 1], n->id);
    if (is_reduction(n) ? L->stored[n->id] : L->stored[n->id] && !varies_inner(nest, &n->type)) push(&post, n->id);
    else if (!is_reduction(n) && L->stored[n->id]) push(&st[l], n->id);
  }
  nest->n_sweeps = n_sweeps;
  nest->sweeps = tg_alloc(L->arena, sizeof(tg_sweep) * (size_t)(n_sweeps ? n_sweeps : 1));
  for (int s = 0; s < n_sweeps; s++) {
    nest->sweeps[s] = (tg_sweep){arena_ints(L->arena, &red[s]), red[s].n, arena_ints(L->arena, &st[s]), st[s].n};
    free(red[s].v);
    free(st[s].v);
  }
  free(red[n_sweeps].v);
  free(st[n_sweeps].v);
  free(red);
  free(st);
  nest->post = arena_ints(L->arena, &post);
  nest->n_post = post.n;
  free(post.v);
  nest->colsum = arena_ints(L->arena, &col);
  nest->colsum_sweep = arena_ints(L->arena, &col_sweep);
  nest->n_colsum = col.n;
  free(col.v);
  free(col_sweep.v);
}

/* The iteration domain of a single-nest kernel: its largest shape among
 * values and reduction inputs (the fuse pass made every other fit it). */
static tg_type kernel_domain(const lowerer *L, const ivec *nodes) {
  tg_type dom = L->g->nodes[nodes->v[0]]->type;
  for (int i = 0; i < nodes->n; i++) {
    const tg_node *n = L->g->nodes[nodes->v[i]];
    if (is_group_sum(L, n)) continue; /* a reshape of the domain */
    const tg_type *t = is_reduction(n) ? &n->in[0]->type : &n->type;
    /* on a tie the higher rank: [1, T, C] holds [T, C] broadcast, not the other way */
    if (tg_type_numel(t) > tg_type_numel(&dom) || (tg_type_numel(t) == tg_type_numel(&dom) && t->rank > dom.rank))
      dom = *t;
  }
  return dom;
}

static void check_fit(lowerer *L, const tg_nest *nest, const ivec *nodes) {
  for (int i = 0; i < nodes->n; i++) {
    const tg_node *n = L->g->nodes[nodes->v[i]];
    const tg_type *t = is_group_sum(L, n) ? &n->in[0]->in[0]->type : is_reduction(n) ? &n->in[0]->type : &n->type;
    if (!tg_type_fits(t, &nest->dom) && (L->stored[n->id] || is_reduction(n)))
      tg_error(L->ctx, n->loc, "cannot lower %%%d %s: its shape does not fit its kernel's domain", n->id,
               tg_ops[n->op].name);
  }
}

static int new_step(lowerer *L, tg_step_kind kind) {
  if (L->n_steps == L->cap_steps) {
    int cap = L->cap_steps ? 2 * L->cap_steps : 8;
    tg_step *s = tg_xcalloc((size_t)cap, sizeof *s);
    ivec *m = tg_xcalloc((size_t)cap, sizeof *m);
    if (L->n_steps) {
      memcpy(s, L->steps, sizeof *s * (size_t)L->n_steps);
      memcpy(m, L->members, sizeof *m * (size_t)L->n_steps);
    }
    free(L->steps);
    free(L->members);
    L->steps = s;
    L->members = m;
    L->cap_steps = cap;
  }
  int i = L->n_steps++;
  memset(&L->steps[i], 0, sizeof L->steps[i]);
  memset(&L->members[i], 0, sizeof L->members[i]);
  L->steps[i].kind = kind;
  L->steps[i].node = -1;
  for (int a = 0; a < 9; a++) L->steps[i].flash_args[a] = -1;
  return i;
}

static void own(lowerer *L, int step, int node) {
  push(&L->members[step], node);
  L->p->step_of[node] = step;
}

/* One nest over the given nodes: elementwise, row and reduce kernels, and
 * matmul epilogues.  Its inner axes: a row kernel's last axis, a reduce
 * kernel's reduced axes, else the last axis (the vectorised loop). */
static void single_nest(lowerer *L, int step, tg_kernel_kind kind) {
  const ivec *nodes = &L->members[step];
  tg_type dom = kernel_domain(L, nodes);
  uint32_t inner = 0;
  if (kind == TG_KERNEL_ROW && dom.rank) inner = 1u << (dom.rank - 1);
  for (int i = 0; i < nodes->n && kind == TG_KERNEL_REDUCE; i++) {
    const tg_node *n = L->g->nodes[nodes->v[i]];
    if (is_reduction(n)) inner = n->axes;
  }
  if (!inner && dom.rank) inner = 1u << (dom.rank - 1);
  nest_axes(&L->steps[step].nest, &dom, inner);
}

/* The optimizer kernel: every reduction is a nest of its own (a tensor's
 * sum of squares); stored values group by shape, consecutive in graph
 * order (one parameter's m, v and new value); everything else is
 * recomputed inside the nests that read it. */
static void multi_steps(lowerer *L, const tg_kernel *K) {
  int cur = -1;
  for (int i = 0; i < K->n_nodes; i++) {
    const tg_node *n = L->g->nodes[K->nodes[i]];
    if (L->writer[n->id] >= 0) continue; /* another kernel's GEMM wrote it (fold_bgrad) */
    if (is_reduction(n)) {
      int s = new_step(L, TG_STEP_NEST);
      own(L, s, n->id);
      nest_axes(&L->steps[s].nest, &n->in[0]->type, n->axes);
      cur = -1;
    } else if (L->stored[n->id]) {
      if (cur < 0 || !tg_type_same_shape(&L->steps[cur].nest.dom, &n->type)) {
        cur = new_step(L, TG_STEP_NEST);
        uint32_t inner = n->type.rank ? 1u << (n->type.rank - 1) : 0;
        nest_axes(&L->steps[cur].nest, &n->type, inner);
      }
      own(L, cur, n->id);
    }
  }
}

/* A flash operand: a view of a value in memory, or (self) an output of the
 * step, which is its own contiguous base. */
static void flash_operand(lowerer *L, const tg_node *n, tg_flash_operand *op, int *arg, bool self) {
  tg_layout lay;
  if (self) {
    L->stored[n->id] = true;
    lay.base = n->id;
    lay.offset = 0;
    memory_strides(L->p, n, lay.stride);
  } else if (!tg_layout_of(L->p, n, &lay))
    tg_error(L->ctx, n->loc, "cannot lower flash attention: operand %%%d is not a strided view", n->id);
  const tg_type *t = &n->type;
  if (t->rank < 2 || t->rank > 4)
    tg_error(L->ctx, n->loc, "cannot lower flash attention: operands of rank %d (2 to 4 supported)", t->rank);
  memset(op, 0, sizeof *op);
  op->offset = lay.offset;
  for (int i = 0; i < t->rank; i++) op->stride[4 - t->rank + i] = lay.stride[i];
  op->bf16 = t->dtype == TG_BF16;
  if (t->dtype != TG_F32 && t->dtype != TG_BF16)
    tg_error(L->ctx, n->loc, "cannot lower flash attention on %s values", tg_dtype_name(t->dtype));
  *arg = lay.base;
}

/* A flash backward output: its own buffer, or (fold_flash_grads) its
 * columns of the [B, T, 3C] gradient it is padded into: o[b, h, t, d] at
 * [b, t, col + h·D + d]. */
static void flash_grad_operand(lowerer *L, const tg_node *o, tg_flash_operand *op, int *arg) {
  int G = L->grad_into[o->id];
  if (G < 0) {
    flash_operand(L, o, op, arg, true);
    return;
  }
  const tg_type *t = &o->type, *gt = &L->g->nodes[G]->type;
  int64_t row = gt->dim[2].size, T = t->dim[2].size, D = t->dim[3].size;
  memset(op, 0, sizeof *op);
  op->offset = L->grad_col[o->id];
  op->stride[0] = T * row, op->stride[1] = D, op->stride[2] = row, op->stride[3] = 1;
  op->bf16 = t->dtype == TG_BF16;
  *arg = G;
}

static void flash_step(lowerer *L, const tg_kernel *K) {
  const tg_node *fwd = NULL, *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
  for (int i = 0; i < K->n_nodes; i++) {
    const tg_node *n = L->g->nodes[K->nodes[i]];
    if (n->op == TG_OP_flash_attention) fwd = n;
    if (n->op == TG_OP_flash_attention_lse) lse = n;
    if (n->op == TG_OP_flash_attention_dq) dq = n;
    if (n->op == TG_OP_flash_attention_dk) dk = n;
    if (n->op == TG_OP_flash_attention_dv) dv = n;
  }
  bool bwd = dq || dk || dv;
  const tg_node *any = bwd ? (dq ? dq : dk ? dk : dv) : fwd ? fwd : lse;
  if (!bwd && !(fwd && lse))
    tg_error(L->ctx, any->loc, "cannot lower a flash attention kernel without both its forward ops");
  if (bwd && !(dq && dk && dv))
    tg_error(L->ctx, any->loc, "cannot lower a flash attention backward without all of dq, dk and dv");
  int s = new_step(L, bwd ? TG_STEP_FLASH_BWD : TG_STEP_FLASH_FWD);
  for (int i = 0; i < K->n_nodes; i++) own(L, s, K->nodes[i]);
  tg_step *st = &L->steps[s];
  st->node = any->id;
  tg_flash_shape *f = &st->flash;
  const tg_type *qt = &any->in[0]->type;
  f->nb = qt->rank >= 4 ? qt->dim[qt->rank - 4].size : 1;
  f->nh = qt->rank >= 3 ? qt->dim[qt->rank - 3].size : 1;
  f->T = qt->dim[qt->rank - 2].size;
  f->D = qt->dim[qt->rank - 1].size;
  f->scale = any->value;
  flash_operand(L, any->in[0], &f->q, &st->flash_args[0], false);
  flash_operand(L, any->in[1], &f->k, &st->flash_args[1], false);
  flash_operand(L, any->in[2], &f->v, &st->flash_args[2], false);
  if (bwd) {
    flash_operand(L, any->in[3], &f->o, &st->flash_args[3], false);
    flash_operand(L, any->in[4], &f->lse, &st->flash_args[4], false);
    flash_operand(L, any->in[5], &f->dout, &st->flash_args[5], false);
    flash_grad_operand(L, dq, &f->dq, &st->flash_args[6]);
    flash_grad_operand(L, dk, &f->dk, &st->flash_args[7]);
    flash_grad_operand(L, dv, &f->dv, &st->flash_args[8]);
  } else {
    flash_operand(L, fwd, &f->o, &st->flash_args[3], true);
    flash_operand(L, lse, &f->lse, &st->flash_args[4], true);
  }
}

/* A matmul operand's 2-D view for BLAS: row-major with a leading dim, or
 * transposed; false when neither (a copy would be needed). */
static bool blas_2d(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *trans, int64_t *ld) {
  if (cs == 1 || cols == 1) {
    int64_t l = rows == 1 ? cols : rs;
    if (l >= cols && l >= 1) {
      *trans = false;
      *ld = l;
      return true;
    }
  }
  if (rs == 1 || rows == 1) {
    int64_t l = cols == 1 ? rows : cs;
    if (l >= rows && l >= 1) {
      *trans = true;
      *ld = l;
      return true;
    }
  }
  return false;
}

static void contiguous(const tg_node *n, tg_layout *lay) {
  lay->base = n->id;
  lay->offset = 0;
  int64_t s = 1;
  for (int i = n->type.rank - 1; i >= 0; i--) {
    lay->stride[i] = n->type.dim[i].size == 1 ? 0 : s;
    s *= n->type.dim[i].size;
  }
}

/* Whether BLAS can read matmul operand x where it is: a strided view whose
 * last two dims are a row-major or transposed matrix. */
static bool blas_ready(const tg_program *p, const tg_node *x) {
  tg_layout lay;
  if (!tg_layout_of(p, x, &lay)) return false;
  int r = x->type.rank;
  bool t;
  int64_t ld;
  return blas_2d(x->type.dim[r - 2].size, x->type.dim[r - 1].size, lay.stride[r - 2], lay.stride[r - 1], &t, &ld);
}

/* A step that copies view x into scratch, contiguous, for a matmul that
 * cannot read it in place (attention's output, transposed back and
 * reshaped, is such a view).  Its nest stores x itself. */
static int pack_step(lowerer *L, const tg_node *x) {
  if (L->p->step_of[x->id] >= 0)
    tg_error(L->ctx, x->loc, "cannot lower: the view %%%d would be copied for two matmuls", x->id);
  int s = new_step(L, TG_STEP_NEST);
  own(L, s, x->id);
  L->stored[x->id] = true;
  L->steps[s].node = x->id;
  nest_axes(&L->steps[s].nest, &x->type, x->type.rank ? 1u << (x->type.rank - 1) : 0);
  return s;
}

static void gemm_step(lowerer *L, const tg_node *mm) {
  const tg_node *a = mm->in[0], *b = mm->in[1];
  int pa = blas_ready(L->p, a) ? -1 : pack_step(L, a);
  int pb = blas_ready(L->p, b) ? -1 : pack_step(L, b);
  int s = new_step(L, TG_STEP_GEMM);
  own(L, s, mm->id);
  L->stored[mm->id] = true;
  tg_gemm *G = &L->steps[s].gemm;
  G->node = mm->id;
  G->out = mm->id;
  G->bias = G->aux = G->bgrad = -1;
  G->gelu = G->dgelu = G->bgrad_of_a = false;
  G->after = pa > pb ? pa : pb;
  const tg_type *at = &a->type, *bt = &b->type, *ct = &mm->type;
  /* f32, or bf16 operands and result with f32 accumulation (the precision
   * pass's matmuls): what cuBLASLt takes, and the C renderer converts */
  if (at->dtype != bt->dtype || at->dtype != ct->dtype || (at->dtype != TG_F32 && at->dtype != TG_BF16))
    tg_error(L->ctx, mm->loc, "cannot lower a matmul of %s @ %s giving %s (f32 or bf16 only)", tg_dtype_name(at->dtype),
             tg_dtype_name(bt->dtype), tg_dtype_name(ct->dtype));
  if (pa >= 0) contiguous(a, &G->a);
  else tg_layout_of(L->p, a, &G->a);
  if (pb >= 0) contiguous(b, &G->b);
  else tg_layout_of(L->p, b, &G->b);
  int ar = at->rank, br = bt->rank, cr = ct->rank;
  G->m = ct->dim[cr - 2].size;
  G->n = ct->dim[cr - 1].size;
  G->k = at->dim[ar - 1].size;
  int64_t sam = G->a.stride[ar - 2], sak = G->a.stride[ar - 1];
  int64_t sbk = G->b.stride[br - 2], sbn = G->b.stride[br - 1];
  /* batch dims of the result; an operand's missing or size-1 dims broadcast */
  G->batch_rank = cr - 2;
  G->batch = 1;
  bool b_broadcast = true, a_folds = true;
  int64_t expect = sam * G->m; /* a's batch dims fold into m when contiguous over it */
  for (int j = cr - 3; j >= 0; j--) {
    G->batch_dims[j] = ct->dim[j].size;
    G->batch *= ct->dim[j].size;
    int ja = j - (cr - ar), jb = j - (cr - br);
    G->a_bstride[j] = ja >= 0 && at->dim[ja].size > 1 ? G->a.stride[ja] : 0;
    G->b_bstride[j] = jb >= 0 && bt->dim[jb].size > 1 ? G->b.stride[jb] : 0;
    if (G->b_bstride[j]) b_broadcast = false;
    if (ct->dim[j].size > 1 && G->a_bstride[j] != expect) a_folds = false;
    expect *= ct->dim[j].size;
  }
  int64_t cs = G->n * G->m;
  for (int j = cr - 3; j >= 0; j--) {
    G->c_bstride[j] = cs;
    cs *= ct->dim[j].size;
  }
  G->a_off = G->a.offset;
  G->b_off = G->b.offset;
  if (G->batch > 1 && b_broadcast && a_folds && sak == 1) {
    /* one product: [batch*m, k] @ [k, n] (a linear layer over [B, T, C]) */
    G->m *= G->batch;
    G->batch = 1;
    G->batch_rank = 0;
  }
  if (!blas_2d(G->m, G->k, sam, sak, &G->trans_a, &G->lda) || !blas_2d(G->k, G->n, sbk, sbn, &G->trans_b, &G->ldb))
    tg_error(L->ctx, mm->loc, "cannot lower matmul %%%d: an operand's strides are not a BLAS layout", mm->id);
  G->ldc = G->n;
}

/* A collective: no loops, only its output kept in memory (its input is,
 * since the fuse pass never recomputes what a collective sends). */
static void collective_step(lowerer *L, const tg_node *n) {
  int s = new_step(L, TG_STEP_COLLECTIVE);
  own(L, s, n->id);
  L->stored[n->id] = true;
  L->steps[s].node = n->id;
}

static void scatter_step(lowerer *L, const tg_node *n) {
  int s = new_step(L, TG_STEP_SCATTER);
  own(L, s, n->id);
  L->stored[n->id] = true;
  L->steps[s].node = n->id;
  L->steps[s].in_place = L->in_place[n->id];
  L->steps[s].table_rows = n->type.dim[0].size;
  const tg_type *src = &n->in[0]->type;
  int ir = n->in[1]->type.rank;
  uint32_t inner = 0;
  for (int a = 0; a < ir; a++) inner |= 1u << a;
  nest_axes(&L->steps[s].nest, src, inner);
}

/* A scatter_add onto an initial table G (autodiff's tied embedding: the
 * head's gradient) adds its rows into G's own buffer, so that the table is
 * neither zeroed nor copied: its output lives where G lives (replan,
 * place_values) and the scatter reads and writes only the rows it hits.
 * That is safe when G is an intermediate in memory in the output's dtype
 * and shape (G itself, not a view of it), no graph output, and every other
 * reader of G runs in an earlier kernel (it has read G before the scatter
 * changes it).  Otherwise the scatter copies G into its own table first
 * (emit.c). */
static void find_in_place_scatters(lowerer *L) {
  const tg_graph *g = L->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_scatter_add || n->nin != 3 || n->kernel < 0) continue;
    const tg_node *G = n->in[2];
    bool ok = tg_kernel_base(G) == G && G->kernel >= 0 && L->stored[G->id] && !L->p->remat[G->id] &&
              G->op != TG_OP_assign && G->type.dtype == n->type.dtype && tg_type_same_shape(&G->type, &n->type);
    for (int o = 0; ok && o < g->n_outputs; o++) ok = tg_kernel_base(g->outputs[o].node) != G;
    for (int j = 0; ok && j < g->n_nodes; j++) {
      const tg_node *r = g->nodes[j];
      if (r == n || r->kernel < 0) continue;
      for (int x = 0; ok && x < r->nin; x++) ok = tg_kernel_base(r->in[x]) != G || r->kernel < n->kernel;
    }
    L->in_place[i] = ok;
  }
}

/* ---- values crossing steps ----------------------------------------------- */

/* Marks what step `s` reads from other steps of its kernel (through values
 * it recomputes) as stored, and returns the latest wave among them. */
static int cross_reads(lowerer *L, int s, const tg_node *n, int kernel, bool *seen, int wave) {
  const tg_node *b = tg_kernel_base(n);
  if (b->kernel != kernel || seen[b->id]) return wave;
  seen[b->id] = true;
  push(&L->marked, b->id);
  int o = L->p->step_of[b->id];
  if (o == TG_STEP_ELSEWHERE) return wave; /* in memory before the kernel starts */
  if (o >= 0 && o != s) {
    L->stored[b->id] = true;
    return L->steps[o].wave + 1 > wave ? L->steps[o].wave + 1 : wave;
  }
  for (int i = 0; i < b->nin; i++) wave = cross_reads(L, s, b->in[i], kernel, seen, wave);
  return wave;
}

/* ---- recomputing instead of storing -------------------------------------- */

/* A kernel output that every reader can recompute from values that are in
 * memory anyway need not be stored: a matmul's epilogue (bias + GELU)
 * keeps six arrays of [B, T, 4C] besides the pre-activation for the
 * backward, and layernorm keeps x - mean, each worth less than the few
 * operations that remake it.  A kernel output is recomputed by its readers
 * instead when
 *   - it is elementwise, in a kernel that is not the optimizer's or a
 *     special op's, and no graph output or assign;
 *   - every reader computes in a loop nest (a BLAS call or a flash kernel
 *     needs its operands in memory);
 *   - its inputs, followed back through other such values (at most
 *     REMAT_DEPTH ops), are leaves, values stored anyway (a matmul's
 *     product included: it then stays in memory for the readers instead of
 *     the epilogue's result), or a row's statistic of its own kernel (a
 *     sum or max 16 times smaller than it: then stored, as layernorm's
 *     mean);
 *   - and its readers then load no more bytes than storing it and loading
 *     it costs.
 * A kernel left with nothing to store has no launch.  Which values live
 * in memory, and how long, changes with this, so the arena is planned
 * again afterwards (replan).
 *
 * TG_REMAT_CHEAP (the CPU's choice) recomputes only what adds, multiplies
 * and compares remake: no exp, log, tanh, GELU, square root or division,
 * which cost a CPU more than the stores they save, and nothing a
 * backward's gelu_grad reads (store_gelu_grads stores its derivative
 * instead).  On the baby Shakespeare step that is layernorm's normalised
 * x, remade from x - mean and 1/std: 3 MB of stores and loads fewer. */
enum { REMAT_DEPTH = 12, SMALL_STATISTIC = 16 };

/* An op a CPU computes in many cycles (a division's or a square root's
 * unit, or a polynomial): TG_REMAT_CHEAP does not recompute it. */
static bool costly_op(tg_op op) {
  return op == TG_OP_exp || op == TG_OP_log || op == TG_OP_sqrt || op == TG_OP_rsqrt || op == TG_OP_tanh ||
         op == TG_OP_gelu || op == TG_OP_gelu_grad || op == TG_OP_div;
}

typedef struct remat_try {
  int *loads, n_loads;    /* distinct base values in memory the readers would load */
  int64_t *load_bytes;    /* per load: the most of its bytes a view of it shows */
  int *stats, n_stats;    /* statistics that would have to be stored */
  int cap;
} remat_try;

static void try_add(int **v, int *n, int cap, int x) {
  for (int i = 0; i < *n; i++)
    if ((*v)[i] == x) return;
  if (*n < cap) (*v)[(*n)++] = x;
}

/* The bytes of its source that reading `ref` touches: the fewest elements
 * along its chain of views (a slice or a reshape of a part of a buffer
 * reads that part; an expand reads its source once).  Not the whole
 * source: ZeRO stage 3's gathered layernorm weight is a slice of a buffer
 * padded to the ranks' shards (128 floats each), and costing the whole
 * buffer made stage 3 recompute less than stage 0, whose weight is a leaf
 * of 4 floats, so the two no longer computed the same bits (a recomputed
 * product contracts into its reader's add).  ir/kernel.c's read_bytes,
 * which fusion's costs use, takes the lesser of the view and its source
 * only; this one looks at every view between, and is kept apart so that
 * fusion's choices do not move with it. */
static int64_t touched_bytes(const tg_node *ref) {
  int64_t least = tg_type_numel(&ref->type);
  for (const tg_node *v = ref; tg_is_view(v); v = v->in[0]) {
    int64_t n = tg_type_numel(&v->in[0]->type);
    if (n < least) least = n;
  }
  return least * tg_dtype_size(tg_kernel_base(ref)->type.dtype);
}

static void add_load(remat_try *t, const tg_node *ref) {
  int b = tg_kernel_base(ref)->id;
  int64_t bytes = touched_bytes(ref);
  for (int i = 0; i < t->n_loads; i++)
    if (t->loads[i] == b) {
      if (bytes > t->load_bytes[i]) t->load_bytes[i] = bytes;
      return;
    }
  if (t->n_loads < t->cap) t->loads[t->n_loads] = b, t->load_bytes[t->n_loads++] = bytes;
}

static bool remat_inputs_ok(const lowerer *L, const tg_node *n, remat_try *t, int depth, int64_t numel) {
  if (depth > REMAT_DEPTH || (L->remat == TG_REMAT_CHEAP && costly_op(n->op))) return false;
  for (int i = 0; i < n->nin; i++) {
    const tg_node *b = tg_kernel_base(n->in[i]);
    if (tg_ops[b->op].kind == TG_KIND_LEAF) {
      if (b->op != TG_OP_const && b->op != TG_OP_iota) add_load(t, n->in[i]);
      continue;
    }
    if (L->p->remat[b->id]) {
      if (!remat_inputs_ok(L, b, t, depth + 1, numel)) return false;
      continue;
    }
    if (L->stored[b->id]) {
      add_load(t, n->in[i]);
      continue;
    }
    if (b->kernel != n->kernel) return false; /* (cannot happen: what another kernel reads is stored) */
    if (tg_ops[b->op].kind == TG_KIND_ELEMENTWISE) {
      if (!remat_inputs_ok(L, b, t, depth + 1, numel)) return false;
    } else if ((b->op == TG_OP_sum || b->op == TG_OP_max) &&
               tg_type_numel(&b->type) * SMALL_STATISTIC <= numel) {
      try_add(&t->stats, &t->n_stats, t->cap, b->id);
      add_load(t, b);
    } else {
      return false;
    }
  }
  return true;
}

static int64_t value_bytes(const tg_node *n) { return tg_type_numel(&n->type) * tg_dtype_size(n->type.dtype); }

static void find_remat(lowerer *L) {
  const tg_graph *g = L->g;
  bool *out = tg_alloc(L->arena, (size_t)g->n_nodes + 1);
  for (int i = 0; i < g->n_outputs; i++) out[tg_kernel_base(g->outputs[i].node)->id] = true;
  int *readers = tg_alloc(L->arena, sizeof(int) * ((size_t)g->n_nodes + 1)); /* reader kernels, roughly */
  bool *nest_readers = tg_alloc(L->arena, (size_t)g->n_nodes + 1);
  int *last_reader = tg_alloc(L->arena, sizeof(int) * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < g->n_nodes; i++) nest_readers[i] = true, last_reader[i] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *r = g->nodes[i];
    if (r->kernel < 0) continue;
    for (int j = 0; j < r->nin; j++) {
      const tg_node *b = tg_kernel_base(r->in[j]);
      if (b->kernel == r->kernel) continue;
      if (r->kernel != last_reader[b->id]) readers[b->id]++, last_reader[b->id] = r->kernel;
      bool nest = tg_ops[r->op].kind == TG_KIND_ELEMENTWISE || r->op == TG_OP_sum || r->op == TG_OP_max ||
                  r->op == TG_OP_gather || r->op == TG_OP_pad || r->op == TG_OP_concat;
      if (!nest || r->op == TG_OP_assign) nest_readers[b->id] = false;
      if (L->remat == TG_REMAT_CHEAP && r->op == TG_OP_gelu_grad) nest_readers[b->id] = false;
    }
  }
  remat_try t = {.cap = 64};
  t.loads = tg_alloc(L->arena, sizeof(int) * (size_t)t.cap);
  t.load_bytes = tg_alloc(L->arena, sizeof(int64_t) * (size_t)t.cap);
  t.stats = tg_alloc(L->arena, sizeof(int) * (size_t)t.cap);
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (!L->stored[i] || out[i] || n->op == TG_OP_assign || tg_ops[n->op].kind != TG_KIND_ELEMENTWISE) continue;
    if (!nest_readers[i] || readers[i] == 0) continue;
    tg_kernel_kind kind = g->kernels[n->kernel].kind;
    if (kind == TG_KERNEL_MULTI || kind == TG_KERNEL_SPECIAL) continue;
    t.n_loads = t.n_stats = 0;
    if (!remat_inputs_ok(L, n, &t, 0, tg_type_numel(&n->type)) || t.n_loads == t.cap) continue;
    int64_t load = 0, keep = value_bytes(n) * (1 + readers[i]);
    for (int k = 0; k < t.n_loads; k++) load += t.load_bytes[k] * readers[i];
    if (load > keep) continue;
    L->p->remat[i] = true;
    L->stored[i] = false;
    for (int k = 0; k < t.n_stats; k++) L->stored[t.stats[k]] = true;
  }
  /* the unstored values of a kernel that a recomputed value is made from
   * are recomputed by its readers too */
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    if (!L->p->remat[i]) continue;
    const tg_node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) {
      const tg_node *b = tg_kernel_base(n->in[j]);
      if (b->kernel == n->kernel && !L->stored[b->id] && tg_ops[b->op].kind == TG_KIND_ELEMENTWISE)
        L->p->remat[b->id] = true;
    }
  }
}

/* ---- bias epilogues -------------------------------------------------------- */

/* The x of h = gelu(x) (the gelu pass makes the op from std.tg's tanh
 * form), through float casts as the precision pass leaves them; or NULL. */
static const tg_node *gelu_input(const tg_node *h) {
  while (h->op == TG_OP_cast && tg_dtype_is_float(h->type.dtype) && tg_dtype_is_float(h->in[0]->type.dtype)) h = h->in[0];
  return h->op == TG_OP_gelu ? h->in[0] : NULL;
}

/* Per node: how many nodes read it (through views), an output counting
 * twice (it must stay in memory whoever else reads it); malloc'ed. */
static int *count_readers(const tg_graph *g) {
  int *readers = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *readers);
  for (int i = 0; i < g->n_nodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++) readers[tg_kernel_base(g->nodes[i]->in[j])->id]++;
  for (int o = 0; o < g->n_outputs; o++) readers[tg_kernel_base(g->outputs[o].node)->id] += 2;
  return readers;
}

/* For the GPU: a forward matmul kernel whose only value in memory besides
 * the product is product + bias (a vector over the output's columns), and
 * whose product nothing else reads, is one cuBLASLt call with the BIAS
 * epilogue: the product is never stored, and no kernel reads it back to
 * add the bias (the attention's qkv projection: 151 MB a layer of GPT-2 at
 * B=16).  The GEMM rounds product + bias once where the graph rounds the
 * product and then the sum; in bf16 the two differ by at most an ulp. */
static void fold_bias(lowerer *L) {
  const tg_graph *g = L->g;
  int *readers = count_readers(g);
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    if (K->kind != TG_KERNEL_MATMUL) continue;
    const tg_node *mm = NULL, *e = NULL;
    int stored = 0;
    for (int i = 0; i < K->n_nodes; i++) {
      const tg_node *n = g->nodes[K->nodes[i]];
      if (n->op == TG_OP_matmul) mm = n;
      else if (L->stored[n->id]) e = n, stored++;
    }
    /* GELU(product + bias): the one stored value is the GELU, and the add
     * is stored too (cuBLASLt's aux), for the backward to read */
    const tg_node *gelu_of = e && stored == 1 ? gelu_input(e) : NULL;
    const tg_node *h = NULL;
    if (gelu_of && gelu_of->op == TG_OP_add && gelu_of->kernel == k && !L->stored[gelu_of->id])
      h = e, e = gelu_of;
    if (!mm || !e || stored != 1 || mm->phase != TG_PHASE_FORWARD || e->op != TG_OP_add || readers[mm->id] != 1) continue;
    const tg_node *bias = e->in[0] == mm ? e->in[1] : e->in[1] == mm ? e->in[0] : NULL;
    if (!bias || e->in[0] == e->in[1] || bias->type.dtype != mm->type.dtype) continue;
    /* a vector over the product's last axis, in memory */
    const tg_type *bt = &bias->type, *ct = &mm->type;
    bool vector = bt->rank >= 1 && bt->dim[bt->rank - 1].size == ct->dim[ct->rank - 1].size;
    for (int d = 0; vector && d + 1 < bt->rank; d++) vector = bt->dim[d].size == 1;
    tg_layout lay;
    const tg_node *bb = tg_kernel_base(bias);
    if (!vector || !(tg_ops[bb->op].kind == TG_KIND_LEAF || L->stored[bb->id]) || L->p->remat[bb->id]) continue;
    if (!tg_layout_of(L->p, bias, &lay) || lay.offset != 0 || lay.stride[bt->rank - 1] != 1) continue;
    if (h) {
      /* the GELU's intermediates must be the kernel's own: what another
       * kernel loads (not recomputes) other than h and the add is not made */
      bool own_only = true;
      for (int i = 0; i < K->n_nodes && own_only; i++) {
        int id = K->nodes[i];
        own_only = id == mm->id || id == e->id || id == h->id || !L->stored[id];
      }
      if (!own_only || h->type.dtype != mm->type.dtype) continue;
      L->gelu_out[k] = h->id;
      L->stored[e->id] = true; /* the aux matrix */
      L->p->remat[e->id] = false;
    }
    L->bias_add[k] = e->id;
    L->stored[mm->id] = false;
  }
  free(readers);
}

/* For the GPU: a backward matmul kernel whose product only GELU's backward
 * reads, product * gelu_grad(x) with x in memory (the forward's GELU_AUX_BIAS
 * keeps it), is one cuBLASLt call with the DGELU epilogue: the product
 * (dY @ Wᵀ, 100 MB a layer of GPT-2 at B=16 in bf16) is never stored, and
 * no kernel reads it back with x to multiply (the fuse pass put the
 * multiply in the matmul's kernel for this: fuse.c, gelu_backward).  The
 * GEMM rounds the product times gelu'(x) once where the graph rounds the
 * product and then the multiply: at most an ulp apart in bf16. */
static void fold_dgelu(lowerer *L) {
  const tg_graph *g = L->g;
  int *readers = count_readers(g);
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    if (K->kind != TG_KERNEL_MATMUL || L->bias_add[k] >= 0) continue;
    const tg_node *mm = NULL, *e = NULL;
    int others = 0;
    for (int i = 0; i < K->n_nodes; i++) {
      const tg_node *n = g->nodes[K->nodes[i]];
      if (n->op == TG_OP_matmul) mm = n;
      else if (n->op == TG_OP_mul) e = n, others++;
      else if (n->op != TG_OP_gelu_grad) others++;
    }
    if (!mm || !e || others != 1 || readers[mm->id] != 1 || e->type.dtype != mm->type.dtype) continue;
    const tg_node *d = e->in[0] == mm ? e->in[1] : e->in[1] == mm ? e->in[0] : NULL;
    if (!d || d->op != TG_OP_gelu_grad || d->type.dtype != mm->type.dtype) continue;
    /* x: a value in memory (no view of one), row-major (cuBLASLt's aux has
     * the output's leading dimension), the product's shape and type; the
     * weight a matrix, so that the call is one product */
    const tg_node *x = d->in[0];
    if (tg_ops[x->op].kind == TG_KIND_LEAF || tg_is_view(x) || !L->stored[x->id] || L->p->remat[x->id] ||
        L->p->order[x->id] || x->type.dtype != mm->type.dtype || !tg_type_same_shape(&x->type, &mm->type) ||
        mm->in[1]->type.rank != 2 || mm->type.rank < 2)
      continue;
    L->dgelu_out[k] = e->id;
    L->stored[mm->id] = false;
  }
  free(readers);
}

/* ---- GELU's derivative, stored by the forward -------------------------------- */

/* Without recomputation (the CPU): x of h = gelu(x), which the forward's
 * matmul epilogue stores only for the backward's gelu_grad(x), is stored
 * as gelu_grad(x) instead.  The forward has x's tanh at hand (the C
 * compiler computes it once for gelu and gelu_grad, which inline the same
 * expression), and the backward's multiply loads the derivative where it
 * computed it with a tanh of its own: GELU's derivative was 4.3% of the
 * baby Shakespeare step on a CPU.  The same bytes move, and the values are
 * the same floats: gelu_grad of the same f32 x, by the same function.
 *
 * Only where every reader of x is either in x's own nest step (its kernel
 * has one: a matmul and its epilogue) or an f32 gelu_grad of x itself in
 * another kernel, and x is an f32 value in the arena that nothing reads
 * through a view or after the step.  On a GPU, fold_dgelu does the same
 * job inside cuBLASLt. */
static void store_gelu_grads(lowerer *L) {
  const tg_graph *g = L->g;
  tg_program *p = L->p;
  int *readers = count_readers(g);
  int *fits = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *fits);  /* readers that allow it */
  int *grads = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *grads); /* ... of them gelu_grads */
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *r = g->nodes[i];
    for (int j = 0; j < r->nin; j++) {
      const tg_node *x = r->in[j];
      if (tg_kernel_base(x) != x || x->kernel < 0) continue; /* a view's reader does not fit */
      if (r->kernel == x->kernel && r->op != TG_OP_matmul) fits[x->id]++;
      else if (r->op == TG_OP_gelu_grad && r->type.dtype == TG_F32 && r->kernel >= 0) fits[x->id]++, grads[x->id]++;
    }
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *x = g->nodes[i];
    if (!grads[i] || fits[i] != readers[i] || x->type.dtype != TG_F32 || tg_ops[x->op].kind != TG_KIND_ELEMENTWISE ||
        p->store[i].place != TG_PLACE_ARENA || p->remat[i] || p->order[i] || p->step_of[i] < 0)
      continue;
    const tg_lkernel *lk = &p->kernels[x->kernel];
    int nests = 0;
    for (int s = 0; s < lk->n_steps; s++) nests += lk->steps[s].kind == TG_STEP_NEST;
    if (nests != 1 || lk->steps[p->step_of[i]].kind != TG_STEP_NEST) continue;
    if (!p->holds_gelu_grad) p->holds_gelu_grad = tg_alloc(L->arena, (size_t)g->n_nodes + 1);
    p->holds_gelu_grad[i] = true;
  }
  free(readers);
  free(fits);
  free(grads);
}

/* The flash backward output that x is the heads-merged [B, T, C] view of
 * (transpose [0, 2, 1, 3] of [B, H, T, D], then reshape), or NULL. */
static const tg_node *merged_heads_of(const tg_node *x) {
  if (x->op != TG_OP_reshape || x->type.rank != 3) return NULL;
  const tg_node *t = x->in[0];
  static const int perm[4] = {0, 2, 1, 3};
  if (t->op != TG_OP_transpose || t->type.rank != 4 || memcmp(t->perm, perm, sizeof perm)) return NULL;
  const tg_node *o = t->in[0];
  if (o->op != TG_OP_flash_attention_dq && o->op != TG_OP_flash_attention_dk && o->op != TG_OP_flash_attention_dv)
    return NULL;
  const tg_type *ot = &o->type, *xt = &x->type;
  bool same = ot->dim[0].size == xt->dim[0].size && ot->dim[2].size == xt->dim[1].size &&
              ot->dim[1].size * ot->dim[3].size == xt->dim[2].size;
  return same ? o : NULL;
}

/* The attention's backward gives dq, dk and dv, which the
 * graph pads into the [B, T, 3C] gradient of the qkv projection's output
 * and adds (the backward of its split into q, k, v): a kernel reading
 * 75 MB and writing 75 MB a layer of GPT-2 at B=16 only to move them.
 * When the three pads fill disjoint column blocks of one sum, each a
 * heads-merged view of one flash output read by nothing else, the flash
 * kernels write their outputs straight into those columns (the flash
 * kernels take any strides), the sum is written elsewhere
 * (TG_STEP_ELSEWHERE: its kernel reads it from memory, and keeps only
 * what else it computes, the qkv bias's first sum, which fold_bgrad may
 * then take too), and the pads and adds are not computed. */
static void fold_flash_grads(lowerer *L) {
  const tg_graph *g = L->g;
  int *readers = count_readers(g);
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *G = g->nodes[i];
    if (G->op != TG_OP_add || G->kernel < 0 || G->type.rank != 3 || !L->stored[G->id] || readers[G->id] < 1) continue;
    /* the add tree under G: adds of G's kernel read only inside it, and
     * pads at its leaves */
    const tg_node *stack[8], *pads[3], *adds[3];
    int n_stack = 0, n_pads = 0, n_adds = 0;
    bool ok = true;
    stack[n_stack++] = G;
    while (n_stack && ok) {
      const tg_node *x = stack[--n_stack];
      if (x->op == TG_OP_add && x->kernel == G->kernel && (x == G || readers[x->id] == 1) && n_adds < 3) {
        adds[n_adds++] = x;
        for (int j = 0; j < 2 && ok; j++) {
          ok = n_stack < 8;
          if (ok) stack[n_stack++] = x->in[j];
        }
      } else if (x->op == TG_OP_pad && x->kernel == G->kernel && readers[x->id] == 1 && n_pads < 3 &&
                 x->axis == 2 && x->len == G->type.dim[2].size) {
        pads[n_pads++] = x;
      } else {
        ok = false;
      }
    }
    if (!ok || n_pads != 3 || n_adds != 2) continue;
    /* three heads-merged flash outputs of one kernel, each read only by
     * its view, in disjoint column blocks covering the row */
    const tg_node *o[3];
    int64_t width = 0;
    for (int j = 0; j < 3 && ok; j++) {
      o[j] = merged_heads_of(pads[j]->in[0]);
      /* readers count views too: the transpose, the reshape and the pad */
      ok = o[j] && readers[o[j]->id] == 3 && o[j]->kernel == o[0]->kernel && o[j]->type.dtype == G->type.dtype && L->grad_into[o[j]->id] < 0;
      if (ok) width += pads[j]->in[0]->type.dim[2].size;
    }
    if (!ok || width != G->type.dim[2].size || L->p->order[G->id]) continue;
    for (int j = 0; j < 3 && ok; j++)
      for (int k = j + 1; k < 3; k++) {
        int64_t a0 = pads[j]->start, a1 = a0 + pads[j]->in[0]->type.dim[2].size;
        int64_t b0 = pads[k]->start, b1 = b0 + pads[k]->in[0]->type.dim[2].size;
        ok = ok && (a1 <= b0 || b1 <= a0);
      }
    /* G's whole kernel, but G, its adds and pads, and what reads G, stays */
    if (!ok || o[0]->kernel >= G->kernel) continue;
    for (int j = 0; j < 3; j++) {
      L->grad_into[o[j]->id] = G->id;
      L->grad_col[o[j]->id] = pads[j]->start;
      L->stored[o[j]->id] = false;
      L->writer[pads[j]->id] = o[0]->kernel;
    }
    for (int j = 0; j < 2; j++) L->writer[adds[j]->id] = o[0]->kernel;
    L->p->step_of[G->id] = TG_STEP_ELSEWHERE;
  }
  free(readers);
}

/* Whether operand x of a matmul is the [rows, C] matrix of contiguous
 * value y ([..., C], its leading axes flattened into rows), or, transposed
 * (as the operand a), its [C, rows] transpose. */
static bool rows_of(const lowerer *L, const tg_node *x, const tg_node *y, bool transposed) {
  tg_layout lay;
  const tg_type *t = &x->type, *yt = &y->type;
  if (t->rank != 2 || yt->rank < 2 || !L->stored[y->id] || L->p->remat[y->id] || L->p->order[y->id]) return false;
  /* y is stored, but replan has not placed it yet: its layout as if it were */
  tg_storage was = L->p->store[y->id];
  L->p->store[y->id].place = TG_PLACE_ARENA;
  bool strided = tg_layout_of(L->p, x, &lay);
  L->p->store[y->id] = was;
  if (!strided || lay.base != y->id || lay.offset != 0) return false;
  int64_t c = yt->dim[yt->rank - 1].size, rows = tg_type_numel(yt) / c;
  int r = transposed ? 1 : 0; /* the axis of x that runs over y's rows */
  return t->dim[r].size == rows && t->dim[1 - r].size == c && lay.stride[r] == c && lay.stride[1 - r] == 1;
}

/* For the GPU: a bias's gradient is the sum of dY over every row, which
 * split_sums made two sums (over T in a reduce kernel of its own, then over
 * B among the small sums before the optimizer).  The weight's gradient,
 * Xᵀ dY, is a GEMM contracting the same dY over the same rows; cuBLASLt's
 * BGRADA/BGRADB epilogue sums the operand's columns over k as the GEMM
 * reads them.  So that GEMM writes the bias gradient, the reduce kernel
 * has nothing left to do (no launch; it read all of dY: 25 to 100 MB a
 * layer of GPT-2 at B=16), and the stage-2 sum is marked written elsewhere
 * (TG_STEP_ELSEWHERE): its kernel skips it and reads it from memory.  The
 * GEMM sums in f32 and rounds once, where the graph rounds the stage-1
 * sums to dY's type first: closer to the exact sum, a bf16 ulp or so from
 * the CPU's. */
static void fold_bgrad(lowerer *L) {
  const tg_graph *g = L->g;
  int *readers = count_readers(g);
  /* per base value: the weight-gradient matmul kernel contracting it over
   * its rows (as b, or transposed as a), -1 none, -2 more than one */
  int *wgrad = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *wgrad);
  bool *as_a = tg_xcalloc((size_t)g->n_nodes + 1, 1);
  for (int i = 0; i < g->n_nodes; i++) wgrad[i] = -1;
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    if (K->kind != TG_KERNEL_MATMUL || K->n_nodes != 1 || L->bias_add[k] >= 0 || L->dgelu_out[k] >= 0) continue;
    const tg_node *mm = g->nodes[K->nodes[0]];
    if (mm->op != TG_OP_matmul || mm->phase == TG_PHASE_FORWARD || mm->type.rank != 2) continue;
    for (int j = 0; j < 2; j++) {
      const tg_node *y = tg_kernel_base(mm->in[j]);
      if (tg_ops[y->op].kind == TG_KIND_LEAF || !rows_of(L, mm->in[j], y, j == 0)) continue;
      wgrad[y->id] = wgrad[y->id] == -1 ? k : -2;
      as_a[y->id] = j == 0;
    }
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *s2 = g->nodes[i];
    if (s2->op != TG_OP_sum || s2->kernel < 0 || g->kernels[s2->kernel].kind != TG_KERNEL_MULTI) continue;
    const tg_node *s1 = s2->in[0];
    if (s1->op != TG_OP_sum || s1->kernel < 0 || readers[s1->id] != 1) continue;
    const tg_kernel *R = &g->kernels[s1->kernel];
    /* the sum is all its kernel computes (what else is there another
     * kernel writes: fold_flash_grads) */
    bool alone = R->kind == TG_KERNEL_REDUCE;
    for (int j = 0; j < R->n_nodes && alone; j++) alone = R->nodes[j] == s1->id || L->writer[R->nodes[j]] >= 0;
    if (!alone) continue;
    const tg_node *y = s1->in[0];
    const tg_type *yt = &y->type;
    if (tg_is_view(y) || yt->rank < 2 || wgrad[y->id] < 0 || y->type.dtype != s2->type.dtype) continue;
    /* cuBLASLt has BGRADA for a non-transposed A and BGRADB for a
     * transposed B only (emu_blaslt.c cites why).  y as tg's b is
     * cuBLASLt's A, never transposed; y as tg's a (read as yT) is
     * cuBLASLt's B, transposed unless yT is one row or one column, which
     * blas_2d reads as not transposed: no epilogue for those */
    int64_t cols = yt->dim[yt->rank - 1].size, rows = cols ? tg_type_numel(yt) / cols : 0;
    if (as_a[y->id] && (cols <= 1 || rows <= 1)) continue;
    /* together the two sums cover every axis of y but the last */
    uint32_t all = (1u << (yt->rank - 1)) - 1;
    if ((s1->axes | s2->axes) != all || (s1->axes & s2->axes)) continue;
    const tg_node *mm = g->nodes[g->kernels[wgrad[y->id]].nodes[0]];
    if (mm->type.dtype != y->type.dtype || L->bgrad_out[wgrad[y->id]] >= 0) continue;
    /* the GEMM runs before anything reads the gradient: the stage-2 sum's
     * kernel comes after it (split_sums moves it to the backward's end) */
    if (wgrad[y->id] >= s2->kernel) continue;
    L->bgrad_out[wgrad[y->id]] = s2->id;
    L->bgrad_of_a[wgrad[y->id]] = as_a[y->id];
    L->writer[s2->id] = wgrad[y->id];
    L->p->step_of[s2->id] = TG_STEP_ELSEWHERE;
    L->stored[s1->id] = false;
    L->folded_into[s1->kernel] = wgrad[y->id];
  }
  free(readers);
  free(wgrad);
  free(as_a);
}

/* ---- the arena ----------------------------------------------------------- */

/* Notes that kernel k loads what x stands for: x itself when it is in
 * memory, or, when k recomputes it, what it is made from. */
static void note_load(const lowerer *L, const tg_node *x, int k, int *last) {
  const tg_node *b = tg_kernel_base(x);
  if (tg_ops[b->op].kind == TG_KIND_LEAF) return;
  if (L->p->remat[b->id] || (b->kernel == k && !L->stored[b->id])) {
    if (b->kernel == k && !L->p->remat[b->id]) return; /* its own inputs are noted as the kernel's node */
    for (int i = 0; i < b->nin; i++) note_load(L, b->in[i], k, last);
    return;
  }
  if (b->kernel != k && k > last[b->id]) last[b->id] = k;
}

/* The arena: one buffer per stored value that another kernel loads or
 * that is needed after the step, live from its kernel to its last loader,
 * placed as the memplan pass places (tg_memplan_place).  Its buffers are
 * fewer than the pass's: a value only its own kernel reads (a matmul's
 * epilogue, a recomputed one) needs none. */
static void replan(lowerer *L) {
  const tg_graph *g = L->g;
  int *last = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *last);
  for (int i = 0; i < g->n_nodes; i++) last[i] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *r = g->nodes[i];
    if (r->kernel < 0 || L->writer[i] >= 0) continue; /* a GEMM's epilogue loads nothing */
    for (int j = 0; j < r->nin; j++) note_load(L, r->in[j], r->kernel, last);
  }
  for (int o = 0; o < g->n_outputs; o++) last[tg_kernel_base(g->outputs[o].node)->id] = g->n_kernels;
  /* an in-place scatter's table is its initial table's buffer, live until
   * the scatter's last reader */
  for (int i = 0; i < g->n_nodes; i++)
    if (L->in_place[i]) {
      int G = g->nodes[i]->in[2]->id;
      if (last[i] > last[G]) last[G] = last[i];
      last[i] = -1;
    }
  tg_mem_plan *plan = tg_alloc(L->arena, sizeof *plan);
  plan->buffers = tg_alloc(L->arena, sizeof *plan->buffers * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->kernel < 0 || !L->stored[i] || n->op == TG_OP_assign || last[i] < 0) continue;
    int first = L->writer[i] >= 0 ? L->writer[i] : n->kernel;
    plan->buffers[plan->n_buffers++] = (tg_buffer){.node = i, .first = first, .last = last[i], .bytes = value_bytes(n)};
  }
  tg_memplan_place(plan);
  for (int b = 0; b < plan->n_buffers; b++) plan->sum_bytes += plan->buffers[b].bytes;
  L->plan = plan;
  free(last);
}

/* ---- the program --------------------------------------------------------- */

/* Makes step s own every node of matmul kernel K except the product mm
 * that no earlier step (its pack step) owns. */
static void own_all_but_product(lowerer *L, const tg_kernel *K, const tg_node *mm, int s) {
  for (int i = 0; i < K->n_nodes; i++)
    if (K->nodes[i] != mm->id && L->p->step_of[K->nodes[i]] < 0) own(L, s, K->nodes[i]);
}

/* product + bias is the GEMM's (fold_bias): no epilogue. */
static void gemm_takes_bias(lowerer *L, const tg_kernel *K, const tg_node *mm, int k) {
  tg_step *st = &L->steps[L->n_steps - 1];
  const tg_node *e = L->g->nodes[L->bias_add[k]];
  st->gemm.out = e->id;
  st->gemm.bias = tg_kernel_base(e->in[0] == mm ? e->in[1] : e->in[0])->id;
  L->stored[mm->id] = false;
  if (L->gelu_out[k] >= 0) {
    /* GELU_AUX_BIAS: D is the GELU, aux the add; the GELU's other ops
     * are the GEMM's too (readers elsewhere recompute them) */
    st->gemm.gelu = true;
    st->gemm.aux = e->id;
    st->gemm.out = L->gelu_out[k];
    own_all_but_product(L, K, mm, L->n_steps - 1);
  } else {
    own(L, L->n_steps - 1, e->id);
  }
}

/* DGELU: D is product * gelu_grad(aux) (fold_dgelu). */
static void gemm_takes_dgelu(lowerer *L, const tg_kernel *K, const tg_node *mm, int k) {
  tg_step *st = &L->steps[L->n_steps - 1];
  const tg_node *e = L->g->nodes[L->dgelu_out[k]];
  const tg_node *d = e->in[0] == mm ? e->in[1] : e->in[0];
  st->gemm.dgelu = true;
  st->gemm.aux = d->in[0]->id;
  st->gemm.out = e->id;
  L->stored[mm->id] = false;
  own_all_but_product(L, K, mm, L->n_steps - 1);
}

/* A matmul kernel's steps: the GEMM, with what the passes folded into it,
 * and an epilogue for the rest of the kernel. */
static void matmul_steps(lowerer *L, const tg_kernel *K, int k) {
  const tg_graph *g = L->g;
  const tg_node *mm = NULL;
  for (int i = 0; i < K->n_nodes && !mm; i++)
    if (g->nodes[K->nodes[i]]->op == TG_OP_matmul) mm = g->nodes[K->nodes[i]];
  gemm_step(L, mm);
  if (L->bgrad_out[k] >= 0) {
    /* the bias gradient is the GEMM's too (fold_bgrad) */
    L->steps[L->n_steps - 1].gemm.bgrad = L->bgrad_out[k];
    L->steps[L->n_steps - 1].gemm.bgrad_of_a = L->bgrad_of_a[k];
  }
  if (L->bias_add[k] >= 0) {
    gemm_takes_bias(L, K, mm, k);
    return;
  }
  if (L->dgelu_out[k] >= 0) {
    gemm_takes_dgelu(L, K, mm, k);
    return;
  }
  /* the epilogue, unless its readers recompute all of it */
  /* (an operand the gemm's pack step computes is that step's: the
   * epilogue must not take it over and compute it again after) */
  bool epilogue = false;
  for (int i = 0; i < K->n_nodes; i++)
    epilogue |= K->nodes[i] != mm->id && L->p->step_of[K->nodes[i]] < 0 && L->stored[K->nodes[i]];
  if (epilogue) {
    int s = new_step(L, TG_STEP_NEST);
    own_all_but_product(L, K, mm, s);
    single_nest(L, s, TG_KERNEL_ELEMENTWISE);
  }
}

/* An elementwise or reduction kernel: one nest, or none when no value of
 * it is stored. */
static void nest_kernel_step(lowerer *L, const tg_kernel *K) {
  /* a kernel whose every output its readers recompute has no launch */
  /* (nor does one whose outputs another kernel writes: fold_flash_grads) */
  bool any = false;
  for (int i = 0; i < K->n_nodes; i++) any |= L->stored[K->nodes[i]] && L->writer[K->nodes[i]] < 0;
  if (!any) return;
  int s = new_step(L, TG_STEP_NEST);
  for (int i = 0; i < K->n_nodes; i++)
    if (L->writer[K->nodes[i]] < 0) own(L, s, K->nodes[i]);
  single_nest(L, s, K->kind);
}

/* Each step of kernel k its wave, after the steps whose values it reads;
 * the number of waves.  L->seen: every node it marks is the kernel's own
 * or an input of one, cleared after each step, so a step costs its own
 * size. */
static int assign_waves(lowerer *L, int k) {
  const tg_graph *g = L->g;
  bool *seen = L->seen;
  int n_waves = 0;
  for (int s = 0; s < L->n_steps; s++) {
    int wave = 0;
    const ivec *m = &L->members[s];
    for (int i = 0; i < m->n; i++) seen[m->v[i]] = true;
    for (int i = 0; i < m->n; i++) {
      const tg_node *n = g->nodes[m->v[i]];
      for (int j = 0; j < n->nin; j++) wave = cross_reads(L, s, n->in[j], k, seen, wave);
    }
    for (int i = 0; i < L->marked.n; i++) seen[L->marked.v[i]] = false;
    for (int i = 0; i < m->n; i++) seen[m->v[i]] = false;
    L->marked.n = 0;
    if (L->steps[s].kind == TG_STEP_GEMM && L->steps[s].gemm.after >= 0 &&
        L->steps[L->steps[s].gemm.after].wave + 1 > wave)
      wave = L->steps[L->steps[s].gemm.after].wave + 1; /* after the copies of its operands */
    L->steps[s].wave = wave;
    if (wave + 1 > n_waves) n_waves = wave + 1;
  }
  return n_waves;
}

/* The program's kernel k from the steps in L. */
static void store_lkernel(lowerer *L, int k, int n_waves) {
  tg_lkernel *lk = &L->p->kernels[k];
  lk->kernel = k;
  lk->folded_into = L->folded_into[k];
  lk->n_steps = L->n_steps;
  lk->n_waves = n_waves;
  lk->steps = tg_alloc(L->arena, sizeof(tg_step) * (size_t)L->n_steps);
  memcpy(lk->steps, L->steps, sizeof(tg_step) * (size_t)L->n_steps);
  for (int s = 0; s < L->n_steps; s++) {
    lk->steps[s].fn = tg_sprintf(L->arena, "k%d_%d", k, s);
    free(L->members[s].v);
  }
}

static void lower_kernel(lowerer *L, int k) {
  const tg_graph *g = L->g;
  const tg_kernel *K = &g->kernels[k];
  L->n_steps = 0;
  L->kernel = k;
  const tg_node *first = g->nodes[K->nodes[0]];
  switch (K->kind) {
  case TG_KERNEL_MATMUL: matmul_steps(L, K, k); break;
  case TG_KERNEL_SPECIAL:
    if (first->op == TG_OP_scatter_add) scatter_step(L, first);
    else if (tg_op_is_collective(first->op)) collective_step(L, first);
    else if (tg_op_is_flash_attention(first->op)) flash_step(L, K);
    else tg_error(L->ctx, first->loc, "cannot lower a special kernel of %s", tg_ops[first->op].name);
    break;
  case TG_KERNEL_MULTI: multi_steps(L, K); break;
  default: nest_kernel_step(L, K);
  }
  int n_waves = assign_waves(L, k);
  for (int s = 0; s < L->n_steps; s++) {
    if (L->steps[s].kind != TG_STEP_NEST) continue;
    check_fit(L, &L->steps[s].nest, &L->members[s]);
    fill_nest(L, &L->steps[s].nest, &L->members[s], s);
  }
  store_lkernel(L, k, n_waves);
}

/* Places every stored value: leaves are the runtime's, what other kernels
 * load is where replan put it, assigns write into their leaf, and the rest
 * get scratch memory private to their kernel. */
static void place_values(lowerer *L) {
  const tg_graph *g = L->g;
  tg_program *p = L->p;
  for (int b = 0; b < L->plan->n_buffers; b++) {
    const tg_buffer *B = &L->plan->buffers[b];
    p->store[B->node] = (tg_storage){TG_PLACE_ARENA, -1, B->offset};
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (is_stored_leaf(p, i)) p->store[i] = (tg_storage){TG_PLACE_LEAF, p->leaf_index[i], 0};
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op == TG_OP_assign) {
      const tg_node *leaf = tg_kernel_base(n->in[0]);
      p->store[i] = p->store[leaf->id];
    }
    if (L->in_place[i]) p->store[i] = p->store[n->in[2]->id];
  }
  p->arena_bytes = L->plan->arena_bytes;
  /* scratch: per kernel, from 0; the runtime gives the largest */
  for (int k = 0; k < g->n_kernels; k++) {
    int64_t top = 0;
    const tg_kernel *K = &g->kernels[k];
    const tg_lkernel *lk = &p->kernels[k];
    for (int j = 0; j < K->n_nodes + lk->n_steps; j++) {
      /* the kernel's values, then the views its matmuls copy */
      int i = j < K->n_nodes ? K->nodes[j] : lk->steps[j - K->n_nodes].kind == TG_STEP_NEST ? lk->steps[j - K->n_nodes].node : -1;
      if (i < 0 || !L->stored[i] || p->store[i].place != TG_PLACE_NONE) continue;
      int64_t bytes = tg_type_numel(&g->nodes[i]->type) * tg_dtype_size(g->nodes[i]->type.dtype);
      p->store[i] = (tg_storage){TG_PLACE_SCRATCH, -1, top};
      top += (bytes + TG_MEMPLAN_ALIGN - 1) / TG_MEMPLAN_ALIGN * TG_MEMPLAN_ALIGN;
    }
    if (top > p->scratch_bytes) p->scratch_bytes = top;
  }
  
}

/* Whether a layout covers its type's elements one after another in memory. */
static bool one_run(const tg_layout *l, const tg_type *t) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    if (t->dim[d].size > 1 && l->stride[d] != s) return false;
    s *= t->dim[d].size;
  }
  return true;
}

const tg_node *tg_kernel_collective(const tg_program *p, int k) {
  const tg_lkernel *lk = &p->kernels[k];
  return lk->n_steps == 1 && lk->steps[0].kind == TG_STEP_COLLECTIVE ? p->g->nodes[lk->steps[0].node] : NULL;
}

tg_collective_operands tg_collective_operands_of(const tg_program *p, const tg_node *n) {
  tg_collective_operands c = {.in_numel = tg_type_numel(&n->in[0]->type), .out_numel = tg_type_numel(&n->type)};
  tg_layout_of(p, n->in[0], &c.in);
  tg_layout_of(p, n, &c.out);
  return c;
}

/* A collective hands the ranks' libraries (MPI, NCCL) two plain buffers:
 * its input and output must each be one run of memory, in memory (a leaf
 * or the arena, not a kernel's scratch), and not the same memory. */
static void check_collectives(tg_ctx *ctx, const tg_program *p) {
  for (int k = 0; k < p->n_kernels; k++) {
    const tg_node *n = tg_kernel_collective(p, k);
    if (!n) continue;
    tg_layout in, out;
    bool ok_in = tg_layout_of(p, n->in[0], &in) && one_run(&in, &n->in[0]->type) &&
                 p->store[in.base].place != TG_PLACE_SCRATCH && p->store[in.base].place != TG_PLACE_NONE;
    bool ok_out = tg_layout_of(p, n, &out) && out.base == n->id && p->store[n->id].place == TG_PLACE_ARENA;
    if (!ok_in || !ok_out)
      tg_error(ctx, n->loc, "cannot lower %s: its %s is not one contiguous buffer in memory", tg_ops[n->op].name,
               ok_in ? "output" : "input");
  }
}

/* An assign writes its leaf in place: nothing may read the leaf's old value
 * after that, except the same nest reading the same element. */
static void check_assigns(lowerer *L) {
  const tg_graph *g = L->g;
  /* the readers of each base value, once (a list per base: CSR) */
  int n = g->n_nodes;
  int *start = tg_xcalloc((size_t)n + 2, sizeof *start);
  for (int j = 0; j < n; j++)
    if (g->nodes[j]->kernel >= 0)
      for (int x = 0; x < g->nodes[j]->nin; x++) start[tg_kernel_base(g->nodes[j]->in[x])->id + 1]++;
  for (int i = 0; i < n; i++) start[i + 1] += start[i];
  int *fill = tg_xcalloc((size_t)n + 1, sizeof *fill), *reader = tg_xcalloc((size_t)start[n] + 1, sizeof *reader),
      *input = tg_xcalloc((size_t)start[n] + 1, sizeof *input);
  for (int j = 0; j < n; j++)
    if (g->nodes[j]->kernel >= 0)
      for (int x = 0; x < g->nodes[j]->nin; x++) {
        int b = tg_kernel_base(g->nodes[j]->in[x])->id, at = start[b] + fill[b]++;
        reader[at] = j, input[at] = x;
      }
  for (int i = 0; i < n; i++) {
    const tg_node *a = g->nodes[i];
    if (a->op != TG_OP_assign) continue;
    const tg_node *leaf = tg_kernel_base(a->in[0]);
    int sa = L->p->step_of[a->id];
    const tg_lkernel *lk = &L->p->kernels[a->kernel];
    for (int e = start[leaf->id]; e < start[leaf->id + 1]; e++) {
      const tg_node *r = g->nodes[reader[e]];
      int x = input[e];
      if (r == a) continue;
      bool ok;
      if (r->kernel != a->kernel) ok = r->kernel < a->kernel;
      else {
        int sr = L->p->step_of[r->id];
        bool same_elem = r->in[x] == leaf && tg_type_same_shape(&leaf->type, &lk->steps[sa].nest.dom) &&
                         tg_type_same_shape(&r->type, &leaf->type);
        ok = (sr == sa || sr < 0) ? same_elem : lk->steps[sr].wave < lk->steps[sa].wave;
      }
      if (!ok)
        tg_error(L->ctx, r->loc,
                 "cannot update '%s' in place: %%%d %s reads its old value after (or beside) the assign %%%d",
                 leaf->name ? leaf->name : "?", r->id, tg_ops[r->op].name, a->id);
    }
  }
  free(start);
  free(fill);
  free(reader);
  free(input);
}

/* Every base value arg_of may mark for x (the values it passes through). */
static void arg_candidates(const lowerer *L, const tg_node *x, ivec *out) {
  const tg_node *b = tg_kernel_base(x);
  push(out, b->id);
  if (L->p->remat[b->id])
    for (int i = 0; i < b->nin; i++) arg_candidates(L, b->in[i], out);
}

/* Marks the base value x reads as an argument; a recomputed value's
 * arguments are those of its inputs. */
static void arg_of(const lowerer *L, const tg_node *x, bool *in) {
  const tg_node *b = tg_kernel_base(x);
  if (L->p->remat[b->id]) {
    for (int i = 0; i < b->nin; i++) arg_of(L, b->in[i], in);
  } else if (L->p->store[b->id].place != TG_PLACE_NONE) {
    in[b->id] = true;
  }
}

/* The base values each kernel touches, in a fixed order: the argument list
 * of its generated function(s). */
static int by_int(const void *x, const void *y) { return (*(const int *)x > *(const int *)y) - (*(const int *)x < *(const int *)y); }

/* r and w: per node, zero on entry and on return (only what this kernel
 * touches is set and cleared, so that a kernel costs its own size, not the
 * graph's: a 192-layer model has thousands of kernels). */
static void kernel_args(lowerer *L, int k, bool *r, bool *w) {
  const tg_graph *g = L->g;
  tg_lkernel *lk = &L->p->kernels[k];
  const tg_kernel *K = &g->kernels[k];
  for (int j = 0; j < K->n_nodes; j++) {
    const tg_node *n = g->nodes[K->nodes[j]];
    if (L->writer[n->id] >= 0) continue; /* another kernel's GEMM writes it */
    if (L->stored[n->id]) w[n->op == TG_OP_assign ? tg_kernel_base(n->in[0])->id : n->id] = true;
    /* an in-place scatter reads its initial table through its own output
     * (the same memory: one pointer, as restrict requires) */
    int nin = L->in_place[n->id] ? 2 : n->nin;
    if (L->in_place[n->id]) r[n->id] = true;
    for (int x = 0; x < nin; x++) arg_of(L, n->in[x], r);
  }
  for (int s = 0; s < lk->n_steps; s++) {
    if (lk->steps[s].kind == TG_STEP_GEMM && lk->steps[s].gemm.bgrad >= 0) w[lk->steps[s].gemm.bgrad] = true;
    if (lk->steps[s].kind == TG_STEP_FLASH_BWD) /* dq, dk, dv: maybe columns of another value (fold_flash_grads) */
      for (int a = 6; a < 9; a++) w[lk->steps[s].flash_args[a]] = true;
  }
  /* a copy of a view for a matmul: written by its nest, read by the gemm */
  for (int s = 0; s < lk->n_steps; s++)
    if (lk->steps[s].kind == TG_STEP_NEST && lk->steps[s].node >= 0) r[lk->steps[s].node] = w[lk->steps[s].node] = true;
  /* the candidates: what the marking above can have set */
  ivec cand = {0};
  for (int j = 0; j < K->n_nodes; j++) {
    const tg_node *n = g->nodes[K->nodes[j]];
    push(&cand, n->op == TG_OP_assign ? tg_kernel_base(n->in[0])->id : n->id);
    for (int x = 0; x < n->nin; x++) arg_candidates(L, n->in[x], &cand);
  }
  for (int s = 0; s < lk->n_steps; s++) {
    if (lk->steps[s].kind == TG_STEP_NEST && lk->steps[s].node >= 0) push(&cand, lk->steps[s].node);
    if (lk->steps[s].kind == TG_STEP_GEMM && lk->steps[s].gemm.bgrad >= 0) push(&cand, lk->steps[s].gemm.bgrad);
    if (lk->steps[s].kind == TG_STEP_FLASH_BWD)
      for (int a = 6; a < 9; a++) push(&cand, lk->steps[s].flash_args[a]);
  }
  if (cand.n) qsort(cand.v, (size_t)cand.n, sizeof *cand.v, by_int);
  ivec args = {0};
  for (int c = 0; c < cand.n; c++)
    if ((c == 0 || cand.v[c] != cand.v[c - 1]) && (r[cand.v[c]] || w[cand.v[c]])) push(&args, cand.v[c]);
  lk->args = arena_ints(L->arena, &args);
  lk->n_args = args.n;
  lk->arg_read = tg_alloc(L->arena, (size_t)(args.n ? args.n : 1));
  lk->arg_written = tg_alloc(L->arena, (size_t)(args.n ? args.n : 1));
  for (int a = 0; a < args.n; a++) lk->arg_read[a] = r[args.v[a]], lk->arg_written[a] = w[args.v[a]];
  for (int c = 0; c < cand.n; c++) r[cand.v[c]] = w[cand.v[c]] = false;
  free(args.v);
  free(cand.v);
}

int tg_lkernel_arg(const tg_lkernel *lk, long node) {
  int lo = 0, hi = lk->n_args;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (lk->args[mid] < node) lo = mid + 1;
    else hi = mid;
  }
  return lo < lk->n_args && lk->args[lo] == node ? lo : -1;
}

tg_program *tg_lower(tg_ctx *ctx, const tg_graph *g) { return tg_lower_ex(ctx, g, TG_REMAT_NONE); }

tg_program *tg_lower_ex(tg_ctx *ctx, const tg_graph *g, tg_remat remat) {
  if (!g->n_kernels || !g->memplan)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "code generation needs a fused and planned graph");
  /* before anything is allocated: MPI has no bf16 sum, and NCCL's would
   * round at every hop */
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (tg_op_is_collective(n->op) && n->op != TG_OP_all_gather && n->type.dtype != TG_F32)
      tg_error(ctx, n->loc, "cannot lower %s of %s: the backends sum in f32 only (cast to f32 first)",
               tg_ops[n->op].name, tg_dtype_name(n->type.dtype));
  }
  tg_program *p = tg_alloc(ctx->arena, sizeof *p);
  p->g = g;
  p->store = tg_alloc(ctx->arena, sizeof(tg_storage) * (size_t)g->n_nodes + 1);
  p->step_of = tg_alloc(ctx->arena, sizeof(int) * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < g->n_nodes; i++) p->step_of[i] = -1;
  /* flash attention's output [B, H, T, D] is laid out as [B, T, H, D]: the
   * heads side by side, as the projection after it reads them (a [B·T, C]
   * matrix, no copy); the flash kernels take any strides */
  p->order = tg_alloc(ctx->arena, sizeof *p->order * ((size_t)g->n_nodes + 1));
  memset(p->order, 0, sizeof *p->order * ((size_t)g->n_nodes + 1));
  static const int heads_inner[4] = {0, 2, 1, 3};
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_flash_attention && g->nodes[i]->type.rank == 4) p->order[i] = heads_inner;
  p->kernels = tg_alloc(ctx->arena, sizeof(tg_lkernel) * (size_t)g->n_kernels);
  p->n_kernels = g->n_kernels;
  bool *read = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *read);
  for (int i = 0; i < g->n_nodes; i++)
    for (int x = 0; x < g->nodes[i]->nin; x++) read[g->nodes[i]->in[x]->id] = true;
  for (int o = 0; o < g->n_outputs; o++) read[g->outputs[o].node->id] = true;
  ivec leaves = {0};
  p->leaf_index = tg_alloc(ctx->arena, sizeof *p->leaf_index * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < g->n_nodes; i++) {
    p->leaf_index[i] = is_leaf_op(g->nodes[i]) && read[i] ? leaves.n : -1;
    if (p->leaf_index[i] >= 0) push(&leaves, i);
  }
  free(read);
  p->leaves = arena_ints(ctx->arena, &leaves);
  p->n_leaves = leaves.n;
  free(leaves.v);

  lowerer L = {.ctx = ctx, .g = g, .p = p, .arena = ctx->arena, .remat = remat};
  L.stored = tg_xcalloc((size_t)g->n_nodes + 1, 1);
  L.sweep_of = tg_xcalloc((size_t)g->n_nodes + 1, sizeof(int));
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    for (int j = 0; j < K->n_outputs; j++) L.stored[K->outputs[j]] = true;
  }
  p->remat = tg_alloc(ctx->arena, (size_t)g->n_nodes + 1);
  /* a matmul's product is in memory: cuBLASLt or BLAS writes it there */
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_matmul) L.stored[i] = true;
  L.bias_add = tg_xcalloc((size_t)g->n_kernels + 1, sizeof *L.bias_add);
  L.gelu_out = tg_xcalloc((size_t)g->n_kernels + 1, sizeof *L.gelu_out);
  L.dgelu_out = tg_xcalloc((size_t)g->n_kernels + 1, sizeof *L.dgelu_out);
  L.bgrad_out = tg_xcalloc((size_t)g->n_kernels + 1, sizeof *L.bgrad_out);
  L.bgrad_of_a = tg_xcalloc((size_t)g->n_kernels + 1, 1);
  L.writer = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *L.writer);
  L.folded_into = tg_xcalloc((size_t)g->n_kernels + 1, sizeof *L.folded_into);
  L.grad_into = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *L.grad_into);
  L.grad_col = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *L.grad_col);
  for (int i = 0; i < g->n_nodes; i++) L.grad_into[i] = -1;
  for (int k = 0; k < g->n_kernels; k++) L.folded_into[k] = -1;
  for (int k = 0; k < g->n_kernels; k++) L.bias_add[k] = L.gelu_out[k] = L.dgelu_out[k] = L.bgrad_out[k] = -1;
  for (int i = 0; i < g->n_nodes; i++) L.writer[i] = -1;
  if (remat != TG_REMAT_NONE) find_remat(&L);
  /* leaves' places, for fold_bias's layouts (set again below); a
   * collective's output is in the arena (check_collectives), and a bias
   * may be a view of one (ZeRO stage 3's gathered weights) */
  for (int i = 0; i < g->n_nodes; i++) {
    if (is_stored_leaf(p, i)) p->store[i].place = TG_PLACE_LEAF;
    if (tg_op_is_collective(g->nodes[i]->op)) p->store[i].place = TG_PLACE_ARENA;
  }
  /* the flash backward writing into the qkv gradient recomputes nothing:
   * it only saves a kernel that moves dq, dk and dv, on a CPU too (the
   * baby Shakespeare step there: 3% of it) */
  if (remat == TG_REMAT_ALL) fold_bias(&L), fold_dgelu(&L);
  fold_flash_grads(&L);
  if (remat == TG_REMAT_ALL) fold_bgrad(&L);
  L.in_place = tg_xcalloc((size_t)g->n_nodes + 1, 1);
  find_in_place_scatters(&L);
  replan(&L);
  /* leaves first: flash and gemm steps read their layouts while lowering */
  for (int i = 0; i < g->n_nodes; i++)
    if (is_stored_leaf(p, i)) p->store[i].place = TG_PLACE_LEAF;
  for (int b = 0; b < L.plan->n_buffers; b++) p->store[L.plan->buffers[b].node].place = TG_PLACE_ARENA;
  L.seen = tg_xcalloc((size_t)g->n_nodes + 1, 1);
  for (int k = 0; k < g->n_kernels; k++) lower_kernel(&L, k);
  free(L.seen);
  free(L.marked.v);
  place_values(&L);
  if (remat != TG_REMAT_ALL) store_gelu_grads(&L);
  check_assigns(&L);
  check_collectives(ctx, p);
  bool *args_r = tg_xcalloc((size_t)g->n_nodes + 1, 1), *args_w = tg_xcalloc((size_t)g->n_nodes + 1, 1);
  for (int k = 0; k < g->n_kernels; k++) kernel_args(&L, k, args_r, args_w);
  free(args_r);
  free(args_w);
  free(L.steps);
  free(L.members);
  free(L.stored);
  free(L.bias_add);
  free(L.gelu_out);
  free(L.dgelu_out);
  free(L.bgrad_out);
  free(L.bgrad_of_a);
  free(L.writer);
  free(L.folded_into);
  free(L.grad_into);
  free(L.grad_col);
  free(L.sweep_of);
  free(L.in_place);
  return p;
}
