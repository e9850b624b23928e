#!/usr/bin/env bash
# cpu_profile.sh [STEPS] [THREADS]: where tg's CPU step goes, by perf.
#
# Trains baby Shakespeare (configs/baby_shakespeare_char.cfg) STEPS steps
# (default 60) with THREADS threads (default 1) once to fill the kernel
# cache, then again under `perf record`, and prints the samples sorted by
# what they are (bench/cpu_profile.py) and the median step time.  Needs
# perf (Debian: linux-perf).  Shares are of tg's own cycles: a busy
# machine moves them less than it moves the times.  Record results in
# docs/performance.md with the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60}
threads=${2:-1}
data=${TG_DATA:-../shared/data}
work=${BENCH_DIR:-out/bench}/profile
command -v perf > /dev/null || { echo "cpu_profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
[ -x build/tgrun ] || { echo "build tg first: cmake -S . -B build && cmake --build build" >&2; exit 1; }
mkdir -p "$work"
[ -s "$work/data/train.bin" ] || build/tgrun prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$work/data" > /dev/null
train() {
  rm -rf "$work/run"
  "$@" build/tgrun configs/baby_shakespeare_char.cfg data_dir="$work/data" out_dir="$work/run" max_steps="$steps" \
    warmup_steps=5 lr_decay_steps="$steps" eval_interval=0 eval_batches=1 sample_tokens=0 checkpoint_interval=0 \
    log_interval="$steps" threads="$threads" > "$work/train.log" 2>&1
}
train env
train perf record -q -o "$work/perf.data" --
echo "tg $(git rev-parse --short HEAD 2> /dev/null || echo '?'), baby Shakespeare, $steps steps at $threads thread(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/cpu_profile.py "$work/perf.data"
python3 - "$work/run/metrics.jsonl" << 'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
d = sorted(r["dt_ms"] for r in rows if "dt_ms" in r and r["step"] > 5)
print("median step %.1f ms (steps 6 to %d)" % (d[len(d) // 2], len(d) + 5))
PY
