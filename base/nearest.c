/* nearest.c: the nearest known name (nearest.h). */
#include "nearest.h"

#include <string.h>

enum { LONGEST = 64 }; /* longer names get no suggestion: they are not typos */

/* Optimal string alignment distance: insertions, deletions, substitutions
 * and swaps of neighbours, each one edit. */
static int distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > LONGEST || lb > LONGEST) return 1000;
  int d[LONGEST + 1][LONGEST + 1];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

const char *tg_nearest(const char *name, const char *const *known, int n) {
  size_t len = strlen(name);
  if (len < 2) return NULL;
  const char *best = NULL;
  int best_d = 1000;
  for (int i = 0; i < n; i++) {
    int d = distance(name, known[i]);
    if (d < best_d) best_d = d, best = known[i];
  }
  return best && best_d <= (int)(len < 3 ? 1 : len / 3 + 1) ? best : NULL;
}
