#!/usr/bin/env bash
# gpt2_numerics.sh: issue 16's numerics check at full size.  GPT-2 124M in
# bf16, the first 20 training steps, tg (backend cuda) against PyTorch
# (bf16 autocast) on the same machine, from the same weights and on the
# same batches of GPT-2 BPE Tiny Shakespeare; per-step losses compared
# with the tolerance argued below.  Prints a line per step and PASS or FAIL
# (exit 0 or 1; 2 when something needed is missing).
#
#   1. tgrun prepare: $TG_DATA/tinyshakespeare/input.txt in GPT-2 BPE
#      (TG_DATA defaults to ../shared/data beside the checkout; nothing is
#      copied into the repository), into a temporary folder;
#   2. tgrun init: one set of initial weights (F32 safetensors, Hugging
#      Face's GPT-2 names), which both sides load;
#   3. tgrun train.cfg with init_from = those weights: 20 steps (TG_NUMERICS_STEPS), every
#      step's loss in metrics.jsonl; the batches are tg's seeded draw;
#   4. bench/gpt2_numerics.py: the same 20 steps in PyTorch (nanoGPT's
#      model from bench/torch_gpt_train.py, torch.optim.AdamW, nanoGPT's
#      get_lr, clip_grad_norm_), drawing the same batches with a port of
#      tg's loader (runtime/data/dataloader.c), then the comparison.
#
# The run: B = 8 sequences of T = 1024 tokens a step (8192 tokens; no
# accumulation, so the check stays a minute or two), learning rate 6e-4
# after 10 warmup steps, cosine to 6e-5 at step 20, AdamW beta 0.9/0.95,
# eps 1e-8, weight decay 0.1 on the 2-D tensors, clipping at 1.0: GPT-2's
# recipe (nanoGPT's train_gpt2 defaults) at a small batch.
#
# The tolerance, and why.
#   Step 0 (same weights, same batch, nothing updated yet): the losses
#   differ only by rounding.  tg rounds matmul and attention operands,
#   their outputs and the saved activations to bf16 and accumulates in f32
#   (docs/precision.md); autocast rounds the Linear and SDPA operands to
#   bf16 and keeps LayerNorm, softmax and the loss in f32.  So the two
#   round at different places, and cuBLASLt, tg's flash kernels and
#   PyTorch's kernels add in different orders.  A bf16 rounding is at most
#   2^-9 = 2e-3 relative; the loss is a mean over 8192 tokens, over which
#   the per-token errors, nearly independent, largely cancel.  Allowed:
#   2e-3 relative (0.02 nats at ln 50257 = 10.8), one bf16 rounding of the
#   loss itself; a real difference (weights read in the wrong layout, the
#   padded logits not masked, another batch) moves it far more.
#   Steps 1..19: the weights have been updated from gradients that differ
#   by rounding, and AdamW amplifies small differences: early on its
#   update m/sqrt(v) is about sign(g) times lr for every element, so an
#   element whose tiny gradient rounding flips moves by 2 lr the other way.
#   The trajectories drift apart slowly (chaotically, but 20 steps is short),
#   and the loss falls fast (10.8 to about 7-8 in 20 steps), so each step's
#   loss is allowed 1e-2 relative (0.07-0.1 nats), five times step 0's.
#   Rounding noise has no preferred sign; a real bug (learning rate,
#   schedule off by a step, decay on the wrong tensors, clipping, the wrong
#   batches) makes one side learn faster at every step.  So the mean of the
#   signed relative differences over steps 1..19 is allowed 3e-3.  These
#   are first estimates: the first H100 run prints every step's difference,
#   and its worst should sit well inside them; tighten them then.
#
# Environment (defaults for the GPU):
#   TG_NUMERICS_BACKEND  cuda; cuda-emu rehearses here without a GPU
#   TG_NUMERICS_SIZES    "n_layer n_head n_embd block_size" [12 12 768 1024]
#   TG_NUMERICS_BATCH    "B grad_accum" [8 1]
#   TG_NUMERICS_STEPS    [20: fits tools/gpu_check.sh's deadline; 50 ran before]
#   TG_NUMERICS_PRECISION bf16 (f32: tg in f32 against torch in f32, where
#                        the losses should agree to about 1e-5: a check of the
#                        harness itself, the weights and the batches)
#   TG_NUMERICS_TOKENIZER gpt2 (char: a 65-symbol vocabulary, for rehearsals)
#   TG_NUMERICS_TORCH_DEVICE cuda with backend cuda, else cpu
#   TG_NUMERICS_PYTHON   the Python with torch [python3; /usr/bin/python3 in a rehearsal]
#   TGRUN                tgrun [build/tgrun]; TG_DATA as above; OUT: logs
#
# Rehearsal (here, no GPU; about a minute):
#   TG_NUMERICS_BACKEND=cuda-emu bash bench/gpt2_numerics.sh
# which runs 2 layers, 2 heads, 32 wide, T = 32, B = 4, 20 steps, on the
# char vocabulary (cuda-emu with GPT-2's 50257 takes ~10 s a step), torch on
# the CPU with bf16 autocast.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
src=$(pwd)
backend=${TG_NUMERICS_BACKEND:-cuda}
die() { echo "gpt2_numerics: $*" >&2; exit 2; }
if [ "$backend" = cuda ]; then
  sizes=${TG_NUMERICS_SIZES:-12 12 768 1024} batch=${TG_NUMERICS_BATCH:-8 1}
  tokenizer=${TG_NUMERICS_TOKENIZER:-gpt2} tdev=${TG_NUMERICS_TORCH_DEVICE:-cuda}
  py=${TG_NUMERICS_PYTHON:-python3}
else
  sizes=${TG_NUMERICS_SIZES:-2 2 32 32} batch=${TG_NUMERICS_BATCH:-4 1}
  tokenizer=${TG_NUMERICS_TOKENIZER:-char} tdev=${TG_NUMERICS_TORCH_DEVICE:-cpu}
  py=${TG_NUMERICS_PYTHON:-/usr/bin/python3}
fi
steps=${TG_NUMERICS_STEPS:-20} prec=${TG_NUMERICS_PRECISION:-bf16}
read -r L H C T <<< "$sizes"
read -r B A <<< "$batch"
tgrun=${TGRUN:-$src/build/tgrun}
export TG_DATA=${TG_DATA:-$src/../shared/data}
input=$TG_DATA/tinyshakespeare/input.txt
[ -x "$tgrun" ] || die "no tgrun at $tgrun: build it (cmake -S . -B build && make -C build tgrun) or set TGRUN"
[ -f "$input" ] || die "no $input: set TG_DATA to a folder holding tinyshakespeare/input.txt (and gpt2/encoder.json, vocab.bpe)"
"$py" -c 'import torch, numpy' 2> /dev/null || die "$py has no torch or numpy: set TG_NUMERICS_PYTHON"
case $prec in bf16) tdtype=bfloat16 ;; f32) tdtype=float32 ;; *) die "TG_NUMERICS_PRECISION is bf16 or f32, not $prec" ;; esac
warm=$(( steps < 10 ? steps / 5 : 10 ))

work=$(mktemp -d /tmp/tg-numerics.XXXXXX)
trap 'rm -rf "$work"' EXIT
logs=${OUT:-$work}
"$tgrun" prepare --tokenizer "$tokenizer" --input "$input" --out "$work/data" > "$work/prepare.log" 2>&1 ||
  { cat "$work/prepare.log"; die "tgrun prepare failed"; }
V=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$work/data/tokenizer.json") ||
  die "no vocab_size in $work/data/tokenizer.json"
"$tgrun" init models/gpt2.tg -D n_layer="$L" -D n_head="$H" -D n_embd="$C" -D vocab="$V" -D block_size="$T" \
  --seed 1337 --out "$work/w0.safetensors" > /dev/null || die "tgrun init failed"
cat > "$work/train.cfg" << EOF
# gpt2_numerics.sh: $steps steps from w0.safetensors, every step logged
model = "$src/models/gpt2.tg"
init_from = "$work/w0.safetensors"
model.n_head = $H
data_dir = "$work/data"
out_dir = "$work/tg"
backend = "$backend"
precision = "$prec"
batch_size = $B
block_size = $T
grad_accum = $A
max_steps = $steps
learning_rate = 6e-4
min_lr = 6e-5
warmup_steps = $warm
lr_decay_steps = $steps
beta1 = 0.9
beta2 = 0.95
eps = 1e-8
weight_decay = 0.1
grad_clip = 1.0
eval_interval = 0
eval_batches = 1
log_interval = 1
sample_tokens = 0
checkpoint_interval = 0
seed = 1337
EOF
echo "== tg: $L layers, $H heads, $C wide, T $T, vocab $V ($tokenizer), B $B x $A accumulated, $steps steps, $prec on $backend"
start=$(date +%s)
"$tgrun" "$work/train.cfg" > "$work/tg.log" 2>&1
rc=$?
cp "$work/tg.log" "$work/train.cfg" "$logs/" 2> /dev/null
[ -f "$work/tg/metrics.jsonl" ] && cp "$work/tg/metrics.jsonl" "$logs/tg-metrics.jsonl" 2> /dev/null
if [ $rc -ne 0 ]; then
  tail -15 "$work/tg.log"
  echo "FAIL: tg's run failed (exit $rc; log: $logs/tg.log)"
  exit 1
fi
grep -m1 '^training' "$work/tg.log"
echo "tg: $(( $(date +%s) - start )) s"
echo "== PyTorch: the same weights and batches"
"$py" bench/gpt2_numerics.py --weights "$work/w0.safetensors" --tokens "$work/data" --tg-metrics "$work/tg/metrics.jsonl" \
  --n-head "$H" --batch-size "$B" --block-size "$T" --grad-accum "$A" --steps "$steps" --seed 1337 \
  --lr 6e-4 --min-lr 6e-5 --warmup-steps "$warm" --lr-decay-steps "$steps" --beta1 0.9 --beta2 0.95 --eps 1e-8 \
  --weight-decay 0.1 --grad-clip 1.0 --device "$tdev" --dtype "$tdtype" --json "$logs/numerics.json" 2>&1 |
  tee "$logs/numerics.log"
exit "${PIPESTATUS[0]}"
