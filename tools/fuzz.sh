#!/usr/bin/env bash
# fuzz.sh: builds one of tg's libFuzzer targets and runs it.
#
#   [TG_FUZZ_TARGET=NAME] tools/fuzz.sh [SECONDS] [-- LIBFUZZER_OPTION...]
#
# NAME is frontend (the default: .tg source and IR text), safetensors,
# train_config (train.cfg and its overrides) or tokens (token files and
# the data loader); each has its stored corpus in tests/fuzz/.
# SECONDS defaults to 600.  The build goes to $TG_FUZZ_BUILD (default
# /tmp/tg-fuzzbuild), the run's working corpus to $TG_FUZZ_WORK (default
# /tmp/tg-fuzzwork), seeded from tests/fuzz/corpus and models/*.tg; crash,
# timeout and OOM reproducers are written to $TG_FUZZ_WORK/artifacts/.
# Nothing under the source tree is written.  To fold what a run found back
# into the stored corpus afterwards:
#
#   $TG_FUZZ_BUILD/fuzz_frontend -merge=1 tests/fuzz/corpus $TG_FUZZ_WORK/corpus
#
# See tests/fuzz/README.md for what the target covers and the limits used.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
secs=600
if [[ $# -gt 0 && $1 != -- ]]; then
  secs=$1
  shift
fi
[[ $# -gt 0 && $1 == -- ]] && shift
[[ $secs =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, not '$secs'" >&2; exit 2; }

build=${TG_FUZZ_BUILD:-/tmp/tg-fuzzbuild}
work=${TG_FUZZ_WORK:-/tmp/tg-fuzzwork/${TG_FUZZ_TARGET:-frontend}}
cc=${CC:-clang}
command -v "$cc" >/dev/null || { echo "fuzz.sh: needs clang (set CC to its path)" >&2; exit 2; }

# TG_FUZZ=ON builds the whole library, not only the target, with coverage
# and the sanitizers (see CMakeLists.txt): otherwise libFuzzer is blind
# inside the parser and elaborator and ASan cannot see their accesses.
cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER="$cc" -DTG_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
target=${TG_FUZZ_TARGET:-frontend}
case $target in
  frontend) corpus=corpus; opts=(-dict="$src/tests/fuzz/tg.dict" -max_len=4096) ;;
  safetensors) corpus=st_corpus; opts=(-max_len=4096) ;;
  train_config) corpus=cfg_corpus; opts=(-max_len=4096) ;;
  tokens) corpus=tokens_corpus; opts=(-max_len=2048) ;;
  *) echo "fuzz.sh: TG_FUZZ_TARGET must be frontend, safetensors, train_config or tokens, not '$target'" >&2; exit 2 ;;
esac
cmake --build "$build" --target "fuzz_$target" -j"$(nproc)"

mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts"
[ "$target" = frontend ] && cp "$src"/models/*.tg "$work/seeds/"
[ "$target" = train_config ] && cp "$src"/configs/*.cfg "$work/seeds/"

# Imports in fuzz inputs are resolved from the working directory first;
# run from an empty one so that they cannot reach the user's files by
# accident (models/ is on the include path either way).
cd "$work"
exec "$build/fuzz_$target" \
  "${opts[@]}" -timeout=10 -rss_limit_mb=2048 \
  -max_total_time="$secs" -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" \
  "$@" \
  "$work/corpus" "$src/tests/fuzz/$corpus" "$work/seeds"
