/* schedule.c: where the data-parallel all-reduces go in the backward pass.
 *
 * With N ranks, each computes gradients on its own batch; before the
 * optimizer they must be averaged across ranks.  Waiting for the whole
 * backward and then reducing everything leaves the network idle while
 * computing and the processors idle while communicating.  Instead, as
 * PyTorch's DDP does, the gradients are grouped into buckets in the order
 * the backward produces them, and each bucket's all-reduce starts as soon
 * as its last gradient exists (on a GPU, on a stream of its own, while the
 * rest of the backward runs).  A bucket of a few MiB amortises each
 * call's latency without delaying the first one long.
 *
 * The plan is derived from the kernels: a gradient is produced by the
 * kernel that computes its value (through views); a gradient that no
 * kernel computes (a parameter the loss does not reach: zeros) needs no
 * reduction and is left out. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct grad {
  int node, kernel;
  int64_t bytes;
} grad;

static int by_kernel(const void *a, const void *b) {
  const grad *x = a, *y = b;
  if (x->kernel != y->kernel) return x->kernel < y->kernel ? -1 : 1;
  return x->node < y->node ? -1 : x->node > y->node;
}

/* Each bucket and its gradients (each by its parameter's name), the
 * totals, and the tensor axis's collectives (collectives.c). */
static void record(tg_findings *out, const tg_graph *g, const tg_allreduce_plan *p) {
  for (int b = 0; b < p->n_buckets; b++) {
    const tg_bucket *B = &p->buckets[b];
    tg_finding *x = tg_find(out, "schedule", "bucket", -1, (tg_loc){0}, NULL);
    tg_finding_num(out, x, "bucket", b);
    tg_finding_num(out, x, "gradients", B->n_grads);
    tg_finding_num(out, x, "bytes", (double)B->bytes);
    tg_finding_num(out, x, "after_kernel", B->after_kernel);
    tg_finding_text(out, x, "kernel_name", g->kernels[B->after_kernel].name);
    for (int k = 0; k < B->n_grads; k++) {
      const char *param = NULL;
      for (int o = 0; o < g->n_outputs && !param; o++)
        if (g->outputs[o].node->id == B->grads[k]) param = tg_gradient_param_name(g->outputs[o].name);
      const tg_node *n = g->nodes[B->grads[k]];
      x = tg_find(out, "schedule", "gradient", n->id, n->loc, NULL);
      tg_finding_num(out, x, "bucket", b);
      tg_finding_text(out, x, "param", param);
    }
  }
  tg_finding *x = tg_find(out, "schedule", "summary", -1, (tg_loc){0}, NULL);
  tg_finding_num(out, x, "buckets", p->n_buckets);
  tg_finding_num(out, x, "bucket_bytes", (double)p->bucket_bytes);
  tg_finding_num(out, x, "kernels", g->n_kernels);
  tg_tensor_collectives_record(out, "schedule", g);
}

void tg_schedule_allreduce(tg_ctx *ctx, tg_graph *g, int64_t bucket_bytes, tg_findings *findings) {
  if (!g->n_kernels) tg_error(ctx, (tg_loc){g->source, 1, 1}, "schedule: the graph is not fused");
  if (bucket_bytes <= 0) bucket_bytes = TG_BUCKET_BYTES_DEFAULT;
  size_t plen = strlen(TG_GRAD_PREFIX);
  grad *gs = calloc((size_t)g->n_outputs + 1, sizeof *gs);
  if (!gs) tg_error(ctx, (tg_loc){0}, "out of memory");
  int n = 0;
  for (int i = 0; i < g->n_outputs; i++) {
    if (strncmp(g->outputs[i].name, TG_GRAD_PREFIX, plen)) continue;
    const tg_node *b = tg_kernel_base(g->outputs[i].node);
    if (b->kernel < 0) continue; /* a constant: nothing to reduce */
    gs[n++] = (grad){b->id, b->kernel, tg_type_numel(&b->type) * tg_dtype_size(b->type.dtype)};
  }
  qsort(gs, (size_t)n, sizeof *gs, by_kernel);
  tg_allreduce_plan *p = tg_alloc(g->arena, sizeof *p);
  p->bucket_bytes = bucket_bytes;
  p->buckets = tg_alloc(g->arena, sizeof(tg_bucket) * (size_t)(n ? n : 1));
  for (int i = 0; i < n;) {
    /* the bucket takes gradients until it holds bucket_bytes, and always
     * every gradient of the kernel that closes it (one all-reduce per
     * point in the schedule) */
    int j = i;
    int64_t bytes = 0;
    while (j < n && bytes < bucket_bytes) bytes += gs[j++].bytes;
    while (j < n && gs[j].kernel == gs[j - 1].kernel) bytes += gs[j++].bytes;
    tg_bucket *B = &p->buckets[p->n_buckets++];
    B->after_kernel = gs[j - 1].kernel;
    B->n_grads = j - i;
    B->bytes = bytes;
    B->grads = tg_alloc(g->arena, sizeof(int) * (size_t)B->n_grads);
    for (int k = i; k < j; k++) B->grads[k - i] = gs[k].node;
    i = j;
  }
  g->allreduce = p;
  if (findings) record(findings, g, p);
  free(gs);
}
