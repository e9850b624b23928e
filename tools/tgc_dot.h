/* tgc_dot.h: Graphviz's dot, run beside tgc for --report html's drawing
 * of the step (tgc_dot.c). */
#ifndef TGC_DOT_H
#define TGC_DOT_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct tgc_dot {
  pid_t pid;
  bool running;
  char config_dir[4096]; /* the two plugins' config (tgc_dot.c), or "" */
  char dot_path[4096], svg_path[4096];
} tgc_dot;

/* Starts `dot -Tsvg dot_path > svg_path` where dot is on PATH (d->running
 * says whether it started); tgc goes on meanwhile. */
void tgc_dot_start(tgc_dot *d, const char *dot_path, const char *svg_path);
/* Waits for it: whether svg_path holds its drawing.  Nothing: false. */
bool tgc_dot_finish(tgc_dot *d);

#endif
