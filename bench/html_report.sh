#!/usr/bin/env bash
# bench/html_report.sh: what tgc --report html costs on top of --emit cuda.
#
#   bench/html_report.sh [BUILD_DIR] [RUNS]      (defaults: build, 7)
#
# GPT-2 124M's training step (models/gpt2.tg, bf16): `tgc --grad --emit cuda
# -o DIR` (the .cu, manifest.json, fusion.txt) against `tgc --report html -o
# DIR` (the same files and index.html: the step's traffic counted, the step
# drawn by Graphviz's dot, which tgc runs beside its own work, and the page
# written), and that again with no dot on PATH (the page's own layout).  The two run in turns, RUNS times each, and the median wall
# time of each is compared: the page should cost at most 10% (issue 28).
# The build machines are shared: wall time swings with their load, so the
# CPU time (user + system) is compared too, and the least of each printed.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
runs=${2:-7}
tgc=$build/tgc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"

secs() { # secs CMD...: runs CMD, prints its wall seconds and its CPU seconds (user + system)
  /usr/bin/time -f '%e %U %S' -o "$tmp/time" "$@" > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  awk '{ printf "%s %.2f\n", $1, $2 + $3 }' "$tmp/time"
}

: > "$tmp/emit"
: > "$tmp/html"
: > "$tmp/nodot"
for _ in $(seq "$runs"); do
  secs "$tgc" models/gpt2.tg --grad --emit cuda -o "$tmp/emit_dir" >> "$tmp/emit"
  secs "$tgc" models/gpt2.tg --report html -o "$tmp/html_dir" >> "$tmp/html"
  # without Graphviz (dot not on PATH): the page's own layout only
  secs env PATH=/nonexistent "$tgc" models/gpt2.tg --report html -o "$tmp/nodot_dir" >> "$tmp/nodot"
done
# the median and the least of column c
stats() { sort -n -k "$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { printf "%.3f %.3f\n", v[int((NR + 1) / 2)], v[1] }'; }
read -r emit_wall emit_wall_min < <(stats "$tmp/emit" 1)
read -r html_wall html_wall_min < <(stats "$tmp/html" 1)
read -r emit_cpu emit_cpu_min < <(stats "$tmp/emit" 2)
read -r html_cpu html_cpu_min < <(stats "$tmp/html" 2)
read -r nodot_wall nodot_wall_min < <(stats "$tmp/nodot" 1)
read -r nodot_cpu nodot_cpu_min < <(stats "$tmp/nodot" 2)
size=$(stat -c %s "$tmp/html_dir/index.html")
echo "html_report: GPT-2 124M, $runs runs each in turns; seconds, median (least)"
printf '  %-34s wall %s (%s)  cpu %s (%s)\n' "tgc --grad --emit cuda -o DIR" "$emit_wall" "$emit_wall_min" "$emit_cpu" "$emit_cpu_min"
printf '  %-34s wall %s (%s)  cpu %s (%s)  index.html %s bytes\n' "tgc --report html -o DIR" "$html_wall" "$html_wall_min" \
  "$html_cpu" "$html_cpu_min" "$size"
printf '  %-34s wall %s (%s)  cpu %s (%s)\n' "... without Graphviz's dot" "$nodot_wall" "$nodot_wall_min" "$nodot_cpu" "$nodot_cpu_min"
# CPU seconds are counted in hundredths: their sums over all runs compare finer
emit_sum=$(awk '{ s += $2 } END { print s }' "$tmp/emit")
html_sum=$(awk '{ s += $2 } END { print s }' "$tmp/html")
nodot_sum=$(awk '{ s += $2 } END { print s }' "$tmp/nodot")
awk -v a="$emit_wall" -v b="$html_wall" -v c="$emit_cpu" -v d="$html_cpu" -v e="$emit_sum" -v f="$html_sum" \
  'BEGIN { printf "  the page costs %+.1f%% wall, %+.1f%% cpu (medians), %+.1f%% cpu (all runs: %.2f s against %.2f s) of --emit cuda (issue 28: at most 10%%)\n",
           100 * (b / a - 1), 100 * (d / c - 1), 100 * (f / e - 1), f, e }'
awk -v a="$emit_wall" -v b="$nodot_wall" -v c="$emit_cpu" -v d="$nodot_cpu" -v e="$emit_sum" -v f="$nodot_sum" \
  'BEGIN { printf "  without dot:   %+.1f%% wall, %+.1f%% cpu (medians), %+.1f%% cpu (all runs: %.2f s)\n",
           100 * (b / a - 1), 100 * (d / c - 1), 100 * (f / e - 1), f }'
