#!/usr/bin/env bash
# gpt2_cpu.sh [STEPS] [ROUNDS] [THREADS...]: training speed of GPT-2 124M's
# shape on the CPU, tg against the current PyTorch from PyPI, in one run on
# the same machine: 12 layers, 12 heads, 768 wide, a 1024-row position
# table, batch 4 of 256 tokens (1,024 tokens a step), f32, AdamW with
# clipping, on GPT-2 BPE Tiny Shakespeare (tgrun prepare, into BENCH_DIR).
#
#   tg:       bench/gpt2_cpu.cfg (models/gpt2.tg, backend cpu, f32); tg pads
#             the vocabulary 50257 to 50304 and masks the 47 extra logits
#             to -inf (docs/architecture.md#pad_vocab)
#   PyTorch:  bench/torch_gpt_train.py --tokens, nanoGPT's model with its
#             own padding, --vocab-size 50304 (as nanoGPT's train.py: the
#             extra logits are not masked, their rows learn to stay low),
#             under torch.compile and eager
#
# so both multiply by the same [768, 50304] head.  Rounds interleaved as in
# bench/baby_shakespeare.sh (bench/cpu_rounds.sh has the method): for each
# thread count (default: the number of cores) ROUNDS rounds (default 2) of
# tg, compile, eager, STEPS steps each (default 10: the first 5 untimed,
# the median of the other 5).  A step takes seconds on 2 cores, so the
# defaults take about 7 minutes there (an estimate); `bash bench/gpt2_cpu.sh
# 7 1` is a smoke run.  The issue's target is tg >= 1.3x torch.compile.
#
# Environment: TG_DATA (tinyshakespeare/input.txt and gpt2/), BENCH_DIR
# [out/bench], TGRUN [build/tgrun], TG_BENCH_SIDES [tg compile eager], and
# bench/peer_venv.sh's TG_PEER_*.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-10}
rounds=${2:-2}
shift 2 || shift $# || true
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=("$(nproc)")
[ "$steps" -gt 5 ] || { echo "gpt2_cpu: STEPS must be above 5 (the first 5 are not timed)" >&2; exit 2; }
data=${TG_DATA:-../shared/data}
work=${BENCH_DIR:-out/bench}/gpt2_cpu
tgrun=${TGRUN:-build/tgrun}
[ -x "$tgrun" ] || { echo "build tg first: cmake -S . -B build && cmake --build build" >&2; exit 1; }
. bench/peer_venv.sh
. bench/cpu_rounds.sh
mkdir -p "$work"
[ -s "$work/data/train.bin" ] || "$tgrun" prepare --tokenizer gpt2 --gpt2-dir "$data/gpt2" \
  --input "$data/tinyshakespeare/input.txt" --out "$work/data" > /dev/null

warmup=$((steps / 2))
rounds_tg_cfg=bench/gpt2_cpu.cfg
rounds_tg_args=(data_dir="$work/data" warmup_steps="$warmup" lr_decay_steps="$steps")
rounds_torch_args=(--tokens "$work/data" --vocab-size 50304 --n-layer 12 --n-head 12 --n-embd 768
  --block-size 256 --model-block-size 1024 --batch-size 4 --lr 6e-4 --min-lr 6e-5 --beta2 0.95
  --warmup-steps "$warmup" --lr-decay-steps "$steps")
rounds_steps=$steps rounds_warmup=5 rounds_count=$rounds rounds_threads=("${threads[@]}") rounds_work=$work
rounds_tokens=1024 rounds_sides=${TG_BENCH_SIDES:-tg compile eager}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); tg $(git rev-parse --short HEAD 2> /dev/null || echo '?')"
echo "model: GPT-2 124M shape, 12 layers, 12 heads, 768 wide, vocab 50257 padded to 50304, B 4 x T 256" \
  "(1,024 tokens a step), f32; $steps steps a run, median from the 6th; $rounds rounds"
rounds_run
