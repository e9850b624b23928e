#!/usr/bin/env bash
# run_train.sh TGRUN SRCDIR: `tgrun train.cfg` end to end on the CPU backend.
#
# - prepare: Tiny Shakespeare at the character level into a temp dir;
# - a short run writes the log, metrics, plot, samples, checkpoint, kernels
#   and fusion report, and the loss falls;
# - resume: 6 steps, then resume to 12, gives exactly the losses of 12
#   steps run at once (same bits: the checkpoint holds the weights, AdamW's
#   moments, the step and the data position, and the run is deterministic);
# - data parallelism: 2 ranks with batch 2 each give the losses of 1 rank
#   with batch 4, within 1e-4 relative (float32: each rank's mean over 2
#   sequences, averaged, rounds differently from one mean over 4, and
#   AdamW's division by sqrt(v) amplifies such differences in small
#   gradients, as in tests/torch), and the ranks' weights are bit-identical
#   after every step (tgrun checks a hash each step and fails otherwise);
# - bad configs: an unknown key names the file and line and suggests the
#   nearest key; missing data says how to make it;
# - the reference interpreter, through the same backend interface, trains
#   like the CPU backend.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
cd "$src"

expect_status 0 "$tgrun" prepare --tokenizer char --input "$data/tinyshakespeare/input.txt" --out "$tmp/data"
contains "$tmp/out" "1,003,854 tokens"

cat > "$tmp/small.cfg" <<CFG
model = "models/gpt2.tg"
model.n_layer = 2
model.n_head = 2
model.n_embd = 32
model.block_size = 32
data_dir = "$tmp/data"
batch_size = 4
block_size = 32
learning_rate = 3e-3
min_lr = 3e-4
warmup_steps = 2
lr_decay_steps = 12
max_steps = 12
eval_interval = 6
eval_batches = 2
sample_interval = 0
sample_tokens = 40
checkpoint_interval = 6
threads = 1
CFG

# one run, with everything it writes
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/a"
cp "$tmp/out" "$tmp/a.out"
# one line says how long compiling took: the four graphs built (a fresh
# cache), then, with the same graphs again, all four from the cache
if grep -Eq '^compile: front end [0-9.]+ s, back end [0-9.]+ s \(cc, cold: 4 programs, 4 compiled, 0 cached\)$' "$tmp/a.out"
then ok; else bad "no cold compile line: $(grep compile: "$tmp/a.out")"; fi
for f in train.log metrics.jsonl loss.svg samples.txt ckpt.safetensors train.cfg kernels/grad.c kernels/optimizer.c \
  kernels/eval.c kernels/sample.c kernels/fusion.txt; do
  [ -s "$tmp/a/$f" ] && ok || bad "the run wrote no $f"
done
head -c 4 "$tmp/a/loss.svg" | grep -q '<svg' && ok || bad "loss.svg is not SVG"
contains "$tmp/a.out" "step 12/12"
contains "$tmp/a.out" "val loss"
contains "$tmp/a.out" "done. run directory"
losses() { /usr/bin/python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if 'loss' in r and 'val_loss' not in r: print(r['step'], repr(r['loss']))" "$1"; }
losses "$tmp/a/metrics.jsonl" > "$tmp/a.losses"
first=$(head -1 "$tmp/a.losses" | cut -d' ' -f2) last=$(tail -1 "$tmp/a.losses" | cut -d' ' -f2)
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$last') < float('$first') - 0.3 else 1)" && ok ||
  bad "the loss did not fall: $first -> $last"

# issue 29, item 8: every metrics row has a time stamp and the seconds
# since the start, never going back; the log shows them with an ETA; MFU
# is a number on the CPU backend with no peak_flops (measured); loss.svg,
# parsed as XML, draws train and val loss, the learning rate, the gradient
# norm and the tokens per second
times() { /usr/bin/python3 - "$@" <<'PY'
import json, sys, time
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r for r in rows if not isinstance(r.get("time"), float) or not isinstance(r.get("elapsed_s"), float)]
if bad: sys.exit("rows without time or elapsed_s: %s" % bad[:2])
el = [r["elapsed_s"] for r in rows]
if any(b < a for a, b in zip(el, el[1:])) or el[0] < 0: sys.exit("elapsed_s goes back: %s" % el)
now = time.time()
if not all(now - 3600 < r["time"] <= now + 1 for r in rows): sys.exit("a time that is not now's: %s" % rows[0])
mfu = [r["mfu"] for r in rows if "loss" in r]
if not all(isinstance(m, float) and 0 < m for m in mfu): sys.exit("mfu not a number: %s" % mfu)
print("%d rows, elapsed %.3f .. %.3f s, mfu %.3g .. %.3g" % (len(rows), el[0], el[-1], min(mfu), max(mfu)))
PY
}
times "$tmp/a/metrics.jsonl" && ok || bad "the metrics' time, elapsed_s or mfu"
if grep -Eq '^step +12/12 \|.*\| mfu +[0-9.]+% \| +[0-9dhms]+, eta +0s$' "$tmp/a.out"; then ok
else bad "no elapsed time and eta on the last step's line: $(grep '^step 12/12' "$tmp/a.out")"; fi
contains "$tmp/a.out" "mfu: over a peak of"
# the peak names the matmuls' library and the kernels it chose (runtime/backend/cpu/cpu_gemm.h)
if grep -Eq '\(measured: (oneDNN|OpenBLAS) [0-9.]+ \([A-Za-z0-9_]+ kernels[^)]*\) sgemm 512x512x512 on one core' "$tmp/a.out"; then ok
else bad "the mfu line names no matmul library: $(grep 'mfu: over' "$tmp/a.out")"; fi
if /usr/bin/python3 - "$tmp/a/loss.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
svg = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
paths = {p.get("id"): p.get("d") for p in svg.iter(ns + "path")}
want = ["train", "val", "lr", "grad_norm", "tok_per_s"]
missing = [k for k in want if not (paths.get(k) or "").strip()]
ids = [e.get("id") for e in svg.iter() if e.get("id")]
print("paths:", sorted(paths), "missing:", missing)
sys.exit(1 if missing or len(ids) != len(set(ids)) else 0)
PY
then ok; else bad "loss.svg lacks a series, or repeats an id"; fi

# resume: 6 steps, then on to 12
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/b" max_steps=6
if grep -Eq '^compile: front end [0-9.]+ s, back end [0-9.]+ s \(cc, warm: 4 programs, 0 compiled, 4 cached\)$' "$tmp/out"
then ok; else bad "no warm compile line: $(grep compile: "$tmp/out")"; fi
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/b" resume=true
contains "$tmp/out" "resumed from"
# the resumed rows count their elapsed_s from the resume, not from the
# first run's start (which came before its step-0 row's time)
/usr/bin/python3 - "$tmp/b/metrics.jsonl" <<'PY' && ok || bad "elapsed_s did not restart at the resume"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first = rows[0]
resumed = next(r for r in rows if r["step"] == 7)
print("step 7: elapsed_s %.3f, %.3f s after step 0's row" % (resumed["elapsed_s"], resumed["time"] - first["time"]))
sys.exit(0 if resumed["elapsed_s"] < resumed["time"] - first["time"] else 1)
PY
losses "$tmp/b/metrics.jsonl" > "$tmp/b.losses"
if diff "$tmp/a.losses" "$tmp/b.losses" > "$tmp/diff"; then ok; else bad "resumed losses differ:"; cat "$tmp/diff"; fi

# init_from: the weights of run a's checkpoint; the first evaluation (the
# same eval batches) then gives exactly run a's last
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/i" init_from="$tmp/a/ckpt.safetensors" max_steps=2 \
  warmup_steps=1 lr_decay_steps=2
contains "$tmp/out" "initial weights from"
evals() { /usr/bin/python3 -c "
import json, sys
print([repr(json.loads(l)['val_loss']) for l in open(sys.argv[1]) if 'val_loss' in l][int(sys.argv[2])])" "$1" "$2"; }
if [ "$(evals "$tmp/a/metrics.jsonl" -1)" = "$(evals "$tmp/i/metrics.jsonl" 0)" ]; then ok; else
  bad "init_from did not start from the checkpoint's weights"; fi

# the same loop on another backend: the reference interpreter trains like
# the CPU backend (one loop, one backend interface).  Within 1e-4
# relative: the interpreter rounds each value to f32 as the CPU backend
# does, but sums in another order (an ulp or two per reduction), which
# AdamW's division by sqrt(v) amplifies in small gradients, as above.
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/cpu3" max_steps=3 eval_interval=0 sample_tokens=0
losses "$tmp/cpu3/metrics.jsonl" > "$tmp/cpu3.losses"
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/ref3" max_steps=3 eval_interval=0 sample_tokens=0 backend=ref
losses "$tmp/ref3/metrics.jsonl" > "$tmp/ref3.losses"
if /usr/bin/python3 - "$tmp/cpu3.losses" "$tmp/ref3.losses" <<'PY'
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("cpu:", a, "\nref:", b, "\nworst relative difference %.3g (limit 1e-4)" % worst)
sys.exit(0 if len(a) == len(b) == 3 and worst <= 1e-4 else 1)
PY
then ok; else bad "training on the reference interpreter differs from the CPU backend"; fi

# gradient accumulation: 2 micro-batches of 2 = one batch of 4 (the same
# sequences: the loader draws micro-batches as consecutive slices), within
# 1e-4 relative as for the ranks below
expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/acc" max_steps=5 batch_size=2 grad_accum=2 eval_interval=0 sample_tokens=0
losses "$tmp/acc/metrics.jsonl" > "$tmp/acc.losses"

# data parallelism: 2 ranks x batch 2 = 1 rank x batch 4
if [ -n "${TG_SANITIZED:-}" ]; then
  echo "note: MPI part skipped in the sanitizer build (Open MPI's own allocations read as leaks)"
elif command -v mpirun > /dev/null; then
  expect_status 0 "$tgrun" "$tmp/small.cfg" out_dir="$tmp/one" max_steps=5 batch_size=4 eval_interval=0 sample_tokens=0
  losses "$tmp/one/metrics.jsonl" > "$tmp/one.losses"
  expect_status 0 "$tgrun" --nproc 2 "$tmp/small.cfg" out_dir="$tmp/two" max_steps=5 batch_size=2 eval_interval=0 sample_tokens=0
  contains "$tmp/out" "bit-identical after every step"
  losses "$tmp/two/metrics.jsonl" > "$tmp/two.losses"
  if /usr/bin/python3 - "$tmp/one.losses" "$tmp/two.losses" <<'PY'
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
assert len(a) == len(b) == 5, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("1 rank x 4:", a, "\n2 ranks x 2:", b, "\nworst relative difference %.3g (limit 1e-4)" % worst)
sys.exit(0 if worst <= 1e-4 else 1)
PY
  then ok; else bad "2 ranks' losses differ from 1 rank's"; fi
  if /usr/bin/python3 - "$tmp/one.losses" "$tmp/acc.losses" <<'PY'
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("batch 4:", a, "\n2 x 2 accumulated:", b, "\nworst relative difference %.3g (limit 1e-4)" % worst)
sys.exit(0 if len(a) == len(b) == 5 and worst <= 1e-4 else 1)
PY
  then ok; else bad "accumulated losses differ from one batch's"; fi
else
  bad "mpirun is missing (openmpi-bin)"
fi

# bad configs
printf 'model = "models/gpt2.tg"\nlearning_rat = 1e-3\n' > "$tmp/bad.cfg"
expect_status 1 "$tgrun" "$tmp/bad.cfg"
contains "$tmp/out" "bad.cfg:2:1: error: unknown key 'learning_rat'; did you mean 'learning_rate'?"
expect_status 1 "$tgrun" "$tmp/small.cfg" data_dir="$tmp/nothing" out_dir="$tmp/c"
contains "$tmp/out" "tgrun prepare"
expect_status 2 "$tgrun" "$tmp/small.cfg" max_step=3
contains "$tmp/out" "did you mean 'max_steps'?"
finish
