/* canon.h: generated code with its graph numbers made positional, and
 * steps of one shape (canon.c).
 *
 * The emitter names buffers and values after graph nodes (b52, t52, r52,
 * acc52), so twelve layers' copies of one kernel differ only in those
 * numbers.  Numbering the names by first appearance instead gives texts
 * that are equal exactly when the code is the same up to renaming: one
 * function can then serve every copy (cuda_kernels.c, render_c.c).
 *
 * A *shape* goes further, for the steps of a multi-tensor kernel (the
 * optimizer's update of each parameter): two step bodies have one shape
 * when they are the same up to their buffers and their integer literals
 * (sizes, strides, block offsets); the shape becomes one function taking
 * the buffers, and the literals that differ, as parameters.  Literals that
 * must stay constant (an array's size, the bound of a loop the compiler
 * must unroll, TG_SHARED's count) are part of the shape. */
#ifndef TG_CANON_H
#define TG_CANON_H

#include <stdbool.h>
#include <stdint.h>

#include "sbuf.h"
#include "sha256.h"

/* text with every numbered name positional, into out (comments kept), and
 * into key (comments dropped, runs of space as one): equal keys, equal code
 * up to names.  tg_row_k<K>_s<S> becomes tg_row_TGSELF_s<S>, TGSELF being
 * the placeholder for the function's own name (tg_put_named). */
void tg_canonical(const char *text, tg_sbuf *out, tg_sbuf *key);
/* tg_canonical, and the key's SHA-256 in hex: what names a function that
 * every text with that key shares. */
void tg_canonical_hash(const char *text, tg_sbuf *out, tg_sbuf *key, char hex[TG_SHA256_HEX]);

/* text with every TGSELF replaced by name, appended to out. */
void tg_put_named(tg_sbuf *out, const char *text, const char *name);

/* The declaration of buffer b<node> as a parameter ("TG_ARG(const float)",
 * "const float *restrict"), or NULL when b<node> is not one. */
typedef const char *(*tg_buf_decl)(void *ctx, long node);

typedef struct tg_shape {
  const char *body;  /* the step's text (not owned) */
  struct tg_token *t;
  int n;
  char *key;         /* the shape: equal keys, one function */
  long *bufs;        /* its buffers (node numbers), in order of first appearance */
  int n_bufs;
  int *lits;         /* its free integer literals (token indexes), in order */
  int n_lits;
} tg_shape;

/* Analyses body; false when it names a buffer decl does not know (then it
 * has no shape to share). */
bool tg_shape_analyse(tg_shape *S, const char *body, tg_buf_decl decl, void *ctx);
void tg_shape_free(tg_shape *S);
bool tg_shape_same(const tg_shape *a, const tg_shape *b);
/* Marks in vary (one flag per free literal of rep) the literals m's differ in. */
void tg_shape_vary(const tg_shape *rep, const tg_shape *m, bool *vary);
/* The shape's function, from its representative R: the parameter list
 * (buffers b0.. in R's order, then each varying literal as
 * `const tg_idx n0`..), the body with those names, and a member's call
 * arguments. */
void tg_shape_params(tg_sbuf *out, const tg_shape *R, const bool *vary, tg_buf_decl decl, void *ctx);
void tg_shape_body(tg_sbuf *out, const tg_shape *R, const bool *vary);
void tg_shape_args(tg_sbuf *out, const tg_shape *m, const bool *vary);
/* The value of m's l-th free literal (768, 48u: 48). */
long long tg_shape_lit(const tg_shape *m, int l);

#endif
