/* passes.h: the compiler's passes, one file and one entry point each.
 *
 * A pass takes the graph and extends or rewrites it.  Errors (a model that
 * cannot be differentiated, say) are reported through ctx and bail. */
#ifndef TG_PASSES_H
#define TG_PASSES_H

#include "findings.h" /* what the passes decided, for their reports */
#include "ir.h"
#include "names.h" /* the inputs, outputs and prefixes the passes add */
#include "shard.h" /* ZeRO's shards: TG_SHARD_ALIGN */

/* pad_vocab.c: pads every dim whose symbol is "vocab" to a multiple of
 * `multiple` (<= 1: nothing) and masks the padded logits to -inf after each
 * matmul that makes them, so that the loss and the real parameters'
 * gradients are those of the unpadded graph.  Runs on the forward graph,
 * before autodiff.  The config keeps the true vocab (see tg_dim_unpadded). */
void tg_pad_vocab(tg_ctx *ctx, tg_graph *g, int multiple);

#define TG_VOCAB_SYM "vocab"
/* What tgc and tgrun pad to unless told otherwise: 50257 -> 50304. */
enum { TG_PAD_MULTIPLE_DEFAULT = 64 };

/* autodiff.c: appends the gradient of the scalar output "loss" with respect
 * to every parameter, in IR ops (each op's rule is named in ops.def), and
 * adds an output "grad:NAME" per parameter, in parameter order.  A
 * parameter the loss does not depend on gets a zero gradient. */
void tg_autodiff(tg_ctx *ctx, tg_graph *g);

/* The output holding param's gradient (after autodiff), or NULL. */
tg_node *tg_gradient_of(const tg_graph *g, const tg_node *param);
/* The parameter name of a gradient output's name ("grad:wte.weight" ->
 * "wte.weight"), or NULL when name is no gradient output's. */
const char *tg_gradient_param_name(const char *output_name);

typedef struct tg_adamw_opts {
  double beta1, beta2, eps;
  double weight_decay; /* decoupled; applied to parameters of rank >= 2 only */
  double grad_clip;    /* clip the global gradient norm to this; 0: no clipping */
  /* parameters whose bf16 copy the step writes besides those the graph's
   * forward reads (tg_hoist_param_copies): an optimizer-only graph's;
   * NULL-terminated names, or NULL */
  const char *const *copies;
  /* the parameters to decay, NULL-terminated names; NULL: those of rank
   * >= 2.  A ZeRO optimizer's parameters are flattened shards, all of rank
   * 1, and name the decayed ones */
  const char *const *decayed;
  /* > 1: the gradients are this rank's shards of norm_ranks ranks' (a ZeRO
   * optimizer's): the global norm's sum of squares is summed over the
   * ranks by an all_reduce of the IR, inside the graph; 0 or 1: the
   * graph's gradients are all of them */
  int norm_ranks;
  /* > 1: tensor parallelism over this many ranks (shard_tensor.c): a
   * parameter split across them (init.split) holds a part of the model's,
   * whose squares are summed over the tensor ranks; a replicated one is
   * the same on every rank and counted once */
  int tensor_ranks;
} tg_adamw_opts;

/* nanoGPT's defaults: betas (0.9, 0.95), eps 1e-8, weight decay 0.1, clip 1. */
extern const tg_adamw_opts tg_adamw_defaults;

/* What the optimizer keeps for one parameter: the leaves a runtime binds
 * to its own buffers, found by identity rather than by their names. */
typedef struct tg_adamw_slot {
  tg_node *param;
  tg_node *grad;    /* the gradient the step reads (an output of autodiff,
                     * or an input of an optimizer-only graph) */
  tg_node *m, *v;   /* the moments: state leaves */
  tg_node *copy;    /* the parameter's bf16 copy the step rewrites, or NULL */
} tg_adamw_slot;

/* adamw.c: appends one AdamW step after autodiff: the global gradient norm
 * (output "grad_norm"), clipping, the moments as state leaves named
 * "adam.m.NAME" and "adam.v.NAME" (the names checkpoints keep them under),
 * and assigns of the new parameters and moments.  The learning rate and
 * the 1-based step number are run-time inputs "lr" and "step" (f32
 * scalars).  Returns one slot per parameter, in graph order (in the
 * arena), and their count in *n_slots (may be NULL). */
tg_adamw_slot *tg_append_adamw(tg_ctx *ctx, tg_graph *g, const tg_adamw_opts *opts, int *n_slots);

/* flash_attn.c: replaces each causal self-attention written from primitive
 * ops (softmax of masked, scaled q @ kᵀ, times v; see models/std.tg) by a
 * flash_attention op and the flash_attention_lse it saves for the
 * backward.  Runs on the forward graph, before autodiff.  When findings
 * is not NULL, records each match and each near miss (an attention
 * look-alike that is not replaced, with the reason), then a count. */
void tg_flash_attn(tg_ctx *ctx, tg_graph *g, tg_findings *findings);

/* gelu.c: replaces each GELU written from primitive ops (the tanh form of
 * models/std.tg) by one gelu op, whose derivative autodiff writes as one
 * gelu_grad op.  Runs on the forward graph, before autodiff.  When
 * findings is not NULL, records each match, then a count. */
void tg_gelu(tg_ctx *ctx, tg_graph *g, tg_findings *findings);

/* precision.c: the mixed-precision policy.  With TG_PRECISION_BF16, casts
 * on the forward graph (before autodiff) make matmuls, attention and the
 * activations they save bf16, and keep parameters, reductions, the loss
 * and the residual stream f32 (the rules: precision.c's table).  When
 * findings is not NULL, records each value's dtype and the rule that chose
 * it, and how many values each rule chose.  A no-op for TG_PRECISION_F32, or on a graph with a backward. */
typedef enum tg_precision_policy { TG_PRECISION_F32, TG_PRECISION_BF16 } tg_precision_policy;
/* "f32" or "bf16" to a policy (false for anything else), and back. */
bool tg_precision_parse(const char *s, tg_precision_policy *out);
const char *tg_precision_name(tg_precision_policy p);
void tg_apply_precision(tg_ctx *ctx, tg_graph *g, tg_precision_policy policy, tg_findings *findings);

/* A parameter's bf16 copy: a state leaf "bf16.NAME" that the forward reads
 * instead of casting the parameter each time, written once per optimizer
 * step (the adamw pass; the training loop's optimizer graph). */
typedef struct tg_param_copy {
  tg_node *param, *copy;
} tg_param_copy;
/* Turns every forward cast of a parameter (precision's weight copies) into
 * such a state leaf, in place; returns the pairs (in the arena) and their
 * count in *n (may be NULL).  Runs after autodiff, which differentiates
 * through the casts, and before adamw, which writes the copies.  Whoever
 * runs the graph must fill each copy with its parameter, rounded, before
 * the first run (a graph without the optimizer only reads them). */
tg_param_copy *tg_hoist_param_copies(tg_ctx *ctx, tg_graph *g, int *n);
/* After autodiff: each backward op that reads a forward widening cast
 * (bf16 -> f32) reads its own cast of the bf16 value instead, so what the
 * forward saves for the backward is the bf16 value (half the bytes) and
 * the forward's f32 widening stays in registers.  Returns how many casts
 * it made. */
int tg_narrow_saved(tg_ctx *ctx, tg_graph *g);
/* The copy state leaf of param in g, or NULL. */
tg_node *tg_param_copy_of(const tg_graph *g, const tg_node *param);
/* ZeRO stage 3 over `ranks` ranks (shard_params.c): every weight leaf the
 * graph reads (parameters, their bf16 copies) read from this rank's
 * shard, an input leaf "shard:NAME" of tg_shard_elements elements, through
 * an all_gather before its forward readers and another before its
 * backward readers; each "grad:NAME" output becomes this rank's block of
 * the gradient summed over the ranks ([S] f32, a reduce_scatter).  After
 * weight_copies and narrow_saved, before the lowering passes; no optimizer
 * in the graph.  ranks < 2: nothing. */
void tg_shard_params(tg_ctx *ctx, tg_graph *g, int ranks);

/* Tensor parallelism (shard_tensor.c): the forward cut to tensor rank
 * `rank`'s parts of the parameters the model marks "shard", over the
 * "mesh tensor = N" axis, with the forward's collectives placed and
 * replicate markers where autodiff must sum a gradient over the ranks.
 * Nothing when the model declares no mesh or N = 1.  Records, when
 * findings is given, each split parameter and value and each collective
 * (the "sharding" report). */
void tg_shard_tensor(tg_ctx *ctx, tg_graph *g, int rank, tg_findings *findings);
/* The replicate markers dropped (their readers read their inputs), once
 * autodiff has read them. */
void tg_drop_replicates(tg_ctx *ctx, tg_graph *g);
/* The tensor axis's ranks the model declares ("mesh tensor = N"), 1 when none. */
int tg_tensor_degree(const tg_graph *g);
/* The shard leaf of weight leaf `leaf` (by name), or NULL. */
tg_node *tg_shard_of(const tg_graph *g, const tg_node *leaf);

/* split_sums.c: every sum over several axes (of size > 1) becomes a sum
 * over all but its first, then a sum over that one, so that GPU kernels
 * have parallelism (a bias gradient: over T, then over B); the second
 * stages move down to just before their first reader, together.  Returns
 * how many sums it split.  Runs before fuse.  A column sum of a value a
 * backward row reduction also walks (layernorm's dγ, dβ) is split into
 * groups of TG_ROW_GROUP rows instead, for the fuse pass's row-group
 * kernels: 16 rows a group keeps GPT-2's B·T = 16,384 rows on 1,024 GPU
 * blocks (at least 4 per SM of an H100's 132). */
enum { TG_ROW_GROUP = 16 };
int tg_split_sums(tg_ctx *ctx, tg_graph *g);

/* fuse.c: groups the training step's ops into kernels (node->kernel and
 * g->kernels, see ir.h): layernorms, softmax + cross-entropy with its
 * backward, matmul epilogues, the optimizer as multi-tensor kernels.  Runs
 * last, on the whole step.  When findings is not NULL, records a finding
 * per kernel (ops with their .tg lines, bytes read and written, bytes
 * unfused), every place fusion stopped and why, and totals. */
void tg_fuse(tg_ctx *ctx, tg_graph *g, tg_findings *findings);

/* memplan.c: plans the memory of the fused step's intermediates (ir.h:
 * tg_mem_plan) and stores the plan in g->memplan.  Runs after fuse.  The
 * lifetimes are found and checked here; the placement (offsets, arena
 * size), which costs buffers squared, is made when asked for
 * (tg_memplan_placed): the generated code places its own buffers
 * (codegen's lowering), so emitting code never needs this one's offsets.
 * When findings is not NULL, places, and records the totals and a finding
 * per buffer. */
void tg_memplan(tg_ctx *ctx, tg_graph *g, tg_findings *findings);
/* g->memplan placed (once) and its placement checked: the planned peak of
 * g's intermediates, for the memory check before a run. */
const tg_mem_plan *tg_memplan_placed(tg_ctx *ctx, tg_graph *g);
/* The plan of a fused graph, placed, made in g's arena; deterministic. */
tg_mem_plan *tg_memplan_compute(tg_graph *g);
/* Places buffers whose node, lifetime and bytes are given (bytes rounded
 * up to the alignment here), by the same best fit: sets each offset and
 * arena_bytes.  For a plan made after the pass (codegen's lowering, once
 * it has chosen which values are recomputed). */
void tg_memplan_place(tg_mem_plan *p);
/* Whether a plan is sound for g: one buffer per kernel output, lifetimes
 * as the kernels say, and, once placed, every buffer aligned and inside the
 * arena, and no two buffers with overlapping lifetimes overlapping in
 * memory.  On failure writes why and returns false. */
bool tg_memplan_check(const tg_graph *g, const tg_mem_plan *p, char *why, size_t whylen);
/* The plan's totals as fields of a finding (peak_bytes, unreused_bytes,
 * persistent_bytes): "peak memory X (intermediates, planned) vs Y without
 * reuse; parameters and state Z" in the reports (fusion's too). */
void tg_memplan_record_totals(tg_findings *s, tg_finding *f, const tg_mem_plan *p);
/* Bytes as reports print them: "3072 B", "12.5 kB", "497.8 MB", "14.93 GB". */
void tg_memplan_format_bytes(char *buf, size_t n, int64_t b);

/* zero_plan.c: what one rank of N keeps under ZeRO stage S (0: plain data
 * parallelism; 1: AdamW's moments and the f32 master weights sharded; 2:
 * the gradient accumulators too; 3: the parameters too, gathered a layer
 * at a time), from the training step after the pipeline (its parameters,
 * the adamw slots' state leaves and memplan's peak).  Each parameter is
 * flattened and split into N equal shards of a multiple of
 * TG_ZERO_SHARD_ALIGN elements, so the bytes are exact, padding included.
 * Only a plan: the collectives and the sharded optimizer are not built
 * (docs/parallel.md). */
enum { TG_ZERO_SHARD_ALIGN = TG_SHARD_ALIGN, TG_ZERO_MAX_STAGE = 3 };
typedef struct tg_zero_plan {
  int ranks;
  int stage;                /* as planned: 0 whatever was asked when ranks == 1 */
  int n_params;             /* parameter tensors */
  int64_t n_elements;       /* their elements (Psi) */
  /* per rank, in bytes: */
  int64_t master_bytes;     /* f32 parameters (whole or this rank's shards) */
  int64_t copy_bytes;       /* their bf16 copies (precision bf16) */
  int64_t gathered_bytes;   /* stage 3: the whole forward weights of the two
                             * largest layers, one computing, one arriving */
  int64_t grad_bytes;       /* the f32 gradient accumulators */
  int64_t optimizer_bytes;  /* AdamW's two moments */
  int64_t other_bytes;      /* the other leaves (inputs, lr, step): not sharded */
  int64_t activation_bytes; /* the intermediates that die within the step,
                             * placed as memplan places them */
  int64_t peak_bytes;       /* all of the above at once */
  /* not per rank, not in the peak: */
  int64_t step_arena_bytes;   /* memplan's planned peak of the whole step */
  int64_t step_outputs_bytes; /* its buffers that outlive the step (the
                               * gradients, the optimizer's new values) */
  const char *gathered[2];  /* stage 3: the layers gathered_bytes is for */
} tg_zero_plan;
/* Fills *out for g (after the pipeline, with the optimizer: memplan placed
 * here if it was not yet).  False, with why, for a stage outside 0..3,
 * fewer than one rank, or a graph without the optimizer's moments. */
bool tg_zero_plan_make(tg_ctx *ctx, tg_graph *g, int ranks, int stage, tg_zero_plan *out, char *why, size_t whylen);
/* The per-rank summary of p next to ddp (the same ranks at stage 0). */
void tg_zero_plan_print(FILE *out, const tg_zero_plan *p, const tg_zero_plan *ddp);

/* schedule.c: buckets of gradients for data parallelism, each all-reduced
 * right after the kernel that produces its last gradient (ir.h:
 * tg_allreduce_plan), stored in g->allreduce.  Runs after fuse on a graph
 * with gradients.  A bucket closes once it holds bucket_bytes (<= 0: the
 * default, 4 MiB) or at the backward's end.  When findings is not NULL,
 * records each bucket with its gradients, and the tensor axis's
 * collectives. */
enum { TG_BUCKET_BYTES_DEFAULT = 4 << 20 };
void tg_schedule_allreduce(tg_ctx *ctx, tg_graph *g, int64_t bucket_bytes, tg_findings *findings);

/* collectives.c: every collective of one training step on N data-parallel
 * ranks at ZeRO stage S, in step order, with the bytes each rank sends
 * (ring algorithms on base/shard.h's shards) and the kernels it overlaps:
 * stage 0 all-reduces each bucket of g->allreduce; stages 1 and 2
 * reduce-scatter each bucket and all-gather the updated weights the
 * forward reads (bf16 copies or f32) after the optimizer; stage 3 reduce-scatters each bucket and all-gathers
 * each layer's weights before the forward and again before the backward
 * reads them; stages 1 to 3 also all-reduce the gradient norm's scalar.
 * tgc --report schedule --ranks N --zero S prints it after the buckets. */
typedef enum tg_collective_kind { TG_ALL_REDUCE, TG_REDUCE_SCATTER, TG_ALL_GATHER } tg_collective_kind;
const char *tg_collective_kind_name(tg_collective_kind k); /* "all_reduce", "reduce_scatter", "all_gather" */
typedef enum tg_collective_what {
  TG_COLLECTIVE_BUCKET,         /* a bucket's gradients */
  TG_COLLECTIVE_PARAMETERS,     /* the weights the forward reads, updated (stages 1, 2) */
  TG_COLLECTIVE_NORM,           /* the gradient norm's sum of squares (a scalar) */
  TG_COLLECTIVE_LAYER_FORWARD,  /* stage 3: a layer's weights the forward reads */
  TG_COLLECTIVE_LAYER_BACKWARD, /* ... and those the backward reads */
  TG_COLLECTIVE_GRADIENT,       /* stage 3 as placed: one parameter's gradient (tg_collectives_placed) */
} tg_collective_what;
typedef struct tg_collective {
  tg_collective_kind kind;
  tg_collective_what what;
  int bucket;          /* TG_COLLECTIVE_BUCKET: its index in g->allreduce; else -1 */
  const char *layer;   /* the layers': "h.3", "wte.weight"; else NULL */
  int n_tensors;
  int64_t bytes_in;    /* the tensors' bytes, whole */
  int64_t bytes_sent;  /* what each rank sends (0 on one rank) */
  uint32_t dtypes;     /* bit (1 << tg_dtype) per dtype of its tensors */
  /* kernel positions: it starts once kernel start - 1 is done and its
   * result is first read by kernel needed (n_kernels: the step's end);
   * the kernels start .. needed - 1 run while it is in flight */
  int start, needed;
} tg_collective;
typedef struct tg_collective_plan {
  int ranks, stage;    /* stage: 0 whatever was asked when ranks == 1 */
  tg_collective *collectives; /* in the graph's arena, ordered by start */
  int n_collectives;
  int64_t bytes_sent;  /* per rank and step, the scalar norm's left out */
  bool bf16_copies;    /* the step has bf16 copies */
  bool placed;         /* tg_collectives_placed: read off a sharded graph, not planned */
} tg_collective_plan;
/* Fills *out for g (after the schedule pass).  False, with why, for a
 * stage outside 0..3, fewer than one rank, or a graph without buckets. */
bool tg_collectives_plan(const tg_graph *g, int ranks, int stage, tg_collective_plan *out, char *why, size_t whylen);
/* Stage 3 as tgrun runs it: the collectives of g, the gradient graph
 * sharded over `ranks` (tg_shard_params, after the lowering passes), in
 * kernel order: each weight's gathers (layer: the weight's name) from the
 * kernel before them to their first reader, each gradient's
 * reduce-scatter, and the optimizer's norm (a scalar: listed, not counted). */
void tg_collectives_placed(const tg_graph *g, int ranks, tg_collective_plan *out);
/* A line per collective of p, then its total next to ddp's (the same
 * ranks at stage 0). */
void tg_collectives_print(FILE *out, const tg_graph *g, const tg_collective_plan *p, const tg_collective_plan *ddp);
/* The tensor axis's collectives of a fused graph (tensor parallelism), a
 * finding each ("collective", of pass) with the bytes a rank sends;
 * nothing when there are none.  Part of the schedule report. */
void tg_tensor_collectives_record(tg_findings *s, const char *pass, const tg_graph *g);
/* Their bytes a rank sends a micro-step, and (into *n) how many. */
double tg_tensor_collective_bytes(const tg_graph *g, int *n);
/* What tg_zero_plan_make and tg_collectives_plan ask of their arguments:
 * false, with why, for a stage outside 0..TG_ZERO_MAX_STAGE or fewer than
 * one rank. */
bool tg_zero_args_valid(int ranks, int stage, char *why, size_t whylen);
/* The length of a parameter name's layer prefix, up to and including its
 * first all-digit component ("h.3.attn.c_attn.weight": 3, "h.3"), else
 * the whole name: how ZeRO stage 3 groups parameters into layers. */
size_t tg_param_layer_len(const char *name);

/* decode.c: the forward graph (compiled at T = 1, after flash_attn, no
 * backward) as one decode step with a key/value cache: a new input "pos"
 * (i32 [1], the token's position) replaces the position table's iota;
 * each flash_attention becomes a write of its k and v into row pos of
 * state leaves "kv.k.L" and "kv.v.L" [..., S, D] (S: the position table's
 * rows, or fewer: positions below) and the one query's attention over rows 0 .. pos; the only output
 * is "logits".  Anything else over positions is refused with its .tg line.
 * See decode.c for the rewrite. */
void tg_decode(tg_ctx *ctx, tg_graph *g, int64_t positions);
/* positions > 0: the caches hold that many rows, at most the table's: a
 * sample of a 16-token prompt and 256 new tokens needs 272 of GPT-2's
 * 1024, and the step's attention multiplies and masks every row of the
 * caches, a quarter of a token's time at 1024.  (0: the table's rows.)
 * tg_decode_context: the decode step's position table's rows, the model's
 * context (the caches may hold fewer); 0 if g is no decode step. */
int64_t tg_decode_context(const tg_graph *g);

/* The reports passes write (tgc --report NAME; pipeline.c's table says
 * which pass writes which). */
#define TG_REPORT_FLASH_ATTN "flash_attn"
#define TG_REPORT_GELU "gelu"
#define TG_REPORT_PRECISION "precision"
#define TG_REPORT_FUSION "fusion"
#define TG_REPORT_MEMPLAN "memplan"
#define TG_REPORT_SCHEDULE "schedule"
#define TG_REPORT_SHARDING "sharding"

/* What tg_run_pipeline records of each pass it runs, when asked (tgc
 * --report html shows it): the graph's size before and after, its kernels
 * after, and the time it took.  A pass that bailed (an error) is the last
 * entry, with seconds < 0: the passes that ran, and where it stopped. */
enum { TG_PASS_LOG_MAX = 32 };
typedef struct tg_pass_record {
  const char *name;
  int nodes_before, nodes_after, kernels_after;
  double seconds;
} tg_pass_record;
typedef struct tg_pass_log {
  int n;
  tg_pass_record at[TG_PASS_LOG_MAX];
} tg_pass_log;

/* pipeline.c: every pass after the frontend, in order. */
struct tg_pass_info;
typedef struct tg_pipeline_opts {
  tg_precision_policy precision; /* f32 (the default) or bf16 (precision.c) */
  bool grad;              /* add the backward (autodiff) */
  bool step;              /* ... and the optimizer: the whole training step */
  bool decode;            /* the forward as a decode step (decode.c); not with grad */
  int64_t decode_positions; /* decode: the caches' rows (tg_decode); 0: the position table's */
  bool kernels;           /* run the lowering passes (TG_PASS_FOR_KERNELS) even
                           * without the gradient (a forward graph that code
                           * generation will run) */
  tg_adamw_opts adamw;
  int pad_multiple;       /* pad_vocab's multiple; 0 or 1: no padding */
  int tensor_rank;        /* this rank's place on the mesh's tensor axis (shard_tensor.c) */
  bool no_tensor_split;   /* shard_tensor does nothing: the model whole, as weights files hold
                           * it, or a graph of parts already (an optimizer built on them) */
  int shard_ranks;        /* > 1: ZeRO stage 3 over this many ranks (shard_params.c);
                           * not with step (stage 3's optimizer is a graph apart) */
  const char *dump_after; /* print the IR after this pass (to dump) */
  FILE *dump;
  const char *report_name; /* the report to print (to report; TG_REPORT_*), or NULL: its
                           * text (findings_text.c), once its pass is done */
  FILE *report;
  tg_findings *findings;  /* NULL, or where every pass records what it decided
                           * (findings.h; tgc --report html) */
  tg_pass_log *log;       /* NULL, or where each pass's size and time go */
  /* NULL, or called after each pass, its graph verified (tgc --report
   * html keeps the IR after every pass) */
  void (*after_pass)(void *arg, const struct tg_pass_info *pass, const tg_graph *g);
  void *after_arg;
} tg_pipeline_opts;

void tg_run_pipeline(tg_ctx *ctx, tg_graph *g, const tg_pipeline_opts *opts);

/* When a pass runs. */
typedef enum tg_pass_when {
  TG_PASS_ALWAYS,
  TG_PASS_FOR_GRAD,    /* only when the gradient is asked for */
  TG_PASS_FOR_STEP,    /* only for the whole training step (the optimizer) */
  TG_PASS_FOR_DECODE,  /* only for a decode step */
  TG_PASS_FOR_KERNELS, /* lowering to kernels: with the gradient, or for a
                        * forward graph code generation will run (kernels) */
  TG_PASS_FOR_SHARDS,  /* ZeRO stage 3: shard_ranks > 1 */
} tg_pass_when;

/* One row of pipeline.c's table, for those who name passes (tgc's
 * --dump-after and --report). */
typedef struct tg_pass_info {
  const char *name;   /* --dump-after NAME */
  tg_pass_when when;
  const char *report; /* the report it writes (TG_REPORT_*), or NULL */
  const char *what;   /* what it does, in a few words */
} tg_pass_info;

const tg_pass_info *tg_pass_at(int i);             /* the i-th pass, or NULL past the last */
const tg_pass_info *tg_pass_named(const char *name); /* or NULL */
const tg_pass_info *tg_pass_writing(const char *report); /* the pass writing that report, or NULL */
/* Whether a pass runs only on a training graph (the gradient, the optimizer
 * or the lowering of the training step). */
bool tg_pass_for_training(const tg_pass_info *p);

#endif
