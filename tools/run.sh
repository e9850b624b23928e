#!/usr/bin/env bash
# run.sh: the main job, from a fresh machine: install what is needed, build,
# and show what tg makes of GPT-2 today: its statistics, its IR, and a few
# AdamW steps of a small GPT-2 on the reference interpreter.  (Training on
# Tiny Shakespeare from a train.cfg arrives with part 5; see README.md.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
mkdir -p build out
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo > build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc 2> /dev/null || echo 2)" --target tgc tgrun

tgc=build/tgc
echo
echo "== tgc models/gpt2.tg --stats"
$tgc models/gpt2.tg --stats
echo
echo "== the IR of GPT-2 (first layer shown; the whole graph is in out/gpt2.tgir)"
$tgc models/gpt2.tg --emit ir -o out/gpt2.tgir
sed -n '1,/"h.0.ln_2.weight"/p' out/gpt2.tgir | head -80
echo "   ... $(grep -c '^%' out/gpt2.tgir) nodes in all"
echo
echo "== the training step's kernels (tgc --report fusion; the whole report is in out/fusion-report.txt)"
$tgc models/gpt2.tg --report fusion > out/fusion-report.txt
grep -E '^fusion: [0-9]+ kernels|^fusion: bytes|^fusion: peak' out/fusion-report.txt
echo
echo "== a 2-layer GPT as Graphviz: out/gpt2-2layer.dot"
$tgc models/gpt2.tg -D n_layer=2 --emit dot -o out/gpt2-2layer.dot
if command -v dot > /dev/null; then
  dot -Tsvg out/gpt2-2layer.dot -o out/gpt2-2layer.svg && echo "   rendered: out/gpt2-2layer.svg"
fi
echo
echo "== five AdamW steps of a 2-layer GPT-2 (n_embd 64) on one batch, reference interpreter"
small=(models/gpt2.tg -D n_layer=2 -D n_embd=64 -D n_head=4 -D block_size=64)
build/tgrun init "${small[@]}" --seed 1337 --out out/small-init.safetensors
# One batch of 4 x 32 bytes of Tiny Shakespeare as token ids (bytes are
# valid GPT-2 ids; the real tokenizers come with part 5), targets shifted
# by one.  Without the data, a fixed pattern.
data=${TG_DATA:-../shared/data}/tinyshakespeare/input.txt
/usr/bin/python3 - "$data" out/small-batch.safetensors << 'PY'
import json, os, struct, sys
text = open(sys.argv[1], "rb").read()[:129 * 4] if os.path.exists(sys.argv[1]) else bytes(range(32, 127)) * 6
rows = [text[i * 33:(i + 1) * 33] for i in range(4)]
idx = [b for r in rows for b in r[:32]]
tgt = [b for r in rows for b in r[1:33]]
head = {"idx": {"dtype": "I32", "shape": [4, 32], "data_offsets": [0, 512]},
        "targets": {"dtype": "I32", "shape": [4, 32], "data_offsets": [512, 1024]}}
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + struct.pack("<128i", *idx) + struct.pack("<128i", *tgt))
PY
build/tgrun step "${small[@]}" --weights out/small-init.safetensors --batch out/small-batch.safetensors \
  --lr 1e-3 --steps 5 --out out/small-step5.safetensors
echo
echo "done. IR: out/gpt2.tgir   fusion report: out/fusion-report.txt   graph: out/gpt2-2layer.dot"
echo "      weights: out/small-*.safetensors"
echo "      compiler: build/tgc (tgc --help)   runner: build/tgrun (tgrun --help)"
