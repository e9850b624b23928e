/* kernel.c: the kernel table that the fuse pass leaves on a graph.
 *
 * Membership is the one fact stored per node (node->kernel) and, with each
 * kernel's name and kind, the only thing the IR text form carries; the
 * rest (which nodes, which values cross kernel boundaries, bytes moved) is
 * derived here from it, so the reader, the pass and the verifier agree on
 * it by construction. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

static const char *const kind_names[TG_NKERNEL_KINDS] = {
    "elementwise", "row", "reduce", "matmul", "multi", "special"};

const char *tg_kernel_kind_name(tg_kernel_kind k) {
  return (unsigned)k < TG_NKERNEL_KINDS ? kind_names[k] : "?";
}

bool tg_kernel_kind_parse(const char *s, size_t n, tg_kernel_kind *out) {
  for (int k = 0; k < TG_NKERNEL_KINDS; k++)
    if (strlen(kind_names[k]) == n && !memcmp(kind_names[k], s, n)) {
      *out = (tg_kernel_kind)k;
      return true;
    }
  return false;
}

int tg_graph_add_kernel(tg_graph *g, const char *name, tg_kernel_kind kind) {
  if (g->n_kernels == g->cap_kernels) {
    int cap = g->cap_kernels ? 2 * g->cap_kernels : 16;
    tg_kernel *k = tg_alloc(g->arena, sizeof *k * (size_t)cap);
    if (g->n_kernels) memcpy(k, g->kernels, sizeof *k * (size_t)g->n_kernels);
    g->kernels = k;
    g->cap_kernels = cap;
  }
  tg_kernel *k = &g->kernels[g->n_kernels];
  memset(k, 0, sizeof *k);
  k->name = tg_strdup(g->arena, name);
  k->kind = kind;
  return g->n_kernels++;
}

/* Views compute nothing: a kernel reading one reads its source with other
 * indices.  expand is a view too (a broadcast in the reader's indexing). */
bool tg_is_view(const tg_node *n) {
  return n->op == TG_OP_reshape || n->op == TG_OP_transpose || n->op == TG_OP_slice ||
         n->op == TG_OP_expand;
}

bool tg_is_widening(const tg_node *n) {
  return n->op == TG_OP_cast && n->type.dtype == TG_F32 && n->in[0]->type.dtype == TG_BF16;
}

const tg_node *tg_kernel_base(const tg_node *n) {
  while (tg_is_view(n)) n = n->in[0];
  return n;
}

static int64_t bytes_of(const tg_node *n) {
  return tg_type_numel(&n->type) * tg_dtype_size(n->type.dtype);
}

/* What reading `ref` costs: its source's bytes, but no more than the view
 * shows (a slice reads its part; an expand reads its source once); an
 * iota costs nothing. */
static int64_t read_bytes(const tg_node *ref) {
  const tg_node *b = tg_kernel_base(ref);
  if (b->op == TG_OP_iota) return 0; /* computed from the index, never loaded */
  int64_t r = bytes_of(ref), s = bytes_of(b);
  return r < s ? r : s;
}

/* Marks values needed outside their kernel: read by another kernel, a
 * graph output, or written to a leaf by an assign. */
static void mark_outputs(const tg_graph *g, bool *out) {
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->kernel < 0) continue;
    if (n->op == TG_OP_assign) out[i] = true;
    for (int j = 0; j < n->nin; j++) {
      const tg_node *b = tg_kernel_base(n->in[j]);
      if (b->kernel >= 0 && b->kernel != n->kernel) out[b->id] = true;
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    const tg_node *b = tg_kernel_base(g->outputs[i].node);
    if (b->kernel >= 0) out[b->id] = true;
  }
}

static int *arena_ints(tg_graph *g, int n) { return tg_alloc(g->arena, sizeof(int) * (size_t)(n ? n : 1)); }

/* One kernel's inputs: the sources it reads from outside, once each. */
static void derive_inputs(tg_graph *g, int k, int *stamp, int64_t *most) {
  tg_kernel *K = &g->kernels[k];
  int n_in = 0;
  int *in = arena_ints(g, 0), cap = 1;
  for (int a = 0; a < K->n_nodes; a++) {
    const tg_node *n = g->nodes[K->nodes[a]];
    for (int j = 0; j < n->nin; j++) {
      const tg_node *b = tg_kernel_base(n->in[j]);
      if (b->kernel == k) continue;
      int64_t r = read_bytes(n->in[j]);
      if (stamp[b->id] != k) {
        stamp[b->id] = k;
        most[b->id] = 0;
        if (n_in == cap) {
          int *m = arena_ints(g, 2 * cap);
          memcpy(m, in, sizeof(int) * (size_t)n_in);
          in = m;
          cap *= 2;
        }
        in[n_in++] = b->id;
      }
      if (r > most[b->id]) most[b->id] = r;
    }
  }
  K->inputs = in;
  K->n_inputs = n_in;
  for (int a = 0; a < n_in; a++) K->bytes_read += most[in[a]];
}

void tg_kernels_derive(tg_graph *g) {
  int n = g->n_nodes;
  bool *out = calloc((size_t)n + 1, sizeof *out);
  int *stamp = malloc(sizeof(int) * ((size_t)n + 1));
  int64_t *most = calloc((size_t)n + 1, sizeof *most);
  if (!out || !stamp || !most) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  for (int i = 0; i < n; i++) stamp[i] = -1;
  mark_outputs(g, out);
  for (int k = 0; k < g->n_kernels; k++) {
    tg_kernel *K = &g->kernels[k];
    K->n_nodes = K->n_inputs = K->n_outputs = 0;
    K->bytes_read = K->bytes_written = K->bytes_unfused = 0;
  }
  for (int i = 0; i < n; i++) {
    int k = g->nodes[i]->kernel;
    if (k < 0 || k >= g->n_kernels) continue;
    g->kernels[k].n_nodes++;
    g->kernels[k].n_outputs += out[i];
  }
  for (int k = 0; k < g->n_kernels; k++) {
    tg_kernel *K = &g->kernels[k];
    K->nodes = arena_ints(g, K->n_nodes);
    K->outputs = arena_ints(g, K->n_outputs);
    K->n_nodes = K->n_outputs = 0;
  }
  for (int i = 0; i < n; i++) {
    const tg_node *nd = g->nodes[i];
    if (nd->kernel < 0 || nd->kernel >= g->n_kernels) continue;
    tg_kernel *K = &g->kernels[nd->kernel];
    K->nodes[K->n_nodes++] = i;
    if (out[i]) {
      K->outputs[K->n_outputs++] = i;
      K->bytes_written += bytes_of(nd);
    }
    /* unfused: the op reads each input and writes its result */
    K->bytes_unfused += bytes_of(nd);
    for (int j = 0; j < nd->nin; j++) K->bytes_unfused += read_bytes(nd->in[j]);
  }
  for (int k = 0; k < g->n_kernels; k++) derive_inputs(g, k, stamp, most);
  free(out);
  free(stamp);
  free(most);
}
