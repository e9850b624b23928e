#!/usr/bin/env bash
# gpu_check.sh: run on a machine with an NVIDIA GPU (the device tool's, with
# .gpu/ carried from tools/gpu_pack.sh; or any machine where tg was built).
# Runs every GPU check in one go and ends with a short table:
#
#   device        what the GPU, the driver and the toolkit are
#   cuda          tests/cli/run_cuda_backend.sh with the real device: the
#                 2-layer GPT's gradients against the reference interpreter,
#                 5 AdamW steps against the CPU backend, every kernel of the
#                 step launched, graph replay equal to launch by launch,
#                 TG_CUDA_SYNC, a short training run
#   memcheck      compute-sanitizer --tool memcheck over a training step
#   racecheck     compute-sanitizer --tool racecheck over a training step
#
#   traffic       tgc --report traffic for GPT-2 124M at B=16, T=1024, bf16
#                 and f32: the bytes a step moves and the roofline estimate
#   numerics      bench/gpt2_numerics.sh: GPT-2 124M, bf16, 50 steps, tg's
#                 per-step losses against PyTorch's (bf16 autocast) from
#                 the same weights and batches (issue 16, item 2)
#   gpt2-gpu      bench/gpt2_gpu.sh: tg and torch.compile nanoGPT at 2^19
#                 tokens a step, tokens/s, ratio, MFU, time per kernel
#                 category beside the traffic estimate (issue 16, item 3)
#   compile       bench/compile_time.sh: compile time cold and warm (item 4)
#
# Each of the last three runs under `timeout` (TG_GPU_CHECK_LIMITS, seconds:
# "numerics gpt2-gpu compile", default "300 540 180") so that a hang or a
# slow one cannot eat the others' time; a failure or a timeout is its row's
# FAIL and the next row still runs.  Their own output goes to
# $logs/numerics.log, gpt2-gpu.log, compile.log (and subfolders).
#
# Logs go to $OUT (the device tool brings them back) or to ./gpu-logs.
#
# TG_GPU_CHECK_BUILD=1 builds from source there even when the packed
# binaries run (the fallback for when they do not).
# TG_GPU_CHECK_BACKEND=cuda-emu runs the same script here, without a GPU,
# on the emulated device (the sanitizers skipped): a rehearsal of the
# script and of the pack, so that the half hour on a GPU is not spent on
# a typo.
set -uo pipefail
backend=${TG_GPU_CHECK_BACKEND:-cuda}
cd "$(dirname "$0")/.."
src=$(pwd)
logs=${OUT:-$src/gpu-logs}
mkdir -p "$logs"
if [ -f .gpu/tg-gpu.tar.xz ]; then
  root=/tmp/tg-gpu
  rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xJf .gpu/tg-gpu.tar.xz
  export PATH="$root/bin:$PATH" LD_LIBRARY_PATH="$root/lib:${LD_LIBRARY_PATH:-}" LIBRARY_PATH="$root/lib:${LIBRARY_PATH:-}"
  export TG_DATA=$root/data
  tgrun=$root/bin/tgrun tgc=$root/bin/tgc
  export TG_ONE_RANK=1 # the pack's tgrun is built without MPI
  echo "built from $(cat .gpu/SOURCE)" | tee "$logs/source.txt"
  if [ -n "${TG_GPU_CHECK_BUILD:-}" ] || ! "$tgrun" --version > "$logs/pack.txt" 2>&1 ||
     ! "$tgc" --version >> "$logs/pack.txt" 2>&1; then
    # another image's system libraries: build here, without Flex, Bison or Check
    if [ -n "${TG_GPU_CHECK_BUILD:-}" ]; then why="TG_GPU_CHECK_BUILD is set"
    else why="the packed binaries do not run here: $(head -1 "$logs/pack.txt")"; fi
    echo "$why; building from source" | tee -a "$logs/source.txt"
    cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DTG_MPI=OFF -DTG_TESTS=OFF -DTG_GRAMMAR_DIR="$root/grammar" \
      > "$logs/build.txt" 2>&1 && cmake --build build-device -j "$(nproc)" --target tgc tgrun >> "$logs/build.txt" 2>&1 ||
      { tail -20 "$logs/build.txt"; echo "FAIL: the build here failed ($logs/build.txt)"; exit 1; }
    tgrun=$src/build-device/tgrun tgc=$src/build-device/tgc
  fi
else
  tgrun=$src/build/tgrun tgc=$src/build/tgc
  export TG_DATA=${TG_DATA:-$src/../shared/data}
fi
export TG_CACHE=/tmp/tg-cache
# the toolkit's libraries (cuBLASLt, NVRTC, NCCL) where the loader finds them
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

results=()
row() { results+=("$(printf '%-10s %-5s %s' "$1" "$2" "$3")"); }

# device
if [ "$backend" = cuda ]; then
  { nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1; } \
    > "$logs/device.txt" 2>&1
  row device "$( [ -s "$logs/device.txt" ] && nvidia-smi -L > /dev/null 2>&1 && echo ok || echo FAIL )" \
    "$(head -1 "$logs/device.txt")"
else
  echo "the emulated device (a rehearsal: TG_GPU_CHECK_BACKEND=$backend)" > "$logs/device.txt"
  row device ok "$(cat "$logs/device.txt")"
fi

# the end-to-end checks on the real device
bash "$src/tests/cli/run_cuda_backend.sh" "$backend" "$tgrun" "$tgc" "$src" > "$logs/cuda.log" 2>&1
rc=$?
row "$backend" "$( [ $rc -eq 0 ] && echo ok || echo FAIL )" "$(tail -1 "$logs/cuda.log"); $(grep -m1 'worst relative' "$logs/cuda.log" | cut -c1-80)"

# compute-sanitizer on a training step of the 2-layer GPT, launch by launch
tmp=$(mktemp -d)
m=(models/gpt2.tg -D n_layer=2 -D n_embd=64 -D n_head=4 -D vocab=65 -D block_size=32)
"$tgrun" init "${m[@]}" --seed 7 --out "$tmp/w.safetensors" > /dev/null
python3 "$src/tests/cli/make_safetensors.py" "$tmp/x.safetensors" \
  "idx:I32:4x32:$(seq 0 127 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37 + 11) % 65 }')" \
  "targets:I32:4x32:$(seq 0 127 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 53 + 5) % 65 }')"
for tool in memcheck racecheck; do
  if [ "$backend" != cuda ]; then
    row "$tool" skip "not on the emulated device (its own checks ran above)"
  elif command -v compute-sanitizer > /dev/null; then
    TG_CUDA_GRAPHS=0 compute-sanitizer --tool "$tool" --error-exitcode 99 "$tgrun" step "${m[@]}" \
      --weights "$tmp/w.safetensors" --batch "$tmp/x.safetensors" --steps 2 --backend cuda --out "$tmp/s.safetensors" \
      > "$logs/$tool.log" 2>&1
    rc=$?
    row "$tool" "$( [ $rc -eq 0 ] && echo ok || echo FAIL )" "$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/$tool.log")"
  else
    row "$tool" skip "compute-sanitizer is not on the PATH"
  fi
done
rm -rf "$tmp"

# what a step of GPT-2 124M moves, counted from the generated CUDA
for p in bf16 f32; do
  "$tgc" models/gpt2.tg -D B=16 --precision $p --report traffic > "$logs/traffic-$p.txt" 2>&1
  row "traffic" "$( [ $? -eq 0 ] && echo ok || echo FAIL )" "$p: $(tail -1 "$logs/traffic-$p.txt" | cut -c17-150)"
done

# issue 16: numerics, throughput and compile time at full size, each with
# its own time limit (the rehearsal's sizes are tiny: see each script)
read -r lim_num lim_bench lim_compile <<< "${TG_GPU_CHECK_LIMITS:-300 540 180}"
bench_env=(TGRUN="$tgrun" TGC="$tgc" TG_NUMERICS_BACKEND="$backend" TG_GPU_BENCH_BACKEND="$backend")
mkdir -p "$logs/numerics" "$logs/gpt2-gpu"
env "${bench_env[@]}" OUT="$logs/numerics" timeout -k 10 "$lim_num" bash "$src/bench/gpt2_numerics.sh" > "$logs/numerics.log" 2>&1
rc=$?
row numerics "$( [ $rc -eq 0 ] && echo ok || echo FAIL )" \
  "$( [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "timed out after $lim_num s; " )$(grep -m1 -E '^(PASS|FAIL)' "$logs/numerics.log" | cut -c1-110)"
env "${bench_env[@]}" OUT="$logs/gpt2-gpu" timeout -k 10 "$lim_bench" bash "$src/bench/gpt2_gpu.sh" > "$logs/gpt2-gpu.log" 2>&1
rc=$?
summary="$(grep -m1 '^summary: ' "$logs/gpt2-gpu.log" | cut -c10-130)"
[ -n "$summary" ] || summary="$(grep -m1 -E 'FAIL|error' "$logs/gpt2-gpu.log" | cut -c1-110)"
row gpt2-gpu "$( [ $rc -eq 0 ] && echo ok || echo FAIL )" \
  "$( [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "timed out after $lim_bench s; " )$summary"
if [ "$backend" = cuda ]; then
  TG_DATA=$TG_DATA timeout -k 10 "$lim_compile" bash "$src/bench/compile_time.sh" "$(dirname "$tgrun")" > "$logs/compile.log" 2>&1
  rc=$?
  row compile "$( [ $rc -eq 0 ] && echo ok || echo FAIL )" \
    "$( [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "timed out after $lim_compile s; " )$(tail -3 "$logs/compile.log" | tr -s ' \n' ' ' | cut -c1-120)"
else
  row compile skip "bench/compile_time.sh compiles for sm_90 with NVRTC: on the GPU machine only"
fi

echo
echo "== tg GPU checks, backend $backend ($(head -1 "$logs/device.txt"))"
printf '%s\n' "${results[@]}" | tee "$logs/table.txt"
! grep -q ' FAIL ' "$logs/table.txt"
