#!/usr/bin/env bash
# baby_shakespeare.sh [STEPS] [THREADS...]: training throughput of tg and
# PyTorch on the same machine, in one run: nanoGPT's baby GPT on
# character-level Tiny Shakespeare (configs/baby_shakespeare_char.cfg, and
# bench/torch_gpt_train.py with the same model, batch and schedule).
#
# For each thread count (default: 1 and the number of cores) it trains STEPS
# steps (default 200) with each and prints both tokens/s and their ratio,
# then the best of each and the ratio of the bests.  Steps before the 6th
# are not timed (start-up, caches), as in the PyTorch script.  Evaluation
# and samples are off: this measures training.  Record results in
# docs/performance.md with the commit (git rev-parse --short HEAD).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
shift || true
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 $(nproc))
data=${TG_DATA:-../shared/data}
work=${BENCH_DIR:-out/bench}
mkdir -p "$work"
tgrun=build/tgrun
[ -x $tgrun ] || { echo "build tg first: cmake -S . -B build && cmake --build build" >&2; exit 1; }
[ -s "$work/data/train.bin" ] || $tgrun prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$work/data" > /dev/null

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; tg $(git rev-parse --short HEAD 2> /dev/null || echo '?')"
echo "model: 4 layers, 4 heads, n_embd 128, block 64, batch 12 (768 tokens a step); $steps steps, timed from the 6th"
best_tg=0 best_torch=0
for t in "${threads[@]}"; do
  rm -rf "$work/run"
  $tgrun configs/baby_shakespeare_char.cfg data_dir="$work/data" out_dir="$work/run" max_steps="$steps" \
    warmup_steps=$((steps < 100 ? steps / 2 : 100)) lr_decay_steps="$steps" eval_interval=0 eval_batches=1 \
    sample_tokens=0 checkpoint_interval=0 log_interval="$steps" threads="$t" > "$work/tg.log"
  tg=$(/usr/bin/python3 - "$work/run/metrics.jsonl" << 'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "dt_ms" in r and r["step"] > 5]
print("%.0f" % (sum(768 for r in rows) / (sum(r["dt_ms"] for r in rows) / 1e3)))
PY
)
  torch=$(/usr/bin/python3 bench/torch_gpt_train.py --steps "$steps" --threads "$t" --json 2> /dev/null |
    /usr/bin/python3 -c "import json, sys; print('%.0f' % json.loads(sys.stdin.read().strip().splitlines()[-1])['tokens_per_s'])")
  printf "threads %-2s  tg %8s tok/s   torch %8s tok/s   tg/torch %.2f\n" "$t" "$tg" "$torch" \
    "$(/usr/bin/python3 -c "print($tg / $torch)")"
  [ "$tg" -gt "$best_tg" ] && best_tg=$tg
  [ "$torch" -gt "$best_torch" ] && best_torch=$torch
done
printf "best        tg %8s tok/s   torch %8s tok/s   tg/torch %.2f\n" "$best_tg" "$best_torch" \
  "$(/usr/bin/python3 -c "print($best_tg / $best_torch)")"
