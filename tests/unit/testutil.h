/* testutil.h: small helpers shared by the Check unit tests. */
#ifndef TG_TESTUTIL_H
#define TG_TESTUTIL_H

#include <check.h>

#include "ir.h"

/* A check for loops of many draws: ck_assert reports every check that
 * passes to the runner with a write(), which there would cost more than
 * the code under test. */
#define REQUIRE(cond, ...) \
  do { \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* Path of a file in the source tree: tu_path("models/gpt2.tg"). */
const char *tu_path(const char *rel);

/* A context whose diagnostics go to a memory buffer, read with tu_errors. */
tg_ctx *tu_ctx(void);
const char *tu_errors(tg_ctx *ctx); /* everything reported so far */
void tu_ctx_free(tg_ctx *ctx);

/* A source file's text, e.g. tu_read("models/gpt2.tg") (a static buffer:
 * the next call overwrites it). */
const char *tu_read(const char *rel);

/* Compiles .tg text (shown as `name` in messages) with -D overrides such
 * as "n_layer=2" and models/ as the import path, and verifies it; ends the
 * test with the errors if that fails.  Leaves ctx->bail unset. */
tg_graph *tu_compile(tg_ctx *ctx, const char *name, const char *text, int n_defs,
                     const char *const *defs);

/* Prints g's IR text into a malloc'ed string. */
char *tu_print_ir(const tg_graph *g);

/* A file of the shared data ($TG_DATA, else ../shared/data beside the
 * source tree): tu_data_path("tinyshakespeare/input.txt"). */
const char *tu_data_path(const char *rel);

/* A whole file, malloc'ed and NUL-terminated, with its size; ends the test
 * if it cannot be read. */
char *tu_slurp(const char *path, size_t *size);

/* Removes a directory and everything in it (a test's temp dir). */
void tu_remove_tree(const char *path);

/* For a test over MPI ranks: started alone (as ctest starts it), runs this
 * executable again under `mpirun -np ranks --oversubscribe` and does not
 * return; returns (to run on one rank) where this process is an MPI rank
 * already, this build has no MPI, the environment variable one_rank_env is
 * set (the sanitizer build: LeakSanitizer reads Open MPI's allocations as
 * leaks), or there is no mpirun.  Then initialises runtime/comm with a 60 s
 * timeout and CK_FORK=no (a forked child would share the rank's MPI
 * connections), giving this rank and the number of ranks; false with a
 * message on stderr if that fails. */
bool tu_mpi_start(int *argc, char ***argv, int ranks, const char *one_rank_env, int *rank, int *size);

/* Runs a Check suite and returns the process exit status. */
int tu_run(Suite *s);

#endif
