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

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
