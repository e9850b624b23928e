#!/usr/bin/env bash
# gpu_pack.sh: run here, before a GPU machine is lent.  Gathers into .gpu/
# (ignored by git; the device tool carries it) what a bare GPU machine
# lacks to run tools/gpu_check.sh there: such a machine has the CUDA
# toolkit and driver, a C compiler, CMake and PyTorch, but no package
# registry, so nothing can be installed there.
#
#   .gpu/tg-gpu.tar.gz   bin/tgc, bin/tgrun: built here (Release, without MPI:
#                        one GPU there, one rank); lib/: OpenBLAS and its
#                        Fortran runtime, which the CPU backend's generated C
#                        links (the checks compare the GPU with it); data/:
#                        Tiny Shakespeare and GPT-2's BPE files; grammar/:
#                        the scanner and parser Flex and Bison made, so that
#                        tg builds there without them when these binaries
#                        do not run (another image's system libraries):
#                        gpu_check.sh falls back to that build
#   .gpu/SOURCE          the commit it was built from
# (.gpu/ is in .gitignore, so the device tool carries it when asked to)
#
# Environment (the ctest gpu_rehearsal builds a pack of its own and runs
# gpu_check.sh through it, as the GPU machine will):
#   TG_GPU_PACK_DIR    where the pack goes [.gpu]
#   TG_GPU_PACK_BUILD  the Release build's folder [build-gpu]
#
# Usage: bash tools/gpu_pack.sh; then, on the device tool:
#   run(command="bash tools/gpu_check.sh", carry=[".gpu"], timeout_s=600)
# which runs under one deadline of 480 s (docs/cuda.md)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh > /dev/null
data=${TG_DATA:-../shared/data}
[ -f "$data/tinyshakespeare/input.txt" ] || { echo "gpu_pack: no $data/tinyshakespeare/input.txt (set TG_DATA)" >&2; exit 1; }

pack=${TG_GPU_PACK_DIR:-.gpu} build=${TG_GPU_PACK_BUILD:-build-gpu}

# Release, as the GPU runs it: -O3 warns (-Werror) where the suites' builds
# (RelWithDebInfo, Debug) do not, so a build failure is shown whole
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTG_MPI=OFF > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc 2> /dev/null || echo 2)" --target tgc tgrun > "$build/gpu_pack.build.log" 2>&1 ||
  { grep -B2 -A12 -m3 -E 'error|Error' "$build/gpu_pack.build.log"; echo "gpu_pack: the Release build failed (all of it: $build/gpu_pack.build.log)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data/tinyshakespeare" "$stage/data/gpt2" "$stage/grammar"
cp "$build/tgc" "$build/tgrun" "$stage/bin/"
cp "$build/lexer.c" "$build/lexer.h" "$build/parser.c" "$build/parser.h" "$stage/grammar/"
# the generated C links -lopenblas: the library and what it needs, with the
# link-time name too
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0)
cp "$blas" "$stage/lib/libopenblas.so.0"
ln -s libopenblas.so.0 "$stage/lib/libopenblas.so"
for l in $(ldd "$blas" | awk '/gfortran|quadmath/ { print $3 }'); do cp "$(readlink -f "$l")" "$stage/lib/$(basename "$l")"; done
cp "$data/tinyshakespeare/input.txt" "$stage/data/tinyshakespeare/"
cp "$data/gpt2/encoder.json" "$data/gpt2/vocab.bpe" "$stage/data/gpt2/"
rm -rf "$pack" && mkdir -p "$pack"
# gzip: the GPU image may lack xz, never gzip (Essential)
tar -C "$stage" -czf "$pack/tg-gpu.tar.gz" .
git rev-parse HEAD > "$pack/SOURCE"
git diff --quiet HEAD || echo "(with uncommitted changes)" >> "$pack/SOURCE"
echo "gpu_pack: $pack/tg-gpu.tar.gz $(du -h "$pack/tg-gpu.tar.gz" | cut -f1) for $(head -1 "$pack/SOURCE")"
echo "then: device run(command=\"bash tools/gpu_check.sh\", carry=[\".gpu\"], timeout_s=600): at most 8 minutes (TG_GPU_CHECK_DEADLINE)"
