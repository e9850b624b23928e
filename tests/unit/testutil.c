/* testutil.c: helpers for the Check unit tests (see testutil.h). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

typedef struct memerr {
  char *buf;
  size_t len;
} memerr;

/* One buffer per context; tests make few contexts, so a small table does. */
enum { MAX_CTX = 64 };
static struct {
  tg_ctx *ctx;
  memerr m;
} table[MAX_CTX];

const char *tu_path(const char *rel) {
  static char buf[8][4096];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 4096, "%s/%s", TG_SOURCE_DIR, rel);
  return p;
}

tg_ctx *tu_ctx(void) {
  for (int i = 0; i < MAX_CTX; i++)
    if (!table[i].ctx) {
      FILE *f = open_memstream(&table[i].m.buf, &table[i].m.len);
      table[i].ctx = tg_ctx_new(f);
      return table[i].ctx;
    }
  ck_abort_msg("too many test contexts");
  return NULL;
}

const char *tu_errors(tg_ctx *ctx) {
  for (int i = 0; i < MAX_CTX; i++)
    if (table[i].ctx == ctx) {
      fflush(ctx->err);
      return table[i].m.buf ? table[i].m.buf : "";
    }
  return "";
}

void tu_ctx_free(tg_ctx *ctx) {
  for (int i = 0; i < MAX_CTX; i++)
    if (table[i].ctx == ctx) {
      fclose(ctx->err);
      free(table[i].m.buf);
      table[i].ctx = NULL;
      table[i].m = (memerr){0};
    }
  tg_ctx_free(ctx);
}

char *tu_print_ir(const tg_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  tg_print_ir(f, g);
  fclose(f);
  return buf;
}

int tu_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
