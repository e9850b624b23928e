/* graph.c: building graphs node by node.
 *
 * Nodes are appended in construction order, which is a topological order
 * because a node can only name nodes that already exist. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* The graph's arrays live in the arena like its nodes, so that an error's
 * longjmp out of any pass leaks nothing.  Doubling wastes at most as much
 * as the final array holds. */
static void *grow(tg_arena *a, void *old, int n, int *cap, size_t elem) {
  *cap = *cap ? *cap * 2 : 64;
  void *p = tg_alloc(a, (size_t)*cap * elem);
  if (n) memcpy(p, old, (size_t)n * elem);
  return p;
}

tg_graph *tg_graph_new(tg_arena *arena) {
  tg_graph *g = tg_alloc(arena, sizeof *g);
  g->arena = arena;
  return g;
}

/* Everything is in the arena; this only marks the graph as done with, so
 * that a use after it fails loudly. */
void tg_graph_free(tg_graph *g) {
  if (!g) return;
  g->nodes = NULL;
  g->config = NULL;
  g->outputs = NULL;
  g->n_nodes = g->n_config = g->n_outputs = 0;
}

tg_node *tg_node_new(tg_graph *g, tg_op op, tg_loc loc) {
  tg_node *n = tg_alloc(g->arena, sizeof *n);
  n->op = op;
  n->id = -1;
  n->kernel = -1;
  n->loc = loc;
  return n;
}

void tg_node_set_inputs(tg_graph *g, tg_node *n, int nin, tg_node *const *in) {
  n->nin = nin;
  n->in = tg_alloc(g->arena, sizeof(tg_node *) * (size_t)(nin ? nin : 1));
  if (nin) memcpy(n->in, in, sizeof(tg_node *) * (size_t)nin);
}

const char *tg_graph_add(tg_graph *g, tg_node *n) {
  char why[600];
  tg_type t;
  if (!tg_infer_type(n, &t, why, sizeof why)) return tg_strdup(g->arena, why);
  n->type = t;
  if (g->n_nodes == g->cap_nodes)
    g->nodes = grow(g->arena, g->nodes, g->n_nodes, &g->cap_nodes, sizeof *g->nodes);
  n->id = g->n_nodes;
  g->nodes[g->n_nodes++] = n;
  return NULL;
}

void tg_graph_set_config(tg_graph *g, const char *name, double value) {
  for (int i = 0; i < g->n_config; i++)
    if (strcmp(g->config[i].name, name) == 0) {
      g->config[i].value = value;
      return;
    }
  if (g->n_config == g->cap_config)
    g->config = grow(g->arena, g->config, g->n_config, &g->cap_config, sizeof *g->config);
  g->config[g->n_config++] = (tg_config_entry){tg_strdup(g->arena, name), value};
}

bool tg_graph_get_config(const tg_graph *g, const char *name, double *value) {
  for (int i = 0; i < g->n_config; i++)
    if (strcmp(g->config[i].name, name) == 0) {
      *value = g->config[i].value;
      return true;
    }
  return false;
}

int64_t tg_dim_unpadded(const tg_graph *g, const tg_dim *d) {
  double v;
  if (d->sym && tg_graph_get_config(g, d->sym, &v) && v >= 1 && v < (double)d->size)
    return (int64_t)v;
  return d->size;
}

void tg_graph_add_output(tg_graph *g, const char *name, tg_node *node) {
  if (g->n_outputs == g->cap_outputs)
    g->outputs = grow(g->arena, g->outputs, g->n_outputs, &g->cap_outputs, sizeof *g->outputs);
  g->outputs[g->n_outputs++] = (tg_output){tg_strdup(g->arena, name), node};
}

tg_node *tg_graph_output(const tg_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, name)) return g->outputs[i].node;
  return NULL;
}

tg_node *tg_graph_leaf(const tg_graph *g, tg_op op, const char *name) {
  for (int i = 0; i < g->n_nodes; i++) {
    tg_node *n = g->nodes[i];
    if (n->op == op && n->name && !strcmp(n->name, name)) return n;
  }
  return NULL;
}
