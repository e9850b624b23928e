#!/usr/bin/env bash
# gpu_pack.sh: run here, before a GPU machine is lent.  Gathers into .gpu/
# (ignored by git; the device tool carries it) what a bare GPU machine
# lacks to run tools/gpu_check.sh there: such a machine has the CUDA
# toolkit and driver, a C compiler, CMake and PyTorch, but no package
# registry, so nothing can be installed there.
#
#   .gpu/tg-gpu.tar.xz   bin/tgc, bin/tgrun: built here (Release, without MPI:
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
# Usage: bash tools/gpu_pack.sh; then, on the device tool:
#   run(command="bash tools/gpu_check.sh", carry=[".gpu"], timeout_s=600)
# which runs under one deadline of 480 s (docs/cuda.md)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh > /dev/null
data=${TG_DATA:-../shared/data}
[ -f "$data/tinyshakespeare/input.txt" ] || { echo "gpu_pack: no $data/tinyshakespeare/input.txt (set TG_DATA)" >&2; exit 1; }

cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTG_MPI=OFF > build-gpu.configure.log 2>&1 ||
  { cat build-gpu.configure.log; exit 1; }
cmake --build build-gpu -j "$(nproc 2> /dev/null || echo 2)" --target tgc tgrun > /dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data/tinyshakespeare" "$stage/data/gpt2" "$stage/grammar"
cp build-gpu/tgc build-gpu/tgrun "$stage/bin/"
cp build-gpu/lexer.c build-gpu/lexer.h build-gpu/parser.c build-gpu/parser.h "$stage/grammar/"
# the generated C links -lopenblas: the library and what it needs, with the
# link-time name too
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0)
cp "$blas" "$stage/lib/libopenblas.so.0"
ln -s libopenblas.so.0 "$stage/lib/libopenblas.so"
for l in $(ldd "$blas" | awk '/gfortran|quadmath/ { print $3 }'); do cp "$(readlink -f "$l")" "$stage/lib/$(basename "$l")"; done
cp "$data/tinyshakespeare/input.txt" "$stage/data/tinyshakespeare/"
cp "$data/gpt2/encoder.json" "$data/gpt2/vocab.bpe" "$stage/data/gpt2/"
rm -rf .gpu && mkdir .gpu
tar -C "$stage" -cJf .gpu/tg-gpu.tar.xz .
git rev-parse HEAD > .gpu/SOURCE
git diff --quiet HEAD || echo "(with uncommitted changes)" >> .gpu/SOURCE
echo "gpu_pack: .gpu/tg-gpu.tar.xz $(du -h .gpu/tg-gpu.tar.xz | cut -f1) for $(head -1 .gpu/SOURCE)"
echo "then: device run(command=\"bash tools/gpu_check.sh\", carry=[\".gpu\"], timeout_s=600): at most 8 minutes (TG_GPU_CHECK_DEADLINE)"
