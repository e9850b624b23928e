/* run_page.c: out_dir/report.html, the page of a run (run_page.h).
 *
 * The page holds the run's own files as they are (the metrics file's JSON
 * lines, samples.txt, train.cfg) and report/page.js draws them, so this
 * file only gathers them and writes the page atomically (a browser
 * reloading it never sees half of it). */
#include "run_page.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "file.h"
#include "report.h"

/* A regular file whole, or its last MAX_EMBED bytes from a line's start (a
 * long run's metrics and samples: the page shows their latest); NULL when
 * it cannot be read (not written yet) or is not a regular file (a
 * samples.txt that is a link to /dev/full, say, would never end). */
enum { MAX_EMBED = 4 << 20 };

static char *read_or_null(const char *dir, const char *name) {
  char path[4096];
  if (name) snprintf(path, sizeof path, "%s/%s", dir, name);
  else snprintf(path, sizeof path, "%s", dir);
  FILE *f = fopen(path, "rb");
  struct stat st;
  if (!f) return NULL;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return NULL;
  }
  long from = st.st_size > MAX_EMBED ? (long)(st.st_size - MAX_EMBED) : 0;
  char *text = malloc((size_t)(st.st_size - from) + 1);
  size_t n = text && fseek(f, from, SEEK_SET) == 0 ? fread(text, 1, (size_t)(st.st_size - from), f) : 0;
  fclose(f);
  if (!text) return NULL;
  text[n] = 0;
  if (from > 0) { /* from the first whole line */
    char *nl = strchr(text, '\n');
    if (nl) memmove(text, nl + 1, strlen(nl + 1) + 1);
  }
  return text;
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
