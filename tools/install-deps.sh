#!/usr/bin/env bash
# install-deps.sh [--fuzz]: installs the Debian packages that tg's build and
# tests need.  Idempotent: when everything is present it changes nothing
# and does not even refresh the package lists.  --fuzz adds clang and its
# libFuzzer runtime (for tools/fuzz.sh).
set -euo pipefail

packages=(cmake make gcc pkg-config flex bison check libsubunit-dev graphviz
  libopenblas-dev  # the CPU backend's one-row and bf16 matmuls (the generated C links -lopenblas)
  libdnnl2  # oneDNN: the CPU backend's f32 matmuls (runtime/backend/cpu/cpu_gemm.h)
  libopenmpi-dev openmpi-bin  # data parallelism over MPI (tgrun --nproc N)
  python3-torch python3-numpy  # PyTorch on the CPU: the reference in tests/torch
  python3-pip  # the tests install transformers into the build tree (run_hf_transformers.sh, run_sample_hf.sh)
  chromium chromium-driver python3-selenium)  # tgc --report html's page in a browser (tests/report/check_page.py)
if [ "${1:-}" = "--fuzz" ]; then packages+=(clang libclang-rt-14-dev); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo > /dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
echo "install-deps: done"
