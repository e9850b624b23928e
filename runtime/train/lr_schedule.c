/* lr_schedule.c: nanoGPT's get_lr (see lr_schedule.h).
 *
 * The arithmetic follows the Python line by line, in double, so that a
 * run's rates agree with nanoGPT's to the last bit or two (the tests hold
 * it to values that Python printed). */
#include "lr_schedule.h"

#include <math.h>

/* Python's math.pi; M_PI is not C11. */
static const double PI = 3.141592653589793;

double tg_lr_at(const tg_lr_schedule *s, int64_t it) {
  if (it < s->warmup) return s->lr * (double)(it + 1) / (double)(s->warmup + 1);
  if (it > s->decay_steps || s->decay_steps <= s->warmup) return s->min_lr;
  double ratio = (double)(it - s->warmup) / (double)(s->decay_steps - s->warmup);
  double coeff = 0.5 * (1.0 + cos(PI * ratio));
  return s->min_lr + coeff * (s->lr - s->min_lr);
}
