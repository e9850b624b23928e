/* step_abi.h: the entry points of the generated C (render_c.c), declared
 * once for both sides: the renderer prints these declarations into the
 * source it writes, and the CPU backend (runtime/backend/cpu) looks the
 * symbols up with dlsym and calls them through these types.  A change
 * here changes both, so they cannot drift apart.
 *
 *   tg_step            runs the whole step: leaves[i] points at leaf i's
 *                      elements (leaf order: tg_program.leaves), arena and
 *                      scratch are the planned buffers; collective is
 *                      called with kernel k's index at each of the
 *                      step's collective points: where kernel k is an IR
 *                      collective (all_reduce, all_gather, reduce_scatter:
 *                      the call runs it, no generated code does), and
 *                      after a kernel k that completes a bucket of
 *                      gradients (passes/schedule.c: the call runs that
 *                      bucket's hooks).  It may be NULL only in a step
 *                      with no IR collective.
 *   tg_arena_bytes     the sizes those buffers must have
 *   tg_scratch_bytes
 *   tg_n_leaves        how many leaves the step takes
 *   tg_leaf_names      their names, in order (for a person reading the C)
 *   tg_profile         set non-zero to time every kernel ...
 *   tg_kernel_seconds  ... into this table, one entry per kernel */
#ifndef TG_STEP_ABI_H
#define TG_STEP_ABI_H

#define TG_STEP_PARAMS "void *const *leaves, char *arena, char *scratch, void (*collective)(int, void *), void *ctx"
typedef void tg_step_fn(void *const *leaves, char *arena, char *scratch, void (*collective)(int, void *), void *ctx);

#define TG_STEP_SYMBOL "tg_step"
#define TG_ARENA_BYTES_SYMBOL "tg_arena_bytes"     /* const long */
#define TG_SCRATCH_BYTES_SYMBOL "tg_scratch_bytes" /* const long */
#define TG_N_LEAVES_SYMBOL "tg_n_leaves"           /* const int */
#define TG_LEAF_NAMES_SYMBOL "tg_leaf_names"       /* const char *const[] */
#define TG_PROFILE_SYMBOL "tg_profile"             /* int */
#define TG_KERNEL_SECONDS_SYMBOL "tg_kernel_seconds" /* double[n_kernels] */

#endif
