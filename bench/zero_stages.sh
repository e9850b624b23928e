#!/usr/bin/env bash
# bench/zero_stages.sh: the step time of ZeRO's stages 0, 1, 2 and 3 side
# by side, on 2 ranks of the CPU backend, in one run.
#
#   bench/zero_stages.sh [BUILD_DIR] [STEPS]      (defaults: build, 60)
#
# The model is the baby Shakespeare run's (configs/baby_shakespeare_char.cfg:
# 4 layers, 128 wide, 0.81M parameters) at 6 sequences a rank (the config's
# 12 split over 2 ranks), each rank with half the cores' threads.  Each stage trains STEPS steps twice, the stages
# interleaved (0 1 2 3 0 1 2 3), so that the machine's load drifts over all
# of them alike; a stage's time is the median of its steps' dt_ms after the
# first five (warm-up), over both of its runs.  Prints each stage's median
# step time, its ratio to stage 0's, and the bytes of gradients and
# optimizer state a rank keeps (tgc --report memplan --ranks 2 --zero S).
# The figures go to docs/performance.md with the commit and the machine.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
steps=${2:-60}
tgrun=$build/tgrun
tgc=$build/tgc
data=${TG_DATA:-$src/../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TG_CACHE=$tmp/cache
cd "$src"

"$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$tmp/data" > /dev/null
# each rank its share of the cores, as tgrun's default now gives it (set
# here so that the table says what it measured): a thread per core in
# every rank, tgrun's old default, oversubscribes them, and then every
# blocking collective waits on ranks whose threads spin (measured: stage 3
# at 5.3 times stage 0 so, 1.4 times with a thread a rank)
threads=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
run=(configs/baby_shakespeare_char.cfg data_dir="$tmp/data" batch_size=6 max_steps="$steps" warmup_steps=0 lr_decay_steps="$steps"
     eval_interval=0 sample_interval=0 checkpoint_interval=0 threads="$threads")
for round in 1 2; do
  for stage in 0 1 2 3; do
    echo "round $round, zero $stage: $steps steps on 2 ranks" >&2
    "$tgrun" --nproc 2 "${run[@]}" zero="$stage" out_dir="$tmp/z$stage-$round" > "$tmp/log$stage-$round" 2>&1 ||
      { cat "$tmp/log$stage-$round" >&2; exit 1; }
  done
done

# a rank's gradients and optimizer state at each stage, as tgc plans them
# (the baby model: vocab 65, padded to 128 as tgrun pads it)
plan() {
  "$tgc" models/gpt2.tg -D n_layer=4 -D n_head=4 -D n_embd=128 -D block_size=64 -D vocab=65 -D B=6 -D T=64 \
    --report memplan --ranks 2 --zero "$1" |
    awk '/^zero: +gradients/ { g = $(NF-3) " " $(NF-2) } /^zero: +optimizer state/ { o = $(NF-3) " " $(NF-2) }
         END { printf "gradients %s, AdamW m, v %s", g, o }'
}

/usr/bin/env python3 - "$tmp" "$steps" "$(plan 0)" "$(plan 1)" "$(plan 2)" "$(plan 3)" "$threads" <<'PY'
import json, statistics, sys
tmp, steps = sys.argv[1], int(sys.argv[2])
plans = sys.argv[3:7]
med = {}
for stage in (0, 1, 2, 3):
    dts = []
    for rnd in (1, 2):
        rows = [json.loads(l) for l in open(f"{tmp}/z{stage}-{rnd}/metrics.jsonl")]
        dts += [r["dt_ms"] for r in rows if "dt_ms" in r and r.get("step", 0) > 5]
    med[stage] = statistics.median(dts)
print("ZeRO stages on 2 ranks (%s threads each), CPU backend, baby Shakespeare GPT (0.81M params), %d steps x 2 runs each" % (sys.argv[7], steps))
print("| stage | median step (ms) | vs stage 0 | a rank's gradients and optimizer state (tgc) |")
print("|---|---|---|---|")
for stage in (0, 1, 2, 3):
    print("| %d | %.2f | %.3f | %s |" % (stage, med[stage], med[stage] / med[0], plans[stage].strip() or "-"))
PY
