/* snapshot.c: a copy of what a graph's text form shows (ir.h:
 * tg_graph_snapshot), to be printed on another thread while the passes
 * go on rewriting the graph.
 *
 * tgc --report html keeps the IR after every pass.  Printing it on the
 * compiling thread cost a twentieth of tgc's time; a copy costs a tenth of
 * a printing (one memcpy a node and its inputs), so the printing and the
 * packing both go to ir_history's worker.  The copy lives in one buffer
 * the caller reuses, in huge pages (alloc.h: tg_huge_alloc): in 4 KB
 * pages, the faults of a fresh buffer cost more than the printing saved. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "ir.h"

enum { ALIGN = 16 };

static size_t aligned(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

/* n's position in g, or -1: the id when it is right, else a scan (as the
 * printer finds it: a graph whose ids are stale prints the same). */
static int position(const tg_graph *g, const tg_node *n) {
  if (n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n) return n->id;
  for (int i = 0; n && i < g->n_nodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

/* Hands out the buffer's bytes in order. */
typedef struct carver {
  char *at;
} carver;

static void *carve(carver *c, size_t bytes) {
  void *p = c->at;
  c->at += aligned(bytes);
  return p;
}

/* What an input of the copy points to: the copy of the node it names, or,
 * for a node not in the graph (an invalid graph; the printer writes "%?"),
 * a copy of its own that is in no graph. */
static tg_node *copied(const tg_graph *g, tg_node *copies, const tg_node *in, carver *orphans) {
  int k = position(g, in);
  if (k >= 0) return &copies[k];
  if (!in) return NULL;
  tg_node *o = carve(orphans, sizeof *o);
  *o = *in;
  o->id = -1;
  o->nin = 0;
  o->in = NULL;
  return o;
}

tg_graph *tg_graph_snapshot(const tg_graph *g, void **buf, size_t *cap) {
  size_t in_bytes = 0, orphans = 0;
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (!n) continue;
    in_bytes += aligned((size_t)n->nin * sizeof *n->in);
    for (int i = 0; i < n->nin; i++) orphans += n->in[i] && position(g, n->in[i]) < 0;
  }
  for (int i = 0; i < g->n_outputs; i++) orphans += g->outputs[i].node && position(g, g->outputs[i].node) < 0;
  size_t need = aligned(sizeof(tg_graph)) + aligned((size_t)g->n_nodes * sizeof(tg_node *)) +
                aligned((size_t)g->n_nodes * sizeof(tg_node)) + in_bytes +
                aligned((size_t)g->n_kernels * sizeof(tg_kernel)) +
                aligned((size_t)g->n_config * sizeof(tg_config_entry)) +
                aligned((size_t)g->n_outputs * sizeof(tg_output)) + orphans * aligned(sizeof(tg_node)) + ALIGN;
  if (need > *cap) { /* room to grow: autodiff more than doubles the graph */
    tg_huge_free(*buf, *cap);
    *cap = 2 * need;
    *buf = tg_huge_alloc(*cap);
  }
  carver c = {(char *)(((uintptr_t)*buf + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1))};
  tg_graph *s = carve(&c, sizeof *s);
  *s = (tg_graph){.arena = NULL, .source = g->source, .mesh_sym = g->mesh_sym};
  s->nodes = carve(&c, (size_t)g->n_nodes * sizeof *s->nodes);
  tg_node *copies = carve(&c, (size_t)g->n_nodes * sizeof *copies);
  s->n_nodes = s->cap_nodes = g->n_nodes;
  /* the orphans go after everything else */
  carver rest = {c.at + in_bytes};
  s->kernels = carve(&rest, (size_t)g->n_kernels * sizeof *s->kernels);
  s->config = carve(&rest, (size_t)g->n_config * sizeof *s->config);
  s->outputs = carve(&rest, (size_t)g->n_outputs * sizeof *s->outputs);
  carver *orphan = &rest;
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    s->nodes[k] = n ? &copies[k] : NULL;
    if (!n) continue;
    copies[k] = *n;
    copies[k].id = k;
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *n = g->nodes[k];
    if (!n) continue;
    copies[k].in = n->nin > 0 ? carve(&c, (size_t)n->nin * sizeof *n->in) : NULL;
    for (int i = 0; i < n->nin; i++) copies[k].in[i] = copied(g, copies, n->in[i], orphan);
  }
  /* a kernel's name and kind: its node lists are derived, not printed */
  for (int k = 0; k < g->n_kernels; k++)
    s->kernels[k] = (tg_kernel){.name = g->kernels[k].name, .kind = g->kernels[k].kind};
  s->n_kernels = s->cap_kernels = g->n_kernels;
  if (g->n_config) memcpy(s->config, g->config, (size_t)g->n_config * sizeof *s->config);
  s->n_config = s->cap_config = g->n_config;
  for (int i = 0; i < g->n_outputs; i++)
    s->outputs[i] = (tg_output){g->outputs[i].name, copied(g, copies, g->outputs[i].node, orphan)};
  s->n_outputs = s->cap_outputs = g->n_outputs;
  return s;
}
