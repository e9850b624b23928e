#!/usr/bin/env bash
# run_finetune.sh TGRUN SRCDIR: configs/finetune_shakespeare.cfg for a few
# steps, from a small GPT-2 weights file, as a user runs it with Hugging
# Face's GPT-2 (docs/tgrun.md, "Hugging Face GPT-2").
#
# The weights: `tgrun init` of a 2-layer GPT-2 (n_embd 32, 2 heads, 64
# positions) with GPT-2's whole vocabulary, so that it fits the config's
# GPT-2 BPE data; the config has no model.NAME lines, so the run must take
# every size from the file (n_head from its metadata).  Only the size of
# the run is overridden (steps, batch, sequence length, evaluation), and
# the learning rate: the config's 3e-5 is for pretrained weights, and on
# random ones 8 steps of it move the loss by less than its noise; 1e-3,
# still constant, makes "the loss goes down" a real check.  Checks: exit
# 0, the sizes taken from the file, a constant learning rate, finite
# losses, and a validation loss at the end below the one at step 0 (the
# mean of 4 batches: at 1e-3 the drop after 8 steps is ~0.1, far above the
# batches' spread of the mean).
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
cd "$src"

expect_status 0 "$tgrun" prepare --tokenizer gpt2 --gpt2-dir "$data/gpt2" --input "$data/tinyshakespeare/input.txt" \
  --out "$tmp/shakespeare_gpt2"
contains "$tmp/out" "vocab 50,257 (gpt2)"
mkdir -p "$tmp/hf/gpt2"
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=2 -D n_embd=32 -D n_head=2 -D block_size=64 --seed 3 \
  --out "$tmp/hf/gpt2/model.safetensors"

expect_status 0 "$tgrun" configs/finetune_shakespeare.cfg init_from="$tmp/hf/gpt2/model.safetensors" \
  data_dir="$tmp/shakespeare_gpt2" out_dir="$tmp/run" max_steps=8 batch_size=2 grad_accum=2 block_size=32 \
  eval_interval=4 eval_batches=4 sample_interval=0 sample_tokens=16 checkpoint_interval=0 threads=1 \
  learning_rate=1e-3 min_lr=1e-3
cp "$tmp/out" "$tmp/log"
contains "$tmp/log" "model sizes from $tmp/hf/gpt2/model.safetensors: vocab=50257 n_embd=32 block_size=64 n_layer=2"
contains "$tmp/log" "n_head=2"
contains "$tmp/log" "initial weights from $tmp/hf/gpt2/model.safetensors"
contains "$tmp/log" "step 8/8"
if /usr/bin/python3 - "$tmp/run/metrics.jsonl" > "$tmp/check" 2>&1 <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r]
evals = [r for r in rows if "val_loss" in r]
assert len(steps) == 8, f"{len(steps)} steps"
assert all(math.isfinite(r["loss"]) for r in steps), "a loss is not finite"
assert {r["lr"] for r in steps} == {1e-3}, f"the learning rate is not constant: {sorted({r['lr'] for r in steps})}"
first, last = evals[0]["val_loss"], evals[-1]["val_loss"]
print(f"val loss {first:.4f} at step {evals[0]['step']} -> {last:.4f} at step {evals[-1]['step']}")
assert evals[0]["step"] == 0 and evals[-1]["step"] == 8 and last < first - 0.02, "the loss did not go down"
PY
then ok; cat "$tmp/check"; else bad "metrics: $(cat "$tmp/check")"; fi

# the config as written: constant 3e-5, no warmup, no decay
contains configs/finetune_shakespeare.cfg "learning_rate  = 3e-5"
contains configs/finetune_shakespeare.cfg "min_lr         = 3e-5"
contains configs/finetune_shakespeare.cfg "warmup_steps   = 0"
contains configs/finetune_shakespeare.cfg 'init_from = "models/hf/gpt2/model.safetensors"'

# a file of another size than model.NAME says: refused before compiling
expect_status 1 "$tgrun" configs/finetune_shakespeare.cfg init_from="$tmp/hf/gpt2/model.safetensors" \
  data_dir="$tmp/shakespeare_gpt2" out_dir="$tmp/run2" model.n_embd=64
contains "$tmp/out" "n_embd = 64 here, but the weights are of a model with n_embd = 32"
if grep -q "^built" "$tmp/out"; then bad "compiled before refusing the size"; else ok; fi
# the config's block_size (256) is more than this file's 64 positions
expect_status 1 "$tgrun" configs/finetune_shakespeare.cfg init_from="$tmp/hf/gpt2/model.safetensors" \
  data_dir="$tmp/shakespeare_gpt2" out_dir="$tmp/run2"
contains "$tmp/out" "block_size = 256, but the weights' position table has 64 rows"
finish
