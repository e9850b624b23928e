#!/usr/bin/env bash
# test.sh: sets up and runs tg's whole test suite, twice: a normal build,
# and a build with AddressSanitizer and UndefinedBehaviorSanitizer.
#   build/       RelWithDebInfo
#   build-asan/  Debug, -fsanitize=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
# The shared data (Tiny Shakespeare, the GPT-2 BPE files) lives beside the
# checkout, never in it; the tokenizer tests read it from $TG_DATA.
if [ -z "${TG_DATA:-}" ]; then
  for d in ../shared/data /work/shared/data; do
    if [ -d "$d" ]; then export TG_DATA=$(cd "$d" && pwd); break; fi
  done
fi
jobs=$(nproc 2> /dev/null || echo 2)

run_suite() {
  local dir=$1
  shift
  echo "== configure and build $dir ($*)"
  cmake -S . -B "$dir" "$@" > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
  cmake --build "$dir" -j "$jobs"
  echo "== test $dir"
  (cd "$dir" && ctest --output-on-failure -j "$jobs")
}

mkdir -p build build-asan
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DTG_SANITIZE=ON
echo "== all tests passed (normal and sanitizer builds)"
