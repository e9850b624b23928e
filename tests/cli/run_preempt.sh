#!/usr/bin/env bash
# run_preempt.sh TGRUN SRCDIR [TRIALS]: a signal stops training without
# losing it (runtime/train/train.h: TG_TRAIN_STOPPED).
#
# - TRIALS times (default 12), SIGTERM, SIGINT and SIGUSR1 in turn at a
#   random moment of a long run: the run finishes its step, writes a
#   checkpoint, says so and exits 75; resumed 3 more steps, its checkpoint
#   is byte for byte that of a run of the same steps made at once (the
#   checkpoint holds the step, the weights, the moments and the data
#   position);
# - the signals reach a thread of their own ("tg-signals"); every other
#   thread blocks them (runtime/train/stop_signals.h says why);
# - a second signal ends the process at once (here during an evaluation
#   of 2^24 batches that the first one does not cut short): status 143;
# - on 2 ranks (mpirun forwards SIGUSR1 to every rank) both ranks stop
#   after the same step and the job exits 75.
set -u
src=$(cd "$2" && pwd)
trials=${3:-12}
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
cd "$src"

expect_status 0 "$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$tmp/data"
cat > "$tmp/s.cfg" <<CFG
model = "models/gpt2.tg"
model.n_layer = 2
model.n_head = 2
model.n_embd = 32
model.block_size = 32
data_dir = "$tmp/data"
batch_size = 2
block_size = 32
learning_rate = 3e-3
min_lr = 3e-4
warmup_steps = 2
lr_decay_steps = 20
max_steps = 100000000
eval_interval = 0
sample_tokens = 0
checkpoint_interval = 0
log_interval = 100000000
threads = 1
CFG

# wait_for FILE TEXT: up to 60 s for FILE to hold TEXT
wait_for() { for _ in $(seq 600); do grep -aq -- "$2" "$1" 2> /dev/null && return 0; sleep 0.1; done; return 1; }

sigs=(TERM INT USR1)
for t in $(seq "$trials"); do
  sig=${sigs[$(((t - 1) % 3))]}
  out=$tmp/t$t
  "$tgrun" "$tmp/s.cfg" out_dir="$out" > "$tmp/t$t.out" 2>&1 &
  job=$!
  wait_for "$tmp/t$t.out" "^training" || bad "trial $t: training did not start"
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  kill -"$sig" $job
  wait $job
  rc=$?
  [ $rc -eq 75 ] && ok || { bad "trial $t: SIG$sig ended the run with status $rc, not 75"; tail -3 "$tmp/t$t.out"; continue; }
  contains "$tmp/t$t.out" "stopped by SIG$sig after step"
  step=$(sed -n 's/^checkpoint: .* at step \([0-9]*\) .*/\1/p' "$tmp/t$t.out" | tail -1)
  if [ -z "$step" ]; then bad "trial $t: no checkpoint after SIG$sig"; continue; fi
  expect_status 0 "$tgrun" "$tmp/s.cfg" out_dir="$out" resume=true max_steps=$((step + 3))
  expect_status 0 "$tgrun" "$tmp/s.cfg" out_dir="$tmp/ref$t" max_steps=$((step + 3))
  if cmp -s "$out/ckpt.safetensors" "$tmp/ref$t/ckpt.safetensors"; then ok
  else bad "trial $t: stopped by SIG$sig at step $step and resumed, the checkpoint differs from $((step + 3)) steps at once"; fi
  echo "trial $t: SIG$sig stopped the run after step $step; resumed exactly"
done

# a second signal: at once
"$tgrun" "$tmp/s.cfg" out_dir="$tmp/twice" eval_interval=1 eval_batches=16777216 > "$tmp/twice.out" 2>&1 &
job=$!
wait_for "$tmp/twice.out" "^training" || bad "the run did not start"
sleep 1
kill -TERM $job
sleep 0.5
kill -TERM $job
for _ in $(seq 100); do kill -0 $job 2> /dev/null || break; sleep 0.1; done
if kill -0 $job 2> /dev/null; then bad "a second SIGTERM did not end the run within 10 s"; kill -9 $job; fi
wait $job
rc=$?
[ $rc -eq 143 ] && ok || bad "a second SIGTERM ended the run with status $rc, not 143"

# The signals reach one thread of their own, never one that runs kernels
# (runtime/train/stop_signals.h: oneDNN's GEMM kernels point the stack
# pointer into the heap, where a signal's frame would land): on 2 threads
# every thread but "tg-signals" blocks SIGINT, SIGUSR1 and SIGTERM (bits 2,
# 10 and 15 of /proc's SigBlk: 0x4202), and tg-signals blocks none of them.
# The C compiler it starts blocks none of them (a fresh cache, and a CC
# that notes its mask), or an interrupted run would leave it running.
# (read with builtins: a child process would read the shell's mask while
# the shell forks it)
cat > "$tmp/cc.sh" << CC
#!/bin/sh
while read -r key value; do [ "\$key" = SigBlk: ] && echo "\$value" >> "$tmp/cc-masks"; done < /proc/\$\$/status
exec cc "\$@"
CC
chmod +x "$tmp/cc.sh"
TG_CACHE=$tmp/cache-masks CC=$tmp/cc.sh "$tgrun" "$tmp/s.cfg" out_dir="$tmp/masks" threads=2 > "$tmp/masks.out" 2>&1 &
job=$!
wait_for "$tmp/masks.out" "^step  *1/" || bad "the 2-thread run did not reach step 1"
open=0 blocked=0 receivers=0
for t in /proc/$job/task/*; do
  blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' "$t/status")
  [ -n "$blk" ] || continue
  if [ "$(cat "$t/comm")" = tg-signals ]; then
    receivers=$((receivers + 1))
    [ $((0x$blk & 0x4202)) -eq 0 ] || bad "the tg-signals thread blocks a stop signal (SigBlk $blk)"
  elif [ $((0x$blk & 0x4202)) -eq $((0x4202)) ]; then blocked=$((blocked + 1))
  else open=$((open + 1)); echo "thread $(basename "$t") ($(cat "$t/comm")) leaves a stop signal open: SigBlk $blk"; fi
done
[ $receivers -eq 1 ] && ok || bad "$receivers threads named tg-signals, not 1"
[ $open -eq 0 ] && ok || bad "$open threads besides tg-signals can take a stop signal"
[ $blocked -ge 2 ] && ok || bad "only $blocked threads run training on 2 threads"
kill -TERM $job
wait $job
rc=$?
[ $rc -eq 75 ] && ok || bad "SIGTERM ended the 2-thread run with status $rc, not 75"
blocking=
[ -s "$tmp/cc-masks" ] && while read -r b; do [ $((0x$b & 0x4202)) -eq 0 ] || blocking=$b; done < "$tmp/cc-masks"
if [ ! -s "$tmp/cc-masks" ]; then bad "the 2-thread run with a fresh cache compiled nothing with \$CC"
elif [ -n "$blocking" ]; then bad "the C compiler started blocking a stop signal (SigBlk $blocking)"
else ok; fi

# two ranks: SIGUSR1 to mpirun reaches both, and they stop together
if [ -z "${TG_SANITIZED:-}" ] && command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  "$tgrun" --nproc 2 "$tmp/s.cfg" out_dir="$tmp/mp" > "$tmp/mp.out" 2>&1 &
  job=$!
  wait_for "$tmp/mp.out" "^training" || bad "the 2-rank run did not start"
  sleep 1
  kill -USR1 $job
  wait $job
  rc=$?
  [ $rc -eq 75 ] && ok || { bad "SIGUSR1 ended the 2-rank job with status $rc, not 75"; tail -5 "$tmp/mp.out"; }
  contains "$tmp/mp.out" "stopped by SIGUSR1 after step"
  [ -f "$tmp/mp/ckpt.safetensors" ] && ok || bad "the 2-rank job stopped without a checkpoint"
fi

finish
