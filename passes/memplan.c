/* memplan.c: gives every intermediate of a fused step a place in memory.
 *
 * After fusion, the values that live in memory are the kernels' outputs
 * (ir.h: tg_kernel.outputs); everything else stays in registers.  Most of
 * them are needed for a short while (a layer's activations until its
 * backward, a gradient until the optimizer), so one arena with reused
 * bytes needs far less than a buffer each.  This pass decides the reuse.
 *
 * Liveness is in kernel order: a buffer is live from the kernel that
 * writes it to the last kernel that reads it; graph outputs and assigns
 * are live to the end of the step (their values are read after it).  Two
 * buffers may share bytes only when their lifetimes are disjoint.
 *
 * Placement is greedy best-fit by decreasing size, a standard heuristic
 * for this interval-packing problem (it is NP-hard in general): buffers
 * are placed largest first (ties: earlier writer, then graph order, so the
 * plan is deterministic); each goes into the smallest gap, between the
 * already placed buffers whose lifetimes overlap its own, that holds it,
 * or on top of them when none does.  Large buffers placed first pack the
 * arena's bottom; small ones fill the holes.  Every size is rounded up to
 * TG_MEMPLAN_ALIGN, so every offset is aligned too.
 *
 * Leaves (params, inputs, state, including AdamW's moments) are not
 * intermediates: they persist across steps and are counted apart.  The
 * plan is not in the IR text: it is recomputed from the kernels (ir.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static int64_t align_up(int64_t b) {
  int64_t a = (b + TG_MEMPLAN_ALIGN - 1) / TG_MEMPLAN_ALIGN * TG_MEMPLAN_ALIGN;
  return a ? a : TG_MEMPLAN_ALIGN; /* every buffer has an address of its own */
}

static int64_t bytes_of(const tg_node *n) {
  return tg_type_numel(&n->type) * tg_dtype_size(n->type.dtype);
}

static bool memory_overlaps(const tg_buffer *a, const tg_buffer *b) {
  return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* ---- liveness ------------------------------------------------------------ */

/* Values needed after the step: graph outputs (through their views) and
 * assigns (their value becomes a leaf's). */
static void mark_live_out(const tg_graph *g, bool *out) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_assign && g->nodes[i]->kernel >= 0) out[i] = true;
  for (int o = 0; o < g->n_outputs; o++) {
    const tg_node *b = tg_kernel_base(g->outputs[o].node);
    if (b->kernel >= 0) out[b->id] = true;
  }
}

/* One buffer per kernel output, in graph order, with its lifetime. */
static void find_buffers(tg_graph *g, tg_mem_plan *p) {
  int *index = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *index);
  bool *live_out = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *live_out);
  for (int i = 0; i < g->n_nodes; i++) index[i] = -1;
  mark_live_out(g, live_out);
  int n = 0;
  for (int k = 0; k < g->n_kernels; k++) n += g->kernels[k].n_outputs;
  p->buffers = tg_alloc(g->arena, sizeof *p->buffers * (size_t)(n ? n : 1));
  /* which nodes are kernel outputs, marked once: asking each node's kernel
   * would cost nodes × outputs for the optimizer's one kernel with an
   * output per parameter */
  bool *is_output = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *is_output);
  for (int k = 0; k < g->n_kernels; k++)
    for (int a = 0; a < g->kernels[k].n_outputs; a++) {
      int o = g->kernels[k].outputs[a];
      if (g->nodes[o]->kernel == k) is_output[o] = true;
    }
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *nd = g->nodes[i];
    if (nd->kernel < 0 || !is_output[i]) continue;
    index[i] = p->n_buffers;
    p->buffers[p->n_buffers++] = (tg_buffer){.node = i, .first = nd->kernel,
                                             .last = live_out[i] ? g->n_kernels : nd->kernel,
                                             .bytes = align_up(bytes_of(nd))};
  }
  free(is_output);
  /* a buffer lives until its last reader */
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    for (int a = 0; a < K->n_inputs; a++) {
      int b = index[K->inputs[a]];
      if (b >= 0 && p->buffers[b].last < k) p->buffers[b].last = k;
    }
  }
  free(index);
  free(live_out);
}

/* The most bytes live at any one kernel: a lower bound for any plan. */
static int64_t max_live(const tg_graph *g, const tg_mem_plan *p) {
  int64_t *delta = tg_xcalloc((size_t)g->n_kernels + 2, sizeof *delta);
  for (int b = 0; b < p->n_buffers; b++) {
    delta[p->buffers[b].first] += p->buffers[b].bytes;
    delta[p->buffers[b].last + 1] -= p->buffers[b].bytes;
  }
  int64_t live = 0, most = 0;
  for (int k = 0; k <= g->n_kernels; k++) {
    live += delta[k];
    if (live > most) most = live;
  }
  free(delta);
  return most;
}

/* ---- placement ----------------------------------------------------------- */

static const tg_buffer *sort_buffers; /* qsort has no context argument */

/* Largest first; ties by writer, then graph order: a deterministic plan. */
static int by_size(const void *x, const void *y) {
  const tg_buffer *a = &sort_buffers[*(const int *)x], *b = &sort_buffers[*(const int *)y];
  if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
  if (a->first != b->first) return a->first < b->first ? -1 : 1;
  return (a->node > b->node) - (a->node < b->node);
}

/* The placed buffers in (offset, node) order, in leaves of up to LEAF
 * entries, each leaf's lifetimes and places as parallel arrays so that the
 * scan over them for each new buffer reads memory in sequence.  A 192-layer
 * model has tens of thousands of buffers, and best fit among those alive at
 * the same time has no cheaper exact form than looking at each placed one
 * (at the turn from forward to backward most saved activations are alive
 * together); the leaves keep that scan from costing more:
 *   - a leaf none of whose buffers is alive with the new one is skipped
 *     whole (its earliest first and latest last kernel say so), which
 *     about half the leaves are at 192 layers;
 *   - an insertion moves the entries of one leaf, not of the whole list
 *     (a flat array moved buffers² entries in all). */
enum { LEAF = 128 };

typedef struct leaf {
  int n;
  int min_first, max_last;         /* over its entries: the skip test */
  int first[LEAF], last[LEAF], index[LEAF]; /* lifetime and buffer index of each */
  int64_t offset[LEAF], end[LEAF]; /* bytes [offset, end) */
} leaf;

typedef struct placed_list {
  leaf **leaves;
  int n_leaves, cap;
} placed_list;

/* Best fit for x among the placed buffers whose lifetimes overlap its own:
 * the smallest gap between them that holds it, else the top of them.
 * Leaves and entries are visited in offset order; a skipped leaf or entry
 * is one whose lifetime misses x's, which the scan ignores anyway. */
static int64_t best_fit(const placed_list *pl, const tg_buffer *x) {
  int64_t cursor = 0, best = -1, best_gap = 0;
  const int xf = x->first, xl = x->last;
  for (int l = 0; l < pl->n_leaves; l++) {
    const leaf *L = pl->leaves[l];
    if (L->min_first > xl || xf > L->max_last) continue;
    for (int a = 0; a < L->n; a++) {
      if (L->first[a] > xl || xf > L->last[a]) continue;
      int64_t gap = L->offset[a] - cursor;
      if (gap >= x->bytes && (best < 0 || gap < best_gap)) {
        best = cursor;
        best_gap = gap;
        /* an exact fit: no later gap is smaller, and ties keep the first */
        if (gap == x->bytes) return best;
      }
      if (L->end[a] > cursor) cursor = L->end[a];
    }
  }
  return best >= 0 ? best : cursor;
}

/* Whether placed entry (offset, node) comes before buffer x. */
static bool before(int64_t offset, int node, const tg_buffer *x) {
  return offset < x->offset || (offset == x->offset && node < x->node);
}

static void summarise(leaf *L) {
  L->min_first = INT_MAX, L->max_last = INT_MIN;
  for (int a = 0; a < L->n; a++) {
    if (L->first[a] < L->min_first) L->min_first = L->first[a];
    if (L->last[a] > L->max_last) L->max_last = L->last[a];
  }
}

/* Splits full leaf l in two halves. */
static void split_leaf(placed_list *pl, int l) {
  if (pl->n_leaves == pl->cap)
    pl->leaves = tg_xrealloc(pl->leaves, sizeof *pl->leaves * (size_t)(pl->cap = pl->cap ? 2 * pl->cap : 16));
  leaf *L = pl->leaves[l], *R = tg_xcalloc(1, sizeof *R);
  int h = L->n / 2, m = L->n - h;
  memcpy(R->first, L->first + h, sizeof *R->first * (size_t)m);
  memcpy(R->last, L->last + h, sizeof *R->last * (size_t)m);
  memcpy(R->index, L->index + h, sizeof *R->index * (size_t)m);
  memcpy(R->offset, L->offset + h, sizeof *R->offset * (size_t)m);
  memcpy(R->end, L->end + h, sizeof *R->end * (size_t)m);
  R->n = m, L->n = h;
  summarise(L), summarise(R);
  memmove(pl->leaves + l + 2, pl->leaves + l + 1, sizeof *pl->leaves * (size_t)(pl->n_leaves - l - 1));
  pl->leaves[l + 1] = R;
  pl->n_leaves++;
}

/* Inserts buffer b (placed) where (offset, node) order puts it, as
 * best_fit's scan relies on. */
static void insert_placed(placed_list *pl, const tg_buffer *bufs, int b) {
  const tg_buffer *x = &bufs[b];
  if (!pl->n_leaves) {
    pl->leaves = tg_xcalloc((size_t)(pl->cap = 16), sizeof *pl->leaves);
    pl->leaves[pl->n_leaves++] = tg_xcalloc(1, sizeof(leaf));
  }
  /* the first leaf whose last entry is not before x (or the last leaf) */
  int lo = 0, hi = pl->n_leaves - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    const leaf *M = pl->leaves[mid];
    if (M->n && before(M->offset[M->n - 1], bufs[M->index[M->n - 1]].node, x)) lo = mid + 1;
    else hi = mid;
  }
  if (pl->leaves[lo]->n == LEAF) {
    split_leaf(pl, lo);
    const leaf *L = pl->leaves[lo];
    if (before(L->offset[L->n - 1], bufs[L->index[L->n - 1]].node, x)) lo++;
  }
  leaf *L = pl->leaves[lo];
  int i = 0, j = L->n; /* the position in the leaf, by binary search */
  while (i < j) {
    int mid = (i + j) / 2;
    if (before(L->offset[mid], bufs[L->index[mid]].node, x)) i = mid + 1;
    else j = mid;
  }
  size_t tail = (size_t)(L->n - i);
  memmove(L->first + i + 1, L->first + i, tail * sizeof *L->first);
  memmove(L->last + i + 1, L->last + i, tail * sizeof *L->last);
  memmove(L->index + i + 1, L->index + i, tail * sizeof *L->index);
  memmove(L->offset + i + 1, L->offset + i, tail * sizeof *L->offset);
  memmove(L->end + i + 1, L->end + i, tail * sizeof *L->end);
  L->first[i] = x->first;
  L->last[i] = x->last;
  L->index[i] = b;
  L->offset[i] = x->offset;
  L->end[i] = x->offset + x->bytes;
  if (!L->n++ || x->first < L->min_first) L->min_first = x->first;
  if (L->n == 1 || x->last > L->max_last) L->max_last = x->last;
}

/* Places the buffers largest first, each at the best fit among those
 * already placed that are alive with it. */
static void place_all(tg_mem_plan *p) {
  int n = p->n_buffers;
  int *order = tg_xcalloc((size_t)n + 1, sizeof *order);
  placed_list pl = {0};
  for (int b = 0; b < n; b++) order[b] = b;
  sort_buffers = p->buffers;
  qsort(order, (size_t)n, sizeof *order, by_size);
  for (int a = 0; a < n; a++) {
    tg_buffer *x = &p->buffers[order[a]];
    x->offset = best_fit(&pl, x);
    insert_placed(&pl, p->buffers, order[a]);
    if (x->offset + x->bytes > p->arena_bytes) p->arena_bytes = x->offset + x->bytes;
  }
  free(order);
  for (int l = 0; l < pl.n_leaves; l++) free(pl.leaves[l]);
  free(pl.leaves);
}

void tg_memplan_place(tg_mem_plan *p) {
  for (int b = 0; b < p->n_buffers; b++) p->buffers[b].bytes = align_up(p->buffers[b].bytes);
  p->arena_bytes = 0;
  place_all(p);
  p->placed = true;
}

/* The buffers and their lifetimes, not yet placed. */
static tg_mem_plan *plan_lifetimes(tg_graph *g) {
  tg_mem_plan *p = tg_alloc(g->arena, sizeof *p);
  find_buffers(g, p);
  for (int b = 0; b < p->n_buffers; b++) p->sum_bytes += p->buffers[b].bytes;
  p->live_bytes = max_live(g, p);
  for (int i = 0; i < g->n_nodes; i++) {
    tg_op op = g->nodes[i]->op;
    if (op == TG_OP_param || op == TG_OP_input || op == TG_OP_state) p->persistent_bytes += bytes_of(g->nodes[i]);
  }
  return p;
}

tg_mem_plan *tg_memplan_compute(tg_graph *g) {
  tg_mem_plan *p = plan_lifetimes(g);
  place_all(p);
  p->placed = true;
  return p;
}

/* ---- the checker --------------------------------------------------------- */

/* The lifetimes the kernels require, found independently of find_buffers:
 * every kernel output has exactly one buffer, written by its kernel and
 * alive through every reader (and to the end when needed after the step). */
static bool check_lifetimes(const tg_graph *g, const tg_mem_plan *p, char *why, size_t n) {
  int *index = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *index);
  bool *live_out = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *live_out);
  bool ok = true;
  for (int i = 0; i < g->n_nodes; i++) index[i] = -1;
  mark_live_out(g, live_out);
  for (int b = 0; b < p->n_buffers && ok; b++) {
    int i = p->buffers[b].node;
    if (i < 0 || i >= g->n_nodes || index[i] >= 0) {
      snprintf(why, n, "buffer %d is for node %d: not a node, or one with two buffers", b, i);
      ok = false;
    } else index[i] = b;
  }
  for (int k = 0; k < g->n_kernels && ok; k++) {
    const tg_kernel *K = &g->kernels[k];
    for (int a = 0; a < K->n_outputs && ok; a++) {
      int i = K->outputs[a], b = index[i];
      int last = live_out[i] ? g->n_kernels : k;
      if (b < 0) snprintf(why, n, "%%%d, an output of k%d, has no buffer", i, k);
      else if (p->buffers[b].first != k)
        snprintf(why, n, "the buffer of %%%d starts at k%d, but k%d writes it", i, p->buffers[b].first, k);
      else if (p->buffers[b].last < last)
        snprintf(why, n, "the buffer of %%%d ends at k%d, but is needed after the step", i, p->buffers[b].last);
      ok = b >= 0 && p->buffers[b].first == k && p->buffers[b].last >= last;
    }
    for (int a = 0; a < K->n_inputs && ok; a++) {
      int i = K->inputs[a];
      if (g->nodes[i]->kernel < 0) continue; /* a leaf */
      int b = index[i];
      ok = b >= 0 && p->buffers[b].last >= k;
      if (!ok) snprintf(why, n, "k%d reads %%%d after its buffer's last kernel k%d", k, i, b >= 0 ? p->buffers[b].last : -1);
    }
  }
  for (int b = 0; b < p->n_buffers && ok; b++)
    if (g->nodes[p->buffers[b].node]->kernel < 0 || index[p->buffers[b].node] != b) {
      snprintf(why, n, "buffer %d is for %%%d, no kernel's output", b, p->buffers[b].node);
      ok = false;
    }
  free(index);
  free(live_out);
  return ok;
}

static int by_first_kernel(const void *x, const void *y) {
  const tg_buffer *a = &sort_buffers[*(const int *)x], *b = &sort_buffers[*(const int *)y];
  if (a->first != b->first) return a->first < b->first ? -1 : 1;
  return (a->node > b->node) - (a->node < b->node);
}

/* Sizes, alignment, bounds, and no two live-together buffers sharing bytes. */
static bool check_placement(const tg_graph *g, const tg_mem_plan *p, char *why, size_t n) {
  for (int b = 0; b < p->n_buffers; b++) {
    const tg_buffer *x = &p->buffers[b];
    if (x->bytes < bytes_of(g->nodes[x->node]) || x->offset < 0 || x->offset % TG_MEMPLAN_ALIGN ||
        x->offset + x->bytes > p->arena_bytes) {
      snprintf(why, n, "the buffer of %%%d (%lld bytes at %lld) is too small, unaligned or outside the arena (%lld bytes)",
               x->node, (long long)x->bytes, (long long)x->offset, (long long)p->arena_bytes);
      return false;
    }
  }
  /* A sweep in time: buffers by first kernel; the ones alive at that
   * kernel are kept in offset order, where (having passed this check) no
   * two share bytes, so a new buffer need only be checked against its
   * neighbours there.  Lifetimes are inclusive, [first, last]. */
  int n_b = p->n_buffers;
  int *by_first = tg_xcalloc((size_t)n_b + 1, sizeof *by_first), *alive = tg_xcalloc((size_t)n_b + 1, sizeof *alive);
  for (int b = 0; b < n_b; b++) by_first[b] = b;
  sort_buffers = p->buffers;
  qsort(by_first, (size_t)n_b, sizeof *by_first, by_first_kernel);
  int n_alive = 0;
  bool ok = true;
  for (int s = 0; s < n_b && ok; s++) {
    const tg_buffer *x = &p->buffers[by_first[s]];
    int kept = 0; /* drop those whose last kernel is before x's first */
    for (int a = 0; a < n_alive; a++)
      if (p->buffers[alive[a]].last >= x->first) alive[kept++] = alive[a];
    n_alive = kept;
    int lo = 0, hi = n_alive;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (p->buffers[alive[mid]].offset < x->offset) lo = mid + 1;
      else hi = mid;
    }
    const tg_buffer *y = NULL;
    if (lo > 0 && memory_overlaps(x, &p->buffers[alive[lo - 1]])) y = &p->buffers[alive[lo - 1]];
    else if (lo < n_alive && memory_overlaps(x, &p->buffers[alive[lo]])) y = &p->buffers[alive[lo]];
    if (y) {
      snprintf(why, n, "the buffers of %%%d (k%d..k%d) and %%%d (k%d..k%d) are live together and share memory",
               y->node, y->first, y->last, x->node, x->first, x->last);
      ok = false;
    }
    memmove(alive + lo + 1, alive + lo, sizeof *alive * (size_t)(n_alive - lo));
    alive[lo] = by_first[s];
    n_alive++;
  }
  free(by_first);
  free(alive);
  return ok;
}

bool tg_memplan_check(const tg_graph *g, const tg_mem_plan *p, char *why, size_t whylen) {
  return check_lifetimes(g, p, why, whylen) && (!p->placed || check_placement(g, p, why, whylen));
}

/* ---- the findings (findings.h) ------------------------------------------ */

void tg_memplan_format_bytes(char *buf, size_t n, int64_t b) {
  if (b < 10000) snprintf(buf, n, "%lld B", (long long)b);
  else if (b < 10000000) snprintf(buf, n, "%.1f kB", (double)b / 1e3);
  else if (b < 10000000000LL) snprintf(buf, n, "%.1f MB", (double)b / 1e6);
  else snprintf(buf, n, "%.2f GB", (double)b / 1e9);
}

void tg_memplan_record_totals(tg_findings *s, tg_finding *f, const tg_mem_plan *p) {
  tg_finding_num(s, f, "peak_bytes", (double)p->arena_bytes);
  tg_finding_num(s, f, "unreused_bytes", (double)p->sum_bytes);
  tg_finding_num(s, f, "persistent_bytes", (double)p->persistent_bytes);
}

/* The totals, then every buffer in order of its node: its value (node, op,
 * the name the model gave it, or an assign's leaf's), bytes, offset and
 * the kernels it is live across (last -1: to the end of the step). */
static void record(tg_findings *out, const tg_graph *g, const tg_mem_plan *p) {
  tg_finding *x = tg_find(out, "memplan", "summary", -1, (tg_loc){0}, NULL);
  tg_finding_num(out, x, "buffers", p->n_buffers);
  tg_finding_num(out, x, "live_bytes", (double)p->live_bytes);
  tg_finding_num(out, x, "kernels", g->n_kernels);
  tg_memplan_record_totals(out, x, p);
  for (int i = 0; i < p->n_buffers; i++) {
    const tg_buffer *b = &p->buffers[i];
    const tg_node *v = g->nodes[b->node];
    x = tg_find(out, "memplan", "buffer", v->id, v->loc, NULL);
    tg_finding_text(out, x, "op", tg_ops[v->op].name);
    tg_finding_text(out, x, "name", v->name);
    /* an assign's buffer is its leaf's (a parameter, an AdamW moment) */
    if (!v->name && v->op == TG_OP_assign && v->nin > 0) tg_finding_text(out, x, "into", v->in[0]->name);
    tg_finding_num(out, x, "bytes", (double)b->bytes);
    tg_finding_num(out, x, "offset", (double)b->offset);
    tg_finding_num(out, x, "first", b->first);
    tg_finding_num(out, x, "last", b->last == g->n_kernels ? -1 : b->last);
  }
}

/* ---- the pass ------------------------------------------------------------ */

/* The places of fused, the plan the fuse pass placed for its report's
 * peak (fuse.c), when its buffers are p's: placing is a function of the
 * buffers alone, so they are p's places, and the page (which reports both
 * passes) pays for one placing.  Whether it took them. */
static bool take_places(tg_mem_plan *p, const tg_mem_plan *fused) {
  if (!fused || !fused->placed || fused->n_buffers != p->n_buffers) return false;
  for (int b = 0; b < p->n_buffers; b++) {
    const tg_buffer *x = &p->buffers[b], *y = &fused->buffers[b];
    if (x->node != y->node || x->first != y->first || x->last != y->last || x->bytes != y->bytes) return false;
  }
  for (int b = 0; b < p->n_buffers; b++) p->buffers[b].offset = fused->buffers[b].offset;
  p->arena_bytes = fused->arena_bytes;
  p->placed = true;
  return true;
}

void tg_memplan(tg_ctx *ctx, tg_graph *g, tg_findings *findings) {
  if (!g->n_kernels && g->n_nodes)
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "memplan needs a fused graph (run the fuse pass first)");
  const tg_mem_plan *fused = g->memplan; /* fuse's, when it reported; else NULL */
  tg_mem_plan *p = plan_lifetimes(g);
  char why[256];
  /* cheap next to the rest, and a broken plan is silent corruption later */
  if (!tg_memplan_check(g, p, why, sizeof why))
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "memplan made a broken plan: %s", why);
  g->memplan = p;
  if (!findings) return; /* placed when asked (tg_memplan_placed) */
  if (take_places(p, fused) && !check_placement(g, p, why, sizeof why))
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "memplan made a broken plan: %s", why);
  record(findings, g, tg_memplan_placed(ctx, g));
}

const tg_mem_plan *tg_memplan_placed(tg_ctx *ctx, tg_graph *g) {
  tg_mem_plan *p = g->memplan;
  if (!p || p->placed) return p;
  place_all(p);
  p->placed = true;
  char why[256];
  if (!check_placement(g, p, why, sizeof why))
    tg_error(ctx, (tg_loc){g->source, 1, 1}, "memplan made a broken plan: %s", why);
  return p;
}
