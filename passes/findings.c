/* findings.c: the sink of what the passes decided (findings.h).
 *
 * Everything is in the arena the sink was made in; the list of findings
 * grows by doubling (the old list stays in the arena, at most as much
 * again). */
#include <string.h>

#include "findings.h"

struct tg_findings {
  tg_arena *arena;
  tg_finding **at;
  int n, cap;
};

tg_findings *tg_findings_new(tg_arena *arena) {
  tg_findings *s = tg_alloc(arena, sizeof *s);
  s->arena = arena;
  return s;
}

tg_finding *tg_find(tg_findings *s, const char *pass, const char *verdict, int node, tg_loc loc, const char *reason) {
  if (!s) return NULL;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    tg_finding **grown = tg_alloc(s->arena, sizeof *grown * (size_t)cap);
    if (s->n) memcpy(grown, s->at, sizeof *grown * (size_t)s->n);
    s->at = grown, s->cap = cap;
  }
  tg_finding *f = tg_alloc(s->arena, sizeof *f);
  *f = (tg_finding){.pass = tg_strdup(s->arena, pass), .verdict = tg_strdup(s->arena, verdict), .node = node,
                    .loc = loc, .reason = reason ? tg_strdup(s->arena, reason) : NULL};
  s->at[s->n++] = f;
  return f;
}

static tg_finding_field *add_field(tg_findings *s, tg_finding *f, const char *name) {
  if (f->n_fields == f->cap_fields) {
    int cap = f->cap_fields ? 2 * f->cap_fields : 8;
    tg_finding_field *grown = tg_alloc(s->arena, sizeof *grown * (size_t)cap);
    if (f->n_fields) memcpy(grown, f->fields, sizeof *grown * (size_t)f->n_fields);
    f->fields = grown, f->cap_fields = cap;
  }
  tg_finding_field *x = &f->fields[f->n_fields++];
  *x = (tg_finding_field){.name = tg_strdup(s->arena, name)};
  return x;
}

void tg_finding_num(tg_findings *s, tg_finding *f, const char *name, double number) {
  if (s && f) add_field(s, f, name)->number = number;
}

void tg_finding_text(tg_findings *s, tg_finding *f, const char *name, const char *text) {
  if (s && f && text) add_field(s, f, name)->text = tg_strdup(s->arena, text);
}

int tg_findings_count(const tg_findings *s) { return s ? s->n : 0; }

const tg_finding *tg_findings_at(const tg_findings *s, int i) { return s && i >= 0 && i < s->n ? s->at[i] : NULL; }

bool tg_findings_of(const tg_findings *s, const char *pass) {
  for (int i = 0; i < tg_findings_count(s); i++)
    if (!strcmp(s->at[i]->pass, pass)) return true;
  return false;
}

static const tg_finding_field *field(const tg_finding *f, const char *name) {
  for (int i = 0; i < f->n_fields; i++)
    if (!strcmp(f->fields[i].name, name)) return &f->fields[i];
  return NULL;
}

double tg_finding_number(const tg_finding *f, const char *name) {
  const tg_finding_field *x = field(f, name);
  return x && !x->text ? x->number : 0;
}

const char *tg_finding_str(const tg_finding *f, const char *name) {
  const tg_finding_field *x = field(f, name);
  return x ? x->text : NULL;
}

bool tg_finding_has(const tg_finding *f, const char *name) { return field(f, name) != NULL; }
