/* manifest.c: the parts of a manifest both targets write alike
 * (manifest.h): the head, a kernel's arguments, the all-reduces. */
#include "manifest.h"

#include "json_text.h"

void tg_manifest_str(FILE *out, const char *s) { tg_json_fquote(out, s ? s : ""); }

const char *tg_manifest_access(bool read, bool written) {
  return read && written ? "readwrite" : written ? "write" : "read";
}

/* A value in memory: which, where, and (for a kernel's argument) whether
 * the kernel reads it, writes it or both; access NULL: not said. */
static void arg_json(FILE *out, const tg_program *p, int node, const char *access) {
  const tg_node *n = p->g->nodes[node];
  const tg_storage *s = &p->store[node];
  fprintf(out, "{\"param\": \"b%d\", \"value\": \"%%%d\", \"name\": ", node, node);
  tg_manifest_str(out, n->name ? n->name : "");
  fprintf(out, ", \"dtype\": \"%s\", \"shape\": [", tg_dtype_name(n->type.dtype));
  for (int d = 0; d < n->type.rank; d++) fprintf(out, "%s%lld", d ? ", " : "", (long long)n->type.dim[d].size);
  if (s->place == TG_PLACE_LEAF) fprintf(out, "], \"place\": \"leaf\", \"leaf\": %d", s->leaf);
  else fprintf(out, "], \"place\": \"%s\", \"offset\": %lld", s->place == TG_PLACE_ARENA ? "arena" : "scratch",
               (long long)s->offset);
  if (access) fprintf(out, ", \"access\": \"%s\"", access);
  fprintf(out, "}");
}

void tg_manifest_head(FILE *out, const tg_program *p, const char *target, const char *file) {
  const tg_graph *g = p->g;
  fprintf(out, "{\n  \"format\": \"tg-manifest-2\",\n  \"source\": ");
  tg_manifest_str(out, g->source);
  fprintf(out, ",\n  \"%s\": ", target);
  tg_manifest_str(out, file);
  fprintf(out, ",\n  \"arena_bytes\": %lld,\n  \"scratch_bytes\": %lld,\n  \"leaves\": [", (long long)p->arena_bytes,
          (long long)p->scratch_bytes);
  for (int i = 0; i < p->n_leaves; i++) {
    fprintf(out, "%s\n    ", i ? "," : "");
    arg_json(out, p, p->leaves[i], NULL);
  }
  fprintf(out, "\n  ],\n  \"kernels\": [");
}

void tg_manifest_kernel_head(FILE *out, const tg_program *p, const tg_lkernel *lk, const char *where) {
  const tg_kernel *K = &p->g->kernels[lk->kernel];
  fprintf(out, "%s\n    {\"kernel\": \"k%d\", \"name\": ", lk->kernel ? "," : "", lk->kernel);
  tg_manifest_str(out, K->name);
  fprintf(out, ", \"kind\": \"%s\"", tg_kernel_kind_name(K->kind));
  if (lk->folded_into >= 0) fprintf(out, ", \"folded_into\": \"k%d\"", lk->folded_into);
  if (where) {
    fprintf(out, ", \"where\": ");
    tg_manifest_str(out, where);
  }
  fprintf(out, ",\n     \"args\": [");
  for (int a = 0; a < lk->n_args; a++) {
    fprintf(out, "%s\n       ", a ? "," : "");
    arg_json(out, p, lk->args[a], tg_manifest_access(lk->arg_read[a], lk->arg_written[a]));
  }
  fprintf(out, "],\n     \"launches\": [");
}

void tg_manifest_allreduce(FILE *out, const tg_graph *g, int b) {
  const tg_bucket *B = &g->allreduce->buckets[b];
  fprintf(out, "{\"allreduce\": %d, \"bytes\": %lld, \"grads\": [", b, (long long)B->bytes);
  for (int x = 0; x < B->n_grads; x++) fprintf(out, "%s\"b%d\"", x ? ", " : "", B->grads[x]);
  fprintf(out, "]}");
}

void tg_manifest_collective(FILE *out, const tg_node *n) {
  const tg_node *in = n->in[0];
  fprintf(out, "{\"collective\": \"%s\", \"ranks\": %d, \"in\": \"b%d\", \"out\": \"b%d\", \"bytes\": %lld}",
          tg_ops[n->op].name, n->ranks, tg_kernel_base(in)->id, n->id,
          (long long)(tg_type_numel(&in->type) * tg_dtype_size(in->type.dtype)));
}

void tg_manifest_tail(FILE *out) { fprintf(out, "\n  ]\n}\n"); }
