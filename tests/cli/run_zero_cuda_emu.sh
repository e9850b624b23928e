#!/usr/bin/env bash
# run_zero_cuda_emu.sh TGRUN SRCDIR: ZeRO stages 1 and 2 on the CUDA
# backend, end to end: 2 ranks of the emulated device (backend cuda-emu,
# NCCL emulated over MPI) train a small GPT 4 steps at stages 0, 1 and 2.
#
# With grad_clip = 0 and one micro-step the stages must agree exactly, as
# on the CPU backend (tests/cli/run_zero_train.sh argues why): the final
# checkpoint (weights and AdamW's moments, the shards gathered) the same
# bytes, and the same losses.  That holds only if the backend's
# reduce-scatter averages as its all-reduce does and its all-gather puts
# every shard back, through the bucket hooks of a captured CUDA graph (the
# traces show the steps replayed as at stage 0).  The short form of run_zero_train.sh
# for this backend, whose whole run on the emulated device would take
# minutes: clipping and accumulation, resuming and failures are the same
# code above the backend, checked there on the CPU.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$src"

if [ -n "${TG_SANITIZED:-}" ]; then
  echo "note: skipped in the sanitizer build (Open MPI's own allocations read as leaks)"
  exit 0
fi
if ! command -v mpirun > /dev/null; then
  bad "mpirun is missing (openmpi-bin)"
  finish
  exit 1
fi

expect_status 0 "$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$tmp/data"
cat > "$tmp/small.cfg" <<CFG
model = "models/gpt2.tg"
model.n_layer = 2
model.n_head = 2
model.n_embd = 32
model.block_size = 32
data_dir = "$tmp/data"
backend = "cuda-emu"
precision = "f32"
batch_size = 1
block_size = 32
learning_rate = 3e-3
min_lr = 3e-4
warmup_steps = 2
lr_decay_steps = 4
max_steps = 4
eval_interval = 0
eval_batches = 1
sample_tokens = 0
checkpoint_interval = 0
grad_clip = 0
CFG

for stage in 0 1 2; do
  TG_CUDA_TRACE=$tmp/trace$stage expect_status 0 "$tgrun" --nproc 2 "$tmp/small.cfg" out_dir="$tmp/z$stage" zero=$stage
  cp "$tmp/out" "$tmp/z$stage.out"
  contains "$tmp/z$stage.out" "bit-identical after every step"
done
# the traces (both ranks'): a line per bucket point ("allreduce B") in each
# step run op by op, and at stages 1 and 2 one reduce-scatter there; the
# other steps are replays of the captured step, as many at every stage
points0=$(grep -c '^allreduce ' "$tmp/trace0")
if [ "$points0" -gt 0 ] && [ "$points0" -lt 8 ]; then ok; else bad "stage 0: $points0 bucket points run op by op in 2 x 4 steps"; fi
for stage in 1 2; do
  points=$(grep -c '^allreduce ' "$tmp/trace$stage") scatters=$(grep -c '^reduce-scatter of' "$tmp/trace$stage")
  if [ "$points" -eq "$points0" ] && [ "$scatters" -eq "$points" ]; then ok
  else bad "stage $stage: $points bucket points and $scatters reduce-scatters run op by op, stage 0 $points0 points"; fi
done
contains "$tmp/z1.out" "zero 1: each rank keeps AdamW's moments of its shard"
contains "$tmp/z2.out" "zero 2: each rank keeps the gradients and AdamW's moments of its shard"
for stage in 1 2; do
  if cmp -s "$tmp/z0/ckpt.safetensors" "$tmp/z$stage/ckpt.safetensors"; then ok; else
    bad "stage $stage's checkpoint on cuda-emu differs from stage 0's"
    /usr/bin/python3 tests/cli/compare_safetensors.py "$tmp/z0/ckpt.safetensors" "$tmp/z$stage/ckpt.safetensors" 0 | tail -3
  fi
  if cmp -s <(grep -o '"loss":[^,]*' "$tmp/z0/metrics.jsonl") <(grep -o '"loss":[^,]*' "$tmp/z$stage/metrics.jsonl"); then ok
  else bad "stage $stage's losses on cuda-emu differ from stage 0's"; fi
done
echo "result: 4 steps on 2 ranks of cuda-emu at zero 0, 1, 2, loss $(grep -o '"loss":[^,]*' "$tmp/z0/metrics.jsonl" |
  head -1 | cut -d: -f2 | cut -c1-6) -> $(grep -o '"loss":[^,]*' "$tmp/z0/metrics.jsonl" | tail -1 | cut -d: -f2 | cut -c1-6)"

finish
