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
# tg, compile, eager, STEPS steps each (default 8: the first 5 untimed,
# the median of the other 3).  A step takes seconds on 2 cores, so the
# defaults take about 8 to 10 minutes there (an estimate: torch.compile's
# first compile of this model takes minutes, and each tg run ends by
# writing its 1.5 GB checkpoint, neither timed); `bash bench/gpt2_cpu.sh 6
# 1` is a smoke run.  The issue's target is tg >= 1.3x torch.compile.
#
# Environment: TG_DATA (tinyshakespeare/input.txt and gpt2/), BENCH_DIR
# [out/bench], TGRUN [build/tgrun], TG_BENCH_SIDES [tg compile eager], and
# bench/peer_venv.sh's TG_PEER_*.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/cpu_rounds.sh
rounds_init gpt2_cpu 8 2 "$(nproc)" "$@"
work=$rounds_work data=$rounds_data steps=$rounds_steps
[ -s "$work/data/train.bin" ] || "$tgrun" prepare --tokenizer gpt2 --gpt2-dir "$data/gpt2" \
  --input "$data/tinyshakespeare/input.txt" --out "$work/data" > /dev/null

warmup=$((steps / 2))
rounds_tg_cfg=bench/gpt2_cpu.cfg
rounds_tg_args=(data_dir="$work/data" warmup_steps="$warmup" lr_decay_steps="$steps")
rounds_torch_args=(--tokens "$work/data" --vocab-size 50304 --n-layer 12 --n-head 12 --n-embd 768
  --block-size 256 --model-block-size 1024 --batch-size 4 --lr 6e-4 --min-lr 6e-5 --beta2 0.95
  --warmup-steps "$warmup" --lr-decay-steps "$steps")
rounds_tokens=1024

rounds_header
echo "model: GPT-2 124M shape, 12 layers, 12 heads, 768 wide, vocab 50257 padded to 50304, B 4 x T 256" \
  "(1,024 tokens a step), f32; $steps steps a run, median from the 6th; $rounds_count rounds"
rounds_run
