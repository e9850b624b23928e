/* report.c: the page of `tgc --report html` (report.h).
 *
 * The C side writes data, not markup: the page is a short HTML shell, the
 * embedded style sheet and script, and one JSON block holding what the
 * compiler made.  Keeping the drawing in the script keeps this file a
 * plain serializer whose every field is a number or a name the compiler
 * already has, and keeps the page's size proportional to the step (one
 * entry per kernel, launch, buffer and bucket, each distinct CUDA function
 * once).  Strings are escaped for JSON and, since the block sits inside a
 * <script> element, '<' as \u003c so that no text can close it. */
#include "report.h"

#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

/* report/page.css and report/page.js, embedded at build time (CMakeLists.txt) */
extern const char tg_report_css[];
extern const char tg_report_js[];

/* The page is some two megabytes of short strings and numbers: stdio's
 * cost a call (fwrite, fputc) was most of writing it, so short pieces go
 * through putc_unlocked, which writes into the stream's buffer in line
 * (each page is written by one thread). */
static void put_bytes(FILE *out, const unsigned char *s, size_t n) {
  if (n > 32) {
    fwrite(s, 1, n, out);
    return;
  }
  for (size_t i = 0; i < n; i++) putc_unlocked(s[i], out);
}

/* s as a JSON string that is safe inside <script>. */
static void jstr(FILE *out, const char *s) {
  putc_unlocked('"', out);
  const unsigned char *c = (const unsigned char *)(s ? s : "");
  for (;;) {
    /* the run of characters that need no escape goes out in one write:
     * the kernels' sources are most of the page, a character at a time
     * was half of writing it */
    size_t run = 0;
    while (c[run] >= 0x20 && c[run] != '"' && c[run] != '\\' && c[run] != '<') run++;
    put_bytes(out, c, run);
    c += run;
    if (!*c) break;
    if (*c == '"' || *c == '\\') {
      putc_unlocked('\\', out);
      putc_unlocked(*c, out);
    } else if (*c == '\n') {
      putc_unlocked('\\', out);
      putc_unlocked('n', out);
    } else if (*c == '<') {
      fputs("\\u003c", out);
    } else {
      fprintf(out, "\\u%04x", *c);
    }
    c++;
  }
  putc_unlocked('"', out);
}

/* key, already spelled with what comes before it (", \"name\": "), then
 * value as a JSON string. */
static void jfield(FILE *out, const char *key, const char *value) {
  fputs(key, out);
  jstr(out, value);
}

/* The index of file in the page's list of sources, or -1. */
static int source_index(const tg_source *const *files, int n_files, const char *file) {
  if (!file) return -1;
  for (int i = 0; i < n_files; i++)
    if (!strcmp(files[i]->path, file)) return i;
  return -1;
}

static void write_sources(FILE *out, const tg_source *const *files, int n_files) {
  fputs(",\n\"sources\": [", out);
  for (int i = 0; i < n_files; i++) {
    fprintf(out, "%s\n {\"path\": ", i ? "," : "");
    jstr(out, files[i]->path);
    jfield(out, ", \"text\": ", files[i]->text);
    fputc('}', out);
  }
  fputs("]", out);
}

static void write_passes(FILE *out, const tg_pass_log *log) {
  fputs(",\n\"passes\": [", out);
  for (int i = 0; log && i < log->n; i++) {
    const tg_pass_record *r = &log->at[i];
    const tg_pass_info *info = tg_pass_named(r->name);
    fprintf(out, "%s\n {\"name\": ", i ? "," : "");
    jstr(out, r->name);
    jfield(out, ", \"what\": ", info ? info->what : "");
    fprintf(out, ", \"before\": %d, \"after\": %d, \"kernels\": %d, \"seconds\": %.6f}", r->nodes_before,
            r->nodes_after, r->kernels_after, r->seconds);
  }
  fputs("]", out);
}

static void write_summary(FILE *out, const tg_report_page *r) {
  const tg_graph *g = r->g;
  fputs(",\n\"config\": [", out);
  for (int i = 0; i < g->n_config; i++) {
    fprintf(out, "%s[", i ? ", " : "");
    jstr(out, g->config[i].name);
    fprintf(out, ", %.17g]", g->config[i].value);
  }
  int64_t params = 0, param_bytes = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == TG_OP_param) {
      int64_t n = tg_type_numel(&g->nodes[i]->type);
      params += n;
      param_bytes += n * (int64_t)tg_dtype_size(g->nodes[i]->type.dtype);
    }
  fprintf(out, "],\n\"nodes\": %d, \"params\": %lld, \"param_bytes\": %lld", g->n_nodes, (long long)params,
          (long long)param_bytes);
  /* the arena as lowered (the plan's offsets are placed there), with scratch */
  const tg_mem_plan *m = g->memplan;
  if (m)
    fprintf(out, ",\n\"memory\": {\"arena\": %lld, \"scratch\": %lld, \"live\": %lld, \"sum\": %lld, \"persistent\": %lld}",
            (long long)r->p->arena_bytes, (long long)r->p->scratch_bytes, (long long)m->live_bytes,
            (long long)m->sum_bytes, (long long)m->persistent_bytes);
}

/* The GPU the step's roofline is for. */
static void write_gpu(FILE *out, const tg_gpu_spec *gpu) {
  jfield(out, ",\n\"gpu\": {\"name\": ", gpu->description);
  fprintf(out, ", \"hbm\": %g, \"bf16\": %g, \"f32\": %g}", gpu->hbm_bytes_per_s, gpu->bf16_flops_per_s,
          gpu->f32_flops_per_s);
}

/* Per kernel of the graph: the traffic of its launches, summed. */
typedef struct kernel_traffic {
  int64_t bytes_read, bytes_written;
  double flops, seconds;
  int launches, category;
} kernel_traffic;

static kernel_traffic *traffic_by_kernel(const tg_report_page *r) {
  kernel_traffic *kt = tg_xcalloc((size_t)r->g->n_kernels + 1, sizeof *kt);
  for (int k = 0; k <= r->g->n_kernels; k++) kt[k].category = -1;
  for (int i = 0; i < r->traffic->n; i++) {
    const tg_launch_traffic *l = &r->traffic->launch[i];
    kernel_traffic *t = &kt[r->plan->ops[l->op].kernel];
    t->bytes_read += l->bytes_read;
    t->bytes_written += l->bytes_written;
    t->flops += l->flops;
    t->seconds += l->seconds;
    t->launches++;
    if (t->category < 0) t->category = (int)l->category;
  }
  return kt;
}

/* The kernel's .tg lines, [file, line] once each, and its ops by name. */
static void write_kernel_places(FILE *out, const tg_report_page *r, const tg_kernel *K,
                                const tg_source *const *files, int n_files) {
  const tg_graph *g = r->g;
  fputs(", \"lines\": [", out);
  int written = 0;
  for (int i = 0; i < K->n_nodes; i++) {
    const tg_loc *l = &g->nodes[K->nodes[i]]->loc;
    int f = source_index(files, n_files, l->file);
    if (f < 0) continue;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) {
      const tg_loc *o = &g->nodes[K->nodes[j]]->loc;
      seen = o->line == l->line && o->file && !strcmp(o->file, l->file);
    }
    if (!seen) fprintf(out, "%s[%d, %d]", written++ ? ", " : "", f, l->line);
  }
  fputs("], \"ops\": {", out);
  written = 0;
  for (int i = 0; i < K->n_nodes; i++) {
    tg_op op = g->nodes[K->nodes[i]]->op;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = g->nodes[K->nodes[j]]->op == op;
    if (seen) continue;
    int count = 0;
    for (int j = i; j < K->n_nodes; j++) count += g->nodes[K->nodes[j]]->op == op;
    fprintf(out, "%s\"%s\": %d", written++ ? ", " : "", tg_ops[op].name, count);
  }
  fputs("}", out);
}

/* The kernels producing what K reads: the step graph's edges. */
static void write_kernel_inputs(FILE *out, const tg_graph *g, const tg_kernel *K) {
  fputs(", \"from\": [", out);
  int written = 0;
  for (int i = 0; i < K->n_inputs; i++) {
    int from = g->nodes[K->inputs[i]]->kernel;
    if (from < 0) continue;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = g->nodes[K->inputs[j]]->kernel == from;
    if (!seen) fprintf(out, "%s%d", written++ ? ", " : "", from);
  }
  fputs("]", out);
}

/* The CUDA units (cuda_kernels.h) the kernel's launches run. */
static void write_kernel_units(FILE *out, const tg_report_page *r, int lkernel) {
  fputs(", [", out);
  int written = 0, last = -1;
  for (int i = 0; i < r->plan->n_ops; i++) {
    const tg_cuda_op *op = &r->plan->ops[i];
    if (op->lkernel != lkernel || op->kind != TG_CUDA_LAUNCH) continue;
    for (int u = 0; u < r->ks->n_units; u++)
      for (int x = 0; x < r->ks->units[u].n_globals; x++)
        if (u != last && !strcmp(r->ks->units[u].globals[x], op->launch.function)) {
          fprintf(out, "%s%d", written++ ? ", " : "", u);
          last = u;
        }
  }
  fputs("]", out);
}

/* What the kernels are, known before their code is made: each one's
 * name, kind, phase, place, .tg lines, ops and the kernels it reads from.
 * What their code costs comes later (write_kernel_costs). */
static void write_kernels(FILE *out, const tg_report_page *r, const tg_source *const *files, int n_files) {
  const tg_graph *g = r->g;
  const tg_program *p = r->p;
  fputs(",\n\"kernels\": [", out);
  for (int i = 0; i < p->n_kernels; i++) {
    const tg_lkernel *lk = &p->kernels[i];
    const tg_kernel *K = &g->kernels[lk->kernel];
    fprintf(out, "%s\n {\"id\": %d, \"name\": ", i ? "," : "", lk->kernel);
    jstr(out, K->name);
    fprintf(out, ", \"kind\": \"%s\", \"phase\": \"%s\", \"folded_into\": %d, \"where\": ", tg_kernel_kind_name(K->kind),
            K->n_nodes ? tg_phase_name(g->nodes[K->nodes[0]]->phase) : "", lk->folded_into);
    jstr(out, r->plan->where[i]);
    write_kernel_places(out, r, K, files, n_files);
    write_kernel_inputs(out, g, K);
    fputc('}', out);
  }
  fputs("]", out);
}

/* Once the kernels' code is made, per kernel in write_kernels' order:
 * [bytes read, written, FLOPs, roofline seconds, launches, category, its
 * CUDA units] (page.js puts them on the kernels by position). */
static void write_kernel_costs(FILE *out, const tg_report_page *r) {
  const tg_program *p = r->p;
  kernel_traffic *kt = traffic_by_kernel(r);
  fputs(",\n\"kernel_costs\": [", out);
  for (int i = 0; i < p->n_kernels; i++) {
    const kernel_traffic *t = &kt[p->kernels[i].kernel];
    fprintf(out, "%s\n [%lld, %lld, %.17g, %.9g, %d, \"%s\"", i ? "," : "", (long long)t->bytes_read,
            (long long)t->bytes_written, t->flops, t->seconds, t->launches,
            t->category >= 0 ? tg_traffic_category_name((tg_traffic_category)t->category) : "");
    write_kernel_units(out, r, i);
    fputc(']', out);
  }
  fputs("]", out);
  free(kt);
}

/* ---- the step graph's runs: kernels repeated layer after layer --------------- */

/* A run of the step: kernels start .. start + period * repeats - 1, the same
 * period kernels repeats times over (repeats 1: one kernel). */
typedef struct run_of_kernels {
  int start, period, repeats;
} run_of_kernels;

/* What makes two kernels alike for the runs: kind, .tg places and ops. */
static char *kernel_signature(const tg_report_page *r, int i) {
  const tg_kernel *K = &r->g->kernels[r->p->kernels[i].kernel];
  tg_sbuf b = {0};
  tg_sb_printf(&b, "%s|%s|", tg_kernel_kind_name(K->kind), r->plan->where[i]);
  bool seen[TG_NOPS] = {0};
  for (int x = 0; x < K->n_nodes; x++) {
    tg_op op = r->g->nodes[K->nodes[x]]->op;
    if (!seen[op]) tg_sb_printf(&b, "%s,", tg_ops[op].name);
    seen[op] = true;
  }
  return tg_sb_take(&b);
}

static bool same_kernels(char *const *sig, int a, int b, int n) {
  for (int x = 0; x < n; x++)
    if (strcmp(sig[a + x], sig[b + x])) return false;
  return true;
}

/* The runs, greedily from the first kernel: at each, the period (2 to 80
 * kernels) whose repeats cover the most kernels beyond the first period. */
static run_of_kernels *kernel_runs(const tg_report_page *r, int *n_runs) {
  int n = r->p->n_kernels;
  char **sig = tg_xcalloc((size_t)n + 1, sizeof *sig);
  for (int i = 0; i < n; i++) sig[i] = kernel_signature(r, i);
  run_of_kernels *runs = tg_xcalloc((size_t)n + 1, sizeof *runs);
  *n_runs = 0;
  for (int i = 0; i < n;) {
    run_of_kernels best = {i, 1, 1};
    for (int p = 2; p <= 80 && i + 2 * p <= n; p++) {
      int reps = 1;
      while (i + (reps + 1) * p <= n && same_kernels(sig, i, i + reps * p, p)) reps++;
      if (reps >= 2 && p * (reps - 1) > best.period * (best.repeats - 1)) best = (run_of_kernels){i, p, reps};
    }
    if (best.repeats < 2) best.period = 1;
    runs[(*n_runs)++] = best;
    i += best.period * best.repeats;
  }
  for (int i = 0; i < n; i++) free(sig[i]);
  free(sig);
  return runs;
}

static void write_runs(FILE *out, const tg_report_page *r) {
  int n;
  run_of_kernels *runs = kernel_runs(r, &n);
  fputs(",\n\"runs\": [", out);
  for (int i = 0; i < n; i++)
    fprintf(out, "%s[%d, %d, %d]", i ? ", " : "", runs[i].start, runs[i].period, runs[i].repeats);
  fputs("]", out);
  free(runs);
}

/* A DOT string: s quoted, '"' and '\\' escaped. */
static void dot_str(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', out);
    fputc(*s, out);
  }
  fputc('"', out);
}

int tg_report_step_dot(FILE *out, const tg_report_page *r) {
  const tg_program *p = r->p;
  int n_runs;
  run_of_kernels *runs = kernel_runs(r, &n_runs);
  int *node_of = tg_xcalloc((size_t)p->n_kernels + 1, sizeof *node_of); /* lowered kernel -> its node: itself or -(run + 1) */
  int *lowered = tg_xcalloc((size_t)r->g->n_kernels + 1, sizeof *lowered); /* graph kernel -> lowered kernel */
  for (int i = 0; i <= r->g->n_kernels; i++) lowered[i] = -1;
  for (int i = 0; i < p->n_kernels; i++) lowered[p->kernels[i].kernel] = i;
  fputs("digraph step {\n  rankdir=TB; nodesep=0.15; ranksep=0.25;\n"
        /* Courier: dot sizes boxes by its own estimate of the font
         * (tgc runs it without Pango: tools/tgc_dot.c), and a monospace
         * font is as wide in any browser as the estimate */
        "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#dfe8f7\", fontname=\"Courier\", fontsize=10,"
        " height=0.25];\n"
        "  edge [color=\"#8890a0\", arrowsize=0.5];\n",
        out);
  for (int i = 0; i < n_runs; i++) {
    const run_of_kernels *run = &runs[i];
    for (int x = 0; x < run->period * run->repeats; x++) node_of[run->start + x] = run->repeats > 1 ? -(i + 1) : run->start + x;
    const tg_lkernel *lk = &p->kernels[run->start];
    char label[256];
    if (run->repeats > 1) {
      snprintf(label, sizeof label, "×%d: k%d–k%d (%d kernels)", run->repeats, lk->kernel,
               p->kernels[run->start + run->period - 1].kernel, run->period);
      fprintf(out, "  g%d [id=\"g%d\", shape=box3d, fillcolor=\"#ffffff\", label=", i, i);
    } else {
      snprintf(label, sizeof label, "k%d %s", lk->kernel, r->g->kernels[lk->kernel].name);
      fprintf(out, "  k%d [id=\"k%d\", label=", lk->kernel, lk->kernel);
    }
    dot_str(out, label);
    fputs("];\n", out);
  }
  /* an edge between two nodes once, from producer to reader */
  char *drawn = tg_xcalloc((size_t)(n_runs + p->n_kernels) * (size_t)(n_runs + p->n_kernels) + 1, 1);
  for (int i = 0; i < p->n_kernels; i++) {
    const tg_kernel *K = &r->g->kernels[p->kernels[i].kernel];
    for (int x = 0; x < K->n_inputs; x++) {
      int from = r->g->nodes[K->inputs[x]]->kernel;
      if (from < 0 || (from = lowered[from]) < 0) continue;
      int a = node_of[from], b = node_of[i];
      if (a == b) continue;
      size_t at = (size_t)(a < 0 ? p->n_kernels - a - 1 : a) * (size_t)(n_runs + p->n_kernels) +
                  (size_t)(b < 0 ? p->n_kernels - b - 1 : b);
      if (drawn[at]) continue;
      drawn[at] = 1;
      fprintf(out, "  %c%d -> %c%d;\n", a < 0 ? 'g' : 'k', a < 0 ? -a - 1 : p->kernels[a].kernel, b < 0 ? 'g' : 'k',
              b < 0 ? -b - 1 : p->kernels[b].kernel);
    }
  }
  fputs("}\n", out);
  free(drawn);
  free(lowered);
  free(node_of);
  free(runs);
  return n_runs;
}

static void write_units(FILE *out, const tg_cuda_kernels *ks) {
  jfield(out, ",\n\"prelude\": ", ks->prelude);
  fputs(",\n\"cuda\": [", out);
  for (int u = 0; u < ks->n_units; u++) {
    fprintf(out, "%s\n {\"name\": ", u ? "," : "");
    jstr(out, ks->units[u].name);
    jfield(out, ", \"code\": ", ks->units[u].code);
    fputc('}', out);
  }
  fputs("]", out);
}

/* Every launch and matmul in run order, the categories and the totals. */
static void write_traffic(FILE *out, const tg_report_page *r) {
  const tg_traffic *t = r->traffic;
  fputs(",\n\"launches\": [", out);
  for (int i = 0; i < t->n; i++) {
    const tg_launch_traffic *l = &t->launch[i];
    const tg_cuda_op *op = &r->plan->ops[l->op];
    fprintf(out, "%s\n [%d, ", i ? "," : "", op->kernel);
    jstr(out, op->kind == TG_CUDA_MATMUL ? "cuBLASLt matmul" : op->launch.function);
    fprintf(out, ", \"%s\", %lld, %lld, %.17g, %.9g, %d, ", tg_traffic_category_name(l->category),
            (long long)l->bytes_read, (long long)l->bytes_written, l->flops, l->seconds, l->tensor_cores);
    jstr(out, l->flag ? l->flag : "");
    fputc(']', out);
  }
  fputs("],\n\"categories\": [", out);
  for (int c = 0; c < TG_TRAFFIC_NCATEGORIES; c++)
    fprintf(out, "%s[\"%s\", %d, %lld, %.17g, %.9g]", c ? ", " : "", tg_traffic_category_name((tg_traffic_category)c),
            t->by_category[c].launches, (long long)t->by_category[c].bytes, t->by_category[c].flops,
            t->by_category[c].seconds);
  fprintf(out, "],\n\"totals\": {\"read\": %lld, \"written\": %lld, \"flops\": %.17g, \"seconds\": %.9g, \"flagged\": %d}",
          (long long)t->bytes_read, (long long)t->bytes_written, t->flops, t->seconds, t->n_flagged);
}

/* The memory plan's buffers ([value, first kernel, last kernel, bytes,
 * name]) and the all-reduce buckets. */
static void write_memory_and_buckets(FILE *out, const tg_graph *g) {
  fputs(",\n\"buffers\": [", out);
  for (int i = 0; g->memplan && i < g->memplan->n_buffers; i++) {
    const tg_buffer *b = &g->memplan->buffers[i];
    const tg_node *n = g->nodes[b->node];
    fprintf(out, "%s[%d, %d, %d, %lld, ", i ? ", " : "", b->node, b->first, b->last, (long long)b->bytes);
    char name[160];
    snprintf(name, sizeof name, "%%%d %s%s%s", b->node, tg_ops[n->op].name, n->name ? " " : "", n->name ? n->name : "");
    jstr(out, name);
    fputc(']', out);
  }
  fputs("],\n\"buckets\": [", out);
  for (int i = 0; g->allreduce && i < g->allreduce->n_buckets; i++) {
    const tg_bucket *b = &g->allreduce->buckets[i];
    fprintf(out, "%s[%d, %lld, %d]", i ? ", " : "", b->after_kernel, (long long)b->bytes, b->n_grads);
  }
  fputs("]", out);
}

/* The IR's collectives (ZeRO stage 3's all-gathers and reduce-scatters,
 * tensor parallelism's all-reduces):
 * [its kernel, op, bytes each rank sends, ranks, the first kernel that
 * reads its output or -1], as the manifest counts them. */
static void write_collectives(FILE *out, const tg_cuda_plan *plan) {
  fputs(",\n\"collectives\": [", out);
  int written = 0;
  for (int i = 0; i < plan->n_ops; i++) {
    const tg_cuda_op *op = &plan->ops[i];
    if (op->kind != TG_CUDA_COLLECTIVE || op->node < 0) continue;
    const tg_node *n = plan->p->g->nodes[op->node];
    const tg_node *in = n->in[0];
    fprintf(out, "%s[%d, \"%s\", %lld, %d, %d]", written++ ? ", " : "", op->kernel, tg_ops[n->op].name,
            (long long)(tg_type_numel(&in->type) * (int64_t)tg_dtype_size(in->type.dtype)), n->ranks,
            op->ready_at < plan->n_ops ? plan->ops[op->ready_at].kernel : -1);
  }
  fputs("]", out);
}

/* v in decimal, as "%lld" writes it: the findings are thousands of
 * counts, and fprintf's reading of its format cost more than the rest of
 * writing them. */
static void jint(FILE *out, long long v) {
  char buf[TG_FMT_INT_MAX];
  size_t n;
  const char *p = tg_fmt_int(v, buf, &n);
  put_bytes(out, (const unsigned char *)p, n);
}

/* A finding's number: an integer as one (bytes, ids, counts), else
 * enough digits to tell it apart. */
static void jnum(FILE *out, double v) {
  if (v == (double)(long long)v && v > -1e15 && v < 1e15) jint(out, (long long)v);
  else if (v != v || v - v != 0) fputs("null", out); /* NaN, infinities: JSON has none */
  else fprintf(out, "%.9g", v);
}

/* What the passes decided (passes/findings.h), as they recorded it:
 * [pass, verdict, node, source index or -1, line, col, reason or null,
 * {field: number or text}], in the order recorded; the page draws each
 * pass's findings as tables, its places linked to the .tg lines. */
static void write_findings(FILE *out, const tg_findings *s, const tg_source *const *files, int n_files) {
  fputs(",\n\"findings\": [", out);
  for (int i = 0; i < tg_findings_count(s); i++) {
    const tg_finding *f = tg_findings_at(s, i);
    fputs(i ? ",\n [" : "\n [", out);
    jstr(out, f->pass);
    fputs(", ", out);
    jstr(out, f->verdict);
    const long long place[4] = {f->node, source_index(files, n_files, f->loc.file), f->loc.line, f->loc.col};
    for (int k = 0; k < 4; k++) {
      fputs(", ", out);
      jint(out, place[k]);
    }
    fputs(", ", out);
    if (f->reason) jstr(out, f->reason);
    else fputs("null", out);
    fputs(", {", out);
    for (int k = 0; k < f->n_fields; k++) {
      fputs(k ? ", " : "", out);
      jstr(out, f->fields[k].name);
      fputs(": ", out);
      if (f->fields[k].text) jstr(out, f->fields[k].text);
      else jnum(out, f->fields[k].number);
    }
    fputs("}]", out);
  }
  fputs("]", out);
}

static void jints(FILE *out, const int *v, int n) {
  putc_unlocked('[', out);
  for (int i = 0; i < n; i++) {
    if (i) putc_unlocked(',', out);
    jint(out, v[i]);
  }
  putc_unlocked(']', out);
}

/* v's n entries as runs, flattened: [first, length, ...] of runs of
 * numbers each one more than the last (step 1: the nodes' order, mostly
 * numbered in the order they appear) or of equal ones (step 0: their
 * kernels) */
static void jruns(FILE *out, const int *v, int n, int step) {
  putc_unlocked('[', out);
  for (int i = 0; i < n;) {
    int len = 1;
    while (i + len < n && v[i + len] == v[i] + step * len) len++;
    if (i) putc_unlocked(',', out);
    jint(out, v[i]);
    putc_unlocked(',', out);
    jint(out, len);
    i += len;
  }
  putc_unlocked(']', out);
}

/* The IR after each pass (tg_report_ir): [pass, 1] for the text of the
 * pass before, else [pass, 0, head, the nodes' numbers in order (runs of
 * step 1), their kernels (runs of step 0), [[number, phase, op, [inputs'
 * numbers], middle, place] a node changed], [[quoted name, number] an
 * output]]; ir_phases names the phases. */
static void write_ir_after(FILE *out, const tg_report_page *r) {
  fputs(",\n\"ir_phases\": [", out);
  for (int p = 0; p < TG_NPHASES; p++) {
    if (p) fputs(", ", out);
    jstr(out, tg_phase_name((tg_phase)p));
  }
  fputs("],\n\"ir_after\": [", out);
  for (int i = 0; i < r->n_ir_after; i++) {
    const tg_report_ir *x = &r->ir_after[i];
    fputs(i ? ",\n [" : "\n [", out);
    jstr(out, x->pass);
    if (x->same) {
      fputs(", 1]", out);
      continue;
    }
    fputs(", 0, ", out);
    jstr(out, x->head);
    fputs(",\n  ", out);
    jruns(out, x->order, x->n_order, 1);
    fputs(",\n  ", out);
    jruns(out, x->kernel, x->n_order, 0);
    fputs(",\n  [", out);
    for (int k = 0; k < x->n_changed; k++) {
      const tg_report_ir_node *c = &x->changed[k];
      fputs(k ? ",\n   [" : "[", out);
      jint(out, c->id);
      putc_unlocked(',', out);
      jint(out, c->phase);
      putc_unlocked(',', out);
      jstr(out, c->op);
      putc_unlocked(',', out);
      jints(out, c->in, c->nin);
      putc_unlocked(',', out);
      jstr(out, c->middle);
      putc_unlocked(',', out);
      jstr(out, c->place);
      putc_unlocked(']', out);
    }
    fputs("],\n  [", out);
    for (int k = 0; k < x->n_outputs; k++) {
      fputs(k ? ", [" : "[", out);
      jstr(out, x->outputs[k].name);
      putc_unlocked(',', out);
      jint(out, x->outputs[k].id);
      putc_unlocked(']', out);
    }
    fputs("]]", out);
  }
  fputs("]", out);
}

/* The sources in the order they were read (the ctx's list is newest first). */
static int collect_sources(const tg_source *s, const tg_source ***files) {
  int n = 0;
  for (const tg_source *x = s; x; x = x->next) n++;
  *files = tg_xcalloc((size_t)n + 1, sizeof **files);
  int i = n;
  for (const tg_source *x = s; x; x = x->next) (*files)[--i] = x;
  return n;
}

/* The data's first part: what the passes left (their findings, the IR
 * after each), most of the page, and what the step's plan gives before
 * the kernels' code is made (the kernels, the memory plan, the
 * collectives, the runs of layers); write_data_rest needs the code. */
static void write_data_begin(FILE *out, const tg_report_page *r) {
  jfield(out, "{\"model\": ", r->model);
  jfield(out, ", \"command\": ", r->command);
  jfield(out, ", \"precision\": ", r->precision);
  fputs(", \"error\": ", out);
  if (r->error) jstr(out, r->error);
  else fputs("null", out);
  const tg_source **files;
  int n_files = collect_sources(r->sources, &files);
  write_sources(out, files, n_files);
  write_passes(out, r->passes);
  if (!r->error && r->g) {
    write_findings(out, r->findings, files, n_files);
    write_ir_after(out, r);
    jfield(out, ",\n\"ir_pass\": ", r->ir_pass);
    jfield(out, ", \"ir\": ", r->ir_text);
  }
  if (!r->error && r->g && r->p && r->plan) {
    write_summary(out, r);
    write_kernels(out, r, files, n_files);
    write_memory_and_buckets(out, r->g);
    write_collectives(out, r->plan);
    write_runs(out, r);
  }
  free(files);
}

/* The rest: the kernels' code and costs, the step's traffic, dot's
 * drawing, the phases. */
static void write_data_rest(FILE *out, const tg_report_page *r) {
  fputs(",\n\"phases\": [", out);
  for (int i = 0; i < r->n_phases; i++) {
    fprintf(out, "%s[", i ? ", " : "");
    jstr(out, r->phases[i].name);
    fprintf(out, ", %.6f]", r->phases[i].seconds);
  }
  fputs("]", out);
  if (!r->error && r->g && r->p && r->plan && r->ks && r->traffic) {
    write_gpu(out, r->traffic->gpu);
    write_kernel_costs(out, r);
    write_units(out, r->ks);
    write_traffic(out, r);
    jfield(out, ",\n\"step_svg\": ", r->step_svg);
  }
  fputs("}\n", out);
}

/* Everything before the data: the head with its title and style. */
static void page_head(FILE *out, const char *title, const char *tail) {
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<link rel=\"icon\" href=\"data:,\">\n<title>tg: ",
        out);
  for (const char *c = title ? title : ""; *c; c++) {
    if (*c == '<') fputs("&lt;", out);
    else if (*c == '&') fputs("&amp;", out);
    else fputc(*c, out);
  }
  fprintf(out, "%s</title>\n<style>\n%s</style>\n</head>\n<body>\n<div id=\"app\"></div>\n"
               "<script type=\"application/json\" id=\"tg-data\">\n",
          tail, tg_report_css);
}

static void page_tail(FILE *out) { fprintf(out, "</script>\n<script>\n%s</script>\n</body>\n</html>\n", tg_report_js); }

void tg_report_html_begin(FILE *out, const tg_report_page *r) {
  page_head(out, r->model, r->error ? " (error)" : "");
  write_data_begin(out, r);
}

void tg_report_html_end(FILE *out, const tg_report_page *r) {
  write_data_rest(out, r);
  page_tail(out);
}

void tg_report_html(FILE *out, const tg_report_page *r) {
  tg_report_html_begin(out, r);
  tg_report_html_end(out, r);
}

void tg_report_run_html(FILE *out, const tg_report_run *r) {
  page_head(out, r->model, " (run)");
  jfield(out, "{\"model\": ", r->model);
  jfield(out, ", \"error\": null, \"run\": {\"out_dir\": ", r->out_dir);
  jfield(out, ",\n\"config\": ", r->config_text);
  jfield(out, ",\n\"metrics\": ", r->metrics_text);
  jfield(out, ",\n\"samples\": ", r->samples_text);
  fputs("}}\n", out);
  page_tail(out);
}
