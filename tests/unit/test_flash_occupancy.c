/* test_flash_occupancy.c: the CUDA flash kernels keep 16 warps resident on
 * an H100 SM at GPT-2's head size, checked with no GPU.
 *
 * NVRTC compiles the kernels codegen/cuda/flash_cuda.c emits for GPT-2's layout
 * (bf16 q, k, v views of one [B, T, 3C] buffer, so the cp.async path) for
 * sm_90 with ptxas's verbose report, which gives each kernel's registers a
 * thread, static shared memory and spill bytes.  From those, the blocks an
 * SM can hold (sm_90: 65536 registers, allocated per warp in units of 256,
 * i.e. a thread's count rounded up to 8; 228 KiB of shared memory with 1 KiB
 * reserved per block; at most 32 blocks and 64 warps):
 *   blocks = min(65536 / (warps * 32 * roundup(regs, 8)),
 *                228 KiB / (smem + 1 KiB), 32, 64 / warps)
 * D = 64 must give blocks * 4 warps >= 16 with no spills (issue 14's
 * bar; __launch_bounds__(128, 4) caps registers at 128).  D = 128 is
 * printed, and must not spill: its kernels trade occupancy for unspilled
 * accumulators (the dk/dv kernel alone holds 128 f32 of them a thread). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "flash_cuda.h"
#include "flash_ref.h"
#include "nvrtc.h"

static char dir[64];

static void setup(void) {
  strcpy(dir, "/tmp/tg_flash_occ_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  setenv("TG_CACHE", dir, 1);
}

static void teardown(void) { tu_remove_tree(dir); }

typedef struct usage {
  int regs, smem, spill_stores, spill_loads;
  bool found;
} usage;

/* The ptxas lines about kernel `name` in log. */
static usage usage_of(const char *log, const char *name) {
  usage u = {0};
  char key[200];
  snprintf(key, sizeof key, "Compiling entry function '%s'", name);
  const char *p = strstr(log, key);
  if (!p) return u;
  const char *next = strstr(p + 1, "Compiling entry function");
  const char *sp = strstr(p, "bytes spill stores"), *used = strstr(p, "Used ");
  if (!used || (next && used > next)) return u;
  u.regs = atoi(used + 5);
  const char *sm = strstr(used, "bytes smem");
  if (sm) {
    const char *q = sm;
    while (q > used && q[-1] == ' ') q--;
    while (q > used && q[-1] >= '0' && q[-1] <= '9') q--;
    u.smem = atoi(q);
  }
  if (sp && (!next || sp < next)) {
    const char *q = sp;
    while (q > p && q[-1] == ' ') q--;
    while (q > p && q[-1] >= '0' && q[-1] <= '9') q--;
    u.spill_stores = atoi(q);
    const char *sl = strstr(sp, "bytes spill stores, ");
    if (sl) u.spill_loads = atoi(sl + strlen("bytes spill stores, "));
  }
  u.found = true;
  return u;
}

static int min_int(int a, int b) { return a < b ? a : b; }

/* Resident blocks on an sm_90 SM. */
static int blocks_per_sm(const usage *u, int threads) {
  int warps = (threads + 31) / 32;
  int regs = (u->regs + 7) / 8 * 8;
  int by_regs = regs ? 65536 / (warps * 32 * regs) : 32;
  int by_smem = 228 * 1024 / (u->smem + 1024);
  return min_int(min_int(by_regs, by_smem), min_int(32, 64 / warps));
}

static void check_head_size(int64_t D, int min_warps) {
  tg_flash_shape s = gpt2_shape(16, 12, 1024, D, 1.0 / 8, true);
  char *src = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&src, &len);
  ck_assert_ptr_nonnull(f);
  tg_flash_emit_cuda(f, "occ_fwd", &s, false);
  tg_flash_emit_cuda_kernels(f, "occ_bwd", &s, true);
  fclose(f);
  const char *opts[] = {"--ptxas-options=-v"};
  tg_cubin cubin = {0};
  char err[8192];
  ck_assert_msg(tg_nvrtc_compile(src, "flash_occupancy.cu", "sm_90", opts, 1, &cubin, err, sizeof err), "%s", err);
  tg_flash_launch fl[TG_FLASH_MAX_LAUNCHES], bl[TG_FLASH_MAX_LAUNCHES];
  ck_assert_int_eq(tg_flash_cuda_launches(&s, "occ_fwd", false, fl), 1);
  ck_assert_int_eq(tg_flash_cuda_launches(&s, "occ_bwd", true, bl), 2);
  const tg_flash_launch *all[3] = {&fl[0], &bl[0], &bl[1]};
  for (int i = 0; i < 3; i++) {
    usage u = usage_of(cubin.log, all[i]->name);
    ck_assert_msg(u.found, "no ptxas report for %s in:\n%s", all[i]->name, cubin.log);
    int threads = (int)(all[i]->block[0] * all[i]->block[1] * all[i]->block[2]);
    int blocks = blocks_per_sm(&u, threads), warps = blocks * threads / 32;
    printf("flash occupancy sm_90 D=%d %-16s %3d registers x %d threads, %6d B shared, spills %d/%d B: "
           "%d blocks, %d warps an SM\n",
           (int)D, all[i]->name, u.regs, threads, u.smem + (int)all[i]->shmem, u.spill_stores, u.spill_loads, blocks,
           warps);
    ck_assert_msg(u.spill_stores == 0 && u.spill_loads == 0, "%s spills %d/%d bytes", all[i]->name, u.spill_stores,
                  u.spill_loads);
    ck_assert_msg(warps >= min_warps, "%s: %d warps an SM (want >= %d)", all[i]->name, warps, min_warps);
  }
  tg_cubin_free(&cubin);
  free(src);
}

START_TEST(test_gpt2_head_size_16_warps) { check_head_size(64, 16); }
END_TEST

START_TEST(test_larger_heads_do_not_spill) { check_head_size(128, 4); }
END_TEST

int main(void) {
  Suite *s = suite_create("flash_occupancy");
  TCase *t = tcase_create("sm_90");
  tcase_set_timeout(t, 300);
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_gpt2_head_size_16_warps);
  tcase_add_test(t, test_larger_heads_do_not_spill);
  suite_add_tcase(s, t);
  return tu_run(s);
}
