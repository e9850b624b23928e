#!/usr/bin/env bash
# gpu_check.sh: the GPU proof in one command, under one deadline.  Run on a
# machine with an NVIDIA GPU (the device tool's, with .gpu/ carried from
# tools/gpu_pack.sh; or any machine where tg was built).  A lent machine
# gives a session 15 minutes and a command 10, so everything here fits in
# TG_GPU_CHECK_DEADLINE seconds (default 480), and each stage's time limit
# is what is left of it less what the later stages are guaranteed.  The
# stages run in order of value, each a row of the table:
#
#   device      the GPU, driver and toolkit (and the pack or the build there)
#   grads       the 2-layer GPT's gradients, f32 and bf16, against the
#               reference interpreter (tests/cli/run_cuda_backend.sh grads)
#   steps       5 AdamW steps against the CPU backend; every kernel launched
#   graphs      the step replayed as a CUDA graph = launch by launch
#   train       a short training run, graphs on
#   memcheck    compute-sanitizer --tool memcheck over two steps
#   numerics    bench/gpt2_numerics.sh: GPT-2 124M, bf16, 20 steps, tg's
#               losses against PyTorch's (bf16 autocast), same weights and
#               batches
#   throughput  bench/gpt2_gpu.sh: GPT-2 124M at T = 1024, tg against
#               nanoGPT with torch.compile at the same batch: tokens/s,
#               ratio, MFU, measured time per kernel category beside
#               tgc --report traffic's estimate
#   racecheck   compute-sanitizer --tool racecheck over two steps, if the
#               time left allows (last: the least needed)
#
# Each stage's floor, a share of the deadline, is kept for it while the
# stages before it run (FLOOR below); a stage that runs out of its limit
# is killed (its row FAIL, "timed out") and the next one still runs.
# compute-sanitizer is found on the PATH, in $CUDA_HOME/bin,
# /usr/local/cuda/bin or beside nvcc; where it is not, memcheck's row says
# "missing", which fails the check as FAIL does.
#
# Every row is printed and appended to $OUT/table.txt as it finishes, so a
# kill leaves the rows so far.  What comes back ($OUT, or ./gpu-logs): at
# most 8 files, here 5:
#   table.txt        the rows
#   setup.log        the source, the pack or the build there, the device
#   checks.log       grads, steps, graphs, train, memcheck, racecheck
#   numerics.log     the numerics stage and its files, each under a header
#   throughput.log   the throughput stage and its files, each under a header
# Exit status: 0 when no row is FAIL or missing, 1 otherwise.
#
# The compile time (bench/compile_time.sh) needs no GPU: it runs here.
#
# Environment:
#   TG_GPU_CHECK_DEADLINE  seconds for the whole check [480]
#   TG_GPU_CHECK_BACKEND   cuda; cuda-emu rehearses the same script here on
#                          the emulated device with small sizes (ctest
#                          gpu_rehearsal), so that the minutes on a GPU are
#                          not spent on a typo; rows that need what this
#                          machine lacks (compute-sanitizer, torch.compile
#                          on CUDA) say so
#   TG_GPU_CHECK_BUILD=1   build from source there even when the packed
#                          binaries run (the fallback for when they do not)
#   TG_GPU_PACK            the pack's folder [.gpu] (gpu_pack.sh's
#                          TG_GPU_PACK_DIR; the ctest gpu_rehearsal's own)
#   TGRUN, TGC             binaries to use instead of the pack
#   TG_GPU_BENCH_STEPS     throughput's steps on the GPU [20]
set -uo pipefail
backend=${TG_GPU_CHECK_BACKEND:-cuda}
deadline=${TG_GPU_CHECK_DEADLINE:-480}
t0=$SECONDS
cd "$(dirname "$0")/.." || exit 2
src=$(pwd)
out=${OUT:-$src/gpu-logs}
mkdir -p "$out"
table=$out/table.txt setup=$out/setup.log checks=$out/checks.log
rm -f "$table" "$setup" "$checks" "$out/numerics.log" "$out/throughput.log"
work=$(mktemp -d /tmp/tg-gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
rehearsal=
[ "$backend" = cuda ] || rehearsal="rehearsal on $backend: "

# Stages after the device, in order, with the share of the deadline (in
# percent) kept for each while earlier ones run.  On a GPU: estimates for
# an H100, where the whole check should take 4 to 6 minutes (the first GPU
# runs will tell); on the emulated device the 2-layer parts weigh more (each
# compiles its kernels with the host's C++ compiler) and the benches less.
# racecheck's is 0: it gets what is left, if that is at least 10 s.
stages=(grads steps graphs train memcheck numerics throughput racecheck)
if [ "$backend" = cuda ]; then
  declare -A FLOOR=([grads]=5 [steps]=5 [graphs]=4 [train]=5 [memcheck]=8 [numerics]=15 [throughput]=30 [racecheck]=0)
else
  declare -A FLOOR=([grads]=8 [steps]=15 [graphs]=8 [train]=12 [memcheck]=3 [numerics]=12 [throughput]=15 [racecheck]=0)
fi
left() { echo $(( deadline - (SECONDS - t0) )); }
# what the stages after $1 are guaranteed, in seconds
reserve_after() {
  local s after='' sum=0
  [ "$1" = device ] && after=1
  for s in "${stages[@]}"; do
    [ -n "$after" ] && sum=$(( sum + FLOOR[$s] ))
    [ "$s" = "$1" ] && after=1
  done
  echo $(( sum * deadline / 100 ))
}

rows=()
row() { # NAME STATUS SECONDS DETAIL
  local line
  line=$(printf '%-10s %-7s %4ss  %s' "$1" "$2" "$3" "$4" | cut -c1-260)
  rows+=("$line")
  echo "$line" | tee -a "$table"
}

# stage NAME LOG CMD...: CMD under NAME's limit, its output appended to LOG
# under a header and kept in $work/NAME.out; sets rc, secs and late (the
# words a row starts with when it timed out).  Returns 1, with a FAIL row,
# when too little time is left to start it.
stage() {
  local name=$1 log=$2 limit why
  shift 2
  limit=$(( $(left) - $(reserve_after "$name") - 15 ))
  if [ "$limit" -lt 10 ]; then
    why="not run: $(left) s of the $deadline s deadline left, $(reserve_after "$name") s of it kept for the later stages"
    if [ "$name" = racecheck ]; then row "$name" skip 0 "$why"; else row "$name" FAIL 0 "$why"; fi
    return 1
  fi
  printf '\n==== %s (limit %s s, %s s into the check): %s\n' "$name" "$limit" "$(( SECONDS - t0 ))" "$*" >> "$log"
  local t=$SECONDS
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$work/$name.out" >> "$log"
  rc=${PIPESTATUS[0]}
  secs=$(( SECONDS - t ))
  late=
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then late="timed out after $limit s; "; fi
  return 0
}
status() { if [ "$rc" -eq 0 ]; then echo ok; else echo FAIL; fi; }

# fold DIR LOG [SKIP...]: each file of DIR appended to LOG under a header
# (the files that come back are few), but the SKIP ones, which the bench
# printed already
fold() {
  local dir=$1 log=$2 f
  shift 2
  for f in $(cd "$dir" && find . -type f | sort); do
    case " $* " in *" ${f#./} "*) continue ;; esac
    printf '\n==== %s\n' "${f#./}" >> "$log"
    cat "$dir/$f" >> "$log"
  done
}

finish() {
  local fails
  fails=$(printf '%s\n' "${rows[@]}" | awk '$2 == "FAIL" || $2 == "missing"' | wc -l)
  {
    echo
    echo "== tg GPU checks, backend $backend: ${#rows[@]} rows, $fails FAIL or missing, $(( SECONDS - t0 )) s of $deadline"
    printf '%s\n' "${rows[@]}"
  } | tee -a "$table"
  [ "$fails" -eq 0 ]
  exit
}

# ---- setup: the pack (or a build there), the toolkit
echo "== tg GPU checks: backend $backend, deadline $deadline s; rows as they finish (also $table)"
echo "== tg GPU checks: backend $backend, deadline $deadline s" >> "$table"
how=
if [ -n "${TG_GPU_PACK:-}" ] && [ ! -f "$TG_GPU_PACK/tg-gpu.tar.gz" ]; then
  row device FAIL 0 "TG_GPU_PACK names $TG_GPU_PACK, which holds no tg-gpu.tar.gz (make one: tools/gpu_pack.sh)"
  finish
fi
if [ -n "${TGRUN:-}" ] && [ -n "${TGC:-}" ]; then
  tgrun=$TGRUN tgc=$TGC how="binaries $tgrun"
  export TG_DATA=${TG_DATA:-$src/../shared/data}
elif [ -f "${TG_GPU_PACK:-.gpu}/tg-gpu.tar.gz" ]; then
  packdir=${TG_GPU_PACK:-.gpu}
  root=$work/pack
  # gzip, not xz: gzip is on every Debian or Ubuntu image (Essential)
  if ! { mkdir -p "$root" && tar -C "$root" -xzf "$packdir/tg-gpu.tar.gz" >> "$setup" 2>&1; }; then
    row device FAIL 0 "cannot unpack $packdir/tg-gpu.tar.gz: $(tail -1 "$setup" | cut -c1-120)"
    finish
  fi
  export PATH="$root/bin:$PATH" LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LIBRARY_PATH="$root/lib${LIBRARY_PATH:+:$LIBRARY_PATH}" TG_DATA=$root/data
  export TG_ONE_RANK=1 # the pack's tgrun is built without MPI
  tgrun=$root/bin/tgrun tgc=$root/bin/tgc how="pack of $(head -1 "$packdir/SOURCE" | cut -c1-12)"
  echo "pack built from $(cat "$packdir/SOURCE")" >> "$setup"
  if [ -n "${TG_GPU_CHECK_BUILD:-}" ] || ! "$tgrun" --version >> "$setup" 2>&1 || ! "$tgc" --version >> "$setup" 2>&1; then
    # another image's system libraries: build here, without Flex, Bison or Check
    if [ -n "${TG_GPU_CHECK_BUILD:-}" ]; then why="TG_GPU_CHECK_BUILD is set"
    else why="the packed binaries do not run here"; fi
    echo "$why; building from source" >> "$setup"
    limit=$(( $(left) - $(reserve_after device) - 15 ))
    t=$SECONDS
    # -DTG_WERROR=OFF: that machine's compiler may warn where ours does not
    if ! timeout -k 10 "$limit" cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DTG_MPI=OFF -DTG_TESTS=OFF -DTG_WERROR=OFF \
           -DTG_GRAMMAR_DIR="$root/grammar" >> "$setup" 2>&1 ||
       ! timeout -k 10 $(( limit - (SECONDS - t) )) cmake --build "$work/build" -j "$(nproc)" --target tgc tgrun >> "$setup" 2>&1; then
      tail -20 "$setup"
      row device FAIL $(( SECONDS - t )) "$why; the build here failed or ran out of its $limit s (setup.log)"
      finish
    fi
    tgrun=$work/build/tgrun tgc=$work/build/tgc how="built here in $(( SECONDS - t )) s ($why)"
  fi
else
  tgrun=$src/build/tgrun tgc=$src/build/tgc how="binaries $src/build"
  export TG_DATA=${TG_DATA:-$src/../shared/data}
fi
export TG_CACHE=$work/cache
# the toolkit: nvcc and compute-sanitizer where the PATH may not reach
# (/usr/local/cuda/bin is not on it on the lent machines), its libraries
# (cuBLASLt, NVRTC) where the loader finds them
find_tool() { # NAME: its path, from the PATH, CUDA_HOME, /usr/local/cuda or beside nvcc
  local d nvcc
  command -v "$1" 2> /dev/null && return 0
  nvcc=$(command -v nvcc 2> /dev/null || true)
  for d in ${CUDA_HOME:+"$CUDA_HOME/bin"} ${CUDA_HOME:+"$CUDA_HOME/$1"} /usr/local/cuda/bin "/usr/local/cuda/$1" \
           ${nvcc:+"$(dirname "$nvcc")"}; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}
nvcc=$(find_tool nvcc) && PATH="$PATH:$(dirname "$nvcc")"
sanitizer=$(find_tool compute-sanitizer)
export CUDA_HOME=${CUDA_HOME:-$( [ -n "$nvcc" ] && dirname "$(dirname "$nvcc")" || echo /usr/local/cuda)}
for d in "$CUDA_HOME/lib64" "$CUDA_HOME/targets/x86_64-linux/lib"; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
{
  echo "tgrun $tgrun, tgc $tgc ($how); TG_DATA $TG_DATA"
  echo "python3: $(command -v python3) ($(python3 -c 'import sys, numpy, torch; print(sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__)' 2>&1 | tail -1))"
  echo "nvcc: ${nvcc:-none}; compute-sanitizer: ${sanitizer:-none}; CUDA_HOME $CUDA_HOME"
} >> "$setup"

# ---- device
t=$SECONDS
if [ "$backend" = cuda ]; then
  # nvidia-smi where the PATH may not reach (the driver's own folder); if
  # there is none, the stages ask the driver themselves: say so, go on
  smi=$(command -v nvidia-smi || ls /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi 2> /dev/null | head -1)
  if [ -z "$smi" ]; then
    toolkit=$( [ -n "$nvcc" ] && "$nvcc" --version | grep -o 'release [0-9.]*')
    row device ok $(( SECONDS - t )) "no nvidia-smi found (PATH, /usr/local/nvidia/bin): the stages will ask the driver; nvcc ${toolkit:-none}; $how"
  elif timeout 60 "$smi" -L > "$work/gpus" 2>&1; then
    driver=$(timeout 60 "$smi" --query-gpu=driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
    toolkit=$( [ -n "$nvcc" ] && "$nvcc" --version | grep -o 'release [0-9.]*')
    { cat "$work/gpus"; echo "driver, memory: $driver"; echo "nvcc: $toolkit"; } >> "$setup"
    row device ok $(( SECONDS - t )) "$(head -1 "$work/gpus" | cut -c1-90); driver $driver; nvcc ${toolkit:-none}; $how"
  else
    cat "$work/gpus" >> "$setup"
    row device FAIL $(( SECONDS - t )) "no GPU answers nvidia-smi: $(head -1 "$work/gpus")"
    finish
  fi
else
  row device ok $(( SECONDS - t )) "${rehearsal}the emulated device; $how"
fi

# ---- (a) the 2-layer GPT end to end, a part of run_cuda_backend.sh a row
result() { # the part's result line, or its first failure and error
  local o=$work/$1.out counts
  counts=$(tail -1 "$o" | grep 'passed,')
  if [ -z "$counts" ]; then # cut short: where it was
    grep -v '^$' "$o" | tail -1 | cut -c1-120
  elif grep -q '^FAIL' "$o"; then
    echo "$counts; $(grep -m1 '^FAIL' "$o" | cut -c1-90); $(grep -m1 -E 'error: |^========= (Invalid|Error|Race|Program hit|[A-Z]+ SUMMARY: [1-9])' "$o" | cut -c1-110)"
  else
    echo "$(grep '^result: ' "$o" | tail -1 | cut -c9-); $counts"
  fi
}
for part in grads steps graphs train; do
  stage "$part" "$checks" bash "$src/tests/cli/run_cuda_backend.sh" "$backend" "$tgrun" "$tgc" "$src" "$part" &&
    row "$part" "$(status)" "$secs" "$late$(result "$part")"
done

# ---- (b) compute-sanitizer over two steps of the 2-layer GPT
sanitize() { # TOOL
  if [ "$backend" = cuda ] && [ -z "$sanitizer" ]; then
    row "$1" missing 0 "no compute-sanitizer on the PATH, in \$CUDA_HOME/bin, /usr/local/cuda/bin or beside nvcc"
    return
  fi
  local note=
  [ "$backend" = cuda ] || note="${rehearsal}compute-sanitizer needs a GPU (here: ${sanitizer:-none}), not run; "
  TG_COMPUTE_SANITIZER=$( [ "$backend" = cuda ] && echo "$sanitizer") \
    stage "$1" "$checks" bash "$src/tests/cli/run_cuda_backend.sh" "$backend" "$tgrun" "$tgc" "$src" "$1" &&
    row "$1" "$(status)" "$secs" "$late$note$(result "$1")"
}
sanitize memcheck

# ---- (c) GPT-2 124M bf16 numerics against PyTorch, 20 steps
bench_env=(TGRUN="$tgrun" TGC="$tgc" TG_NUMERICS_BACKEND="$backend" TG_GPU_BENCH_BACKEND="$backend")
if [ "$backend" = cuda ]; then bench_env+=(TG_GPU_BENCH_STEPS="${TG_GPU_BENCH_STEPS:-20}")
else # the rehearsal: fewer steps than the benches' own (tiny) defaults
  bench_env+=(TG_NUMERICS_STEPS="${TG_NUMERICS_STEPS:-10}" TG_GPU_BENCH_STEPS="${TG_GPU_BENCH_STEPS:-4}")
fi
mkdir -p "$work/numerics" "$work/throughput"
if stage numerics "$out/numerics.log" env "${bench_env[@]}" OUT="$work/numerics" bash "$src/bench/gpt2_numerics.sh"; then
  fold "$work/numerics" "$out/numerics.log" numerics.log
  note=
  [ "$backend" = cuda ] || note="${rehearsal}tiny sizes, torch on the CPU; "
  row numerics "$(status)" "$secs" \
    "$late$note$(grep -m1 -E '^(PASS|FAIL)' "$work/numerics.out" || grep -m1 -iE 'fail|error' "$work/numerics.out" ||
                 grep -v '^$' "$work/numerics.out" | tail -1)"
fi

# ---- (d) throughput at T = 1024 against torch.compile nanoGPT
if stage throughput "$out/throughput.log" env "${bench_env[@]}" OUT="$work/throughput" bash "$src/bench/gpt2_gpu.sh"; then
  fold "$work/throughput" "$out/throughput.log" table.txt
  note=
  [ "$backend" = cuda ] || note="${rehearsal}tiny sizes, torch eager on the CPU (no torch.compile on CUDA here); "
  summary=$(grep -m1 '^summary: ' "$work/throughput.out" | cut -c10-)
  [ -n "$summary" ] || summary=$(grep -m1 -iE 'fail|error' "$work/throughput.out")
  [ -n "$summary" ] || summary=$(grep -v '^$' "$work/throughput.out" | tail -1)
  row throughput "$(status)" "$secs" "$late$note$summary"
fi

# ---- (b, if time allows) racecheck
sanitize racecheck
finish
