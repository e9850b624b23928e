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

void tg_cuda_print_prelude(FILE *out) {
  tg_cuda_emit_memory_macros(out);
  fputs(tg_cuda_ptx_text, out);
  fputs(tg_cuda_prelude_text, out);
  fputs("#define TG_GELU_FN __device__ __forceinline__\n", out);
  fputs(tg_gelu_text, out);
  fputs("#undef TG_GELU_FN\n\n", out);
}

/* The hits of a chunk summed in shared memory (scatter_body): four at a
 * time, first every load of the four (and of each of the thread's
 * columns, while that takes at most 8 x 4 registers), then their adds, in
 * hit order; the rest one by one.  `add` computes one hit's value and
 * element (c->scatter_value, c->scatter_offset) at column o, row j. */
static void scatter_hits_shared(FILE *out, const tg_nest_code *c, const char *add, long long per, long long cols) {
  fprintf(out, "      auto tg_hit = [&](tg_idx j, tg_idx o, int *at) -> float {\n%s"
               "        *at = (int)(%s);\n"
               "        return %s;\n"
               "      };\n"
               "      int h = 0;\n"
               "      for (; h + 4 <= hits; h += 4) {\n"
               "        const tg_idx j0 = base + tg_hits[h], j1 = base + tg_hits[h + 1], j2 = base + tg_hits[h + 2],\n"
               "                     j3 = base + tg_hits[h + 3];\n",
          add, c->scatter_offset, c->scatter_value);
  const char *U = per <= 8 ? "u" : "0";
  char loads[512], adds[512];
  int nl = 0, na = 0;
  for (int k = 0; k < 4; k++) {
    nl += snprintf(loads + nl, sizeof loads - (size_t)nl, "            x[%d][%s] = tg_hit(j%d, o, &at[%d][%s]);\n", k, U,
                   k, k, U);
    na += snprintf(adds + na, sizeof adds - (size_t)na, "            tg_scatter_acc[at[%d][%s]] += x[%d][%s];\n", k, U,
                   k, U);
  }
  if (per <= 8)
    fprintf(out, "        float x[4][%lld] = {};\n        int at[4][%lld] = {};\n"
                 "        TG_UNROLL for (int u = 0; u < %lld; u++) {\n"
                 "          const tg_idx o = threadIdx.x + (tg_idx)u * %d;\n"
                 "          if (o < %lld) {\n%s          }\n        }\n"
                 "        TG_UNROLL for (int u = 0; u < %lld; u++) {\n"
                 "          const tg_idx o = threadIdx.x + (tg_idx)u * %d;\n"
                 "          if (o < %lld) {\n%s          }\n        }\n",
            per, per, per, TG_CUDA_BLOCK, cols, loads, per, TG_CUDA_BLOCK, cols, adds);
  else
    fprintf(out, "        for (int u = 0; u < %lld; u++) {\n"
                 "          const tg_idx o = threadIdx.x + (tg_idx)u * %d;\n"
                 "          if (o < %lld) {\n"
                 "            float x[4][1] = {};\n            int at[4][1] = {};\n%s%s          }\n        }\n",
            per, TG_CUDA_BLOCK, cols, loads, adds);
  fprintf(out, "      }\n"
               "      for (; h < hits; h++)\n"
               "        TG_UNROLL for (int u = 0; u < %lld; u++) {\n"
               "          const tg_idx o = threadIdx.x + (tg_idx)u * %d;\n"
               "          if (o < %lld) {\n"
               "            int at = 0;\n"
               "            const float x = tg_hit(base + tg_hits[h], o, &at);\n"
               "            tg_scatter_acc[at] += x;\n"
               "          }\n        }\n",
          per, TG_CUDA_BLOCK, cols);
}

/* A scatter_add (emit.h: tg_cuda_scatter_rows): block b owns table rows
 * [v0, v0 + rows) and all their columns.  It zeroes them (fills them from
 * the initial table, or, in place, finds them filled already); then, 256
 * indices at a time, each thread tests one index, the warps' votes give
 * every hit its place in index order (tg_hits), and the threads, one
 * column each, add the hit source rows in that order.  Every element of
 * the table has one owner thread and a fixed order of adds: deterministic,
 * no atomics.
 *
 * With c->scatter_shared the rows are summed in shared memory
 * (tg_scatter_acc), filled first the same way and stored at the end; the
 * hits are then taken four at a time, each thread's columns unrolled, so
 * that a thread has up to 4 x (columns / 256) source loads in flight
 * rather than one load and one read-modify-write of global memory per hit.
 * The adds to each element stay in index order: the same sums, bit for
 * bit.  A thread owns the same elements in every phase (o = threadIdx.x +
 * u * 256): no barrier between them. */
static void scatter_body(FILE *out, const tg_step *st, const tg_nest_code *c, long long first) {
  const tg_nest *N = &st->nest;
  long long rows = (long long)tg_cuda_scatter_rows(st), V = (long long)st->table_rows;
  long long cols = (long long)N->outer_count, n = (long long)N->inner_count;
  long long per = (cols + TG_CUDA_BLOCK - 1) / TG_CUDA_BLOCK; /* a thread's columns */
  bool sh = c->scatter_shared;
  fprintf(out, "    const tg_idx v0 = (tg_idx)(blockIdx.x - %lldu) * %lld;\n", first, rows);
  fprintf(out, "    TG_SHARED(int, tg_hits, 256);  // this chunk's hits, in index order\n"
               "    TG_SHARED(int, tg_warp_hits, 8);\n");
  if (sh) {
    fprintf(out, "    TG_SHARED(float, tg_scatter_acc, %lld);  // the block's rows, summed here\n", rows * cols);
    fprintf(out, "    for (tg_idx r = 0; r < %lld; r++)\n"
                 "      TG_UNROLL for (int u = 0; u < %lld; u++) {\n"
                 "        const tg_idx o = threadIdx.x + (tg_idx)u * %d, v = v0 + r;\n"
                 "        (void)v;\n"
                 "        if (o < %lld) {\n",
            rows, per, TG_CUDA_BLOCK, cols);
    tg_emit_lines(out, c->outer_coords, "          ");
    if (c->init_value) /* onto a copy of the initial table */
      fprintf(out, "          tg_scatter_acc[r * %lld + o] = v < %lld ? %s : 0.0f;\n", cols, V, c->init_value);
    else if (st->in_place) /* the rows hold the initial table (lower.c) */
      fprintf(out, "          tg_scatter_acc[r * %lld + o] = v < %lld ? b%d[v * %lld + o] : 0.0f;\n", cols, V, st->node,
              cols);
    else fprintf(out, "          tg_scatter_acc[r * %lld + o] = 0.0f;\n", cols);
    fprintf(out, "        }\n      }\n");
  } else if (c->init_value) {
    /* onto a copy of the initial table: the block fills its rows from it */
    fprintf(out, "    for (tg_idx v = v0; v < v0 + %lld && v < %lld; v++)\n"
                 "      for (tg_idx o = threadIdx.x; o < %lld; o += blockDim.x) {\n",
            rows, V, cols);
    tg_emit_lines(out, c->outer_coords, "        ");
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
  tg_emit_lines(out, c->inner_coords, "          ");
  tg_emit_lines(out, c->index_code, "          ");
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
               "      __syncthreads();\n");
  /* one hit's statements at column o, source row j: its adds (global
   * memory), or, summing in shared memory, its value and element */
  const char *ind = sh ? "        " : "          ";
  char *add = NULL;
  size_t add_len = 0;
  FILE *a = open_memstream(&add, &add_len);
  if (!a) abort();
  tg_emit_lines(a, c->outer_coords, ind);
  for (int i = 0; i < c->n_seg; i++)
    if (!c->seg[i].loop) tg_emit_lines(a, c->seg[i].text, ind);
  tg_emit_lines(a, c->inner_coords, ind);
  for (int i = 0; i < c->n_seg; i++)
    if (c->seg[i].loop) tg_emit_lines(a, c->seg[i].text, ind);
  fclose(a);
  if (sh) {
    scatter_hits_shared(out, c, add, per, cols);
  } else {
    fprintf(out, "      for (int h = 0; h < hits; h++) {\n"
                 "        const tg_idx j = base + tg_hits[h];\n"
                 "        for (tg_idx o = threadIdx.x; o < %lld; o += blockDim.x) {\n%s"
                 "        }\n      }\n",
            cols, add);
  }
  free(add);
  fprintf(out, "      __syncthreads();  // tg_hits is rewritten by the next chunk\n"
               "    }\n");
  if (sh)
    fprintf(out, "    for (tg_idx r = 0; r < %lld && v0 + r < %lld; r++)\n"
                 "      TG_UNROLL for (int u = 0; u < %lld; u++) {\n"
                 "        const tg_idx o = threadIdx.x + (tg_idx)u * %d;\n"
                 "        if (o < %lld) b%d[(v0 + r) * %lld + o] = tg_scatter_acc[r * %lld + o];\n"
                 "      }\n",
            rows, V, per, TG_CUDA_BLOCK, cols, st->node, cols, cols);
}

/* A step's body inside its wave's function; `first` is its first block.
 * *bytes gets what its statements access (the plan keeps it for traffic.c). */
static void step_body(FILE *out, const tg_program *p, const tg_lkernel *lk, int s, long long first, tg_step_bytes *bytes) {
  const tg_step *st = &lk->steps[s];
  const tg_nest *N = &st->nest;
  tg_nest_code c;
  tg_emit_nest(p, lk, s, TG_DIALECT_CUDA, &c);
  *bytes = (tg_step_bytes){0, 0};
  for (int x = 0; x < c.n_access; x++) *(c.access[x].write ? &bytes->written : &bytes->read) += c.access[x].bytes;
  const char *in = "    ";
  tg_emit_lines(out, c.uniform, in);
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
  tg_emit_lines(out, c.outer_coords, "      ");
  tg_emit_lines(out, c.cache_decl, "      ");
  bool red = tg_cuda_is_reduction_nest(st);
  bool regs = c.row_cache == TG_ROW_CACHE_REGS;
  bool column = tg_cuda_column_nest(st);
  for (int i = 0; i < c.n_seg; i++) {
    const tg_segment *sg = &c.seg[i];
    if (!sg->loop) {
      tg_emit_lines(out, sg->text, "      ");
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
      else /* a long row: unrolled, so that a thread has several loads in flight */
        fprintf(out, "      TG_UNROLL4 for (tg_idx j = threadIdx.x; j < %lld; j += blockDim.x) {\n",
                (long long)N->inner_count);
    } else {
      fprintf(out, "      {\n");
    }
    tg_emit_lines(out, c.inner_coords, "        ");
    tg_emit_lines(out, sg->text, "        ");
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
    tg_emit_lines(out, c.post_only, "        ");
    fprintf(out, "      }\n");
  }
  fprintf(out, "    }\n");
  if (N->group > 1 && red) {
    fprintf(out, "    }\n    for (tg_idx j = threadIdx.x; j < %lld; j += blockDim.x) {\n", (long long)N->inner_count);
    tg_emit_lines(out, c.col_store, "      ");
    fprintf(out, "    }\n");
  }
  tg_nest_code_free(&c);
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

/* The wave's launched steps, each body rendered with blocks from first[i];
 * bytes[s] gets what step s accesses. */
static void render_bodies(const tg_program *p, const tg_lkernel *lk, const int *step_of, const long long *first, int n,
                          char **body, tg_step_bytes *bytes) {
  for (int i = 0; i < n; i++) {
    size_t len = 0;
    FILE *f = open_memstream(&body[i], &len);
    if (!f) abort();
    step_body(f, p, lk, step_of[i], first[i], &bytes[step_of[i]]);
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

/* A wave's launched steps while its function is written, in step order:
 * each one's step, first block, rendered body, shape and group (its table,
 * or -1: a branch of its own, -2: no shape to share). */
typedef struct wave_steps {
  int n;
  int *step_of;
  long long *first;
  char **body;
  tg_shape *S;
  int *group;
  int *order;   /* the block order, as indexes into the above */
  int n_groups;
} wave_steps;

/* The steps of wave w that are launched, their blocks one after another,
 * each in a group of its own. */
static void wave_steps_collect(wave_steps *ws, const tg_program *p, const tg_lkernel *lk, int w, tg_step_bytes *bytes) {
  memset(ws, 0, sizeof *ws);
  int n = 0;
  for (int s = 0; s < lk->n_steps; s++) n += lk->steps[s].wave == w && tg_cuda_step_launched(&lk->steps[s]);
  ws->n = n;
  ws->body = tg_xcalloc((size_t)n + 1, sizeof *ws->body);
  ws->S = tg_xcalloc((size_t)n + 1, sizeof *ws->S);
  ws->group = tg_xcalloc((size_t)n + 1, sizeof *ws->group);
  ws->step_of = tg_xcalloc((size_t)n + 1, sizeof *ws->step_of);
  ws->order = tg_xcalloc((size_t)n + 1, sizeof *ws->order);
  ws->first = tg_xcalloc((size_t)n + 1, sizeof *ws->first);
  long long blocks = 0;
  for (int s = 0, i = 0; s < lk->n_steps; s++) {
    const tg_step *st = &lk->steps[s];
    if (st->wave != w || !tg_cuda_step_launched(st)) continue;
    ws->step_of[i] = s, ws->first[i] = blocks, ws->group[i] = -1;
    blocks += tg_cuda_step_blocks(st);
    i++;
  }
  render_bodies(p, lk, ws->step_of, ws->first, n, ws->body, bytes);
}

static void wave_steps_free(wave_steps *ws) {
  for (int i = 0; i < ws->n; i++) {
    free(ws->body[i]);
    tg_shape_free(&ws->S[i]);
  }
  free(ws->body), free(ws->S), free(ws->group), free(ws->step_of), free(ws->first), free(ws->order);
}

/* Two or more steps of one shape are a group, which becomes a table. */
static void wave_steps_group(wave_steps *ws, tg_param_ctx *ax) {
  int n = ws->n;
  for (int i = 0; i < n && n > 1; i++)
    if (!tg_shape_analyse(&ws->S[i], ws->body[i], tg_emit_param_decl, ax)) ws->group[i] = -2;
  for (int i = 0; i < n && n > 1; i++) {
    if (ws->group[i] != -1) continue;
    int members = 0;
    for (int j = i + 1; j < n; j++) members += ws->group[j] == -1 && tg_shape_same(&ws->S[i], &ws->S[j]);
    if (!members) continue;
    for (int j = i; j < n; j++)
      if (ws->group[j] == -1 && tg_shape_same(&ws->S[i], &ws->S[j])) ws->group[j] = ws->n_groups;
    ws->n_groups++;
  }
}

/* The block order when there are tables: the steps of their own shape,
 * then each table's steps.  Each body's blocks move to match, and the
 * table steps are analysed again with those blocks: a table step's first
 * block is one of its literals. */
static void wave_steps_reorder(wave_steps *ws, const tg_lkernel *lk, tg_param_ctx *ax) {
  int n = ws->n, m = 0;
  for (int i = 0; i < n; i++)
    if (ws->group[i] < 0) ws->order[m++] = i;
  for (int g = 0; g < ws->n_groups; g++)
    for (int i = 0; i < n; i++)
      if (ws->group[i] == g) ws->order[m++] = i;
  long long blocks = 0;
  for (int k = 0; k < n; k++) {
    int i = ws->order[k];
    ws->body[i] = move_blocks(ws->body[i], ws->first[i], blocks);
    ws->first[i] = blocks, blocks += tg_cuda_step_blocks(&lk->steps[ws->step_of[i]]);
  }
  for (int i = 0; i < n; i++) {
    tg_shape_free(&ws->S[i]);
    if (ws->group[i] >= 0 && !tg_shape_analyse(&ws->S[i], ws->body[i], tg_emit_param_decl, ax))
      abort(); /* analysed before */
  }
}

/* The buffers the inline steps name stay parameters: wi->args, and their
 * declarations in sig. */
static void wave_kept_args(tg_arena *a, const tg_lkernel *lk, const wave_steps *ws, tg_param_ctx *ax, wave_info *wi,
                           tg_sbuf *sig) {
  bool *keep = tg_xcalloc((size_t)lk->n_args + 1, 1);
  for (int i = 0; i < ws->n; i++) {
    if (ws->group[i] >= 0) continue;
    tg_shape any;
    tg_shape_analyse(&any, ws->body[i], any_decl, NULL);
    for (int b = 0; b < any.n_bufs; b++) {
      int x = tg_lkernel_arg(lk, any.bufs[b]);
      if (x >= 0) keep[x] = true;
    }
    tg_shape_free(&any);
  }
  wi->args = tg_alloc(a, sizeof *wi->args * (size_t)(lk->n_args + 1));
  for (int x = 0; x < lk->n_args; x++) {
    if (!keep[x]) continue;
    wi->args[wi->n_args++] = (tg_cuda_arg){lk->args[x], lk->arg_read[x], lk->arg_written[x]};
    tg_sb_printf(sig, "%s%s b%d", sig->n ? ", " : "", tg_emit_param_decl(ax, lk->args[x]), lk->args[x]);
  }
  free(keep);
}

/* Group g's representative: its first step's shape. */
static const tg_shape *group_shape(const wave_steps *ws, int g) {
  for (int i = 0; i < ws->n; i++)
    if (ws->group[i] == g) return &ws->S[i];
  abort();
}

/* Table g as the runtime will fill it: an entry per step of the group, in
 * block order, with its buffers and the literals of R that vary; the
 * group's steps listed into steps. */
static void wave_table_fill(tg_arena *a, const tg_lkernel *lk, const wave_steps *ws, int g, const bool *vary,
                            tg_cuda_table *T, tg_sbuf *steps) {
  const tg_shape *R = group_shape(ws, g);
  int count = 0, nl = 0;
  for (int i = 0; i < ws->n; i++) count += ws->group[i] == g;
  for (int l = 0; l < R->n_lits; l++) nl += vary[l];
  T->param = tg_sprintf(a, "tg_table%d", g);
  T->n_bufs = R->n_bufs, T->n_lits = nl, T->n_entries = count;
  bool *rd = tg_alloc(a, (size_t)R->n_bufs + 1), *wr = tg_alloc(a, (size_t)R->n_bufs + 1);
  for (int b = 0; b < R->n_bufs; b++) {
    int x = tg_lkernel_arg(lk, R->bufs[b]);
    if (x >= 0) rd[b] = lk->arg_read[x], wr[b] = lk->arg_written[x];
  }
  T->buf_read = rd, T->buf_written = wr;
  T->entries = tg_alloc(a, sizeof *T->entries * (size_t)count);
  for (int k = 0, e = 0; k < ws->n; k++) {
    int i = ws->order[k];
    if (ws->group[i] != g) continue;
    const tg_shape *S = &ws->S[i];
    int *bufs = tg_alloc(a, sizeof(int) * (size_t)(S->n_bufs + 1));
    int64_t *lits = tg_alloc(a, sizeof(int64_t) * (size_t)(nl + 1));
    for (int b = 0; b < S->n_bufs; b++) bufs[b] = (int)S->bufs[b];
    for (int l = 0, v = 0; l < S->n_lits; l++)
      if (vary[l]) lits[v++] = tg_shape_lit(S, l);
    T->entries[e++] = (tg_cuda_table_entry){ws->step_of[i], ws->first[i], bufs, lits};
    tg_sb_printf(steps, "%s%d", steps->n ? ", " : "", ws->step_of[i]);
  }
}

/* Table g's entry as the kernel reads it (8-byte fields), and its shape's
 * __device__ function TGSELF_s<g>. */
static void wave_table_shape(tg_sbuf *out, const wave_steps *ws, int g, const bool *vary, const tg_cuda_table *T,
                             const char *steps, tg_param_ctx *ax) {
  const tg_shape *R = group_shape(ws, g);
  tg_sb_printf(out, "// tg_table%d: one entry per step of shape %d (steps %s), in block order, written by\n"
                    "// the runtime where the buffers are (the manifest's \"tables\"): its first block, each\n"
                    "// buffer's address and bytes (b0..), and the sizes that differ between the steps (n0..).\n",
               g, g, steps);
  tg_sb_printf(out, "struct TGSELF_e%d {\n  unsigned long long first;\n", g);
  if (R->n_bufs) tg_sb_printf(out, "  tg_table_buf b[%d];\n", R->n_bufs);
  if (T->n_lits) tg_sb_printf(out, "  long long n[%d];\n", T->n_lits);
  tg_sb_printf(out, "};\nstatic_assert(sizeof(TGSELF_e%d) == %zu && alignof(TGSELF_e%d) == 8, "
                    "\"the runtime writes 8-byte fields (cuda_plan.h: tg_cuda_table)\");\n\n",
               g, tg_cuda_table_entry_bytes(T), g);
  tg_sb_printf(out, "__device__ void TGSELF_s%d(", g);
  tg_shape_params(out, R, vary, tg_emit_param_decl, ax);
  tg_sb_puts(out, ") {\n");
  tg_shape_body(out, R, vary);
  tg_sb_puts(out, "}\n\n");
}

/* Every group's table (wi->tables), its shape's text into out, and its
 * table parameter declared in sig. */
static void wave_tables(tg_arena *a, const tg_lkernel *lk, const wave_steps *ws, tg_param_ctx *ax, wave_info *wi,
                        tg_sbuf *out, tg_sbuf *sig) {
  wi->tables = tg_alloc(a, sizeof *wi->tables * (size_t)ws->n_groups);
  wi->n_tables = ws->n_groups;
  for (int g = 0; g < ws->n_groups; g++) {
    const tg_shape *R = group_shape(ws, g);
    bool *vary = tg_xcalloc((size_t)R->n_lits + 1, 1);
    for (int i = 0; i < ws->n; i++)
      if (ws->group[i] == g) tg_shape_vary(R, &ws->S[i], vary);
    tg_sbuf steps = {0};
    wave_table_fill(a, lk, ws, g, vary, &wi->tables[g], &steps);
    wave_table_shape(out, ws, g, vary, &wi->tables[g], tg_sb_text(&steps), ax);
    tg_sb_printf(sig, "%sTG_ARG(const TGSELF_e%d) tg_table%d", sig->n ? ", " : "", g, g);
    tg_sb_free(&steps);
    free(vary);
  }
}

/* The branches of the steps that run inline (no table: group < 0), in
 * block order; *sep is " else " after the first branch. */
static void inline_branches(tg_sbuf *out, const tg_lkernel *lk, const wave_steps *ws, const char **sep) {
  for (int k = 0; k < ws->n; k++) {
    int i = ws->order[k];
    if (ws->group[i] >= 0) continue;
    long long nb = tg_cuda_step_blocks(&lk->steps[ws->step_of[i]]);
    tg_sb_printf(out, "%sif (blockIdx.x < %lldu) {  // step %d: %lld block%s\n", *sep, ws->first[i] + nb,
                 ws->step_of[i], nb, nb == 1 ? "" : "s");
    tg_sb_puts(out, ws->body[i]);
    tg_sb_puts(out, "  }");
    *sep = " else ";
  }
}

/* The branch of table g's steps: its block's entry, the entry's buffers
 * as pointers, and the shape's function called with them and the entry's
 * sizes. */
static void table_branch(tg_sbuf *out, const tg_lkernel *lk, const wave_steps *ws, int g, const tg_cuda_table *T,
                         tg_param_ctx *ax, const char **sep) {
  const tg_cuda_table_entry *last = &T->entries[T->n_entries - 1];
  long long end = last->first + tg_cuda_step_blocks(&lk->steps[last->step]);
  tg_sb_printf(out, "%sif (blockIdx.x < %lldu) {  // %d steps of shape %d, blocks from %lld: tg_table%d's entries\n",
               *sep, end, T->n_entries, g, T->entries[0].first, g);
  tg_sb_printf(out, "    const TGSELF_e%d tg_e = tg_table%d[tg_table_find(tg_table%d, %d, blockIdx.x)];\n", g, g, g,
               T->n_entries);
  const tg_shape *R = group_shape(ws, g);
  for (int b = 0; b < T->n_bufs; b++) {
    const char *d = tg_emit_param_decl(ax, R->bufs[b]); /* "TG_ARG(const float)": the element type within */
    tg_sb_printf(out, "    TG_TABLE_PTR(%.*s, tg_p%d, tg_e.b[%d]);\n", (int)strlen(d) - 8, d + 7, b, b);
  }
  tg_sb_printf(out, "    TGSELF_s%d(", g);
  for (int b = 0; b < T->n_bufs; b++) tg_sb_printf(out, "%stg_p%d", b ? ", " : "", b);
  for (int l = 0; l < T->n_lits; l++) tg_sb_printf(out, "%stg_e.n[%d]", T->n_bufs || l ? ", " : "", l);
  tg_sb_puts(out, ");\n  }");
  *sep = " else ";
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
static char *wave_text(tg_arena *a, const tg_program *p, const tg_lkernel *lk, int w, const char *params, wave_info *wi,
                       tg_step_bytes *bytes) {
  memset(wi, 0, sizeof *wi);
  wave_steps ws;
  wave_steps_collect(&ws, p, lk, w, bytes);
  tg_param_ctx ax = {a, p, lk, TG_DIALECT_CUDA};
  wave_steps_group(&ws, &ax);
  tg_sbuf out = {0};
  const char *sep = "  ";
  const int threads = tg_cuda_wave_threads(p, lk, w); /* as the plan launches it */
  if (!ws.n_groups) {
    tg_sb_printf(&out, "extern \"C\" __global__ void __launch_bounds__(%d) TGSELF(%s) {\n", threads, params);
    for (int i = 0; i < ws.n; i++) ws.order[i] = i;
    inline_branches(&out, lk, &ws, &sep);
  } else {
    wave_steps_reorder(&ws, lk, &ax);
    tg_sbuf sig = {0};
    wave_kept_args(a, lk, &ws, &ax, wi, &sig);
    wave_tables(a, lk, &ws, &ax, wi, &out, &sig);
    tg_sb_printf(&out, "extern \"C\" __global__ void __launch_bounds__(%d) TGSELF(%s) {\n", threads,
                 tg_sb_text(&sig));
    tg_sb_free(&sig);
    inline_branches(&out, lk, &ws, &sep);
    for (int g = 0; g < ws.n_groups; g++) table_branch(&out, lk, &ws, g, &wi->tables[g], &ax, &sep);
  }
  tg_sb_puts(&out, "\n}\n");
  wave_steps_free(&ws);
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
  const char *readable; /* the first place's kind and kernel name, as an identifier's tail */
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

/* "row max@std.tg:43" as the tail of an identifier, "row_max_std_tg_43",
 * at most 40 characters: what a profiler's list of kernels shows beside
 * the hash that names a unit. */
static const char *readable_tail(tg_arena *a, const char *kind, const char *name) {
  const char *src = tg_sprintf(a, "%s %s", kind, name ? name : "");
  char buf[41];
  size_t n = 0;
  for (const char *s = src; *s && n < sizeof buf - 1; s++) {
    if (isalnum((unsigned char)*s)) buf[n++] = *s;
    else if (n && buf[n - 1] != '_') buf[n++] = '_';
  }
  while (n && buf[n - 1] == '_') n--;
  buf[n] = 0;
  return tg_strdup(a, buf);
}

/* The unit of text (named TGSELF), added if new; its index.  readable:
 * the place's kind and kernel name (readable_tail). */
static int add_unit(ubuild *B, const char *text, bool flash, const char *comment, const char *place,
                    const char *readable) {
  tg_sbuf out = {0}, key = {0};
  char hex[TG_SHA256_HEX];
  tg_canonical_hash(text, &out, &key, hex);
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
    n->readable = readable;
    n->flash = flash;
  } else {
    tg_sb_free(&key);
    tg_sb_free(&out);
  }
  tg_sb_printf(&B->u[u].places, " *   %s\n", place);
  B->u[u].n_places++;
  return u;
}

/* Which unit each launched function of the program is: per kernel, the
 * unit of each wave's function and of each flash step (-1: none), and
 * each wave's tables. */
typedef struct unit_map {
  int **wave_unit;
  int **step_unit;
  wave_info **waves;
} unit_map;

/* The units of kernel k's waves: one function each wave that launches a step. */
static void wave_units(ubuild *B, const tg_program *p, const tg_cuda_plan *plan, int k, const char *comment,
                       const char *params, unit_map *M) {
  tg_arena *a = B->a;
  const tg_lkernel *lk = &p->kernels[k];
  const tg_kernel *K = &p->g->kernels[lk->kernel];
  for (int w = 0; w < lk->n_waves; w++) {
    M->wave_unit[k][w] = -1;
    bool any = false;
    for (int s = 0; s < lk->n_steps; s++) any |= lk->steps[s].wave == w && tg_cuda_step_launched(&lk->steps[s]);
    if (!any) continue;
    const char *place = tg_sprintf(a, "k%d_w%d: %s \"%s\" (%s)", lk->kernel, w, tg_kernel_kind_name(K->kind), K->name,
                                   plan->where[k]);
    M->wave_unit[k][w] = add_unit(B, wave_text(a, p, lk, w, params, &M->waves[k][w], plan->step_bytes[k]), false, comment, place,
                                  readable_tail(a, tg_kernel_kind_name(K->kind), K->name));
  }
}

/* The units of kernel k's flash attention steps, and the suffixes of the
 * __global__ functions each defines (flash.h: tg_flash_cuda_launches). */
static void flash_units(ubuild *B, const tg_program *p, const tg_cuda_plan *plan, int k, const char *comment,
                        unit_map *M) {
  tg_arena *a = B->a;
  const tg_lkernel *lk = &p->kernels[k];
  const tg_kernel *K = &p->g->kernels[lk->kernel];
  for (int s = 0; s < lk->n_steps; s++) {
    const tg_step *st = &lk->steps[s];
    M->step_unit[k][s] = -1;
    if (st->kind != TG_STEP_FLASH_FWD && st->kind != TG_STEP_FLASH_BWD) continue;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) abort();
    tg_flash_emit_cuda_kernels(f, "TGSELF", &st->flash, st->kind == TG_STEP_FLASH_BWD);
    fclose(f);
    const char *place = tg_sprintf(a, "%s: %s \"%s\" (%s)", st->fn, tg_kernel_kind_name(K->kind), K->name,
                                   plan->where[k]);
    int u = add_unit(B, text, true, comment, place, readable_tail(a, "", K->name));
    free(text);
    M->step_unit[k][s] = u;
    if (!B->u[u].globals) {
      tg_flash_launch fl[TG_FLASH_MAX_LAUNCHES];
      int nl = tg_flash_cuda_launches(&st->flash, "TGSELF", st->kind == TG_STEP_FLASH_BWD, fl);
      B->u[u].globals = tg_alloc(a, sizeof(char *) * (size_t)(nl + 1));
      for (int i = 0; i < nl; i++) B->u[u].globals[B->u[u].n_globals++] = tg_strdup(a, fl[i].name + 6);
    }
  }
}

/* Every launched function of the program, as units into B and M. */
static void collect_units(ubuild *B, const tg_program *p, const tg_cuda_plan *plan, unit_map *M) {
  tg_arena *a = B->a;
  M->wave_unit = tg_alloc(a, sizeof *M->wave_unit * (size_t)(p->n_kernels + 1));
  M->step_unit = tg_alloc(a, sizeof *M->step_unit * (size_t)(p->n_kernels + 1));
  M->waves = tg_alloc(a, sizeof *M->waves * (size_t)(p->n_kernels + 1));
  for (int k = 0; k < p->n_kernels; k++) {
    const tg_lkernel *lk = &p->kernels[k];
    M->wave_unit[k] = tg_alloc(a, sizeof(int) * (size_t)(lk->n_waves + 1));
    M->waves[k] = tg_alloc(a, sizeof(wave_info) * (size_t)(lk->n_waves + 1));
    memset(M->waves[k], 0, sizeof(wave_info) * (size_t)(lk->n_waves + 1));
    M->step_unit[k] = tg_alloc(a, sizeof(int) * (size_t)(lk->n_steps + 1));
    tg_sbuf cm = {0}, params = {0};
    tg_emit_kernel_comment(&cm, p, lk);
    tg_emit_params(&params, p, lk, TG_DIALECT_CUDA);
    const char *comment = tg_strdup(a, tg_sb_text(&cm));
    wave_units(B, p, plan, k, comment, tg_sb_text(&params), M);
    flash_units(B, p, plan, k, comment, M);
    tg_sb_free(&cm);
    tg_sb_free(&params);
  }
}

/* Unit u of ks from what B gathered for it (then freed): its name, its
 * text headed by its places, the body that is compiled, its globals. */
static void finish_unit(tg_arena *a, unit_b *b, tg_cuda_kernels *ks, int u) {
  tg_cuda_unit *U = &ks->units[u];
  /* 40 bits of the hash name a unit; two units sharing them (about one
   * program in 10^9) take all 256.  Then, for a person reading a
   * profiler's list, its first place's kind and kernel name. */
  const char *tail = b->readable && *b->readable ? b->readable : NULL;
  U->name = tg_sprintf(a, "f_%.10s%s%s", b->hex, tail ? "_" : "", tail ? tail : "");
  for (int v = 0; v < u; v++)
    if (!strncmp(ks->units[v].name, U->name, 12))
      U->name = tg_sprintf(a, "f_%s%s%s", b->hex, tail ? "_" : "", tail ? tail : "");
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

/* Every launch of plan by its unit's function; a wave launch with tables
 * gets its buffer parameters and its tables. */
static void name_launches(tg_arena *a, const tg_program *p, tg_cuda_plan *plan, const tg_cuda_kernels *ks,
                          const unit_map *M) {
  for (int i = 0; i < plan->n_ops; i++) {
    tg_cuda_op *op = &plan->ops[i];
    if (op->kind != TG_CUDA_LAUNCH) continue;
    if (op->step < 0) {
      const wave_info *wi = &M->waves[op->lkernel][op->wave];
      op->launch.function = ks->units[M->wave_unit[op->lkernel][op->wave]].name;
      if (wi->n_tables) {
        op->launch.args = wi->args, op->launch.n_args = wi->n_args;
        op->launch.tables = wi->tables, op->launch.n_tables = wi->n_tables;
        for (int t = 0; t < wi->n_tables; t++) wi->tables[t].shape = tg_sprintf(a, "%s_s%d", op->launch.function, t);
      }
    } else {
      const tg_step *st = &p->kernels[op->lkernel].steps[op->step];
      const char *suffix = op->launch.function + strlen(st->fn);
      op->launch.function = tg_sprintf(a, "%s%s", ks->units[M->step_unit[op->lkernel][op->step]].name, suffix);
    }
  }
}

tg_cuda_kernels *tg_cuda_kernels_make(tg_arena *a, const tg_program *p, tg_cuda_plan *plan) {
  ubuild B = {a, NULL, 0, 0};
  unit_map M;
  plan->step_bytes = tg_alloc(a, sizeof *plan->step_bytes * (size_t)(p->n_kernels + 1));
  for (int k = 0; k < p->n_kernels; k++)
    plan->step_bytes[k] = tg_alloc(a, sizeof **plan->step_bytes * (size_t)(p->kernels[k].n_steps + 1));
  collect_units(&B, p, plan, &M);
  tg_cuda_kernels *ks = tg_alloc(a, sizeof *ks);
  ks->units = tg_alloc(a, sizeof *ks->units * (size_t)(B.n + 1));
  ks->n_units = B.n;
  for (int u = 0; u < B.n; u++) finish_unit(a, &B.u[u], ks, u);
  free(B.u);
  name_launches(a, p, plan, ks, &M);
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
