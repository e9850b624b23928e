#!/usr/bin/env bash
# run_zero.sh TGC SRCDIR: tgc's --ranks and --zero (ZeRO's per-rank memory
# plan and a step's collectives, docs/parallel.md), end to end.
#
# Checks that --report memplan is unchanged byte for byte without them and
# is followed by the per-rank summary with them; that one rank runs as
# stage 0 with a note; and that a bad stage, a bad rank count, or the
# options where there is no training step to plan exit 2 with a message
# naming what was wrong, before any compiling.  Then --report schedule:
# its bucket lines unchanged, followed by a collective line for every
# bucket at every stage, and totals where stages 1 and 2 send what stage 0
# sends and stage 3 about 1.5 times as much (tests/unit/test_zero_plan.c
# checks the same numbers through the C interface, and more).
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
# where tgrun holds other than the plan (3: per weight, not per layer), the report says so
expect_status 0 "$tgc" "${small[@]}" --precision bf16 --report memplan --ranks 4 --zero 3
contains "$tmp/out" "zero: tgrun gathers each weight, not each layer"
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
# --zero 3 without a report: the sharded gradient graph itself
expect_status 0 "$tgc" "${small[@]}" --grad --zero 3 --ranks 4 --emit ir
contains "$tmp/out" '"shard:h.0.mlp.c_fc.weight"'
contains "$tmp/out" "all_gather"
contains "$tmp/out" "reduce_scatter"
expect_status 2 "$tgc" "${small[@]}" --decode --report memplan --ranks 8 --zero 1
contains "$tmp/out" "tgc: error: --ranks and --zero plan a training step; --decode has no gradient or optimizer"
# --report schedule: the buckets as they were, then the collectives
expect_status 0 "$tgc" "${small[@]}" --report schedule
cp "$tmp/out" "$tmp/schedule"
if grep -q '^collective:' "$tmp/schedule"; then bad "--report schedule alone prints collectives"; else ok; fi
buckets=$(grep -c '^schedule: bucket ' "$tmp/schedule")
if [ "$buckets" -gt 1 ]; then ok; else bad "expected several buckets, got $buckets"; fi
# total_of FILE: the bytes a rank sends per step, from the totals line
total_of() { sed -n 's/^collective: total per step per rank: \([0-9]*\) bytes sent (stage 0: \([0-9]*\);.*/\1 \2/p' "$1"; }
for ranks in 2 8; do
  for stage in 0 1 2 3; do
    expect_status 0 "$tgc" "${small[@]}" --report schedule --ranks "$ranks" --zero "$stage"
    cp "$tmp/out" "$tmp/coll-$stage"
    grep -v '^collective:' "$tmp/out" > "$tmp/without"
    if cmp -s "$tmp/without" "$tmp/schedule"; then ok; else bad "--ranks/--zero changed the schedule's own lines"; fi
    contains "$tmp/out" "collective: stage $stage on $ranks ranks:"
    if [ "$stage" -eq 0 ]; then kind=all_reduce; else kind=reduce_scatter; fi
    for ((b = 0; b < buckets; b++)); do
      n=$(grep -c "^collective: $kind bucket $b: " "$tmp/out")
      if [ "$n" -eq 1 ]; then ok; else bad "stage $stage on $ranks ranks: $n $kind lines for bucket $b"; fi
    done
    read -r sent ddp < <(total_of "$tmp/out")
    if [ -n "$sent" ] && [ "$sent" -gt 0 ]; then ok; else bad "stage $stage on $ranks ranks: no totals line"; fi
    case $stage in
      0) if [ "$sent" = "$ddp" ]; then ok; else bad "stage 0's total $sent is not its own $ddp"; fi ;;
      1|2) # a reduce-scatter and an all-gather are an all-reduce cut in two
        if [ "$sent" = "$ddp" ]; then ok; else bad "stage $stage on $ranks ranks sends $sent bytes, stage 0 $ddp"; fi
        contains "$tmp/out" "collective: all_gather parameters: " ;;
      3) # the weights gathered for the forward and again for the backward:
         # 3 passes over the parameters where stage 0 makes 2 (the ZeRO paper's 1.5x)
        if awk -v a="$sent" -v b="$ddp" 'BEGIN { r = a / b; exit !(r >= 1.4 && r <= 1.6) }'; then ok
        else bad "stage 3 on $ranks ranks sends $sent bytes, stage 0 $ddp: not about 1.5 times"; fi
        contains "$tmp/out" "collective: all_gather layer h.1 for the forward:"
        contains "$tmp/out" "collective: all_gather layer h.1 for the backward:"
        # then the collectives of the sharded graph tgrun runs: the same
        # three passes over the parameters, read off its kernels
        contains "$tmp/out" "collective: stage 3 on $ranks ranks as tgrun runs it"
        contains "$tmp/out" "collective: all_gather h.1.mlp.c_fc.weight for the forward:"
        contains "$tmp/out" "collective: all_gather h.1.mlp.c_fc.weight for the backward:"
        contains "$tmp/out" "collective: reduce_scatter gradient of h.1.mlp.c_fc.weight:"
        read -r placed pddp < <(total_of "$tmp/out" | tail -1)
        if [ "$pddp" = "$ddp" ] && awk -v a="$placed" -v b="$pddp" 'BEGIN { r = a / b; exit !(r >= 1.4 && r <= 1.6) }'
        then ok; else bad "stage 3 as placed on $ranks ranks sends $placed bytes, stage 0 $pddp: not about 1.5 times"; fi ;;
    esac
  done
done
expect_status 2 "$tgc" "${small[@]}" --report schedule --ranks 8 --zero 5
contains "$tmp/out" "tgc: error: --zero 5: the ZeRO stages are 0 (plain data parallelism)"
expect_status 2 "$tgc" "${small[@]}" --report schedule --ranks 0 --zero 2
contains "$tmp/out" "tgc: error: --ranks 0: expected a whole number of ranks from 1 to 65536"
expect_status 2 "$tgc" "${small[@]}" --report fusion --ranks 8 --zero 1
contains "$tmp/out" "tgc: error: --ranks and --zero are for --report memplan (the memory plan per rank) and --report schedule"

# a misspelling is caught like any other option's
expect_status 2 "$tgc" "${small[@]}" --report memplan --zeros 1
contains "$tmp/out" "did you mean '--zero'?"
# --help documents both
expect_status 0 "$tgc" --help
contains "$tmp/out" "--ranks N"
contains "$tmp/out" "--zero S"

finish
