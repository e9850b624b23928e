#!/usr/bin/env bash
# run_reliability.sh TGRUN SRCDIR: the failures of issue 17 ("Reliability"),
# each one refused before training or made safe, on a tiny model:
#
# - checks before training: a sample_prompt outside the vocabulary, a
#   val.bin shorter than block_size + 1, a memory plan larger than the
#   machine (with the largest batch that fits), a metrics_file that names
#   the run's own files, a second run in a busy out_dir (and a crashed
#   run's lock file, which blocks nothing);
# - resume: the checkpoint's seed, a conflicting seed refused, reseed;
# - a diverged run stops with an error and keeps its last good checkpoint;
# - failed writes of train.log and the metrics file are errors (/dev/full);
# - resume cuts a torn last line of metrics.jsonl;
# - ranks: different configurations are refused, naming the rank; a rank
#   that stops (SIGSTOP) makes the others end within rank_timeout, naming it.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
cd "$src"

tiny_char_run "$data"

# a prompt the tokenizer cannot encode: refused before any step
expect_status 1 "$tgrun" "$s" out_dir="$tmp/p" 'sample_prompt=é'
contains "$tmp/out" "sample_prompt cannot be encoded"
if grep -q "^step" "$tmp/out"; then bad "the bad prompt was found after training"; else ok; fi
expect_status 0 "$tgrun" "$s" out_dir="$tmp/p" 'sample_prompt=é' sample_tokens=0

# the checkpoint comes before a step's sample and evaluation: a run killed
# in a long sample (65536 tokens, the most) still kept its last step; and
# more is refused
expect_status 2 "$tgrun" "$s" out_dir="$tmp/longsample" sample_tokens=65537
contains "$tmp/out" "sample_tokens must be in [0, 65536], not 65537"
"$tgrun" "$s" out_dir="$tmp/longsample" max_steps=2 sample_interval=2 sample_tokens=65536 > "$tmp/ls.out" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q '^checkpoint:' "$tmp/ls.out" && break; sleep 0.1; done
sleep 1
kill -9 $job 2> /dev/null
wait $job 2> /dev/null
contains "$tmp/ls.out" "ckpt.safetensors at step 2"
[ -f "$tmp/longsample/ckpt.safetensors" ] && ok || bad "the run killed in its sample left no checkpoint"

# val.bin too short for one sequence: refused before any step;
# prepare --val-fraction 0 writes an empty one
mkdir -p "$tmp/short"
cp "$tmp/data/train.bin" "$tmp/data/tokenizer.json" "$tmp/short/"
/usr/bin/python3 - "$tmp/data/val.bin" "$tmp/short/val.bin" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
h = list(struct.unpack("<256i", b[:1024]))
h[2] = 16  # 16 tokens: one short of a sequence of 16 and its targets
open(sys.argv[2], "wb").write(struct.pack("<256i", *h) + b[1024:1024 + 2 * 16])
PY
expect_status 1 "$tgrun" "$s" out_dir="$tmp/v" data_dir="$tmp/short"
contains "$tmp/out" "val.bin has"
contains "$tmp/out" "needs 17"
if grep -q "^step" "$tmp/out"; then bad "the short val.bin was found after training"; else ok; fi
expect_status 0 "$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$tmp/noval" \
  --val-fraction 0
expect_status 1 "$tgrun" "$s" out_dir="$tmp/v" data_dir="$tmp/noval"
contains "$tmp/out" "val.bin has 0 tokens"

# a memory plan larger than the machine: refused with the peak and the
# largest batch that fits (16M sequences of 16 tokens need terabytes)
expect_status 1 "$tgrun" "$s" out_dir="$tmp/m" batch_size=16777216
contains "$tmp/out" "GiB are free (MemAvailable"
contains "$tmp/out" "is the largest that would fit"

# metrics_file naming the run's own files
for f in ckpt.safetensors ckpt.prev.safetensors train.log train.cfg ckpt.safetensors.tmp.123 tgrun.lock; do
  expect_status 2 "$tgrun" "$s" out_dir="$tmp/n" metrics_file=$f
  contains "$tmp/out" "must not name"
done

# two runs in one out_dir: the second is refused while the first runs
"$tgrun" "$s" out_dir="$tmp/busy" max_steps=100000000 log_interval=100000000 checkpoint_interval=0 \
  > "$tmp/first.out" 2>&1 &
first=$!
for _ in $(seq 600); do grep -q "^training" "$tmp/first.out" && break; sleep 0.1; done
expect_status 1 "$tgrun" "$s" out_dir="$tmp/busy"
contains "$tmp/out" "another run is using this out_dir"
contains "$tmp/out" "pid $first"
kill -9 $first
wait $first 2> /dev/null
# the killed run's lock file is left, and blocks nothing
[ -f "$tmp/busy/tgrun.lock" ] && ok || bad "no lock file was left by the killed run"
expect_status 0 "$tgrun" "$s" out_dir="$tmp/busy"

# resume takes the checkpoint's seed; a different explicit seed is refused
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r" seed=7 max_steps=2
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r" resume=true
contains "$tmp/out" "seed 7: the checkpoint's"
# out_dir's train.cfg says the seed the run used
if grep -qE '^seed +=  *7$' "$tmp/r/train.cfg"; then ok; else bad "out_dir/train.cfg does not say seed 7 after resume"; fi
expect_status 1 "$tgrun" "$s" out_dir="$tmp/r" resume=true seed=8 max_steps=6
contains "$tmp/out" "was trained with seed 7"
contains "$tmp/out" "reseed = true"
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r" resume=true seed=8 reseed=true max_steps=6
contains "$tmp/out" "reseed = true; the checkpoint's was 7"

# the same data stream as an uninterrupted run with that seed
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r1" seed=7
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r2" seed=7 max_steps=2
expect_status 0 "$tgrun" "$s" out_dir="$tmp/r2" resume=true
if cmp -s <(grep -o '"loss":[^,]*' "$tmp/r1/metrics.jsonl") <(grep -o '"loss":[^,]*' "$tmp/r2/metrics.jsonl"); then ok
else bad "resume without seed did not continue the checkpoint's data stream"; fi

# divergence: NaN stops the run, and the last good checkpoint stays
expect_status 0 "$tgrun" "$s" out_dir="$tmp/d" max_steps=2
cp "$tmp/d/ckpt.safetensors" "$tmp/good.safetensors"
expect_status 1 "$tgrun" "$s" out_dir="$tmp/d" resume=true max_steps=8 learning_rate=1e30 min_lr=0 \
  checkpoint_interval=1 grad_clip=0
contains "$tmp/out" "training diverged"
if grep -q "^checkpoint" "$tmp/out"; then bad "a diverged step wrote a checkpoint"; else ok; fi
cmp -s "$tmp/d/ckpt.safetensors" "$tmp/good.safetensors" && ok || bad "the good checkpoint was replaced"
expect_status 0 "$tgrun" "$s" out_dir="$tmp/d" resume=true max_steps=3
contains "$tmp/out" "2 steps done"

# failed writes: train.log and the metrics file on a full device
if [ -w /dev/full ]; then
  mkdir -p "$tmp/full1" "$tmp/full2"
  ln -s /dev/full "$tmp/full1/metrics.jsonl"
  expect_status 1 "$tgrun" "$s" out_dir="$tmp/full1"
  contains "$tmp/out" "metrics.jsonl"
  contains "$tmp/out" "No space left on device"
  ln -s /dev/full "$tmp/full2/train.log"
  expect_status 1 "$tgrun" "$s" out_dir="$tmp/full2"
  contains "$tmp/out" "cannot write $tmp/full2/train.log: No space left on device"
  expect_status 0 "$tgrun" "$s" out_dir="$tmp/full3" max_steps=2
  ln -sf /dev/full "$tmp/full3/samples.txt"
  expect_status 1 "$tgrun" "$s" out_dir="$tmp/full3" resume=true
  contains "$tmp/out" "cannot write $tmp/full3/samples.txt: No space left on device"
else
  echo "note: no writable /dev/full; failed-write checks skipped"
fi

# a torn last line of metrics.jsonl is cut on resume: every line is JSON
expect_status 0 "$tgrun" "$s" out_dir="$tmp/t" max_steps=2
printf '{"step":3,"lo' >> "$tmp/t/metrics.jsonl"
expect_status 0 "$tgrun" "$s" out_dir="$tmp/t" resume=true
if /usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows[-1]['step'] == 4, rows[-1]" "$tmp/t/metrics.jsonl"; then ok; else bad "metrics.jsonl is not JSON lines after resume"; fi

# the kernel cache: damaged entries are rebuilt, never loaded (a truncated
# .so crashed dlopen's caller with SIGBUS); a read-only cache holding every
# entry serves a run
export TG_CACHE=$tmp/kcache
expect_status 0 "$tgrun" "$s" out_dir="$tmp/k1" max_steps=1
ls "$TG_CACHE"/*.so-sum > /dev/null 2>&1 && ok || bad "no sealed .so in the cache"
for f in "$TG_CACHE"/*.so; do truncate -s 100 "$f"; done
expect_status 0 "$tgrun" "$s" out_dir="$tmp/k2" max_steps=1
if grep -q "from the cache" "$tmp/out"; then bad "a truncated .so was used from the cache"; else ok; fi
for f in "$TG_CACHE"/*.so; do head -c "$(stat -c %s "$f")" /dev/urandom > "$f.x" && mv "$f.x" "$f"; done
expect_status 0 "$tgrun" "$s" out_dir="$tmp/k3" max_steps=1
if grep -q "from the cache" "$tmp/out"; then bad "an altered .so was used from the cache"; else ok; fi
# read-only (as another user when root, whom no mode stops)
as_reader() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
chmod 755 "$tmp"
mkdir -m 777 "$tmp/ro"
chmod -R a-w,a+rX "$TG_CACHE"
expect_status 0 as_reader "$tgrun" "$s" out_dir="$tmp/ro/k4" max_steps=1
contains "$tmp/out" "sample     12 kernels"
[ "$(grep -c "from the cache" "$tmp/out")" = 4 ] && ok || bad "a read-only cache did not serve all four graphs"
chmod -R u+w "$TG_CACHE"
for f in "$TG_CACHE"/*.so; do truncate -s 100 "$f"; done
chmod -R a-w "$TG_CACHE"
expect_status 1 as_reader "$tgrun" "$s" out_dir="$tmp/ro/k5" max_steps=1
contains "$tmp/out" "set TG_CACHE to a writable directory"
chmod -R u+w "$TG_CACHE"
export TG_CACHE=$tmp/cache

# every documented range of train.cfg (docs/train-config.md) at its bounds
# trains (test_train_config holds the parser to the same table, and one
# step beyond each bound refused); one step beyond, a usage error here too
big=9007199254740992
for kv in "batch_size=1" "block_size=2" "grad_accum=1" "grad_accum=3" "max_steps=1 warmup_steps=0" \
  "learning_rate=0 min_lr=0" "warmup_steps=4" "lr_decay_steps=0" "lr_decay_steps=$big" "beta1=0 beta2=0" \
  "beta1=0.9999999 beta2=0.9999999" "eps=1e-30" "eps=1e300" "weight_decay=0" "weight_decay=1e-300" "grad_clip=0" \
  "grad_clip=1e300" "eval_interval=0" "eval_interval=$big" "eval_batches=1" "log_interval=1" "log_interval=$big" \
  "sample_interval=0" "sample_interval=$big" "sample_tokens=0" "sample_tokens=1" "temperature=1e-30" \
  "temperature=1e300" "top_k=0" "top_k=16777216" "checkpoint_interval=0" "checkpoint_interval=$big" "seed=0" \
  "seed=$big" "threads=0" "threads=1" "peak_flops=0" "peak_flops=1e300" "rank_timeout=1" "rank_timeout=86400" \
  "sample_interval=1 eval_interval=1 checkpoint_interval=1 log_interval=1"; do
  # shellcheck disable=SC2086
  # (overwrite=true: each run replaces the one before in the same out_dir)
  expect_status 0 "$tgrun" "$s" out_dir="$tmp/range" overwrite=true $kv
  grep -q "^done" "$tmp/out" && ok || bad "$kv: the run did not finish"
done
if [ -z "${TG_SANITIZED:-}" ]; then
  expect_status 0 "$tgrun" "$s" out_dir="$tmp/range" overwrite=true threads=1024
fi
for kv in "batch_size=0" "block_size=1" "grad_accum=0" "max_steps=0" "beta1=0.99999991" "beta2=-1e-300" "eps=9e-31" \
  "temperature=9e-31" "top_k=16777217" "threads=1025" "seed=-1" "rank_timeout=0" "rank_timeout=86401" \
  "eval_batches=16777217" "sample_tokens=16777217" "log_interval=0"; do
  # shellcheck disable=SC2086
  expect_status 2 "$tgrun" "$s" out_dir="$tmp/range" $kv
done
# block_size at most the model's (16 here): the model's own rule, an error before training
expect_status 1 "$tgrun" "$s" out_dir="$tmp/range" block_size=17
if grep -q "^step" "$tmp/out"; then bad "block_size above the model's trained"; else ok; fi

# --nproc far above the cores is refused before anything starts
cores=$(nproc)
expect_status 2 "$tgrun" --nproc 1000 "$s" out_dir="$tmp/np"
contains "$tmp/out" "this machine has $cores core"
expect_status 2 "$tgrun" --nproc $((4 * cores + 1)) "$s" out_dir="$tmp/np"
expect_status 2 "$tgrun" --nproc 0 "$s" out_dir="$tmp/np"
expect_status 2 "$tgrun" --nproc 4097 "$s" out_dir="$tmp/np"
[ -e "$tmp/np" ] && bad "--nproc refused, yet a run started" || ok

# ranks: the configuration is compared at start-up; a stopped rank ends
# the job within rank_timeout
if [ -n "${TG_SANITIZED:-}" ]; then
  echo "note: MPI part skipped in the sanitizer build (Open MPI's own allocations read as leaks)"
elif command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # rank 1 with another batch_size (mpirun's MPMD form: one config each)
  expect_status 1 timeout 120 mpirun --oversubscribe -np 1 "$tgrun" "$s" out_dir="$tmp/mp" : \
    -np 1 "$tgrun" "$s" out_dir="$tmp/mp" batch_size=3
  contains "$tmp/out" "rank 1 differs from rank 0"
  contains "$tmp/out" "rank 1 was started with another configuration than rank 0: here 'batch_size          = 3', on rank 0 'batch_size          = 2'"
  # --nproc 1: one rank, no mpirun; more ranks than cores: a warning, and the run goes on
  expect_status 0 "$tgrun" --nproc 1 "$s" out_dir="$tmp/np1" max_steps=1
  contains "$tmp/out" "step 1/1"
  expect_status 0 "$tgrun" --nproc $((cores + 1)) "$s" out_dir="$tmp/np3" max_steps=1 sample_tokens=0
  contains "$tmp/out" "more ranks than this machine's $cores core"
  # threads that, with the other rank's, exceed the cores: one warning
  # (rank 0's), and the run goes on; threads = 0 (each rank its share): none
  expect_status 0 "$tgrun" --nproc 2 "$s" out_dir="$tmp/thr" max_steps=1 sample_tokens=0 threads=$cores
  if [ "$(grep -c "threads = $cores with 2 ranks on this machine is $((2 * cores)) threads" "$tmp/out")" = 1 ]; then ok
  else bad "threads = $cores on 2 ranks: not warned exactly once"; cat "$tmp/out"; fi
  expect_status 0 "$tgrun" --nproc 2 "$s" out_dir="$tmp/thr0" max_steps=1 sample_tokens=0
  if grep -q "warning: .*threads" "$tmp/out"; then bad "threads = 0 warned"; cat "$tmp/out"; else ok; fi
  # rank 1 stops: rank 0 names it and ends the job within rank_timeout
  TG_TEST_MARK=$tmp "$tgrun" --nproc 2 "$s" out_dir="$tmp/stop" max_steps=100000000 log_interval=100000000 \
    checkpoint_interval=0 rank_timeout=5 > "$tmp/stop.out" 2>&1 &
  job=$!
  for _ in $(seq 600); do grep -q "^training" "$tmp/stop.out" && break; sleep 0.1; done
  victim=
  for e in /proc/[0-9]*/environ; do
    [ -r "$e" ] || continue
    if { tr '\0' '\n' < "$e"; } 2> /dev/null | grep -qx "TG_TEST_MARK=$tmp" &&
      { tr '\0' '\n' < "$e"; } 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      victim=$(basename "$(dirname "$e")")
    fi
  done
  if [ -n "$victim" ]; then
    start=$(date +%s)
    kill -STOP "$victim"
    for _ in $(seq 600); do kill -0 $job 2> /dev/null || break; sleep 0.1; done
    took=$(($(date +%s) - start))
    if kill -0 $job 2> /dev/null; then
      bad "the job did not end within 60 s of a rank stopping"
      kill -9 "$victim" $job 2> /dev/null
    else ok; fi
    wait $job
    [ $? -ne 0 ] && ok || bad "the job ended with status 0 after a rank stopped"
    contains "$tmp/stop.out" "for rank 1, which did not answer"
    contains "$tmp/stop.out" "rank_timeout"
    echo "a stopped rank ended the job in ${took} s (rank_timeout=5)"
    kill -9 "$victim" 2> /dev/null
  else
    bad "could not find rank 1 of the job"
    kill $job
  fi
  # rank 1 dies (SIGKILL): the job ends too, with an error
  TG_TEST_MARK=$tmp.kill "$tgrun" --nproc 2 "$s" out_dir="$tmp/kill" max_steps=100000000 log_interval=100000000 \
    checkpoint_interval=0 rank_timeout=5 > "$tmp/kill.out" 2>&1 &
  job=$!
  for _ in $(seq 600); do grep -q "^training" "$tmp/kill.out" && break; sleep 0.1; done
  victim=
  for e in /proc/[0-9]*/environ; do
    [ -r "$e" ] || continue
    if { tr '\0' '\n' < "$e"; } 2> /dev/null | grep -qx "TG_TEST_MARK=$tmp.kill" &&
      { tr '\0' '\n' < "$e"; } 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      victim=$(basename "$(dirname "$e")")
    fi
  done
  if [ -n "$victim" ]; then
    kill -9 "$victim"
    for _ in $(seq 600); do kill -0 $job 2> /dev/null || break; sleep 0.1; done
    if kill -0 $job 2> /dev/null; then bad "the job did not end within 60 s of a rank dying"; kill -9 $job; else ok; fi
    wait $job
    [ $? -ne 0 ] && ok || bad "the job ended with status 0 after a rank died"
  else
    bad "could not find rank 1 of the second job"
    kill $job
  fi
else
  bad "mpirun is missing (openmpi-bin)"
fi
finish
