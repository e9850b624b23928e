/* tgc_plan.h: the parallel-layout planner of `tgc --plan-parallel`
 * (tgc_plan.c; docs/parallel.md's "The planner"). */
#ifndef TGC_PLAN_H
#define TGC_PLAN_H

#include <stdio.h>

#include "frontend.h"
#include "passes.h"
#include "traffic.h"

/* A link between devices: its name on the command line, what it is, and
 * its bandwidth a direction a device (public figures). */
typedef struct tgc_plan_link {
  const char *name, *what;
  double bytes_per_s;
} tgc_plan_link;

/* "nvlink", "ib" or "ethernet"; NULL for anything else. */
const tgc_plan_link *tgc_plan_find_link(const char *name);

typedef struct tgc_plan_opts {
  tg_arena *arena;               /* the table's strings */
  const char *model;
  const tg_define *defines;      /* -D: the model's sizes and its B, the micro-batch of plain data parallelism */
  int n_defines;
  const char *const *include_dirs;
  int n_include_dirs;
  int devices, devices_per_node;
  double device_bytes;           /* --device-memory, or what the GPU says */
  const char *device_name;       /* the GPU as its driver names it (tgrun), or NULL: the gpu's spec (tgc) */
  const tgc_plan_link *link;     /* between nodes (and all devices when they are one node on it) */
  const tg_gpu_spec *gpu;
  tg_precision_policy precision;
  FILE *out;                     /* the table, or NULL: none */
} tgc_plan_opts;

/* The layout chosen. */
typedef struct tgc_plan_choice {
  int tp, zero, micro_batch, accum;
} tgc_plan_choice;

/* Prints the layouts, ranked, with the reasons; fills *choice (when not
 * NULL) with the fastest that fits.  Returns 0, or 1 when the model does
 * not compile or nothing fits. */
int tgc_plan_parallel(const tgc_plan_opts *o, tgc_plan_choice *choice);

#endif
