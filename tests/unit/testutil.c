/* testutil.c: helpers for the Check unit tests (see testutil.h). */
#include "testutil.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "frontend.h"

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

const char *tu_data_path(const char *rel) {
  static char buf[4][4096];
  static int k;
  const char *root = getenv("TG_DATA");
  char *p = buf[k++ % 4];
  if (root && *root) snprintf(p, 4096, "%s/%s", root, rel);
  else snprintf(p, 4096, "%s/../shared/data/%s", TG_SOURCE_DIR, rel);
  return p;
}

char *tu_slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f, "cannot open %s (for shared data, set TG_DATA)", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(p);
  ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  p[n] = 0;
  *size = (size_t)n;
  return p;
}

void tu_remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    for (struct dirent *e; (e = readdir(d));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[4096];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      struct stat st;
      if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) tu_remove_tree(sub);
      else unlink(sub);
    }
    closedir(d);
  }
  chmod(path, 0700); /* a test may have made it unwritable */
  rmdir(path);
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

const char *tu_read(const char *rel) {
  static char buf[1 << 16];
  FILE *f = fopen(tu_path(rel), "rb");
  ck_assert_msg(f != NULL, "cannot open %s", rel);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  ck_assert_msg(!ferror(f) && n < sizeof buf - 1, "cannot read all of %s", rel);
  fclose(f);
  buf[n] = 0;
  return buf;
}

tg_graph *tu_compile(tg_ctx *ctx, const char *name, const char *text, int n_defs,
                     const char *const *defs) {
  enum { MAX_DEFS = 16 };
  static tg_define d[MAX_DEFS];
  static char names[MAX_DEFS][64];
  ck_assert_int_le(n_defs, MAX_DEFS);
  for (int i = 0; i < n_defs; i++)
    ck_assert_msg(tg_define_parse(defs[i], &d[i], names[i], sizeof names[i]), "bad -D %s", defs[i]);
  const char *inc[1] = {tu_path("models")};
  tg_compile_opts opts = {d, n_defs, inc, 1};
  jmp_buf bail;
  ctx->bail = &bail;
  if (setjmp(bail)) ck_abort_msg("compiling %s failed: %s", name, tu_errors(ctx));
  tg_graph *g = tg_compile_source(ctx, tg_source_add(ctx, name, text, strlen(text)), &opts);
  ck_assert_msg(tg_verify(ctx, g), "%s does not verify: %s", name, tu_errors(ctx));
  ctx->bail = NULL; /* this frame's jmp_buf dies with it */
  return g;
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

bool tu_mpi_start(int *argc, char ***argv, int ranks, const char *one_rank_env, int *rank, int *size) {
  if (!tg_comm_launched() && tg_comm_available() && !getenv(one_rank_env)) {
    if (getuid() == 0) setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0), setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    char self[4096], np[16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len > 0 ? len : 0] = 0;
    snprintf(np, sizeof np, "%d", ranks);
    char *args[] = {"mpirun", "-np", np, "--oversubscribe", "--bind-to", "none", len > 0 ? self : (*argv)[0], NULL};
    fflush(stdout);
    execvp("mpirun", args);
    printf("%s: no mpirun (%s): one rank only\n", (*argv)[0], len > 0 ? "exec failed" : "no path");
  }
  char why[1024];
  if (!tg_comm_init(argc, argv, rank, size, why, sizeof why)) {
    fprintf(stderr, "%s: %s\n", (*argv)[0], why);
    return false;
  }
  tg_comm_set_timeout(60);
  setenv("CK_FORK", "no", 1);
  return true;
}
