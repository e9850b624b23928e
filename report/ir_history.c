/* ir_history.c: the IR after each pass, for the page (report.h:
 * tg_ir_history).
 *
 * GPT-2's IR is half a megabyte of text after the last passes; printed
 * after each of 14 passes and packed, it was most of what tgc --report
 * html cost over --emit cuda (issue 28 allows a tenth), and on a 2-core
 * machine a thread doing it beside the passes slowed them as much.  Most
 * passes change a few nodes, but the text's numbers shift with every node
 * added or removed, so the text of one pass shares little with the last.
 * So the page holds, a pass, the order of the nodes and only the nodes
 * new or changed since the pass before, each as its line's pieces (ir.h:
 * tg_ir_pieces) with its inputs by a number the node keeps from pass to
 * pass; the page's script joins them into the text when a pass is opened.
 *   - a pass that changed nothing the text shows (memplan and schedule
 *     never do; sharding without a mesh does nothing) keeps nothing: the
 *     graph's fingerprint is the last one's;
 *   - a node is written again only when its line's fingerprint
 *     (tg_ir_node_fingerprint) changed; the kernels are kept apart, a
 *     list in the nodes' order (fuse changes every node's and nothing
 *     else);
 *   - what is kept lives in large blocks of transparent huge pages
 *     (alloc.h: tg_huge_alloc): a page fault for 2 MB, not 4 KB. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "report.h"

enum { BLOCK = 4 << 20 };

typedef struct block {
  struct block *next;
  size_t used, size;
} block;

struct tg_ir_history {
  tg_report_ir at[TG_PASS_LOG_MAX];
  int n;
  uint64_t last_fingerprint;
  tg_ir_pieces *pieces;
  block *blocks; /* what at[] points to, the newest first */
  /* the nodes' numbers: their addresses, hashed (open addressing) */
  const tg_node **key;
  int *id;
  size_t slots, used;
  /* by number: the fingerprint of the line last kept, and whether one was */
  uint64_t *line;
  unsigned char *kept;
  int n_ids, cap_ids;
  /* one pass's nodes' fingerprints, by position (tg_ir_fingerprint_nodes) */
  uint64_t *this_pass;
  int cap_this_pass;
  /* one pass's changed nodes, before they are copied into a block */
  tg_report_ir_node *changed;
  int cap_changed;
};

/* n bytes, 16-byte aligned, of a block (not zeroed) */
static void *take(tg_ir_history *h, size_t n) {
  n = (n + 15) & ~(size_t)15;
  block *b = h->blocks;
  if (!b || b->used + n > b->size) {
    size_t size = n + sizeof(block) + 16 > BLOCK ? n + sizeof(block) + 16 : BLOCK;
    b = tg_huge_alloc(size);
    b->size = size;
    b->used = (sizeof(block) + 15) & ~(size_t)15;
    b->next = h->blocks;
    h->blocks = b;
  }
  void *p = (char *)b + b->used;
  b->used += n;
  return p;
}

static const char *kept_text(tg_ir_history *h, const char *s, size_t n) {
  char *c = take(h, n + 1);
  memcpy(c, s, n);
  c[n] = 0;
  return c;
}

static size_t slot_of(const tg_node *n, size_t slots) {
  uint64_t x = (uint64_t)(uintptr_t)n * 0x9E3779B97F4A7C15ULL;
  return (size_t)(x >> 20) & (slots - 1);
}

static void grow_map(tg_ir_history *h) {
  size_t slots = h->slots ? 2 * h->slots : 1 << 13;
  const tg_node **key = tg_xcalloc(slots, sizeof *key);
  int *id = tg_xmalloc(slots * sizeof *id);
  for (size_t i = 0; i < h->slots; i++) {
    if (!h->key[i]) continue;
    size_t s = slot_of(h->key[i], slots);
    while (key[s]) s = (s + 1) & (slots - 1);
    key[s] = h->key[i];
    id[s] = h->id[i];
  }
  free(h->key);
  free(h->id);
  h->key = key;
  h->id = id;
  h->slots = slots;
}

/* n's number: the one it was given when first seen; -1 for NULL */
static int number(tg_ir_history *h, const tg_node *n) {
  if (!n) return -1;
  if (2 * (h->used + 1) > h->slots) grow_map(h);
  size_t s = slot_of(n, h->slots);
  while (h->key[s] && h->key[s] != n) s = (s + 1) & (h->slots - 1);
  if (h->key[s]) return h->id[s];
  if (h->n_ids == h->cap_ids) {
    h->cap_ids = h->cap_ids ? 2 * h->cap_ids : 1 << 12;
    h->line = tg_xrealloc(h->line, (size_t)h->cap_ids * sizeof *h->line);
    h->kept = tg_xrealloc(h->kept, (size_t)h->cap_ids);
  }
  h->kept[h->n_ids] = 0;
  h->key[s] = n;
  h->used++;
  return h->id[s] = h->n_ids++;
}

tg_ir_history *tg_ir_history_new(void) {
  tg_ir_history *h = tg_xcalloc(1, sizeof *h);
  h->pieces = tg_ir_pieces_new();
  return h;
}

/* node (number id) as its line's pieces, in a block */
static tg_report_ir_node changed_node(tg_ir_history *h, const tg_node *node, int id) {
  size_t len;
  bool valid = (unsigned)node->op < TG_NOPS;
  const char *op = valid ? tg_ops[node->op].name : NULL;
  if (!valid) {
    const char *spelled = tg_ir_node_op(h->pieces, node, &len);
    op = kept_text(h, spelled, len);
  }
  int nin = valid ? node->nin : 0; /* "<op N>" is all of its line */
  int *in = nin ? take(h, (size_t)nin * sizeof *in) : NULL;
  for (int i = 0; i < nin; i++) in[i] = number(h, node->in[i]);
  const char *piece = tg_ir_node_middle(h->pieces, node, &len);
  const char *middle = kept_text(h, piece, len);
  piece = tg_ir_node_place(h->pieces, node, &len);
  return (tg_report_ir_node){id, (int)node->phase, op, in, nin, middle, kept_text(h, piece, len)};
}

void tg_ir_history_keep(tg_ir_history *h, const char *pass, const tg_graph *g) {
  if (h->n >= TG_PASS_LOG_MAX) return;
  tg_report_ir *e = &h->at[h->n++];
  *e = (tg_report_ir){.pass = pass};
  if (h->cap_this_pass < g->n_nodes) {
    h->cap_this_pass = g->n_nodes;
    h->this_pass = tg_xrealloc(h->this_pass, (size_t)h->cap_this_pass * sizeof *h->this_pass);
  }
  uint64_t fingerprint = tg_ir_fingerprint_nodes(g, h->this_pass);
  if (h->n > 1 && fingerprint == h->last_fingerprint) {
    e->same = true;
    return;
  }
  h->last_fingerprint = fingerprint;
  size_t len;
  const char *head = tg_ir_head(h->pieces, g, &len);
  const tg_report_ir *last = h->n > 1 ? &h->at[h->n - 2] : NULL;
  while (last && last->same) last--;
  e->head = last && !strcmp(last->head, head) ? last->head : kept_text(h, head, len);
  int *order = take(h, (size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *order);
  int *kernel = take(h, (size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *kernel);
  int n_changed = 0;
  for (int k = 0; k < g->n_nodes; k++) {
    const tg_node *node = g->nodes[k];
    int id = order[k] = number(h, node);
    kernel[k] = node ? node->kernel : -1;
    if (id < 0) continue;
    uint64_t line = h->this_pass[k];
    if (h->kept[id] && h->line[id] == line) continue;
    h->kept[id] = 1;
    h->line[id] = line;
    if (n_changed == h->cap_changed) {
      h->cap_changed = h->cap_changed ? 2 * h->cap_changed : 1 << 12;
      h->changed = tg_xrealloc(h->changed, (size_t)h->cap_changed * sizeof *h->changed);
    }
    h->changed[n_changed++] = changed_node(h, node, id);
  }
  tg_report_ir_node *changed = n_changed ? take(h, (size_t)n_changed * sizeof *changed) : NULL;
  if (n_changed) memcpy(changed, h->changed, (size_t)n_changed * sizeof *changed);
  tg_report_ir_output *outputs = g->n_outputs ? take(h, (size_t)g->n_outputs * sizeof *outputs) : NULL;
  for (int i = 0; i < g->n_outputs; i++) {
    const char *name = tg_ir_quoted(h->pieces, g->outputs[i].name, &len);
    outputs[i] = (tg_report_ir_output){kept_text(h, name, len), number(h, g->outputs[i].node)};
  }
  e->order = order;
  e->kernel = kernel;
  e->n_order = g->n_nodes;
  e->changed = changed;
  e->n_changed = n_changed;
  e->outputs = outputs;
  e->n_outputs = g->n_outputs;
}

const tg_report_ir *tg_ir_history_done(tg_ir_history *h, int *n) {
  *n = h->n;
  return h->n ? h->at : NULL;
}

void tg_ir_history_free(tg_ir_history *h) {
  if (!h) return;
  for (block *b = h->blocks, *next; b; b = next) {
    next = b->next;
    tg_huge_free(b, b->size);
  }
  tg_ir_pieces_free(h->pieces);
  free(h->key);
  free(h->id);
  free(h->line);
  free(h->kept);
  free(h->changed);
  free(h->this_pass);
  free(h);
}
