#!/usr/bin/env bash
# run_gpu_rehearsal.sh SRCDIR: what a GPU session runs, rehearsed here:
# tools/gpu_pack.sh builds the pack (Release, without MPI; into this
# test's own folders), then tools/gpu_check.sh runs through that pack on
# the emulated device (TG_GPU_CHECK_BACKEND=cuda-emu, with small sizes),
# under a deadline that fits CI (TG_GPU_REHEARSAL_DEADLINE, default 300
# s), so that the few minutes a GPU is lent are not spent on a broken pack
# or harness.  (The pack's Release build once failed where the suites'
# builds passed: -O3's maybe-uninitialized under -Werror.)  Checks what
# the GPU run relies on: the pack builds; the check ran the pack's
# binaries; the exit status; every row of the table, in order, none FAIL
# or missing (rows that need what this machine lacks, compute-sanitizer and
# torch.compile on CUDA, say so and pass); each row appended to table.txt as
# it finished (a kill leaves the rows so far) and again in the final table;
# the check within its deadline; and what $OUT holds within the device
# tool's limits on what comes back (at most 8 files, no folders, plain
# names).  One rank (TG_ONE_RANK), as on the GPU machine: the 2-rank run is
# cuda_emu_backend's.
set -u
src=$(cd "$1" && pwd)
# shellcheck source=tests/cli/testlib.sh
. "$src/tests/cli/testlib.sh"
deadline=${TG_GPU_REHEARSAL_DEADLINE:-300}
rows=(device grads steps graphs train memcheck numerics throughput racecheck)
mkdir "$tmp/out"
TG_GPU_PACK_DIR=$tmp/pack TG_GPU_PACK_BUILD=$tmp/build-gpu bash "$src/tools/gpu_pack.sh" > "$tmp/pack.log" 2>&1
rc=$?
cat "$tmp/pack.log"
if [ $rc -eq 0 ] && [ -s "$tmp/pack/tg-gpu.tar.gz" ]; then ok; else bad "gpu_pack.sh exited $rc"; finish; exit; fi
unset TGRUN TGC
TG_GPU_CHECK_BACKEND=cuda-emu TG_GPU_CHECK_DEADLINE=$deadline TG_GPU_PACK=$tmp/pack OUT=$tmp/out \
  bash "$src/tools/gpu_check.sh" > "$tmp/check.log" 2>&1
rc=$?
cat "$tmp/check.log"
if [ $rc -eq 0 ]; then ok; else bad "gpu_check.sh exited $rc"; fi

table=$tmp/out/table.txt
# the rows as they finished: between the first header and the final table
awk '/^== tg GPU checks/ { n++; next } n == 1 && NF' "$table" > "$tmp/live"
awk '/^== tg GPU checks, backend cuda-emu: / { f = 1; next } f && NF' "$table" > "$tmp/final"
for t in live final; do
  got=$(awk '{ printf "%s%s", (NR > 1 ? " " : ""), $1 }' "$tmp/$t")
  if [ "$got" = "${rows[*]}" ]; then ok; else bad "the $t rows are '$got', not '${rows[*]}'"; fi
  if awk '$2 == "FAIL" || $2 == "missing" { bad = 1 } END { exit bad }' "$tmp/$t"; then ok; else
    bad "a $t row failed:"; grep -E '^[a-z0-9-]+ +(FAIL|missing) ' "$tmp/$t"; fi
done
# the pack's binaries ran, not a build's
contains "$tmp/final" "pack of $(git -C "$src" rev-parse HEAD | cut -c1-12)"
# the rows a GPU needs say what ran instead
contains "$tmp/final" "compute-sanitizer needs a GPU"
contains "$tmp/final" "no torch.compile on CUDA here"
# within the deadline (a stage's kill has 10 s of grace)
secs=$(sed -n 's/^== tg GPU checks, backend cuda-emu: .*, \([0-9]*\) s of [0-9]*$/\1/p' "$table")
if [ -n "$secs" ] && [ "$secs" -le $((deadline + 10)) ]; then ok; else bad "the check took '$secs' s of its $deadline"; fi
# what comes back from the device tool
n=$(find "$tmp/out" -mindepth 1 | wc -l)
if [ "$n" -le 8 ] && [ -z "$(find "$tmp/out" -mindepth 1 ! -type f)" ]; then ok; else
  bad "\$OUT holds $n entries (at most 8 plain files come back):"; find "$tmp/out" -mindepth 1; fi
if [ -z "$(find "$tmp/out" -name '*[!A-Za-z0-9._-]*')" ]; then ok; else
  bad "odd names in \$OUT"; fi
echo "\$OUT: $(find "$tmp/out" -mindepth 1 -printf "%f %s bytes; ")"
finish
