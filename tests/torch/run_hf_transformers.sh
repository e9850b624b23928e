#!/usr/bin/env bash
# run_hf_transformers.sh TGRUN SRCDIR BUILDDIR: tg's weights files against
# Hugging Face's transformers, both ways.
#
#   tg -> transformers: tgrun init's weights, a tgrun step output and a tg
#     checkpoint are exported (tgrun export) and loaded with
#     GPT2LMHeadModel.from_pretrained; its loss on a batch equals tgrun
#     grad's.  The tg files themselves load too (from_pretrained(FILE,
#     config=...)): their metadata says "format": "pt".
#   The exports carry the run's tokenizer: a char checkpoint's (its
#     tokenizers-format tokenizer.json) and GPT-2's BPE (vocab.json and
#     merges.txt); AutoTokenizer.from_pretrained loads each, with tg's
#     vocabulary, and round-trips the text; bos/eos are 50256 only for BPE.
#   transformers -> tg: save_pretrained's directory (GPT2LMHeadModel's
#     "transformer." names, config.json beside), its f16 and bf16 variants
#     (from_pretrained(torch_dtype=...) then save_pretrained), and an
#     older-style file (no prefix, attention buffers, lm_head.weight) go to
#     tgrun grad --weights with no -D at all; its loss equals transformers'.
#
# transformers 4.40.2 (the last line that supports Debian's torch 1.13) is
# installed by this script into BUILDDIR/pydeps with Debian's pip, once.
# Where it cannot be (no network), the script says so loudly and checks the
# exported files with an independent reader (json and struct only) instead;
# the transformers checks are then reported as NOT RUN, never as passed.
#
# Tolerance of the losses: 1e-5 relative.  tgrun computes in float64 (the
# reference interpreter, --precision f64) from the file's values, so its
# loss is exact to ~1e-15; transformers computes in float32, whose sums of
# at most a few hundred terms in another order differ by ~sqrt(n) * 6e-8
# ~ 1e-6 relative.  A wrong formula is far outside: a layernorm eps of
# 1e-6 instead of 1e-5, erf GELU instead of tanh, or one weight transposed
# each move this model's loss by more than 1e-4 relative.
set -u
tgrun=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
build=$(cd "$3" && pwd)
py=/usr/bin/python3
hf="$src/tests/torch/hf_transformers.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
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
# expect_fail WHAT TEXT CMD...: CMD exits 1 and says TEXT
expect_fail() {
  local what=$1 text=$2
  shift 2
  "$@" > "$tmp/out" 2>&1
  local rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$text" "$tmp/out"; then
    pass=$((pass + 1))
    echo "ok: $what: $(tail -1 "$tmp/out")"
  else
    fail=$((fail + 1))
    echo "FAIL: $what (exit $rc, expected 1 with '$text')"
    cat "$tmp/out"
  fi
}
# same_loss WHAT A B: |A - B| <= 1e-5 |B| (the tolerance above)
same_loss() {
  check "$1 (tg $2, transformers $3)" "$py" -c "import sys; a, b = $2, $3; d = abs(a - b) / abs(b); print(f'relative difference {d:.3g}'); sys.exit(d > 1e-5)"
}
loss_of() { sed -n 's/^loss //p' "$tmp/out" | tail -1; }

# ---- transformers, installed into the build tree --------------------------------
pydeps="$build/pydeps/transformers-4.40.2"
# tokenizers: AutoTokenizer's fast tokenizers (the char export's tokenizer.json)
tf_pkgs=(transformers==4.40.2 tokenizers==0.19.1 huggingface-hub==0.23.4 safetensors==0.4.3 regex==2024.5.15
  packaging==24.0 filelock==3.14.0 tqdm==4.66.4 fsspec==2024.5.0 typing-extensions==4.12.0)
have_tf=0
if ! "$py" -c 'import torch, numpy' 2> /dev/null; then
  echo "FAIL: $py cannot import torch and numpy (tools/install-deps.sh installs python3-torch, python3-numpy)"
  exit 1
fi
if ! PYTHONPATH="$pydeps" "$py" -c 'import transformers, tokenizers' 2> /dev/null; then
  # --no-deps and every package pinned: pip must not replace Debian's numpy
  # or torch, which torch 1.13 was built against
  rm -rf "$pydeps.tmp.$$"
  if timeout 600 "$py" -m pip install --quiet --disable-pip-version-check --no-deps --no-cache-dir \
    --target "$pydeps.tmp.$$" "${tf_pkgs[@]}" > "$tmp/pip" 2>&1; then
    rm -rf "$pydeps" && mkdir -p "$(dirname "$pydeps")" && mv "$pydeps.tmp.$$" "$pydeps"
  else
    rm -rf "$pydeps.tmp.$$"
  fi
fi
if PYTHONPATH="$pydeps" "$py" -c 'import transformers, tokenizers, sys; sys.exit(transformers.__version__ != "4.40.2")' 2> /dev/null; then
  have_tf=1
  export PYTHONPATH="$pydeps"
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
  echo "transformers 4.40.2 from $pydeps, torch $("$py" -c 'import torch; print(torch.__version__)')"
else
  echo "NOTE: transformers 4.40.2 could not be installed with '$py -m pip install --target $pydeps':"
  sed 's/^/    /' "$tmp/pip" 2> /dev/null | tail -5
  echo "NOTE: the checks against transformers are NOT RUN; the exported files are checked with an"
  echo "NOTE: independent reader (tests/torch/hf_transformers.py reader: json and struct) instead"
fi

# ---- tg -> transformers ---------------------------------------------------------
model=(models/gpt2.tg -D n_layer=2 -D n_embd=32 -D n_head=4 -D vocab=96 -D block_size=16)
check "init" "$tgrun" init "${model[@]}" --seed 5 --out "$tmp/w.safetensors"
# a batch of ids below 40 (the char data's vocabulary below has more), B = 2, T = 16
"$py" -c "
import struct, json
B, T = 2, 16
ids = [(i * 37 + 11) % 40 for i in range(B * (T + 1))]
idx = [ids[b * (T + 1) + t] for b in range(B) for t in range(T)]
tgt = [ids[b * (T + 1) + t + 1] for b in range(B) for t in range(T)]
raw = struct.pack('<%di' % (B * T), *idx) + struct.pack('<%di' % (B * T), *tgt)
h = json.dumps({'idx': {'dtype': 'I32', 'shape': [B, T], 'data_offsets': [0, 4 * B * T]},
                'targets': {'dtype': 'I32', 'shape': [B, T], 'data_offsets': [4 * B * T, 8 * B * T]}}).encode()
open('$tmp/x.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + raw)"

check "tgrun grad of the init weights (no -D: the sizes from the file)" \
  "$tgrun" grad models/gpt2.tg --precision f64 --weights "$tmp/w.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
loss_w=$(loss_of)
check "tgrun export" "$tgrun" export "$tmp/w.safetensors" --out "$tmp/exp"
check "the exported weights are the file's, bit for bit" "$py" "$hf" equal_weights "$tmp/exp/model.safetensors" "$tmp/w.safetensors"
check "the independent reader" "$py" "$hf" reader "$tmp/exp"
# config.json's layer_norm_epsilon is std.tg's
check "layer_norm_epsilon is std.tg's eps" "$py" -c "
import json, re, sys
eps = json.load(open('$tmp/exp/config.json'))['layer_norm_epsilon']
m = re.search(r'rsqrt\(var \+ ([0-9.e+-]+)\)', open('models/std.tg').read())
print(f'config.json {eps}, std.tg {m.group(1)}'); sys.exit(float(m.group(1)) != eps)"
if [ $have_tf = 1 ]; then
  check "transformers: from_pretrained(export of init)" "$py" "$hf" loss "$tmp/exp" "$tmp/x.safetensors"
  same_loss "init weights: the losses agree" "$loss_w" "$(loss_of)"
  check "transformers: from_pretrained(the tgrun init file itself)" \
    "$py" "$hf" loss "$tmp/w.safetensors" "$tmp/x.safetensors" --config "$tmp/exp"
  same_loss "tgrun init file: the losses agree" "$loss_w" "$(loss_of)"
fi

# tgrun step's output and a tg checkpoint (a 2-step run on characters)
check "tgrun step" "$tgrun" step models/gpt2.tg --weights "$tmp/w.safetensors" --batch "$tmp/x.safetensors" --lr 1e-2 --out "$tmp/w1.safetensors"
check "tgrun grad of step's output" "$tgrun" grad models/gpt2.tg --precision f64 --weights "$tmp/w1.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
loss_w1=$(loss_of)
head -c 20000 "${TG_DATA:-$src/../shared/data}/tinyshakespeare/input.txt" > "$tmp/text.txt"
check "prepare" "$tgrun" prepare --tokenizer char --input "$tmp/text.txt" --out "$tmp/chars"
check "a 2-step run writes a checkpoint" "$tgrun" configs/baby_shakespeare_char.cfg data_dir="$tmp/chars" out_dir="$tmp/run" \
  model.n_layer=2 model.n_embd=32 model.n_head=4 model.block_size=16 block_size=16 batch_size=2 max_steps=2 \
  warmup_steps=1 eval_interval=0 eval_batches=1 sample_tokens=0 threads=1
check "tgrun grad --weights ckpt.safetensors (a checkpoint where weights are taken)" \
  "$tgrun" grad models/gpt2.tg --precision f64 --weights "$tmp/run/ckpt.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
loss_ck=$(loss_of)
check "tgrun export of the checkpoint" "$tgrun" export "$tmp/run/ckpt.safetensors" --out "$tmp/exp_ck"
check "the checkpoint's export: the independent reader" "$py" "$hf" reader "$tmp/exp_ck"
check "the checkpoint's export holds its weights bit for bit" "$py" "$hf" equal_weights "$tmp/exp_ck/model.safetensors" "$tmp/run/ckpt.safetensors"
if [ $have_tf = 1 ]; then
  check "transformers: from_pretrained(step's output)" "$py" "$hf" loss "$tmp/w1.safetensors" "$tmp/x.safetensors" --config "$tmp/exp"
  same_loss "step's output: the losses agree" "$loss_w1" "$(loss_of)"
  check "transformers: from_pretrained(export of the checkpoint)" "$py" "$hf" loss "$tmp/exp_ck" "$tmp/x.safetensors"
  same_loss "checkpoint export: the losses agree" "$loss_ck" "$(loss_of)"
  check "transformers: from_pretrained(ckpt.safetensors itself)" \
    "$py" "$hf" loss "$tmp/run/ckpt.safetensors" "$tmp/x.safetensors" --config "$tmp/exp_ck"
  same_loss "checkpoint: the losses agree" "$loss_ck" "$(loss_of)"
  check "transformers: AutoTokenizer of the checkpoint's export (char, from the run's data_dir)" \
    "$py" "$hf" tokenizer "$tmp/exp_ck" "$tmp/text.txt" --kind char
fi
# GPT-2's BPE: a model of its vocabulary, exported with --tokenizer
gpt2_tok="${TG_DATA:-$src/../shared/data}/gpt2"
check "init at GPT-2's vocabulary" "$tgrun" init models/gpt2.tg -D n_layer=1 -D n_embd=16 -D n_head=2 -D vocab=50257 \
  -D block_size=16 --seed 7 --out "$tmp/w50k.safetensors"
check "tgrun grad at GPT-2's vocabulary" "$tgrun" grad models/gpt2.tg --precision f64 --weights "$tmp/w50k.safetensors" \
  --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
loss_bpe=$(loss_of)
check "tgrun export --tokenizer (GPT-2's BPE)" "$tgrun" export "$tmp/w50k.safetensors" --tokenizer "$gpt2_tok" --out "$tmp/exp_bpe"
check "vocab.json is encoder.json" cmp "$tmp/exp_bpe/vocab.json" "$gpt2_tok/encoder.json"
check "merges.txt is vocab.bpe" cmp "$tmp/exp_bpe/merges.txt" "$gpt2_tok/vocab.bpe"
check "the BPE export: the independent reader" "$py" "$hf" reader "$tmp/exp_bpe"
if [ $have_tf = 1 ]; then
  check "transformers: AutoTokenizer of the BPE export" \
    "$py" "$hf" tokenizer "$tmp/exp_bpe" "$tmp/text.txt" --kind gpt2 --encoder "$gpt2_tok/encoder.json"
  check "transformers: AutoModelForCausalLM of the BPE export" "$py" "$hf" loss "$tmp/exp_bpe" "$tmp/x.safetensors"
  same_loss "BPE export: the losses agree" "$loss_bpe" "$(loss_of)"
fi

# ---- transformers -> tg ---------------------------------------------------------
if [ $have_tf = 1 ]; then
  check "transformers: save_pretrained (f32, f16, bf16)" "$py" "$hf" save "$tmp/hf" --seed 11 --n-layer 2 --n-head 4 \
    --n-embd 32 --vocab 96 --positions 16
  for v in hf hf-f16 hf-bf16; do
    check "tgrun grad --weights $v/model.safetensors (transformer. names, config.json beside, no -D)" \
      "$tgrun" grad models/gpt2.tg --precision f64 --weights "$tmp/$v/model.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
    lt=$(loss_of)
    check "transformers: loss of $v" "$py" "$hf" loss "$tmp/$v" "$tmp/x.safetensors"
    same_loss "$v: the losses agree" "$lt" "$(loss_of)"
  done
  mkdir -p "$tmp/legacy"
  check "an older GPT-2 file (no prefix, buffers, lm_head.weight)" "$py" "$hf" legacy "$tmp/hf" "$tmp/legacy/w.safetensors" --lm-head same
  check "tgrun grad of the older file (-D n_head=4: no config.json beside it)" \
    "$tgrun" grad models/gpt2.tg --precision f64 -D n_head=4 --weights "$tmp/legacy/w.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
  if grep -qF "skipped 4 Hugging Face attention buffers" "$tmp/out"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: no note about the 4 buffers"; fi
  lt=$(loss_of)
  check "transformers: loss of hf" "$py" "$hf" loss "$tmp/hf" "$tmp/x.safetensors"
  same_loss "the older file: the losses agree" "$lt" "$(loss_of)"
  check "an older file whose lm_head.weight is not wte" "$py" "$hf" legacy "$tmp/hf" "$tmp/legacy/d.safetensors" --lm-head differ
  expect_fail "an untied lm_head is refused, naming both" "tensor 'lm_head.weight' differs from 'wte.weight'" \
    "$tgrun" grad models/gpt2.tg -D n_head=4 --weights "$tmp/legacy/d.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
  expect_fail "-D n_layer=3 against a 2-layer file, before compiling" "n_layer = 3 here, but the weights are of a model with n_layer = 2" \
    "$tgrun" grad models/gpt2.tg -D n_layer=3 --weights "$tmp/hf/model.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
  expect_fail "-D n_head=2 against config.json's 4" "n_head = 2 here, but the weights are of a model with n_head = 4 ($tmp/hf/config.json (n_head))" \
    "$tgrun" grad models/gpt2.tg -D n_head=2 --weights "$tmp/hf/model.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
else
  # without transformers: GPT2LMHeadModel's spelling made from tg's file by
  # renaming, which must give tgrun grad's loss exactly
  "$py" -c "
import json, struct
b = open('$tmp/w.safetensors', 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
h = {('transformer.' + k if k != '__metadata__' else k): v for k, v in h.items()}
h['__metadata__'] = {'format': 'pt'}
hb = json.dumps(h).encode(); open('$tmp/prefixed.safetensors', 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8 + n:])"
  check "tgrun grad --weights with transformer. names" "$tgrun" grad models/gpt2.tg --precision f64 -D n_head=4 \
    --weights "$tmp/prefixed.safetensors" --batch "$tmp/x.safetensors" --out "$tmp/g.safetensors"
  check "the same loss as without the prefix" test "$(loss_of)" = "$loss_w"
  echo "NOT RUN (no transformers): from_pretrained of tg's files, save_pretrained files (f32, f16, bf16) into tgrun"
fi

echo "$pass passed, $fail failed$([ $have_tf = 1 ] || echo ' (transformers NOT RUN: see the notes above)')"
[ "$fail" -eq 0 ]
