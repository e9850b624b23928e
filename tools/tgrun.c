/* tgrun: runs tg models.  main picks the command; each command's options
 * are parsed by its own file (tgrun_cli.h) into the options of the runtime
 * module that does the work. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tgrun_cli.h"

#include "diag.h"

static int usage_error(const char *fmt, const char *arg) { return tg_usage_error("tgrun", fmt, arg); }

static int has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* The most ranks --nproc starts per core of this machine. */
#define TG_RANKS_PER_CORE 4

/* tgrun --nproc N train.cfg ...: runs N ranks of this tgrun under mpirun. */
static int launch_ranks(int argc, char **argv) {
  char *end;
  long n = strtol(argv[2], &end, 10);
  if (*end || n < 1 || n > 4096) return usage_error("--nproc %s: expected a number of ranks from 1 to 4096", argv[2]);
  if (argc < 4) return usage_error("%s", "--nproc N needs a train.cfg after it");
  /* Ranks share the machine's cores: a few per core work (slowly), far
   * more would spend minutes starting and then crawl.  Refused before
   * mpirun starts anything; mpirun or srun run by hand decide for
   * themselves. */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  if (n > TG_RANKS_PER_CORE * cores) {
    fprintf(stderr,
            "tgrun: error: --nproc %ld: this machine has %ld core%s, and more than %d ranks a core (%ld) would take "
            "minutes to start and train far slower than fewer ranks; use --nproc %ld or less (%ld, one a core, runs "
            "fastest), or start the ranks across several machines with mpirun or srun\n",
            n, cores, cores == 1 ? "" : "s", TG_RANKS_PER_CORE, TG_RANKS_PER_CORE * cores, TG_RANKS_PER_CORE * cores,
            cores);
    return 2;
  }
  if (n > cores)
    fprintf(stderr,
            "tgrun: warning: --nproc %ld: more ranks than this machine's %ld core%s; they share cores, so each step "
            "is slower than with --nproc %ld\n",
            n, cores, cores == 1 ? "" : "s", cores);
  if (n == 1) {
    argv[2] = argv[0];
    return tgrun_train_main(argc - 2, argv + 2);
  }
  char **args = calloc((size_t)argc + 8, sizeof *args);
  if (!args) return 1;
  int k = 0;
  args[k++] = "mpirun";
  args[k++] = "-np";
  args[k++] = argv[2];
  /* more ranks than cores is slow but correct: let a small machine test it */
  args[k++] = "--oversubscribe";
  args[k++] = "--bind-to";
  args[k++] = "none";
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) self[len] = 0;
  args[k++] = len > 0 ? self : argv[0];
  for (int i = 3; i < argc; i++) args[k++] = argv[i];
  args[k] = NULL;
  if (getuid() == 0) { /* Open MPI refuses root unless told twice */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  fflush(stdout);
  execvp("mpirun", args);
  fprintf(stderr, "tgrun: error: cannot run mpirun: %s (install openmpi-bin)\n", strerror(errno));
  free(args);
  return 1;
}

int main(int argc, char **argv) {
  /* tgrun [--nproc N] train.cfg ...: the training loop */
  if (argc >= 3 && !strcmp(argv[1], "--nproc")) return launch_ranks(argc, argv);
  if (argc >= 2 && has_suffix(argv[1], ".cfg")) return tgrun_train_main(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "prepare")) return tgrun_prepare_main(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "export")) return tgrun_export_main(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "sample")) return tgrun_sample_main(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "eval")) return tgrun_eval_main(argc - 1, argv + 1);
  return tgrun_check_main(argc, argv);
}
