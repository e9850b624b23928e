/* ir.h: the one shared header of tg's intermediate representation.
 *
 * The IR is an SSA graph: each node is one operation from the op table
 * (ops.def) with its inputs, its result type (dtype and dims, each dim
 * remembering the config symbol it came from, e.g. "vocab"), a name where
 * the source gave one, the .tg location it came from, and its attributes.
 * Nodes live in an arena (base/arena.h) and are never freed one by one: a
 * compilation allocates freely and frees everything at once with the
 * arena.  Errors are reported through a tg_ctx (base/diag.h). */
#ifndef TG_IR_H
#define TG_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "alloc.h"
#include "arena.h"
#include "diag.h"

/* ---- types ------------------------------------------------------------ */

enum { TG_MAX_RANK = 8 };
/* Largest dim and element count we accept: keeps every size computation
 * far from int64 overflow. */
#define TG_MAX_ELEMS ((int64_t)1 << 48)

typedef enum tg_dtype { TG_F32, TG_BF16, TG_F16, TG_I32, TG_BOOL, TG_NDTYPES } tg_dtype;

typedef struct tg_dim {
  int64_t size;
  const char *sym; /* the config constant this dim came from, or NULL */
} tg_dim;

typedef struct tg_type {
  tg_dtype dtype;
  int rank; /* 0 for a scalar */
  tg_dim dim[TG_MAX_RANK];
} tg_type;

const char *tg_dtype_name(tg_dtype t);
bool tg_dtype_parse(const char *s, size_t n, tg_dtype *out);
int tg_dtype_size(tg_dtype t);
bool tg_dtype_is_float(tg_dtype t);
int64_t tg_type_numel(const tg_type *t);
bool tg_type_same_shape(const tg_type *a, const tg_type *b); /* sizes only */
bool tg_type_equal(const tg_type *a, const tg_type *b);      /* dtype + sizes */
/* Whether a value of shape a broadcasts into shape b (numpy rules, dims
 * aligned from the right, a dim of 1 stretches): what fusion and lowering
 * ask of a value read inside a kernel's domain. */
bool tg_type_fits(const tg_type *a, const tg_type *b);
/* Writes "f32[B=8, T=1024, 768]"; returns buf. */
char *tg_type_str(const tg_type *t, char *buf, size_t n);
enum { TG_TYPE_STR_MAX = 512 };

/* ---- ops -------------------------------------------------------------- */

typedef enum tg_op {
#define X(name, arity, kind, attr, deriv, doc) TG_OP_##name,
#include "ops.def"
#undef X
  TG_NOPS
} tg_op;

typedef enum tg_kind {
  TG_KIND_LEAF,        /* no inputs: input, param, const, iota */
  TG_KIND_ELEMENTWISE, /* one output element from the same element of each input */
  TG_KIND_REDUCTION,   /* combines elements along axes */
  TG_KIND_MOVEMENT,    /* rearranges elements without arithmetic */
  TG_KIND_MATMUL,      /* goes to the BLAS library */
  TG_KIND_SPECIAL,     /* introduced by passes */
  TG_NKINDS
} tg_kind;

typedef enum tg_attr_kind {
  TG_ATTR_NONE,
  TG_ATTR_NAME,  /* input: only the node's name */
  TG_ATTR_INIT,  /* param: initialiser */
  TG_ATTR_VALUE, /* const: value */
  TG_ATTR_AXIS,  /* iota, concat: axis */
  TG_ATTR_AXES,  /* reductions: bit set of axes */
  TG_ATTR_PERM,  /* transpose: permutation */
  TG_ATTR_SLICE, /* slice: axis, start, len */
  TG_ATTR_DTYPE, /* cast: target dtype (the result's dtype) */
  TG_ATTR_RANKS, /* collectives: the group size N */
} tg_attr_kind;

typedef struct tg_op_info {
  const char *name;
  int arity; /* -1: variadic */
  tg_kind kind;
  tg_attr_kind attr;
  const char *doc;
} tg_op_info;

extern const tg_op_info tg_ops[TG_NOPS];
const char *tg_kind_name(tg_kind k);
bool tg_op_lookup(const char *name, size_t n, tg_op *out);
/* Op groups (as tinygrad's GroupOp): the flash_attention family (the
 * forward, its saved lse, the three backward ops), one special kernel each
 * in fusion and code generation, and bf16 throughout under precision. */
bool tg_op_is_flash_attention(tg_op op);
/* The collectives (all_reduce, all_gather, reduce_scatter): a kernel of
 * their own in fusion, refused by code generation, run over runtime/comm
 * by the reference interpreter. */
bool tg_op_is_collective(tg_op op);

/* ---- nodes and graphs ------------------------------------------------- */

typedef enum tg_init_kind { TG_INIT_ZEROS, TG_INIT_ONES, TG_INIT_NORMAL } tg_init_kind;

/* How a parameter is split across the ranks of the tensor axis of the
 * mesh (tensor parallelism, passes/shard_tensor.c; docs/language.md's
 * "shard"): not at all, by its last axis, by its first, or by its first as a
 * vocabulary (an embedding table that is also the head).  groups > 1 cuts
 * the split axis into that many equal parts first and splits each (a fused
 * q, k, v projection: each rank takes its heads of all three). */
typedef enum tg_split { TG_SPLIT_NONE, TG_SPLIT_COLUMNS, TG_SPLIT_ROWS, TG_SPLIT_VOCAB, TG_NSPLITS } tg_split;

const char *tg_split_name(tg_split s);
bool tg_split_parse(const char *s, size_t n, tg_split *out);

typedef struct tg_init {
  tg_init_kind kind;
  double std; /* for TG_INIT_NORMAL: mean 0, this standard deviation */
  tg_split split;   /* the param's tensor-parallel split */
  int split_groups; /* >= 1 when split */
} tg_init;

/* Which part of a training step a node belongs to, for reports and stats. */
typedef enum tg_phase {
  TG_PHASE_FORWARD,   /* the model as written */
  TG_PHASE_BACKWARD,  /* gradients, added by autodiff */
  TG_PHASE_OPTIMIZER, /* clipping and the parameter update */
  TG_NPHASES
} tg_phase;

const char *tg_phase_name(tg_phase p);
bool tg_phase_parse(const char *s, size_t n, tg_phase *out);

typedef struct tg_node {
  tg_op op;
  tg_phase phase;
  int id;                /* position in graph order, set when added */
  int nin;
  struct tg_node **in;
  tg_type type;
  const char *name;      /* parameter/input name, or the .tg variable; may be NULL */
  tg_loc loc;
  /* attributes; which ones are meaningful is given by tg_ops[op].attr */
  double value;          /* const */
  int axis;              /* iota, concat, slice */
  uint32_t axes;         /* reductions: bit i set = axis i reduced */
  int perm[TG_MAX_RANK]; /* transpose */
  int64_t start, len;    /* slice */
  tg_init init;          /* param */
  int ranks;             /* collectives: the number of ranks in the group */
  bool over_tensor;      /* collectives: the group is the mesh's tensor axis (tensor
                          * parallelism), not the data-parallel ranks */
  int kernel;            /* index into g->kernels after the fuse pass; -1: none
                          * (leaves, views, and every node before fusion) */
} tg_node;

typedef struct tg_config_entry {
  const char *name;
  double value;
} tg_config_entry;

typedef struct tg_output {
  const char *name;
  tg_node *node;
} tg_output;

/* Kernels: the fuse pass (passes/fuse.c) groups nodes into the units that
 * code generation turns into one GPU kernel each.  Fusion is data on the
 * graph, not a rewrite: each node says which kernel it is in (node->kernel)
 * and the graph keeps a table of kernels.  Kernels are numbered in the
 * order they run; every value a kernel reads from outside itself is a leaf
 * or an output of an earlier kernel (tg_verify checks this).  Views
 * (reshape, transpose, slice, expand) are in no kernel: they are folded
 * into the indexing of the kernels that read them, so "the producer" of a
 * value is found by following views to their source (tg_kernel_base). */
typedef enum tg_kernel_kind {
  TG_KERNEL_ELEMENTWISE, /* one thread per element of one shape */
  TG_KERNEL_ROW,         /* one block per row: reductions over the last axis */
  TG_KERNEL_REDUCE,      /* reductions over leading axes (e.g. bias gradients) */
  TG_KERNEL_MATMUL,      /* a matmul, with an optional elementwise epilogue */
  TG_KERNEL_MULTI,       /* multi-tensor: the optimizer over every parameter */
  TG_KERNEL_SPECIAL,     /* one special op (scatter_add, flash attention) */
  TG_NKERNEL_KINDS
} tg_kernel_kind;

const char *tg_kernel_kind_name(tg_kernel_kind k);
bool tg_kernel_kind_parse(const char *s, size_t n, tg_kernel_kind *out);

typedef struct tg_kernel {
  const char *name;
  tg_kernel_kind kind;
  /* Derived from node->kernel by tg_kernels_derive: positions in graph
   * order.  inputs: values read from outside (leaves and other kernels'
   * outputs, views resolved to their source); outputs: values of this
   * kernel that another kernel, a graph output or an assign needs. */
  int *nodes, n_nodes;
  int *inputs, n_inputs;
  int *outputs, n_outputs;
  int64_t bytes_read, bytes_written; /* fused: inputs and outputs once */
  int64_t bytes_unfused;             /* every op reading inputs and writing its result */
} tg_kernel;

/* Memory plan: the memplan pass (passes/memplan.c) gives every
 * materialised value (an output of a kernel, see above) a place in one
 * arena of scratch memory.  A buffer is live from the kernel that writes
 * it to the last kernel that reads it (graph outputs and assigns: to the
 * end of the step); buffers whose lifetimes overlap never share bytes.
 * The plan is derived data, like a kernel's inputs: a pure function of the
 * kernels, so the IR text form does not carry it (a dump after memplan
 * reads back byte for byte) and tg_memplan_compute remakes it anywhere. */
enum { TG_MEMPLAN_ALIGN = 256 }; /* every offset and size is a multiple */

typedef struct tg_buffer {
  int node;              /* the value (graph position), a kernel output */
  int first, last;       /* kernels: written by first, last read by last;
                          * last == n_kernels: needed after the step */
  int64_t bytes;         /* the value's size, rounded up to the alignment */
  int64_t offset;        /* in the arena */
} tg_buffer;

typedef struct tg_mem_plan {
  tg_buffer *buffers;    /* in graph order of their values */
  int n_buffers;
  int64_t arena_bytes;   /* peak: the planned arena's size */
  int64_t live_bytes;    /* the most bytes live at one kernel: no plan is smaller */
  int64_t sum_bytes;     /* every buffer its own memory: no reuse */
  int64_t persistent_bytes; /* leaves (params, inputs, state): not planned */
  bool placed;           /* offsets and arena_bytes are set (passes.h:
                          * tg_memplan_placed); lifetimes always are */
} tg_mem_plan;

/* Data-parallel schedule: the schedule pass (passes/schedule.c) groups the
 * parameters' gradients into buckets and places each bucket's all-reduce
 * right after the kernel that produces its last gradient, so that
 * communication overlaps the rest of the backward pass.  Derived data, like
 * the memory plan: recomputed, not in the IR text. */
typedef struct tg_bucket {
  int after_kernel;      /* the all-reduce runs when this kernel is done */
  int *grads, n_grads;   /* graph positions of the "grad:NAME" outputs' nodes */
  int64_t bytes;
} tg_bucket;

typedef struct tg_allreduce_plan {
  tg_bucket *buckets;    /* in schedule order */
  int n_buckets;
  int64_t bucket_bytes;  /* the target size a bucket closes at */
} tg_allreduce_plan;

typedef struct tg_graph {
  tg_arena *arena; /* borrowed from the ctx that built the graph */
  tg_node **nodes; /* in topological (construction) order */
  int n_nodes, cap_nodes;
  tg_config_entry *config; /* config constants after overrides */
  int n_config, cap_config;
  tg_output *outputs;
  int n_outputs, cap_outputs;
  const char *source; /* the file the graph came from */
  tg_kernel *kernels; /* after the fuse pass; in run order */
  int n_kernels, cap_kernels;
  tg_mem_plan *memplan; /* after the memplan pass; NULL before (but for
                         * the fuse pass's, placed when it reports, whose
                         * places memplan takes: passes/memplan.c) */
  tg_allreduce_plan *allreduce; /* after the schedule pass; NULL before */
  const char *mesh_sym; /* the config constant "mesh tensor = NAME" names (a run's choice, not
                         * the model's size: weights files do not record it), or NULL */
} tg_graph;

/* The config entry holding the tensor axis's ranks ("mesh tensor = N"),
 * when the model declares a mesh. */
#define TG_CONFIG_MESH_TENSOR "mesh_tensor"

tg_graph *tg_graph_new(tg_arena *arena);
/* The arena owns the graph and its arrays; this marks it as no longer in use. */
void tg_graph_free(tg_graph *g);

/* A fresh node, not yet in the graph.  The caller fills in inputs and
 * attributes (and the type, for ops whose type is not implied by their
 * inputs: leaves, reshape, cast), then calls tg_graph_add. */
tg_node *tg_node_new(tg_graph *g, tg_op op, tg_loc loc);
void tg_node_set_inputs(tg_graph *g, tg_node *n, int nin, tg_node *const *in);

/* Infers n's type from its inputs and attributes into *out.  For ops whose
 * type is given (leaves, reshape, cast) it validates n->type and copies it.
 * On failure returns false and writes a message (no location) to why. */
bool tg_infer_type(const tg_node *n, tg_type *out, char *why, size_t whylen);

/* Infers the type, then appends n to the graph.  Returns NULL on success or
 * an arena-allocated message explaining why the node is ill-typed. */
const char *tg_graph_add(tg_graph *g, tg_node *n);

void tg_graph_set_config(tg_graph *g, const char *name, double value);
bool tg_graph_get_config(const tg_graph *g, const char *name, double *value);
/* A dim's size as the model declares it.  A pass may pad a dim (pad_vocab:
 * vocab 50257 -> 50304) while the config keeps the true size; a dim whose
 * symbol names a config constant smaller than the dim is such a padded dim,
 * and this gives that constant.  Any other dim: its own size. */
int64_t tg_dim_unpadded(const tg_graph *g, const tg_dim *d);
void tg_graph_add_output(tg_graph *g, const char *name, tg_node *node);
/* The node of the graph output named name, or NULL. */
tg_node *tg_graph_output(const tg_graph *g, const char *name);
/* The leaf of op `op` (input, param, state) named name, or NULL. */
tg_node *tg_graph_leaf(const tg_graph *g, tg_op op, const char *name);

/* Appends a kernel (name and kind; its node lists come from
 * tg_kernels_derive); returns its index. */
int tg_graph_add_kernel(tg_graph *g, const char *name, tg_kernel_kind kind);
/* Follows views (reshape, transpose, slice, expand) to the value they show. */
const tg_node *tg_kernel_base(const tg_node *n);
bool tg_is_view(const tg_node *n);
/* A cast of a bf16 value to f32: free to recompute (fusion computes it in
 * whichever kernel reads it; the precision pass's saved values rely on it). */
bool tg_is_widening(const tg_node *n);
/* Fills every kernel's node, input and output lists and byte counts from
 * node->kernel. */
void tg_kernels_derive(tg_graph *g);

/* Checks every node: inputs precede it, arity, attributes, and that its
 * type is what inference gives.  Reports the first problem through ctx and
 * returns false (it does not bail). */
bool tg_verify(tg_ctx *ctx, const tg_graph *g);

/* ---- text form, Graphviz, statistics ----------------------------------- */

/* The IR text form (docs/ir.md): one line per node, readable back by
 * tg_read_ir, printing the result reproduces the text byte for byte. */
void tg_print_ir(FILE *out, const tg_graph *g);
/* A 64-bit hash of everything tg_print_ir writes, read from the graph's
 * fields without printing (a fiftieth of the cost): two graphs with the
 * same fingerprint print the same text, but for a collision.  Strings
 * count by address (arena strings are never changed in place), so the
 * same text in a new string changes it: it may say "changed" for a graph
 * that prints the same, never the reverse.  tgc --report html keeps the
 * IR after a pass only when the pass changed it. */
uint64_t tg_ir_fingerprint(const tg_graph *g);
/* The same, with each node's tg_ir_node_fingerprint written to
 * node_fingerprints[position] (g->n_nodes of them) on the way. */
uint64_t tg_ir_fingerprint_nodes(const tg_graph *g, uint64_t *node_fingerprints);
/* The text form in pieces, for a reader that joins them itself (the
 * page keeps the IR after every pass as the nodes each pass changed, not
 * as text: report/ir_history.c).  The text is the head (the lines before
 * the nodes); then a line a node: "%K = ", its op, " " and its inputs'
 * "%J" joined by ", " (K, J: positions in the graph; "%?" for an input
 * not in it), its middle (attributes, type, name), " in kN" for a node
 * in kernel N, and its place (" @ file:line:col"); a "phase NAME" line
 * before each node whose phase is not the last one's (forward at first);
 * then a line "output " NAME " = %J" an output, NAME quoted.  Each piece
 * is valid until p's next. */
typedef struct tg_ir_pieces tg_ir_pieces;
tg_ir_pieces *tg_ir_pieces_new(void);
void tg_ir_pieces_free(tg_ir_pieces *p); /* NULL: nothing */
const char *tg_ir_head(tg_ir_pieces *p, const tg_graph *g, size_t *n);
/* a node's (not NULL): its op ("<op N>" outside the table, whose line is
 * only that), middle and place ("" for such an op) */
const char *tg_ir_node_op(tg_ir_pieces *p, const tg_node *node, size_t *n);
const char *tg_ir_node_middle(tg_ir_pieces *p, const tg_node *node, size_t *n);
const char *tg_ir_node_place(tg_ir_pieces *p, const tg_node *node, size_t *n);
const char *tg_ir_quoted(tg_ir_pieces *p, const char *s, size_t *n);
/* A hash of what node's line shows but its position, its inputs' and its
 * kernel (its inputs count by address): it changes when the line's op,
 * inputs, middle or place do. */
uint64_t tg_ir_node_fingerprint(const tg_node *node);
tg_graph *tg_read_ir(tg_ctx *ctx, const tg_source *src); /* bails on error */
void tg_print_dot(FILE *out, const tg_graph *g);

typedef struct tg_stats {
  int64_t n_params;        /* parameter tensors */
  int64_t param_elems;     /* trainable numbers */
  int64_t param_bytes;
  int64_t n_nodes;
  int64_t by_kind[TG_NKINDS];
  int64_t by_phase[TG_NPHASES];
  int64_t by_op[TG_NOPS];
} tg_stats;

void tg_graph_stats(const tg_graph *g, tg_stats *s);
void tg_print_stats(FILE *out, const tg_graph *g);

/* Shortest decimal text that reads back to exactly d ("0.02", "-inf"). */
char *tg_fmt_double(double d, char *buf, size_t n);
/* v in decimal, as "%lld" writes it, into buf (TG_FMT_INT_MAX bytes; no
 * NUL): where its digits start in buf.  Printers of many numbers (the IR
 * text, the page's JSON) use it for fprintf's reading of its format costs
 * more than the number. */
enum { TG_FMT_INT_MAX = 24 };
const char *tg_fmt_int(long long v, char *buf, size_t *len);

#endif
