#!/usr/bin/env bash
# run_tgrun.sh TGRUN SRCDIR: the tgrun command line, end to end.
#
# init/grad/step on a tiny GPT-2, and every way a weights or batch file can
# disagree with the model: each must exit 1 with a message naming the file
# and the tensor, and leave an existing output file as it was.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
mk="/usr/bin/python3 $src/tests/cli/make_safetensors.py"
cd "$src"

tiny=(models/gpt2.tg -D n_layer=1 -D n_embd=16 -D n_head=2 -D vocab=32 -D block_size=8)
W=$tmp/w.safetensors X=$tmp/x.safetensors

# usage
expect_status 0 "$tgrun" --help
for word in init grad step --weights --batch --out --seed --backend --precision --lr --steps --clip; do
  contains "$tmp/out" "$word"
done
expect_status 2 "$tgrun"
expect_status 2 "$tgrun" grda models/gpt2.tg
contains "$tmp/out" "did you mean 'grad'?"
expect_status 2 "$tgrun" grad "${tiny[@]}" --out "$tmp/g.safetensors"
contains "$tmp/out" "need --weights FILE and --batch FILE"
expect_status 2 "$tgrun" grad "${tiny[@]}" --weights "$W" --batch "$X" --out "$tmp/g" --backend tpu
contains "$tmp/out" "unknown backend; did you mean 'cpu'? (the backends: ref, cpu"
expect_status 2 "$tgrun" init "${tiny[@]}" --out "$W" --seed -3
expect_status 2 "$tgrun" step "${tiny[@]}" --weights "$W" --batch "$X" --out "$W" --beta2 1
contains "$tmp/out" "--beta1 and --beta2 must lie in [0, 0.9999999]"
expect_status 2 "$tgrun" step "${tiny[@]}" --weights "$W" --batch "$X" --out "$W" --lr 0
expect_status 2 "$tgrun" init "${tiny[@]}" --out "$W" --wieghts x
contains "$tmp/out" "did you mean '--weights'?"

# init: deterministic in the seed
expect_status 0 "$tgrun" init "${tiny[@]}" --seed 5 --out "$W"
expect_status 0 "$tgrun" init "${tiny[@]}" --seed 5 --out "$tmp/w2.safetensors"
if cmp -s "$W" "$tmp/w2.safetensors"; then ok; else bad "the same seed gave different weights"; fi
expect_status 0 "$tgrun" init "${tiny[@]}" --seed 6 --out "$tmp/w3.safetensors"
if cmp -s "$W" "$tmp/w3.safetensors"; then bad "different seeds gave the same weights"; else ok; fi
if grep -qa '"h.0.attn.c_attn.weight"' "$W"; then ok; else bad "weights lack Hugging Face names"; fi

# grad and step on a good batch
$mk "$X" idx:I32:2x4:1,2,3,4,5,6,7,8 targets:I32:2x4:2,3,4,5,6,7,8,9
expect_status 0 "$tgrun" grad "${tiny[@]}" --weights "$W" --batch "$X" --out "$tmp/g.safetensors"
# near ln 32 = 3.47 at initialisation: the logits start close to zero
loss=$(grep -o 'loss [0-9.]*' "$tmp/out" | cut -d' ' -f2)
if awk -v l="$loss" 'BEGIN { exit !(l > 3.3 && l < 3.7) }'; then ok; else bad "initial loss $loss is not near ln 32"; fi
if grep -qa '"loss"' "$tmp/g.safetensors" && grep -qa '"wte.weight"' "$tmp/g.safetensors"; then ok
else bad "the gradient file lacks loss or wte.weight"; fi
expect_status 0 "$tgrun" step "${tiny[@]}" --weights "$W" --batch "$X" --lr 1e-2 --steps 3 --out "$tmp/w4.safetensors"
contains "$tmp/out" "step 3/3"
# the graph pads vocab 32 to 64 (pad_vocab); every file keeps the model's shape
for f in "$W" "$tmp/g.safetensors" "$tmp/w4.safetensors"; do
  if grep -qa '"wte.weight":{"dtype":"F32","shape":\[32,16\]' "$f"; then ok
  else bad "$f: wte.weight is not [32, 16]"; fi
done
first=$(grep -o 'loss [0-9.]*' "$tmp/out" | head -1 | cut -d' ' -f2)
last=$(grep -o 'loss [0-9.]*' "$tmp/out" | tail -1 | cut -d' ' -f2)
if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'; then ok; else bad "3 steps did not lower the loss ($first -> $last)"; fi

# every documented range of the options, at its bounds and one step beyond
expect_status 0 "$tgrun" init "${tiny[@]}" --seed 0 --out "$tmp/r.safetensors"
expect_status 0 "$tgrun" init "${tiny[@]}" --seed 9007199254740992 --out "$tmp/r.safetensors"
expect_status 2 "$tgrun" init "${tiny[@]}" --seed 9007199254740994 --out "$tmp/r.safetensors"
expect_status 2 "$tgrun" init "${tiny[@]}" --seed -1 --out "$tmp/r.safetensors"
step=(step "${tiny[@]}" --weights "$W" --batch "$X" --out "$tmp/r.safetensors")
finite_weights() { if grep -qa 'NaN\|nan' <(/usr/bin/python3 -c "
import struct, json, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
import math
for k, v in h.items():
    if k == '__metadata__': continue
    s, e = v['data_offsets']; d = b[8 + n + s:8 + n + e]
    if any(not math.isfinite(x) for x in struct.unpack('<%df' % (len(d) // 4), d)): print('nan', k)" "$1"); then
  bad "$1 holds non-finite weights ($2)"; else ok; fi; }
for opt in "--steps 1" "--lr 1e-300" "--beta1 0 --beta2 0" "--beta1 0.9999999 --beta2 0.9999999" "--eps 1e-30" \
  "--eps 1e300" "--weight-decay 0" "--clip 0" "--clip 1e300"; do
  # shellcheck disable=SC2086
  expect_status 0 "$tgrun" "${step[@]}" $opt
  finite_weights "$tmp/r.safetensors" "$opt"
done
for opt in "--steps 0" "--steps 1000000001" "--lr 0" "--beta1 -1e-9" "--beta1 0.99999991" "--beta2 0.99999991" \
  "--eps 9e-31" "--weight-decay -1e-300" "--clip -1e-300"; do
  # shellcheck disable=SC2086
  expect_status 2 "$tgrun" "${step[@]}" $opt
done


# a model without B and T constants takes the batch's shape from its inputs
printf 'config { V = 32 }\nparam w: [V, 4] = normal(0.02)\ninput idx: i32[2, 4]\ninput targets: i32[2, 4]\noutput loss = sum(gather(w, idx)) * 0 + sum(gather(w, targets))\n' > "$tmp/fixed.tg"
expect_status 0 "$tgrun" init "$tmp/fixed.tg" --out "$tmp/wf.safetensors"
expect_status 0 "$tgrun" grad "$tmp/fixed.tg" --weights "$tmp/wf.safetensors" --batch "$X" --out "$tmp/gf.safetensors"
# imports through -I and $TG_PATH, as tgc
mkdir -p "$tmp/lib"
printf 'block twice(x) { return 2 * x }\n' > "$tmp/lib/mylib.tg"
printf 'import "mylib.tg"\nparam w: [32, 4] = normal(0.02)\ninput idx: i32[2, 4]\ninput targets: i32[2, 4]\noutput loss = sum(twice(gather(w, targets)))\n' > "$tmp/withlib.tg"
expect_status 1 "$tgrun" init "$tmp/withlib.tg" --out "$tmp/wl.safetensors"
expect_status 0 "$tgrun" init "$tmp/withlib.tg" -I "$tmp/lib" --out "$tmp/wl.safetensors"
expect_status 0 env TG_PATH="$tmp/lib" "$tgrun" init "$tmp/withlib.tg" --out "$tmp/wl.safetensors"

# a model input named like the optimizer's
printf 'param w: [3] = zeros\ninput lr: f32[2, 4]\ninput idx: i32[2, 4]\ninput targets: i32[2, 4]\noutput loss = sum(w) + sum(lr)\n' > "$tmp/clash.tg"
expect_status 0 "$tgrun" init "$tmp/clash.tg" --out "$tmp/wc.safetensors"
expect_status 1 "$tgrun" grad "$tmp/clash.tg" --weights "$tmp/wc.safetensors" --batch "$X" --out "$tmp/gc.safetensors"
contains "$tmp/out" "error: the model's input 'lr' has no value: tgrun feeds only 'idx' and 'targets'"
expect_status 1 "$tgrun" step "$tmp/clash.tg" --weights "$tmp/wc.safetensors" --batch "$X" --out "$tmp/wc2.safetensors"
contains "$tmp/out" "adamw: the model's own input 'lr' would clash with the optimizer's input"

# Hugging Face checkpoints carry each layer's mask as h.N.attn.bias: passed over
/usr/bin/python3 - "$W" "$tmp/w-hf.safetensors" << 'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
header["h.0.attn.bias"] = {"dtype": "F32", "shape": [1, 1, 2, 2], "data_offsets": [end, end + 16]}
header["h.0.attn.masked_bias"] = {"dtype": "F32", "shape": [], "data_offsets": [end + 16, end + 20]}
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + body[:end] + bytes(20))
PY
expect_status 0 "$tgrun" grad "${tiny[@]}" --weights "$tmp/w-hf.safetensors" --batch "$X" --out "$tmp/g-hf.safetensors"
contains "$tmp/out" "note: skipped 2 Hugging Face attention buffers"
if cmp -s "$tmp/g.safetensors" "$tmp/g-hf.safetensors"; then ok; else bad "the buffers changed the gradients"; fi

# weights that do not fit the model
"$tgrun" init models/gpt2.tg -D n_layer=2 -D n_embd=16 -D n_head=2 -D vocab=32 -D block_size=8 --out "$tmp/w-2layer.safetensors" > /dev/null
"$tgrun" init models/gpt2.tg -D n_layer=1 -D n_embd=8 -D n_head=2 -D vocab=32 -D block_size=8 --out "$tmp/w-narrow.safetensors" > /dev/null
echo "precious" > "$tmp/keep"
check_bad() { # weights batch expected-message [extra -D...]
  local w=$1 x=$2 msg=$3
  shift 3
  expect_status 1 "$tgrun" grad "${tiny[@]}" "$@" --weights "$w" --batch "$x" --out "$tmp/keep"
  contains "$tmp/out" "$msg"
  contains "$tmp/keep" "precious"
}
# the file's sizes against -D, before anything is compiled (hf.h)
check_bad "$tmp/w-2layer.safetensors" "$X" "command line (-D n_layer=1): error: n_layer = 1 here, but the weights are of a model with n_layer = 2 ($tmp/w-2layer.safetensors (layers h.0 .. h.1))"
check_bad "$W" "$X" "command line (-D n_layer=2): error: n_layer = 2 here, but the weights are of a model with n_layer = 1" -D n_layer=2
check_bad "$tmp/w-narrow.safetensors" "$X" "n_embd = 16 here, but the weights are of a model with n_embd = 8 ($tmp/w-narrow.safetensors (wte.weight [32, 8]))"
# without -D the sizes come from the file, and what no size shows is still checked by name and shape
expect_status 0 "$tgrun" grad models/gpt2.tg --weights "$tmp/w-2layer.safetensors" --batch "$X" --out "$tmp/g2l.safetensors"
/usr/bin/python3 - "$W" "$tmp/w-odd.safetensors" << 'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
header["ln_f.bias"]["shape"] = [4, 4]  # 16 floats as before, another shape
text = json.dumps(header).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + body)
PY
check_bad "$tmp/w-odd.safetensors" "$X" "tensor 'ln_f.bias' has shape [4, 4], but the model's parameter is f32[n_embd=16]"
$mk "$tmp/w-int.safetensors" wte.weight:I32:2:1,2
check_bad "$tmp/w-int.safetensors" "$X" "w-int.safetensors: error: tensor 'wte.weight' has dtype i32"
head -c 100 "$W" > "$tmp/w-cut.safetensors"
check_bad "$tmp/w-cut.safetensors" "$X" "w-cut.safetensors: error:"
check_bad "$tmp/none.safetensors" "$X" "none.safetensors"

# batches that do not fit
$mk "$tmp/x-range.safetensors" idx:I32:2x4:1,2,3,4,5,6,7,8 targets:I32:2x4:2,40,4,5,6,7,8,9
check_bad "$W" "$tmp/x-range.safetensors" "x-range.safetensors: error: tensor 'targets': id 40 at [0, 1] is outside the vocabulary [0, 32)"
$mk "$tmp/x-half.safetensors" idx:I32:2x4:1,2,3,4,5,6,7,8
check_bad "$W" "$tmp/x-half.safetensors" "x-half.safetensors: error: tensor 'targets' is missing"
$mk "$tmp/x-float.safetensors" idx:F32:2x4:fill=1 targets:I32:2x4:fill=1
check_bad "$W" "$tmp/x-float.safetensors" "tensor 'idx' has dtype f32; token ids are I32"
$mk "$tmp/x-extra.safetensors" idx:I32:2x4:fill=1 targets:I32:2x4:fill=1 mask:I32:2x4:fill=1
check_bad "$W" "$tmp/x-extra.safetensors" "tensor 'mask' does not belong in a batch"
check_bad "$W" "$X" "tensor 'idx' is [2, 4] but the model's input is i32[B=3, T=4]" -D B=3
$mk "$tmp/x-long.safetensors" idx:I32:1x16:fill=1 targets:I32:1x16:fill=1
check_bad "$W" "$tmp/x-long.safetensors" "assertion failed: the sequence length T exceeds block_size"

# export: Hugging Face's GPT-2 directory (transformers itself: tests/torch/run_hf_transformers.sh)
expect_status 0 "$tgrun" export "$W" --out "$tmp/hfdir"
contains "$tmp/out" "wrote $tmp/hfdir/model.safetensors (16 tensors, "
contains "$tmp/hfdir/config.json" '"n_head": 2,'
contains "$tmp/hfdir/config.json" '"vocab_size": 32'
if head -c 200 "$tmp/hfdir/model.safetensors" | grep -qF '{"__metadata__":{"format":"pt"},"transformer.wte.weight":{"dtype":"F32","shape":[32,16]'; then ok; else bad "the exported header: $(head -c 200 "$tmp/hfdir/model.safetensors")"; fi
# and back: the exported directory gives the same gradients as the file it came from
expect_status 0 "$tgrun" grad models/gpt2.tg --weights "$tmp/hfdir/model.safetensors" --batch "$X" --out "$tmp/g-exp.safetensors"
if cmp -s "$tmp/g.safetensors" "$tmp/g-exp.safetensors"; then ok; else bad "the exported weights changed the gradients"; fi
expect_status 2 "$tgrun" export "$W"
contains "$tmp/out" "tgrun export: error: --out DIR is required"
expect_status 2 "$tgrun" export "$W" --out "$tmp/hfdir" --bogus
contains "$tmp/out" "unknown option '--bogus'"
expect_status 1 "$tgrun" export "$tmp/none.safetensors" --out "$tmp/hfdir"
contains "$tmp/out" "none.safetensors: error: cannot open"
expect_status 1 "$tgrun" export "$W" --out "$tmp/hfdir2" -D n_head=4
contains "$tmp/out" "n_head = 4 here, but the weights are of a model with n_head = 2 ($W (its __metadata__ config))"
if [ -e "$tmp/hfdir2" ]; then bad "a refused export made its directory"; else ok; fi
# export refuses a model that is not GPT-2, judged by its graph: an untied
# head (one more parameter), GELU swapped for tanh (the same parameters: the
# graphs differ); gpt2.tg at other sizes is GPT-2
sed -e 's/^logits = x @ transpose(wte.weight).*/param lm_head.weight: [vocab, n_embd] = normal(0.02)\nlogits = x @ transpose(lm_head.weight)/' \
    models/gpt2.tg > "$tmp/untied.tg"
sed -e 's/return gelu(x @ c_fc.weight/return tanh(x @ c_fc.weight/' models/gpt2.tg > "$tmp/tanh.tg"
for m in untied tanh; do
  expect_status 0 "$tgrun" init "$tmp/$m.tg" -D n_layer=1 -D n_embd=16 -D n_head=2 -D vocab=32 -D block_size=8 --out "$tmp/$m.safetensors"
  expect_status 1 "$tgrun" export "$tmp/$m.safetensors" --model "$tmp/$m.tg" --out "$tmp/hf-$m"
  [ -e "$tmp/hf-$m/model.safetensors" ] && bad "the $m model was exported" || ok
  case $m in
  untied) contains "$tmp/out" "$tmp/untied.tg: error: not GPT-2: the model has the parameter 'lm_head.weight', which GPT-2 lacks (an untied output head" ;;
  tanh) contains "$tmp/out" "not GPT-2: the graphs part at node %"
        contains "$tmp/out" "the model computes tanh : f32[B=1, T=1, 64] at $tmp/tanh.tg:$(grep -n 'return tanh(' "$tmp/tanh.tg" | cut -d: -f1):" ;;
  esac
done
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=3 -D n_embd=24 -D n_head=3 -D vocab=65 -D block_size=16 --out "$tmp/w3.safetensors"
expect_status 0 "$tgrun" export "$tmp/w3.safetensors" --model models/gpt2.tg --out "$tmp/hf3"
contains "$tmp/hf3/config.json" '"n_layer": 3,'

finish
