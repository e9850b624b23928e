# testlib.sh: what the CLI test scripts share (sourced, not run).
#
# Sets $tmp (a fresh directory, removed on exit) and counters; each check
# counts as passed or failed; `finish` prints the "N passed, N failed"
# line that CI reads and exits non-zero on any failure.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# The absolute path of a program given on the command line: the tests cd.
abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# expect_status WANT CMD...: runs CMD, output to $tmp/out, checks its status
expect_status() {
  local want=$1
  shift
  "$@" > "$tmp/out" 2>&1
  local rc=$?
  if [ $rc -eq "$want" ]; then ok; else bad "'$*' exited $rc, expected $want"; cat "$tmp/out"; fi
}

# contains FILE TEXT: FILE holds TEXT
contains() { if grep -qF -- "$2" "$1"; then ok; else bad "$1 lacks '$2'"; head -20 "$1"; fi; }

# tiny_char_run DATA: $tmp/data, Tiny Shakespeare (DATA/tinyshakespeare)
# one character a token, and $s, the config of a 1-layer, 16-wide model
# trained 4 steps on it (a checkpoint at steps 2 and 4, no evaluation, an
# 8-token sample at the end), for the tests of what tgrun refuses.  Needs
# $tgrun.
tiny_char_run() {
  expect_status 0 "$tgrun" prepare --tokenizer char --input "$1/tinyshakespeare/input.txt" --out "$tmp/data"
  cat > "$tmp/s.cfg" <<CFG
model = "models/gpt2.tg"
model.n_layer = 1
model.n_head = 2
model.n_embd = 16
model.block_size = 16
data_dir = "$tmp/data"
batch_size = 2
block_size = 16
warmup_steps = 1
max_steps = 4
eval_interval = 0
eval_batches = 1
sample_interval = 0
sample_tokens = 8
checkpoint_interval = 2
threads = 1
CFG
  s=$tmp/s.cfg
}

# run_losses METRICS: a run's losses from its metrics.jsonl, a line a row:
# "STEP LOSS" for a step, "STEP val LOSS" for an evaluation, every digit
# (for runs that must agree exactly)
run_losses() {
  /usr/bin/python3 -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "val_loss" in r: print(r["step"], "val", repr(r["val_loss"]))
    elif "loss" in r: print(r["step"], repr(r["loss"]))' "$1"
}

finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}

# tiny_run TGRUN DATA CFG [KEY = VALUE lines...]: the char-level data of
# tinyshakespeare prepared into $tmp/data, and CFG: a 1-layer GPT-2 with 2
# heads, 16 features and 16 positions on it, 2 steps; each extra argument
# is one more line of the config.  The run the CLI tests start from.
tiny_run() {
  local tgrun=$1 data=$2 cfg=$3
  shift 3
  expect_status 0 "$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$tmp/data"
  {
    printf '%s\n' 'model = "models/gpt2.tg"' 'model.n_layer = 1' 'model.n_head = 2' 'model.n_embd = 16' \
      'model.block_size = 16' "data_dir = \"$tmp/data\"" 'batch_size = 2' 'block_size = 16' 'warmup_steps = 1' \
      'max_steps = 2' 'eval_interval = 0' 'eval_batches = 1' 'sample_interval = 0' 'sample_tokens = 8' \
      'checkpoint_interval = 2' 'threads = 1'
    for line in "$@"; do printf '%s\n' "$line"; done
  } > "$cfg"
}
