/* nearest.h: "did you mean": the known name nearest to a misspelt one
 * (nearest.c).  One rule for every place tg suggests a name (tgc's flags
 * and the model's names, tgrun's commands and options, train.cfg's keys
 * and values), so the same typo gets the same suggestion everywhere. */
#ifndef TG_NEAREST_H
#define TG_NEAREST_H

/* The name in known[0 .. n) nearest to name by edit distance, counting a
 * swap of two neighbouring characters as one edit ("cdua" is one edit from
 * "cuda"), when it is close enough to be a plausible typo: at most a third
 * of the name's length away (one edit for names of two characters).  NULL
 * otherwise, and for names shorter than two characters (any one-letter
 * name is one edit from every other). */
const char *tg_nearest(const char *name, const char *const *known, int n);

#endif
