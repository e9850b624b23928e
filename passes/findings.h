/* findings.h: what the passes decided, as data (findings.c), and its text
 * (findings_text.c).
 *
 * A pass that explains itself (fuse: why an op stopped a kernel; memplan:
 * where each buffer went; precision: which rule chose each dtype) records
 * each decision as one finding in a sink: the pass, the verdict (the kind
 * of decision: "kernel", "stop", "buffer", ...), the node it is about, its
 * place in the .tg source, the reason in words, and named fields (numbers
 * and short texts).  The pass decides; it formats nothing.  Two renderers
 * read the same findings: tg_findings_print writes each report's text
 * (`tgc --report NAME`, whose golden tests hold it byte for byte), and
 * the page (report/report.c) writes them as data for its tables.
 *
 * The sink and its strings live in an arena (the compilation's: a pass
 * that bails leaves nothing to free); a finding's loc.file is borrowed
 * from the compilation's sources, which live as long. */
#ifndef TG_FINDINGS_H
#define TG_FINDINGS_H

#include <stdio.h>

#include "diag.h"

/* A named field: a number, or (text != NULL) a text. */
typedef struct tg_finding_field {
  const char *name;
  const char *text;
  double number;
} tg_finding_field;

typedef struct tg_finding {
  const char *pass;    /* the pass that decided (pipeline.c's name: "fuse") */
  const char *verdict; /* what kind of decision ("kernel", "stop", "summary") */
  int node;            /* the node it is about (its id then), or -1 */
  tg_loc loc;          /* its place in the source; file NULL: none */
  const char *reason;  /* why, in words, or NULL */
  tg_finding_field *fields;
  int n_fields, cap_fields;
} tg_finding;

typedef struct tg_findings tg_findings;

tg_findings *tg_findings_new(tg_arena *arena);

/* Records a finding and returns it, for its fields.  s may be NULL (no one
 * asked): then nothing is recorded and NULL is returned, which the field
 * setters accept, so that a pass records without testing. */
tg_finding *tg_find(tg_findings *s, const char *pass, const char *verdict, int node, tg_loc loc, const char *reason);
void tg_finding_num(tg_findings *s, tg_finding *f, const char *name, double number);
void tg_finding_text(tg_findings *s, tg_finding *f, const char *name, const char *text); /* text copied; NULL: none */

int tg_findings_count(const tg_findings *s);
const tg_finding *tg_findings_at(const tg_findings *s, int i);
/* Whether any finding of the pass was recorded. */
bool tg_findings_of(const tg_findings *s, const char *pass);

/* A field by name: its number (0 when absent), its text (NULL when absent
 * or a number), whether it is there. */
double tg_finding_number(const tg_finding *f, const char *name);
const char *tg_finding_str(const tg_finding *f, const char *name);
bool tg_finding_has(const tg_finding *f, const char *name);

/* The text of the report of a pass (findings_text.c): its findings, as
 * `tgc --report NAME` prints them.  pass is pipeline.c's name of the pass
 * ("fuse" writes the report named "fusion").  False (nothing written)
 * when the pass has no text renderer. */
bool tg_findings_print(FILE *out, const tg_findings *s, const char *pass);

#endif
