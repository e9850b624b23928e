#!/usr/bin/env bash
# peer_venv.sh: the PyTorch peer of the CPU benchmarks (baby_shakespeare.sh,
# gpt2_cpu.sh, sample.sh), as a new user would install it: a virtual
# environment bench/.venv-torch (git-ignored) with the current torch,
# transformers and numpy from PyPI, made from the `python3` on PATH.  Not
# Debian's torch 1.13 (/usr/bin/python3), which the first figures used:
# issue 31 asks for the peer people actually run.
#
# Idempotent: when the environment imports torch and transformers it
# installs nothing.  Prints one line: the python, torch, transformers and
# numpy versions, and torch's own CPU build (its BLAS and ISA level).
#
# PyPI's Linux torch wheel is the CUDA build (3 GB to download with its nvidia-*
# packages); its CPU code is the same as the CPU-only wheel's, which lives
# on download.pytorch.org only (not reachable from the build machines).
# Set TG_PEER_INDEX_URL to an index serving the CPU wheels to save the space
# (for example https://download.pytorch.org/whl/cpu) where it is reachable.
#
# Environment:
#   TG_PEER_VENV          where the environment lives [bench/.venv-torch]
#   TG_PEER_PYTHON        use this python instead (one with torch and
#                         transformers already, e.g. a GPU machine's);
#                         nothing is installed then
#   TG_PEER_PACKAGES      what pip installs [torch transformers numpy];
#                         pin versions here (torch==2.15.0 ...) to repeat a
#                         measurement
#   TG_PEER_INDEX_URL     an extra index for torch (see above)
#
# Other scripts source it: `. bench/peer_venv.sh` sets peer_py to the
# environment's python (and prints the versions line to stderr).
peer_venv_main() {
  local here venv base
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [ -n "${TG_PEER_PYTHON:-}" ]; then
    peer_py=$TG_PEER_PYTHON
  else
    venv=${TG_PEER_VENV:-$here/.venv-torch}
    peer_py=$venv/bin/python
    if ! "$peer_py" -c 'import torch, transformers, numpy' 2> /dev/null; then
      base=$(command -v python3) || { echo "peer_venv: no python3 on PATH" >&2; return 1; }
      echo "peer_venv: installing ${TG_PEER_PACKAGES:-torch transformers numpy} from PyPI into $venv" \
        "(from $base, $("$base" --version 2>&1); torch's wheel with its CUDA libraries: 3 GB to download, 5.6 GB installed)" >&2
      [ -x "$peer_py" ] || "$base" -m venv "$venv" || return 1
      "$peer_py" -m pip install -q --disable-pip-version-check --upgrade pip || return 1
      # shellcheck disable=SC2086 # the package list is words
      "$peer_py" -m pip install -q --disable-pip-version-check ${TG_PEER_INDEX_URL:+--extra-index-url "$TG_PEER_INDEX_URL"} \
        ${TG_PEER_PACKAGES:-torch transformers numpy} || return 1
    fi
  fi
  peer_versions=$("$peer_py" - << 'PY'
import platform, re, numpy, torch
try:  # an old peer named by TG_PEER_PYTHON may have no transformers: the training benches do not need it
    import transformers
except ImportError:
    transformers = None
cfg = torch.__config__.show()
isa = re.search(r"CPU capability usage: (\S+)", cfg)
blas = re.search(r"BLAS_INFO=(\w+)", cfg)
print("peer: python %s, torch %s (%s BLAS, %s), transformers %s, numpy %s" % (
    platform.python_version(), torch.__version__, blas.group(1) if blas else "?",
    isa.group(1) if isa else "?", transformers.__version__ if transformers else "(none)", numpy.__version__))
PY
) || { echo "peer_venv: $peer_py cannot import torch and numpy" >&2; return 1; }
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -eu
  peer_venv_main
  echo "$peer_versions"
  echo "python: $peer_py"
else
  peer_venv_main || exit 1
  echo "$peer_versions" >&2
fi
