/* cuda_kernels.c: the step's CUDA kernels as distinct units (cuda_kernels.h).
 *
 * Each wave of a kernel (lower.h) is one __global__ function; the blocks of
 * a launch are divided among the wave's steps, so the optimizer's update of
 * every parameter is one multi-tensor launch.  A nest maps to threads by
 * its kind:
 *
 *   elementwise  one thread per point (outer point x inner index);
 *   reduction    one block per outer point: the threads stride over the
 *                inner points, and each sweep ends with a block reduction
 *                (warp shuffles, then one value per warp through shared
 *                memory), whose result every thread then has; what a later
 *                sweep needs is kept in registers or shared memory (the
 *                row cache, emit.h);
 *   column       a reduction whose contiguous axis is outer: 16 columns a
 *                block, 16 row groups summed in order (tg_column_sum);
 *   scatter      a block owns rows of the table and all their columns, and
 *                adds the source rows that hit them in index order
 *                (scatter_body: deterministic, no atomics).
 *
 * Values are loaded and stored in their dtype and computed in float (bf16
 * and f16 are converted on load and rounded on store).  Matmuls are not
 * kernels here: the runtime calls cuBLASLt, as the manifest describes;
 * flash attention comes from codegen/cuda/flash_cuda.c.  Nothing includes a
 * header, so NVRTC needs no include path.
 *
 * Each function is first written with its own name TGSELF and the graph's
 * numbers in its names; canonical() then numbers those names by first
 * appearance, and functions whose texts are then equal (comments aside)
 * are one unit, named by the hash of that text.  The same text runs on the
 * emulated device (runtime/cuda/emu/): memory is spelled with macros that
 * are plain pointers under __CUDA_ARCH__ and checked pointers behind
 * cuda_emu.h (memory.cuh), and each PTX instruction is a tg_ wrapper
 * with the emulator's version beside it (ptx.cuh).  The prelude is those
 * files' text, embedded at build time (device_code.h). */
#include "cuda_kernels.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "device_code.h"
#include "emit.h"
#include "flash_cuda.h"
#include "sha256.h"

static void print_code(FILE *out, const char *text, const char *indent) {
  for (const char *l = text; l && *l;) {
    const char *nl = strchr(l, '\n');
    size_t len = nl ? (size_t)(nl - l) : strlen(l);
    fprintf(out, "%s%.*s\n", indent, (int)len, l);
    l = nl ? nl + 1 : NULL;
  }
}

void tg_cuda_print_prelude(FILE *out) {
  tg_cuda_emit_memory_macros(out);
  fputs(tg_cuda_ptx_text, out);
  fputs(tg_cuda_prelude_text, out);
  fputs("#define TG_GELU_FN __device__ __forceinline__\n", out);
  fputs(tg_gelu_text, out);
  fputs("#undef TG_GELU_FN\n\n", out);
}

/* A scatter_add (emit.h: tg_cuda_scatter_rows): block b owns table rows
 * [v0, v0 + rows) and all their columns.  It zeroes them (fills them from
 * the initial table, or, in place, finds them filled already); then, 256
 * indices at a time, each thread tests one index, the warps' votes give
 * every hit its place in index order (tg_hits), and the threads, one
 * column each, add the hit source rows in that order.  Every element of
 * the table has one owner thread and a fixed order of adds: deterministic,
 * no atomics. */
static void scatter_body(FILE *out, const tg_step *st, const tg_nest_code *c, long long first) {
  const tg_nest *N = &st->nest;
  long long rows = (long long)tg_cuda_scatter_rows(st), V = (long long)st->table_rows;
  long long cols = (long long)N->outer_count, n = (long long)N->inner_count;
  fprintf(out, "    const tg_idx v0 = (tg_idx)(blockIdx.x - %lldu) * %lld;\n", first, rows);
  fprintf(out, "    TG_SHARED(int, tg_hits, 256);  // this chunk's hits, in index order\n"
               "    TG_SHARED(int, tg_warp_hits, 8);\n");
  if (c->init_value) {
    /* onto a copy of the initial table: the block fills its rows from it */
    fprintf(out, "    for (tg_idx v = v0; v < v0 + %lld && v < %lld; v++)\n"
                 "      for (tg_idx o = threadIdx.x; o < %lld; o += blockDim.x) {\n",
            rows, V, cols);
    print_code(out, c->outer_coords, "        ");
    fprintf(out, "        b%d[v * %lld + o] = %s;\n      }\n", st->node, cols, c->init_value);
  } else if (!st->in_place) {
    fprintf(out, "    for (tg_idx v = v0; v < v0 + %lld && v < %lld; v++)\n"
                 "      for (tg_idx o = threadIdx.x; o < %lld; o += blockDim.x) b%d[v * %lld + o] = 0;\n",
            rows, V, cols, st->node, cols);
  } /* in place: the rows already hold the initial table (lower.c) */
  fprintf(out, "    for (tg_idx base = 0; base < %lld; base += 256) {\n", n);
  fprintf(out, "      bool hit = false;\n"
               "      {\n"
               "        const tg_idx j = base + threadIdx.x;\n"
               "        if (j < %lld) {\n", n);
  print_code(out, c->inner_coords, "          ");
  print_code(out, c->index_code, "          ");
  fprintf(out, "          hit = (tg_idx)%s >= v0 && (tg_idx)%s < v0 + %lld;\n", c->index_value, c->index_value, rows);
  fprintf(out, "        }\n      }\n");
  fprintf(out, "      const unsigned votes = __ballot_sync(0xffffffffu, hit);\n"
               "      if ((threadIdx.x & 31) == 0) tg_warp_hits[threadIdx.x >> 5] = __popc(votes);\n"
               "      __syncthreads();\n"
               "      int before = 0, hits = 0;\n"
               "      for (int w = 0; w < 8; w++) {\n"
               "        const int k = tg_warp_hits[w];\n"
               "        if (w < (int)(threadIdx.x >> 5)) before += k;\n"
               "        hits += k;\n"
               "      }\n"
               "      if (hit) tg_hits[before + __popc(votes & ((1u << (threadIdx.x & 31)) - 1u))] = (int)threadIdx.x;\n"
               "      __syncthreads();\n"
               "      for (int h = 0; h < hits; h++) {\n"
               "        const tg_idx j = base + tg_hits[h];\n"
               "        for (tg_idx o = threadIdx.x; o < %lld; o += blockDim.x) {\n", cols);
  print_code(out, c->outer_coords, "          ");
  for (int i = 0; i < c->n_seg; i++)
    if (!c->seg[i].loop) print_code(out, c->seg[i].text, "          ");
  print_code(out, c->inner_coords, "          ");
  for (int i = 0; i < c->n_seg; i++)
    if (c->seg[i].loop) print_code(out, c->seg[i].text, "          ");
  fprintf(out, "        }\n      }\n"
               "      __syncthreads();  // tg_hits is rewritten by the next chunk\n"
               "    }\n");
}

/* A step's body inside its wave's function; `first` is its first block. */
static void step_body(FILE *out, const tg_program *p, const tg_lkernel *lk, int s, long long first) {
  const tg_step *st = &lk->steps[s];
  const tg_nest *N = &st->nest;
  tg_nest_code c;
  tg_emit_nest(p, lk, s, TG_DIALECT_CUDA, &c);
  const char *in = "    ";
  print_code(out, c.uniform, in);
  if (st->kind == TG_STEP_SCATTER) {
    scatter_body(out, st, &c, first);
    tg_nest_code_free(&c);
    return;
  } else if (tg_cuda_column_nest(st)) {
    /* TG_COLUMN_TILE consecutive columns a block, its row groups splitting the rows */
    fprintf(out, "    const tg_idx o = (tg_idx)(blockIdx.x - %lldu) * %d + (threadIdx.x %% %d);\n"
                 "    const int tg_rg = threadIdx.x / %d;\n    {\n      (void)o;\n",
            first, TG_COLUMN_TILE, TG_COLUMN_TILE, TG_COLUMN_TILE);
  } else if (tg_cuda_is_reduction_nest(st) && N->group > 1) {
    /* a row group: the block walks N->group rows; each thread keeps the
     * running column sums of the points j it owns in every row (shared
     * memory, indexed by j: no other thread touches them) */
    fprintf(out, "    const tg_idx tg_g = (tg_idx)(blockIdx.x - %lldu);\n", first);
    for (int k = 0; k < N->n_colsum; k++)
      fprintf(out, "    TG_SHARED(float, col%d, %lld);\n"
                   "    for (tg_idx j = threadIdx.x; j < %lld; j += blockDim.x) col%d[j] = 0.0f;\n",
              N->colsum[k], (long long)N->inner_count, (long long)N->inner_count, N->colsum[k]);
    fprintf(out, "    for (tg_idx tg_r = 0; tg_r < %lld; tg_r++) {\n"
                 "    const tg_idx o = tg_g * %lld + tg_r;\n    {\n      (void)o;\n",
            (long long)N->group, (long long)N->group);
  } else if (tg_cuda_is_reduction_nest(st)) {
    fprintf(out, "    const tg_idx o = (tg_idx)(blockIdx.x - %lldu);\n    {\n      (void)o;\n", first);
  } else {
    /* a thread per point, or per c.vec consecutive points of the inner axis */
    long long per = (long long)N->inner_count / c.vec;
    fprintf(out, "    const tg_idx e = (tg_idx)(blockIdx.x - %lldu) * blockDim.x + threadIdx.x;\n", first);
    fprintf(out, "    if (e < %lld) {\n", (long long)N->outer_count * per);
    fprintf(out, "      const tg_idx o = e / %lld, j = e %% %lld * %d;\n      (void)o, (void)j;\n", per, per, c.vec);
  }
  print_code(out, c.outer_coords, "      ");
  print_code(out, c.cache_decl, "      ");
  bool red = tg_cuda_is_reduction_nest(st);
  bool regs = c.row_cache == TG_ROW_CACHE_REGS;
  bool column = tg_cuda_column_nest(st);
  for (int i = 0; i < c.n_seg; i++) {
    const tg_segment *sg = &c.seg[i];
    if (!sg->loop) {
      print_code(out, sg->text, "      ");
      continue;
    }
    if (st->kind == TG_STEP_SCATTER) {
      fprintf(out, "      for (tg_idx j = 0; j < %lld; j++) {\n", (long long)N->inner_count);
    } else if (red) {
      for (int r = 0; r < sg->n_red; r++)
        fprintf(out, "      %s acc%d = %s;\n", sg->red[r].ctype, sg->red[r].node, sg->red[r].is_max ? "-tg_inf()" : "0.0f");
      if (column)
        fprintf(out, "      for (tg_idx j = tg_rg; j < %lld; j += %d) {\n", (long long)N->inner_count, TG_COLUMN_TILE);
      else if (regs) /* the row cache in registers: the walk unrolled, so r<N>[u] are registers */
        fprintf(out, "      TG_UNROLL for (int u = 0; u < %d; u++) {\n      const tg_idx j = threadIdx.x + (tg_idx)u * %d;\n"
                     "      if (j < %lld) {\n", c.row_regs, TG_CUDA_BLOCK, (long long)N->inner_count);
      else fprintf(out, "      for (tg_idx j = threadIdx.x; j < %lld; j += blockDim.x) {\n", (long long)N->inner_count);
    } else {
      fprintf(out, "      {\n");
    }
    print_code(out, c.inner_coords, "        ");
    print_code(out, sg->text, "        ");
    for (int r = 0; r < sg->n_red; r++) {
      const tg_reduction *R = &sg->red[r];
      if (R->is_max) fprintf(out, "        acc%d = tg_max2(acc%d, %s);\n", R->node, R->node, R->value);
      else fprintf(out, "        acc%d += %s;\n", R->node, R->value);
    }
    for (int r = 0; r < sg->n_col; r++) fprintf(out, "        col%d[j] += %s;\n", sg->col[r].node, sg->col[r].value);
    fprintf(out, red && regs ? "      }}\n" : "      }\n");
    for (int r = 0; r < sg->n_red; r++)
      fprintf(out, "      const float t%d = %s(tg_%s_%s(acc%d));\n", sg->red[r].node, sg->red[r].round,
              column ? "column" : "block", sg->red[r].is_max ? "max" : "sum", sg->red[r].node);
  }
  if (c.post_only && *c.post_only) {
    fprintf(out, "      if (%s) {\n", column ? "tg_rg == 0" : red ? "threadIdx.x == 0" : st->kind == TG_STEP_SCATTER ? "true" : "j == 0");
    print_code(out, c.post_only, "        ");
    fprintf(out, "      }\n");
  }
  fprintf(out, "    }\n");
  if (N->group > 1 && red) {
    fprintf(out, "    }\n    for (tg_idx j = threadIdx.x; j < %lld; j += blockDim.x) {\n", (long long)N->inner_count);
    print_code(out, c.col_store, "      ");
    fprintf(out, "    }\n");
  }
  tg_nest_code_free(&c);
}


/* A kernel argument's declaration, for shapes (canon.h). */
typedef struct arg_ctx {
  tg_arena *a;
  const tg_program *p;
  const tg_lkernel *lk;
} arg_ctx;

static const char *arg_decl(void *ctx, long node) {
  const arg_ctx *x = ctx;
  int i = tg_lkernel_arg(x->lk, node);
  if (i < 0) return NULL;
  return tg_sprintf(x->a, "TG_ARG(%s%s)", x->lk->arg_written[i] ? "" : "const ",
                    tg_storage_ctype(x->p->g->nodes[node]->type.dtype));
}

/* What a wave's function takes, when it has tables (else NULL, 0: the
 * kernel's arguments, as the plan has them). */
typedef struct wave_info {
  tg_cuda_arg *args;
  int n_args;
  tg_cuda_table *tables;
  int n_tables;
} wave_info;

/* Any b<N> is a buffer: to list the buffers a body names. */
static const char *any_decl(void *ctx, long node) {
  (void)ctx, (void)node;
  return "?";
}

/* The wave's launched steps, each body rendered with blocks from first[i]. */
static void render_bodies(const tg_program *p, const tg_lkernel *lk, const int *step_of, const long long *first, int n,
                          char **body) {
  for (int i = 0; i < n; i++) {
    size_t len = 0;
    FILE *f = open_memstream(&body[i], &len);
    if (!f) abort();
    step_body(f, p, lk, step_of[i], first[i]);
    fclose(f);
  }
}

/* body with its first block moved from `from` to `to`: step_body writes it
 * only as "blockIdx.x - <first>u" (rendering the step again would cost the
 * front end as much as the first time). */
static char *move_blocks(char *body, long long from, long long to) {
  char old[48], new[48];
  snprintf(old, sizeof old, "blockIdx.x - %lldu)", from);
  snprintf(new, sizeof new, "blockIdx.x - %lldu)", to);
  tg_sbuf out = {0};
  for (const char *s = body;;) {
    const char *hit = strstr(s, old);
    if (!hit) {
      tg_sb_puts(&out, s);
      break;
    }
    tg_sb_put(&out, s, (size_t)(hit - s));
    tg_sb_puts(&out, new);
    s = hit + strlen(old);
  }
  free(body);
  return tg_sb_take(&out);
}

/* The branches of the steps that run inline (no table: group[i] < 0), in
 * block order; *sep is " else " after the first branch. */
static void inline_branches(tg_sbuf *out, const tg_lkernel *lk, int n, const int *order, const int *group,
                            const int *step_of, const long long *first, char **body, const char **sep) {
  for (int k = 0; k < n; k++) {
    int i = order[k];
    if (group[i] >= 0) continue;
    long long nb = tg_cuda_step_blocks(&lk->steps[step_of[i]]);
    tg_sb_printf(out, "%sif (blockIdx.x < %lldu) {  // step %d: %lld block%s\n", *sep, first[i] + nb, step_of[i], nb,
                 nb == 1 ? "" : "s");
    tg_sb_puts(out, body[i]);
    tg_sb_puts(out, "  }");
    *sep = " else ";
  }
}

/* Wave w of lk as one __global__ function named TGSELF: each launched
 * step's blocks in turn.  Steps of one shape (canon.h: the optimizer's
 * update of each parameter, the gradient norm's sums of each gradient)
 * are a *table*: the shape's body is one __device__ function TGSELF_s<g>,
 * and one branch, for all of them, finds its step's entry in the table
 * tg_table<g> (a parameter; cuda_plan.h: tg_cuda_table) from blockIdx.x
 * and calls it with the entry's buffers and sizes.  The branches do not
 * grow with the number of tensors, the assembler compiles each shape once,
 * the launch stays one, and the buffers that only tables name are not
 * parameters (GPT-2's optimizer would pass 750 pointers, past the 4 KB of
 * parameters older drivers take).  Steps of a shape of their own keep a
 * branch each, first; then each table's steps, in step order. */
static char *wave_text(tg_arena *a, const tg_program *p, const tg_lkernel *lk, int w, const char *params, wave_info *wi) {
  memset(wi, 0, sizeof *wi);
  int n = 0;
  for (int s = 0; s < lk->n_steps; s++) n += lk->steps[s].wave == w && tg_cuda_step_launched(&lk->steps[s]);
  char **body = tg_xcalloc((size_t)n + 1, sizeof *body);
  tg_shape *S = tg_xcalloc((size_t)n + 1, sizeof *S);
  int *group = tg_xcalloc((size_t)n + 1, sizeof *group);
  int *step_of = tg_xcalloc((size_t)n + 1, sizeof *step_of);
  int *order = tg_xcalloc((size_t)n + 1, sizeof *order);
  long long *first = tg_xcalloc((size_t)n + 1, sizeof *first), blocks = 0;
  for (int s = 0, i = 0; s < lk->n_steps; s++) {
    const tg_step *st = &lk->steps[s];
    if (st->wave != w || !tg_cuda_step_launched(st)) continue;
    step_of[i] = s, first[i] = blocks, group[i] = -1;
    blocks += tg_cuda_step_blocks(st);
    i++;
  }
  render_bodies(p, lk, step_of, first, n, body);
  arg_ctx ax = {a, p, lk};
  int n_groups = 0;
  for (int i = 0; i < n && n > 1; i++)
    if (!tg_shape_analyse(&S[i], body[i], arg_decl, &ax)) group[i] = -2;
  for (int i = 0; i < n && n > 1; i++) {
    if (group[i] != -1) continue;
    int members = 0;
    for (int j = i + 1; j < n; j++) members += group[j] == -1 && tg_shape_same(&S[i], &S[j]);
    if (!members) continue;
    for (int j = i; j < n; j++)
      if (group[j] == -1 && tg_shape_same(&S[i], &S[j])) group[j] = n_groups;
    n_groups++;
  }
  tg_sbuf out = {0};
  if (!n_groups) {
    tg_sb_printf(&out, "extern \"C\" __global__ void __launch_bounds__(%d) TGSELF(%s) {\n", TG_CUDA_BLOCK, params);
    const char *sep = "  ";
    for (int i = 0; i < n; i++) order[i] = i;
    inline_branches(&out, lk, n, order, group, step_of, first, body, &sep);
    tg_sb_puts(&out, "\n}\n");
  } else {
    /* the block order: steps of their own shape, then each table's steps */
    int m = 0;
    for (int i = 0; i < n; i++)
      if (group[i] < 0) order[m++] = i;
    for (int g = 0; g < n_groups; g++)
      for (int i = 0; i < n; i++)
        if (group[i] == g) order[m++] = i;
    blocks = 0;
    for (int k = 0; k < n; k++) {
      int i = order[k];
      body[i] = move_blocks(body[i], first[i], blocks);
      first[i] = blocks, blocks += tg_cuda_step_blocks(&lk->steps[step_of[i]]);
    }
    /* again, with those blocks: a table step's first block is one of its literals */
    for (int i = 0; i < n; i++) {
      tg_shape_free(&S[i]);
      if (group[i] >= 0 && !tg_shape_analyse(&S[i], body[i], arg_decl, &ax)) abort(); /* analysed before */
    }
    /* the buffers the inline steps name stay parameters */
    bool *keep = tg_xcalloc((size_t)lk->n_args + 1, 1);
    for (int i = 0; i < n; i++) {
      if (group[i] >= 0) continue;
      tg_shape any;
      tg_shape_analyse(&any, body[i], any_decl, NULL);
      for (int b = 0; b < any.n_bufs; b++) {
        int x = tg_lkernel_arg(lk, any.bufs[b]);
        if (x >= 0) keep[x] = true;
      }
      tg_shape_free(&any);
    }
    wi->args = tg_alloc(a, sizeof *wi->args * (size_t)(lk->n_args + 1));
    wi->tables = tg_alloc(a, sizeof *wi->tables * (size_t)n_groups);
    wi->n_tables = n_groups;
    tg_sbuf sig = {0};
    for (int x = 0; x < lk->n_args; x++) {
      if (!keep[x]) continue;
      wi->args[wi->n_args++] = (tg_cuda_arg){lk->args[x], lk->arg_read[x], lk->arg_written[x]};
      tg_sb_printf(&sig, "%s%s b%d", sig.n ? ", " : "", arg_decl(&ax, lk->args[x]), lk->args[x]);
    }
    free(keep);
    for (int g = 0; g < n_groups; g++) {
      int rep = -1, count = 0;
      for (int i = 0; i < n; i++)
        if (group[i] == g) count++, rep = rep < 0 ? i : rep;
      const tg_shape *R = &S[rep];
      bool *vary = tg_xcalloc((size_t)R->n_lits + 1, 1);
      for (int i = 0; i < n; i++)
        if (group[i] == g) tg_shape_vary(R, &S[i], vary);
      int nl = 0;
      for (int l = 0; l < R->n_lits; l++) nl += vary[l];
      /* the table, as the runtime will fill it */
      tg_cuda_table *T = &wi->tables[g];
      T->param = tg_sprintf(a, "tg_table%d", g);
      T->n_bufs = R->n_bufs, T->n_lits = nl, T->n_entries = count;
      bool *rd = tg_alloc(a, (size_t)R->n_bufs + 1), *wr = tg_alloc(a, (size_t)R->n_bufs + 1);
      for (int b = 0; b < R->n_bufs; b++) {
        int x = tg_lkernel_arg(lk, R->bufs[b]);
        if (x >= 0) rd[b] = lk->arg_read[x], wr[b] = lk->arg_written[x];
      }
      T->buf_read = rd, T->buf_written = wr;
      T->entries = tg_alloc(a, sizeof *T->entries * (size_t)count);
      tg_sbuf steps = {0};
      for (int k = 0, e = 0; k < n; k++) {
        int i = order[k];
        if (group[i] != g) continue;
        tg_cuda_table_entry *E = &T->entries[e++];
        int *bufs = tg_alloc(a, sizeof(int) * (size_t)(S[i].n_bufs + 1));
        int64_t *lits = tg_alloc(a, sizeof(int64_t) * (size_t)(nl + 1));
        for (int b = 0; b < S[i].n_bufs; b++) bufs[b] = (int)S[i].bufs[b];
        for (int l = 0, v = 0; l < S[i].n_lits; l++)
          if (vary[l]) lits[v++] = tg_shape_lit(&S[i], l);
        *E = (tg_cuda_table_entry){step_of[i], first[i], bufs, lits};
        tg_sb_printf(&steps, "%s%d", steps.n ? ", " : "", step_of[i]);
      }
      /* its entry, as the kernel reads it: 8-byte fields */
      tg_sb_printf(&out, "// tg_table%d: one entry per step of shape %d (steps %s), in block order, written by\n"
                         "// the runtime where the buffers are (the manifest's \"tables\"): its first block, each\n"
                         "// buffer's address and bytes (b0..), and the sizes that differ between the steps (n0..).\n",
                   g, g, tg_sb_text(&steps));
      tg_sb_printf(&out, "struct TGSELF_e%d {\n  unsigned long long first;\n", g);
      if (R->n_bufs) tg_sb_printf(&out, "  tg_table_buf b[%d];\n", R->n_bufs);
      if (nl) tg_sb_printf(&out, "  long long n[%d];\n", nl);
      tg_sb_printf(&out, "};\nstatic_assert(sizeof(TGSELF_e%d) == %zu && alignof(TGSELF_e%d) == 8, "
                         "\"the runtime writes 8-byte fields (cuda_plan.h: tg_cuda_table)\");\n\n",
                   g, tg_cuda_table_entry_bytes(T), g);
      tg_sb_printf(&out, "__device__ void TGSELF_s%d(", g);
      tg_shape_params(&out, R, vary, arg_decl, &ax);
      tg_sb_puts(&out, ") {\n");
      tg_shape_body(&out, R, vary);
      tg_sb_puts(&out, "}\n\n");
      tg_sb_printf(&sig, "%sTG_ARG(const TGSELF_e%d) tg_table%d", sig.n ? ", " : "", g, g);
      tg_sb_free(&steps);
      free(vary);
    }
    tg_sb_printf(&out, "extern \"C\" __global__ void __launch_bounds__(%d) TGSELF(%s) {\n", TG_CUDA_BLOCK,
                 tg_sb_text(&sig));
    tg_sb_free(&sig);
    const char *sep = "  ";
    inline_branches(&out, lk, n, order, group, step_of, first, body, &sep);
    for (int g = 0; g < n_groups; g++) {
      const tg_cuda_table *T = &wi->tables[g];
      const tg_cuda_table_entry *last = &T->entries[T->n_entries - 1];
      long long end = last->first + tg_cuda_step_blocks(&lk->steps[last->step]);
      tg_sb_printf(&out, "%sif (blockIdx.x < %lldu) {  // %d steps of shape %d, blocks from %lld: tg_table%d's entries\n",
                   sep, end, T->n_entries, g, T->entries[0].first, g);
      tg_sb_printf(&out, "    const TGSELF_e%d tg_e = tg_table%d[tg_table_find(tg_table%d, %d, blockIdx.x)];\n", g, g, g,
                   T->n_entries);
      const tg_shape *R = NULL;
      for (int i = 0; i < n && !R; i++)
        if (group[i] == g) R = &S[i];
      for (int b = 0; b < T->n_bufs; b++) {
        const char *d = arg_decl(&ax, R->bufs[b]); /* "TG_ARG(const float)": the element type within */
        tg_sb_printf(&out, "    TG_TABLE_PTR(%.*s, tg_p%d, tg_e.b[%d]);\n", (int)strlen(d) - 8, d + 7, b, b);
      }
      tg_sb_printf(&out, "    TGSELF_s%d(", g);
      for (int b = 0; b < T->n_bufs; b++) tg_sb_printf(&out, "%stg_p%d", b ? ", " : "", b);
      for (int l = 0; l < T->n_lits; l++) tg_sb_printf(&out, "%stg_e.n[%d]", T->n_bufs || l ? ", " : "", l);
      tg_sb_puts(&out, ");\n  }");
      sep = " else ";
    }
    tg_sb_puts(&out, "\n}\n");
  }
  for (int i = 0; i < n; i++) {
    free(body[i]);
    tg_shape_free(&S[i]);
  }
  free(body), free(S), free(group), free(step_of), free(first), free(order);
  char *text = tg_strdup(a, tg_sb_text(&out));
  tg_sb_free(&out);
  return text;
}

/* ---- units ------------------------------------------------------------------- */

typedef struct unit_b {
  char hex[TG_SHA256_HEX];
  char *key;
  char *code;          /* canonical, named TGSELF */
  tg_sbuf places;
  const char *comment; /* the first place's kernel comment */
  bool flash;
  int n_places;
  const char **globals;
  int n_globals;
} unit_b;

typedef struct ubuild {
  tg_arena *a;
  unit_b *u;
  int n, cap;
} ubuild;

/* The unit of text (named TGSELF), added if new; its index. */
static int add_unit(ubuild *B, const char *text, bool flash, const char *comment, const char *place) {
  tg_sbuf out = {0}, key = {0};
  tg_canonical(text, &out, &key);
  tg_sha256 h;
  unsigned char d[32];
  char hex[TG_SHA256_HEX];
  tg_sha256_init(&h);
  tg_sha256_update(&h, key.s ? key.s : "", key.n);
  tg_sha256_final(&h, d, hex);
  int u = 0;
  while (u < B->n && (strcmp(B->u[u].hex, hex) || strcmp(B->u[u].key, tg_sb_text(&key)))) u++;
  if (u == B->n) {
    if (B->n == B->cap) B->u = tg_xrealloc(B->u, sizeof *B->u * (size_t)(B->cap = B->cap ? 2 * B->cap : 64));
    unit_b *n = &B->u[B->n++];
    memset(n, 0, sizeof *n);
    memcpy(n->hex, hex, sizeof hex);
    n->key = tg_sb_take(&key);
    n->code = tg_sb_take(&out);
    n->comment = comment;
    n->flash = flash;
  } else {
    tg_sb_free(&key);
    tg_sb_free(&out);
  }
  tg_sb_printf(&B->u[u].places, " *   %s\n", place);
  B->u[u].n_places++;
  return u;
}

tg_cuda_kernels *tg_cuda_kernels_make(tg_arena *a, const tg_program *p, tg_cuda_plan *plan) {
  const tg_graph *g = p->g;
  ubuild B = {a, NULL, 0, 0};
  /* the unit of each wave function (by kernel and wave) and flash step */
  int **wave_unit = tg_alloc(a, sizeof *wave_unit * (size_t)(p->n_kernels + 1));
  int **step_unit = tg_alloc(a, sizeof *step_unit * (size_t)(p->n_kernels + 1));
  wave_info **waves = tg_alloc(a, sizeof *waves * (size_t)(p->n_kernels + 1));
  for (int k = 0; k < p->n_kernels; k++) {
    const tg_lkernel *lk = &p->kernels[k];
    const tg_kernel *K = &g->kernels[lk->kernel];
    wave_unit[k] = tg_alloc(a, sizeof(int) * (size_t)(lk->n_waves + 1));
    waves[k] = tg_alloc(a, sizeof(wave_info) * (size_t)(lk->n_waves + 1));
    memset(waves[k], 0, sizeof(wave_info) * (size_t)(lk->n_waves + 1));
    step_unit[k] = tg_alloc(a, sizeof(int) * (size_t)(lk->n_steps + 1));
    tg_sbuf cm = {0}, params = {0};
    tg_emit_kernel_comment(&cm, p, lk);
    tg_emit_params(&params, p, lk, TG_DIALECT_CUDA);
    const char *comment = tg_strdup(a, tg_sb_text(&cm));
    for (int w = 0; w < lk->n_waves; w++) {
      wave_unit[k][w] = -1;
      bool any = false;
      for (int s = 0; s < lk->n_steps; s++) any |= lk->steps[s].wave == w && tg_cuda_step_launched(&lk->steps[s]);
      if (!any) continue;
      const char *place = tg_sprintf(a, "k%d_w%d: %s \"%s\" (%s)", lk->kernel, w, tg_kernel_kind_name(K->kind), K->name,
                                     plan->where[k]);
      wave_unit[k][w] = add_unit(&B, wave_text(a, p, lk, w, tg_sb_text(&params), &waves[k][w]), false, comment, place);
    }
    for (int s = 0; s < lk->n_steps; s++) {
      const tg_step *st = &lk->steps[s];
      step_unit[k][s] = -1;
      if (st->kind != TG_STEP_FLASH_FWD && st->kind != TG_STEP_FLASH_BWD) continue;
      char *text = NULL;
      size_t len = 0;
      FILE *f = open_memstream(&text, &len);
      if (!f) abort();
      tg_flash_emit_cuda_kernels(f, "TGSELF", &st->flash, st->kind == TG_STEP_FLASH_BWD);
      fclose(f);
      const char *place = tg_sprintf(a, "%s: %s \"%s\" (%s)", st->fn, tg_kernel_kind_name(K->kind), K->name,
                                     plan->where[k]);
      int u = add_unit(&B, text, true, comment, place);
      free(text);
      step_unit[k][s] = u;
      if (!B.u[u].globals) {
        tg_flash_launch fl[TG_FLASH_MAX_LAUNCHES];
        int nl = tg_flash_cuda_launches(&st->flash, "TGSELF", st->kind == TG_STEP_FLASH_BWD, fl);
        B.u[u].globals = tg_alloc(a, sizeof(char *) * (size_t)(nl + 1));
        for (int i = 0; i < nl; i++) B.u[u].globals[B.u[u].n_globals++] = tg_strdup(a, fl[i].name + 6);
      }
    }
    tg_sb_free(&cm);
    tg_sb_free(&params);
  }
  tg_cuda_kernels *ks = tg_alloc(a, sizeof *ks);
  ks->units = tg_alloc(a, sizeof *ks->units * (size_t)(B.n + 1));
  ks->n_units = B.n;
  for (int u = 0; u < B.n; u++) {
    unit_b *b = &B.u[u];
    tg_cuda_unit *U = &ks->units[u];
    U->name = tg_sprintf(a, "f_%.10s", b->hex);
    /* 40 bits of the hash name a unit; two units sharing them (about one
     * program in 10^9) take all 256 */
    for (int v = 0; v < u; v++)
      if (!strcmp(ks->units[v].name, U->name)) U->name = tg_sprintf(a, "f_%s", b->hex);
    U->n_places = b->n_places;
    tg_sbuf code = {0};
    tg_sb_printf(&code, "// tg kernel: %s\n/* launched for %d place%s (the same code up to the buffers it is given):\n%s",
                 U->name, b->n_places, b->n_places == 1 ? "" : "s", tg_sb_text(&b->places));
    tg_sb_puts(&code, " * the first place's ops, by its graph numbers:\n */\n");
    tg_sb_puts(&code, b->comment);
    tg_sbuf body = {0};
    tg_sb_printf(&body, "// tg kernel: %s\n", U->name);
    tg_put_named(&body, b->code, U->name);
    tg_sb_puts(&code, tg_sb_text(&body) + strlen("// tg kernel: ") + strlen(U->name) + 1);
    U->code = tg_strdup(a, tg_sb_text(&code));
    U->body = tg_strdup(a, tg_sb_text(&body));
    tg_sb_free(&code);
    tg_sb_free(&body);
    if (b->flash) {
      U->n_globals = b->n_globals;
      U->globals = tg_alloc(a, sizeof(char *) * (size_t)(b->n_globals + 1));
      for (int i = 0; i < b->n_globals; i++) U->globals[i] = tg_sprintf(a, "%s%s", U->name, b->globals[i]);
    } else {
      U->n_globals = 1;
      U->globals = tg_alloc(a, sizeof(char *) * 2);
      U->globals[0] = U->name;
    }
    free(b->key);
    free(b->code);
    tg_sb_free(&b->places);
  }
  free(B.u);
  /* every launch by its unit's function */
  for (int i = 0; i < plan->n_ops; i++) {
    tg_cuda_op *op = &plan->ops[i];
    if (op->kind != TG_CUDA_LAUNCH) continue;
    if (op->step < 0) {
      const wave_info *wi = &waves[op->lkernel][op->wave];
      op->launch.function = ks->units[wave_unit[op->lkernel][op->wave]].name;
      if (wi->n_tables) {
        op->launch.args = wi->args, op->launch.n_args = wi->n_args;
        op->launch.tables = wi->tables, op->launch.n_tables = wi->n_tables;
        for (int t = 0; t < wi->n_tables; t++) wi->tables[t].shape = tg_sprintf(a, "%s_s%d", op->launch.function, t);
      }
    } else {
      const tg_step *st = &p->kernels[op->lkernel].steps[op->step];
      const char *suffix = op->launch.function + strlen(st->fn);
      op->launch.function = tg_sprintf(a, "%s%s", ks->units[step_unit[op->lkernel][op->step]].name, suffix);
    }
  }
  size_t len = 0;
  char *text = NULL;
  FILE *f = open_memstream(&text, &len);
  if (!f) abort();
  tg_cuda_print_prelude(f);
  fclose(f);
  ks->prelude = tg_strdup(a, text);
  free(text);
  return ks;
}

char *tg_cuda_unit_source(const tg_cuda_kernels *ks, int u) {
  tg_sbuf s = {0};
  tg_sb_puts(&s, ks->prelude);
  tg_sb_puts(&s, ks->units[u].body);
  return tg_sb_take(&s);
}
