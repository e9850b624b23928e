/* run_page.h: a run's page, out_dir/report.html (run_page.c): its curves,
 * samples and config as one self-contained web page (report/report.h's
 * tg_report_run_html), rewritten at every evaluation and at the end, as
 * loss.svg is. */
#ifndef TG_RUN_PAGE_H
#define TG_RUN_PAGE_H

#include <stdbool.h>
#include <stddef.h>

/* Reads out_dir's metrics file (metrics_path), samples.txt and train.cfg
 * (either may be missing yet) and writes out_dir/report.html atomically.
 * False with the reason in why. */
bool tg_run_page_write(const char *out_dir, const char *metrics_path, const char *model, char *why, size_t whylen);

#endif
