#!/usr/bin/env bash
# run_hellaswag.sh TGRUN SRCDIR: HellaSwag in the loop and in `tgrun eval`,
# and what both refuse.
#
# A 2-layer GPT-2 (n_embd 32, 64 positions, GPT-2's vocabulary) trained 4
# steps on GPT-2 BPE tokens of a slice of Tiny Shakespeare with
# hellaswag = tests/data/hellaswag_tiny.jsonl, evaluating at steps 0, 2
# and 4: each eval line of the log and each eval row of metrics.jsonl
# carries acc, acc_norm and the 6 examples; then `tgrun eval` of the
# checkpoint written at step 4 must give the step-4 evaluation's numbers
# (the same weights through a separately compiled forward), and
# hellaswag_examples = 3 scores 3.  (That the scores are llm.c's, against
# transformers, is tests/torch/hellaswag_hf.py's.)  Then bad input, each
# refused with exit 1 naming the file and line, before any step: a missing
# file, a line that is not JSON, a missing field, a label out of range,
# three endings, a char-level run or model, an example longer than
# block_size; and usage errors (exit 2).
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
cd "$src"
tiny=tests/data/hellaswag_tiny.jsonl
gpt2=$data/gpt2

head -c 60000 "$data/tinyshakespeare/input.txt" > "$tmp/in.txt"
expect_status 0 "$tgrun" prepare --tokenizer gpt2 --gpt2-dir "$gpt2" --input "$tmp/in.txt" --out "$tmp/bpe"
expect_status 0 "$tgrun" prepare --tokenizer char --input "$tmp/in.txt" --out "$tmp/char"
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=2 -D n_embd=32 -D n_head=2 -D block_size=64 --seed 3 \
  --out "$tmp/init.safetensors"
cat > "$tmp/h.cfg" <<CFG
model = "models/gpt2.tg"
init_from = "$tmp/init.safetensors"
data_dir = "$tmp/bpe"
out_dir = "$tmp/run"
batch_size = 2
block_size = 64
max_steps = 4
warmup_steps = 1
eval_interval = 2
eval_batches = 1
sample_interval = 0
sample_tokens = 0
checkpoint_interval = 0
threads = 1
hellaswag = "$tiny"
CFG

# ---- in the loop ----
expect_status 0 "$tgrun" "$tmp/h.cfg"
cp "$tmp/out" "$tmp/log"
contains "$tmp/log" "hellaswag: $tiny: 6 examples, the longest 47 tokens"
contains "$tmp/log" "built hellaswag"
n=$(grep -c '| eval |.*| hellaswag acc [0-9.]* acc_norm [0-9.]* (6 examples)$' "$tmp/log")
if [ "$n" = 3 ]; then ok; else bad "3 eval lines with HellaSwag expected, got $n"; cat "$tmp/log"; fi
last=$(grep '| eval |' "$tmp/log" | tail -1 | sed 's/.*| hellaswag \(acc [0-9.]* acc_norm [0-9.]*\) .*/\1/')
if /usr/bin/python3 - "$tmp/run/metrics.jsonl" > "$tmp/check" 2>&1 <<'PY'
import json, sys
evals = [r for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r]
assert [r["step"] for r in evals] == [0, 2, 4], [r["step"] for r in evals]
for r in evals:
    assert r["hellaswag_n"] == 6, r
    for k in ("hellaswag_acc", "hellaswag_acc_norm"):
        assert 0 <= r[k] <= 1 and abs(r[k] * 6 - round(r[k] * 6)) < 1e-6, (k, r)
print("metrics: hellaswag_acc, hellaswag_acc_norm, hellaswag_n in every eval row")
PY
then ok; cat "$tmp/check"; else bad "metrics: $(cat "$tmp/check")"; fi
# the checkpoint at step 4, scored on its own: the step-4 evaluation's numbers
expect_status 0 "$tgrun" eval --weights "$tmp/run/ckpt.safetensors" --hellaswag "$tiny" --out "$tmp/each.jsonl"
contains "$tmp/out" "hellaswag $last (6 examples;"
n=$(grep -c '"sum_loss":\[' "$tmp/each.jsonl")
if [ "$n" = 6 ]; then ok; else bad "--out: 6 lines expected, got $n"; fi
expect_status 0 "$tgrun" "$tmp/h.cfg" overwrite=true hellaswag_examples=3 max_steps=1
contains "$tmp/out" "(3 examples)"
expect_status 0 "$tgrun" eval --weights "$tmp/run/ckpt.safetensors" --hellaswag "$tiny" --limit 2
contains "$tmp/out" "(2 examples;"

# ---- bad input ----
printf '{"ctx": "A man", "endings": ["a","b","c","d"], "label": 1}\n{"ctx": "A man", "endings": ["a"],}\n' > "$tmp/notjson.jsonl"
printf '{"ctx": "A man", "label": 1}\n' > "$tmp/nofield.jsonl"
printf '\n{"ctx": "A man", "endings": ["a","b","c","d"], "label": 4}\n' > "$tmp/label.jsonl"
printf '{"ctx": "A man", "endings": ["a","b","c"], "label": 0}\n' > "$tmp/three.jsonl"
w=(--weights "$tmp/init.safetensors" --tokenizer "$gpt2")
expect_status 1 "$tgrun" eval "${w[@]}" --hellaswag "$tmp/missing.jsonl"
contains "$tmp/out" "$tmp/missing.jsonl: No such file"
expect_status 1 "$tgrun" eval "${w[@]}" --hellaswag "$tmp/notjson.jsonl"
contains "$tmp/out" "$tmp/notjson.jsonl:2:35: error: the line is not JSON"
expect_status 1 "$tgrun" eval "${w[@]}" --hellaswag "$tmp/nofield.jsonl"
contains "$tmp/out" "$tmp/nofield.jsonl:1:1: error: the example has no field 'endings'"
expect_status 1 "$tgrun" eval "${w[@]}" --hellaswag "$tmp/label.jsonl"
contains "$tmp/out" "$tmp/label.jsonl:2:57: error: label is 4, out of range"
expect_status 1 "$tgrun" eval "${w[@]}" --hellaswag "$tmp/three.jsonl"
contains "$tmp/out" "$tmp/three.jsonl:1:29: error: endings has 3 entries, not 4"
expect_status 1 "$tgrun" eval "${w[@]}" --tokenizer "$tmp/char" --hellaswag "$tiny"
contains "$tmp/out" "HellaSwag is scored with GPT-2's BPE tokenizer, and this model's is the char tokenizer"
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=1 -D n_embd=16 -D n_head=2 -D block_size=64 -D vocab=65 \
  --out "$tmp/w65.safetensors"
expect_status 1 "$tgrun" eval --weights "$tmp/w65.safetensors" --tokenizer "$gpt2" --hellaswag "$tiny"
contains "$tmp/out" "the model's vocabulary (vocab 65) is not GPT-2's BPE (50257 ids"
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=1 -D n_embd=16 -D n_head=2 -D block_size=32 \
  --out "$tmp/w32.safetensors"
expect_status 1 "$tgrun" eval --weights "$tmp/w32.safetensors" --tokenizer "$gpt2" --hellaswag "$tiny"
contains "$tmp/out" "note: T is 47, from the longest HellaSwag example, line 4 of $tiny"
expect_status 2 "$tgrun" eval "${w[@]}"
contains "$tmp/out" "--hellaswag FILE is required"
expect_status 2 "$tgrun" eval "${w[@]}" --hellaswag "$tiny" --limit 0
expect_status 2 "$tgrun" eval "${w[@]}" --hellaswag "$tiny" --limt 3
contains "$tmp/out" "did you mean '--limit'?"

# the same in train.cfg: refused before the first step
for kv in "hellaswag=$tmp/missing.jsonl" "hellaswag=$tmp/label.jsonl" "block_size=32" "data_dir=$tmp/char"; do
  expect_status 1 "$tgrun" "$tmp/h.cfg" overwrite=true $kv
  if grep -q '^step 1/' "$tmp/out"; then bad "$kv: a step ran before the error"; else ok; fi
  cp "$tmp/out" "$tmp/out.$(echo "$kv" | cut -d= -f1)"
done
contains "$tmp/out.hellaswag" "$tmp/label.jsonl:2:57: error: label is 4"
contains "$tmp/out.block_size" "error: hellaswag: the example at line 4 of $tiny is 47 tokens with its longest ending, more than block_size 32"
contains "$tmp/out.data_dir" "HellaSwag is scored with GPT-2's BPE tokenizer"
expect_status 1 "$tgrun" "$tmp/h.cfg" overwrite=true "hellaswag=$tmp/missing.jsonl"
contains "$tmp/out" "command line: error: hellaswag = \"$tmp/missing.jsonl\": No such file or directory"
finish
