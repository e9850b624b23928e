#!/usr/bin/env bash
# sample.sh [NEW_TOKENS] [THREADS] [ROUNDS]: text generation speed of tg
# and transformers on the same machine, in one run, ROUNDS (default 3)
# interleaved rounds of each, and the median of each side (the build
# machines' speed swings by half from minute to minute; a round is one run
# of each, back to back, so each ratio compares runs a minute apart): GPT-2 124M-shaped random
# weights (12 layers, 768 wide, 50257 vocabulary, block 1024, tgrun init's
# normal(0.02) initialisation), greedy, NEW_TOKENS (default 256) after the
# same 16-token prompt, on the CPU with THREADS threads each (default: the
# number of cores).
#
#   tg:            tgrun sample --backend cpu --temperature 0 (the decode
#                  step with its key/value cache, passes/decode.c); the
#                  rate is the prompt's steps and the new tokens' steps,
#                  without compiling and loading (printed apart)
#   transformers:  GPT2LMHeadModel.generate(do_sample=False, use_cache=True)
#                  with torch.set_num_threads(THREADS), after a warm-up
#                  call; the rate is the whole generate call (its prompt
#                  pass included)
#
# transformers and torch are the current ones from PyPI, in the virtual
# environment bench/peer_venv.sh makes (bench/.venv-torch, on the first
# run).  Until issue 31 the peer was transformers 4.40.2 on Debian's torch
# 1.13; TG_PEER_PYTHON=/usr/bin/python3 PYTHONPATH=build/pydeps (where
# tests/torch/run_sample_hf.sh installs 4.40.2) runs that one again.
# Record results in docs/performance.md with the commit and the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
n_new=${1:-256}
threads=${2:-$(nproc)}
rounds=${3:-3}
data=${TG_DATA:-../shared/data}
work=${BENCH_DIR:-out/bench}
mkdir -p "$work"
tgrun=${TGRUN:-build/tgrun}
[ -x "$tgrun" ] || { echo "build tg first: cmake -S . -B build && cmake --build build" >&2; exit 1; }
. bench/peer_venv.sh
py=$peer_py
W=$work/gpt2_random.safetensors
[ -s "$W" ] || "$tgrun" init models/gpt2.tg --seed 1 --out "$W" > /dev/null
# 16 GPT-2 tokens
prompt="The quick brown fox jumps over the lazy dog, and the dog runs after it"
ids=$($py -c "
from transformers import GPT2Tokenizer
t = GPT2Tokenizer('$data/gpt2/encoder.json', '$data/gpt2/vocab.bpe')
print(','.join(map(str, t('''$prompt''')['input_ids'])))")
n_prompt=$(echo "$ids" | tr ',' '\n' | wc -l)

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; tg $(git rev-parse --short HEAD 2> /dev/null || echo '?')"
echo "model: GPT-2 124M shape, random weights; prompt $n_prompt tokens, $n_new new tokens, greedy, $threads threads;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$work/rounds"
for round in $(seq "$rounds"); do
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$tgrun" sample --weights "$W" --model models/gpt2.tg \
    --tokenizer "$data/gpt2" --prompt "$prompt" --max-new-tokens "$n_new" --temperature 0 --backend cpu \
    > "$work/tg_sample.txt" 2> "$work/tg_sample.log"
  [ "$round" = 1 ] && grep '^sample:' "$work/tg_sample.log"
  read -r tg_prefill tg_new tg_decode < <(sed -n 's/^sample: \([0-9]*\) prompt tokens in \([0-9.]*\) s, \([0-9]*\) new tokens in \([0-9.]*\) s.*/\2 \3 \4/p' "$work/tg_sample.log")
  OMP_NUM_THREADS=$threads $py bench/hf_generate.py "$W" "$ids" "$n_new" "$threads" > "$work/hf_sample.out" 2> "$work/hf_sample.log" ||
    { tail -5 "$work/hf_sample.log" >&2; echo "transformers failed: $work/hf_sample.log" >&2; exit 1; }
  read -r _ hf_new hf_s _ hf_ids < "$work/hf_sample.out"
  awk -v r="$round" -v tp="$tg_prefill" -v tn="$tg_new" -v td="$tg_decode" -v hn="$hf_new" -v hs="$hf_s" 'BEGIN {
    tg = tn / (tp + td); hf = hn / hs
    printf "round %d: tg %d tokens in %.2f s (prompt %.2f s + new tokens %.2f s): %.2f tokens/s; transformers %.2f tokens/s; %.2fx\n",
           r, tn, tp + td, tp, td, tg, hf, tg / hf
    print tg, hf, tg / hf > "/dev/stderr" }' 2>> "$work/rounds"
done
hf_name=$($py -c 'import torch, transformers; print("transformers %s (torch %s)" % (transformers.__version__, torch.__version__))')
# the same text: tg's output must start with the prompt and the text of transformers' tokens
same=$($py -c "
from transformers import GPT2Tokenizer
t = GPT2Tokenizer('$data/gpt2/encoder.json', '$data/gpt2/vocab.bpe')
want = t.decode([int(i) for i in '$hf_ids'.split(',')])
got = open('$work/tg_sample.txt', encoding='utf-8', errors='replace').read()[len('''$prompt'''):]
print('yes' if got.startswith(want) else 'NO')")
med() { sort -n | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'; }
tg_med=$(awk '{ print $1 }' "$work/rounds" | med)
hf_med=$(awk '{ print $2 }' "$work/rounds" | med)
ratio_med=$(awk '{ print $3 }' "$work/rounds" | med)
echo "tg: $tg_med tokens/s (median of $rounds rounds)"
echo "$hf_name: $hf_med tokens/s (median of $rounds rounds)"
echo "tg / transformers: ${ratio_med}x (median of the rounds' ratios; rounds $(awk '{ printf "%s%.2fx", (NR > 1 ? ", " : ""), $3 }' "$work/rounds")); the first 16 greedy tokens agree: $same"
