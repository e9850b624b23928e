/* manifest_c.c: the C target's manifest (render_c.h): each step is a
 * function of the kernel, called in order; matmuls are sgemm calls, listed
 * under "cblas_sgemm" with that function's arguments (whichever library
 * the backend compiles tg_sgemm to: prelude.h). */
#include "manifest.h"
#include "render_c.h"

static void cblas_json(FILE *out, const tg_gemm *G) {
  fprintf(out, "{\"cblas_sgemm\": {");
  fprintf(out, "\"c\": \"b%d\", \"a\": \"b%d\", \"b\": \"b%d\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
               "\"trans_a\": %s, \"trans_b\": %s, \"lda\": %lld, \"ldb\": %lld, \"ldc\": %lld, "
               "\"a_offset\": %lld, \"b_offset\": %lld, \"batch\": %lld, \"row_major\": true}}",
          G->node, G->a.base, G->b.base, (long long)G->m, (long long)G->n, (long long)G->k, G->trans_a ? "true" : "false",
          G->trans_b ? "true" : "false", (long long)G->lda, (long long)G->ldb, (long long)G->ldc, (long long)G->a_off,
          (long long)G->b_off, (long long)G->batch);
}

static void kernel_steps(FILE *out, const tg_program *p, const tg_c_functions *fns, int k) {
  const tg_graph *g = p->g;
  const tg_lkernel *lk = &p->kernels[k];
  bool first = true;
  for (int s = 0; s < lk->n_steps; s++) {
    const tg_step *st = &lk->steps[s];
    fprintf(out, "%s\n       ", first ? "" : ",");
    first = false;
    if (st->kind == TG_STEP_GEMM) {
      cblas_json(out, &st->gemm);
      continue;
    }
    if (st->kind == TG_STEP_COLLECTIVE) { /* no code: the backend runs it at the step's collective point */
      tg_manifest_collective(out, g->nodes[st->node]);
      continue;
    }
    fprintf(out, "{\"function\": \"%s\", \"step\": \"%s\", \"kind\": \"%s\"", tg_c_function_of(fns, k, s), st->fn,
            st->kind == TG_STEP_NEST ? "nest" : st->kind == TG_STEP_SCATTER ? "scatter" : "flash");
    if (st->kind == TG_STEP_NEST || st->kind == TG_STEP_SCATTER)
      fprintf(out, ", \"outer_points\": %lld, \"inner_points\": %lld, \"sweeps\": %d", (long long)st->nest.outer_count,
              (long long)st->nest.inner_count, st->nest.n_sweeps);
    fprintf(out, ", \"args\": ");
    tg_manifest_str(out, tg_c_call_of(fns, k, s));
    fprintf(out, "}");
  }
  const tg_allreduce_plan *ar = g->allreduce;
  for (int b = 0; ar && b < ar->n_buckets; b++) {
    if (ar->buckets[b].after_kernel != k) continue;
    fprintf(out, "%s\n       ", first ? "" : ",");
    first = false;
    tg_manifest_allreduce(out, g, b);
  }
}

void tg_render_c_manifest(FILE *out, const tg_program *p, const char *file) {
  tg_manifest_head(out, p, "c", file);
  tg_c_functions *fns = tg_c_functions_make(p);
  for (int k = 0; k < p->n_kernels; k++) {
    tg_manifest_kernel_head(out, p, &p->kernels[k], NULL);
    kernel_steps(out, p, fns, k);
    fprintf(out, "]}");
  }
  tg_c_functions_free(fns);
  tg_manifest_tail(out);
}
