#!/usr/bin/env bash
# run_zero.sh TGC SRCDIR: tgc's --ranks and --zero (ZeRO's per-rank memory
# plan, docs/parallel.md), end to end.
#
# Checks that --report memplan is unchanged byte for byte without them and
# is followed by the per-rank summary with them; that one rank runs as
# stage 0 with a note; and that a bad stage, a bad rank count, or the
# options where there is no training step to plan exit 2 with a message
# naming what was wrong, before any compiling.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgc=$(abspath "$1")
cd "$src"
small=(models/gpt2.tg -D n_layer=2 -D n_embd=64 -D n_head=4 -D B=2 -D T=64)

# the summary follows memplan's own report, which stays as it was
expect_status 0 "$tgc" "${small[@]}" --report memplan
cp "$tmp/out" "$tmp/plain"
if grep -q '^zero:' "$tmp/plain"; then bad "--report memplan alone prints the per-rank summary"; else ok; fi
expect_status 0 "$tgc" "${small[@]}" --report memplan --ranks 8 --zero 2
contains "$tmp/out" "zero: stage 2 on 8 ranks:"
for row in "parameters, f32 master" "gradients (f32 accumulators)" "optimizer state (AdamW m, v)" \
           "activations (memplan, within the step)" "peak"; do
  contains "$tmp/out" "$row"
done
grep -v '^zero:' "$tmp/out" > "$tmp/without"
if cmp -s "$tmp/without" "$tmp/plain"; then ok; else bad "--ranks/--zero changed memplan's own report"; fi
# stage 3 names the layers it keeps gathered
expect_status 0 "$tgc" "${small[@]}" --precision bf16 --report memplan --ranks 4 --zero 3
contains "$tmp/out" "parameters, gathered ("
# where tgrun holds more than the plan (the f32 master at bf16, stages 1
# and 2) or does not run the stage (3), the report says so
expect_status 0 "$tgc" "${small[@]}" --precision bf16 --report memplan --ranks 4 --zero 2
contains "$tmp/out" "zero: tgrun today keeps the f32 master weights whole at stages 1 and 2"
expect_status 0 "$tgc" "${small[@]}" --precision bf16 --report memplan --ranks 4 --zero 3
contains "$tmp/out" "zero: tgrun does not run stage 3 yet"
# --ranks alone: stage 0 per rank
expect_status 0 "$tgc" "${small[@]}" --report memplan --ranks 4
contains "$tmp/out" "zero: stage 0 on 4 ranks: nothing sharded"

# one rank: stage 0, with a note on stderr
"$tgc" "${small[@]}" --report memplan --zero 2 --ranks 1 > "$tmp/out" 2> "$tmp/err"
if [ $? -eq 0 ]; then ok; else bad "--zero 2 --ranks 1 failed"; cat "$tmp/err"; fi
contains "$tmp/err" "tgc: note: --zero 2 with --ranks 1: one rank has nothing to shard; planning stage 0"
contains "$tmp/out" "zero: stage 0 on 1 rank:"

# bad input: exit 2 with what was wrong
expect_status 2 "$tgc" "${small[@]}" --report memplan --ranks 8 --zero 4
contains "$tmp/out" "tgc: error: --zero 4: the ZeRO stages are 0 (plain data parallelism), 1 (optimizer state sharded), 2 (and gradients), 3 (and parameters)"
expect_status 2 "$tgc" "${small[@]}" --report memplan --zero two
contains "$tmp/out" "tgc: error: --zero two: the ZeRO stages are"
expect_status 2 "$tgc" "${small[@]}" --report memplan --zero -1
contains "$tmp/out" "tgc: error: --zero -1: the ZeRO stages are"
expect_status 2 "$tgc" "${small[@]}" --report memplan --ranks 0 --zero 1
contains "$tmp/out" "tgc: error: --ranks 0: expected a whole number of ranks from 1 to 65536"
expect_status 2 "$tgc" "${small[@]}" --report memplan --ranks 8x
contains "$tmp/out" "tgc: error: --ranks 8x: expected a whole number of ranks"
expect_status 2 "$tgc" "${small[@]}" --report memplan --zero
contains "$tmp/out" "tgc: error: --zero (a ZeRO stage: 0, 1, 2 or 3) needs a number"
expect_status 2 "$tgc" "${small[@]}" --ranks 8 --zero 1
contains "$tmp/out" "tgc: error: --ranks and --zero are for --report memplan"
expect_status 2 "$tgc" "${small[@]}" --decode --report memplan --ranks 8 --zero 1
contains "$tmp/out" "tgc: error: --ranks and --zero plan a training step; --decode has no gradient or optimizer"
# a misspelling is caught like any other option's
expect_status 2 "$tgc" "${small[@]}" --report memplan --zeros 1
contains "$tmp/out" "did you mean '--zero'?"
# --help documents both
expect_status 0 "$tgc" --help
contains "$tmp/out" "--ranks N"
contains "$tmp/out" "--zero S"

finish
