#!/usr/bin/env bash
# run_sample_hf.sh TGRUN SRCDIR BUILDDIR: tgrun sample's greedy output against
# Hugging Face transformers' generate (tests/torch/sample_hf.py says how).
#
# transformers is installed by this test, once, into BUILDDIR/pydeps
# (hf_deps.sh).  When it cannot be installed (no network, no pip), the
# test compares with a plain PyTorch greedy loop instead and says so.
set -u
tgrun=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
build=$3
. "$src/tests/torch/hf_deps.sh"
plain=()
if ! hf_install; then
  echo "cannot install transformers (see $build/pydeps.log): falling back to a plain PyTorch greedy loop"
  plain=(--plain)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHONPATH="$deps" "$py" "$src/tests/torch/sample_hf.py" --tgrun "$tgrun" --src "$src" --gpt2-dir "$data/gpt2" \
  --work "$tmp" "${plain[@]}" 2>&1 | grep -v -e 'UserWarning' -e 'warnings.warn'
exit "${PIPESTATUS[0]}"
