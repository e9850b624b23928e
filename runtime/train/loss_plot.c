/* loss_plot.c: the loss curve as SVG (see loss_plot.h). */
#include "loss_plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "diag.h" /* tg_why */
#include "file.h"
#include "metrics.h"

/* The canvas and the loss plot's area inside it, in SVG user units
 * (pixels); with the other series, a row of small plots below it
 * (PANEL_*), one a series, and the canvas grows to TALL. */
enum { WIDTH = 800, HEIGHT = 480, LEFT = 70, RIGHT = 770, TOP = 60, BOTTOM = 420 };
enum { TALL = 700, PANEL_TOP = 530, PANEL_BOTTOM = 640, PANEL_WIDTH = 185, PANEL_PITCH = 255 };
static const char *const TRAIN_COLOR = "#1f77b4", *const VAL_COLOR = "#d62728";

typedef struct axis {
  double lo, hi, step; /* ticks at lo, lo + step, ..., hi */
} axis;

/* Ticks at 1, 2 or 5 times a power of ten, about `target` of them, the ends
 * rounded out to ticks.  A range of one value is widened around it. */
static axis nice_axis(double min, double max, int target, double min_step, bool nonneg) {
  if (!(max > min)) {
    double pad = fmax(1.0, fabs(min) / 10);
    min -= pad, max += pad;
    if (nonneg && min < 0) min = 0;
  }
  double raw = (max - min) / target;
  double mag = pow(10, floor(log10(raw)));
  double f = raw / mag;
  double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  if (step < min_step) step = min_step;
  axis a = {floor(min / step) * step, ceil(max / step) * step, step};
  /* Rounding must not cut off the data, nor make the range empty (which
   * would divide by zero in px and py). */
  if (a.lo > min) a.lo = min;
  if (a.hi < max) a.hi = max;
  return a;
}

static int n_ticks(const axis *a) {
  double n = floor((a->hi - a->lo) / a->step + 0.5);
  return n < 0 ? 0 : n > 100 ? 100 : (int)n;
}

static int decimals_for(double step) {
  int d = (int)ceil(-log10(step) - 1e-9);
  return d < 0 ? 0 : d > 6 ? 6 : d;
}

/* Steps: 2000 as it is, but 20000 as "20k" and 2.5e12 as "2.5T", in a unit
 * the whole axis shares; trailing zeros dropped. */
static void step_label(char *buf, size_t n, double v, const axis *a) {
  static const struct {
    double div;
    const char *suffix;
  } units[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}};
  double top = fmax(fabs(a->lo), fabs(a->hi));
  if (top >= 1e15) { /* past any real run; as many digits as tell ticks apart */
    int prec = (int)ceil(log10(top / a->step)) + 1;
    snprintf(buf, n, "%.*g", prec < 3 ? 3 : prec > 17 ? 17 : prec, v);
    return;
  }
  int u = 0;
  while (units[u].div > 1 && !(top >= units[u].div && top >= 1e4)) u++;
  snprintf(buf, n, "%.*f", decimals_for(a->step / units[u].div), v / units[u].div);
  if (strchr(buf, '.')) {
    char *e = buf + strlen(buf);
    while (e[-1] == '0') *--e = 0;
    if (e[-1] == '.') *--e = 0;
  }
  if (!strcmp(buf, "-0")) strcpy(buf, "0");
  if (strcmp(buf, "0")) strncat(buf, units[u].suffix, n - strlen(buf) - 1);
}

static void loss_label(char *buf, size_t n, double v, const axis *a) {
  if (fabs(v) >= 1e6) snprintf(buf, n, "%.3g", v);
  else snprintf(buf, n, "%.*f", decimals_for(a->step), fabs(v) < a->step / 2 ? 0.0 : v);
}

static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '&') fputs("&amp;", f);
    else if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '"') fputs("&quot;", f);
    else if ((unsigned char)*s < 0x20 && *s != '\t') fputc(' ', f); /* not allowed in XML */
    else fputc(*s, f);
  }
}

/* A plot: its axes, and the box on the canvas they span. */
typedef struct frame {
  axis x, y;
  int left, right, top, bottom;
} frame;

static double px(const frame *F, double step) {
  return F->left + (step - F->x.lo) / (F->x.hi - F->x.lo) * (F->right - F->left);
}
static double py(const frame *F, double loss) {
  return F->bottom - (loss - F->y.lo) / (F->y.hi - F->y.lo) * (F->bottom - F->top);
}

static bool finite_point(const tg_plot_point *p) { return isfinite(p->step) && isfinite(p->loss); }

/* ---- a series as one path ---------------------------------------------------- */

/* Writes the path's points, keeping of the points that fall into one pixel
 * column the first, lowest, highest and last, in their order: at this
 * resolution that draws exactly what all of them would.  A point that is not
 * finite ends the line; the next one starts a new piece. */
typedef struct pen {
  FILE *f;
  const frame *F;
  int64_t piece; /* points in the current piece of the line */
  long column; /* of the bucket */
  int64_t idx[4];
  int n;       /* points in the bucket: first, min, max, last (some the same) */
  const tg_plot_point *pts;
} pen;

static void emit(pen *P, const tg_plot_point *p) {
  fprintf(P->f, "%s%.1f,%.1f", P->piece ? " " : " M", px(P->F, p->step), py(P->F, p->loss));
  P->piece++;
}

/* A piece of one point would draw nothing: ring it with a small circle. */
static void end_piece(pen *P) {
  if (P->piece == 1) fputs(" m-1.5,0 a1.5,1.5 0 1,0 3,0 a1.5,1.5 0 1,0 -3,0", P->f);
  P->piece = 0;
}

static void flush_bucket(pen *P) {
  /* The four kept indices, in index order, without repeats. */
  int64_t k[4];
  int m = 0;
  for (int i = 0; i < P->n; i++) k[m++] = P->idx[i];
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && k[j - 1] > k[j]; j--) {
      int64_t t = k[j];
      k[j] = k[j - 1], k[j - 1] = t;
    }
  for (int i = 0; i < m; i++)
    if (i == 0 || k[i] != k[i - 1]) emit(P, &P->pts[k[i]]);
  P->n = 0;
}

static void draw_series(FILE *f, const frame *F, const tg_plot_point *pts, int64_t n,
                        const char *id, const char *color, double width) {
  fprintf(f, "<path id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" "
             "stroke-linejoin=\"round\" stroke-linecap=\"round\" d=\"",
          id, color, width);
  pen P = {f, F, 0, 0, {0}, 0, pts};
  for (int64_t i = 0; i < n; i++) {
    if (!finite_point(&pts[i])) {
      flush_bucket(&P);
      end_piece(&P);
      continue;
    }
    long col = (long)floor(px(F, pts[i].step));
    if (P.n && col != P.column) flush_bucket(&P);
    if (!P.n) {
      P.column = col;
      P.idx[0] = P.idx[1] = P.idx[2] = P.idx[3] = i;
      P.n = 4;
    } else {
      if (pts[i].loss < pts[P.idx[1]].loss) P.idx[1] = i;
      if (pts[i].loss > pts[P.idx[2]].loss) P.idx[2] = i;
      P.idx[3] = i;
    }
  }
  flush_bucket(&P);
  end_piece(&P);
  fputs("\"/>\n", f);
}

/* ---- the whole picture ------------------------------------------------------- */

static int64_t count_finite(const tg_plot_point *p, int64_t n) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) k += finite_point(&p[i]);
  return k;
}

static void range(const tg_plot_point *p, int64_t n, double *x0, double *x1, double *y0,
                  double *y1) {
  for (int64_t i = 0; i < n; i++) {
    if (!finite_point(&p[i])) continue;
    *x0 = fmin(*x0, p[i].step), *x1 = fmax(*x1, p[i].step);
    *y0 = fmin(*y0, p[i].loss), *y1 = fmax(*y1, p[i].loss);
  }
}

static void draw_axes(FILE *f, const frame *F, const char *ylabel) {
  char label[64];
  const int L = F->left, R = F->right, T = F->top, B = F->bottom;
  fputs("<g class=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n", f);
  for (int i = 0; i <= n_ticks(&F->x); i++) {
    double x = px(F, F->x.lo + i * F->x.step);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, T, x, B);
  }
  for (int i = 0; i <= n_ticks(&F->y); i++) {
    double y = py(F, F->y.lo + i * F->y.step);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", L, y, R, y);
  }
  fputs("</g>\n<g class=\"axes\" stroke=\"#333\" stroke-width=\"1\">\n", f);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n", L, B, R, B);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n", L, T, L, B);
  for (int i = 0; i <= n_ticks(&F->x); i++) {
    double x = px(F, F->x.lo + i * F->x.step);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, B, x, B + 5);
  }
  for (int i = 0; i <= n_ticks(&F->y); i++) {
    double y = py(F, F->y.lo + i * F->y.step);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", L - 5, y, L, y);
  }
  fputs("</g>\n<g class=\"tick-labels\" fill=\"#333\">\n", f);
  for (int i = 0; i <= n_ticks(&F->x); i++) {
    double v = F->x.lo + i * F->x.step;
    step_label(label, sizeof label, v, &F->x);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", px(F, v), B + 20, label);
  }
  for (int i = 0; i <= n_ticks(&F->y); i++) {
    double v = F->y.lo + i * F->y.step;
    loss_label(label, sizeof label, v, &F->y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n",
            L - 8, py(F, v), label);
  }
  fputs("</g>\n", f);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (L + R) / 2, B + 42);
  if (ylabel) /* the loss plot's; a small plot has its title above it instead */
    fprintf(f, "<text x=\"18\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 18 %d)\">%s</text>\n",
            (T + B) / 2, (T + B) / 2, ylabel);
}

static void draw_legend(FILE *f, bool train, bool val) {
  int x = RIGHT - 350, y = 40;
  fputs("<g id=\"legend\">\n", f);
  if (train) {
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
            x, y, x + 24, y, TRAIN_COLOR);
    fprintf(f, "<text x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">train loss (each step)</text>\n",
            x + 30, y);
  }
  x += 175;
  if (val) {
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n",
            x, y, x + 24, y, VAL_COLOR);
    fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"%s\"/>\n", x + 12, y, VAL_COLOR);
    fprintf(f, "<text x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">val loss (evaluations)</text>\n",
            x + 30, y);
  }
  fputs("</g>\n", f);
}

/* Small plot k of the row below the loss plot: its series against the
 * step, on axes of its own (a learning rate, a gradient norm and a rate of
 * tokens share no scale with the loss), titled above, in a group whose id
 * is the series' so that a reader (or a test) can find it. */
static void draw_panel(FILE *f, const tg_loss_plot *p, int k) {
  static const char *const ids[TG_PLOT_NSERIES] = {"lr", "grad_norm", "tok_per_s"};
  static const char *const titles[TG_PLOT_NSERIES] = {"learning rate", "gradient norm (before clipping)",
                                                      "tokens per second"};
  static const char *const colors[TG_PLOT_NSERIES] = {"#2ca02c", "#9467bd", "#ff7f0e"};
  const tg_plot_point *pts = p->other[k];
  int64_t n = p->n_other[k], n_ok = count_finite(pts, n);
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  range(pts, n, &x0, &x1, &y0, &y1);
  if (!n_ok) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  int left = LEFT + k * PANEL_PITCH;
  /* from 0 up: a rate's or a norm's size reads against nothing */
  frame F = {nice_axis(x0, x1, 4, 1, x0 >= 0), nice_axis(fmin(y0, 0), y1, 4, 0, true), left, left + PANEL_WIDTH,
             PANEL_TOP, PANEL_BOTTOM};
  fprintf(f, "<g id=\"panel-%s\">\n", ids[k]);
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>\n", left, PANEL_TOP - 12, titles[k]);
  draw_axes(f, &F, NULL);
  if (n_ok) draw_series(f, &F, pts, n, ids[k], colors[k], 1);
  fputs("</g>\n", f);
}

char *tg_loss_plot_svg(const tg_loss_plot *p, int64_t *skipped) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  int64_t n_train = count_finite(p->train, p->n_train), n_val = count_finite(p->val, p->n_val);
  int64_t bad = (p->n_train - n_train) + (p->n_val - n_val);
  if (skipped) *skipped = bad;
  bool panels = false;
  for (int k = 0; k < TG_PLOT_NSERIES; k++) panels |= p->n_other[k] > 0;
  const int height = panels ? TALL : HEIGHT;

  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
          WIDTH, height, WIDTH, height);
  const char *title = p->title && *p->title ? p->title : "loss";
  fputs("<title>", f);
  put_escaped(f, title);
  fputs("</title>\n", f);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WIDTH, height);
  fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"16\" font-weight=\"bold\">", LEFT);
  put_escaped(f, title);
  fputs("</text>\n", f);

  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  range(p->train, p->n_train, &x0, &x1, &y0, &y1);
  range(p->val, p->n_val, &x0, &x1, &y0, &y1);
  if (n_train + n_val == 0) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  /* Steps are whole numbers: never a tick between two of them. */
  frame F = {nice_axis(x0, x1, 8, 1, x0 >= 0), nice_axis(y0, y1, 6, 0, false), LEFT, RIGHT, TOP, BOTTOM};
  draw_axes(f, &F, "loss");
  if (n_train) draw_series(f, &F, p->train, p->n_train, "train", TRAIN_COLOR, 1);
  if (n_val) {
    draw_series(f, &F, p->val, p->n_val, "val", VAL_COLOR, 2);
    /* A dot per evaluation, while there are few enough to tell apart. */
    if (n_val <= 200) {
      fprintf(f, "<g id=\"val-points\" fill=\"%s\">\n", VAL_COLOR);
      for (int64_t i = 0; i < p->n_val; i++)
        if (finite_point(&p->val[i]))
          fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>\n", px(&F, p->val[i].step),
                  py(&F, p->val[i].loss));
      fputs("</g>\n", f);
    }
  }
  if (n_train + n_val == 0)
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#888\">no finite loss to "
               "plot yet</text>\n",
            (LEFT + RIGHT) / 2, (TOP + BOTTOM) / 2);
  draw_legend(f, n_train > 0, n_val > 0);
  if (bad)
    fprintf(f, "<text id=\"note\" x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#a00\">%lld "
               "point%s with a loss of NaN or infinity left out</text>\n",
            RIGHT, HEIGHT - 12, (long long)bad, bad == 1 ? "" : "s");
  for (int k = 0; k < TG_PLOT_NSERIES && panels; k++) draw_panel(f, p, k);
  fputs("</svg>\n", f);
  if (fclose(f) != 0 || !text) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  return text;
}

/* ---- files --------------------------------------------------------------------- */

bool tg_loss_plot_write(const char *path, const tg_loss_plot *p, char *why, size_t whylen) {
  if (!path || !*path) return tg_why(why, whylen, "no file name");
  char *svg = tg_loss_plot_svg(p, NULL);
  bool ok = tg_write_file_atomic(path, svg, strlen(svg), why, whylen);
  free(svg);
  return ok;
}

bool tg_loss_plot_from_metrics(const char *metrics_path, const char *svg_path, const char *title,
                               char *why, size_t whylen) {
  tg_metrics_log log;
  if (!tg_metrics_read(metrics_path, &log, why, whylen)) return false;
  tg_plot_point *train = malloc(((size_t)log.n + 1) * sizeof *train);
  tg_plot_point *val = malloc(((size_t)log.n + 1) * sizeof *val);
  if (!train || !val) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  tg_plot_point *other[TG_PLOT_NSERIES];
  for (int k = 0; k < TG_PLOT_NSERIES; k++) {
    other[k] = malloc(((size_t)log.n + 1) * sizeof *other[k]);
    if (!other[k]) {
      fprintf(stderr, "tg: out of memory\n");
      exit(1);
    }
  }
  int64_t nt = 0, nv = 0, no = 0;
  for (int64_t i = 0; i < log.n; i++) {
    const tg_metrics_row *r = &log.rows[i];
    if (r->kind == TG_METRICS_STEP) {
      double step = (double)r->step;
      train[nt++] = (tg_plot_point){step, r->loss};
      other[TG_PLOT_LR][no] = (tg_plot_point){step, r->lr};
      other[TG_PLOT_GRAD_NORM][no] = (tg_plot_point){step, r->grad_norm};
      other[TG_PLOT_TOK_PER_S][no++] = (tg_plot_point){step, r->tok_per_s};
    } else
      val[nv++] = (tg_plot_point){(double)r->step, r->val_loss};
  }
  tg_loss_plot p = {title, train, nt, val, nv, {other[0], other[1], other[2]}, {no, no, no}};
  bool ok = tg_loss_plot_write(svg_path, &p, why, whylen);
  free(train);
  free(val);
  for (int k = 0; k < TG_PLOT_NSERIES; k++) free(other[k]);
  tg_metrics_log_free(&log);
  return ok;
}
