#!/usr/bin/env bash
# run_torch_reference.sh TGRUN SRCDIR: tg against PyTorch on a small GPT-2.
#
# One set of weights (tgrun init) and one batch; PyTorch (Debian's
# /usr/bin/python3, CPU, nanoGPT's model in Hugging Face's layout) and
# tgrun --backend ref compute the loss and every gradient, and then five
# AdamW steps with clipping.  Tolerances, and why:
#   float64 gradients: 1e-6 of each tensor's largest entry.  Both sides
#     compute in double; the files hold float32, whose rounding (6e-8
#     relative) is all that should differ; a wrong formula is off by far
#     more than 1e-6.
#   float32 gradients: 1e-5 of each tensor's largest entry.  Float32 sums
#     of up to a few thousand terms, in different orders on each side,
#     differ by ~sqrt(n)·6e-8 ≈ 1e-6 relative; 1e-5 is that with margin.
#   5 AdamW steps: in float64 the losses within 1e-9 and the weights within
#     1e-6; in float32 the losses within 1e-4 (why: see the step checks).
#   bf16: tg's mixed precision (--precision bf16, the CPU backend) against
#     PyTorch's bf16 autocast on the CPU, the same weights and batch; the
#     tolerances are argued at the checks.
set -u
tgrun=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
py=/usr/bin/python3
ref="$src/tests/torch/gpt2_reference.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -c 'import torch, numpy' 2> /dev/null; then
  echo "FAIL: $py cannot import torch and numpy (apt-get install python3-torch; tools/install-deps.sh does)"
  exit 1
fi
cd "$src"
pass=0
fail=0
check() {
  local what=$1
  shift
  if "$@" > "$tmp/out" 2>&1; then
    pass=$((pass + 1))
    echo "ok: $what: $(tail -1 "$tmp/out")"
  else
    fail=$((fail + 1))
    echo "FAIL: $what"
    cat "$tmp/out"
  fi
}

# A 2-layer GPT-2 with the real vocabulary, as small elsewhere as is useful.
model=(models/gpt2.tg -D n_layer=2 -D n_embd=64 -D n_head=4 -D block_size=32)
check "init" "$tgrun" init "${model[@]}" --seed 7 --out "$tmp/w.safetensors"
check "batch" "$py" "$ref" batch --out "$tmp/x.safetensors" --B 2 --T 16 --vocab 50257 --seed 3

for prec in f64 f32; do
  torch_dtype=float32 rtol=1e-5
  if [ $prec = f64 ]; then torch_dtype=float64 rtol=1e-6; fi
  check "tgrun grad ($prec)" "$tgrun" grad "${model[@]}" --precision $prec \
    --weights "$tmp/w.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/tg-$prec.safetensors"
  check "torch grad ($torch_dtype)" "$py" "$ref" grad --n-head 4 --dtype $torch_dtype \
    --weights "$tmp/w.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/pt-$prec.safetensors"
  check "loss and gradients agree ($prec, rtol $rtol)" \
    "$py" "$ref" compare "$tmp/tg-$prec.safetensors" "$tmp/pt-$prec.safetensors" --rtol $rtol
done

# Five AdamW steps with clipping (a large lr makes the steps matter), in
# both precisions.
step=(--weights "$tmp/w.safetensors" --batch "$tmp/x.safetensors" --lr 1e-2 --steps 5 --clip 1.0)
compare_losses() { # tg-steps torch-steps rtol
  "$py" - "$@" << 'PY'
import re, sys
def losses(path):
    return [float(m.group(1)) for m in re.finditer(r"loss (\S+)", open(path).read())]
a, b, rtol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) == 5, (a, b)
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("tg   ", " ".join(f"{x:.7f}" for x in a))
print("torch", " ".join(f"{y:.7f}" for y in b))
assert a[-1] < a[0] - 0.1, "the steps did not lower the loss"
assert worst <= rtol, f"losses differ by {worst:.3g} relative"
print(f"5 losses agree: worst relative difference {worst:.3g} (limit {rtol:g})")
PY
}
for prec in f64 f32; do
  torch_dtype=float32
  [ $prec = f64 ] && torch_dtype=float64
  check "tgrun step ($prec)" "$tgrun" step "${model[@]}" "${step[@]}" --precision $prec \
    --out "$tmp/tg-w5-$prec.safetensors"
  cp "$tmp/out" "$tmp/tg-steps-$prec.txt"
  check "torch step ($torch_dtype)" "$py" "$ref" step --n-head 4 "${step[@]}" --dtype $torch_dtype \
    --out "$tmp/pt-w5-$prec.safetensors"
  cp "$tmp/out" "$tmp/pt-steps-$prec.txt"
done
# float64: the same arithmetic on both sides; only the files' float32 differ.
check "losses of 5 AdamW steps agree (f64, rtol 1e-9)" \
  compare_losses "$tmp/tg-steps-f64.txt" "$tmp/pt-steps-f64.txt" 1e-9
check "weights after 5 steps agree (f64, rtol 1e-6)" \
  "$py" "$ref" compare "$tmp/tg-w5-f64.safetensors" "$tmp/pt-w5-f64.safetensors" --rtol 1e-6
# float32: AdamW divides each gradient by its own running magnitude, so an
# element whose gradient is near zero moves by about ±lr whichever way
# rounding tips it; the two float32 computations round differently, and
# their losses drift apart by ~1e-5 over 5 steps at lr 1e-2 (the weights by
# ~1e-2 of their range in such elements).  1e-4 on the loss is that drift
# with margin; a wrong update rule would be off by far more, and float64
# above pins the rule itself.
check "losses of 5 AdamW steps agree (f32, rtol 1e-4)" \
  compare_losses "$tmp/tg-steps-f32.txt" "$tmp/pt-steps-f32.txt" 1e-4

# bf16: tg's policy (passes/precision.c) against PyTorch's autocast.  Its
# matmuls round as autocast means them (bf16 operands, f32 accumulation,
# bf16 result) spelled out in gpt2_reference.py's mm(): PyTorch 1.13's own
# bf16 matmul accumulates in bf16 on a CPU without AVX-512 (11% off on a
# 3000-term sum, measured), which made this check depend on the CPU.  The two
# round in different places: both multiply bf16 operands into bf16 results
# with f32 accumulation and keep the parameters, the optimizer and the
# loss f32, but tg keeps the residual stream bf16 and computes GELU,
# softmax and layernorm in f32 registers, where autocast keeps the residual
# f32 and runs GELU and softmax on bf16 tensors.  Each rounding is 2^-9
# relative at most.
#   gradients: each carries the roundings of the activations saved for it
#     along the backward; measured 1e-2 of a tensor's largest entry between
#     tg and autocast (and 7e-3 between PyTorch's own f32 and autocast), so
#     3e-2 is allowed; a wrong gradient is off by O(1).
#   the first loss (the same weights): tg's bf16 residual stream moves each
#     hidden value by up to 2^-9 of it where autocast's stays f32; through
#     the head that is ~1e-3 on a logit, averaged over 32 positions' losses
#     of ~10: measured 1.3e-5 relative, 1e-4 allowed.
#   5 AdamW steps at lr 1e-2: AdamW moves each weight by about lr whatever
#     its gradient's size, so a gradient near zero whose sign the roundings
#     tip moves its weight the other way; measured 1.3e-3 relative on the
#     losses, 3e-3 allowed, below the 5e-3 by which PyTorch's own f32 run
#     differs from autocast; and tg must be nearer autocast than that f32
#     run is, or the check could not tell bf16 from f32.
check "tgrun grad (bf16, cpu)" "$tgrun" grad "${model[@]}" --precision bf16 --backend cpu \
  --weights "$tmp/w.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/tg-bf16.safetensors"
check "torch grad (bf16 autocast)" "$py" "$ref" grad --n-head 4 --autocast \
  --weights "$tmp/w.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/pt-bf16.safetensors"
check "loss and gradients agree (bf16, rtol 3e-2)" \
  "$py" "$ref" compare "$tmp/tg-bf16.safetensors" "$tmp/pt-bf16.safetensors" --rtol 3e-2
check "tgrun step (bf16, cpu)" "$tgrun" step "${model[@]}" "${step[@]}" --precision bf16 --backend cpu \
  --out "$tmp/tg-w5-bf16.safetensors"
cp "$tmp/out" "$tmp/tg-steps-bf16.txt"
check "torch step (bf16 autocast)" "$py" "$ref" step --n-head 4 "${step[@]}" --autocast \
  --out "$tmp/pt-w5-bf16.safetensors"
cp "$tmp/out" "$tmp/pt-steps-bf16.txt"
bf16_losses() { # tg-bf16 torch-autocast torch-f32
  "$py" - "$@" << 'PY'
import re, sys
def losses(path):
    return [float(m.group(1)) for m in re.finditer(r"loss (\S+)", open(path).read())]
tg, ac, f32 = (losses(p) for p in sys.argv[1:4])
assert len(tg) == len(ac) == len(f32) == 5, (tg, ac, f32)
rel = lambda a, b: max(abs(x - y) / abs(y) for x, y in zip(a, b))
first = abs(tg[0] - ac[0]) / abs(ac[0])
print("tg bf16      ", " ".join(f"{x:.7f}" for x in tg))
print("torch autocast", " ".join(f"{x:.7f}" for x in ac))
print("torch f32    ", " ".join(f"{x:.7f}" for x in f32))
assert tg[-1] < tg[0] - 0.1, "the steps did not lower the loss"
assert first <= 1e-4, f"the first losses differ by {first:.3g} relative (limit 1e-4)"
assert rel(tg, ac) <= 3e-3, f"losses differ by {rel(tg, ac):.3g} relative (limit 3e-3)"
assert rel(tg, ac) < rel(f32, ac), "tg's bf16 is no nearer autocast than PyTorch's f32"
print(f"5 losses agree: first {first:.2g}, worst {rel(tg, ac):.3g} relative (limit 3e-3; "
      f"PyTorch f32 against autocast: {rel(f32, ac):.3g})")
PY
}
check "losses of 5 AdamW steps agree (bf16 against autocast, rtol 3e-3)" \
  bf16_losses "$tmp/tg-steps-bf16.txt" "$tmp/pt-steps-bf16.txt" "$tmp/pt-steps-f32.txt"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
