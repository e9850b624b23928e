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
# - past the context (block_size) the window slides: --max-new-tokens
#   larger than block_size gives that many tokens, and after each rebuild
#   of the caches the text is the one a fresh run over the rebuilt window
#   gives (greedy);
# - --top-p 1 is no top-p, a small P is greedy, and --repetition-penalty 1
#   is no penalty (the sampler's unit test checks the rules themselves);
# - with GPT-2's BPE a sample stops at <|endoftext|> unless
#   --no-stop-at-eot, and the repetition penalty keeps a model that only
#   says <|endoftext|> from saying it twice in a row (a rigged model);
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

# Weights rigged for a test, in place (the standard library only):
# "loud" scales every tensor but the embedding and the layer norms by 30,
# so that the attention and the MLP outweigh the tied embedding (which at
# init makes a model repeat its last token) and greedy text depends on
# every token and position in the window; "eot" makes the final layer
# norm's output all ones (weight 0, bias 1) and row 50256 of the tied
# embedding all ones, so that <|endoftext|>'s logit is 16 and every other
# about 0.
rig_weights() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, how = sys.argv[1], sys.argv[2]
with open(path, "r+b") as f:
    n = int.from_bytes(f.read(8), "little")
    header = json.loads(f.read(n))
    def rewrite(name, first, count, fn):
        f.seek(8 + n + header[name]["data_offsets"][0] + 4 * first)
        old = struct.unpack("<%df" % count, f.read(4 * count))
        f.seek(8 + n + header[name]["data_offsets"][0] + 4 * first)
        f.write(struct.pack("<%df" % count, *[fn(v) for v in old]))
    for name, t in header.items():
        if name == "__metadata__":
            continue
        count = (t["data_offsets"][1] - t["data_offsets"][0]) // 4
        if how == "loud" and "ln" not in name and name != "wte.weight":
            rewrite(name, 0, count, lambda v: 30 * v)
        if how == "eot" and name in ("ln_f.weight", "ln_f.bias"):
            rewrite(name, 0, count, lambda v: float(name == "ln_f.bias"))
    if how == "eot":
        width = header["wte.weight"]["shape"][1]
        rewrite("wte.weight", 50256 * width, width, lambda v: 1.0)
PY
}

# past the context of 32 tokens: the window slides
sizes=(-D n_layer=2 -D n_head=2 -D n_embd=32 -D vocab=65 -D block_size=32)
expect_status 0 "$tgrun" init models/gpt2.tg "${sizes[@]}" --out "$tmp/loud.safetensors"
rig_weights "$tmp/loud.safetensors" loud
L=(sample --weights "$tmp/loud.safetensors" --model models/gpt2.tg "${sizes[@]}" --tokenizer "$tmp/data")
ctx=32 keep=16 new=100
# (a) that many tokens (one byte each: the char tokenizer), sampled and greedy
for t in 1 0; do
  expect_status 0 "$tgrun" "${L[@]}" --prompt "ROMEO:" --max-new-tokens $new --temperature $t --num-samples 2
  contains "$tmp/out" "12 prompt tokens in"
  contains "$tmp/out" "$((2 * new)) new tokens in"
  "$tgrun" "${L[@]}" --prompt "ROMEO:" --max-new-tokens $new --temperature $t > "$tmp/long.txt" 2> /dev/null
  n=$(wc -c < "$tmp/long.txt")
  if [ "$n" -eq $((6 + new + 1)) ]; then ok; else bad "--temperature $t: $n bytes, not 6 + $new + a newline"; fi
done
# the first rebuild comes when token $ctx (from 0) is fed, then every
# ctx - keep + 1 tokens up to the last token fed, 6 + new - 2
period=$((ctx - keep + 1))
rebuilds=$(((6 + new - 2 - ctx) / period + 1))
contains "$tmp/out" "(the context was rebuilt from its last $keep tokens $((2 * rebuilds)) times)"
# (b) each rebuild runs the last $keep tokens from position 0, as a fresh run
# with them as its prompt does; from there on the two runs make the same
# steps, so the fresh run's text is the long one's from that window on
for start in $period $((2 * period)) $((3 * period)); do
  tail -c +$((start + 1)) "$tmp/long.txt" | head -c $keep > "$tmp/window.txt"
  "$tgrun" "${L[@]}" --prompt-file "$tmp/window.txt" --max-new-tokens $((new - (start + keep - 6))) \
    --temperature 0 > "$tmp/fresh.txt" 2> /dev/null
  if [ -s "$tmp/fresh.txt" ] && tail -c +$((start + 1)) "$tmp/long.txt" | cmp -s - "$tmp/fresh.txt"; then ok
  else bad "the text after the rebuild at $start differs from a fresh run over its window"; fi
done
if [ "$(head -c $((6 + new)) "$tmp/long.txt" | fold -w1 | sort -u | wc -l)" -ge 20 ]; then ok
else bad "the greedy text is too uniform for the rebuild check to tell anything"; fi

# --top-p: 1 is no filter; a P below the most likely token's probability is greedy
"$tgrun" "${L[@]}" --prompt "ROMEO:" --max-new-tokens 60 --seed 5 > "$tmp/p0.txt" 2> /dev/null
"$tgrun" "${L[@]}" --prompt "ROMEO:" --max-new-tokens 60 --seed 5 --top-p 1 > "$tmp/p1.txt" 2> /dev/null
if [ -s "$tmp/p0.txt" ] && cmp -s "$tmp/p0.txt" "$tmp/p1.txt"; then ok; else bad "--top-p 1 changed the text"; fi
"$tgrun" "${L[@]}" --prompt "ROMEO:" --max-new-tokens 60 --seed 5 --top-p 1e-6 --top-k 40 > "$tmp/pg.txt" 2> /dev/null
"$tgrun" "${L[@]}" --prompt "ROMEO:" --max-new-tokens 60 --temperature 0 > "$tmp/g.txt" 2> /dev/null
if [ -s "$tmp/pg.txt" ] && cmp -s "$tmp/pg.txt" "$tmp/g.txt"; then ok; else bad "--top-p 1e-6 is not greedy"; fi
if cmp -s "$tmp/p0.txt" "$tmp/pg.txt"; then bad "sampling at temperature 1 gave the greedy text"; else ok; fi
# --repetition-penalty: 1 is none; a large one changes greedy's choices
R=("${L[@]}" --prompt "ROMEO:" --max-new-tokens 60)
"$tgrun" "${R[@]}" --seed 5 --repetition-penalty 1 > "$tmp/r1.txt" 2> /dev/null
if [ -s "$tmp/r1.txt" ] && cmp -s "$tmp/p0.txt" "$tmp/r1.txt"; then ok
else bad "--repetition-penalty 1 changed the text"; fi
"$tgrun" "${R[@]}" --temperature 0 --repetition-penalty 5 > "$tmp/r5.txt" 2> /dev/null
if [ -s "$tmp/r5.txt" ] && ! cmp -s "$tmp/g.txt" "$tmp/r5.txt"; then ok
else bad "--repetition-penalty 5 left greedy's text alone"; fi
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
# a context longer than the sample: caches for the prompt and the new
# tokens only (rounded up to 64 rows), and the same text as a sample that
# needs the whole context's caches, up to the shorter one's end
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=1 -D n_head=2 -D n_embd=16 -D vocab=65 -D block_size=256 \
  --out "$tmp/w256.safetensors"
long=(--weights "$tmp/w256.safetensors" --model models/gpt2.tg -D n_layer=1 -D n_head=2 -D n_embd=16 -D vocab=65
  -D block_size=256 --tokenizer "$tmp/data/tokenizer.json" --prompt "Hi" --temperature 0)
expect_status 0 "$tgrun" sample "${long[@]}" --tokens 20
contains "$tmp/out" "context 256 (caches of 64 positions: the prompt and the new tokens), prompt 2 tokens"
"$tgrun" sample "${long[@]}" --tokens 20 > "$tmp/short_cache.txt" 2> /dev/null
"$tgrun" sample "${long[@]}" --tokens 250 > "$tmp/whole_cache.txt" 2> "$tmp/whole_cache.log"
grep -q "context 256, prompt 2 tokens" "$tmp/whole_cache.log" && ok || bad "250 new tokens should use the whole context"
# (the shorter text ends with the newline after a sample)
n=$(($(wc -c < "$tmp/short_cache.txt") - 1))
if [ "$n" -gt 2 ] && cmp -s <(head -c "$n" "$tmp/short_cache.txt") <(head -c "$n" "$tmp/whole_cache.txt"); then ok
else bad "caches of 64 rows changed the greedy text"; fi

# <|endoftext|>: a 1-layer model of GPT-2's vocabulary, rigged to say it
# and little else
gpt2=(--model models/gpt2.tg -D n_layer=1 -D n_head=2 -D n_embd=16 -D block_size=16 --tokenizer "$data/gpt2")
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=1 -D n_head=2 -D n_embd=16 -D vocab=50257 -D block_size=16 \
  --out "$tmp/eot.safetensors"
rig_weights "$tmp/eot.safetensors" eot
E=(sample --weights "$tmp/eot.safetensors" "${gpt2[@]}" --prompt "Hello" --max-new-tokens 8)
expect_status 0 "$tgrun" "${E[@]}" --temperature 0 --num-samples 2
contains "$tmp/out" "sample: <|endoftext|> after 0 new tokens; stopping this sample (--no-stop-at-eot goes on)"
contains "$tmp/out" "0 new tokens in"
if grep -q "endoftext|>Hello\|Hello<|endoftext" "$tmp/out"; then bad "<|endoftext|> was written"; else ok; fi
expect_status 0 "$tgrun" "${E[@]}" --temperature 0 --no-stop-at-eot
contains "$tmp/out" "Hello$(printf '<|endoftext|>%.0s' {1..8})"
contains "$tmp/out" "8 new tokens in"
# the penalty divides its logit, 16, by 100: any other token beats 0.16
expect_status 0 "$tgrun" "${E[@]}" --temperature 0 --no-stop-at-eot --repetition-penalty 100
contains "$tmp/out" "Hello<|endoftext|>"
if grep -q "<|endoftext|><|endoftext|>" "$tmp/out"; then bad "the penalty did not stop the repeat"; else ok; fi
contains "$tmp/out" "8 new tokens in"

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
for p in 0 -0.5 1.01 nan inf x; do
  usage "--top-p $p: expected a number above 0 and at most 1" --weights "$ck" --prompt x --top-p $p
done
for r in 0 -1 nan x; do
  usage "--repetition-penalty $r: expected a number above 0" --weights "$ck" --prompt x --repetition-penalty $r
done
usage "unknown option '--no-stop-at-eos' (did you mean '--no-stop-at-eot'?)" --weights "$ck" --prompt x \
  --no-stop-at-eos

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
