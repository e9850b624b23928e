#!/usr/bin/env bash
# run_messages.sh TGRUN SRCDIR: issue 32's items 4 and 7 through tgrun, on a
# tiny model: every config constant of gpt2.tg checked before any work,
# with the setting to change named; config.json's fields that change the
# function refused by name; and the messages that said too little or too
# much: an out_dir that is a file, a 10 MB junk line, --weights a directory
# or a device, a sample's error after its text, a configuration error with
# two ranks (printed once), ranks reading different model files.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
py=/usr/bin/python3
cd "$src"

tiny_run "$tgrun" "$data" "$tmp/s.cfg"
s=$tmp/s.cfg

# ---- item 4: the model's ranges, before any work ----

# n_layer = -1 trained a 0-layer model with exit 0; now the model's assert
# refuses it, and the note says where the value was set
expect_status 1 "$tgrun" "$s" out_dir="$tmp/neg" model.n_layer=-1
contains "$tmp/out" "error: assertion failed: n_layer, the number of layers, must be at least 1"
contains "$tmp/out" "note: n_layer is -1, from command line (model.n_layer)"
if grep -q "^step" "$tmp/out" || [ -e "$tmp/neg/ckpt.safetensors" ]; then bad "n_layer=-1 trained"; else ok; fi
# in train.cfg: the note names its line
sed 's/^model.n_layer = 1$/model.n_layer = 0/' "$s" > "$tmp/zero_layers.cfg"
expect_status 1 "$tgrun" "$tmp/zero_layers.cfg" out_dir="$tmp/zl"
contains "$tmp/out" "note: n_layer is 0, from $tmp/zero_layers.cfg:2:17 (model.n_layer)"
# n_embd 33 with 2 heads said "a dimension must be an integer in 1..2^48, not 16.5"
expect_status 1 "$tgrun" "$s" out_dir="$tmp/odd" model.n_embd=33
contains "$tmp/out" "error: assertion failed: n_embd must be a multiple of n_head"
contains "$tmp/out" "note: n_embd is 33, from command line (model.n_embd)"
contains "$tmp/out" "note: n_head is 2, from $s:3:16 (model.n_head)"
if grep -q "16.5" "$tmp/out"; then bad "the message still speaks of 16.5"; else ok; fi

# a Hugging Face file without config.json: its sizes from the shapes, n_head
# the model's 12, which does not divide n_embd 20: the note names the file
mkdir -p "$tmp/hf"
expect_status 0 $py tests/cli/make_safetensors.py "$tmp/hf/model.safetensors" \
  "wte.weight:F32:65x20:fill=0" "wpe.weight:F32:16x20:fill=0" "h.0.ln_1.weight:F32:20:fill=1"
sed '/^model\./d' "$s" > "$tmp/hf.cfg"
expect_status 1 "$tgrun" "$tmp/hf.cfg" out_dir="$tmp/hfo" init_from="$tmp/hf/model.safetensors"
contains "$tmp/out" "error: assertion failed: n_embd must be a multiple of n_head"
contains "$tmp/out" "note: n_embd is 20, from $tmp/hf/model.safetensors (wte.weight [65, 20])"
contains "$tmp/out" "note: n_head is 12, set here"
# config.json's fields that change the function: refused by name
printf '{"model_type": "gpt2", "n_head": 2, "activation_function": "relu"}\n' > "$tmp/hf/config.json"
expect_status 1 "$tgrun" "$tmp/hf.cfg" out_dir="$tmp/hfo" init_from="$tmp/hf/model.safetensors"
contains "$tmp/out" "$tmp/hf/config.json: error: activation_function is \"relu\", but tg's GPT-2 computes"
printf '{"model_type": "gpt2", "n_head": 2, "layer_norm_epsilon": 1e-6}\n' > "$tmp/hf/config.json"
expect_status 1 "$tgrun" "$tmp/hf.cfg" out_dir="$tmp/hfo" init_from="$tmp/hf/model.safetensors"
contains "$tmp/out" "layer_norm_epsilon is 9.9999999999999995e-07, but std.tg's layernorm adds 1e-05"

# ---- item 7: messages ----

# an out_dir that is a file: the message names out_dir and where it was set
touch "$tmp/a_file"
expect_status 1 "$tgrun" "$s" out_dir="$tmp/a_file"
contains "$tmp/out" "command line: error: out_dir \"$tmp/a_file\": '$tmp/a_file' exists and is not a directory; set out_dir"
# a 10 MB line of junk: a message of a few hundred bytes
{ cat "$s"; head -c 10000000 /dev/zero | tr '\0' 'x'; echo; } > "$tmp/junk.cfg"
expect_status 1 "$tgrun" "$tmp/junk.cfg" out_dir="$tmp/junk"
size=$(wc -c < "$tmp/out")
if [ "$size" -lt 2000 ]; then ok; else bad "a 10 MB junk line gave a $size-byte message"; fi
contains "$tmp/out" "xxx...' (lines are 'key = value')"
# a byte-order mark before the first key: read as the editor shows the file
{ printf '\357\273\277'; cat "$s"; } > "$tmp/bom.cfg"
expect_status 0 "$tgrun" "$tmp/bom.cfg" out_dir="$tmp/bom" max_steps=1 sample_tokens=0

# sample --weights: a directory and a device are named as such
expect_status 1 "$tgrun" sample --weights "$tmp" --prompt hi
contains "$tmp/out" "--weights $tmp: is a directory; give the weights file in it"
expect_status 1 "$tgrun" sample --weights /dev/zero --prompt hi
contains "$tmp/out" "--weights /dev/zero: not a regular file"
# a sample's error after its text starts on a line of its own: weights whose
# final layernorm is NaN fail at the first new token, after the prompt
expect_status 0 "$tgrun" init models/gpt2.tg -D n_layer=1 -D n_head=2 -D n_embd=16 -D block_size=16 -D vocab=65 \
  --seed 1 --out "$tmp/w.safetensors"
$py - "$tmp/w.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
a, e = json.loads(b[8:8 + n])["ln_f.weight"]["data_offsets"]
b[8 + n + a:8 + n + e] = struct.pack("<%df" % ((e - a) // 4), *[float("nan")] * ((e - a) // 4))
open(sys.argv[1], "wb").write(b)
PY
expect_status 1 "$tgrun" sample --weights "$tmp/w.safetensors" --model models/gpt2.tg --tokenizer "$tmp/data" \
  --prompt "ROMEO:" --max-new-tokens 4 --temperature 1
contains "$tmp/out" "error:"
if grep "error:" "$tmp/out" | grep -qv "^[/a-z]"; then bad "an error starts mid-line: $(grep 'error:' "$tmp/out")"; else ok; fi

# ranks
if [ -n "${TG_SANITIZED:-}" ]; then
  echo "note: MPI part skipped in the sanitizer build (Open MPI's own allocations read as leaks)"
elif command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # a configuration error is printed once, by rank 0, with the one status
  expect_status 2 timeout 120 "$tgrun" --nproc 2 "$s" out_dir="$tmp/np" max_steps=abc
  n=$(grep -o "error: max_steps takes an integer" "$tmp/out" | wc -l)  # -o: interleaved copies share a line
  if [ "$n" -eq 1 ]; then ok; else bad "the train.cfg error printed $n times"; cat "$tmp/out"; fi
  # ... and so is a broken rule between keys, with what to change
  expect_status 1 timeout 120 "$tgrun" --nproc 2 "$s" out_dir="$tmp/np" max_steps=1 warmup_steps=2
  n=$(grep -o "error: warmup_steps (2, from the command line) must not exceed max_steps (1" "$tmp/out" | wc -l)
  if [ "$n" -eq 1 ]; then ok; else bad "the rule error printed $n times"; cat "$tmp/out"; fi
  contains "$tmp/out" "set warmup_steps to at most 1, or raise max_steps"
  expect_status 1 timeout 120 "$tgrun" --nproc 2 "$s" out_dir="$tmp/np" model.n_layer=-1
  n=$(grep -o "error: assertion failed: n_layer" "$tmp/out" | wc -l)
  if [ "$n" -eq 1 ]; then ok; else bad "the model's error printed $n times"; cat "$tmp/out"; fi
  # ranks started in different directories read different model files under
  # one relative path: refused before anything is compiled, naming the model
  mkdir -p "$tmp/r0/models" "$tmp/r1/models"
  cp models/gpt2.tg models/std.tg "$tmp/r0/models/"
  cp models/std.tg "$tmp/r1/models/"
  sed 's/^  n_head     = 12/  n_head     = 4/' models/gpt2.tg > "$tmp/r1/models/gpt2.tg"
  sed '/^model.n_head/d' "$s" > "$tmp/rel.cfg"
  expect_status 1 timeout 120 mpirun --oversubscribe -np 1 -wdir "$tmp/r0" "$tgrun" "$tmp/rel.cfg" out_dir="$tmp/rel" : \
    -np 1 -wdir "$tmp/r1" "$tgrun" "$tmp/rel.cfg" out_dir="$tmp/rel"
  contains "$tmp/out" "$tmp/rel.cfg:1:9: error: model \"models/gpt2.tg\": the ranks read different model files: rank 1 reads"
  if grep -q "^step" "$tmp/out"; then bad "ranks with different models trained"; else ok; fi
else
  bad "mpirun is missing (openmpi-bin)"
fi

finish
