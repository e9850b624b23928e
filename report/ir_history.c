/* ir_history.c: the IR after each pass, for the page (report.h:
 * tg_ir_history).
 *
 * GPT-2's IR is half a megabyte of text after the last passes, and tgc
 * --report html keeps it after 14 of them within a tenth of tgc's time
 * (issue 28), so the compiling thread does as little as it can:
 *   - a pass that changed nothing the text shows (memplan and schedule
 *     never do; sharding without a mesh does nothing) is not printed: its
 *     graph's fingerprint is the last one's;
 *   - otherwise the graph is copied (tg_graph_snapshot: a tenth of a
 *     printing) into one of two buffers, reused, and a worker thread
 *     prints the copy, finds what the text shares with the last one (its
 *     first and last bytes) and packs the bytes between (gzip and base64:
 *     pack.c) with one compressor, in order, while the next passes run.
 *     A copy's buffer is copied into again only once the worker has
 *     printed it (the copy two passes ago: long printed by then);
 *   - the worker prints into two buffers of its own, reused: the new text
 *     and the last. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "alloc.h"
#include "report.h"

typedef struct printing_job {
  const tg_graph *copy; /* in snapshot[slot]; NULL: the graph as the last job left it */
  int slot;
} printing_job;

struct tg_ir_history {
  tg_report_ir at[TG_PASS_LOG_MAX]; /* set by the worker */
  int n;
  /* the compiling thread's: the graphs' copies, two buffers reused */
  void *snapshot[2];
  size_t snapshot_cap[2];
  int printer[2]; /* the entry whose printing reads snapshot[i], or -1 */
  int last_slot;
  uint64_t last_fingerprint;
  /* the worker's: the texts, two buffers reused, the last in text[last] */
  char *text[2];
  size_t cap[2];
  int last;
  size_t last_n;
  /* the worker takes job[done], ..., job[queued - 1]; printed: the
   * entries whose copies it has printed */
  printing_job job[TG_PASS_LOG_MAX];
  int queued, printed, done;
  bool closing, started;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  tg_report_packer *packer; /* NULL: no memory for it; nothing is packed */
  tg_arena *arena;          /* the packed texts, the worker's until done */
};

/* Entry i's text, from its copy; what it shares with the last text is not
 * packed.  Tells the compiling thread once the copy is read (through
 * printed). */
static void print_and_pack(tg_ir_history *h, int i) {
  const tg_graph *copy = h->job[i].copy;
  tg_report_ir *e = &h->at[i];
  const char *text = h->last_n ? h->text[h->last] : "";
  size_t n = h->last_n, prefix = n, suffix = 0;
  if (copy) { /* else: the same text as the last, all of it shared */
    const char *last = text;
    size_t last_n = n;
    int at = i > 0 ? 1 - h->last : 0;
    n = tg_print_ir_to(&h->text[at], &h->cap[at], copy);
    text = h->text[at];
    prefix = suffix = 0;
    if (i > 0) {
      while (prefix < n && prefix < last_n && text[prefix] == last[prefix]) prefix++;
      while (suffix < n - prefix && suffix < last_n - prefix && text[n - 1 - suffix] == last[last_n - 1 - suffix])
        suffix++;
    }
    h->last = at;
    h->last_n = n;
  }
  if (h->started) {
    pthread_mutex_lock(&h->mu);
    h->printed = i + 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
  } else {
    h->printed = i + 1;
  }
  size_t between = n - prefix - suffix;
  e->prefix = prefix;
  e->suffix = suffix;
  e->bytes = n;
  e->packed = h->packer ? tg_report_pack(h->packer, h->arena, between ? text + prefix : "", between) : NULL;
}

static void *work_in_order(void *arg) {
  tg_ir_history *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (h->done == h->queued && !h->closing) pthread_cond_wait(&h->cv, &h->mu);
    if (h->done == h->queued) break;
    int i = h->done;
    pthread_mutex_unlock(&h->mu);
    print_and_pack(h, i);
    pthread_mutex_lock(&h->mu);
    h->done++;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

tg_ir_history *tg_ir_history_new(void) {
  tg_ir_history *h = tg_xcalloc(1, sizeof *h);
  h->printer[0] = h->printer[1] = -1;
  h->packer = tg_report_packer_new();
  h->arena = tg_arena_new();
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->started = pthread_create(&h->thread, NULL, work_in_order, h) == 0; /* else all done in keep */
  return h;
}

/* Until entry i's copy is printed. */
static void wait_printed(tg_ir_history *h, int i) {
  pthread_mutex_lock(&h->mu);
  while (h->printed <= i) pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
}

void tg_ir_history_keep(tg_ir_history *h, const char *pass, const tg_graph *g) {
  if (h->n >= TG_PASS_LOG_MAX) return;
  uint64_t fingerprint = tg_ir_fingerprint(g);
  int i = h->n++;
  h->at[i] = (tg_report_ir){.pass = pass};
  h->job[i] = (printing_job){NULL, -1};
  if (i == 0 || fingerprint != h->last_fingerprint) { /* the first entry is always printed */
    int slot = i == 0 ? 0 : 1 - h->last_slot;
    if (h->started && h->printer[slot] >= 0) wait_printed(h, h->printer[slot]);
    h->job[i] = (printing_job){tg_graph_snapshot(g, &h->snapshot[slot], &h->snapshot_cap[slot]), slot};
    h->printer[slot] = i;
    h->last_slot = slot;
    h->last_fingerprint = fingerprint;
  }
  if (!h->started) {
    print_and_pack(h, i);
    h->queued = h->done = h->n;
    return;
  }
  pthread_mutex_lock(&h->mu);
  h->queued = h->n;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
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
  tg_huge_free(h->snapshot[0], h->snapshot_cap[0]);
  tg_huge_free(h->snapshot[1], h->snapshot_cap[1]);
  tg_report_packer_free(h->packer);
  tg_arena_free(h->arena);
  free(h);
}
