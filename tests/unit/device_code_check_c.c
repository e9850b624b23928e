/* device_code_check_c.c: the C target's hand-written code
 * (codegen/c/prelude.h and codegen/gelu_kernel.h, as render_c.c prints them)
 * compiled on its own as C11 under the project's warnings (-Wall -Wextra
 * -Werror).  The generated C is built at run time with the CPU backend's
 * own flags, so this is where a warning in it shows.  One function uses
 * every helper, so that none is unused.  Built as an object, never run. */
#include "prelude.h"
#define TG_GELU_FN static inline
#include "gelu_kernel.h"
#undef TG_GELU_FN

float tg_c_prelude_check(const unsigned short *m, float x, unsigned short *out);
float tg_c_prelude_check(const unsigned short *m, float x, unsigned short *out) {
  float *d = tg_bf16_dense(m, 2, 2, 2);
  tg_bf16_round_into(d, 2, 2, out, 2);
  float y = tg_gelu(x) + tg_gelu_grad(x) + tg_exp(x) + tg_bf16_round(x) + tg_f16_round(x) + tg_inf() + d[0] +
            (float)tg_float_bits(x);
  free(d);
  return y;
}
