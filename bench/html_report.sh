#!/usr/bin/env bash
# bench/html_report.sh: what tgc --report html costs on top of --emit cuda.
#
#   bench/html_report.sh [BUILD_DIR] [RUNS]      (defaults: build, 7)
#
# GPT-2 124M's training step (models/gpt2.tg, bf16): `tgc --grad --emit cuda
# -o DIR` (the .cu, manifest.json, fusion.txt) against `tgc --report html -o
# DIR` (the same files and index.html: the step's traffic counted and the
# page written).  The two run in turns, RUNS times each, and the median wall
# time of each is compared: the page should cost at most 10% (issue 28).
# The build machines are shared: a loaded machine shows in the spread, so
# the minimum of each is printed too.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
runs=${2:-7}
tgc=$build/tgc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"

secs() { # secs CMD...: runs CMD, prints its wall seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'
}

: > "$tmp/emit"
: > "$tmp/html"
for _ in $(seq "$runs"); do
  secs "$tgc" models/gpt2.tg --grad --emit cuda -o "$tmp/emit_dir" >> "$tmp/emit"
  secs "$tgc" models/gpt2.tg --report html -o "$tmp/html_dir" >> "$tmp/html"
done
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { printf "%.3f %.3f\n", v[int((NR + 1) / 2)], v[1] }'; }
read -r emit_med emit_min < <(stats "$tmp/emit")
read -r html_med html_min < <(stats "$tmp/html")
size=$(stat -c %s "$tmp/html_dir/index.html")
echo "html_report: GPT-2 124M, $runs runs each, wall seconds (median, min)"
printf '  tgc --grad --emit cuda -o DIR   %s s  (min %s)\n' "$emit_med" "$emit_min"
printf '  tgc --report html -o DIR        %s s  (min %s), index.html %s bytes\n' "$html_med" "$html_min" "$size"
awk -v a="$emit_med" -v b="$html_med" -v c="$emit_min" -v d="$html_min" \
  'BEGIN { printf "  ratio %.3f (median), %.3f (min): the page costs %.1f%% of --emit cuda\n", b / a, d / c, 100 * (b / a - 1) }'
