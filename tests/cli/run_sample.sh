#!/usr/bin/env bash
# run_sample.sh TGRUN SRCDIR: `tgrun sample` end to end (docs/tgrun.md).
#
# A tiny character-level model trained for a few steps gives a checkpoint
# that names its model and config; from it:
# - text streams to stdout starting with the prompt; several samples are
#   separated by a line of dashes; the same seed gives the same text and
#   another seed other text;
# - greedy: --temperature 0 is the same text as --top-k 1, on the CPU
#   backend and on the reference interpreter;
# - a sample stops, saying so, when the context (block_size) is full;
# - a weights file (tgrun init's) works with --model and -D;
# - bad input: each case exits 2 (usage) or 1 (a file, the prompt), with a
#   message naming the thing, and before anything is compiled (no
#   "compiled in" line).
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
cd "$src"

expect_status 0 "$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$tmp/data"
cat > "$tmp/tiny.cfg" <<CFG
model = "models/gpt2.tg"
model.n_layer = 2
model.n_head = 2
model.n_embd = 32
model.block_size = 32
data_dir = "$tmp/data"
out_dir = "$tmp/run"
batch_size = 4
block_size = 32
learning_rate = 3e-3
warmup_steps = 5
max_steps = 30
eval_interval = 0
sample_tokens = 0
checkpoint_interval = 30
threads = 1
CFG
expect_status 0 "$tgrun" "$tmp/tiny.cfg"
ck=$tmp/run/ckpt.safetensors
S=(sample --weights "$ck" --tokenizer "$tmp/data")

# from the checkpoint: its model and config; the text starts with the prompt
expect_status 0 "$tgrun" "${S[@]}" --prompt "ROMEO:" --max-new-tokens 40 --num-samples 3 --seed 7
contains "$tmp/out" "context 32, prompt 6 tokens; compiled in"
contains "$tmp/out" "new tokens in"
"$tgrun" "${S[@]}" --prompt "ROMEO:" --max-new-tokens 40 --num-samples 3 --seed 7 > "$tmp/a.txt" 2> /dev/null
n=$(grep -c '^---------------$' "$tmp/a.txt")
if [ "$n" -eq 2 ]; then ok; else bad "3 samples should have 2 separator lines, not $n"; fi
n=$(grep -c '^ROMEO:' "$tmp/a.txt")
if [ "$n" -eq 3 ]; then ok; else bad "3 samples should each start with the prompt ($n do)"; cat "$tmp/a.txt"; fi
"$tgrun" "${S[@]}" --prompt "ROMEO:" --max-new-tokens 40 --num-samples 3 --seed 7 > "$tmp/b.txt" 2> /dev/null
if cmp -s "$tmp/a.txt" "$tmp/b.txt"; then ok; else bad "the same seed gave different text"; fi
"$tgrun" "${S[@]}" --prompt "ROMEO:" --max-new-tokens 40 --num-samples 3 --seed 8 > "$tmp/c.txt" 2> /dev/null
if cmp -s "$tmp/a.txt" "$tmp/c.txt"; then bad "another seed gave the same text"; else ok; fi

# no --tokenizer: the run's train.cfg names the data_dir
expect_status 0 "$tgrun" sample --weights "$ck" --prompt "ROMEO:" --max-new-tokens 10 --temperature 0
contains "$tmp/out" "ROMEO:"
contains "$tmp/out" "context 32, prompt 6 tokens"

# greedy: temperature 0 = top-k 1, on both backends
for b in cpu ref; do
  "$tgrun" "${S[@]}" --prompt "ROMEO:" --max-new-tokens 20 --temperature 0 --backend $b > "$tmp/g_$b.txt" 2> /dev/null
  "$tgrun" "${S[@]}" --prompt "ROMEO:" --max-new-tokens 20 --top-k 1 --backend $b > "$tmp/k_$b.txt" 2> /dev/null
  if [ -s "$tmp/g_$b.txt" ] && cmp -s "$tmp/g_$b.txt" "$tmp/k_$b.txt"; then ok
  else bad "$b: --temperature 0 and --top-k 1 differ"; fi
done
if cmp -s "$tmp/g_cpu.txt" "$tmp/g_ref.txt"; then ok; else bad "greedy text differs between cpu and ref"; fi

# the context is 32 tokens: 6 + 40 does not fit
expect_status 0 "$tgrun" "${S[@]}" --prompt "ROMEO:" --max-new-tokens 40 --temperature 0
contains "$tmp/out" "the context is full (32 tokens, block_size); stopping this sample"
# --prompt-file, and the longest prompt that fits
printf 'a%.0s' {1..32} > "$tmp/p32.txt"
expect_status 0 "$tgrun" "${S[@]}" --prompt-file "$tmp/p32.txt" --max-new-tokens 5 --temperature 0
contains "$tmp/out" "prompt 32 tokens"

# a weights file with --model and -D (tgrun init's: no metadata)
tiny=(--model models/gpt2.tg -D n_layer=1 -D n_head=2 -D n_embd=16 -D vocab=65 -D block_size=16)
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=1 -D n_head=2 -D n_embd=16 -D vocab=65 -D block_size=16 \
  --out "$tmp/w.safetensors"
expect_status 0 "$tgrun" sample --weights "$tmp/w.safetensors" "${tiny[@]}" --tokenizer "$tmp/data/tokenizer.json" \
  --prompt "Hi" --tokens 5 --backend ref
contains "$tmp/out" "context 16, prompt 2 tokens"

# bad usage: exit 2, before anything is read or compiled
usage() {
  local text=$1
  shift
  expect_status 2 "$tgrun" sample "$@"
  contains "$tmp/out" "$text"
  if grep -q "compiled in" "$tmp/out"; then bad "'$*' compiled before refusing"; else ok; fi
}
usage "--weights FILE is required" --prompt x
usage "no prompt: give --prompt TEXT or --prompt-file F" --weights "$ck"
usage "give --prompt or --prompt-file, not both" --weights "$ck" --prompt x --prompt-file "$tmp/p32.txt"
usage "unknown option '--temprature' (did you mean '--temperature'?)" --weights "$ck" --prompt x --temprature 1
usage "--temperature -1: expected a number, 0 (greedy) or more" --weights "$ck" --prompt x --temperature -1
usage "--top-k many: expected a whole number from 0 to" --weights "$ck" --prompt x --top-k many
usage "--num-samples 0: expected a whole number from 1 to" --weights "$ck" --prompt x --num-samples 0
usage "--max-new-tokens 1.5: expected a whole number from 1 to" --weights "$ck" --prompt x --max-new-tokens 1.5
usage "--seed -4: expected a whole number, 0 or more" --weights "$ck" --prompt x --seed -4
usage "--backend tpu: unknown backend" --weights "$ck" --prompt x --backend tpu
usage "unexpected argument 'models/gpt2.tg'" models/gpt2.tg --weights "$ck" --prompt x
usage "--top-k needs a value" --weights "$ck" --prompt x --top-k

# bad files and prompts: exit 1, naming the thing, before compiling
fails() {
  local text=$1
  shift
  expect_status 1 "$tgrun" sample "$@"
  contains "$tmp/out" "$text"
  if grep -q "compiled in" "$tmp/out"; then bad "'$*' compiled before refusing"; else ok; fi
}
fails "$tmp/none.safetensors: error: --weights $tmp/none.safetensors: no such file" \
  --weights "$tmp/none.safetensors" --prompt x --tokenizer "$tmp/data"
fails "--prompt-file $tmp/none.txt: No such file" --weights "$ck" --prompt-file "$tmp/none.txt"
fails "the prompt cannot be encoded by the char tokenizer" "${S[@]:1}" --prompt "ROMEO€"
fails "--prompt: error: the prompt is 33 tokens, longer than the model's context of 32 (block_size)" "${S[@]:1}" \
  --prompt "$(printf 'a%.0s' {1..33})"
printf 'a%.0s' {1..40} > "$tmp/p40.txt"
fails "--prompt-file $tmp/p40.txt: error: the prompt is 40 tokens" "${S[@]:1}" --prompt-file "$tmp/p40.txt"
fails "the prompt is empty" "${S[@]:1}" --prompt ""
fails "names no model (it is not a tg checkpoint): give --model" --weights "$tmp/w.safetensors" --prompt x \
  --tokenizer "$tmp/data"
mkdir -p "$tmp/empty"
fails "no tokenizer in $tmp/empty: it has neither tokenizer.json" --weights "$ck" --prompt x --tokenizer "$tmp/empty"
fails "--model models/nope.tg: no such file" --weights "$tmp/w.safetensors" --model models/nope.tg --prompt x \
  --tokenizer "$tmp/data"
# weights that do not fit the model: the loader names the file and tensor
fails "wte.weight" --weights "$tmp/w.safetensors" "${tiny[@]}" -D n_embd=32 --tokenizer "$tmp/data" --prompt x

finish
