#!/usr/bin/env bash
# run_cpu_backend.sh TGRUN TGC SRCDIR: the CPU backend (generated C, built
# with cc, its matmuls oneDNN's or OpenBLAS's) against the reference interpreter on a 2-layer GPT.
#
# Tolerances (float32 on both sides; they differ in summation order: BLAS
# and the generated loops sum in float in their own order, the reference
# sums in double and rounds each op's result to float):
#   - gradients: each tensor within 1e-5 of its largest element.  A float32
#     sum of n terms is off by at most about n * 2^-24 * sum|terms| in the
#     worst case, typically sqrt(n) * 2^-24; the longest sums here (the
#     batch's 128 rows into a weight gradient, 256 hidden units) give a few
#     1e-7 of the scale, which is what this measures (about 6e-7); 1e-5
#     leaves room without hiding a wrong index, which is off by O(1).
#   - losses of 5 AdamW steps: relative 1e-4.  AdamW divides by sqrt(v),
#     so rounding differences in tiny gradients grow into different updates
#     (the same reason as tests/torch/gpt2_reference.py's float32 limit);
#     the losses stay within a few 1e-6 here.
#   - bf16 (--precision bf16, passes/precision.c): both round every value
#     to its dtype (the interpreter rounds each op's result, the generated
#     code each value it computes or stores), so they differ only where an
#     f32 result that the two compute in different orders lies near a bf16
#     rounding boundary: then they round it an ulp apart (2^-8 of it), and
#     the bf16 roundings after keep it.  How much such a flip weighs in a
#     gradient depends on how much its sum cancels.  A weight's gradient
#     x^T dy sums terms whose magnitudes add to 1.6-4.4 times its largest
#     element; a bias's, the column sum of dy over the batch's 128 rows,
#     sums terms whose magnitudes add to 4-23 times its largest element
#     (both measured in float64 with PyTorch, seeds 1, 4, 7 and 10).  So
#     the same flips weigh up to five times more in the biases.  Measured
#     over seeds 1-12 (AVX-512 code, with either matmul library): the
#     weights, embeddings and layernorm weights within 6.8e-3 of a tensor's
#     largest element, 2e-2 allowed; the biases (linear and layernorm)
#     1.1e-2 to 2.0e-2, 5e-2 allowed.  A wrong index or a dropped row is
#     off by O(1): one row's term of a bias gradient is 0.4-0.8 of its
#     largest element.  The first loss measured 4e-6 relative, 1e-4
#     allowed; the 5 steps' losses at lr 1e-3 (at 1e-2 AdamW turns the
#     flips into 4e-3, as above) measured 9e-5 relative, 1e-3 allowed.
set -u
src=$(cd "$3" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
tgc=$(abspath "$2")
py=/usr/bin/python3
mk="$py $src/tests/cli/make_safetensors.py"
cmp="$py $src/tests/cli/compare_safetensors.py"
export TG_CACHE=$tmp/cache
cd "$src"

m=(models/gpt2.tg -D n_layer=2 -D n_embd=64 -D n_head=4 -D vocab=65 -D block_size=32)
W=$tmp/w.safetensors X=$tmp/x.safetensors
expect_status 0 "$tgrun" init "${m[@]}" --seed 7 --out "$W"
# a batch of 4 sequences of 32 pseudo-random ids below 65
idx=$(seq 0 127 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37 + 11) % 65 }')
tgt=$(seq 0 127 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 53 + 5) % 65 }')
$mk "$X" "idx:I32:4x32:$idx" "targets:I32:4x32:$tgt"

# gradients
expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/ref.safetensors"
expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/cpu.safetensors" --backend cpu
expect_status 0 $cmp "$tmp/ref.safetensors" "$tmp/cpu.safetensors" 1e-5
cat "$tmp/out"
# the second build comes from the cache
ls "$TG_CACHE"/*.so > /dev/null 2>&1 && ok || bad "no shared object in the cache"
# each matmul library (runtime/backend/cpu/cpu_gemm.h) against the reference,
# same tolerance: they sum in their own orders, as above.  oneDNN's only
# outside a sanitizer build, whose LeakSanitizer cannot walk its threads.
libs=openblas
[ -z "${TG_SANITIZED:-}" ] && libs="openblas onednn"
for lib in $libs; do
  TG_CPU_GEMM=$lib expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/$lib.safetensors" \
    --backend cpu
  expect_status 0 $cmp "$tmp/ref.safetensors" "$tmp/$lib.safetensors" 1e-5
  echo "TG_CPU_GEMM=$lib: $(cat "$tmp/out")"
done
# the two libraries' objects are two cache entries (the flag is in the key)
if [ "$libs" != openblas ]; then
  [ "$(ls "$TG_CACHE"/*.so | wc -l)" -ge 2 ] && ok || bad "one cached object for two matmul libraries"
fi
TG_CPU_GEMM=mkl expect_status 1 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/x.safetensors" \
  --backend cpu
contains "$tmp/out" "TG_CPU_GEMM=mkl names no matmul library: use onednn, openblas or auto"

# the losses of 5 AdamW steps
expect_status 0 "$tgrun" step "${m[@]}" --weights "$W" --batch "$X" --lr 1e-2 --steps 5 --out "$tmp/s1.safetensors"
grep -o 'loss [0-9.e+-]*' "$tmp/out" > "$tmp/ref_losses"
TG_KEEP_C=$tmp/step.c expect_status 0 "$tgrun" step "${m[@]}" --weights "$W" --batch "$X" --lr 1e-2 --steps 5 \
  --out "$tmp/s2.safetensors" --backend cpu
grep -o 'loss [0-9.e+-]*' "$tmp/out" > "$tmp/cpu_losses"
if $py - "$tmp/ref_losses" "$tmp/cpu_losses" <<'PY'
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
assert len(a) == len(b) == 5, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("step losses ref", a, "cpu", b, "worst relative difference %.3g (limit 1e-4)" % worst)
sys.exit(0 if worst <= 1e-4 and a[-1] < a[0] else 1)
PY
then ok; else bad "the CPU backend's step losses differ from the reference's"; fi

# bf16: the CPU backend against the reference interpreter, both rounding to bf16
expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/ref16.safetensors" --precision bf16
expect_status 0 "$tgrun" grad "${m[@]}" --weights "$W" --batch "$X" --out "$tmp/cpu16.safetensors" --backend cpu \
  --precision bf16
expect_status 0 $cmp "$tmp/ref16.safetensors" "$tmp/cpu16.safetensors" 2e-2 '*.bias=5e-2'
echo "bf16: $(cat "$tmp/out")"
expect_status 0 "$tgrun" step "${m[@]}" --weights "$W" --batch "$X" --lr 1e-3 --steps 5 --out "$tmp/s16r.safetensors" \
  --precision bf16
grep -o 'loss [0-9.e+-]*' "$tmp/out" > "$tmp/ref_losses16"
expect_status 0 "$tgrun" step "${m[@]}" --weights "$W" --batch "$X" --lr 1e-3 --steps 5 --out "$tmp/s16c.safetensors" \
  --precision bf16 --backend cpu
grep -o 'loss [0-9.e+-]*' "$tmp/out" > "$tmp/cpu_losses16"
if $py - "$tmp/ref_losses16" "$tmp/cpu_losses16" "$tmp/ref_losses" <<'PY'
import sys
a, b, f32 = ([float(l.split()[1]) for l in open(p)] for p in sys.argv[1:4])
assert len(a) == len(b) == 5, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("bf16 step losses ref", a, "cpu", b, "worst relative difference %.3g (limit 1e-3)" % worst)
# the first losses close, the steps close, and bf16 is not f32: the policy ran
sys.exit(0 if abs(a[0] - b[0]) <= 1e-4 * abs(a[0]) and worst <= 1e-3 and a[-1] < a[0] and a[0] != f32[0] else 1)
PY
then ok; else bad "the CPU backend's bf16 step losses differ from the reference's"; fi

# tgc --emit c and --emit cuda write the code, the manifest and the fusion report
expect_status 0 "$tgc" "${m[@]}" --emit c -o "$tmp/c"
for f in gpt2.c manifest.json fusion.txt; do [ -s "$tmp/c/$f" ] && ok || bad "--emit c -o wrote no $f"; done
# the C that tgc shows is the C the CPU backend ran for the same step
# (lowered alike: what is recomputed, what is stored), but for the
# header's first lines, which name the program that wrote it
expect_status 0 "$tgc" "${m[@]}" -D B=4 -D T=32 --emit c -o "$tmp/c4"
if cmp -s <(sed 1,3d "$tmp/c4/gpt2.c") <(sed 1,3d "$tmp/step.c"); then ok
else bad "tgc --emit c's C differs from the C tgrun step --backend cpu ran ($tmp/c4/gpt2.c, $tmp/step.c)"; fi
expect_status 0 "$tgc" "${m[@]}" --emit cuda -o "$tmp/cu"
for f in gpt2.cu manifest.json fusion.txt; do [ -s "$tmp/cu/$f" ] && ok || bad "--emit cuda -o wrote no $f"; done
$py -c "import json,sys; m=json.load(open(sys.argv[1])); assert m['kernels'] and all(k['launches'] or 'folded_into' in k for k in m['kernels'])" \
  "$tmp/cu/manifest.json" && ok || bad "the manifest is not JSON with launches (or a kernel they are folded into) for every kernel"
contains "$tmp/cu/gpt2.cu" " *   k0_w0: "   # kernel k0's wave 0, a place of the unit that runs it
# each distinct kernel once: every launch's function is defined exactly once,
# and there are fewer functions than launches (the layers share theirs)
$py - "$tmp/cu/manifest.json" "$tmp/cu/gpt2.cu" "$tmp/c/manifest.json" "$tmp/c/gpt2.c" <<'PY' && ok || bad "a launch's or step's function is not defined once"
import json, re, sys
for man, code, pat in ((sys.argv[1], sys.argv[2], r'__global__ void __launch_bounds__\(\d+(?:, \d+)?\) {}\('),
                       (sys.argv[3], sys.argv[4], r'\n(?:static )?void {}\(')):
    m = json.load(open(man))
    text = open(code).read()
    fns = [l['function'] for k in m['kernels'] for l in k['launches'] if 'function' in l]
    for f in set(fns):
        n = len(re.findall(pat.format(re.escape(f)), text))
        assert n == 1, (code, f, n)
    assert len(set(fns)) < len(fns), (code, len(set(fns)), len(fns))
PY

# nothing links the CUDA driver or NVRTC: both start on machines without them
for exe in "$tgrun" "$tgc"; do
  if ldd "$exe" | grep -Eq 'libcuda|libnvrtc|libcudart'; then bad "$exe links CUDA libraries"; else ok; fi
done
finish
