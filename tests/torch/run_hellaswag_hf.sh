#!/usr/bin/env bash
# run_hellaswag_hf.sh TGRUN SRCDIR BUILDDIR: tgrun eval's HellaSwag losses and
# answers against transformers' GPT2LMHeadModel scoring the same examples as
# llm.c does (tests/torch/hellaswag_hf.py says how).
#
# transformers is installed once into BUILDDIR/pydeps (hf_deps.sh); when
# it cannot be (no network, no pip), the test is skipped (exit 77), saying
# so: the reference is transformers' model, and nothing else.
set -u
tgrun=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
build=$3
. "$src/tests/torch/hf_deps.sh"
if ! hf_install; then
  echo "SKIP: cannot install transformers (see $build/pydeps.log): the reference is its GPT2LMHeadModel"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHONPATH="$deps" "$py" "$src/tests/torch/hellaswag_hf.py" --tgrun "$tgrun" --src "$src" --gpt2-dir "$data/gpt2" \
  --work "$tmp" 2>&1 | grep -v -e 'UserWarning' -e 'warnings.warn'
exit "${PIPESTATUS[0]}"
