/* collectives.c: every collective of one data-parallel training step under
 * ZeRO's stages, with the bytes each rank sends and the kernels it overlaps
 * (tgc --report schedule --ranks N --zero S; docs/parallel.md).
 *
 * The bytes are those of ring algorithms, NCCL's for large messages: on a
 * ring of N ranks a reduce-scatter passes N - 1 blocks along (each rank
 * sends every block but the one it ends up owning), an all-gather the same,
 * and an all-reduce is a reduce-scatter followed by an all-gather, 2(N - 1)
 * blocks.  The blocks are base/shard.h's shards (each tensor cut into N of
 * ceil(numel / N) elements, rounded up to TG_SHARD_ALIGN), the shards the
 * ZeRO runtime reduces and gathers (equal counts, as NCCL's collectives
 * take).  Stage 0's all-reduce is counted on the same shards: NCCL would
 * cut a bucket into N chunks of its own, which differs by the padding
 * (under 128 elements per tensor per rank), and counting every stage on
 * one layout leaves only the stages' own difference, which is the point.
 * So, with Psi the parameters' bytes (f32: gradients and master weights
 * alike), per rank and step:
 *
 *   stage 0     all-reduce of every bucket                        2 Psi (N-1)/N
 *   stage 1, 2  reduce-scatter of every bucket at the same point,
 *               all-gather of the updated weights                 2 Psi (N-1)/N
 *   stage 3     reduce-scatter of every bucket, and each layer's
 *               weights gathered for the forward and again for
 *               the backward                                      3 Psi (N-1)/N
 *
 * as the ZeRO paper counts (Rajbhandari et al. 2020, section 7): stages 1
 * and 2 move what DDP moves, stage 3 half as much again.  At precision
 * bf16 the gradients stay f32 but what is gathered is what the forward
 * reads, mostly bf16 copies (half the bytes), so stages 1 to 3 move less
 * than the paper's count: GPT-2 124M's stages 1 and 2 0.91 times stage
 * 0's bytes and stage 3 1.16 times (the forward reads wte, a third of
 * the parameters, twice: as f32 in the embedding's gather, as its bf16
 * copy in the logits' matmul).
 *
 * Where each goes, from the kernels (their nodes' phases) and the schedule
 * pass's buckets (g->allreduce):
 *   - a bucket's all-reduce or reduce-scatter starts after the kernel that
 *     produces its last gradient and overlaps every kernel up to the first
 *     that reads one of its gradients: the optimizer's (the norm's squares
 *     or the update), so up to the backward's end;
 *   - the step is one micro-step; with several, stage 2 reduce-scatters
 *     every micro-step's buckets (it keeps no whole accumulator), stages 0
 *     and 1 the last one's only;
 *   - stages 1 and 2 all-gather, after the optimizer, every weight the
 *     forward reads, as it reads it: a bf16 copy (its f32 master stays
 *     sharded, as the memory plan keeps it) or the f32 value (at precision
 *     f32, all of them).  Nothing of the step is left to overlap: the next
 *     step's first kernel reads them;
 *   - stage 3 gathers a layer (the parameters whose names share the prefix
 *     up to the first number, "h.3"; any other a layer of its own, as
 *     zero_plan.c's memory plan groups them) before the first forward
 *     kernel that reads its weights, the tensors the forward reads (a
 *     bf16 copy, or the f32 value, or both: GPT-2's wte), and again
 *     before the first backward kernel that reads them, only the tensors
 *     the backward reads (a bias's gradient needs no bias).  A layer the
 *     forward reads at two points (GPT-2's tied wte: the embedding, the
 *     logits) is gathered once for both.  Each gather is issued when the
 *     layer before it starts computing, so it overlaps that layer's
 *     kernels: one layer computing, the next one's weights arriving (the
 *     memory plan's two gathered layers).
 *   - with sharded gradients (stages 1 to 3) clipping needs the norm of
 *     all of them: each rank's sum of squares over its shards is summed
 *     over the ranks, a scalar all-reduce (the sharded optimizer's).  It is
 *     listed but not in the byte totals: a scalar costs latency, not
 *     bandwidth. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

size_t tg_param_layer_len(const char *name) {
  const char *c = name;
  for (;;) {
    const char *end = strchr(c, '.');
    size_t len = end ? (size_t)(end - c) : strlen(c);
    bool digits = len > 0;
    for (size_t i = 0; i < len; i++) digits &= isdigit((unsigned char)c[i]) != 0;
    if (digits) return (size_t)(c - name) + len;
    if (!end) return strlen(name);
    c = end + 1;
  }
}

const char *tg_collective_kind_name(tg_collective_kind k) {
  switch (k) {
  case TG_ALL_REDUCE: return "all_reduce";
  case TG_REDUCE_SCATTER: return "reduce_scatter";
  case TG_ALL_GATHER: return "all_gather";
  }
  return "?";
}

/* One rank's block of a tensor of node n's type: its shard's bytes. */
static int64_t shard_bytes(const tg_node *n, int ranks) {
  return tg_shard_elements(tg_type_numel(&n->type), ranks) * tg_dtype_size(n->type.dtype);
}

static int64_t whole_bytes(const tg_node *n) { return tg_type_numel(&n->type) * tg_dtype_size(n->type.dtype); }

/* The ring's blocks per rank: N - 1 for a reduce-scatter or an all-gather,
 * twice that for an all-reduce. */
static int64_t ring_blocks(tg_collective_kind k, int ranks) {
  return (k == TG_ALL_REDUCE ? 2 : 1) * (int64_t)(ranks - 1);
}

/* A tensor more in collective c: its bytes, and its shard's (times the
 * ring's blocks once all are in). */
static void add_tensor(tg_collective *c, const tg_node *n, int ranks) {
  c->n_tensors++;
  c->bytes_in += whole_bytes(n);
  c->bytes_sent += shard_bytes(n, ranks);
  c->dtypes |= 1u << n->type.dtype;
}

/* A stage 3 layer: its name, and per phase (TG_PHASE_FORWARD, _BACKWARD)
 * the gather of the weights that phase reads, needed by the first kernel
 * that reads one (-1: none). */
typedef struct layer_use {
  const char *name;
  size_t len;
  tg_collective gather[2];
} layer_use;

typedef struct planner {
  const tg_graph *g;
  int ranks;
  tg_collective *cs; /* room for every bucket, two per parameter and two more */
  int n;
} planner;

static void add(planner *p, tg_collective c) { p->cs[p->n++] = c; }

/* The first kernel from `from` on that reads one of the values nodes[0 ..
 * n) (graph positions), or n_kernels. */
static int first_reader(const tg_graph *g, int from, const int *nodes, int n) {
  for (int k = from; k < g->n_kernels; k++)
    for (int i = 0; i < g->kernels[k].n_inputs; i++)
      for (int j = 0; j < n; j++)
        if (g->kernels[k].inputs[i] == nodes[j]) return k;
  return g->n_kernels;
}

/* Each bucket's all-reduce or reduce-scatter, from after the kernel that
 * closes it to the first kernel that reads one of its gradients (the
 * optimizer's norm or update: the backward's end). */
static void add_buckets(planner *p, tg_collective_kind kind) {
  const tg_allreduce_plan *ar = p->g->allreduce;
  for (int b = 0; b < ar->n_buckets; b++) {
    const tg_bucket *B = &ar->buckets[b];
    int start = B->after_kernel + 1;
    tg_collective c = {kind, TG_COLLECTIVE_BUCKET, b, NULL, 0, 0, 0, 0, start,
                       first_reader(p->g, start, B->grads, B->n_grads)};
    for (int k = 0; k < B->n_grads; k++) add_tensor(&c, p->g->nodes[B->grads[k]], p->ranks);
    c.bytes_sent *= ring_blocks(kind, p->ranks);
    add(p, c);
  }
}

/* Stages 1 to 3: the gradient norm's scalar all-reduce, between the kernel
 * that sums the squares and the first that reads the sum. */
static void add_norm_reduce(planner *p) {
  const tg_graph *g = p->g;
  const tg_node *norm = NULL;
  for (int i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, TG_OUTPUT_GRAD_NORM)) norm = tg_kernel_base(g->outputs[i].node);
  /* what the ranks add is the sum of squares under the norm's root
   * (adamw.c: sqrt(total)), which the update's kernel may take */
  if (norm && norm->op == TG_OP_sqrt) norm = tg_kernel_base(norm->in[0]);
  if (!norm || norm->kernel < 0) return;
  /* the runtime sums the ranks' squares as one double on the host */
  add(p, (tg_collective){TG_ALL_REDUCE, TG_COLLECTIVE_NORM, -1, NULL, 1, 8, 0, 0, norm->kernel + 1,
                         first_reader(g, norm->kernel + 1, &norm->id, 1)});
}

/* Stage 3's layers, from which kernels read which parameter's forward
 * weight (its bf16 copy where the step has one). */
static layer_use *find_layer_uses(const tg_graph *g, int ranks, int *n_layers) {
  int n_params = 0;
  for (int i = 0; i < g->n_nodes; i++) n_params += g->nodes[i]->op == TG_OP_param;
  layer_use *ls = tg_alloc(g->arena, sizeof *ls * (size_t)(n_params + 1));
  int *layer_of = tg_alloc(g->arena, sizeof *layer_of * (size_t)g->n_nodes); /* per weight node, or -1 */
  for (int i = 0; i < g->n_nodes; i++) layer_of[i] = -1;
  *n_layers = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const tg_node *n = g->nodes[i];
    if (n->op != TG_OP_param) continue;
    size_t len = tg_param_layer_len(n->name);
    int l = 0;
    while (l < *n_layers && !(ls[l].len == len && !strncmp(ls[l].name, n->name, len))) l++;
    if (l == *n_layers) {
      const char *name = tg_sprintf(g->arena, "%.*s", (int)len, n->name);
      ls[(*n_layers)++] = (layer_use){n->name, len,
                                      {{TG_ALL_GATHER, TG_COLLECTIVE_LAYER_FORWARD, -1, name, 0, 0, 0, 0, 0, -1},
                                       {TG_ALL_GATHER, TG_COLLECTIVE_LAYER_BACKWARD, -1, name, 0, 0, 0, 0, 0, -1}}};
    }
    layer_of[n->id] = l;
    const tg_node *copy = tg_param_copy_of(g, n);
    if (copy) layer_of[copy->id] = l;
  }
  /* each weight once per phase: the first kernel that reads it */
  bool *seen = tg_alloc(g->arena, sizeof *seen * (size_t)g->n_nodes * 2);
  memset(seen, 0, sizeof *seen * (size_t)g->n_nodes * 2);
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    for (int j = 0; j < K->n_nodes; j++) {
      const tg_node *n = g->nodes[K->nodes[j]];
      if (n->phase != TG_PHASE_FORWARD && n->phase != TG_PHASE_BACKWARD) continue;
      for (int i = 0; i < n->nin; i++) {
        const tg_node *w = tg_kernel_base(n->in[i]);
        int l = layer_of[w->id];
        if (l < 0 || seen[(size_t)w->id * 2 + n->phase]) continue;
        seen[(size_t)w->id * 2 + n->phase] = true;
        tg_collective *c = &ls[l].gather[n->phase];
        if (c->needed < 0) c->needed = k; /* kernels in run order */
        add_tensor(c, w, ranks);
      }
    }
  }
  return ls;
}

/* Stages 1 and 2: after the optimizer, each rank's updated shard of every
 * weight the forward reads, to every rank: the f32 value where the forward
 * reads that, the bf16 copy where it reads the copy (whose f32 master then
 * stays sharded, as zero_plan.c plans it). */
static void add_weights_gather(planner *p) {
  const tg_graph *g = p->g;
  int n_layers;
  const layer_use *ls = find_layer_uses(g, p->ranks, &n_layers);
  tg_collective c = {TG_ALL_GATHER, TG_COLLECTIVE_PARAMETERS, -1, NULL, 0, 0, 0, 0, g->n_kernels, g->n_kernels};
  for (int l = 0; l < n_layers; l++) {
    const tg_collective *f = &ls[l].gather[TG_PHASE_FORWARD];
    c.n_tensors += f->n_tensors;
    c.bytes_in += f->bytes_in;
    c.bytes_sent += f->bytes_sent;
    c.dtypes |= f->dtypes;
  }
  c.bytes_sent *= ring_blocks(TG_ALL_GATHER, p->ranks);
  add(p, c);
}

/* The order gathers are needed in: by kernel, forward before backward,
 * then in parameter order (made in that order: ties keep it). */
static int by_needed(const void *a, const void *b) {
  const tg_collective *x = *(const tg_collective *const *)a, *y = *(const tg_collective *const *)b;
  if (x->needed != y->needed) return x->needed < y->needed ? -1 : 1;
  if (x->what != y->what) return x->what < y->what ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* Stage 3: a gather per layer and phase that reads its weights, in the
 * order they are needed, each issued when the one before is needed. */
static void add_layer_gathers(planner *p) {
  int n_layers;
  layer_use *ls = find_layer_uses(p->g, p->ranks, &n_layers);
  tg_collective **at = tg_alloc(p->g->arena, sizeof *at * (size_t)(2 * n_layers + 1));
  int n = 0;
  for (int l = 0; l < n_layers; l++)
    for (int ph = TG_PHASE_FORWARD; ph <= TG_PHASE_BACKWARD; ph++)
      if (ls[l].gather[ph].needed >= 0) at[n++] = &ls[l].gather[ph];
  qsort(at, (size_t)n, sizeof *at, by_needed);
  int start = 0;
  for (int i = 0; i < n; i++) {
    at[i]->start = start;
    at[i]->bytes_sent *= ring_blocks(TG_ALL_GATHER, p->ranks);
    add(p, *at[i]);
    start = at[i]->needed;
  }
}

/* Whether x comes after y in the step: it starts later, or as y does but
 * is needed later. */
static bool comes_after(const tg_collective *x, const tg_collective *y) {
  return x->start != y->start ? x->start > y->start : x->needed > y->needed;
}

bool tg_zero_args_valid(int ranks, int stage, char *why, size_t whylen) {
  if (stage < 0 || stage > TG_ZERO_MAX_STAGE) {
    snprintf(why, whylen, "no ZeRO stage %d: the stages are 0 (plain data parallelism) to %d", stage, TG_ZERO_MAX_STAGE);
    return false;
  }
  if (ranks < 1) {
    snprintf(why, whylen, "%d ranks: a run has at least one", ranks);
    return false;
  }
  return true;
}

bool tg_collectives_plan(const tg_graph *g, int ranks, int stage, tg_collective_plan *out, char *why, size_t whylen) {
  *out = (tg_collective_plan){0};
  if (!tg_zero_args_valid(ranks, stage, why, whylen)) return false;
  if (!g->allreduce) {
    snprintf(why, whylen, "the graph has no gradient buckets: the collectives are of a training step after the "
                          "schedule pass");
    return false;
  }
  out->ranks = ranks;
  out->stage = ranks == 1 ? 0 : stage; /* one rank has nothing to shard */
  for (int i = 0; i < g->n_nodes && !out->bf16_copies; i++)
    out->bf16_copies = g->nodes[i]->op == TG_OP_state && g->nodes[i]->name &&
                       !strncmp(g->nodes[i]->name, TG_BF16_COPY_PREFIX, strlen(TG_BF16_COPY_PREFIX));
  int n_params = 0;
  for (int i = 0; i < g->n_nodes; i++) n_params += g->nodes[i]->op == TG_OP_param;
  planner p = {g, ranks, tg_alloc(g->arena, sizeof(tg_collective) * (size_t)(g->allreduce->n_buckets + 2 * n_params + 2)),
               0};
  add_buckets(&p, out->stage == 0 ? TG_ALL_REDUCE : TG_REDUCE_SCATTER);
  if (out->stage >= 1) add_norm_reduce(&p);
  if (out->stage == 1 || out->stage == 2) add_weights_gather(&p);
  if (out->stage == 3) add_layer_gathers(&p);
  /* step order: by where each starts (an insertion sort: stable, so ties
   * keep the order they were made in) */
  for (int i = 1; i < p.n; i++) {
    tg_collective c = p.cs[i];
    int j = i;
    for (; j > 0 && comes_after(&p.cs[j - 1], &c); j--) p.cs[j] = p.cs[j - 1];
    p.cs[j] = c;
  }
  out->collectives = p.cs;
  out->n_collectives = p.n;
  for (int i = 0; i < p.n; i++)
    if (p.cs[i].what != TG_COLLECTIVE_NORM) out->bytes_sent += p.cs[i].bytes_sent;
  return true;
}

void tg_collectives_placed(const tg_graph *g, int ranks, tg_collective_plan *out) {
  *out = (tg_collective_plan){.ranks = ranks, .stage = 3, .placed = true};
  planner p = {g, ranks, tg_alloc(g->arena, sizeof(tg_collective) * (size_t)(g->n_kernels + 2)), 0};
  size_t np = strlen(TG_SHARD_PREFIX);
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_kernel *K = &g->kernels[k];
    const tg_node *n = K->n_nodes == 1 ? g->nodes[K->nodes[0]] : NULL;
    if (!n || !tg_op_is_collective(n->op)) continue;
    const tg_node *x = tg_kernel_base(n->in[0]);
    int64_t elem = tg_dtype_size(n->type.dtype), in_numel = tg_type_numel(&n->in[0]->type);
    tg_collective c = {.kind = n->op == TG_OP_all_gather ? TG_ALL_GATHER
                               : n->op == TG_OP_reduce_scatter ? TG_REDUCE_SCATTER : TG_ALL_REDUCE,
                       .bucket = -1, .n_tensors = 1, .dtypes = 1u << n->type.dtype, .start = k + 1};
    if (n->op == TG_OP_all_gather) {
      bool shard = x->name && !strncmp(x->name, TG_SHARD_PREFIX, np);
      c.what = n->phase == TG_PHASE_FORWARD ? TG_COLLECTIVE_LAYER_FORWARD : TG_COLLECTIVE_LAYER_BACKWARD;
      c.layer = shard ? x->name + np : "a value";
      c.bytes_in = tg_type_numel(&n->type) * elem;
      c.bytes_sent = in_numel * elem * ring_blocks(c.kind, ranks);
    } else {
      c.what = TG_COLLECTIVE_GRADIENT;
      c.layer = "a value";
      for (int o = 0; o < g->n_outputs; o++)
        if (tg_kernel_base(g->outputs[o].node) == n && tg_gradient_param_name(g->outputs[o].name))
          c.layer = tg_gradient_param_name(g->outputs[o].name);
      c.bytes_in = in_numel * elem;
      c.bytes_sent = tg_type_numel(&n->type) * elem * ring_blocks(c.kind, ranks);
    }
    /* a gather from a shard leaf runs under the kernels up to its reader;
     * a reduce-scatter's input is an intermediate whose memory later
     * kernels may reuse, so the step waits for it at once (the CUDA
     * backend: enqueue_ir_collective) */
    c.needed = n->op == TG_OP_all_gather && x->op == TG_OP_input ? first_reader(g, k + 1, &n->id, 1) : k + 1;
    add(&p, c);
  }
  /* the optimizer's graph sums the ranks' squares with an all_reduce of its own */
  p.cs[p.n++] = (tg_collective){TG_ALL_REDUCE, TG_COLLECTIVE_NORM, -1, NULL, 1, 4, 0, 1u << TG_F32, g->n_kernels,
                                g->n_kernels};
  out->collectives = p.cs;
  out->n_collectives = p.n;
  for (int i = 0; i < p.n; i++)
    if (p.cs[i].what != TG_COLLECTIVE_NORM) out->bytes_sent += p.cs[i].bytes_sent;
}

/* "f32", "bf16", "bf16 and f32": the dtypes of a collective's tensors. */
static void dtype_list(char *buf, size_t n, uint32_t dtypes) {
  buf[0] = 0;
  const char *sep = "";
  for (int d = TG_NDTYPES - 1; d >= 0; d--) /* bf16 before f32 */
    if (dtypes & (1u << d)) {
      size_t used = strlen(buf);
      snprintf(buf + used, n - used, "%s%s", sep, tg_dtype_name((tg_dtype)d));
      sep = " and ";
    }
}

static void print_overlap(FILE *out, const tg_collective *c) {
  int n = c->needed - c->start;
  if (n <= 0) fputs("overlaps nothing", out);
  else if (n == 1) fprintf(out, "overlaps k%d (1 kernel)", c->start);
  else fprintf(out, "overlaps k%d..k%d (%d kernels)", c->start, c->needed - 1, n);
}

static void print_one(FILE *out, const tg_graph *g, const tg_collective_plan *p, const tg_collective *c) {
  char dtypes[64];
  dtype_list(dtypes, sizeof dtypes, c->dtypes);
  fprintf(out, "collective: %s ", tg_collective_kind_name(c->kind));
  switch (c->what) {
  case TG_COLLECTIVE_BUCKET:
    fprintf(out, "bucket %d: %d gradient%s, %lld bytes in, %lld bytes sent per rank", c->bucket, c->n_tensors,
            c->n_tensors == 1 ? "" : "s", (long long)c->bytes_in, (long long)c->bytes_sent);
    break;
  case TG_COLLECTIVE_PARAMETERS:
    fprintf(out, "parameters: %d tensors, %lld bytes in (the updated weights as the forward reads them, %s%s), "
            "%lld bytes sent per rank", c->n_tensors, (long long)c->bytes_in, dtypes,
            p->bf16_copies ? "; the bf16 copies' f32 masters stay sharded" : "", (long long)c->bytes_sent);
    break;
  case TG_COLLECTIVE_NORM:
    if (p->placed) {
      fputs("gradient norm: this rank's sum of squares, 4 bytes in (f32), in the optimizer's graph after this one, "
            "not in the totals (a scalar: latency, not bandwidth)\n", out);
      return;
    }
    fprintf(out, "gradient norm: this rank's sum of squares, 8 bytes in (a double), not in the totals (a scalar: "
                 "latency, not bandwidth)");
    break;
  case TG_COLLECTIVE_GRADIENT:
    fprintf(out, "gradient of %s: %lld bytes in (%s, padded to the shards), %lld bytes sent per rank", c->layer,
            (long long)c->bytes_in, dtypes, (long long)c->bytes_sent);
    break;
  case TG_COLLECTIVE_LAYER_FORWARD:
  case TG_COLLECTIVE_LAYER_BACKWARD:
    if (p->placed) {
      fprintf(out, "%s for the %s: %lld bytes gathered (%s), %lld bytes sent per rank", c->layer,
              c->what == TG_COLLECTIVE_LAYER_FORWARD ? "forward" : "backward", (long long)c->bytes_in, dtypes,
              (long long)c->bytes_sent);
      break;
    }
    fprintf(out, "layer %s for the %s: %d tensor%s, %lld bytes in (%s), %lld bytes sent per rank", c->layer,
            c->what == TG_COLLECTIVE_LAYER_FORWARD ? "forward" : "backward", c->n_tensors, c->n_tensors == 1 ? "" : "s",
            (long long)c->bytes_in, dtypes, (long long)c->bytes_sent);
    break;
  }
  /* where it is: a gather by the kernel that needs it, the rest by the
   * kernel it follows */
  bool gather = !p->placed && (c->what == TG_COLLECTIVE_LAYER_FORWARD || c->what == TG_COLLECTIVE_LAYER_BACKWARD);
  int k = gather ? c->needed : c->start - 1;
  if (p->placed && k >= 0) fprintf(out, ", kernel k%d, ", k); /* a collective is a kernel of its own there */
  else if (k >= 0 && k < g->n_kernels) fprintf(out, ", %s k%d \"%s\", ", gather ? "before" : "after", k, g->kernels[k].name);
  else fputs(", at the step's start, ", out);
  print_overlap(out, c);
  if (c->what == TG_COLLECTIVE_PARAMETERS) fputs(" (the next step's forward reads them)", out);
  if (c->what == TG_COLLECTIVE_GRADIENT) fputs(" (the step waits for it: later kernels may reuse its input's memory)", out);
  fputc('\n', out);
}

static const char *const stage_moves[] = {
    "each bucket's gradients all-reduced",
    "each bucket reduce-scattered, the updated weights all-gathered",
    "each bucket reduce-scattered, the updated weights all-gathered",
    "each bucket reduce-scattered, each layer's weights all-gathered for the forward and the backward",
};

void tg_collectives_print(FILE *out, const tg_graph *g, const tg_collective_plan *p, const tg_collective_plan *ddp) {
  const char *ring = "ring algorithms (NCCL's): a rank sends N-1 of base/shard.h's shards of the tensors for a "
                     "reduce_scatter or an all_gather, 2(N-1) for an all_reduce";
  if (p->placed)
    fprintf(out, "collective: stage 3 on %d ranks as tgrun runs it: the sharded gradient graph's own collectives "
                 "(passes/shard_params.c; its kernel numbers), each weight gathered ahead of its readers for the "
                 "forward and again for the backward, each gradient reduce-scattered; %s\n", p->ranks, ring);
  else
    fprintf(out, "collective: stage %d on %d rank%s: %s; %s\n", p->stage, p->ranks, p->ranks == 1 ? "" : "s",
            stage_moves[p->stage], ring);
  for (int i = 0; i < p->n_collectives; i++) print_one(out, g, p, &p->collectives[i]);
  fprintf(out, "collective: total per step per rank: %lld bytes sent (stage 0: %lld; ", (long long)p->bytes_sent,
          (long long)ddp->bytes_sent);
  if (ddp->bytes_sent) fprintf(out, "ratio %.3f)\n", (double)p->bytes_sent / (double)ddp->bytes_sent);
  else fputs("one rank sends nothing)\n", out);
}

/* Tensor parallelism's collectives (shard_tensor.c and their gradients'):
 * one line each, in run order, with the bytes a rank sends on a ring of
 * the tensor axis's ranks (2 (N-1)/N of the buffer for an all_reduce or an
 * all_max, (N-1)/N of the result for an all_gather), and their total per
 * micro-step.  They are on the step's critical path: each one's result is
 * read by the next kernel (an activation, not a gradient). */
static double tensor_sent(const tg_node *c) {
  int64_t elem = tg_dtype_size(c->type.dtype), numel = tg_type_numel(&c->type);
  return c->op == TG_OP_all_gather ? (double)(numel * elem) * (c->ranks - 1) / c->ranks
                                   : 2.0 * (double)(numel * elem) * (c->ranks - 1) / c->ranks;
}

static const tg_node *tensor_collective(const tg_graph *g, int k) {
  const tg_kernel *K = &g->kernels[k];
  const tg_node *c = K->n_nodes == 1 ? g->nodes[K->nodes[0]] : NULL;
  return c && tg_op_is_collective(c->op) && c->over_tensor ? c : NULL;
}

double tg_tensor_collective_bytes(const tg_graph *g, int *n) {
  double total = 0;
  *n = 0;
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_node *c = tensor_collective(g, k);
    if (c) total += tensor_sent(c), ++*n;
  }
  return total;
}

void tg_tensor_collectives_record(tg_findings *out, const char *pass, const tg_graph *g) {
  for (int k = 0; k < g->n_kernels; k++) {
    const tg_node *c = tensor_collective(g, k);
    if (!c) continue;
    tg_finding *x = tg_find(out, pass, "collective", c->id, c->loc, NULL);
    tg_finding_num(out, x, "kernel", k);
    tg_finding_text(out, x, "phase",
                    c->phase == TG_PHASE_FORWARD ? "forward" : c->phase == TG_PHASE_BACKWARD ? "backward" : "optimizer");
    tg_finding_text(out, x, "op", tg_ops[c->op].name);
    tg_finding_num(out, x, "numel", (double)tg_type_numel(&c->type));
    tg_finding_text(out, x, "dtype", tg_dtype_name(c->type.dtype));
    tg_finding_num(out, x, "sent", tensor_sent(c));
    tg_finding_num(out, x, "ranks", c->ranks);
  }
}
