/* lr_schedule.h: the learning rate of each step, as nanoGPT's get_lr.
 *
 * For the 0-based step `it`:
 *   it <  warmup:       lr * (it + 1) / (warmup + 1)          linear warmup
 *   it >  decay_steps:  min_lr                                after the decay
 *   otherwise:          cosine from lr down to min_lr over [warmup, decay_steps]:
 *                       ratio = (it - warmup) / (decay_steps - warmup)
 *                       min_lr + 0.5 * (1 + cos(pi * ratio)) * (lr - min_lr)
 * so the warmup never uses a rate of 0, the peak lr is reached at it =
 * warmup, and min_lr at it = decay_steps.  Where nanoGPT would divide by
 * zero (decay_steps == warmup, reached only when it == warmup) this gives
 * min_lr, the end of a decay of length zero. */
#ifndef TG_LR_SCHEDULE_H
#define TG_LR_SCHEDULE_H

#include <stdint.h>

typedef struct tg_lr_schedule {
  double lr;           /* peak: train.cfg's learning_rate */
  double min_lr;
  int64_t warmup;      /* warmup_steps */
  int64_t decay_steps; /* tg_train_config_decay_steps(): lr_decay_steps, or max_steps */
} tg_lr_schedule;

double tg_lr_at(const tg_lr_schedule *s, int64_t it);

#endif
