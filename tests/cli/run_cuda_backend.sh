#!/usr/bin/env bash
# run_cuda_backend.sh BACKEND TGRUN TGC SRCDIR [PART...]: the CUDA backend
# end to end on a 2-layer GPT: BACKEND is cuda-emu (CI: the emulated device
# runs every kernel on the CPU, checking every access) or cuda (a real GPU:
# tools/gpu_check.sh, which runs one PART at a time, each a row of its table
# under its own time limit).  The PARTs (all but the sanitizers by default):
#
# grads   gradients in f32 and in bf16 (the mixed-precision policy, the CUDA
#         backends' default) against the reference interpreter; bf16 is the
#         default; TG_CUDA_SYNC=1 gives the same; a bad backend name is named;
# steps   the losses of 5 AdamW steps against the CPU backend, in f32 and
#         bf16; every kernel of the training step runs: the launches traced
#         (TG_CUDA_TRACE) cover every function of the manifest of the same
#         step, forward, backward, optimizer and flash attention;
# graphs  the step replays as a CUDA graph after its warm-up and gives the
#         same losses as launch by launch (TG_CUDA_GRAPHS=0);
# train   a short training run (graphs on) on 1 rank with batch 4 and 2
#         ranks with batch 2 (1 rank only with one GPU or TG_ONE_RANK);
# memcheck, racecheck
#         two steps launch by launch under compute-sanitizer --tool PART
#         (TG_COMPUTE_SANITIZER: its path; on cuda-emu the emulated device,
#         which checks every access itself, runs the steps without it).
#
# Each part ends with a "result: ..." line that gpu_check.sh's row shows.
# The Python (numpy) is ${TG_PYTHON:-python3}, or /usr/bin/python3 where
# that has no numpy (a pyenv python3 here; the GPU machine's python3 is
# the virtual environment that holds numpy and PyTorch).
#
# Tolerances.  The CUDA step is f32 except flash attention, whose kernels
# multiply on the bf16 tensor cores (q, k, v, the probabilities and the
# output gradient rounded to bf16: 8 significant bits, a relative rounding
# of at most 2^-9 = 2e-3 each; fp32 accumulation).  A gradient that
# reaches the loss through an attention carries several such roundings,
# and the backward's P (dP - Di) subtracts nearly equal terms, which turns
# them into a larger relative error, largest in the bias gradients (the
# limits, by kind of gradient, are below).  A wrong index, a missing
# rescale or a swapped operand is off by O(1) of the scale.  The CPU
# backend's flash attention is f32;
# AdamW's first steps move every weight by about lr whatever the size of
# its gradient (m / sqrt(v) is the gradient's sign), so a gradient near
# zero whose sign the bf16 roundings flip moves the other way: at lr 1e-2
# that compounds into a few percent of the loss after 5 steps of this tiny
# model.  At lr 1e-3 the two backends' 5 losses stay within 1e-5 relative
# (measured); the limit is 1e-4, as for the CPU backend against the
# reference (run_cpu_backend.sh), where a broken kernel is off by 1e-1 or
# more.
#
# In bf16 every backend rounds the same values to bf16 (each value's
# dtype is the compiler's, the interpreter rounds each to it), so the
# backends differ only where they already did, the attention: the CUDA
# kernels round the probabilities to bf16 before P @ V (FlashAttention-2's
# choice), the CPU's and the interpreter's keep them f32.  That moves the
# attention's bf16 output by an ulp (2^-8) here and there, and the bf16
# residual stream after it keeps such a flip (the gradients' limits are
# below, by kind); the 5 steps' losses measured 1.8e-4 relative from the
# CPU backend's, so 1e-3 is allowed (a broken kernel is off by 1e-2 or
# more).  Without attention (an MLP) the three agree to
# 5e-7.
#
# Re-measured on cuda-emu once the emulator rounded as the GPU does
# (cuBLASLt's f32 accumulator with fused multiply-adds, the kernels built
# with FMA contraction like NVRTC's default; docs/cuda-emu.md): f32
# step losses 9.3e-6 (limit 1e-4), bf16 step losses 5.7e-5 (limit 1e-3).
#
# The gradients, by kind.  How much a flipped rounding weighs in a gradient
# depends on how much its sum cancels: a weight's gradient x^T dy sums
# terms whose magnitudes add to 1.6-4.4 times its largest element, a
# bias's (the column sum of dy over the batch's 128 rows) to 4-23 times
# (measured in float64 with PyTorch, seeds 1, 4, 7, 10), so the same flips
# weigh up to five times more of a bias's scale.  Measured on cuda-emu
# against the interpreter over init seeds 1-12: f32, the weights,
# embeddings and layernorm weights within 3.2e-3 of a tensor's largest
# element (limit 2e-2), the biases 4.5e-3 to 1.2e-2 (limit 4e-2); bf16,
# the weights within 9.3e-3 (limit 3e-2), the biases 1.3e-2 to 2.4e-2
# (limit 6e-2).  Each limit is 2.5 to 6.3 times the worst measured: room
# for a GPU's other summation orders (which flip other values); a wrong index
# or a dropped row is off by O(1) (one row's term of a bias gradient is
# 0.4-0.8 of its largest element).  Every limit still stands on the bf16
# attention's error, which f32 summation order (some k u = 1e-5 of a
# product) does not approach.
set -u
backend=$1
src=$(cd "$4" && pwd)
# shellcheck source=tests/cli/testlib.sh
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$2")
tgc=$(abspath "$3")
shift 4
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(grads steps graphs train)
py=${TG_PYTHON:-python3}
"$py" -c 'import numpy' 2> /dev/null || py=/usr/bin/python3
echo "python (numpy): $py"
mk=("$py" "$src/tests/cli/make_safetensors.py")
cmp=("$py" "$src/tests/cli/compare_safetensors.py")
export TG_CACHE=${TG_CACHE:-$tmp/cache}
cd "$src" || exit 2

m=(models/gpt2.tg -D n_layer=2 -D n_embd=64 -D n_head=4 -D vocab=65 -D block_size=32)
W=$tmp/w.safetensors X=$tmp/x.safetensors
expect_status 0 "$tgrun" init "${m[@]}" --seed 7 --out "$W"
idx=$(seq 0 127 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37 + 11) % 65 }')
tgt=$(seq 0 127 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 53 + 5) % 65 }')
"${mk[@]}" "$X" "idx:I32:4x32:$idx" "targets:I32:4x32:$tgt"

# Both policies: gradients against the reference interpreter.
part_grads() {
  local p limit bias_limit worst=()
  for p in f32 bf16; do
    limit=2e-2 bias_limit=4e-2
    [ $p = bf16 ] && limit=3e-2 bias_limit=6e-2
    expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/ref_$p.safetensors" --precision $p
    expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/cuda_$p.safetensors" \
      --backend "$backend" --precision $p
    expect_status 0 "${cmp[@]}" "$tmp/ref_$p.safetensors" "$tmp/cuda_$p.safetensors" $limit "*.bias=$bias_limit"
    echo "$p: $(cat "$tmp/out")"
    worst+=("$p $(sed -n 's/^[0-9]* tensors, worst .* at \([0-9.e+-]*\) of its scale (limit \(.*\))/\1 (limit \2)/p' "$tmp/out" | tail -1), biases $(sed -n 's/^\*\.bias: .* at \([0-9.e+-]*\) of its scale (its own limit \(.*\))/\1 (limit \2)/p' "$tmp/out")")
  done
  # the default on a cuda backend is bf16
  expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/cuda_default.safetensors" \
    --backend "$backend"
  expect_status 0 "${cmp[@]}" "$tmp/cuda_bf16.safetensors" "$tmp/cuda_default.safetensors" 0
  # TG_CUDA_SYNC=1 checks after every launch, with the same results
  TG_CUDA_SYNC=1 expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/sync.safetensors" \
    --backend "$backend" --precision bf16
  expect_status 0 "${cmp[@]}" "$tmp/cuda_bf16.safetensors" "$tmp/sync.safetensors" 0
  # a backend that is not there is named
  expect_status 2 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/x" --backend cdua
  contains "$tmp/out" "did you mean 'cuda'"
  echo "result: gradients against the interpreter, worst of a tensor's scale: ${worst[0]}, ${worst[1]}"
}

# cuda_steps FILE [ENV...]: 5 bf16 AdamW steps on the backend, their losses to FILE
cuda_steps() {
  local file=$1
  shift
  env "$@" "$tgrun" step "${m[@]}" --weights "$W" --batch "$X" --lr 1e-3 --steps 5 \
    --out "$tmp/s_$(basename "$file").safetensors" --backend "$backend" --precision bf16 > "$tmp/out" 2>&1 ||
    { bad "5 steps on $backend ($*) failed"; cat "$tmp/out"; }
  grep -o 'loss [0-9.e+-]*' "$tmp/out" > "$file"
}

# 5 AdamW steps against the CPU backend (bf16 with its launches traced),
# then every kernel of the manifest launched.
same_losses() { # CPU_FILE CUDA_FILE WHAT LIMIT
  if $py - "$1" "$2" "$3" "$4" <<'PY'
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
limit = float(sys.argv[4])
assert len(a) == len(b) == 5, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(sys.argv[3], "step losses cpu", a, "cuda", b, "worst relative difference %.3g (limit %g)" % (worst, limit))
sys.exit(0 if worst <= limit and b[-1] < b[0] else 1)
PY
  then ok; else bad "the CUDA backend's $3 step losses differ from the CPU backend's"; fi
}
part_steps() {
  local p steps
  for p in f32 bf16; do
    steps=1e-4; [ $p = bf16 ] && steps=1e-3
    expect_status 0 "$tgrun" step "${m[@]}" --weights "$W" --batch "$X" --lr 1e-3 --steps 5 \
      --out "$tmp/s_cpu_$p.safetensors" --backend cpu --precision $p
    grep -o 'loss [0-9.e+-]*' "$tmp/out" > "$tmp/cpu_losses_$p"
    if [ $p = bf16 ]; then
      cuda_steps "$tmp/cuda_losses_bf16" TG_CUDA_TRACE="$tmp/trace"
    else # with every kernel timed (TG_PROFILE): the profile adds up all 5 runs
      expect_status 0 env TG_PROFILE=3 "$tgrun" step "${m[@]}" --weights "$W" --batch "$X" --lr 1e-3 --steps 5 \
        --out "$tmp/s_cuda_$p.safetensors" --backend "$backend" --precision $p
      grep -o 'loss [0-9.e+-]*' "$tmp/out" > "$tmp/cuda_losses_$p"
      contains "$tmp/out" "ms in all over 5 runs on"
    fi
    same_losses "$tmp/cpu_losses_$p" "$tmp/cuda_losses_$p" $p $steps > "$tmp/same_$p"
    cat "$tmp/same_$p"
  done
  # every function of the step's manifest ran at least once (the manifest
  # of the step traced above: bf16, as tgc --emit cuda makes by default)
  expect_status 0 "$tgc" "${m[@]}" -D B=4 -D T=32 --emit cuda -o "$tmp/cu"
  if $py - "$tmp/cu/manifest.json" "$tmp/trace" > "$tmp/coverage" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
want = {l["function"] for k in m["kernels"] for l in k["launches"] if "function" in l}
got = {}
for line in open(sys.argv[2]):
    parts = line.split()
    if parts and parts[0] == "launch":
        got[parts[1]] = got.get(parts[1], 0) + 1
missing = sorted(want - set(got))
print("%d of the manifest's %d functions launched (%d distinct, %d launches in all); missing: %s"
      % (len(want) - len(missing), len(want), len(got), sum(got.values()), missing or "none"))
sys.exit(0 if not missing and want else 1)
PY
  then ok; else bad "some kernel of the step never ran"; fi
  cat "$tmp/coverage"
  if grep -q "^matmul " "$tmp/trace"; then ok; else bad "the trace shows no matmul"; fi
  echo "result: 5 steps' losses against the CPU backend, worst relative: f32 $(grep -o '[0-9.e+-]* (limit' "$tmp/same_f32" | cut -d' ' -f1), bf16 $(grep -o '[0-9.e+-]* (limit' "$tmp/same_bf16" | cut -d' ' -f1); $(cut -d';' -f1 "$tmp/coverage")"
}

# launch by launch (no graphs) gives the same losses as the replays
part_graphs() {
  # the graphed steps from part_steps when it ran, else its own (traced)
  [ -s "$tmp/cuda_losses_bf16" ] || cuda_steps "$tmp/cuda_losses_bf16" TG_CUDA_TRACE="$tmp/trace"
  if grep -q "^graph " "$tmp/trace"; then ok; else bad "the trace shows no replay of a captured graph"; fi
  cuda_steps "$tmp/nograph_losses" TG_CUDA_GRAPHS=0
  if [ -s "$tmp/nograph_losses" ] && cmp -s "$tmp/cuda_losses_bf16" "$tmp/nograph_losses"; then ok; else
    bad "replaying the captured step changes the losses:"; paste "$tmp/cuda_losses_bf16" "$tmp/nograph_losses"; fi
  echo "result: $(grep -c '^graph ' "$tmp/trace") graph replays; their 5 losses = launch by launch's, bit for bit ($(head -1 "$tmp/nograph_losses" | cut -d' ' -f2) .. $(tail -1 "$tmp/nograph_losses" | cut -d' ' -f2))"
}

# training (bf16, the default here): 2 ranks x batch 2 = 1 rank x batch 4
# (as tests/cli/run_train.sh on the CPU: within 1e-4 relative, plus the
# bf16 attention and activations: 2e-3)
losses() { $py -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if 'loss' in r and 'val_loss' not in r: print(r['step'], repr(r['loss']))" "$1"; }
part_train() {
  local data=${TG_DATA:-$src/../shared/data}
  if [ -n "${TG_SANITIZED:-}" ]; then
    echo "note: the training part is skipped in the sanitizer build (Open MPI's own allocations read as leaks)"
    echo "result: skipped in the sanitizer build"
    return
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
block_size = 32
learning_rate = 3e-3
warmup_steps = 2
lr_decay_steps = 5
max_steps = 5
eval_interval = 0
eval_batches = 2
sample_tokens = 20
CFG
  expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/one" batch_size=4
  contains "$tmp/out" "kernels   $tmp/one/kernels/*.cu"
  losses "$tmp/one/metrics.jsonl" > "$tmp/one.losses"
  local ranks="1 rank x 4"
  if [ -n "${TG_ONE_RANK:-}" ] || { [ "$backend" = cuda ] && [ "$(nvidia-smi -L 2> /dev/null | wc -l)" -lt 2 ]; }; then
    if [ -n "${TG_ONE_RANK:-}" ]; then echo "note: TG_ONE_RANK is set (a tgrun built without MPI): 1 rank only"
    else echo "note: one GPU here: the 2-rank run needs 2 (one GPU per rank); 1 rank only"; fi
  elif command -v mpirun > /dev/null; then
    expect_status 0 "$tgrun" --nproc 2 "$tmp/small.cfg" out_dir="$tmp/two" batch_size=2
    contains "$tmp/out" "bit-identical after every step"
    losses "$tmp/two/metrics.jsonl" > "$tmp/two.losses"
    if $py - "$tmp/one.losses" "$tmp/two.losses" <<'PY'
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("1 rank x 4:", a, "\n2 ranks x 2:", b, "\nworst relative difference %.3g (limit 2e-3)" % worst)
sys.exit(0 if len(a) == len(b) == 5 and worst <= 2e-3 else 1)
PY
    then ok; else bad "2 ranks' losses differ from 1 rank's"; fi
    ranks="1 rank x 4 = 2 ranks x 2"
  else
    bad "mpirun is missing (openmpi-bin)"
  fi
  echo "result: 5 steps trained ($ranks), loss $(head -1 "$tmp/one.losses" | cut -d' ' -f2 | cut -c1-6) -> $(tail -1 "$tmp/one.losses" | cut -d' ' -f2 | cut -c1-6)"
}

# two steps launch by launch under compute-sanitizer (TG_COMPUTE_SANITIZER)
part_sanitizer() { # TOOL
  local tool=$1 san=${TG_COMPUTE_SANITIZER:-}
  local run=("$tgrun" step "${m[@]}" --weights "$W" --batch "$X" --steps 2 --backend "$backend" --out "$tmp/san.safetensors")
  if [ -n "$san" ]; then
    run=("$san" --tool "$tool" --error-exitcode 99 "${run[@]}")
  elif [ "$backend" = cuda ]; then
    bad "$tool: no compute-sanitizer (TG_COMPUTE_SANITIZER)"
    echo "result: no compute-sanitizer"
    return
  fi
  TG_CUDA_GRAPHS=0 expect_status 0 "${run[@]}"
  if [ -n "$san" ]; then
    echo "result: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$tmp/out" | sed 's/^=* *//')"
  else
    echo "result: the 2 steps on the emulated device, which checks every access itself"
  fi
}

for part in "${parts[@]}"; do
  echo "== $part"
  case $part in
    grads | steps | graphs | train) "part_$part" ;;
    memcheck | racecheck) part_sanitizer "$part" ;;
    *) bad "no part '$part' (grads, steps, graphs, train, memcheck, racecheck)" ;;
  esac
done
finish
