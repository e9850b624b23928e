#!/usr/bin/env bash
# run_shards.sh TGRUN SRCDIR: a sharded corpus from documents to training,
# the pipeline of llm.c's GPT-2 124M run scaled down to a corpus made here
# (Tiny Shakespeare cut into paragraphs, as JSON lines and as a directory).
#
# - prepare: JSON lines into shards of 3,000 tokens; every document after
#   <|endoftext|> and decoding to its text (check_shards.py), the first
#   shard for validation; 1 thread and 2 give the same bytes; a directory
#   of the same documents as files gives the same shards; --max-shards then
#   --resume gives the same bytes as one run; the progress line;
# - bad input: a line without the field, a line that is not JSON, a
#   missing input, a gap in the shards, a damaged shard, an interrupted
#   preparation without --resume: each named, non-zero exit;
# - configs/gpt2_124m.cfg, scaled down (2 layers, 32 wide, 32 tokens) on
#   the CPU with its data_order = shuffled and zero = 1 on 2 ranks: trains
#   and evaluates across many shards; 7 steps then resume to 14 gives
#   exactly the losses of 14 at once, across shard boundaries (a step is
#   2 ranks x 4 x 32 = 256 tokens, 11 steps a shard);
# - sequential order: the same, and the data line names the shards.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
export TG_DATA=$data
cd "$src"

# ---- the corpus ----
/usr/bin/python3 - "$data/tinyshakespeare/input.txt" "$tmp" <<'PY'
import json, os, sys
text = open(sys.argv[1], encoding="utf-8").read()
docs = [d for d in text.split("\n\n") if d.strip()]
out = sys.argv[2]
with open(os.path.join(out, "sh.jsonl"), "w", encoding="utf-8") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "text": d}) + "\n")
os.makedirs(os.path.join(out, "docs"))
for i, d in enumerate(docs[:300]):
    open(os.path.join(out, "docs", "%05d.txt" % i), "w", encoding="utf-8").write(d)
with open(os.path.join(out, "first300.jsonl"), "w", encoding="utf-8") as f:
    for d in docs[:300]:
        f.write(json.dumps({"text": d}) + "\n")
PY

expect_status 0 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/sh.jsonl" --out "$tmp/sh" --shard-tokens 3000 --threads 2
contains "$tmp/out" "wrote $tmp/sh/sh_val_000000.bin: 3,000 tokens"
contains "$tmp/out" "wrote $tmp/sh/sh_train_000001.bin: 3,000 tokens"
contains "$tmp/out" "prepared 7,222 documents: 330,807 tokens in 111 shards"
if grep -Eq '^prepare: 7,222 documents, 330,807 tokens, 111 shards, [0-9.]+ MB/s, 100% of 1.3 MB, [0-9.]+ s$' "$tmp/out"
then ok; else bad "no final progress line: $(grep '^prepare:' "$tmp/out")"; fi
if /usr/bin/python3 tests/cli/check_shards.py "$tmp/sh.jsonl" "$tmp/sh" "$data/gpt2"; then ok; else bad "the shards do not hold the documents"; fi
[ -f "$tmp/sh/prepare.state" ] && bad "prepare.state left after a finished preparation" || ok

expect_status 0 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/sh.jsonl" --out "$tmp/one" --name sh --shard-tokens 3000 --threads 1
if diff -r "$tmp/sh" "$tmp/one" | grep -v tokenizer.json > "$tmp/diff"; then bad "1 thread and 2 differ"; cat "$tmp/diff"; else ok; fi

# interrupted and resumed: the same shards
expect_status 0 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/sh.jsonl" --out "$tmp/res" --name sh --shard-tokens 3000 --max-shards 40
contains "$tmp/out" "stopped after 40 shards (--max-shards 40)"
expect_status 1 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/sh.jsonl" --out "$tmp/res" --name sh --shard-tokens 3000
contains "$tmp/out" "an interrupted preparation is there"
expect_status 1 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/sh.jsonl" --out "$tmp/res" --name sh --shard-tokens 4000 --resume
contains "$tmp/out" "other inputs (or sizes), shard size"
expect_status 0 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/sh.jsonl" --out "$tmp/res" --name sh --shard-tokens 3000 --resume
contains "$tmp/out" "resuming at shard 40: 120,000 tokens in 40 shards done"
contains "$tmp/out" "prepared 7,222 documents: 330,807 tokens in 111 shards"
same=1
for f in "$tmp"/sh/*.bin; do cmp -s "$f" "$tmp/res/$(basename "$f")" || same=0; done
[ "$(ls "$tmp"/res/*.bin | wc -l)" = 111 ] || same=0
[ $same = 1 ] && ok || bad "a resumed preparation differs from one run"

# a directory of files, one document each, and the same as JSON lines
expect_status 0 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/docs" --out "$tmp/d" --name x --shard-tokens 2000
expect_status 0 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/first300.jsonl" --out "$tmp/j" --name x --shard-tokens 2000
if diff -r "$tmp/d" "$tmp/j" > /dev/null; then ok; else bad "a directory and JSON lines of the same documents differ"; fi

# ---- bad input ----
printf '{"text": "a"}\n{"body": "b"}\n' > "$tmp/nofield.jsonl"
expect_status 1 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/nofield.jsonl" --out "$tmp/e1"
contains "$tmp/out" "nofield.jsonl:2: the object has no \"text\" field"
printf '{"text": "a"}\n{"text": "b"\n' > "$tmp/broken.jsonl"
expect_status 1 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/broken.jsonl" --out "$tmp/e2"
contains "$tmp/out" "broken.jsonl:2: not valid JSON"
printf '{"body": "a"}\n\n{"body": "b", "text": 1}\n' > "$tmp/body.jsonl"
expect_status 0 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/body.jsonl" --text-field body --out "$tmp/e1" --name e
contains "$tmp/out" "prepared 2 documents: 4 tokens in 1 shards"
contains "$tmp/out" "note: every token went to the validation shard"
expect_status 1 "$tgrun" prepare --tokenizer gpt2 --input "$tmp/absent.jsonl" --out "$tmp/e3"
contains "$tmp/out" "cannot open $tmp/absent.jsonl"
expect_status 2 "$tgrun" prepare --tokenizer char --input "$tmp/sh.jsonl" --out "$tmp/e4"
contains "$tmp/out" "a corpus of documents needs gpt2"

# ---- training: the 124M recipe scaled down ----
small=(backend=cpu precision=f32 model.n_layer=2 model.n_head=2 model.n_embd=32 model.block_size=32
       batch_size=4 block_size=32 max_steps=14 warmup_steps=2 eval_interval=7 eval_batches=2
       checkpoint_interval=7 lr_decay_steps=14 sample_tokens=0 threads=1 data_dir="$tmp/sh")
if [ -z "${TG_SANITIZED:-}" ] && command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  expect_status 0 timeout 300 "$tgrun" --nproc 2 configs/gpt2_124m.cfg "${small[@]}" out_dir="$tmp/a"
  contains "$tmp/out" "data: $tmp/sh: 327807 train and 3000 val tokens (110 and 1 shards), shuffled order"
  contains "$tmp/out" "step 14/14 | eval"
  run_losses "$tmp/a/metrics.jsonl" > "$tmp/a.losses"
  expect_status 0 timeout 300 "$tgrun" --nproc 2 configs/gpt2_124m.cfg "${small[@]}" out_dir="$tmp/b" max_steps=7
  expect_status 0 timeout 300 "$tgrun" --nproc 2 configs/gpt2_124m.cfg "${small[@]}" out_dir="$tmp/b" resume=true
  contains "$tmp/out" "resumed from"
  run_losses "$tmp/b/metrics.jsonl" > "$tmp/b.losses"
  if [ -s "$tmp/a.losses" ] && diff "$tmp/a.losses" "$tmp/b.losses" > "$tmp/diff"; then ok
  else bad "resumed losses differ across shards:"; cat "$tmp/diff"; fi
else
  echo "mpirun is missing or the build is sanitized: the 2-rank run is skipped"
fi

# one rank, llm.c's sequential order: resume exact too
expect_status 0 "$tgrun" configs/gpt2_124m.cfg "${small[@]}" zero=0 data_order=sequential batch_size=8 out_dir="$tmp/s1"
contains "$tmp/out" "sequential order"
run_losses "$tmp/s1/metrics.jsonl" > "$tmp/s1.losses"
expect_status 0 "$tgrun" configs/gpt2_124m.cfg "${small[@]}" zero=0 data_order=sequential batch_size=8 out_dir="$tmp/s2" max_steps=7
expect_status 0 "$tgrun" configs/gpt2_124m.cfg "${small[@]}" zero=0 data_order=sequential batch_size=8 out_dir="$tmp/s2" resume=true
run_losses "$tmp/s2/metrics.jsonl" > "$tmp/s2.losses"
if [ -s "$tmp/s1.losses" ] && diff "$tmp/s1.losses" "$tmp/s2.losses" > "$tmp/diff"; then ok
else bad "sequential: resumed losses differ:"; cat "$tmp/diff"; fi

# ---- shards that training refuses ----
mkdir -p "$tmp/gap"
cp "$tmp/sh/tokenizer.json" "$tmp/sh/sh_val_000000.bin" "$tmp/sh/sh_train_000001.bin" "$tmp/sh/sh_train_000003.bin" "$tmp/gap/"
expect_status 1 "$tgrun" configs/gpt2_124m.cfg "${small[@]}" data_dir="$tmp/gap" out_dir="$tmp/g"
contains "$tmp/out" "shard 2 is missing"
cp "$tmp/sh/sh_train_000002.bin" "$tmp/gap/"
printf 'XXXX' | dd of="$tmp/gap/sh_train_000002.bin" conv=notrunc 2>/dev/null
expect_status 1 "$tgrun" configs/gpt2_124m.cfg "${small[@]}" data_dir="$tmp/gap" out_dir="$tmp/g"
contains "$tmp/out" "sh_train_000002.bin: not a token file: bad magic"
expect_status 1 "$tgrun" configs/gpt2_124m.cfg "${small[@]}" train_files="$tmp/none_*.bin" out_dir="$tmp/g"
contains "$tmp/out" "train_files = $tmp/none_*.bin: no file matches"

finish
