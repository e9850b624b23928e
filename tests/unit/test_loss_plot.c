/* test_loss_plot.c: the SVG loss plot.
 *
 * No SVG renderer here, so the tests check what a renderer needs: the text
 * is well-formed XML (a small checker below), both series are there, and no
 * coordinate is NaN or off the canvas, whatever the data. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loss_plot.h"
#include "metrics.h"

/* True when tags nest, attribute quotes pair up, and '&' starts only the
 * entities the plot uses; with the reason in *why otherwise. */
static bool well_formed(const char *s, const char **why) {
  char stack[64][32];
  int depth = 0, roots = 0;
  for (const char *p = s; *p; p++) {
    if (*p == '&') {
      if (strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) &&
          strncmp(p, "&quot;", 6))
        return *why = "a bare '&'", false;
      continue;
    }
    if (*p == '>') return *why = "a '>' outside a tag", false;
    if (*p != '<') continue;
    const char *end = strchr(p, '>');
    if (!end) return *why = "an unclosed tag", false;
    int quotes = 0;
    for (const char *q = p; q < end; q++) {
      quotes += *q == '"';
      if (*q == '<' && q != p) return *why = "a '<' inside a tag", false;
    }
    if (quotes % 2) return *why = "unpaired quotes in a tag", false;
    bool closing = p[1] == '/', empty = end[-1] == '/';
    const char *name = p + 1 + closing;
    size_t n = strcspn(name, " />");
    if (n == 0 || n >= 32) return *why = "a bad tag name", false;
    if (closing) {
      if (!depth || strlen(stack[depth - 1]) != n || strncmp(stack[depth - 1], name, n))
        return *why = "a closing tag that does not match", false;
      depth--;
    } else if (!empty) {
      if (depth == 0) roots++;
      if (depth == 64) return *why = "too deep", false;
      memcpy(stack[depth], name, n);
      stack[depth++][n] = 0;
    }
    p = end;
  }
  if (depth) return *why = "tags left open", false;
  if (roots != 1) return *why = "not one root element", false;
  return true;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

/* Checks the invariants every plot must meet and returns its text. */
static char *render(const tg_loss_plot *p, int64_t *skipped) {
  char *svg = tg_loss_plot_svg(p, skipped);
  const char *why = "";
  ck_assert_msg(well_formed(svg, &why), "%s in:\n%.2000s", why, svg);
  ck_assert_msg(!strncmp(svg, "<svg ", 5), "starts: %.40s", svg);
  size_t n = strlen(svg);
  ck_assert(n > 7 && !strcmp(svg + n - 7, "</svg>\n"));
  /* Every coordinate lies on the 800 x 480 canvas (relative ones are small). */
  static const char *const coords[] = {" x=\"", " y=\"", " x1=\"", " y1=\"", " x2=\"",
                                       " y2=\"", " cx=\"", " cy=\"", " d=\""};
  for (size_t k = 0; k < sizeof coords / sizeof *coords; k++)
    for (const char *q = strstr(svg, coords[k]); q; q = strstr(q + 1, coords[k])) {
      const char *v = strchr(q, '"') + 1, *end = strchr(v, '"');
      for (const char *c = v; c < end;) {
        /* Numbers and the path's commands M, m, a: no "nan", no "inf". */
        ck_assert_msg(strchr("0123456789-., Mma", *c), "%s%.20s: not a coordinate", coords[k], v);
        if (!strchr("0123456789-.", *c)) {
          c++;
          continue;
        }
        char *stop;
        double x = strtod(c, &stop);
        ck_assert_msg(stop > c && x >= -5 && x <= 805, "%s%.20s: %g is off the canvas", coords[k], v, x);
        c = stop;
      }
    }
  return svg;
}

static tg_plot_point *curve(int64_t n, double first_step, double every) {
  tg_plot_point *p = malloc((size_t)n * sizeof *p);
  for (int64_t i = 0; i < n; i++)
    p[i] = (tg_plot_point){first_step + (double)i * every, 1.5 + 2.7 * exp(-(double)i / (n / 6.0 + 1))};
  return p;
}

START_TEST(test_a_run) {
  tg_plot_point *train = curve(2000, 1, 1);
  tg_plot_point val[9];
  for (int i = 0; i < 9; i++) val[i] = (tg_plot_point){i * 250, 1.6 + 2.6 * exp(-i / 1.5)};
  tg_loss_plot p = {.title = "baby_shakespeare_char", .train = train, .n_train = 2000, .val = val, .n_val = 9};
  int64_t skipped = -1;
  char *svg = render(&p, &skipped);
  ck_assert_int_eq(skipped, 0);
  ck_assert_int_eq(count(svg, "<path id=\"train\""), 1);
  ck_assert_int_eq(count(svg, "<path id=\"val\""), 1);
  ck_assert_int_eq(count(svg, "<circle"), 9 + 1); /* a dot per evaluation, one in the legend */
  ck_assert_ptr_nonnull(strstr(svg, "<title>baby_shakespeare_char</title>"));
  ck_assert_ptr_nonnull(strstr(svg, ">step</text>"));
  ck_assert_ptr_nonnull(strstr(svg, ">loss</text>"));
  ck_assert_ptr_nonnull(strstr(svg, ">train loss (each step)</text>"));
  ck_assert_ptr_nonnull(strstr(svg, ">val loss (evaluations)</text>"));
  /* Ticks at round numbers: steps by 500 up to 2000, losses by 0.5. */
  for (int s = 0; s <= 2000; s += 500) {
    char label[32];
    snprintf(label, sizeof label, ">%d</text>", s);
    ck_assert_msg(strstr(svg, label), "no tick %d", s);
  }
  ck_assert_ptr_nonnull(strstr(svg, ">1.5</text>"));
  ck_assert_ptr_nonnull(strstr(svg, ">4.5</text>"));
  ck_assert_ptr_null(strstr(svg, "left out"));
  free(svg);
  free(train);
}
END_TEST

START_TEST(test_one_point) {
  tg_plot_point one = {1, 4.17};
  tg_loss_plot p = {.title = NULL, .train = &one, .n_train = 1, .val = NULL, .n_val = 0};
  char *svg = render(&p, NULL);
  /* A line of one point is drawn as a small ring, on axes around it. */
  ck_assert_ptr_nonnull(strstr(svg, "<path id=\"train\""));
  ck_assert_ptr_nonnull(strstr(svg, " a1.5,1.5 0 1,0 -3,0\""));
  ck_assert_ptr_null(strstr(svg, "id=\"val\""));
  ck_assert_ptr_nonnull(strstr(svg, "<title>loss</title>"));
  free(svg);
  /* Only a val point. */
  tg_loss_plot q = {.title = "v", .train = NULL, .n_train = 0, .val = &one, .n_val = 1};
  svg = render(&q, NULL);
  ck_assert_ptr_null(strstr(svg, "id=\"train\""));
  ck_assert_ptr_nonnull(strstr(svg, "<path id=\"val\""));
  free(svg);
}
END_TEST

START_TEST(test_not_finite) {
  tg_plot_point train[6] = {{1, 4}, {2, NAN}, {3, 3.5}, {4, INFINITY}, {5, 3}, {NAN, 2}};
  tg_plot_point val[2] = {{0, -INFINITY}, {5, 3.2}};
  tg_loss_plot p = {.title = "diverged", .train = train, .n_train = 6, .val = val, .n_val = 2};
  int64_t skipped = 0;
  char *svg = render(&p, &skipped);
  ck_assert_int_eq(skipped, 4);
  ck_assert_ptr_nonnull(strstr(svg, ">4 points with a loss of NaN or infinity left out</text>"));
  /* The line breaks at each gap: three pieces of one point each. */
  const char *d = strstr(svg, "<path id=\"train\"");
  ck_assert_ptr_nonnull(d);
  char *line = strndup(d, strcspn(d, "\n"));
  ck_assert_int_eq(count(line, " M"), 3);
  free(line);
  free(svg);
  /* Nothing finite at all: still a plot, saying so. */
  tg_plot_point bad[2] = {{1, NAN}, {2, NAN}};
  tg_loss_plot q = {.title = "empty", .train = bad, .n_train = 2, .val = NULL, .n_val = 0};
  svg = render(&q, &skipped);
  ck_assert_int_eq(skipped, 2);
  ck_assert_ptr_null(strstr(svg, "<path"));
  ck_assert_ptr_nonnull(strstr(svg, "no finite loss to plot yet"));
  ck_assert_ptr_nonnull(strstr(svg, ">2 points with a loss"));
  free(svg);
  tg_loss_plot none = {0};
  free(render(&none, NULL));
}
END_TEST

START_TEST(test_huge) {
  /* 600,000 steps, as nanoGPT's GPT-2 run: steps written with k, and the
   * file stays small because each pixel column keeps four points. */
  int64_t n = 600000;
  tg_plot_point *train = curve(n, 1, 1);
  tg_loss_plot p = {.title = "gpt2", .train = train, .n_train = n, .val = NULL, .n_val = 0};
  char *svg = render(&p, NULL);
  ck_assert_uint_lt(strlen(svg), 200000);
  ck_assert_ptr_nonnull(strstr(svg, ">600k</text>"));
  ck_assert_ptr_nonnull(strstr(svg, ">100k</text>"));
  free(svg);
  free(train);
  /* Steps near a trillion and beyond 2^53. */
  train = curve(1000, 1e12, 1e9);
  p = (tg_loss_plot){.title = "big", .train = train, .n_train = 1000, .val = NULL, .n_val = 0};
  svg = render(&p, NULL);
  ck_assert_ptr_nonnull(strstr(svg, ">1T</text>"));
  ck_assert_ptr_nonnull(strstr(svg, ">1.2T</text>"));
  free(svg);
  free(train);
  tg_plot_point far[2] = {{1e18, 3}, {1e18 + 4096, 2}};
  p = (tg_loss_plot){.title = "far", .train = far, .n_train = 2, .val = far, .n_val = 2};
  free(render(&p, NULL));
  tg_plot_point flat[3] = {{5, 2}, {5, 2}, {5, 2}};
  p = (tg_loss_plot){.title = "flat", .train = flat, .n_train = 3, .val = NULL, .n_val = 0};
  free(render(&p, NULL));
  /* Losses far from the usual, and ranges narrower than a tick can be. */
  tg_plot_point wild[3] = {{1, 1e30}, {2, -5}, {3, 1e-30}};
  p = (tg_loss_plot){.title = "wild", .train = wild, .n_train = 3, .val = NULL, .n_val = 0};
  free(render(&p, NULL));
  tg_plot_point narrow[2] = {{1e18, 1}, {1e18 + 128, 1 + 2.3e-16}};
  p = (tg_loss_plot){.title = "narrow", .train = narrow, .n_train = 2, .val = NULL, .n_val = 0};
  free(render(&p, NULL));
}
END_TEST

START_TEST(test_title_escaped) {
  tg_plot_point one = {1, 2};
  tg_loss_plot p = {.title = "a <b> & \"c\"\n", .train = &one, .n_train = 1, .val = NULL, .n_val = 0};
  char *svg = render(&p, NULL);
  ck_assert_ptr_nonnull(strstr(svg, "<title>a &lt;b&gt; &amp; &quot;c&quot; </title>"));
  free(svg);
}
END_TEST

START_TEST(test_small_plots) {
  /* The other series of a run, each a small plot on its own axes under the
   * loss: a path each, inside its own box, and ids that stay unique. */
  int64_t n = 300;
  tg_plot_point *train = curve(n, 1, 1), *lr = curve(n, 1, 1), *norm = curve(n, 1, 1), *rate = curve(n, 1, 1);
  for (int64_t i = 0; i < n; i++) lr[i].loss = 1e-3 * (double)(i + 1) / (double)n, rate[i].loss = 15000 + 10 * (double)i;
  tg_loss_plot p = {.title = "run", .train = train, .n_train = n, .other = {lr, norm, rate}, .n_other = {n, n, n}};
  char *svg = render(&p, NULL);
  ck_assert_ptr_nonnull(strstr(svg, "height=\"700\""));
  const char *ids[] = {"train", "lr", "grad_norm", "tok_per_s", "panel-lr", "panel-grad_norm", "panel-tok_per_s"};
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
    char id[64];
    snprintf(id, sizeof id, " id=\"%s\"", ids[i]);
    ck_assert_msg(count(svg, id) == 1, "%s: %d times", id, count(svg, id));
  }
  ck_assert_ptr_null(strstr(svg, " id=\"grid\"")); /* one grid a plot: a class, not an id */
  ck_assert_ptr_nonnull(strstr(svg, ">learning rate</text>"));
  ck_assert_ptr_nonnull(strstr(svg, ">tokens per second</text>"));
  /* Each small plot's path keeps to its box: x within its column, y
   * between the panel's top and bottom, below the loss plot. */
  const char *paths[] = {"<path id=\"lr\"", "<path id=\"grad_norm\"", "<path id=\"tok_per_s\""};
  for (int k = 0; k < 3; k++) {
    const char *d = strstr(strstr(svg, paths[k]), " d=\"") + 4;
    double x_lo = 70 + 255 * k, x_hi = x_lo + 185;
    for (const char *c = d; *c != '"';) {
      if (*c == ' ' || *c == 'M') {
        c++;
        continue;
      }
      char *stop;
      double x = strtod(c, &stop), y = strtod(stop + 1, &stop);
      ck_assert_msg(x >= x_lo - 0.05 && x <= x_hi + 0.05 && y >= 530 - 0.05 && y <= 640 + 0.05,
                    "%s: (%g, %g) out of its box", paths[k], x, y);
      c = stop;
    }
  }
  free(svg);
  /* Without them, the plot is the loss plot alone, as before. */
  p.n_other[0] = p.n_other[1] = p.n_other[2] = 0;
  svg = render(&p, NULL);
  ck_assert_ptr_nonnull(strstr(svg, "height=\"480\""));
  ck_assert_ptr_null(strstr(svg, "panel-"));
  free(svg);
  free(train), free(lr), free(norm), free(rate);
}
END_TEST

START_TEST(test_files) {
  char dir[64], svg_path[128], metrics_path[128], why[256];
  strcpy(dir, "/tmp/tg_plot_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(svg_path, sizeof svg_path, "%s/loss.svg", dir);
  snprintf(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", dir);

  /* From a metrics file, over an older plot. */
  FILE *f = fopen(svg_path, "w");
  fputs("old", f);
  fclose(f);
  tg_metrics_file *m = tg_metrics_open(metrics_path, false, why, sizeof why);
  ck_assert(m);
  for (int i = 1; i <= 100; i++) {
    tg_metrics_row r = tg_metrics_row_blank(TG_METRICS_STEP, i);
    r.loss = 4.0 - i * 0.01;
    r.lr = 1e-3, r.grad_norm = 0.5 + i * 0.01, r.tok_per_s = 15000;
    ck_assert(tg_metrics_append(m, &r, why, sizeof why));
    if (i % 50 == 0) {
      tg_metrics_row e = tg_metrics_row_blank(TG_METRICS_EVAL, i);
      e.val_loss = 3.9 - i * 0.01, e.train_loss = 3.8;
      ck_assert(tg_metrics_append(m, &e, why, sizeof why));
    }
  }
  ck_assert(tg_metrics_close(m, why, sizeof why));
  ck_assert_msg(tg_loss_plot_from_metrics(metrics_path, svg_path, "run", why, sizeof why), "%s", why);
  const char *why2 = "";
  FILE *in = fopen(svg_path, "r");
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, in);
  fclose(in);
  text[n] = 0;
  ck_assert_msg(well_formed(text, &why2), "%s", why2);
  ck_assert_ptr_nonnull(strstr(text, "<path id=\"train\""));
  ck_assert_ptr_nonnull(strstr(text, "<path id=\"val\""));
  ck_assert_ptr_nonnull(strstr(text, "<path id=\"lr\""));
  ck_assert_ptr_nonnull(strstr(text, "<path id=\"grad_norm\""));
  ck_assert_ptr_nonnull(strstr(text, "<path id=\"tok_per_s\""));
  ck_assert_int_eq(count(text, "<circle"), 2 + 1);

  /* Nothing but the two files: the temporary one was renamed. */
  DIR *d = opendir(dir);
  int files = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') files++;
  closedir(d);
  ck_assert_int_eq(files, 2);

  tg_loss_plot p = {0};
  ck_assert(!tg_loss_plot_write("/nonexistent/dir/loss.svg", &p, why, sizeof why));
  ck_assert_ptr_nonnull(strstr(why, "cannot create '/nonexistent/dir/loss.svg.tmp."));
  ck_assert(!tg_loss_plot_from_metrics("/nonexistent/m.jsonl", svg_path, "x", why, sizeof why));
  ck_assert_str_eq(why, "cannot open '/nonexistent/m.jsonl': No such file or directory");

  unlink(svg_path);
  unlink(metrics_path);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("loss_plot");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_a_run);
  tcase_add_test(tc, test_one_point);
  tcase_add_test(tc, test_not_finite);
  tcase_add_test(tc, test_huge);
  tcase_add_test(tc, test_title_escaped);
  tcase_add_test(tc, test_small_plots);
  tcase_add_test(tc, test_files);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
