/* report.h: `tgc --report html`'s page (report.c): what the compiler did,
 * as one self-contained web page (DIR/index.html).
 *
 * The page is a layer of its own, above the code generators and below the
 * tools: it reads what they made (the graph with its kernels, memory plan
 * and all-reduce buckets, the lowered program, the CUDA plan and its
 * kernels, the traffic counts, the pass log) and writes it as data, one
 * JSON block, that the page's own script (report/page.js, embedded at
 * build time with report/page.css) draws.  Nothing is fetched when the
 * page is viewed.  The passes' reports come as their findings (the same
 * data `tgc --report NAME` renders as text), which the script draws as
 * tables linked to the .tg lines. */
#ifndef TG_REPORT_H
#define TG_REPORT_H

#include <stdio.h>

#include "cuda_kernels.h"
#include "passes.h"
#include "traffic.h"

enum { TG_REPORT_MAX_PHASES = 8 };

/* One phase of the compilation and its time ("frontend", "passes", ...). */
typedef struct tg_report_phase {
  const char *name;
  double seconds;
} tg_report_phase;

/* A node of the IR after a pass as the page holds it: its line's pieces
 * (ir.h: tg_ir_pieces), its inputs by their numbers.  A node keeps its
 * number from pass to pass while it lives; the page's script numbers the
 * lines by position, as the text does. */
typedef struct tg_report_ir_node {
  int id;
  int phase;         /* tg_phase */
  const char *op;    /* as the line spells it */
  const int *in;     /* the inputs' numbers; -1: none */
  int nin;
  const char *middle, *place; /* the line's, before and after its kernel */
} tg_report_ir_node;

typedef struct tg_report_ir_output {
  const char *name; /* quoted, as the text quotes it */
  int id;           /* the node's number; -1: none */
} tg_report_ir_output;

/* The IR after one pass (tg_print_ir's text), as the page holds it: the
 * nodes new or changed since the pass before (autodiff adds the backward;
 * most passes change a few nodes), the order of all of them and their
 * kernels (all fuse changes), the lines before the nodes and the outputs.  The page's
 * script joins them into the text when the reader opens the pass. */
typedef struct tg_report_ir {
  const char *pass;
  bool same;        /* the text is the pass before's: nothing below is set */
  const char *head; /* the lines before the nodes */
  const int *order; /* the nodes' numbers in graph order; -1: a NULL node */
  const int *kernel; /* each one's kernel in the same order; -1: none */
  int n_order;
  const tg_report_ir_node *changed;
  int n_changed;
  const tg_report_ir_output *outputs;
  int n_outputs;
} tg_report_ir;

typedef struct tg_report_page {
  const char *model;            /* the input, as named */
  const char *command;          /* the command line, for the reader to rerun */
  const char *precision;        /* "bf16" or "f32" */
  const tg_source *sources;     /* every file read (the ctx's list) */
  const tg_pass_log *passes;    /* the passes that ran, or NULL */
  tg_report_phase phases[TG_REPORT_MAX_PHASES];
  int n_phases;
  /* a compiled model: all set; a failed one: g may be NULL, the rest is */
  const tg_graph *g;
  const tg_program *p;
  const tg_cuda_plan *plan;
  const tg_cuda_kernels *ks;
  const tg_traffic *traffic;
  const tg_findings *findings;  /* what the passes decided (passes/findings.h), or NULL */
  const tg_report_ir *ir_after; /* the IR after each pass that ran, in order */
  int n_ir_after;
  const char *ir_pass;          /* --dump-after PASS: the pass, and the IR after it, or NULL */
  const char *ir_text;
  const char *step_svg;         /* Graphviz's drawing of tg_report_step_dot, or NULL */
  const char *error;            /* the diagnostics of a model that failed, or NULL */
} tg_report_page;


/* The IR after each pass, as the page holds it (tg_report_ir;
 * ir_history.c): nothing when the pass changed nothing the text shows
 * (tg_ir_fingerprint), else the nodes it changed (tg_ir_node_fingerprint)
 * and their order.  keep is called after each pass
 * (tg_pipeline_opts.after_pass); done gives the IR after each, in h's
 * memory (NULL and *n = 0 for none). */
typedef struct tg_ir_history tg_ir_history;
tg_ir_history *tg_ir_history_new(void);
void tg_ir_history_keep(tg_ir_history *h, const char *pass, const tg_graph *g);
const tg_report_ir *tg_ir_history_done(tg_ir_history *h, int *n);
void tg_ir_history_free(tg_ir_history *h); /* NULL: nothing */

/* Writes the page to out. */
void tg_report_html(FILE *out, const tg_report_page *r);
/* The same in two parts: begin needs what the passes left (r's model,
 * sources, passes, findings, IR) and, for the step's kernels, memory and
 * collectives, r's g, p and plan; end the rest (the kernels' code and
 * costs, the step's traffic, dot's drawing, the phases).  tgc writes the
 * first while it makes the kernels. */
void tg_report_html_begin(FILE *out, const tg_report_page *r);
void tg_report_html_end(FILE *out, const tg_report_page *r);

/* The step as a graph of kernels in Graphviz's language, a run of kernels
 * repeated layer after layer drawn once as one node "×12" (the page's
 * step graph, for `dot -Tsvg`): node kN a kernel, gN the Nth run.  Needs
 * r->g, r->p and r->plan.  Returns the number of nodes. */
int tg_report_step_dot(FILE *out, const tg_report_page *r);

/* tgrun's page of a run (out_dir/report.html, runtime/train/run_page.h):
 * the texts a run writes, embedded as they are, which the same script
 * draws: the metrics file's curves (train and val loss, learning rate,
 * gradient norm, tokens/s against step), the samples and the config. */
typedef struct tg_report_run {
  const char *model;        /* the model file the run trains */
  const char *out_dir;
  const char *config_text;  /* the run's train.cfg */
  const char *metrics_text; /* the metrics file: JSON lines (runtime/train/metrics.h) */
  const char *samples_text; /* samples.txt, or NULL */
} tg_report_run;

void tg_report_run_html(FILE *out, const tg_report_run *r);

#endif
