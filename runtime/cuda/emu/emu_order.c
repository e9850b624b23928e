/* emu_order.c: the stream-order checker of the emulated device.
 *
 * The emulator runs each operation when it is issued, so a stream is
 * always complete and a missing event wait between two streams (say the
 * compute stream and the NCCL stream) gives the right answer here and a
 * race on a GPU.  This file finds such a missing wait instead: every
 * operation says which device bytes it reads and writes, and an access
 * whose last writer (or, for a write, an earlier reader) ran on another
 * stream is a failure unless that operation happens before it.
 *
 * "Happens before" is a vector clock per stream (emu_internal.h): an
 * operation ticks its stream's own entry; cuEventRecord copies the
 * stream's clock into the event, cuStreamWaitEvent joins the event's into
 * the stream's, a synchronize joins into the host's clock, which every
 * operation joins when it is issued (the driver keeps the clocks,
 * emu_driver.c).  An access record keeps its stream's slot and the tick of
 * its operation: the record is ordered before an operation whose clock
 * has reached that tick in that slot.
 *
 * Records are kept per allocation, each a byte range.  A write that
 * covers a record it is ordered after supersedes it (any later access
 * ordered after the write is ordered after the record; one that is not
 * conflicts with the write already), and so does a read of a read on the
 * same stream; so a step that touches the same buffers every time keeps a
 * bounded list. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

typedef struct access_record {
  uintptr_t lo, hi;
  int slot;
  uint32_t tick;
  bool write;
  char op[200];
} access_record;

typedef struct alloc_records {
  uintptr_t lo; /* the allocation's start */
  access_record *v;
  int n, cap;
} alloc_records;

static struct {
  alloc_records *v; /* sorted by lo */
  int n, cap;
} book;

static int find_book(uintptr_t lo, bool *found) {
  int a = 0, b = book.n;
  while (a < b) {
    int m = (a + b) / 2;
    if (book.v[m].lo < lo) a = m + 1;
    else b = m;
  }
  *found = a < book.n && book.v[a].lo == lo;
  return a;
}

static alloc_records *records_of(uintptr_t alloc_lo) {
  bool found;
  int i = find_book(alloc_lo, &found);
  if (found) return &book.v[i];
  if (book.n == book.cap) {
    int cap = book.cap ? 2 * book.cap : 64;
    alloc_records *v = realloc(book.v, sizeof *v * (size_t)cap);
    if (!v) return NULL;
    book.v = v, book.cap = cap;
  }
  memmove(&book.v[i + 1], &book.v[i], sizeof *book.v * (size_t)(book.n - i));
  book.v[i] = (alloc_records){.lo = alloc_lo};
  book.n++;
  return &book.v[i];
}

void emu_order_forget(uintptr_t alloc_lo) {
  bool found;
  int i = find_book(alloc_lo, &found);
  if (!found) return;
  free(book.v[i].v);
  memmove(&book.v[i], &book.v[i + 1], sizeof *book.v * (size_t)(book.n - i - 1));
  book.n--;
}

void emu_order_reset(void) {
  for (int i = 0; i < book.n; i++) free(book.v[i].v);
  free(book.v);
  book.v = NULL;
  book.n = book.cap = 0;
}

void emu_vclock_join(emu_vclock *into, const emu_vclock *from) {
  for (int i = 0; i < EMU_SLOTS; i++)
    if (from->c[i] > into->c[i]) into->c[i] = from->c[i];
}

static bool ordered_before(const access_record *r, const emu_vclock *vc) { return vc->c[r->slot] >= r->tick; }

/* Whether the access conflicts with a record; if so, why. */
static bool conflicts(const access_record *r, const emu_access *a, const emu_vclock *vc, const char *op,
                      char *why, size_t whylen) {
  if (a->hi <= r->lo || r->hi <= a->lo || ordered_before(r, vc) || (!r->write && !a->write)) return false;
  uintptr_t lo = a->lo > r->lo ? a->lo : r->lo, hi = a->hi < r->hi ? a->hi : r->hi;
  snprintf(why, whylen,
           "stream-order race: %s %s %s (bytes [%#llx, +%llu)), which %s %s, and nothing orders the two: no "
           "cuStreamWaitEvent on an event recorded after the first, no synchronize between them (on a GPU the two "
           "streams run at the same time)",
           op, a->write ? "writes" : "reads", a->what, (unsigned long long)lo, (unsigned long long)(hi - lo), r->op,
           r->write ? "wrote" : "read");
  return true;
}

static bool supersedes(const emu_access *a, int slot, const access_record *r, const emu_vclock *vc) {
  if (r->lo < a->lo || r->hi > a->hi) return false;
  if (a->write) return ordered_before(r, vc);
  return !r->write && r->slot == slot;
}

bool emu_order_access(emu_vclock *vc, int slot, const char *op, const emu_access *acc, int n, char *why,
                      size_t whylen) {
  vc->c[slot]++;
  for (int k = 0; k < n; k++) {
    const emu_access *a = &acc[k];
    if (a->hi <= a->lo) continue;
    alloc_records *b = records_of(a->alloc_lo);
    if (!b) continue;
    for (int i = 0; i < b->n; i++)
      if (conflicts(&b->v[i], a, vc, op, why, whylen)) return false;
  }
  for (int k = 0; k < n; k++) {
    const emu_access *a = &acc[k];
    if (a->hi <= a->lo) continue;
    alloc_records *b = records_of(a->alloc_lo);
    if (!b) continue;
    int kept = 0;
    for (int i = 0; i < b->n; i++)
      if (!supersedes(a, slot, &b->v[i], vc)) b->v[kept++] = b->v[i];
    b->n = kept;
    if (b->n == b->cap) {
      int cap = b->cap ? 2 * b->cap : 8;
      access_record *v = realloc(b->v, sizeof *v * (size_t)cap);
      if (!v) continue;
      b->v = v, b->cap = cap;
    }
    access_record *r = &b->v[b->n++];
    *r = (access_record){a->lo, a->hi < a->alloc_hi ? a->hi : a->alloc_hi, slot, vc->c[slot], a->write, ""};
    snprintf(r->op, sizeof r->op, "%s", op);
  }
  return true;
}
