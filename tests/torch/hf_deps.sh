# hf_deps.sh: what the tests against transformers' generate and scoring share
# (sourced by run_sample_hf.sh and run_hellaswag_hf.sh, with $src and $build
# set): Debian's /usr/bin/python3 with torch and numpy ($py), GPT-2's BPE
# files ($data/gpt2), and transformers 4.40.2 installed once into
# BUILDDIR/pydeps ($deps; pip --target, for Debian's python with its torch
# 1.13, which transformers 4.40.2 works with; numpy pinned to the system's,
# which torch was built against).  A missing torch or BPE file ends the
# test (exit 1); hf_install says whether transformers can be imported, and
# each test decides what to do without it.
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

# hf_install: 0 when transformers imports from $deps (installed now if it
# was not); 1, with pip's output in BUILDDIR/pydeps.log, when it cannot be.
hf_install() {
  PYTHONPATH="$deps" "$py" -c 'import transformers' 2> /dev/null && return 0
  local np
  np=$("$py" -c 'import numpy; print(numpy.__version__)')
  echo "installing transformers 4.40.2 into $deps"
  "$py" -m pip install --quiet --disable-pip-version-check --target "$deps" \
    "transformers==4.40.2" "numpy==$np" > "$build/pydeps.log" 2>&1 &&
    PYTHONPATH="$deps" "$py" -c 'import transformers' 2> /dev/null
}
