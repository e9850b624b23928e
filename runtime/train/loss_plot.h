/* loss_plot.h: the loss curve of a run as an SVG file, drawn without any
 * outside tool.
 *
 * Train loss against step as a thin line, val loss as a thicker line with a
 * dot at each evaluation, on linear axes with ticks at round numbers (steps
 * written 1.5k, 2M, ...), grid lines, labels, a legend and a title.
 * Points whose step or loss is not finite are left out (the line breaks
 * there) and counted in a note under the plot.  However many points there
 * are, each pixel column keeps at most four of a series (its first, lowest,
 * highest and last), which draws the same picture: a run of 600,000 steps
 * makes a file of a few hundred kilobytes.
 *
 * Under it, when given, a row of small plots of the other series of the
 * steps, each on its own axes: the learning rate, the gradient norm and
 * the tokens per second (small multiples rather than twin axes: four
 * scales on one plot cannot be read).  Each is a <g id="panel-NAME">
 * holding a <path id="NAME">. */
#ifndef TG_LOSS_PLOT_H
#define TG_LOSS_PLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tg_plot_point {
  double step, loss;
} tg_plot_point;

/* The small plots, in their order left to right; `loss` of a point is the series' value. */
enum { TG_PLOT_LR, TG_PLOT_GRAD_NORM, TG_PLOT_TOK_PER_S, TG_PLOT_NSERIES };

typedef struct tg_loss_plot {
  const char *title;           /* NULL: "loss" */
  const tg_plot_point *train;  /* per step, in step order */
  int64_t n_train;
  const tg_plot_point *val;    /* per evaluation */
  int64_t n_val;
  const tg_plot_point *other[TG_PLOT_NSERIES]; /* per step; n 0: no small plot of it */
  int64_t n_other[TG_PLOT_NSERIES];
} tg_loss_plot;

/* The SVG text, malloc'ed and NUL-terminated; *skipped (may be NULL) gets
 * the number of points left out as not finite. */
char *tg_loss_plot_svg(const tg_loss_plot *p, int64_t *skipped);

/* Writes the SVG to path atomically: a temporary file beside it, fsync,
 * rename, so that a reader never sees half a plot.  False with the reason
 * in why. */
bool tg_loss_plot_write(const char *path, const tg_loss_plot *p, char *why, size_t whylen);

/* Reads a metrics file (metrics.h) and writes its plot: train loss, the
 * learning rate, the gradient norm and the tokens per second from the step
 * rows, val loss from the evaluation rows. */
bool tg_loss_plot_from_metrics(const char *metrics_path, const char *svg_path, const char *title,
                               char *why, size_t whylen);

#endif
