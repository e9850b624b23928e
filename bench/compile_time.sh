#!/usr/bin/env bash
# bench/compile_time.sh: how long tg takes from a .tg file to loaded code.
#
#   bench/compile_time.sh [BUILD_DIR]        (default: build)
#
# Two measurements, each cold (an empty kernel cache: a fresh $TG_CACHE) and
# warm (the same cache again):
#   1. GPT-2 124M's training step (bf16, B=16) for sm_90: tgc --emit cubin
#      parses, runs the passes, lowers and renders the CUDA, and compiles every
#      distinct kernel with NVRTC (no GPU needed), one job per core;
#   2. the baby Shakespeare run's four C graphs (configs/baby_shakespeare_char.cfg
#      on the CPU backend): tgrun builds them (cc, one per core) and prints its
#      "compile:" line; the run is cut to one step.
# Prints a table; the figures go to docs/performance.md with the commit and
# the machine (and its load: the build machines are shared).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
tgc=$build/tgc
tgrun=$build/tgrun
data=${TG_DATA:-$src/../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"

secs() { # secs CMD...: runs CMD (output to $tmp/out), prints its wall seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}

# 1. GPT-2's step, cold then warm
gpt2=(models/gpt2.tg -D B=16 --precision bf16 --emit cubin --arch sm_90 -o "$tmp/cubin")
g_cold=$(TG_CACHE=$tmp/cache_gpt2 secs "$tgc" "${gpt2[@]}")
g_cold_line=$(grep '^compiled' "$tmp/out")
g_launch=$(sed -n 's/^wrote .*(\([0-9]*\) launches, \([0-9]*\) kernels).*/\1 launches, \2 kernels/p' "$tmp/out")
g_warm=$(TG_CACHE=$tmp/cache_gpt2 secs "$tgc" "${gpt2[@]}")
g_warm_line=$(grep '^compiled' "$tmp/out")

# 2. the baby Shakespeare run's C graphs, cold then warm
"$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$tmp/data" > /dev/null
run=(configs/baby_shakespeare_char.cfg data_dir="$tmp/data" max_steps=1 warmup_steps=0 lr_decay_steps=1
     eval_interval=0 sample_interval=0 checkpoint_interval=0)
TG_CACHE=$tmp/cache_c secs "$tgrun" "${run[@]}" out_dir="$tmp/run1" > /dev/null
c_cold=$(grep '^compile:' "$tmp/out")
TG_CACHE=$tmp/cache_c secs "$tgrun" "${run[@]}" out_dir="$tmp/run2" > /dev/null
c_warm=$(grep '^compile:' "$tmp/out")

echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit:  $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
printf '%-44s %8s  %s\n' "what" "wall s" "tg's own line"
printf '%-44s %8s  %s\n' "GPT-2 124M step, sm_90, cold (tgc, total)" "$g_cold" "$g_cold_line"
printf '%-44s %8s  %s\n' "GPT-2 124M step, sm_90, warm (tgc, total)" "$g_warm" "$g_warm_line"
printf '%-44s %8s  %s\n' "  ($g_launch)" "" ""
printf '%-44s %8s  %s\n' "baby Shakespeare C graphs, cold (tgrun)" "" "$c_cold"
printf '%-44s %8s  %s\n' "baby Shakespeare C graphs, warm (tgrun)" "" "$c_warm"
