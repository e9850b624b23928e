/* hf_export.c: a model's weights as a Hugging Face GPT-2 directory
 * (hf_export.h). */
#include "hf_export.h"

#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "hf.h"
#include "safetensors.h"
#include "weights.h"

bool tg_hf_export(const char *dir, const tg_graph *g, float *const *values, int64_t eot, char *why, size_t whylen) {
  static const char *const names[5] = {"n_layer", "n_head", "n_embd", "vocab", "block_size"};
  double c[5];
  for (int i = 0; i < 5; i++)
    if (!tg_graph_get_config(g, names[i], &c[i]) || c[i] < 1)
      return tg_why(why, whylen,
                    "the model %s has no config constant %s: the export writes GPT-2's format, which needs n_layer, "
                    "n_head, n_embd, vocab and block_size",
                    g->source ? g->source : "", names[i]);
  if (!tg_make_dirs(dir, why, whylen)) return false;
  tg_st_tensor *ts = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *ts);
  float **cropped = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *cropped);
  char **hf_names = tg_xcalloc((size_t)g->n_nodes + 1, sizeof *hf_names);
  bool ok = true;
  int n = 0;
  for (int k = 0; k < g->n_nodes && ok; k++) {
    const tg_node *p = g->nodes[k];
    if (p->op != TG_OP_param) continue;
    if (!values[k]) {
      ok = tg_why(why, whylen, "no value for the model's parameter '%s'", p->name);
      break;
    }
    tg_type ft;
    tg_file_type(g, &p->type, &ft);
    const float *data = values[k];
    if (!tg_type_same_shape(&ft, &p->type)) {
      cropped[k] = tg_xcalloc((size_t)tg_type_numel(&ft), sizeof(float));
      tg_copy_box(values[k], &p->type, cropped[k], &ft);
      data = cropped[k];
    }
    size_t len = strlen(TG_HF_PREFIX) + strlen(p->name) + 1;
    hf_names[k] = tg_xmalloc(len);
    snprintf(hf_names[k], len, TG_HF_PREFIX "%s", p->name);
    tg_st_tensor *t = &ts[n++];
    t->name = hf_names[k];
    t->dtype = TG_F32;
    t->rank = ft.rank;
    for (int d = 0; d < ft.rank; d++) t->shape[d] = ft.dim[d].size;
    t->data = data;
    t->nbytes = (size_t)tg_type_numel(&ft) * sizeof(float);
  }
  size_t dl = strlen(dir) + 32;
  char *wpath = tg_xmalloc(dl), *cpath = tg_xmalloc(dl);
  snprintf(wpath, dl, "%s/model.safetensors", dir);
  snprintf(cpath, dl, "%s/config.json", dir);
  /* "format": "pt" and nothing of tg's: the file is Hugging Face's format */
  tg_st_meta meta[1] = {{"format", "pt"}};
  if (ok) ok = tg_st_write(wpath, ts, n, meta, 1, why, whylen);
  if (ok) {
    char *json = tg_hf_config_json((int64_t)c[0], (int64_t)c[1], (int64_t)c[2], (int64_t)c[3], (int64_t)c[4], eot);
    ok = tg_write_file_atomic(cpath, json, strlen(json), why, whylen);
    free(json);
  }
  for (int k = 0; k < g->n_nodes; k++) {
    free(cropped[k]);
    free(hf_names[k]);
  }
  free(cropped);
  free(hf_names);
  free(ts);
  free(wpath);
  free(cpath);
  return ok;
}
