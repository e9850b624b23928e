/* gelu.h: GELU's tanh form, the one tg computes everywhere.
 *
 *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *
 * GPT-2 (and so nanoGPT and torch's approximate='tanh') uses this form, not
 * the erf one, so its weights are trained for it.  The constants are here
 * once for the places that must agree on them: passes/gelu.c recognises the
 * formula in a model by them, and the reference interpreter and the
 * emulated cuBLASLt epilogue compute it in double with the functions below,
 * the values the generated kernels are held to.  (Macros, not const
 * doubles: passes/gelu.c puts them in static initializers.) */
#ifndef TG_GELU_H
#define TG_GELU_H

#include <math.h>

#define TG_GELU_SQRT_2_OVER_PI 0.7978845608028654 /* sqrt(2 / pi), to the double */
#define TG_GELU_CUBIC 0.044715                    /* the x^3 coefficient */

static inline double tg_gelu_tanh(double x) {
  double t = tanh(TG_GELU_SQRT_2_OVER_PI * (x + TG_GELU_CUBIC * x * x * x));
  return 0.5 * x * (1 + t);
}

/* d gelu / dx: with t the tanh above, 0.5 (1 + t) + 0.5 x (1 - t^2) u',
 * u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
static inline double tg_gelu_tanh_grad(double x) {
  double t = tanh(TG_GELU_SQRT_2_OVER_PI * (x + TG_GELU_CUBIC * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * TG_GELU_SQRT_2_OVER_PI * (1 + 3 * TG_GELU_CUBIC * x * x);
}

#endif
