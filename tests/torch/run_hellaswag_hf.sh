#!/usr/bin/env bash
# run_hellaswag_hf.sh TGRUN SRCDIR BUILDDIR: tgrun eval's HellaSwag losses and
# answers against transformers' GPT2LMHeadModel scoring the same examples as
# llm.c does (tests/torch/hellaswag_hf.py says how).
#
# transformers is installed once into BUILDDIR/pydeps, as run_sample_hf.sh
# does; when it cannot be (no network, no pip), the test is skipped (exit
# 77), saying so: the reference is transformers' model, and nothing else.
set -u
tgrun=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
build=$3
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2> /dev/null; then
  echo "FAIL: $py cannot import torch and numpy (apt-get install python3-torch; tools/install-deps.sh does)"
  exit 1
fi
data=${TG_DATA:-$src/../shared/data}
if [ ! -f "$data/gpt2/encoder.json" ]; then
  echo "FAIL: no GPT-2 BPE files in $data/gpt2 (set TG_DATA to the shared data directory)"
  exit 1
fi
deps="$build/pydeps"
if ! PYTHONPATH="$deps" "$py" -c 'import transformers' 2> /dev/null; then
  np=$("$py" -c 'import numpy; print(numpy.__version__)')
  echo "installing transformers 4.40.2 into $deps"
  if ! "$py" -m pip install --quiet --disable-pip-version-check --target "$deps" \
      "transformers==4.40.2" "numpy==$np" > "$build/pydeps.log" 2>&1 ||
      ! PYTHONPATH="$deps" "$py" -c 'import transformers' 2> /dev/null; then
    echo "SKIP: cannot install transformers (see $build/pydeps.log): the reference is its GPT2LMHeadModel"
    exit 77
  fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHONPATH="$deps" "$py" "$src/tests/torch/hellaswag_hf.py" --tgrun "$tgrun" --src "$src" --gpt2-dir "$data/gpt2" \
  --work "$tmp" 2>&1 | grep -v -e 'UserWarning' -e 'warnings.warn'
exit "${PIPESTATUS[0]}"
