#!/usr/bin/env bash
# run_zero_train.sh TGRUN SRCDIR [BACKEND]: ZeRO stages 1, 2 and 3 (train.cfg's
# `zero`, runtime/train/zero.c, passes/shard_params.c) against stage 0, over
# MPI, on the CPU backend (or BACKEND: cuda-emu runs the emulated device's
# NCCL).
#
# - exact: a small GPT trained 20 steps on 2 and on 4 ranks (oversubscribed)
#   at stages 1, 2 and 3 writes a final checkpoint (weights and AdamW's
#   moments, the shards gathered) identical byte for byte to stage 0's,
#   and the same losses, with grad_clip = 0.  The summation order is the
#   same there: the reduce-scatter adds the ranks' gradients as the
#   all-reduce does (Open MPI: the same bits, measured on 2 and 4 ranks),
#   each element's AdamW is the same arithmetic on a shard as on the whole
#   tensor, and the norm, whose partial sums are grouped by shard rather
#   than by tensor, is only reported.  At stage 3 the weights the kernels
#   read are the all-gathered shards, the same bits as the whole tensors,
#   and the gradient is the IR's reduce_scatter (a sum) times 1 / ranks,
#   which is the all-reduce's average exactly: the sum is the same and the
#   scale a power of two.  Evaluations and samples run there on every
#   rank (their graphs gather too);
#   The reference interpreter (backend ref) too, in 3 steps on 2 ranks,
#   and precision bf16, where the f32 masters of the parameters the model
#   reads only as bf16 copies are sharded too (16 of the 28 here: the
#   matmuls' weights and biases);
# - with clipping and 2 micro-steps it is not: the norm differs in its last
#   bits (measured: 2.3e-7 relative), so the clipping factor does, and
#   stage 2 averages each micro-step instead of their sum.  Losses must
#   agree within 1e-6 relative (measured: 3.5e-8) and the weights within
#   5e-3 of each tensor's scale (measured: 4.2e-4, in a bias: AdamW's
#   m / sqrt(v) turns an ulp in a near-zero gradient into a step of the
#   learning rate's size, as tests/cli/run_train.sh argues for ranks);
# - resume: 10 steps then 10 more at stage 2 gives the 20 straight steps'
#   checkpoint byte for byte; a stage 1 checkpoint of 2 ranks resumed on 4
#   ranks at stage 2 takes the same next step as on 4 ranks at stage 0
#   (the state is resharded, not just reloaded);
# - failures: a rank stopped (SIGSTOP) at stage 2 ends the job within
#   rank_timeout (the reduce-scatters and all-gathers wait no longer than
#   the all-reduce did); a rank killed (SIGKILL) ends it too, and the last
#   checkpoint resumes;
# - stage 3 resumes exactly (10 + 10 steps), a 2-rank stage 1 checkpoint
#   resumed on 4 ranks at stage 3 takes stage 0's step, and a rank stopped
#   at stage 3 (inside a collective of the graph) ends the job within
#   rank_timeout, as does one killed, whose job's last checkpoint resumes;
# - bad input: stage 5 is refused before any work, naming the file and
#   line; stage 1 and stage 3 on one rank train as stage 0 with a note.
#
# BACKEND cuda-emu (ctest cuda_emu_zero) runs a short form, the rest taking
# minutes on the emulated device and being the same code above the
# backend: the exact case on 2 ranks, 4 steps, where the CUDA backend's
# reduce-scatter and all-gather (NCCL's, emulated over MPI) run from the
# bucket hooks of a captured CUDA graph; the traces (TG_CUDA_TRACE, both
# ranks) show the grad step run op by op no more often at stages 1 and 2
# than at stage 0 (one "allreduce B" line a bucket point, and at stages 1
# and 2 one reduce-scatter there), the other steps being replays.  Stage 3
# likewise: its all-gathers and reduce-scatters are ops of the graph
# (NCCL on the communication stream inside the captured CUDA graph), each
# traced once a rank (the eager run), one reduce-scatter a parameter.
set -u
src=$(cd "$2" && pwd)
backend=${3:-cpu}
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
backend = "$backend"
precision = "f32"
batch_size = 1
block_size = 32
learning_rate = 3e-3
min_lr = 3e-4
warmup_steps = 2
lr_decay_steps = 20
max_steps = 20
eval_interval = 0
sample_tokens = 0
checkpoint_interval = 0
CFG

# run NAME NPROC ARGS...: a training run into $tmp/NAME
run() {
  local name=$1 n=$2
  shift 2
  expect_status 0 "$tgrun" --nproc "$n" "$tmp/small.cfg" out_dir="$tmp/$name" "$@"
  cp "$tmp/out" "$tmp/$name.out"
}

# same_ckpt A B WHAT: the two runs' checkpoints are the same bytes
same_ckpt() {
  if cmp -s "$tmp/$1/ckpt.safetensors" "$tmp/$2/ckpt.safetensors"; then ok; else
    bad "$3: $2's checkpoint differs from $1's"
    /usr/bin/python3 tests/cli/compare_safetensors.py "$tmp/$1/ckpt.safetensors" "$tmp/$2/ckpt.safetensors" 0 | tail -3
  fi
}

if [ "$backend" = cuda-emu ]; then
  for stage in 0 1 2 3; do
    TG_CUDA_TRACE=$tmp/trace$stage run "emu-$stage" 2 zero=$stage grad_clip=0 max_steps=4 lr_decay_steps=4 eval_batches=1
    [ "$stage" = 3 ] || contains "$tmp/emu-$stage.out" "bit-identical after every step"
  done
  points0=$(grep -c '^allreduce ' "$tmp/trace0")
  if [ "$points0" -gt 0 ] && [ "$points0" -lt 8 ]; then ok; else bad "stage 0: $points0 bucket points run op by op in 2 x 4 steps"; fi
  for stage in 1 2; do
    same_ckpt emu-0 "emu-$stage" "stage $stage on 2 ranks of cuda-emu"
    if cmp -s <(grep -o '"loss":[^,]*' "$tmp/emu-0/metrics.jsonl") <(grep -o '"loss":[^,]*' "$tmp/emu-$stage/metrics.jsonl")
    then ok; else bad "stage $stage's losses on cuda-emu differ from stage 0's"; fi
    points=$(grep -c '^allreduce ' "$tmp/trace$stage") scatters=$(grep -c '^reduce-scatter of' "$tmp/trace$stage")
    if [ "$points" -eq "$points0" ] && [ "$scatters" -eq "$points" ]; then ok
    else bad "stage $stage: $points bucket points and $scatters reduce-scatters run op by op, stage 0 $points0 points"; fi
  done
  same_ckpt emu-0 emu-3 "stage 3 on 2 ranks of cuda-emu"
  if cmp -s <(grep -o '"loss":[^,]*' "$tmp/emu-0/metrics.jsonl") <(grep -o '"loss":[^,]*' "$tmp/emu-3/metrics.jsonl")
  then ok; else bad "stage 3's losses on cuda-emu differ from stage 0's"; fi
  # 28 parameters: one reduce_scatter each in the one eager grad run of each rank
  scatters=$(grep -c '^reduce_scatter k' "$tmp/trace3") gathers=$(grep -c '^all_gather k' "$tmp/trace3")
  if [ "$scatters" -eq 56 ] && [ "$gathers" -gt 56 ]; then ok
  else bad "stage 3: $scatters reduce_scatters and $gathers all_gathers run op by op (expected 56 and more than 56)"; fi
  finish
  exit
fi

# close_runs A B: losses within 1e-6 relative, grad norms within 1e-5,
# weights and moments within 5e-3 of each tensor's scale (see the top)
close_runs() {
  if /usr/bin/python3 - "$tmp/$1/metrics.jsonl" "$tmp/$2/metrics.jsonl" <<'PY'
import json, sys
def rows(p):
    return [r for r in map(json.loads, open(p)) if "loss" in r and "grad_norm" in r]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) == len(b) == 20, (len(a), len(b))
dl = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
dg = max(abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"]) for x, y in zip(a, b))
print("losses differ by %.3g relative (limit 1e-6), grad norms by %.3g (limit 1e-5)" % (dl, dg))
sys.exit(0 if dl <= 1e-6 and dg <= 1e-5 else 1)
PY
  then ok; else bad "$2's losses or grad norms are not within the limits of $1's"; fi
  if /usr/bin/python3 tests/cli/compare_safetensors.py "$tmp/$1/ckpt.safetensors" "$tmp/$2/ckpt.safetensors" 5e-3 | tail -1
  then ok; else bad "$2's weights are not within 5e-3 of $1's"; fi
}

# exact, on 2 and 4 ranks
for n in 2 4; do
  for stage in 0 1 2 3; do
    run "exact$n-$stage" $n zero=$stage grad_clip=0
  done
  contains "$tmp/exact$n-0.out" "zero 0: every rank keeps every gradient"
  contains "$tmp/exact$n-1.out" "zero 1: each rank keeps AdamW's moments of its shard"
  contains "$tmp/exact$n-2.out" "zero 2: each rank keeps the gradients and AdamW's moments of its shard"
  contains "$tmp/exact$n-2.out" "bit-identical after every step"
  contains "$tmp/exact$n-3.out" "zero 3: each rank keeps its shard of every parameter"
  same_ckpt "exact$n-0" "exact$n-1" "stage 1 on $n ranks"
  same_ckpt "exact$n-0" "exact$n-2" "stage 2 on $n ranks"
  same_ckpt "exact$n-0" "exact$n-3" "stage 3 on $n ranks"
  for stage in 1 2 3; do
    if cmp -s <(grep -o '"loss":[^,]*' "$tmp/exact$n-0/metrics.jsonl") \
              <(grep -o '"loss":[^,]*' "$tmp/exact$n-$stage/metrics.jsonl"); then ok
    else bad "stage $stage's losses on $n ranks differ from stage 0's"; fi
  done
done

# 8 ranks of a 4-wide model: shards are 128 elements, so ranks 4 to 7 hold
# no element of any parameter; they still take part in every collective
# (the norm's all_reduce feeds zeros from them), and stages 1 and 3 give
# stage 0's checkpoint exactly
for stage in 0 1 3; do
  run "wide8-$stage" 8 zero=$stage grad_clip=0 threads=1 model.n_embd=4 model.n_layer=1 max_steps=3 lr_decay_steps=3
done
same_ckpt wide8-0 wide8-1 "stage 1 on 8 ranks, 4 of them holding nothing"
same_ckpt wide8-0 wide8-3 "stage 3 on 8 ranks, 4 of them holding nothing"

# precision bf16: the f32 masters the model reads only as bf16 copies are
# sharded too, and the copies are what the all-gather moves; the same bytes
for stage in 0 1 2 3; do
  run "bf16-$stage" 2 zero=$stage grad_clip=0 precision=bf16
done
contains "$tmp/bf16-1.out" "and the f32 master weights of the 16 (of 28) the model reads only as bf16 copies"
same_ckpt bf16-0 bf16-1 "stage 1 at bf16"
same_ckpt bf16-0 bf16-2 "stage 2 at bf16"
same_ckpt bf16-0 bf16-3 "stage 3 at bf16 (the bf16 copies' shards gathered)"
# and they resume: 10 + 10 steps at stage 1, bf16
run bf16-half 2 zero=1 grad_clip=0 precision=bf16 max_steps=10
run bf16-half 2 zero=1 grad_clip=0 precision=bf16 resume=true
same_ckpt bf16-1 bf16-half "10 + 10 steps at stage 1, bf16"

# the reference interpreter (its collectives in doubles) likewise, 3 steps
if [ "$backend" = cpu ]; then
  for stage in 0 1 2 3; do
    run "ref-$stage" 2 zero=$stage grad_clip=0 max_steps=3 backend=ref
  done
  same_ckpt ref-0 ref-1 "stage 1 on the reference interpreter"
  same_ckpt ref-0 ref-2 "stage 2 on the reference interpreter"
  same_ckpt ref-0 ref-3 "stage 3 on the reference interpreter"
fi

# clipping and accumulation: within the limits argued at the top
for stage in 0 1 2 3; do
  run "clip-$stage" 2 zero=$stage grad_accum=2
done
close_runs clip-0 clip-1
close_runs clip-0 clip-2
close_runs clip-0 clip-3

# resume exactly: 10 + 10 steps at stage 2 = 20 steps (exact2-2)
run half 2 zero=2 grad_clip=0 max_steps=10
run half 2 zero=2 grad_clip=0 resume=true
contains "$tmp/out" "resumed from"
same_ckpt exact2-2 half "10 + 10 steps at stage 2"
run half3 2 zero=3 grad_clip=0 max_steps=10
run half3 2 zero=3 grad_clip=0 resume=true
same_ckpt exact2-3 half3 "10 + 10 steps at stage 3"

# resume another way: stage 1 on 2 ranks, then one step on 4 ranks at
# stage 2 and at stage 0 from the same checkpoint: the same step
run ten 2 zero=1 grad_clip=0 max_steps=10
mkdir -p "$tmp/re2" "$tmp/re0"
for d in re2 re0; do
  cp "$tmp/ten/ckpt.safetensors" "$tmp/$d/"
  cp "$tmp/ten/metrics.jsonl" "$tmp/$d/"
done
mkdir -p "$tmp/re3"
cp "$tmp/ten/ckpt.safetensors" "$tmp/ten/metrics.jsonl" "$tmp/re3/"
run re2 4 zero=2 grad_clip=0 max_steps=11 resume=true
run re0 4 zero=0 grad_clip=0 max_steps=11 resume=true
run re3 4 zero=3 grad_clip=0 max_steps=11 resume=true
same_ckpt re0 re2 "a 2-rank stage 1 checkpoint resumed on 4 ranks at stage 2"
same_ckpt re0 re3 "a 2-rank stage 1 checkpoint resumed on 4 ranks at stage 3"

# rank_pid MARK R: the pid of rank R of the job started with TG_TEST_MARK=MARK
rank_pid() {
  for e in /proc/[0-9]*/environ; do
    [ -r "$e" ] || continue
    if { tr '\0' '\n' < "$e"; } 2> /dev/null | grep -qx "TG_TEST_MARK=$1" &&
      { tr '\0' '\n' < "$e"; } 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      basename "$(dirname "$e")"
      return
    fi
  done
}

# stop_rank STAGE: rank 1 stops (SIGSTOP) mid-run at ZeRO stage STAGE; the
# collectives hold rank_timeout (stage 2: the backend's reduce-scatters and
# all-gathers; stage 3: the graph's own), and rank 0 names rank 1 and ends
# the job
stop_rank() {
  local stage=$1 mark=$tmp.stop$1
  TG_TEST_MARK=$mark "$tgrun" --nproc 2 "$tmp/small.cfg" out_dir="$tmp/stop$stage" zero="$stage" \
    max_steps=100000000 log_interval=100000000 rank_timeout=5 > "$tmp/stop$stage.out" 2>&1 &
  local job=$! victim
  for _ in $(seq 600); do grep -q "^training" "$tmp/stop$stage.out" && break; sleep 0.1; done
  victim=$(rank_pid "$mark" 1)
  if [ -z "$victim" ]; then
    bad "could not find rank 1 of the zero = $stage job"
    kill $job
    return
  fi
  kill -STOP "$victim"
  for _ in $(seq 600); do kill -0 $job 2> /dev/null || break; sleep 0.1; done
  if kill -0 $job 2> /dev/null; then bad "the zero = $stage job did not end within 60 s of a rank stopping"; kill -9 $job; else ok; fi
  wait $job
  [ $? -ne 0 ] && ok || bad "the zero = $stage job ended with status 0 after a rank stopped"
  contains "$tmp/stop$stage.out" "for rank 1, which did not answer"
  kill -9 "$victim" 2> /dev/null
}
stop_rank 2
stop_rank 3

# kill_rank STAGE: rank 1 dies (SIGKILL) after checkpoints at ZeRO stage
# STAGE: the job ends, and the last checkpoint (the shards gathered into
# one file) resumes
kill_rank() {
  local stage=$1 mark=$tmp.kill$1 done_steps
  TG_TEST_MARK=$mark "$tgrun" --nproc 2 "$tmp/small.cfg" out_dir="$tmp/kill$stage" zero="$stage" \
    max_steps=100000000 log_interval=100000000 checkpoint_interval=3 rank_timeout=5 > "$tmp/kill$stage.out" 2>&1 &
  local job=$! victim
  for _ in $(seq 600); do [ "$(grep -c '^checkpoint:' "$tmp/kill$stage.out")" -ge 2 ] && break; sleep 0.1; done
  victim=$(rank_pid "$mark" 1)
  if [ -z "$victim" ]; then
    bad "could not find rank 1 of the zero = $stage job to kill"
    kill $job
    return
  fi
  kill -9 "$victim"
  for _ in $(seq 600); do kill -0 $job 2> /dev/null || break; sleep 0.1; done
  if kill -0 $job 2> /dev/null; then bad "the zero = $stage job did not end within 60 s of a rank dying"; kill -9 $job; else ok; fi
  wait $job
  [ $? -ne 0 ] && ok || bad "the zero = $stage job ended with status 0 after a rank died"
  done_steps=$(sed -n 's/^checkpoint: .* at step \([0-9]*\) .*/\1/p' "$tmp/kill$stage.out" | tail -1)
  if [ -n "$done_steps" ]; then
    run "kill$stage" 2 zero="$stage" resume=true max_steps=$((done_steps + 3))
    contains "$tmp/out" "$done_steps steps done"
  else bad "the zero = $stage job wrote no checkpoint before rank 1 was killed"; fi
}
kill_rank 2
kill_rank 3

# bad input, before any work
expect_status 2 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/z5" zero=5
contains "$tmp/out" "zero must be in [0, 3], not 5"
cat "$tmp/small.cfg" > "$tmp/z4.cfg"
printf 'zero = 4\n' >> "$tmp/z4.cfg"
expect_status 1 "$tgrun" "$tmp/z4.cfg" out_dir="$tmp/z4"
contains "$tmp/out" "z4.cfg:19:8: error: zero must be in [0, 3], not 4"
# a plan larger than the machine counts every rank on it
expect_status 1 "$tgrun" --nproc 2 "$tmp/small.cfg" out_dir="$tmp/big" zero=2 batch_size=16777216
contains "$tmp/out" "for each of the 2 ranks on this machine"
contains "$tmp/out" "is the largest that would fit"
# one rank: stage 0, with a note
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/one" zero=1 max_steps=2
contains "$tmp/out" "note: zero = 1 with one rank: nothing to shard; training as zero = 0"
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/one3" zero=3 max_steps=2
contains "$tmp/out" "note: zero = 3 with one rank: nothing to shard; training as zero = 0"

finish
