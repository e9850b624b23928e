/* decode.c: turns the model's forward graph into one decode step with a
 * key/value cache, for generating text a token at a time.
 *
 * Why: a forward over the whole context for every generated token costs
 * O(T) matmul work per token in every layer and recomputes every earlier
 * position's keys and values.  A decode step computes one position: its
 * query, key and value, writes the key and value into per-layer caches
 * kept between steps (state leaves, as adamw.c keeps the moments), and
 * attends from the one query to the cached keys 0 .. pos.
 *
 * Input: the forward graph compiled at T = 1 (tgc --decode and tgrun
 * sample set -D T=1), after flash_attn, without a backward.  What is found,
 * structurally:
 *   - the value named `logits` (what sampling reads): the step's output;
 *   - the position embedding: a gather from a parameter table [S, ...] by
 *     iota([T], 0); S (its rows, block_size in models/gpt2.tg) is the
 *     caches' length, the longest context;
 *   - each attention as flash_attention(q, k, v, lse) with q, k, v
 *     [..., 1, D] (the flash_attn pass recognises models/std.tg's
 *     causal_attention and its spellings).
 * The rewrite:
 *   - iota([T], 0) becomes a new input `pos` (i32 [1]): the position of
 *     the token in `idx`;
 *   - each flash_attention becomes, with caches kv.k.L and kv.v.L
 *     [..., S, D] (state leaves, zeros at first; S rows, or fewer when
 *     the caller asks: tgrun sample sizes them to the prompt and the new
 *     tokens, since the step below costs O(S) whatever pos is) and
 *     at = (iota over S == pos):
 *         k' = assign(kv.k.L, where(at, k, kv.k.L))
 *         v' = assign(kv.v.L, where(at, v, kv.v.L))
 *         s  = where(iota over S <= pos, (q @ k'ᵀ) * scale, -inf)
 *         y  = softmax(s) @ v'
 *     which is O(S) per step (the caches are rewritten whole by the
 *     where), and the same softmax as the forward's up to rounding;
 *   - the graph keeps only what `logits` needs (the loss and targets go);
 *     the outputs are `logits` alone.
 * Anything else that mixes positions would make the step wrong, so it is
 * refused with the .tg line: any other iota over the position axis (an
 * attention flash_attn did not recognise keeps its iota mask), a
 * reduction over it, a model without a position table. */
#include <math.h>
#include <string.h>

#include "passes.h"

typedef struct dec {
  tg_ctx *ctx;
  tg_graph *g;
  tg_node *pos;        /* the new input */
  const char *pos_sym; /* the position axis' symbol ("T"), or NULL */
  int64_t S;           /* the cache length: the position table's rows */
  const tg_dim *S_dim;
  int n_attn;
} dec;

static tg_node *add(dec *D, tg_node *n, const tg_loc loc) {
  n->phase = TG_PHASE_FORWARD;
  const char *why = tg_graph_add(D->g, n);
  if (why) tg_error(D->ctx, loc, "decode: internal error: %s", why);
  return n;
}

static tg_node *op1(dec *D, tg_op op, tg_node *a, tg_loc loc) {
  tg_node *n = tg_node_new(D->g, op, loc);
  tg_node_set_inputs(D->g, n, 1, &a);
  return add(D, n, loc);
}

static tg_node *op2(dec *D, tg_op op, tg_node *a, tg_node *b, tg_loc loc) {
  tg_node *n = tg_node_new(D->g, op, loc);
  tg_node_set_inputs(D->g, n, 2, (tg_node *[]){a, b});
  return add(D, n, loc);
}

static tg_node *where(dec *D, tg_node *c, tg_node *a, tg_node *b, tg_loc loc) {
  tg_node *n = tg_node_new(D->g, TG_OP_where, loc);
  tg_node_set_inputs(D->g, n, 3, (tg_node *[]){c, a, b});
  return add(D, n, loc);
}

static tg_node *cst(dec *D, double v, tg_loc loc) {
  tg_node *n = tg_node_new(D->g, TG_OP_const, loc);
  n->value = v;
  n->type = (tg_type){.dtype = TG_F32};
  return add(D, n, loc);
}

static tg_node *reduce(dec *D, tg_op op, tg_node *x, tg_loc loc) {
  tg_node *n = tg_node_new(D->g, op, loc);
  tg_node_set_inputs(D->g, n, 1, &x);
  n->axes = 1u << (x->type.rank - 1);
  return add(D, n, loc);
}

/* iota along `axis` of an i32 tensor of `rank` dims, all 1 but S there. */
static tg_node *iota_S(dec *D, int rank, int axis, tg_loc loc) {
  tg_node *n = tg_node_new(D->g, TG_OP_iota, loc);
  n->axis = axis;
  n->type = (tg_type){.dtype = TG_I32, .rank = rank};
  for (int i = 0; i < rank; i++) n->type.dim[i] = (tg_dim){1, NULL};
  n->type.dim[axis] = *D->S_dim;
  return add(D, n, loc);
}

/* pos as a [1, ..., 1] of `rank` dims, to compare with iota_S. */
static tg_node *pos_as(dec *D, int rank, tg_loc loc) {
  tg_node *n = tg_node_new(D->g, TG_OP_reshape, loc);
  tg_node_set_inputs(D->g, n, 1, &D->pos);
  n->type = (tg_type){.dtype = TG_I32, .rank = rank};
  for (int i = 0; i < rank; i++) n->type.dim[i] = (tg_dim){1, NULL};
  return add(D, n, loc);
}

static const char *where_str(dec *D, const tg_node *n) {
  return tg_sprintf(D->ctx->arena, "%s:%d", n->loc.file ? n->loc.file : "?", n->loc.line);
}

/* The replacement of flash_attention(q, k, v, lse) (inputs already mapped). */
static tg_node *cached_attention(dec *D, const tg_node *fa, tg_node *q, tg_node *k, tg_node *v) {
  tg_loc loc = fa->loc;
  int r = q->type.rank;
  if (r < 2 || q->type.dim[r - 2].size != 1 || !tg_type_equal(&q->type, &k->type) ||
      !tg_type_equal(&q->type, &v->type))
    tg_error(D->ctx, loc, "decode: this attention's q, k, v are not one query each ([..., 1, D] alike); "
             "the decode step needs the model compiled at T = 1");
  int L = D->n_attn++;
  tg_type ct = k->type;
  ct.dim[r - 2] = *D->S_dim;
  tg_node *cache[2];
  for (int i = 0; i < 2; i++) {
    tg_node *s = tg_node_new(D->g, TG_OP_state, loc);
    s->name = tg_sprintf(D->ctx->arena, "%s%d", i ? TG_DECODE_V_PREFIX : TG_DECODE_K_PREFIX, L);
    s->type = ct;
    s->init = (tg_init){.kind = TG_INIT_ZEROS, .std = 0};
    cache[i] = add(D, s, loc);
  }
  /* the new key and value into row pos of the caches */
  tg_node *at = op2(D, TG_OP_eq, iota_S(D, r, r - 2, loc), pos_as(D, r, loc), loc);
  tg_node *k2 = where(D, at, k, cache[0], loc);
  tg_node *v2 = where(D, at, v, cache[1], loc);
  /* the attention reads the assigns (their value is k', v'): code
   * generation keeps an assign's value in its leaf, so with the where in
   * the same kernel (fuse.c) each cache is updated in place, one pass,
   * and no copy of it is made */
  k2 = op2(D, TG_OP_assign, cache[0], k2, loc);
  v2 = op2(D, TG_OP_assign, cache[1], v2, loc);
  /* the query against keys 0 .. pos */
  tg_node *kt = tg_node_new(D->g, TG_OP_transpose, loc);
  tg_node_set_inputs(D->g, kt, 1, &k2);
  for (int i = 0; i < r; i++) kt->perm[i] = i;
  kt->perm[r - 2] = r - 1, kt->perm[r - 1] = r - 2;
  add(D, kt, loc);
  tg_node *s = op2(D, TG_OP_mul, op2(D, TG_OP_matmul, q, kt, loc), cst(D, fa->value, loc), loc);
  tg_node *seen = op2(D, TG_OP_le, iota_S(D, r, r - 1, loc), pos_as(D, r, loc), loc);
  s = where(D, seen, s, cst(D, -INFINITY, loc), loc);
  tg_node *e = op1(D, TG_OP_exp, op2(D, TG_OP_sub, s, reduce(D, TG_OP_max, s, loc), loc), loc);
  tg_node *p = op2(D, TG_OP_div, e, reduce(D, TG_OP_sum, e, loc), loc);
  tg_node *y = op2(D, TG_OP_matmul, p, v2, loc);
  y->name = fa->name;
  return y;
}

static bool has_sym(const tg_type *t, const char *sym, unsigned axes) {
  if (!sym) return false;
  for (int i = 0; i < t->rank; i++)
    if ((axes >> i & 1u) && t->dim[i].sym && !strcmp(t->dim[i].sym, sym)) return true;
  return false;
}

void tg_decode(tg_ctx *ctx, tg_graph *g, int64_t positions) {
  dec D = {ctx, g, NULL, NULL, 0, NULL, 0};
  tg_loc top = {g->source, 1, 1};
  int n = g->n_nodes;
  tg_node **old = g->nodes;

  tg_node *logits = NULL;
  for (int i = 0; i < n; i++) {
    const tg_node *x = old[i];
    if (x->phase != TG_PHASE_FORWARD)
      tg_error(ctx, x->loc, "decode: the graph has a %s part; the decode step is made from the forward graph alone "
               "(no --grad)", tg_phase_name(x->phase));
    if (x->name && !strcmp(x->name, TG_OUTPUT_LOGITS) && x->op != TG_OP_input && x->op != TG_OP_param) logits = old[i];
    if ((x->op == TG_OP_input || x->op == TG_OP_state) && x->name && !strcmp(x->name, TG_INPUT_POS))
      tg_error(ctx, x->loc, "decode: the model has its own %s 'pos', the name of the decode step's position input; "
               "rename it", tg_ops[x->op].name);
  }
  if (!logits)
    tg_error(ctx, top, "decode: the model names no value 'logits' [B, T, vocab] (the head's output, what sampling reads)");

  /* what logits needs */
  bool *need = tg_alloc(ctx->arena, (size_t)n + 1);
  need[logits->id] = true;
  for (int i = n - 1; i >= 0; i--)
    if (need[i])
      for (int k = 0; k < old[i]->nin; k++) need[old[i]->in[k]->id] = true;

  /* the position table and its iota */
  tg_node *pos_iota = NULL;
  for (int i = 0; i < n; i++) {
    tg_node *x = old[i];
    if (!need[i] || x->op != TG_OP_gather || x->in[0]->op != TG_OP_param || x->in[1]->op != TG_OP_iota) continue;
    tg_node *io = x->in[1];
    if (io->type.rank != 1)
      tg_error(ctx, io->loc, "decode: the positions here are an iota of rank %d; the decode pass understands a "
               "position table read by iota([T], 0)", io->type.rank);
    if (pos_iota && pos_iota != io)
      tg_error(ctx, io->loc, "decode: a second position-table lookup (the first is at %s); the decode pass "
               "understands one", where_str(&D, pos_iota));
    if (io->type.dim[0].size != 1)
      tg_error(ctx, io->loc, "decode: the positions here are %lld long; the decode step is compiled with T = 1 "
               "(tgc --decode and tgrun sample set it; a -D T=... of your own must be 1)",
               (long long)io->type.dim[0].size);
    pos_iota = io;
    D.S = x->in[0]->type.dim[0].size;
    D.S_dim = &x->in[0]->type.dim[0];
    D.pos_sym = io->type.dim[0].sym;
  }
  if (!pos_iota)
    tg_error(ctx, logits->loc, "decode: no position embedding found (a gather from a parameter table by "
             "iota([T], 0), as models/gpt2.tg's wpe): the decode step needs the model's positions");
  if (positions > 0 && positions < D.S) { /* caches of fewer rows than the table: a dim of no symbol */
    tg_dim *rows = tg_alloc(ctx->arena, sizeof *rows);
    *rows = (tg_dim){positions, NULL};
    D.S = positions;
    D.S_dim = rows;
  }

  /* what would mix positions behind the pass's back */
  for (int i = 0; i < n; i++) {
    const tg_node *x = old[i];
    if (!need[i]) continue;
    if (x->op == TG_OP_iota && x != pos_iota && has_sym(&x->type, D.pos_sym, ~0u))
      tg_error(ctx, x->loc, "decode: an iota over the positions (%s) that the decode pass does not understand; "
               "only the position table's iota and causal attention that flash_attn recognises are "
               "(tgc --report flash_attn says why an attention was not)", D.pos_sym);
    if ((x->op == TG_OP_sum || x->op == TG_OP_max) && has_sym(&x->in[0]->type, D.pos_sym, x->axes))
      tg_error(ctx, x->loc, "decode: a %s over the positions (%s): one position at a time cannot compute it",
               tg_ops[x->op].name, D.pos_sym);
  }

  /* rebuild: the kept nodes in order, with the replacements */
  g->nodes = NULL;
  g->n_nodes = g->cap_nodes = 0;
  tg_node **map = tg_alloc(ctx->arena, sizeof *map * ((size_t)n + 1));
  D.pos = tg_node_new(g, TG_OP_input, pos_iota->loc);
  D.pos->name = TG_INPUT_POS;
  D.pos->type = pos_iota->type;
  add(&D, D.pos, pos_iota->loc);
  for (int i = 0; i < n; i++) {
    tg_node *x = old[i];
    if (!need[i]) continue;
    if (x == pos_iota) {
      map[i] = D.pos;
    } else if (x->op == TG_OP_flash_attention_lse) {
      map[i] = NULL; /* only flash_attention reads it; its replacement does not */
    } else if (x->op == TG_OP_flash_attention) {
      tg_node *qkv[3];
      for (int k = 0; k < 3; k++) {
        tg_node *y = x->in[k];
        qkv[k] = y == pos_iota || y->op == TG_OP_flash_attention ? map[y->id] : y;
      }
      map[i] = cached_attention(&D, x, qkv[0], qkv[1], qkv[2]);
    } else {
      for (int k = 0; k < x->nin; k++) {
        /* a kept node is its own replacement (and has its new id by now);
         * only replaced nodes keep their old ids, the index into map */
        tg_node *y = x->in[k];
        bool replaced = y == pos_iota || y->op == TG_OP_flash_attention || y->op == TG_OP_flash_attention_lse;
        tg_node *m = replaced ? map[y->id] : y;
        if (!m)
          tg_error(ctx, x->loc, "decode: this %s reads attention's saved statistics; the decode pass cannot "
                   "keep them", tg_ops[x->op].name);
        x->in[k] = m;
      }
      map[i] = add(&D, x, x->loc);
    }
  }
  if (D.n_attn == 0)
    tg_error(ctx, logits->loc, "decode: no causal attention found (flash_attention after the flash_attn pass; "
             "tgc --report flash_attn says why one was not recognised)");
  g->n_outputs = 0;
  tg_graph_add_output(g, TG_OUTPUT_LOGITS, logits->op == TG_OP_flash_attention ? map[logits->id] : logits);
}

int64_t tg_decode_context(const tg_graph *g) {
  const tg_node *pos = tg_graph_leaf(g, TG_OP_input, TG_INPUT_POS);
  for (int i = 0; pos && i < g->n_nodes; i++) {
    const tg_node *x = g->nodes[i];
    if (x->op != TG_OP_gather || x->nin != 2 || x->in[1] != pos) continue;
    const tg_node *table = x->in[0];
    while (table->op == TG_OP_cast && table->nin == 1) table = table->in[0]; /* a table read in another dtype */
    if (table->op == TG_OP_param) return table->type.dim[0].size;
  }
  return 0;
}
