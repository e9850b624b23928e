/* init.h: initial values of parameters and optimizer state. */
#ifndef TG_INIT_H
#define TG_INIT_H

#include "ir.h"

/* Fills out (numel floats) with a param's or state's initial value: zeros,
 * ones, or normal(0, std).  Normal values come from a counter-based
 * generator keyed by the seed and the tensor's name, so they depend on
 * nothing else: not the order of parameters, not the rest of the model. */
void tg_param_init(const tg_node *leaf, uint64_t seed, float *out);

#endif
