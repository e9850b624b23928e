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
# Logs go to $OUT (the device tool brings them back) or to ./gpu-logs.
set -uo pipefail
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
  echo "built from $(cat .gpu/SOURCE)" | tee "$logs/source.txt"
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
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1; } \
  > "$logs/device.txt" 2>&1
row device "$( [ -s "$logs/device.txt" ] && echo ok || echo FAIL )" "$(head -1 "$logs/device.txt")"

# the end-to-end checks on the real device
bash "$src/tests/cli/run_cuda_backend.sh" cuda "$tgrun" "$tgc" "$src" > "$logs/cuda.log" 2>&1
rc=$?
row cuda "$( [ $rc -eq 0 ] && echo ok || echo FAIL )" "$(tail -1 "$logs/cuda.log"); $(grep -m1 'worst relative' "$logs/cuda.log" | cut -c1-80)"

# compute-sanitizer on a training step of the 2-layer GPT, launch by launch
tmp=$(mktemp -d)
m=(models/gpt2.tg -D n_layer=2 -D n_embd=64 -D n_head=4 -D vocab=65 -D block_size=32)
"$tgrun" init "${m[@]}" --seed 7 --out "$tmp/w.safetensors" > /dev/null
python3 "$src/tests/cli/make_safetensors.py" "$tmp/x.safetensors" \
  "idx:I32:4x32:$(seq 0 127 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37 + 11) % 65 }')" \
  "targets:I32:4x32:$(seq 0 127 | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 53 + 5) % 65 }')"
for tool in memcheck racecheck; do
  if command -v compute-sanitizer > /dev/null; then
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

echo
echo "== tg GPU checks ($(head -1 "$logs/device.txt"))"
printf '%s\n' "${results[@]}" | tee "$logs/table.txt"
! grep -q ' FAIL ' "$logs/table.txt"
