#!/usr/bin/env bash
# run_guards.sh TGRUN SRCDIR: what tgrun refuses so that nothing is
# overwritten, overrun or silently wrong (issue 32, items 3, 5 and 6), on a
# tiny model:
#
# - a fresh run into an out_dir holding a run is refused before it touches
#   anything, unless overwrite = true; resume with max_steps at or below
#   the checkpoint's step is an error; a refused resume keeps train.cfg;
# - export refuses to replace its own input (by any path: a link, ./),
#   refuses while another export holds the output directory's lock, and
#   refuses NaN weights naming the tensor;
# - sample --temperature 0 refuses NaN logits; a checkpoint whose metadata
#   (n_head) was edited is refused by its checksum; --prompt-file has a cap;
# - under an address-space limit (prlimit --as) training and sampling are
#   refused with the numbers instead of spinning in OpenBLAS's allocator.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
cd "$src"

tiny_char_run "$data"

# ---- item 3: a run never replaces another's files ----
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r"
cp "$tmp/r/ckpt.safetensors" "$tmp/ckpt.before"
log_lines=$(wc -l < "$tmp/r/train.log")
metrics_lines=$(wc -l < "$tmp/r/metrics.jsonl")
# the same command again: refused, nothing touched
expect_status 1 "$tgrun" "$s" out_dir="$tmp/r"
contains "$tmp/out" "out_dir $tmp/r already holds a run"
contains "$tmp/out" "set resume = true to continue it, or overwrite = true"
if grep -q "^step" "$tmp/out"; then bad "the refused fresh run trained"; else ok; fi
cmp -s "$tmp/ckpt.before" "$tmp/r/ckpt.safetensors" && ok || bad "the refused run changed ckpt.safetensors"
[ "$(wc -l < "$tmp/r/train.log")" -eq "$log_lines" ] && ok || bad "the refused run changed train.log"
[ "$(wc -l < "$tmp/r/metrics.jsonl")" -eq "$metrics_lines" ] && ok || bad "the refused run changed the metrics"
# resume with nothing left to do: an error naming the step, at or below it
expect_status 1 "$tgrun" "$s" out_dir="$tmp/r" resume=true
contains "$tmp/out" "max_steps = 4, but the checkpoint $tmp/r/ckpt.safetensors has done 4 steps already"
expect_status 1 "$tgrun" "$s" out_dir="$tmp/r" resume=true max_steps=3
contains "$tmp/out" "raise max_steps above 4"
# ... naming where max_steps was set and the file to change, before any compile work
contains "$tmp/out" "command line: error: max_steps = 3"
contains "$tmp/out" "(max_steps = N in $s, or max_steps=N on the command line)"
if grep -q "^built \|^compile:" "$tmp/out"; then bad "the refused resume compiled the model first"; else ok; fi
# ... and on two ranks, once (rank 0 checks; the others are ended with it)
if [ -z "${TG_SANITIZED:-}" ] && command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  expect_status 1 timeout 120 "$tgrun" --nproc 2 "$s" out_dir="$tmp/r" resume=true
  n=$(grep -o "error: max_steps = 4, but the checkpoint" "$tmp/out" | wc -l)
  if [ "$n" -eq 1 ]; then ok; else bad "the resume error printed $n times"; cat "$tmp/out"; fi
fi
expect_status 1 "$tgrun" "$s" out_dir="$tmp/r" resume=true overwrite=true
contains "$tmp/out" "set one of them"
# overwrite = true: replaced as a fresh run; resume past the step works
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r" overwrite=true max_steps=2
contains "$tmp/r/train.log" "step 2/2"
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r" resume=true max_steps=4
contains "$tmp/out" "resumed from"
# a resume refused (another model; data that cannot be read) keeps the
# run's train.cfg: the config its checkpoint was trained with
cp "$tmp/r/train.cfg" "$tmp/cfg.before"
expect_status 1 "$tgrun" "$s" out_dir="$tmp/r" resume=true max_steps=6 model.n_embd=32
contains "$tmp/out" "the checkpoint is of another model"
cmp -s "$tmp/cfg.before" "$tmp/r/train.cfg" && ok || bad "the refused resume (another model) replaced train.cfg"
expect_status 1 "$tgrun" "$s" out_dir="$tmp/r" resume=true max_steps=6 data_dir="$tmp/nowhere"
cmp -s "$tmp/cfg.before" "$tmp/r/train.cfg" && ok || bad "the refused resume (no data) replaced train.cfg"
# ... and one that runs writes its own
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r" resume=true max_steps=5
grep -Eq '^max_steps +=  *5$' "$tmp/r/train.cfg" && ok || bad "the resume that ran did not write its train.cfg (max_steps = 5)"

# export: never over its own input, by any path
# export carries the run's char tokenizer (its data_dir's, found through
# train.cfg) in Hugging Face's format, not tg's file; no bos/eos: the char
# tokenizer has no <|endoftext|>
expect_status 0 "$tgrun" export "$tmp/r/ckpt.safetensors" --out "$tmp/e"
contains "$tmp/out" "wrote $tmp/data/tokenizer.json's char tokenizer (tokenizer.json) and generation_config.json"
contains "$tmp/e/tokenizer.json" '"model": {"type": "WordLevel"'
contains "$tmp/e/tokenizer_config.json" '"tokenizer_class": "PreTrainedTokenizerFast"'
contains "$tmp/e/config.json" '"bos_token_id": null,'
contains "$tmp/e/config.json" '"eos_token_id": null,'
[ -e "$tmp/e/vocab.json" ] && bad "a char export wrote vocab.json" || ok
# --tokenizer naming nothing usable is an error, not an export without one
expect_status 1 "$tgrun" export "$tmp/r/ckpt.safetensors" --tokenizer "$tmp/nowhere" --out "$tmp/e"
contains "$tmp/out" "--tokenizer $tmp/nowhere: no such file or directory"
# export takes the model the checkpoint records: a run of a model with
# RMSNorm for LayerNorm (gpt2.tg, edited here) is refused without --model,
# naming the difference; --model gpt2.tg over it is refused by the loader
sed -e 's/ln_\([12f]\)\.layernorm(x)/ln_\1.rmsnorm(x)/g' \
    -e 's/^block layer(x) {/block rmsnorm(x: f32[..., C]) {\n  param weight: [C] = ones\n  return x * rsqrt(sum(x * x, -1) \/ C + 1e-5) * weight\n}\n\nblock layer(x) {/' \
    models/gpt2.tg > "$tmp/rms.tg"
grep -q "rmsnorm" "$tmp/rms.tg" && ok || bad "the RMSNorm model was not made"
expect_status 0 "$tgrun" "$s" out_dir="$tmp/rms-run" model="$tmp/rms.tg" max_steps=1
expect_status 1 "$tgrun" export "$tmp/rms-run/ckpt.safetensors" --out "$tmp/rms-hf"
contains "$tmp/out" "$tmp/rms.tg: error: not GPT-2: GPT-2 has the parameter 'h.0.ln_1.bias'"
[ -e "$tmp/rms-hf/model.safetensors" ] && bad "the RMSNorm model was exported" || ok
expect_status 1 "$tgrun" export "$tmp/rms-run/ckpt.safetensors" --model models/gpt2.tg --out "$tmp/rms-hf"
contains "$tmp/out" "tensor 'h.0.ln_1.bias' is missing"
# a recorded model that has moved: named, with the way out
mv "$tmp/rms.tg" "$tmp/rms-moved.tg"
expect_status 1 "$tgrun" export "$tmp/rms-run/ckpt.safetensors" --out "$tmp/rms-hf"
contains "$tmp/out" "the checkpoint's model (give --model if it has moved) $tmp/rms.tg: no such file"
expect_status 0 "$tgrun" export "$tmp/r/ckpt.safetensors" --out "$tmp/e"
cp "$tmp/e/model.safetensors" "$tmp/model.before"
ln -s "$tmp/e" "$tmp/elink"
ln "$tmp/e/model.safetensors" "$tmp/hard.safetensors"
for input in "$tmp/e/model.safetensors" "$tmp/elink/model.safetensors" "$tmp/e/./model.safetensors" \
  "$tmp/hard.safetensors"; do
  for out in "$tmp/e" "$tmp/e/" "$tmp/elink" "$tmp/e/../e"; do
    expect_status 1 "$tgrun" export "$input" --out "$out"
    contains "$tmp/out" "the export would replace its own input"
    contains "$tmp/out" "is the file $input being exported"
  done
done
cmp -s "$tmp/model.before" "$tmp/e/model.safetensors" && ok || bad "an export replaced its own input"
# another export holding the directory: refused at once, naming it
# (-o: the lock is flock's own, not its child's, so that killing it frees the lock)
flock -o "$tmp/e/.tgrun-export.lock" sleep 30 &
holder=$!
for _ in $(seq 100); do flock -n "$tmp/e/.tgrun-export.lock" true || break; sleep 0.1; done
expect_status 1 "$tgrun" export "$tmp/r/ckpt.safetensors" --out "$tmp/e"
contains "$tmp/out" "another tgrun export is writing into this directory"
contains "$tmp/out" "$tmp/e/.tgrun-export.lock"
kill $(ps -o pid= --ppid $holder) $holder
wait $holder 2> /dev/null
expect_status 0 "$tgrun" export "$tmp/r/ckpt.safetensors" --out "$tmp/e"

# ---- item 6: NaN weights are refused by export and by greedy sampling ----
mkdir -p "$tmp/nan"
cp "$tmp/e/config.json" "$tmp/nan/"
/usr/bin/python3 - "$tmp/e/model.safetensors" "$tmp/nan/model.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
lo = h["transformer.ln_f.weight"]["data_offsets"][0]
b[8 + n + lo:8 + n + lo + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(bytes(b))
PY
expect_status 1 "$tgrun" export "$tmp/nan/model.safetensors" --out "$tmp/nanout"
contains "$tmp/out" "tensor 'ln_f.weight' holds NaN (element 0"
[ -e "$tmp/nanout/model.safetensors" ] && bad "the NaN weights were exported" || ok
for t in 0 1; do
  expect_status 1 "$tgrun" sample --weights "$tmp/nan/model.safetensors" --model models/gpt2.tg \
    --tokenizer "$tmp/data" --prompt "to be" --max-new-tokens 4 --temperature $t
  contains "$tmp/out" "cannot sample: the logits are NaN"
done

# the checksum covers the metadata: n_head edited in a checkpoint's config
# (the sizes sample compiles with) is refused, not sampled with 1 head
/usr/bin/python3 - "$tmp/r/ckpt.safetensors" "$tmp/heads.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert "n_head=2" in h["__metadata__"]["config"]
h["__metadata__"]["config"] = h["__metadata__"]["config"].replace("n_head=2", "n_head=1")
head = json.dumps(h, separators=(",", ":")).encode()
head += b" " * (-len(head) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(head)) + head + b[8 + n:])
PY
expect_status 1 "$tgrun" sample --weights "$tmp/heads.safetensors" --tokenizer "$tmp/data" --prompt "to be" \
  --max-new-tokens 4
contains "$tmp/out" "does not match the checksum in __metadata__ (sha256"

# ---- item 5: inputs and limits with no natural size ----
expect_status 1 "$tgrun" sample --weights "$tmp/r/ckpt.safetensors" --tokenizer "$tmp/data" --prompt-file /dev/zero
contains "$tmp/out" "--prompt-file /dev/zero is larger than the cap on a prompt, 1 MiB (1048576 bytes)"
head -c 1048576 /dev/zero | tr '\0' 'a' > "$tmp/cap.txt"
# 1 MiB itself is read (and then refused as longer than this model's context)
expect_status 1 "$tgrun" sample --weights "$tmp/r/ckpt.safetensors" --tokenizer "$tmp/data" --prompt-file "$tmp/cap.txt"
contains "$tmp/out" "the prompt is 1048576 tokens"
# an address-space limit the run cannot fit in: refused with the numbers, not
# a spin.  Not in the sanitizer build: AddressSanitizer reserves terabytes of
# shadow address space at start-up, so no process of it runs under 150 MB.
if [ -n "${TG_SANITIZED:-}" ]; then
  echo "note: the RLIMIT_AS checks skipped in the sanitizer build (ASan's shadow memory needs the address space)"
else
  timeout -s KILL 120 prlimit --as=150000000 "$tgrun" "$s" out_dir="$tmp/as" > "$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && ok || bad "training under prlimit --as=150000000 exited $rc, expected 1"
  contains "$tmp/out" "RLIMIT_AS, the address-space limit (ulimit -v, prlimit --as), is 143 MiB"
  contains "$tmp/out" "raise the limit"
  if grep -q "^step" "$tmp/out"; then bad "the run under the limit trained"; else ok; fi
  timeout -s KILL 120 prlimit --as=150000000 "$tgrun" sample --weights "$tmp/r/ckpt.safetensors" --tokenizer "$tmp/data" \
    --prompt "to be" --max-new-tokens 4 > "$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && ok || bad "sampling under prlimit --as=150000000 exited $rc, expected 1"
  contains "$tmp/out" "sampling needs about"
  contains "$tmp/out" "RLIMIT_AS, the address-space limit"
fi
finish
