/* run_page.c: out_dir/report.html, the page of a run (run_page.h).
 *
 * The page holds the run's own files as they are (the metrics file's JSON
 * lines, samples.txt, train.cfg) and report/page.js draws them, so this
 * file only gathers them and writes the page atomically (a browser
 * reloading it never sees half of it). */
#include "run_page.h"

#include <stdio.h>
#include <stdlib.h>

#include "file.h"
#include "report.h"

/* The whole file, or NULL when it cannot be read (not written yet). */
static char *read_or_null(const char *dir, const char *name) {
  char path[4096], why[256], *text = NULL;
  size_t n;
  if (name) snprintf(path, sizeof path, "%s/%s", dir, name);
  else snprintf(path, sizeof path, "%s", dir);
  return tg_read_whole_file(path, &text, &n, why, sizeof why) ? text : NULL;
}

bool tg_run_page_write(const char *out_dir, const char *metrics_path, const char *model, char *why, size_t whylen) {
  char *metrics = read_or_null(metrics_path, NULL), *samples = read_or_null(out_dir, "samples.txt");
  char *config = read_or_null(out_dir, "train.cfg");
  tg_report_run run = {model, out_dir, config ? config : "", metrics ? metrics : "", samples};
  char *page = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&page, &size);
  bool ok = f != NULL;
  if (ok) {
    tg_report_run_html(f, &run);
    ok = fclose(f) == 0;
  }
  if (!ok) snprintf(why, whylen, "cannot make the run's page in memory");
  char path[4096];
  snprintf(path, sizeof path, "%s/report.html", out_dir);
  ok = ok && tg_write_file_atomic(path, page, size, why, whylen);
  free(page);
  free(metrics);
  free(samples);
  free(config);
  return ok;
}
