#!/usr/bin/env bash
# prepare.sh [SIZE_MB] [THREADS]: `tgrun prepare` on a generated corpus of
# SIZE_MB MB of JSON lines (default 200), against tiktoken (PyPI) encoding
# the same documents, on the same machine: tokens per second per core for
# each, and a check that the token ids are identical.
#
#   1. a virtual environment bench/.venv-prepare (git-ignored) with tiktoken
#      and numpy from PyPI, made on the first run;
#   2. prepare_check.py generate: the corpus, FineWeb's shape, from
#      $TG_DATA/tinyshakespeare/input.txt with web-like noise (seeded), in
#      $BENCH_DIR (default /tmp/tg-bench-prepare; it is not removed, so a
#      second run skips generating);
#   3. tgrun prepare --threads 1, then --threads THREADS (default: every
#      core): wall time of each, 10^8-token shards as llm.c's;
#   4. tiktoken's GPT-2 (built from $TG_DATA/gpt2's two files: no download)
#      with encode_ordinary_batch on 1 and THREADS threads, timing the
#      encoding only (not reading the JSON, which tgrun's time includes);
#   5. prepare_check.py compare: every document's ids in tgrun's shards
#      against [<|endoftext|>] + tiktoken's encode_ordinary(text).
#
# THREADS = 1 measures one thread only (the rows for "THREADS threads"
# repeat it), which halves a long run.  Prints a table; exit 1 if the ids
# differ.  Needs a built tgrun
# (build/tgrun, or $TGRUN).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
size=${1:-200}
threads=${2:-$(nproc)}
data=${TG_DATA:-$src/../shared/data}
tgrun=${TGRUN:-$src/build/tgrun}
dir=${BENCH_DIR:-/tmp/tg-bench-prepare}
venv=$here/.venv-prepare
mkdir -p "$dir"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q tiktoken numpy
fi
py=$venv/bin/python
corpus=$dir/corpus_${size}MB.jsonl
[ -s "$corpus" ] || "$py" "$here/prepare_check.py" generate "$corpus" "$size" "$data/tinyshakespeare/input.txt"

run_tg() { # threads outdir -> seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$tgrun" prepare --tokenizer gpt2 --gpt2-dir "$data/gpt2" --input "$corpus" --out "$2" --name bench \
    --threads "$1" > "$dir/tg_$1.out" 2>&1
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
tg1=$(run_tg 1 "$dir/tg1")
if [ "$threads" = 1 ]; then tgn=$tg1; cp "$dir/tg_1.out" "$dir/tg_n.out"; mkdir -p "$dir/tgn"; cp "$dir/tg1/bench_val_000000.bin" "$dir/tgn/"
else tgn=$(run_tg "$threads" "$dir/tgn"); fi
tokens=$(grep -o 'prepared [0-9,]* documents: [0-9,]* tokens' "$dir/tg_1.out" | sed 's/.*: \([0-9,]*\) tokens/\1/' | tr -d ,)
cmp -s "$dir/tg1/bench_val_000000.bin" "$dir/tgn/bench_val_000000.bin" || { echo "1 and $threads threads differ"; exit 1; }
tk1=$("$py" "$here/prepare_check.py" encode "$corpus" "$data/gpt2" 1)
if [ "$threads" = 1 ]; then tkn=$tk1; else tkn=$("$py" "$here/prepare_check.py" encode "$corpus" "$data/gpt2" "$threads"); fi
check=$("$py" "$here/prepare_check.py" compare "$corpus" "$data/gpt2" "$dir/tg1") || { echo "$check"; exit 1; }

"$py" - "$size" "$tokens" "$tg1" "$tgn" "$threads" "$tk1" "$tkn" "$check" <<'PY'
import json, os, sys
size, tokens, tg1, tgn, threads = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
tk1, tkn = json.loads(sys.argv[6]), json.loads(sys.argv[7])
assert tk1["tokens"] == tokens, "tiktoken counts %d tokens, tgrun %d" % (tk1["tokens"], tokens)
print("corpus: %.0f MB of JSON lines, %d documents, %s tokens; %d cores (%s)" %
      (size, tk1["documents"], format(tokens, ","), os.cpu_count(), open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].split(":", 1)[1].strip()))
print("%-34s %8s %14s %18s" % ("", "seconds", "tokens/s", "tokens/s per core"))
rows = [("tgrun prepare, 1 thread", tg1, 1), ("tgrun prepare, %d threads" % threads, tgn, threads),
        ("tiktoken encode_ordinary, 1 thread", tk1["seconds"], 1),
        ("tiktoken, %d threads" % threads, tkn["seconds"], threads)]
for name, s, t in rows:
    print("%-34s %8.2f %14s %18s" % (name, s, format(int(tokens / s), ","), format(int(tokens / s / t), ",")))
print("ids: " + sys.argv[8])
print("(tgrun's time is the whole command: reading, JSON, tokenizing, writing shards; tiktoken's is encoding only)")
PY
