#!/usr/bin/env bash
# run.sh: the main job, from a fresh machine: install what is needed, build,
# and show what tg makes of GPT-2 today: its statistics and its IR.
# (Training arrives with later parts; see README.md.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
mkdir -p build out
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo > build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc 2> /dev/null || echo 2)" --target tgc

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
echo "== a 2-layer GPT as Graphviz: out/gpt2-2layer.dot"
$tgc models/gpt2.tg -D n_layer=2 --emit dot -o out/gpt2-2layer.dot
if command -v dot > /dev/null; then
  dot -Tsvg out/gpt2-2layer.dot -o out/gpt2-2layer.svg && echo "   rendered: out/gpt2-2layer.svg"
fi
echo
echo "done. IR: out/gpt2.tgir   graph: out/gpt2-2layer.dot   compiler: build/tgc (tgc --help)"
