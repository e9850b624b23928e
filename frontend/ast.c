/* ast.c: constructors for the syntax tree (arena-allocated, grown by
 * doubling; nothing is ever freed on its own). */
#include "ast.h"

#include <string.h>

static void *grow(tg_arena *a, void *old, int n, int *cap, size_t elem) {
  if (n < *cap) return old;
  int ncap = *cap ? *cap * 2 : 4;
  void *p = tg_alloc(a, (size_t)ncap * elem);
  if (n) memcpy(p, old, (size_t)n * elem);
  *cap = ncap;
  return p;
}

tg_expr *tg_expr_new(tg_arena *a, tg_expr_kind kind, tg_loc loc) {
  tg_expr *e = tg_alloc(a, sizeof *e);
  e->kind = kind;
  e->loc = loc;
  return e;
}

void tg_expr_list_push(tg_arena *a, tg_expr_list *l, tg_expr *e) {
  l->items = grow(a, l->items, l->n, &l->cap, sizeof *l->items);
  l->items[l->n++] = e;
}

void tg_path_push(tg_arena *a, tg_path *p, tg_seg seg) {
  p->segs = grow(a, p->segs, p->n, &p->cap, sizeof *p->segs);
  p->segs[p->n++] = seg;
}

tg_stmt *tg_stmt_new(tg_arena *a, tg_stmt_kind kind, tg_loc loc) {
  tg_stmt *s = tg_alloc(a, sizeof *s);
  s->kind = kind;
  s->loc = loc;
  return s;
}

void tg_stmt_list_push(tg_arena *a, tg_stmt_list *l, tg_stmt *s) {
  l->items = grow(a, l->items, l->n, &l->cap, sizeof *l->items);
  l->items[l->n++] = s;
}

/* Arrays that only grow by one: reallocate whenever n reaches a power of
 * two, so capacity is always the next power of two at or above n. */
static bool full(int n) { return n == 0 || (n & (n - 1)) == 0; }

static void *regrow(tg_arena *a, void *old, int n, size_t elem) {
  void *p = tg_alloc(a, elem * (size_t)(n ? 2 * n : 1));
  if (n) memcpy(p, old, elem * (size_t)n);
  return p;
}

void tg_stmt_add_name(tg_arena *a, tg_stmt *s, const char *name, tg_loc loc) {
  if (full(s->n_names)) {
    s->names = regrow(a, s->names, s->n_names, sizeof *s->names);
    s->name_locs = regrow(a, s->name_locs, s->n_names, sizeof *s->name_locs);
  }
  s->names[s->n_names] = name;
  s->name_locs[s->n_names++] = loc;
}

void tg_stmt_add_arg(tg_arena *a, tg_stmt *s, tg_arg arg) {
  if (full(s->n_args)) s->args = regrow(a, s->args, s->n_args, sizeof *s->args);
  s->args[s->n_args++] = arg;
}
