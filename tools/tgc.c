/* tgc: the tg compiler's command line.
 *
 * Reading this file tells the whole story of a compilation: read the model
 * (.tg source, or IR text), verify it, then print what was asked for.  The
 * passes of later stages are called here, one line each, in order. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio_ext.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_kernels.h"
#include "diag.h"
#include "file.h"
#include "frontend.h"
#include "ir.h"
#include "nearest.h"
#include "nvrtc.h"
#include "passes.h"
#include "render_c.h"
#include "render_cuda.h"
#include "report.h"
#include "tgc_dot.h"
#include "tgc_plan.h"
#include "traffic.h"
#include "program_dir.h"

#define TG_VERSION "0.1.0"

static const char usage[] =
    "usage: tgc [options] MODEL.tg|GRAPH.tgir\n"
    "\n"
    "Compiles a tg model and prints what it was asked for (by default --stats).\n"
    "\n"
    "Output (one of):\n"
    "  --stats            parameter count, config, and op counts by kind and by op\n"
    "  --emit ir          the IR in its text form (docs/ir.md); tgc reads it back\n"
    "  --emit dot         the graph in Graphviz form (render: dot -Tsvg); a fused\n"
    "                     graph (--grad) draws each kernel as a cluster\n"
    "  --emit cuda        the training step's kernels as one self-contained CUDA\n"
    "                     file for NVRTC (implies --grad); with -o DIR, writes\n"
    "                     DIR/MODEL.cu, DIR/manifest.json (every launch: grid, block,\n"
    "                     arguments; the cuBLASLt matmuls) and DIR/fusion.txt\n"
    "  --emit cubin       --emit cuda -o DIR, then every distinct kernel compiled\n"
    "                     with NVRTC for --arch (no GPU needed), one job per core,\n"
    "                     each cached ($TG_CACHE): DIR/NAME.cubin per kernel; prints\n"
    "                     how long it took and how many were compiled or cached\n"
    "  --arch ARCH        the GPU architecture of --emit cubin (default sm_90)\n"
    "  --emit c           the same as C for the CPU backend (OpenMP; oneDNN's or\n"
    "                     OpenBLAS's matmuls, as tgrun compiles it):\n"
    "                     DIR/MODEL.c, DIR/manifest.json, DIR/fusion.txt with -o DIR\n"
    "  --check            check the model and print nothing\n"
    "\n"
    "What to compile:\n"
    "  --grad             the whole training step: the forward graph, its gradient\n"
    "                     (autodiff) and an AdamW update with gradient clipping\n"
    "                     (nanoGPT's defaults: betas 0.9/0.95, eps 1e-8, weight\n"
    "                     decay 0.1 on 2-D parameters, clip 1.0)\n"
    "  --decode           instead of the training step, one decode step of the\n"
    "                     forward with a key/value cache (the decode pass: input\n"
    "                     pos, caches kv.k.L/kv.v.L, output logits [B, 1, vocab]);\n"
    "                     compiles the model with T = 1 unless -D T= says otherwise\n"
    "  --dump-after PASS  print the IR after PASS (implies --grad for training\n"
    "                     passes, --decode for decode); --dump-after list names them\n"
    "  --report PASS      print what PASS found (flash_attn: each causal attention\n"
    "                     it replaced, and each look-alike it left, with why;\n"
    "                     gelu: each GELU it made one op;\n"
    "                     fusion: the kernels; memplan: each intermediate's\n"
    "                     buffer and the peak memory; schedule: the buckets of\n"
    "                     gradients and where each is all-reduced; precision:\n"
    "                     each value's dtype and the rule that chose it)\n"
    "  --report traffic   every launch of the CUDA step in run order: bytes read and\n"
    "                     written as the lowered code accesses them, FLOPs, a roofline\n"
    "                     time on --gpu (default h100: 3.35 TB/s, 790 TFLOP/s bf16),\n"
    "                     by category and in total, with the tokens/s it implies;\n"
    "                     launches that do not fit a GPU are flagged (implies --grad,\n"
    "                     and bf16 unless --precision says otherwise)\n"
    "  --report html      with -o DIR: what --emit cuda writes, and DIR/index.html,\n"
    "                     one self-contained page of what the compiler did: summary,\n"
    "                     passes, the .tg source beside its kernels (their ops,\n"
    "                     fusion, CUDA, bytes, FLOPs, roofline), the step's graph,\n"
    "                     traffic, memory plan and collectives (docs/report.md); a\n"
    "                     model that fails gets a page with the error; with\n"
    "                     --dump-after PASS, the IR after PASS is on the page;\n"
    "                     with Graphviz's dot, DIR/step.dot and step.svg too\n"
    "  --gpu NAME         the GPU of --report traffic: h100, h200 or a100\n"
    "  --precision P      f32 or bf16: the mixed-precision policy (bf16 matmuls,\n"
    "                     attention and saved activations; f32 master weights,\n"
    "                     statistics, loss and optimizer; docs/precision.md);\n"
    "                     bf16 by default for --emit cuda, f32 otherwise\n"
    "  --ranks N          with --report memplan: also each of N data-parallel ranks'\n"
    "                     memory (parameters, gradients, optimizer state,\n"
    "                     activations, peak) next to plain data parallelism's;\n"
    "                     with --report schedule: every collective of a step\n"
    "                     (all-reduce, reduce-scatter, all-gather), the bytes each\n"
    "                     rank sends and the kernels it overlaps, and the total\n"
    "                     next to plain data parallelism's\n"
    "  --zero S           ... at ZeRO stage S: 0 (none), 1 (optimizer state\n"
    "                     sharded), 2 (and gradients), 3 (and parameters)\n"
    "                     (docs/parallel.md); --zero 3 --ranks N without a report:\n"
    "                     the gradient graph tgrun runs at stage 3 (each weight\n"
    "                     all-gathered from its shard before use, each gradient\n"
    "                     reduce-scattered; no optimizer) for --emit, --dump-after\n"
    "                     and --report traffic\n"
    "  --tensor-rank R    with a tensor axis (the model's mesh tensor = tp, e.g.\n"
    "                     -D tp=2): show rank R's part of the model (default 0);\n"
    "                     --report sharding lists the split parameters and the\n"
    "                     forward's collectives (docs/parallel.md)\n"
    "  --plan-parallel    with --devices N: every parallel layout of the model's\n"
    "                     training step on N devices (data x tensor ranks, ZeRO\n"
    "                     stage, micro-batch), its memory a device, compute and\n"
    "                     communication estimated from what the compiler counts,\n"
    "                     ranked, with the reasons (docs/parallel.md); also\n"
    "                     --gpu (h100), --device-memory GB (the --gpu's: 80 for\n"
    "                     h100, 141 for h200), --link nvlink|ib|ethernet\n"
    "                     (nvlink), --devices-per-node N (8), --precision\n"
    "  --pad-multiple N   pad the vocabulary dims to a multiple of N (default 64:\n"
    "                     50257 -> 50304); the extra logits are masked, so the\n"
    "                     loss and gradients do not change; 1 turns padding off\n"
    "\n"
    "Options:\n"
    "  -D NAME=VALUE      override a config constant, e.g. -D n_layer=2 -D B=4 -D T=64\n"
    "                     (repeatable; the batch B and sequence T are config constants)\n"
    "  -I DIR             also look for imports in DIR (after the importing file's\n"
    "                     directory; then $TG_PATH, then the installed models/)\n"
    "  -o FILE            write the output to FILE (atomically) instead of stdout;\n"
    "                     for --emit cuda and --emit c, a directory (made if missing)\n"
    "  --help             this text\n"
    "  --version          the version\n"
    "\n"
    "Errors are reported as file:line:col: error: message, with the source line\n"
    "and a caret; the exit status is 1 for a bad model, 2 for bad usage.\n";

enum emit { EMIT_STATS, EMIT_IR, EMIT_DOT, EMIT_CUDA, EMIT_C, EMIT_MANIFEST, EMIT_NONE, EMIT_CUBIN, EMIT_HTML };

static const char *const known_flags[] = {"--stats", "--emit", "--check",   "--grad", "--arch",
                                          "-D",      "-I",     "-o",        "--help",
                                          "--version", "--dump-after", "--pad-multiple",
                                          "--report", "--precision", "--gpu", "--decode",
                                          "--ranks", "--zero", "--tensor-rank", "--plan-parallel", "--devices",
                                          "--devices-per-node", "--device-memory", "--link"};

/* Prints a usage error; returns the exit status for it. */
static int usage_error(const char *fmt, const char *arg) { return tg_usage_error("tgc", fmt, arg); }

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* What is emitted from: the graph, and for code its lowered program. */
typedef struct emitted {
  const tg_graph *g;
  const tg_program *p;
  tg_cuda_plan *plan;        /* CUDA: the plan, and its kernels once each */
  const tg_cuda_kernels *ks;
  const char *code_name; /* the manifest names the .cu or .c file */
  bool cuda;
  const tg_report_page *page; /* --report html */
} emitted;

static void emit(FILE *out, enum emit what, const emitted *e) {
  switch (what) {
  case EMIT_STATS: tg_print_stats(out, e->g); break;
  case EMIT_IR: tg_print_ir(out, e->g); break;
  case EMIT_DOT: tg_print_dot(out, e->g); break;
  case EMIT_CUDA: tg_render_cuda_from(out, e->p, e->plan, e->ks); break;
  case EMIT_C: tg_render_c(out, e->p); break;
  case EMIT_MANIFEST:
    if (e->cuda) tg_render_cuda_manifest_from(out, e->p, e->plan, e->code_name);
    else tg_render_c_manifest(out, e->p, e->code_name);
    break;
  case EMIT_NONE: break;
  case EMIT_CUBIN: break;
  case EMIT_HTML: tg_report_html(out, e->page); break;
  }
}

/* Opens path.tmp.PID for writing, its name in *tmp (malloc'ed), or NULL
 * with a message.  close_replacing renames it to path: a reader never
 * sees half a file and a failed run leaves the old file as it was. */
static FILE *open_replacing(const char *path, char **tmp) {
  size_t n = strlen(path) + 32;
  *tmp = malloc(n);
  snprintf(*tmp, n, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(*tmp, "w");
  if (!f) {
    fprintf(stderr, "tgc: error: cannot write '%s': %s\n", *tmp, strerror(errno));
    free(*tmp);
    *tmp = NULL;
    return NULL;
  }
  /* one thread writes each file: once tgc has threads (--report html's),
   * stdio would lock f at every call, some ten thousand of them */
  __fsetlocking(f, FSETLOCKING_BYCALLER);
  return f;
}

/* Closes f, written to tmp, and renames it to path; frees tmp.  Returns
 * the exit status.  keep false: the file is dropped (an error elsewhere). */
static int close_replacing(FILE *f, char *tmp, const char *path, bool keep) {
  bool ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  if (keep) {
    ok = ok && rename(tmp, path) == 0;
    if (!ok) fprintf(stderr, "tgc: error: cannot write '%s': %s\n", path, strerror(errno));
  }
  if (!keep || !ok) remove(tmp);
  free(tmp);
  return keep && ok ? 0 : 1;
}

static int emit_to_file(const char *path, enum emit what, const emitted *g) {
  char *tmp;
  FILE *f = open_replacing(path, &tmp);
  if (!f) return 1;
  emit(f, what, g);
  return close_replacing(f, tmp, path, true);
}

/* --report html for a model that compiles: DIR/index.html, written on a
 * thread of its own (page_writer_start .. _finish) in two parts.  What the
 * passes left (their findings, the IR after each: most of the page) is
 * written while the main thread makes the kernels, which change none of
 * it; the rest (the kernels, the step's traffic, dot's drawing, the
 * phases' times) once they are made, while the main thread writes the
 * code and manifest, which only read them. */
typedef struct page_writer {
  struct html_page *html;
  const char *dir;
  char path[4096];
  char *tmp;       /* the page's temporary name, while it is open */
  FILE *f;
  tg_arena *arena; /* the traffic's */
  int status;      /* the page's exit status */
  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go; /* 0: the kernels are being made; 1: made, write the rest; -1: drop the page */
} page_writer;

/* --report html: the page as it fills, phase by phase; kept in main's
 * static held, where a longjmp out of run() leaves it, so that a model
 * that fails still gets a page with its error and the passes that ran. */
typedef struct html_page {
  tg_report_page page;
  tg_pass_log log;
  struct timespec last; /* the end of the last phase timed */
  FILE *diag;           /* the diagnostics, kept for the error page */
  tg_findings *findings; /* what every pass decided, in the compilation's arena */
  tg_ir_history *ir_history; /* the IR after each pass (report.h) */
  FILE *ir;             /* --dump-after PASS: the IR after it, for the page */
  char *ir_text;
  size_t ir_len;
  tgc_dot dot;          /* dot drawing the step, while dot.running */
  page_writer writer;   /* the page, while writer.started */
  bool written;         /* DIR/index.html is the step's page */
} html_page;

/* What run() holds while a pass may longjmp out of it: main frees it
 * after an error as well, so that nothing leaks on the error path. */
typedef struct held {
  tg_graph *g;
  char *dir_file, *name;
  FILE *fusion;
  html_page *html; /* --report html, or NULL; main owns it */
} held;

static double seconds_since(const struct timespec *t0, struct timespec *now) {
  clock_gettime(CLOCK_MONOTONIC, now);
  return (double)(now->tv_sec - t0->tv_sec) + (double)(now->tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Ends a phase of the compilation the page shows: its name and time. */
static void phase_done(held *h, const char *name) {
  if (!h->html || h->html->page.n_phases >= TG_REPORT_MAX_PHASES) return;
  struct timespec now;
  double s = seconds_since(&h->html->last, &now);
  h->html->page.phases[h->html->page.n_phases++] = (tg_report_phase){name, s};
  h->html->last = now;
}

static void release(held *h) {
  if (h->fusion) fclose(h->fusion);
  free(h->dir_file);
  free(h->name);
  if (h->g) tg_graph_free(h->g);
  *h = (held){.html = h->html};
}

/* The most nodes the step's drawing may have for dot to lay it out: a
 * model whose kernels repeat in no runs is left to the page's own layout
 * (dot takes minutes on GPT-2's 280 kernels and their edges). */
enum { STEP_DOT_MAX_NODES = 200 };

/* Graphviz's drawing of the step (report.h: tg_report_step_dot) where dot
 * is installed: DIR/step.dot, and DIR/step.svg from dot, which runs while
 * tgc makes the kernels and writes the code (dot's start alone is most of
 * its 20-100 ms).  Needs the page's g, p and plan. */
static void step_drawing_start(html_page *html, const char *dir) {
  char dot_path[4096], svg_path[4096];
  snprintf(dot_path, sizeof dot_path, "%s/step.dot", dir);
  snprintf(svg_path, sizeof svg_path, "%s/step.svg", dir);
  FILE *f = fopen(dot_path, "w");
  if (!f) return;
  int nodes = tg_report_step_dot(f, &html->page);
  if (fclose(f) != 0 || nodes > STEP_DOT_MAX_NODES) return;
  tgc_dot_start(&html->dot, dot_path, svg_path);
}

/* dot's drawing, once it is done: its <svg> element, malloc'ed, or NULL
 * (no dot, or it failed: the page then draws its own layout). */
static char *step_drawing_finish(html_page *html, const char *dir) {
  char svg_path[4096], why[256], *svg = NULL;
  size_t n;
  snprintf(svg_path, sizeof svg_path, "%s/step.svg", dir);
  if (!tgc_dot_finish(&html->dot) || !tg_read_whole_file(svg_path, &svg, &n, why, sizeof why)) return NULL;
  char *at = strstr(svg, "<svg"); /* without the XML prolog and doctype */
  if (!at) {
    free(svg);
    return NULL;
  }
  memmove(svg, at, strlen(at) + 1);
  return svg;
}

static void keep_ir(void *arg, const tg_pass_info *pass, const tg_graph *g) {
  html_page *html = arg;
  tg_ir_history_keep(html->ir_history, pass->name, g);
}

/* --report html: what the passes will give the page, what each decided
 * (its findings, in the compilation's arena) and the IR after it (report.h:
 * tg_ir_history). */
static void html_collect(html_page *html, tg_ctx *ctx, tg_pipeline_opts *po) {
  po->findings = html->findings = tg_findings_new(ctx->arena);
  html->ir_history = tg_ir_history_new();
  po->after_pass = keep_ir;
  po->after_arg = html;
}

/* The page's first part: all but what needs the kernels. */
static void page_begin(page_writer *w) {
  w->f = open_replacing(w->path, &w->tmp);
  if (w->f) tg_report_html_begin(w->f, &w->html->page);
}

/* The rest (go), or the page dropped. */
static void page_rest(page_writer *w, bool go) {
  w->status = 1;
  if (!w->f) return; /* open_replacing said why */
  tg_report_page *page = &w->html->page;
  if (go) {
    page->traffic = tg_traffic_count(w->arena, page->plan, tg_gpu_find("h100"));
    page->step_svg = step_drawing_finish(w->html, w->dir);
    tg_report_html_end(w->f, page);
  }
  w->status = close_replacing(w->f, w->tmp, w->path, go);
  w->f = NULL;
}

static void *write_page(void *arg) {
  page_writer *w = arg;
  step_drawing_start(w->html, w->dir);
  page_begin(w);
  pthread_mutex_lock(&w->mu);
  while (!w->go) pthread_cond_wait(&w->cv, &w->mu);
  bool go = w->go > 0;
  pthread_mutex_unlock(&w->mu);
  page_rest(w, go);
  return NULL;
}

/* Once the passes are done and the step is planned, as its kernels are
 * about to be made: dot started and the page's first part, on the page's
 * thread. */
static void page_writer_start(html_page *html, tg_ctx *ctx, const emitted *e, const char *dir) {
  page_writer *w = &html->writer;
  *w = (page_writer){.html = html, .dir = dir, .arena = tg_arena_new()};
  snprintf(w->path, sizeof w->path, "%s/index.html", dir);
  tg_report_page *page = &html->page;
  page->g = e->g;
  page->p = e->p;
  page->plan = e->plan;
  page->sources = ctx->sources;
  page->findings = html->findings;
  page->ir_after = tg_ir_history_done(html->ir_history, &page->n_ir_after);
  if (html->ir && fclose(html->ir) == 0) page->ir_text = html->ir_text;
  html->ir = NULL;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->started = pthread_create(&w->thread, NULL, write_page, w) == 0;
  if (!w->started) { /* no thread: dot now, the page whole at the end */
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    step_drawing_start(html, dir);
  }
}

/* Tells the page's thread to write the rest (go 1) or drop the page (-1). */
static void page_writer_tell(page_writer *w, int go) {
  pthread_mutex_lock(&w->mu);
  w->go = go;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* page_writer_tell, then waits for the page's thread.  Nothing when none
 * was started. */
static void page_writer_stop(page_writer *w, int go) {
  if (!w->started) return;
  page_writer_tell(w, go);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  w->started = false;
}

/* Once the kernels are made (the main thread then writes the code): the
 * page's second part. */
static void page_writer_kernels_made(html_page *html, const emitted *e) {
  html->page.ks = e->ks;
  if (html->writer.started) page_writer_tell(&html->writer, 1);
}

/* Once the code is written (status: how that went): waits for the page
 * (or writes it whole, where no thread started).  Returns the exit
 * status. */
static int page_writer_finish(html_page *html, int status) {
  page_writer *w = &html->writer;
  if (w->started) {
    page_writer_stop(w, 1);
  } else { /* no thread: here and now */
    page_begin(w);
    page_rest(w, true);
  }
  if (w->status == 0) printf("wrote %s: what the compiler did, one page\n", w->path);
  html->written = w->status == 0;
  tg_report_page *page = &html->page;
  free((char *)page->step_svg);
  page->findings = NULL;
  page->step_svg = NULL;
  page->traffic = NULL;
  tg_arena_free(w->arena);
  w->arena = NULL;
  return status == 0 ? w->status : status;
}

/* --report html for a model that failed: DIR/index.html with the error,
 * its caret view (the diagnostics as printed) and the passes that ran;
 * whether it was written. */
static bool write_error_page(tg_ctx *ctx, html_page *html, const char *dir, int status) {
  static char text[65536];
  size_t n = 0;
  if (html->diag && fflush(html->diag) == 0 && fseek(html->diag, 0, SEEK_SET) == 0)
    n = fread(text, 1, sizeof text - 1, html->diag);
  text[n] = 0;
  if (!n) snprintf(text, sizeof text, "tgc stopped with exit status %d; its messages went to stderr.", status);
  html->page = (tg_report_page){.model = html->page.model, .command = html->page.command,
                                .precision = html->page.precision, .sources = ctx->sources, .passes = &html->log,
                                .error = text};
  char why[256];
  if (!tg_make_dirs(dir, why, sizeof why)) {
    fprintf(stderr, "tgc: error: %s\n", why);
    return false;
  }
  size_t len = strlen(dir) + 32;
  char *path = malloc(len);
  snprintf(path, len, "%s/index.html", dir);
  emitted e = {.page = &html->page};
  bool written = emit_to_file(path, EMIT_HTML, &e) == 0;
  free(path);
  return written;
}

/* --ranks and --zero: ZeRO's stages on N ranks, for --report memplan (the
 * per-rank memory) or --report schedule (the collectives) (docs/parallel.md). */
typedef struct zero_args {
  bool given;
  int ranks, stage;
} zero_args;

/* After the report's own lines (memplan's or schedule's): one rank's
 * memory, or every collective of a step, at the stage asked for next to
 * stage 0.  Returns the exit status. */
static int report_zero(tg_ctx *ctx, tg_graph *g, const char *report, const zero_args *z, tg_graph *sharded) {
  char why[256];
  if (!strcmp(report, TG_REPORT_SCHEDULE)) {
    tg_collective_plan at_stage, ddp;
    if (!tg_collectives_plan(g, z->ranks, z->stage, &at_stage, why, sizeof why) ||
        !tg_collectives_plan(g, z->ranks, 0, &ddp, why, sizeof why)) {
      fprintf(stderr, "tgc: error: %s\n", why);
      return 1;
    }
    tg_collectives_print(stdout, g, &at_stage, &ddp);
    if (sharded) { /* stage 3 as tgrun places it, after the plan by layers */
      tg_collective_plan placed;
      tg_collectives_placed(sharded, z->ranks, &placed);
      tg_collectives_print(stdout, sharded, &placed, &ddp);
    }
    return 0;
  }
  tg_zero_plan at_stage, ddp;
  if (!tg_zero_plan_make(ctx, g, z->ranks, z->stage, &at_stage, why, sizeof why) ||
      !tg_zero_plan_make(ctx, g, z->ranks, 0, &ddp, why, sizeof why)) {
    fprintf(stderr, "tgc: error: %s\n", why);
    return 1;
  }
  tg_zero_plan_print(stdout, &at_stage, &ddp);
  return 0;
}

/* The code, its manifest (and --report html's page, beside them) into
 * out_path, the code named after the input; status so far in, the exit
 * status out. */
static int write_code_dir(held *h, emitted *e, const char *input, const char *out_path, char *dir_file,
                          int status) {
  enum emit what = e->cuda ? EMIT_CUDA : EMIT_C;
  const tg_graph *g = e->g;
  const char *base = strrchr(input, '/');
  base = base ? base + 1 : input;
  const char *dot = strrchr(base, '.');
  int stem = dot ? (int)(dot - base) : (int)strlen(base);
  char *name = h->name = malloc((size_t)stem + 8);
  sprintf(name, "%.*s.%s", stem, base, what == EMIT_CUDA ? "cu" : "c");
  e->code_name = name;
  if (h->html) page_writer_kernels_made(h->html, e); /* the page's rest, beside the code */
  sprintf(dir_file, "%s/%s", out_path, name);
  int wrote = emit_to_file(dir_file, what, e);
  if (status == 0) status = wrote; /* fusion.txt's failure stands */
  sprintf(dir_file, "%s/manifest.json", out_path);
  if (status == 0) status = emit_to_file(dir_file, EMIT_MANIFEST, e);
  if (status == 0) {
    int launches = 0, functions = 0;
    if (what == EMIT_CUDA) {
      functions = e->ks->n_units;
      for (int i = 0; i < e->plan->n_ops; i++) launches += e->plan->ops[i].kind != TG_CUDA_COLLECTIVE;
      printf("wrote %s/%s (%d launches, %d kernels), %s/manifest.json, %s/fusion.txt\n", out_path, name, launches,
             functions, out_path, out_path);
    } else {
      printf("wrote %s/%s (%d kernels), %s/manifest.json, %s/fusion.txt\n", out_path, name, g->n_kernels, out_path,
             out_path);
    }
  }
  if (h->html) status = page_writer_finish(h->html, status);
  return status;
}

/* Reads the model (source or IR), checks it, and emits.  Errors in the
 * input longjmp to main's handler through ctx->bail; main then releases
 * what *h holds. */
static int compile_cubins(const tg_cuda_kernels *ks, const char *dir, const char *arch);

static int run(tg_ctx *ctx, const char *input, const tg_compile_opts *opts, enum emit what,
               const char *out_path, const tg_pipeline_opts *popts, const tg_gpu_spec *traffic_gpu, const char *arch,
               const zero_args *zero, held *h) {
  bool cubin = what == EMIT_CUBIN;
  if (cubin) what = EMIT_CUDA;
  tg_graph *g;
  const tg_source *src = tg_source_load(ctx, input, (tg_loc){0});
  bool is_ir = has_suffix(input, ".tgir") || (src->len >= 8 && !memcmp(src->text, "# tg IR ", 8));
  if (is_ir) {
    if (opts->n_defines)
      tg_error(ctx, (tg_loc){src->path, 1, 1},
               "-D cannot change an IR file: its config is already bound; use the .tg source");
    tg_source_check_text(ctx, src);
    g = tg_read_ir(ctx, src);
  } else {
    g = tg_compile_source(ctx, src, opts);
  }
  h->g = g;
  int status = 0;
  if (!tg_verify(ctx, g)) status = 1;
  phase_done(h, "frontend");
  bool code = what == EMIT_CUDA || what == EMIT_C;
  tg_pipeline_opts po = *popts;
  char *dir_file = NULL;
  FILE *fusion = NULL;
  if (status == 0 && code && out_path) {
    /* -o DIR: the code, its manifest and the fusion report side by side */
    if (mkdir(out_path, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "tgc: error: cannot make directory '%s': %s\n", out_path, strerror(errno));
      status = 1;
    } else {
      dir_file = h->dir_file = malloc(strlen(out_path) + strlen(input) + 32);
      sprintf(dir_file, "%s/fusion.txt", out_path);
      fusion = h->fusion = fopen(dir_file, "w");
      if (!fusion) {
        fprintf(stderr, "tgc: error: cannot write '%s': %s\n", dir_file, strerror(errno));
        status = 1;
      }
      po.report_name = TG_REPORT_FUSION;
      po.report = fusion;
    }
  }
  if (h->html) html_collect(h->html, ctx, &po);
  /* Every pass, in order: passes/pipeline.c. */
  if (status == 0) tg_run_pipeline(ctx, g, &po);
  phase_done(h, "passes");
  /* stage 3's schedule: also the collectives of the sharded gradient
   * graph tgrun runs (the model compiled again, through shard_params) */
  tg_graph *sharded = NULL;
  if (status == 0 && zero->given && popts->report_name && !strcmp(popts->report_name, TG_REPORT_SCHEDULE) &&
      zero->stage == 3 && zero->ranks > 1 && !is_ir) {
    sharded = tg_compile_source(ctx, src, opts);
    tg_pipeline_opts ps = {.precision = popts->precision, .grad = true, .pad_multiple = popts->pad_multiple,
                           .shard_ranks = zero->ranks};
    tg_run_pipeline(ctx, sharded, &ps);
  }
  if (status == 0 && zero->given && popts->report_name && !popts->shard_ranks)
    status = report_zero(ctx, g, popts->report_name, zero, sharded);
  emitted e = {g, NULL, NULL, NULL, NULL, what == EMIT_CUDA, NULL};
  /* lowered as the backend that runs it lowers: the CPU's C recomputes
   * only what is cheap (cpu_backend.c), the CUDA all it can */
  if (status == 0 && code) e.p = tg_lower_ex(ctx, g, what == EMIT_CUDA ? TG_REMAT_ALL : TG_REMAT_CHEAP);
  if (status == 0 && what == EMIT_CUDA) {
    e.plan = tg_cuda_plan_make(g->arena, e.p);
    /* dot draws the step and the page's thread writes most of the page
     * while the kernels are made, most of tgc's time */
    if (h->html && out_path) page_writer_start(h->html, ctx, &e, out_path);
    e.ks = tg_cuda_kernels_make(g->arena, e.p, e.plan);
  }
  phase_done(h, "lower and plan");
  if (status == 0 && traffic_gpu) {
    /* the CUDA step as the backend would run it */
    const tg_program *p = what == EMIT_CUDA && e.p ? e.p : tg_lower_ex(ctx, g, TG_REMAT_ALL);
    tg_cuda_plan *plan = e.plan;
    if (!plan) { /* with its kernels made: the multi-tensor launches' tables are read too */
      plan = tg_cuda_plan_make(g->arena, p);
      tg_cuda_kernels_make(g->arena, p, plan);
    }
    tg_traffic *t = tg_traffic_count(g->arena, plan, traffic_gpu);
    double B = 0, T = 0;
    int64_t tokens = tg_graph_get_config(g, "B", &B) && tg_graph_get_config(g, "T", &T) ? (int64_t)(B * T) : 0;
    tg_traffic_print(stdout, t, tokens);
  }
  if (status == 0 && code && out_path) {
    h->fusion = NULL;
    if (fclose(fusion) != 0) {
      fprintf(stderr, "tgc: error: cannot write '%s/fusion.txt': %s\n", out_path, strerror(errno));
      status = 1;
    }
    fusion = NULL;
    status = write_code_dir(h, &e, input, out_path, dir_file, status);
    if (status == 0 && cubin) status = compile_cubins(e.ks, out_path, arch);
  } else if (status == 0) {
    if (out_path) status = emit_to_file(out_path, what, &e);
    else emit(stdout, what, &e);
  }
  release(h);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "tgc: error: writing the output failed: %s\n", strerror(errno));
    status = 1;
  }
  return status;
}

typedef struct cli {
  enum emit what;
  const char *input, *out_path;
  tg_define *defines;
  char (*define_names)[128];
  int n_defines;
  const char **incs;
  int n_incs;
  char *tg_path; /* strtok'ed copy of $TG_PATH that incs point into */
  bool grad;
  bool decode; /* --decode: the decode step instead of the training step */
  bool grad_flag; /* --grad itself (--emit c implies the gradient unless --decode) */
  bool what_given; /* an explicit --stats, --emit or --check */
  const char *dump_after;
  const char *report; /* --report NAME */
  const tg_pass_info *report_pass; /* the pass writing it, or NULL (traffic) */
  bool traffic; /* --report traffic */
  bool html;    /* --report html */
  const tg_gpu_spec *gpu; /* --report traffic */
  int pad_multiple;
  int precision; /* -1: the default for the output; else a tg_precision_policy */
  const char *arch; /* --arch, for --emit cubin */
  zero_args zero;   /* --ranks, --zero */
  bool shard;       /* --zero 3 --ranks N without a report: the gradient graph of stage 3 */
  int tensor_rank;  /* --tensor-rank R */
  bool plan;        /* --plan-parallel, with: */
  int devices, devices_per_node; /* --devices, --devices-per-node */
  double device_gb; /* --device-memory */
  const tgc_plan_link *link; /* --link */
} cli;

/* The one report no pass writes: codegen's traffic (the CUDA step's bytes
 * and roofline). */
static const char traffic_report[] = "traffic";
/* ... and the page of all of them (report/report.h) */
static const char html_report[] = "html";

/* Whether a report's pass runs on a decode step's graph: the passes that
 * run always, and the lowering ones, which run on the forward tgc compiles
 * code for (not the gradient's or the optimizer's). */
static bool runs_on_decode(const tg_pass_info *p) {
  return p && (p->when == TG_PASS_ALWAYS || p->when == TG_PASS_FOR_KERNELS);
}

/* --report NAME (NULL: none given): only passes that have something to say,
 * and traffic.  Returns -1 to go on, or the status to exit with. */
static int parse_report(const char *name, cli *c) {
  if (name && !strcmp(name, html_report)) { /* the page of the training step's CUDA */
    c->html = c->grad = true;
    return -1;
  }
  c->report_pass = name ? tg_pass_writing(name) : NULL;
  c->traffic = name && !strcmp(name, traffic_report);
  if (!c->report_pass && !c->traffic) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "--report %s: the reports are:", name ? name : "needs a pass name;");
    const char *sep = " ";
    for (int k = 0; tg_pass_at(k) && n > 0 && (size_t)n < sizeof msg; k++)
      if (tg_pass_at(k)->report) {
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%s", sep, tg_pass_at(k)->report);
        sep = ", ";
      }
    if (n > 0 && (size_t)n < sizeof msg)
      snprintf(msg + n, sizeof msg - (size_t)n, " (the passes'), %s (the CUDA step's bytes and roofline), %s (all of it, "
               "one page: -o DIR)", traffic_report, html_report);
    return usage_error("%s", msg);
  }
  c->report = name;
  /* reports of the lowering and of training passes are made on the training
   * step, the graph they are for (--decode turns that off again) */
  if (!c->report_pass || c->report_pass->when != TG_PASS_ALWAYS) c->grad = true;
  return -1;
}

/* --dump-after PASS, or list.  Returns -1 to go on, or the status to exit
 * with. */
static int parse_dump_after(const char *name, cli *c) {
  c->dump_after = name;
  if (!strcmp(name, "list")) {
    for (int k = 0; tg_pass_at(k); k++) printf("%-12s %s\n", tg_pass_at(k)->name, tg_pass_at(k)->what);
    return 0;
  }
  const tg_pass_info *p = tg_pass_named(name);
  if (!p) {
    fprintf(stderr, "tgc: error: --dump-after %s: no such pass; the passes are:", name);
    for (int k = 0; tg_pass_at(k); k++) fprintf(stderr, " %s", tg_pass_at(k)->name);
    fprintf(stderr, "\n");
    return 2;
  }
  if (tg_pass_for_training(p) || p->when == TG_PASS_FOR_SHARDS) c->grad = true;
  if (p->when == TG_PASS_FOR_DECODE) c->decode = true;
  return -1;
}

/* --ranks N and --zero S at argv[*i]: -1 when argv[*i] is neither, 0 when
 * read (*i past its value), else the exit status of a usage error. */
static int parse_zero_arg(int argc, char **argv, int *i, cli *c) {
  const char *a = argv[*i];
  bool ranks = !strcmp(a, "--ranks");
  if (!ranks && strcmp(a, "--zero")) return -1;
  if (*i + 1 >= argc)
    return usage_error("%s needs a number", ranks ? "--ranks" : "--zero (a ZeRO stage: 0, 1, 2 or 3)");
  const char *val = argv[++*i];
  char *end;
  errno = 0;
  long n = strtol(val, &end, 10);
  bool whole = end != val && !*end && !errno;
  c->zero.given = true;
  if (ranks) {
    if (!whole || n < 1 || n > 1 << 16) return usage_error("--ranks %s: expected a whole number of ranks from 1 to 65536", val);
    c->zero.ranks = (int)n;
  } else {
    if (!whole || n < 0 || n > TG_ZERO_MAX_STAGE)
      return usage_error("--zero %s: the ZeRO stages are 0 (plain data parallelism), 1 (optimizer state sharded), "
                         "2 (and gradients), 3 (and parameters)", val);
    c->zero.stage = (int)n;
  }
  return 0;
}

/* What --ranks and --zero need of the other options: -1 to go on, or the
 * exit status of a usage error. */
static int settle_zero_args(cli *c) {
  if (!c->zero.given) return -1;
  /* stage 3's graphs themselves: the gradient graph tgrun runs, its
   * weights gathered from shards (passes/shard_params.c) */
  if ((!c->report || c->traffic) && c->zero.stage == 3 && c->zero.ranks > 1 && !c->decode) {
    c->shard = true;
    return -1;
  }
  if (!c->report || (strcmp(c->report, TG_REPORT_MEMPLAN) && strcmp(c->report, TG_REPORT_SCHEDULE)))
    return usage_error("%s", "--ranks and --zero are for --report memplan (the memory plan per rank) and --report "
                             "schedule (the collectives of a step), and with --zero 3 for the gradient graph of "
                             "ZeRO stage 3 (--emit, --dump-after); docs/parallel.md");
  if (c->decode) return usage_error("%s", "--ranks and --zero plan a training step; --decode has no gradient or optimizer");
  if (c->zero.stage > 0 && c->zero.ranks == 1)
    fprintf(stderr, "tgc: note: --zero %d with --ranks 1: one rank has nothing to shard; planning stage 0\n", c->zero.stage);
  return -1;
}

/* The options' consequences for one another, once all are read: -1 to go
 * on, or the exit status of a usage error. */
static int settle_args(int argc, cli *c) {
  if (!c->input) return usage_error("%s", "no input file");
  if (c->decode) {
    /* the decode step is the forward (code for it included), at T = 1 */
    if (c->report && !runs_on_decode(c->report_pass))
      return usage_error("--report %s is for the training step, not --decode", c->report);
    if (c->dump_after && tg_pass_for_training(tg_pass_named(c->dump_after)))
      return usage_error("--dump-after %s is a training pass; --decode has no gradient", c->dump_after);
    if (c->grad_flag) return usage_error("%s", "--grad and --decode: a decode step has no gradient; ask for one or the other");
    c->grad = false;
    bool has_T = false;
    for (int i = 0; i < c->n_defines; i++) has_T |= !strcmp(c->defines[i].name, "T");
    if (!has_T) c->defines[c->n_defines++] = (tg_define){"T", 1, true, "--decode (one token a step)"};
  }
  if (c->html) {
    if (!c->out_path) return usage_error("%s", "--report html needs -o DIR: the directory for index.html, the .cu and the manifest");
    if (c->decode || (c->what_given && c->what != EMIT_CUDA))
      return usage_error("%s", "--report html shows the training step's CUDA (--emit cuda); leave out --decode and other outputs");
    c->what = EMIT_CUDA;
  }
  bool traffic = c->traffic;
  if ((c->devices || c->devices_per_node || c->device_gb > 0 || c->link) && !c->plan)
    return usage_error("%s", "--devices, --devices-per-node, --device-memory and --link are for --plan-parallel");
  if (c->plan && !c->devices) return usage_error("%s", "--plan-parallel needs --devices N, the devices to plan for");
  if (c->plan && (c->what_given || c->report || c->dump_after || c->out_path))
    return usage_error("%s", "--plan-parallel prints the plan alone: drop --emit, --report, --dump-after and -o");
  if (c->gpu && !traffic && !c->plan) return usage_error("%s", "--gpu is for --report traffic and --plan-parallel");
  if (traffic && !c->gpu) c->gpu = tg_gpu_find("h100");
  /* what tgrun runs: bf16 on the cuda backends, f32 on the CPU */
  if (c->precision < 0)
    c->precision =
        c->what == EMIT_CUDA || c->what == EMIT_CUBIN || traffic || c->plan ? TG_PRECISION_BF16 : TG_PRECISION_F32;
  if (c->arch && c->what != EMIT_CUBIN) return usage_error("%s", "--arch is for --emit cubin");
  if (c->what == EMIT_CUBIN && !c->out_path)
    return usage_error("%s", "--emit cubin needs -o DIR: the directory for the .cu, the manifest and the cubins");
  if (!c->arch) c->arch = "sm_90";
  int zero_status = settle_zero_args(c);
  if (zero_status >= 0) return zero_status;
  if (c->dump_after && tg_pass_named(c->dump_after)->when == TG_PASS_FOR_SHARDS && !c->shard)
    return usage_error("--dump-after %s is ZeRO stage 3's pass: add --zero 3 --ranks N (N > 1)", c->dump_after);
  /* A dump or a report is the output asked for, unless something else is
   * named too. */
  if ((c->dump_after || c->report) && !c->what_given && !c->html) c->what = EMIT_NONE;
  if (c->out_path && c->what == EMIT_NONE)
    return usage_error("-o %s: nothing to write there (--report and --dump-after print to "
                       "stdout: redirect them with > FILE)", c->out_path);

  /* Imports: the importing file's directory comes first (in the frontend),
   * then -I, then $TG_PATH (colon-separated), then the program's models/. */
  c->tg_path = tg_import_path(c->incs, &c->n_incs, argc + 8, tg_program_models_dir());
  return -1;
}

/* The planner's options at argv[*i] (--plan-parallel, --devices N,
 * --devices-per-node N, --device-memory GB, --link L): -1 when argv[*i] is
 * none of them, 0 when read (*i past its value), else the exit status of
 * a usage error. */
static int parse_plan_arg(int argc, char **argv, int *i, cli *c) {
  const char *a = argv[*i];
  if (!strcmp(a, "--plan-parallel")) {
    c->plan = true;
    return 0;
  }
  bool devices = !strcmp(a, "--devices"), per_node = !strcmp(a, "--devices-per-node");
  bool memory = !strcmp(a, "--device-memory"), link = !strcmp(a, "--link");
  if (!devices && !per_node && !memory && !link) return -1;
  if (*i + 1 >= argc) return usage_error("%s needs a value (see tgc --help)", a);
  const char *val = argv[++*i];
  if (link) {
    if (!(c->link = tgc_plan_find_link(val))) return usage_error("--link %s: the links known are nvlink, ib and ethernet", val);
    return 0;
  }
  char *end;
  errno = 0;
  double v = strtod(val, &end);
  if (end == val || *end || errno || !(v > 0))
    return usage_error("%s: expected a positive number", a);
  if (memory) {
    if (v > 1e6) return usage_error("--device-memory %s: in GB, at most 1000000", val);
    c->device_gb = v;
  } else {
    if (v != (double)(long)v || v > 65536) return usage_error("%s: expected a whole number of devices up to 65536", a);
    *(devices ? &c->devices : &c->devices_per_node) = (int)v;
  }
  return 0;
}

/* tgc MODEL --plan-parallel --devices N: the layouts ranked (tgc_plan.c). */
static int run_plan(cli *c) {
  tg_arena *arena = tg_arena_new();
  tgc_plan_opts o = {.arena = arena, .model = c->input, .defines = c->defines, .n_defines = c->n_defines,
                     .include_dirs = c->incs, .n_include_dirs = c->n_incs, .devices = c->devices,
                     .devices_per_node = c->devices_per_node ? c->devices_per_node : 8,
                     .link = c->link ? c->link : tgc_plan_find_link("nvlink"),
                     .gpu = c->gpu ? c->gpu : tg_gpu_find("h100"), .precision = (tg_precision_policy)c->precision,
                     .out = stdout};
  o.device_bytes = c->device_gb > 0 ? c->device_gb * 1e9 : o.gpu->memory_bytes;
  int status = tgc_plan_parallel(&o, NULL);
  tg_arena_free(arena);
  return status;
}

/* Fills c from argv.  Returns -1 to go on, or the status to exit with. */
static int parse_args(int argc, char **argv, cli *c) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    if (!strcmp(a, "--tensor-rank")) {
      char *end;
      long r = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
      if (i + 1 >= argc || end == argv[i + 1] || *end || r < 0 || r > 4095)
        return usage_error("%s", "--tensor-rank needs a rank: a whole number from 0 to the mesh's tp - 1");
      c->tensor_rank = (int)r;
      i++;
      continue;
    }
    int plan_status = parse_plan_arg(argc, argv, &i, c);
    if (plan_status >= 0) {
      if (plan_status) return plan_status;
      continue;
    }
    int zero_status = parse_zero_arg(argc, argv, &i, c);
    if (zero_status >= 0) {
      if (zero_status) return zero_status;
      continue;
    }
    /* -DNAME=V and -D NAME=V, -IDIR and -I DIR, -oFILE and -o FILE */
    if (a[0] == '-' && (a[1] == 'D' || a[1] == 'I' || a[1] == 'o') && a[2]) val = a + 2;
    else if (!strcmp(a, "-D") || !strcmp(a, "-I") || !strcmp(a, "-o") || !strcmp(a, "--emit")) {
      if (i + 1 >= argc) return usage_error("%s needs a value", a);
      val = argv[++i];
    }
    if (!strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "--version")) {
      printf("tgc %s\n", TG_VERSION);
      return 0;
    } else if (!strcmp(a, "--stats")) {
      c->what = EMIT_STATS;
      c->what_given = true;
    } else if (!strcmp(a, "--check")) {
      c->what = EMIT_NONE;
      c->what_given = true;
    } else if (!strcmp(a, "--dump-after")) {
      if (i + 1 >= argc) return usage_error("%s needs a pass name (--dump-after list)", a);
      int status = parse_dump_after(argv[++i], c);
      if (status >= 0) return status;
    } else if (!strcmp(a, "--decode")) {
      c->decode = true;
    } else if (!strcmp(a, "--pad-multiple")) {
      if (i + 1 >= argc) return usage_error("%s needs a number (1: no padding)", a);
      char *end;
      errno = 0;
      long m = strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end || errno || m < 1 || m > 1 << 20)
        return usage_error("--pad-multiple %s: expected a whole number from 1 to 1048576", argv[i]);
      c->pad_multiple = (int)m;
    } else if (!strcmp(a, "--arch")) {
      if (i + 1 >= argc) return usage_error("%s needs a GPU architecture, e.g. sm_90", a);
      c->arch = argv[++i];
      if (strncmp(c->arch, "sm_", 3) || !c->arch[3]) return usage_error("--arch %s: expected sm_XX, e.g. sm_80 or sm_90", c->arch);
    } else if (!strcmp(a, "--grad")) {
      c->grad = c->grad_flag = true;
    } else if (!strcmp(a, "--gpu")) {
      if (i + 1 >= argc) return usage_error("%s needs a GPU's name: h100, h200 or a100", a);
      i++;
      if (!(c->gpu = tg_gpu_find(argv[i]))) return usage_error("--gpu %s: the GPUs known are h100, h200 and a100", argv[i]);
    } else if (!strcmp(a, "--precision")) {
      if (i + 1 >= argc) return usage_error("%s needs a policy: f32 or bf16", a);
      i++;
      if (!strcmp(argv[i], "f32")) c->precision = TG_PRECISION_F32;
      else if (!strcmp(argv[i], "bf16")) c->precision = TG_PRECISION_BF16;
      else return usage_error("--precision %s: expected f32 or bf16", argv[i]);
    } else if (!strcmp(a, "--report")) {
      int status = parse_report(i + 1 < argc ? argv[++i] : NULL, c);
      if (status >= 0) return status;
    } else if (!strncmp(a, "--emit", 6) && (a[6] == 0 || a[6] == '=')) {
      if (a[6] == '=') val = a + 7;
      if (!strcmp(val, "ir")) c->what = EMIT_IR;
      else if (!strcmp(val, "dot")) c->what = EMIT_DOT;
      else if (!strcmp(val, "cuda")) c->what = EMIT_CUDA, c->grad = true;
      else if (!strcmp(val, "c")) c->what = EMIT_C, c->grad = true;
      else if (!strcmp(val, "cubin")) c->what = EMIT_CUBIN, c->grad = true;
      else return usage_error("--emit %s: expected ir, dot, cuda, cubin or c", val);
      c->what_given = true;
    } else if (a[0] == '-' && a[1] == 'D') {
      if (!tg_define_parse(val, &c->defines[c->n_defines], c->define_names[c->n_defines],
                           sizeof c->define_names[c->n_defines]))
        return usage_error("-D %s: expected NAME=NUMBER, e.g. -D n_layer=2", val);
      c->n_defines++;
    } else if (a[0] == '-' && a[1] == 'I') {
      c->incs[c->n_incs++] = val;
    } else if (a[0] == '-' && a[1] == 'o') {
      c->out_path = val;
    } else if (a[0] == '-' && a[1]) {
      const char *s = tg_nearest(a, known_flags, sizeof known_flags / sizeof *known_flags);
      if (!s) return usage_error("unknown option '%s'", a);
      fprintf(stderr, "tgc: error: unknown option '%s' (did you mean '%s'?)\n(see tgc --help)\n", a, s);
      return 2;
    } else if (c->input) {
      return usage_error("only one input file, please (got another: '%s')", a);
    } else {
      c->input = a;
    }
  }
  return settle_args(argc, c);
}

/* --report html: the page's first facts, its pass log, and the
 * diagnostics kept aside (copied to stderr at the end) for an error page;
 * returns where the diagnostics go. */
static FILE *html_start(html_page *html, const cli *c, int argc, char **argv, tg_pipeline_opts *popts) {
  static char command[4096];
  size_t off = (size_t)snprintf(command, sizeof command, "tgc");
  for (int i = 1; i < argc && off < sizeof command; i++) off += (size_t)snprintf(command + off, sizeof command - off, " %s", argv[i]);
  html->page.model = c->input;
  html->page.command = command;
  html->page.precision = c->precision == TG_PRECISION_BF16 ? "bf16" : "f32";
  html->page.passes = &html->log;
  popts->log = &html->log;
  if (c->dump_after && (html->ir = open_memstream(&html->ir_text, &html->ir_len))) { /* on the page, not stdout */
    html->page.ir_pass = c->dump_after;
    popts->dump = html->ir;
  }
  clock_gettime(CLOCK_MONOTONIC, &html->last);
  html->diag = tmpfile();
  return html->diag ? html->diag : stderr;
}

/* The diagnostics kept for the page, to stderr where they belong. */
static void html_end(html_page *html) {
  page_writer_stop(&html->writer, -1);
  tg_arena_free(html->writer.arena);
  tgc_dot_finish(&html->dot);
  tg_ir_history_free(html->ir_history); /* the error page's too, which shows none */
  if (html->ir) fclose(html->ir);
  free(html->ir_text);
  *html = (html_page){.diag = html->diag};
  if (!html->diag) return;
  char buf[4096];
  size_t n;
  if (fseek(html->diag, 0, SEEK_SET) == 0)
    while ((n = fread(buf, 1, sizeof buf, html->diag)) > 0) fwrite(buf, 1, n, stderr);
  fclose(html->diag);
  html->diag = NULL;
}

int main(int argc, char **argv) {
  cli c = {.what = EMIT_STATS, .pad_multiple = TG_PAD_MULTIPLE_DEFAULT, .precision = -1, .zero = {false, 1, 0}};
  c.defines = calloc((size_t)argc + 1, sizeof *c.defines); /* + --decode's T */
  c.define_names = calloc((size_t)argc, sizeof *c.define_names);
  c.incs = calloc((size_t)argc + 8, sizeof *c.incs);
  if (!c.defines || !c.define_names || !c.incs) {
    fprintf(stderr, "tgc: out of memory\n");
    return 1;
  }
  int status = parse_args(argc, argv, &c);
  if (status < 0 && c.plan) status = run_plan(&c);
  if (status < 0) {
    static html_page html;
    static held h; /* static: it outlives the longjmp unchanged */
    tg_compile_opts opts = {c.defines, c.n_defines, c.incs, c.n_incs};
    tg_pipeline_opts popts = {.precision = (tg_precision_policy)c.precision, .grad = c.grad, .step = c.grad && !c.shard, .decode = c.decode,
                              .kernels = c.decode && (c.what == EMIT_C || c.what == EMIT_CUDA ||
                                                      (c.report_pass && c.report_pass->when == TG_PASS_FOR_KERNELS)),
                              .adamw = tg_adamw_defaults,
                              .pad_multiple = c.pad_multiple, .dump_after = c.dump_after, .dump = stdout,
                              .report_name = c.report, .report = stdout, .shard_ranks = c.shard ? c.zero.ranks : 0,
                              .tensor_rank = c.tensor_rank};
    if (c.html) h.html = &html;
    tg_ctx *ctx = tg_ctx_new(c.html ? html_start(&html, &c, argc, argv, &popts) : stderr);
    jmp_buf bail;
    ctx->bail = &bail;
    if (setjmp(bail)) status = 1;
    else status = run(ctx, c.input, &opts, c.what, c.out_path, &popts, c.traffic ? c.gpu : NULL, c.arch, &c.zero,
                      &h);
    if (c.html) page_writer_stop(&html.writer, -1); /* a page begun for a model that then failed */
    bool error_page = status != 0 && c.html && !html.written && write_error_page(ctx, &html, c.out_path, status);
    release(&h);
    if (c.html) html_end(&html);
    if (error_page) fprintf(stderr, "tgc: wrote %s/index.html: the error, as a page\n", c.out_path);
    tg_ctx_free(ctx);
  }
  free(c.tg_path);
  free(c.defines);
  free(c.define_names);
  free(c.incs);
  return status;
}

/* --emit cubin: every distinct kernel (codegen/cuda/cuda_kernels.h) compiled by
 * NVRTC for arch, one job per core, each cached under its own key, and
 * written to DIR/NAME.cubin; prints the time and what was compiled. */
static int compile_cubins(const tg_cuda_kernels *ks, const char *dir, const char *arch) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tg_arena *a = tg_arena_new();
  int n = ks->n_units;
  tg_nvrtc_job *jobs = calloc((size_t)n + 1, sizeof *jobs);
  char **srcs = calloc((size_t)n + 1, sizeof *srcs);
  static char err[65536];
  int status = 0, threads = tg_nvrtc_threads();
  for (int u = 0; u < n; u++) {
    srcs[u] = tg_cuda_unit_source(ks, u);
    jobs[u].src = srcs[u];
    jobs[u].name = tg_sprintf(a, "%s.cu", ks->units[u].name);
  }
  if (!tg_nvrtc_compile_all(jobs, n, arch, NULL, 0, threads, err, sizeof err)) {
    fprintf(stderr, "tgc: error: %s\n", err);
    status = 1;
  }
  int cached = 0;
  for (int u = 0; u < n && status == 0; u++) {
    cached += jobs[u].out.from_cache;
    char *path = tg_sprintf(a, "%s/%s.cubin", dir, ks->units[u].name);
    char *tmp = tg_sprintf(a, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(jobs[u].out.data, 1, jobs[u].out.size, f) == jobs[u].out.size;
    ok = (f && fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
      fprintf(stderr, "tgc: error: cannot write '%s': %s\n", path, strerror(errno));
      remove(tmp);
      status = 1;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (status == 0)
    printf("compiled %d kernels for %s in %.2f s (%s: %d compiled, %d cached; %d thread%s): %s/f_*.cubin\n", n, arch,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9,
           cached == n ? "warm" : cached ? "partly warm" : "cold", n - cached, cached, threads, threads == 1 ? "" : "s", dir);
  for (int u = 0; u < n; u++) {
    tg_cubin_free(&jobs[u].out);
    free(srcs[u]);
  }
  free(jobs);
  free(srcs);
  tg_arena_free(a);
  return status;
}
