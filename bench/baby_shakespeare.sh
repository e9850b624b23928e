#!/usr/bin/env bash
# baby_shakespeare.sh [STEPS] [ROUNDS] [THREADS...]: training speed of tg
# against the current PyTorch from PyPI on the same machine, in one run:
# nanoGPT's baby GPT on character-level Tiny Shakespeare (tg with
# configs/baby_shakespeare_char.cfg; PyTorch with bench/torch_gpt_train.py,
# nanoGPT's model, batch and schedule), PyTorch both under torch.compile
# (inductor, C++ kernels built with the machine's gcc) and eager.
#
# For each thread count (default: 1 and the number of cores) it runs ROUNDS
# interleaved rounds (default 3) of tg, compile, eager, STEPS steps each
# (default 100), printing each run as it finishes (the median ms/step from
# the 6th step on), then the median of each side over the rounds and tg's
# speed-up over compile and over eager (bench/cpu_rounds.sh has the
# method).  Samples are off, and tg's evaluation (one batch, before the
# first step and after the last) and final checkpoint fall outside the
# timed steps: this measures training steps.  The defaults take about 5 minutes on 2 quiet cores (an
# estimate); `bash bench/baby_shakespeare.sh 30 1 2` is a smoke run.
#
# The peer's environment is bench/.venv-torch (bench/peer_venv.sh makes it
# on the first run: a 3 GB download).  Until issue 31 the peer was
# Debian's torch 1.13 (/usr/bin/python3), eager, where no torch.compile
# exists; TG_PEER_PYTHON=/usr/bin/python3 with TG_BENCH_SIDES="tg eager"
# still runs that comparison.  Record results in docs/performance.md with
# the commit (printed) and the machine (printed).
#
# Environment: TG_DATA (Tiny Shakespeare), BENCH_DIR [out/bench],
# TGRUN [build/tgrun], TG_BENCH_SIDES [tg compile eager], and
# peer_venv.sh's TG_PEER_*.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/cpu_rounds.sh
rounds_init baby_shakespeare 100 3 "1 $(nproc)" "$@"
work=$rounds_work data=$rounds_data steps=$rounds_steps
[ -s "$work/data/train.bin" ] || "$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" \
  --out "$work/data" > /dev/null

warmup=$((steps < 100 ? steps / 2 : 100))
rounds_tg_cfg=configs/baby_shakespeare_char.cfg
rounds_tg_args=(data_dir="$work/data" warmup_steps="$warmup" lr_decay_steps="$steps" eval_interval=0 eval_batches=1
  sample_tokens=0 checkpoint_interval=0 log_interval="$steps")
rounds_torch_args=(--data "$data/tinyshakespeare/input.txt" --warmup-steps "$warmup" --lr-decay-steps "$steps")
rounds_tokens=768

rounds_header
echo "model: nanoGPT's baby GPT, 4 layers, 4 heads, n_embd 128, block 64, vocab 65 (tg pads it to 128 and masks" \
  "the padding), batch 12 (768 tokens a step), f32; $steps steps a run, median from the 6th; $rounds_count rounds"
rounds_run
