#!/usr/bin/env bash
# gpt2_gpu.sh: issue 16's throughput benchmark.  Trains GPT-2 124M (T =
# 1024, bf16, the largest micro-batch that fits, gradient accumulation to
# 2^19 tokens a step) on GPT-2 BPE Tiny Shakespeare in one run with tg
# (backend cuda) and with PyTorch (bench/torch_gpt_train.py: nanoGPT's
# model, torch.compile, fused AdamW, scaled_dot_product_attention, the
# vocabulary padded to 50304, bf16 autocast), and prints one table:
# tokens/s of both (steady state: the mean over the steps after the
# first TG_GPU_BENCH_WARMUP), their ratio, tg's MFU, and tg's measured time
# per kernel category (tgrun step with TG_PROFILE: every kernel timed,
# launch by launch) beside `tgc --report traffic`'s estimate for the same
# micro-batch.  Exit status 1 when tg's run or PyTorch's fails.
#
# MFU counts 6N + 12·L·H·Q·T FLOPs a token (nanoGPT's estimate_mfu,
# runtime/train/metrics.h) over peak_flops = TG_PEAK_FLOPS, by default
# 989e12: the H100 SXM's dense bf16 tensor-core peak from NVIDIA's data
# sheet, the figure nanoGPT and llm.c use.  (tgc --report traffic's roofline
# assumes 790 TFLOP/s, an attainable rate rather than the peak; the MFU is
# against the peak.)
#
# The largest batch: B = 64, 32, 16, ... (TG_GPU_BENCH_BATCHES), the first
# whose one-step run succeeds (the CUDA backend checks device memory before
# it allocates and says so); PyTorch starts at the same B and halves it on
# out of memory (exit 3), keeping 2^19 tokens a step with more accumulation.
#
# Environment:
#   TG_GPU_BENCH_BACKEND  cuda; cuda-emu rehearses here (tiny sizes, char
#                         vocabulary, torch on the CPU without compile)
#   TG_GPU_BENCH_SIZES    "n_layer n_head n_embd T" [12 12 768 1024]
#   TG_GPU_BENCH_BATCHES  [64 32 16 8 4 2 1]
#   TG_GPU_BENCH_TOKENS   tokens a step [524288 = 2^19]
#   TG_GPU_BENCH_STEPS    [30]; TG_GPU_BENCH_WARMUP [5]: left out of tokens/s
#   TG_GPU_BENCH_TOKENIZER gpt2 [char in a rehearsal]
#   TG_PEAK_FLOPS         [989e12]
#   TG_GPU_BENCH_PYTHON   [python3; /usr/bin/python3 in a rehearsal]
#   TGRUN, TGC            [build/tgrun, build/tgc]; TG_DATA [../shared/data]
#   OUT                   where logs go [a temporary folder, removed]
#   TG_GPU_BENCH_ONLY=profile  only the profiled step, at the first of
#                         TG_GPU_BENCH_BATCHES, untried: its 3 losses and
#                         its kernels, longest first (no training run, no
#                         PyTorch: a minute where the whole bench takes
#                         three, to look at a kernel change when little
#                         GPU time is left; nothing to compare, so no ratio)
#
# Rehearsal (no GPU; a few minutes):
#   TG_GPU_BENCH_BACKEND=cuda-emu bash bench/gpt2_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
src=$(pwd)
backend=${TG_GPU_BENCH_BACKEND:-cuda}
die() { echo "gpt2_gpu: $*" >&2; exit 2; }
if [ "$backend" = cuda ]; then
  sizes=${TG_GPU_BENCH_SIZES:-12 12 768 1024} batches=${TG_GPU_BENCH_BATCHES:-64 32 16 8 4 2 1}
  tokens=${TG_GPU_BENCH_TOKENS:-524288} steps=${TG_GPU_BENCH_STEPS:-30} warmup=${TG_GPU_BENCH_WARMUP:-5}
  tokenizer=${TG_GPU_BENCH_TOKENIZER:-gpt2} py=${TG_GPU_BENCH_PYTHON:-python3}
  torch_args=(--device cuda --compile --dtype bfloat16)
else
  sizes=${TG_GPU_BENCH_SIZES:-2 2 32 32} batches=${TG_GPU_BENCH_BATCHES:-8 4 2 1}
  tokens=${TG_GPU_BENCH_TOKENS:-512} steps=${TG_GPU_BENCH_STEPS:-6} warmup=${TG_GPU_BENCH_WARMUP:-2}
  tokenizer=${TG_GPU_BENCH_TOKENIZER:-char} py=${TG_GPU_BENCH_PYTHON:-/usr/bin/python3}
  torch_args=(--device cpu --threads 1)
fi
peak=${TG_PEAK_FLOPS:-989e12}
read -r L H C T <<< "$sizes"
tgrun=${TGRUN:-$src/build/tgrun} tgc=${TGC:-$src/build/tgc}
export TG_DATA=${TG_DATA:-$src/../shared/data}
input=$TG_DATA/tinyshakespeare/input.txt
{ [ -x "$tgrun" ] && [ -x "$tgc" ]; } || die "no tgrun or tgc at $tgrun, $tgc: build them (cmake -S . -B build && make -C build tgc tgrun) or set TGRUN and TGC"
[ -f "$input" ] || die "no $input: set TG_DATA to a folder holding tinyshakespeare/input.txt (and gpt2/encoder.json, vocab.bpe)"
"$py" -c 'import torch, numpy' 2> /dev/null || die "$py has no torch or numpy: set TG_GPU_BENCH_PYTHON"
[ "$steps" -gt "$warmup" ] || die "TG_GPU_BENCH_STEPS ($steps) must exceed TG_GPU_BENCH_WARMUP ($warmup)"

work=$(mktemp -d /tmp/tg-gpt2-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
logs=${OUT:-$work}
mkdir -p "$logs"
"$tgrun" prepare --tokenizer "$tokenizer" --input "$input" --out "$work/data" > "$work/prepare.log" 2>&1 ||
  { cat "$work/prepare.log"; die "tgrun prepare failed"; }
V=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$work/data/tokenizer.json")
Vpad=$(( (V + 63) / 64 * 64 ))

# train.cfg for batch B with accumulation A and N steps
cfg() {
  cat > "$work/train-$1.cfg" << EOF
model = "$src/models/gpt2.tg"
model.n_layer = $L
model.n_head = $H
model.n_embd = $C
model.block_size = $T
data_dir = "$work/data"
out_dir = "$work/run-$1-$3"
backend = "$backend"
precision = "bf16"
batch_size = $1
block_size = $T
grad_accum = $2
max_steps = $3
learning_rate = 6e-4
min_lr = 6e-5
warmup_steps = $(( $3 < 10 ? $3 : 10 ))
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
grad_clip = 1.0
eval_interval = 0
eval_batches = 1
log_interval = 1
sample_tokens = 0
checkpoint_interval = 0
peak_flops = $peak
seed = 1337
EOF
}

echo "== gpt2_gpu: $L layers, $H heads, $C wide, T $T, vocab $V (padded $Vpad, $tokenizer), $tokens tokens a step, bf16 on $backend"
only=${TG_GPU_BENCH_ONLY:-}
[ -z "$only" ] || [ "$only" = profile ] || die "TG_GPU_BENCH_ONLY is '$only': profile or nothing"
B=
[ "$only" = profile ] && read -r B _ <<< "$batches"
for b in $batches; do
  [ -z "$B" ] || break
  [ $(( tokens % (b * T) )) -eq 0 ] || continue
  cfg "$b" 1 1
  if "$tgrun" "$work/train-$b.cfg" > "$work/try-$b.log" 2>&1; then B=$b; break; fi
  echo "tg: B = $b does not run: $(grep -m1 -iE 'error|memory' "$work/try-$b.log" | cut -c1-160)"
done
cp "$work"/try-*.log "$logs/" 2> /dev/null
[ -n "$B" ] || { echo "FAIL: no batch size in ($batches) ran (logs: $logs/try-*.log)"; exit 1; }
A=$(( tokens / (B * T) ))
if [ "$only" != profile ]; then
  echo "tg: B = $B fits; grad_accum $A"
  cfg "$B" "$A" "$steps"
  "$tgrun" "$work/train-$B.cfg" > "$logs/tg-train.log" 2>&1 || { tail -15 "$logs/tg-train.log"; echo "FAIL: tg's run (log $logs/tg-train.log)"; exit 1; }
  cp "$work/run-$B-$steps/metrics.jsonl" "$logs/tg-metrics.jsonl"
fi

# every kernel timed: tgrun step on one micro-batch of B sequences from the data
"$py" - "$work/data/train.bin" "$B" "$T" "$work/batch.safetensors" << 'EOF' || die "could not write a batch"
import json, struct, sys
import numpy as np
path, B, T, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(path, "rb") as f:
    n = int(np.frombuffer(f.read(1024), dtype="<i4")[2]); ids = np.frombuffer(f.read(2 * n), dtype="<u2")
rng = np.random.default_rng(1337)
off = rng.integers(0, n - T, B)
x = np.stack([ids[o:o + T] for o in off]).astype("<i4"); y = np.stack([ids[o + 1:o + T + 1] for o in off]).astype("<i4")
hdr, body = {}, b""
for name, a in (("idx", x), ("targets", y)):
    hdr[name] = {"dtype": "I32", "shape": [B, T], "data_offsets": [len(body), len(body) + a.nbytes]}; body += a.tobytes()
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
open(out, "wb").write(struct.pack("<Q", len(h)) + h + body)
EOF
m=(-D n_layer="$L" -D n_head="$H" -D n_embd="$C" -D vocab="$V" -D block_size="$T")
"$tgrun" init models/gpt2.tg "${m[@]}" --seed 1337 --out "$work/w.safetensors" > /dev/null || die "tgrun init failed"
psteps=3
TG_PROFILE=100000 "$tgrun" step models/gpt2.tg "${m[@]}" --weights "$work/w.safetensors" --batch "$work/batch.safetensors" \
  --backend "$backend" --precision bf16 --steps $psteps --out "$work/w2.safetensors" > "$logs/tg-profile.log" 2>&1 ||
  echo "tg: the profiled step failed (log $logs/tg-profile.log); no measured times"
if [ "$only" = profile ]; then
  echo "== gpt2_gpu (TG_GPU_BENCH_ONLY=profile): tgrun step, B = $B, $psteps steps, every kernel timed"
  grep -E '^step |^profile:' "$logs/tg-profile.log" | head -40
  grep -q '^profile: ' "$logs/tg-profile.log"
  exit
fi
"$tgc" models/gpt2.tg "${m[@]}" -D B="$B" -D T="$T" --precision bf16 --report traffic > "$logs/traffic.txt" 2>&1 ||
  echo "tgc --report traffic failed (log $logs/traffic.txt)"

# the PyTorch peer at the same B, halved on out of memory
tb=$B
while :; do
  ta=$(( tokens / (tb * T) ))
  "$py" bench/torch_gpt_train.py --tokens "$work/data" --vocab-size "$Vpad" --n-layer "$L" --n-head "$H" --n-embd "$C" \
    --block-size "$T" --batch-size "$tb" --grad-accum "$ta" --steps "$steps" --timing-warmup "$warmup" \
    --lr 6e-4 --min-lr 6e-5 --warmup-steps 10 --beta2 0.95 "${torch_args[@]}" --json \
    > "$logs/torch.json" 2> "$logs/torch.log"
  rc=$?
  [ $rc -eq 3 ] && [ "$tb" -gt 1 ] && { echo "torch: B = $tb is out of memory; halving"; tb=$(( tb / 2 )); continue; }
  break
done
[ "$rc" -eq 0 ] || { tail -5 "$logs/torch.log"; echo "torch: failed (exit $rc; log $logs/torch.log)"; }
grep '^torch' "$logs/torch.log"

"$py" - "$logs/tg-metrics.jsonl" "$logs/torch.json" "$logs/tg-profile.log" "$logs/traffic.txt" "$warmup" "$psteps" \
  "$B" "$A" "$tb" "$backend" "$peak" << 'EOF' | tee "$logs/table.txt"
import json, re, sys
metrics, torch_json, prof, traffic, warmup, psteps, B, A, tb, backend, peak = sys.argv[1:]
warmup, psteps = int(warmup), int(psteps)
rows = [json.loads(l) for l in open(metrics) if '"loss"' in l]
steady = [r for r in rows if r["step"] > warmup]
tokens_step = None
tg_tok = sum(r["tok_per_s"] for r in steady) / len(steady)
tg_mfu = sum(r["mfu"] for r in steady) / len(steady)
try:
    t = json.loads(open(torch_json).read().strip().splitlines()[-1])
except (OSError, ValueError, IndexError):
    t = None
torch_tok = t["tokens_per_s"] if t else float("nan")
print("== gpt2_gpu (%s): tokens/s over steps %d..%d" % (backend, warmup + 1, rows[-1]["step"]))
print("%-40s %14s" % ("", "tokens/s"))
print("%-40s %14s" % ("tg (B=%s x %s accumulated)" % (B, A), "{:,.0f}".format(tg_tok)))
if t:
    what = "torch %s%s (B=%s x %s)" % (t["torch_version"], ", compiled" if t["compiled"] else "", tb, t["grad_accum"])
    print("%-40s %14s" % (what, "{:,.0f}".format(torch_tok)))
    print("%-40s %14.3f" % ("ratio tg / torch", tg_tok / torch_tok))
    print("%-40s %14s" % ("torch: fused AdamW, attention", "%s, %s" % (t["fused_adamw"], t["attention"])))
else:
    print("%-40s %14s" % ("torch", "FAILED"))
print("%-40s %13.1f%%" % ("tg MFU (peak %.0f TFLOP/s)" % (float(peak) / 1e12), 100 * tg_mfu))
print("%-40s %14.4f" % ("tg last loss", rows[-1]["loss"]))
# measured per kernel category: profile lines "profile: MS ms PCT% kN KIND "NAME" (WHERE)"
def category(kind, name):
    if kind == "matmul": return "matmul"
    if kind == "special" and name.startswith("flash_attention"): return "attention"
    if kind == "special" and name.startswith("scatter"): return "embedding"
    return {"row": "row", "reduce": "reduce", "elementwise": "elementwise", "multi": "optimizer"}.get(kind, "other")
meas = {}
try:
    for line in open(prof):
        m = re.match(r'profile:\s+([\d.]+) ms\s+[\d.]+%\s+k\d+ (\S+) "([^"]*)"', line)
        if m:
            c = category(m.group(2), m.group(3))
            meas[c] = meas.get(c, 0.0) + float(m.group(1)) / psteps
except OSError:
    pass
est = {}
try:
    for line in open(traffic):
        # a launch row: #, launch, category, blocks, threads, read MB, write MB, GFLOP, est us, ...
        f = line.split()
        if len(f) > 9 and f[1].isdigit():
            c = "matmul" if f[3] == "epilogue" else f[3]
            est[c] = est.get(c, 0.0) + float(f[9]) / 1e3
except OSError:
    pass
print()
print("tg per micro-batch of B=%s, by kernel category: measured (tgrun step, TG_PROFILE, mean of %d steps, "
      "launch by launch) beside tgc --report traffic's roofline estimate" % (B, psteps))
print("%-12s %12s %12s %8s" % ("category", "measured ms", "estimate ms", "ratio"))
cats = [c for c in ["matmul", "attention", "row", "elementwise", "reduce", "embedding", "optimizer", "other"]
        if c in meas or c in est]
for c in cats:
    a, b = meas.get(c), est.get(c)
    print("%-12s %12s %12s %8s" % (c, "%.3f" % a if a is not None else "-", "%.3f" % b if b is not None else "-",
                                   "%.2f" % (a / b) if a and b else "-"))
ta, tb_ = sum(meas.values()), sum(est.values())
print("%-12s %12.3f %12.3f %8s" % ("total", ta, tb_, "%.2f" % (ta / tb_) if ta and tb_ else "-"))
print("summary: tg B=%s %s tok/s, torch %s tok/s, ratio %s, MFU %.1f%%, kernels %.1f ms measured / %.1f ms estimated"
      % (B, "{:,.0f}".format(tg_tok), "{:,.0f}".format(torch_tok) if t else "FAILED",
         "%.3f" % (tg_tok / torch_tok) if t else "-", 100 * tg_mfu, ta, tb_))
EOF
status=${PIPESTATUS[0]}
# the comparison is the point: a failed PyTorch run fails the benchmark too
[ "$rc" -eq 0 ] || status=1
exit "$status"
