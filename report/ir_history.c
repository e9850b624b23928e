/* ir_history.c: the IR after each pass, for the page (report.h:
 * tg_ir_history).
 *
 * GPT-2's IR is half a megabyte of text after the last passes, and tgc
 * --report html keeps it after 14 of them within a tenth of tgc's time
 * (issue 28), so each step of the keeping avoids work:
 *   - a pass that changed nothing the text shows (memplan and schedule
 *     never do; sharding without a mesh does nothing) is not printed: its
 *     graph's fingerprint is the last one's;
 *   - the text is printed into one of two buffers, reused: the new text
 *     and the last, whose first and last bytes the new one shares;
 *   - the bytes between are packed (gzip and base64: pack.c) by one worker
 *     thread with one compressor, in order, while the next passes run; a
 *     buffer is printed into again only once the packing reading it is
 *     done (the text two passes ago: long packed by then). */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "alloc.h"
#include "report.h"

typedef struct packing_job {
  const char *text; /* in a buffer below, or "" */
  size_t n;
} packing_job;

struct tg_ir_history {
  tg_report_ir at[TG_PASS_LOG_MAX]; /* .packed: set by the worker */
  int n;
  char *text[2]; /* the print buffers: the last text in text[last] */
  size_t cap[2];
  int reader[2]; /* the entry whose packing reads text[i], or -1 */
  int last;
  size_t last_n;
  uint64_t last_fingerprint;
  /* the worker: packs job[done], ..., job[queued - 1] */
  packing_job job[TG_PASS_LOG_MAX];
  int queued, done;
  bool closing, started;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  tg_report_packer *packer; /* NULL: no memory for it; nothing is packed */
  tg_arena *arena;          /* the packed texts, the worker's until done */
};

static const char *pack_one(tg_ir_history *h, int i) {
  return h->packer ? tg_report_pack(h->packer, h->arena, h->job[i].text, h->job[i].n) : NULL;
}

static void *pack_in_order(void *arg) {
  tg_ir_history *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (h->done == h->queued && !h->closing) pthread_cond_wait(&h->cv, &h->mu);
    if (h->done == h->queued) break;
    int i = h->done;
    pthread_mutex_unlock(&h->mu);
    const char *packed = pack_one(h, i);
    pthread_mutex_lock(&h->mu);
    h->at[i].packed = packed;
    h->done++;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

tg_ir_history *tg_ir_history_new(void) {
  tg_ir_history *h = tg_xcalloc(1, sizeof *h);
  h->reader[0] = h->reader[1] = -1;
  h->packer = tg_report_packer_new();
  h->arena = tg_arena_new();
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->started = pthread_create(&h->thread, NULL, pack_in_order, h) == 0; /* else packed in keep */
  return h;
}

/* Until entry i is packed. */
static void wait_packed(tg_ir_history *h, int i) {
  pthread_mutex_lock(&h->mu);
  while (h->done <= i) pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
}

/* A new entry: text (n bytes) shares prefix and suffix bytes with the
 * last; the bytes between go to the worker.  Its index. */
static int add(tg_ir_history *h, const char *pass, const char *text, size_t n, size_t prefix, size_t suffix) {
  int i = h->n++;
  h->at[i] = (tg_report_ir){pass, prefix, suffix, NULL, n};
  size_t between = n - prefix - suffix;
  h->job[i] = (packing_job){between ? text + prefix : "", between};
  if (!h->started) {
    h->at[i].packed = pack_one(h, i);
    h->queued = h->done = h->n;
    return i;
  }
  pthread_mutex_lock(&h->mu);
  h->queued = h->n;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return i;
}

void tg_ir_history_keep(tg_ir_history *h, const char *pass, const tg_graph *g) {
  if (h->n >= TG_PASS_LOG_MAX) return;
  uint64_t fingerprint = tg_ir_fingerprint(g);
  const char *last = h->n > 0 ? h->text[h->last] : NULL; /* the first entry is always printed */
  size_t last_n = h->last_n, prefix = 0, suffix = 0;
  if (last && fingerprint == h->last_fingerprint) {
    add(h, pass, last, last_n, last_n, 0); /* all of it shared: nothing packed, no buffer read */
    return;
  }
  int at = last ? 1 - h->last : 0;
  if (h->reader[at] >= 0) wait_packed(h, h->reader[at]);
  size_t n = tg_print_ir_to(&h->text[at], &h->cap[at], g);
  const char *text = h->text[at];
  if (last) {
    while (prefix < n && prefix < last_n && text[prefix] == last[prefix]) prefix++;
    while (suffix < n - prefix && suffix < last_n - prefix && text[n - 1 - suffix] == last[last_n - 1 - suffix])
      suffix++;
  }
  h->reader[at] = add(h, pass, text, n, prefix, suffix);
  h->last = at;
  h->last_n = n;
  h->last_fingerprint = fingerprint;
}

static void stop_worker(tg_ir_history *h) {
  if (!h->started) return;
  pthread_mutex_lock(&h->mu);
  h->closing = true;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->thread, NULL);
  h->started = false;
}

const tg_report_ir *tg_ir_history_done(tg_ir_history *h, int *n) {
  stop_worker(h);
  /* each text is told as a change of the one before: none after a
   * packing that failed can be opened */
  int kept = 0;
  while (kept < h->n && h->at[kept].packed) kept++;
  *n = kept;
  return kept ? h->at : NULL;
}

void tg_ir_history_free(tg_ir_history *h) {
  if (!h) return;
  stop_worker(h);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h->text[0]);
  free(h->text[1]);
  tg_report_packer_free(h->packer);
  tg_arena_free(h->arena);
  free(h);
}
