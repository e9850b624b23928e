#!/usr/bin/env bash
# run.sh: the main job, from a fresh machine: install what is needed, build,
# show what tg makes of GPT-2 (statistics, the training step's kernels, the
# generated CUDA and what each launch of it moves), then train nanoGPT's
# baby GPT on Tiny Shakespeare at the character level, on the GPU when
# there is one (the CUDA backend, bf16), else on the CPU backend, and say
# where everything is.
#
#   TG_STEPS   training steps (default 2000, the full run: about two minutes
#              on 2 quiet cores; fewer for a quicker look)
#   TG_DATA    the shared data directory (default ../shared/data)
#   TG_BACKEND cpu or cuda, to choose rather than detect
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
mkdir -p build out
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo > build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc 2> /dev/null || echo 2)" --target tgc tgrun

tgc=build/tgc tgrun=build/tgrun
steps=${TG_STEPS:-2000}
data=${TG_DATA:-../shared/data}
if [ ! -f "$data/tinyshakespeare/input.txt" ]; then
  echo "run.sh: no $data/tinyshakespeare/input.txt: set TG_DATA to the shared data directory" >&2
  echo "        (Tiny Shakespeare: https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt)" >&2
  exit 1
fi

echo
echo "== tgc models/gpt2.tg --stats"
$tgc models/gpt2.tg --stats
echo
echo "== GPT-2's training step as kernels (tgc --emit cuda -o out/gpt2-cuda: the .cu file, its manifest, the fusion report)"
$tgc models/gpt2.tg --emit cuda -o out/gpt2-cuda
grep -E '^fusion: [0-9]+ kernels|^fusion: bytes|^fusion: peak' out/gpt2-cuda/fusion.txt
echo "   what a step at B=16 moves (tgc --report traffic: every launch, bytes as the code accesses them):"
$tgc models/gpt2.tg -D B=16 --report traffic | tail -1 | sed 's/^traffic: /   /'
echo "   the first kernel of out/gpt2-cuda/gpt2.cu:"
sed -n '/^\/\/ tg kernel: k0_w0/,/^}/p' out/gpt2-cuda/gpt2.cu | head -24
echo "   ..."
echo
echo "== the data: Tiny Shakespeare, one character a token (tgrun prepare)"
$tgrun prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out out/data/shakespeare_char
echo
backend=${TG_BACKEND:-}
if [ -z "$backend" ]; then
  backend=cpu
  if nvidia-smi -L > /dev/null 2>&1; then backend=cuda; fi
fi
echo "== training the baby GPT: configs/baby_shakespeare_char.cfg, $steps steps on the $backend backend"
warm=$((steps < 200 ? steps / 2 : 100))
# overwrite=true: running this script again replaces its own earlier run
$tgrun configs/baby_shakespeare_char.cfg data_dir=out/data/shakespeare_char out_dir=out/baby_shakespeare_char \
  overwrite=true backend="$backend" max_steps="$steps" warmup_steps="$warm" lr_decay_steps="$steps" log_interval=$((steps < 200 ? 1 : 50))
echo
echo "compiler: build/tgc (tgc --help)   runner: build/tgrun (tgrun --help)   docs: docs/"
echo "GPT-2's CUDA: out/gpt2-cuda/gpt2.cu, manifest out/gpt2-cuda/manifest.json, fusion report out/gpt2-cuda/fusion.txt"
