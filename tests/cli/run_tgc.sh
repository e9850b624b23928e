#!/usr/bin/env bash
# run_tgc.sh TGC SRCDIR: the tgc command line, end to end.
#
# Checks what a user relies on: --stats on GPT-2 (124,439,808 parameters),
# -D overrides, the IR text round trip (print, read back, print: the same
# bytes), -o writing atomically, --emit dot, --help covering every flag,
# and usage errors exiting with status 2.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgc=$(abspath "$1")
cd "$src"

# --stats: GPT-2 124M, and the default action is the same
expect_status 0 "$tgc" models/gpt2.tg --stats
contains "$tmp/out" "params   124,439,808 in 148 tensors"
# pad_vocab: the vocabulary is padded to a multiple of 64 by default; the
# parameter count stays the model's (padded rows are not trained)
contains "$tmp/out" "vocab    50257 → 50304 (padded)"
cp "$tmp/out" "$tmp/stats"
expect_status 0 "$tgc" models/gpt2.tg --pad-multiple 1
if grep -q '^vocab ' "$tmp/out"; then bad "--pad-multiple 1 still pads"; else ok; fi
contains "$tmp/out" "nodes    811:"   # 1,111 before flash_attn (13 fewer per layer) and gelu (12 fewer)
expect_status 0 "$tgc" models/gpt2.tg --pad-multiple 128 --emit ir
contains "$tmp/out" 'f32[vocab=50304, n_embd=768] "wte.weight"'
expect_status 2 "$tgc" models/gpt2.tg --pad-multiple 0
contains "$tmp/out" "--pad-multiple 0: expected a whole number"
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=1 --dump-after pad_vocab
contains "$tmp/out" 'f32[B=8, T=1024, vocab=50304] "logits"'
contains "$tmp/out" "# the IR above is after the pad_vocab pass"
expect_status 0 "$tgc" models/gpt2.tg
if cmp -s "$tmp/out" "$tmp/stats"; then ok; else bad "tgc with no flag differs from --stats"; fi

# -D: a small GPT; its parameter count follows the formula
L=2 C=64 V=50257 P=1024
n=$((V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C))
want=$(echo $n | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta')  # 3,382,080
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=$L -D n_embd=$C -Dn_head=4 -D B=4 -D T=64 --stats
contains "$tmp/out" "params   $want in"
contains "$tmp/out" "T=64"
# the last -D of a name wins
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=5 -D n_layer=$L -D n_embd=$C -Dn_head=4 --stats
contains "$tmp/out" "params   $want in"

# gpt2.tg refuses a sequence longer than its position table
expect_status 1 "$tgc" models/gpt2.tg -D T=2048
contains "$tmp/out" "error: assertion failed: the sequence length T exceeds block_size"

# every constant of gpt2.tg has a range, checked before anything is built;
# the error names the rule and a note names the constant, its value and
# where that value came from (here the -D)
expect_status 1 "$tgc" models/gpt2.tg -D n_layer=-1 --stats
contains "$tmp/out" "error: assertion failed: n_layer, the number of layers, must be at least 1"
contains "$tmp/out" "models/gpt2.tg:8:3: note: n_layer is -1, from -D n_layer=-1"
expect_status 1 "$tgc" models/gpt2.tg -D n_embd=33 -D n_head=2 --stats
contains "$tmp/out" "error: assertion failed: n_embd must be a multiple of n_head"
contains "$tmp/out" "note: n_embd is 33, from -D n_embd=33"
contains "$tmp/out" "note: n_head is 2, from -D n_head=2"
expect_status 1 "$tgc" models/gpt2.tg -D n_embd=0
contains "$tmp/out" "note: n_head is 12, set here"
for bad_value in n_head=0 n_layer=1.5 n_layer=2000 block_size=4e7 vocab=0 vocab=3e9 B=0 T=0 n_embd=131076; do
  expect_status 1 "$tgc" models/gpt2.tg -D "$bad_value" --stats
  contains "$tmp/out" "note: ${bad_value%%=*} is"
done

# IR round trip on the full model, through -o
expect_status 0 "$tgc" models/gpt2.tg --emit ir -o "$tmp/a.tgir"
expect_status 0 "$tgc" "$tmp/a.tgir" --emit ir -o "$tmp/b.tgir"
if cmp -s "$tmp/a.tgir" "$tmp/b.tgir"; then ok; else bad "IR round trip differs"; diff "$tmp/a.tgir" "$tmp/b.tgir" | head; fi
head -1 "$tmp/a.tgir" > "$tmp/out"
contains "$tmp/out" "# tg IR 1"
if ls "$tmp" | grep -q '\.tmp\.'; then bad "-o left a temporary file"; else ok; fi
expect_status 0 "$tgc" "$tmp/a.tgir" --stats
contains "$tmp/out" "124,439,808"
expect_status 1 "$tgc" "$tmp/a.tgir" -D n_layer=2
contains "$tmp/out" "error: -D cannot change an IR file"

# the training step (--grad): forward, backward and optimizer phases, and
# the same round trip with its phase lines
expect_status 0 "$tgc" models/gpt2.tg --grad -D n_layer=2 --emit ir -o "$tmp/g.tgir"
expect_status 0 "$tgc" "$tmp/g.tgir" --emit ir -o "$tmp/g2.tgir"
if cmp -s "$tmp/g.tgir" "$tmp/g2.tgir"; then ok; else bad "training IR round trip differs"; fi
contains "$tmp/g.tgir" "phase backward"
contains "$tmp/g.tgir" "phase optimizer"
contains "$tmp/g.tgir" 'output "grad:wte.weight"'
expect_status 0 "$tgc" models/gpt2.tg --grad --stats
contains "$tmp/out" "phases   816 forward,"
contains "$tmp/out" "outputs  loss f32[], grad_norm f32[], 148 gradients (grad:NAME)"
expect_status 1 "$tgc" "$tmp/g.tgir" --grad
contains "$tmp/out" "already has a backward part"

# --dump-after: every pass's IR reads back and prints the same
# --report flash_attn: every layer's attention is replaced
expect_status 0 "$tgc" models/gpt2.tg --report flash_attn
n=$(grep -c '^flash_attn: matched causal attention at models/std.tg:38:23: q f32\[B=8, n_head=12, T=1024, 64\], scale 0.125' "$tmp/out")
if [ "$n" = 12 ]; then ok; else bad "--report flash_attn: $n matches, expected 12"; cat "$tmp/out"; fi
contains "$tmp/out" "q from h.11.attn.c_attn.bias"
contains "$tmp/out" "flash_attn: 12 attentions replaced"
if grep -q "not matched" "$tmp/out"; then bad "--report flash_attn: a near miss in gpt2.tg"; else ok; fi
expect_status 0 "$tgc" models/gpt2.tg --emit ir
if grep -q ' = flash_attention ' "$tmp/out" && ! grep -q 'bool\[T=1024, T=1024\]' "$tmp/out"; then ok
else bad "the IR still holds a [T, T] mask, or no flash_attention"; fi
expect_status 2 "$tgc" models/gpt2.tg --report autodiff
contains "$tmp/out" "the reports are: flash_attn, gelu, precision, sharding, fusion"

# --report fusion: the kernels of the training step (it implies --grad),
# compared with a golden file; after a deliberate change to the fuse pass,
# regenerate it with
#   tgc models/gpt2.tg -D n_layer=2 --report fusion > tests/golden/fusion_2layer.txt
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=2 --report fusion
if cmp -s "$tmp/out" tests/golden/fusion_2layer.txt; then ok
else bad "--report fusion differs from tests/golden/fusion_2layer.txt"; diff tests/golden/fusion_2layer.txt "$tmp/out" | head -20; fi
contains "$tmp/out" "(intermediates, planned) vs "
expect_status 0 "$tgc" models/gpt2.tg --report fusion
contains "$tmp/out" "fusion: 279 kernels (147 matmuls)"

# --report memplan: a buffer per intermediate, and the totals the fusion
# report quotes (the plan is checked by the pass and by test_memplan)
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=2 --report memplan
contains "$tmp/out" "$(grep '^fusion: peak memory' tests/golden/fusion_2layer.txt | sed 's/^fusion:/memplan:/')"

expect_status 0 "$tgc" --dump-after list models/gpt2.tg
contains "$tmp/out" "autodiff"
for name in $(awk '{print $1}' "$tmp/out"); do
  # shard_params runs only for ZeRO stage 3
  zero=()
  [ "$name" = shard_params ] && zero=(--zero 3 --ranks 2)
  expect_status 0 "$tgc" models/gpt2.tg -D n_layer=1 --dump-after "$name" "${zero[@]}"
  grep -v '^# the IR above' "$tmp/out" > "$tmp/dump.tgir"
  # Reading back runs the passes again; those after a pass that comes
  # before flash_attn or gelu would still find attention or GELU to
  # replace, so such a dump is read back up to the same pass.
  case $name in
  pad_vocab | flash_attn) again=(--dump-after "$name") ;;
  *) again=(--emit ir) ;;
  esac
  expect_status 0 "$tgc" "$tmp/dump.tgir" "${again[@]}"
  grep -v '^# the IR above' "$tmp/out" > "$tmp/dump2.tgir"
  if cmp -s "$tmp/dump.tgir" "$tmp/dump2.tgir"; then ok; else bad "the IR after $name does not read back the same"; fi
done
expect_status 2 "$tgc" models/gpt2.tg -D n_layer=1 --dump-after shard_params
contains "$tmp/out" "tgc: error: --dump-after shard_params is ZeRO stage 3's pass: add --zero 3 --ranks N"
# --decode: the forward as one decode step with key/value caches (passes/decode.c)
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=2 -D B=1 --decode --emit ir
contains "$tmp/out" 'input : i32[T=1] "pos"'
contains "$tmp/out" 'state {init=zeros} : f32[B=1, n_head=12, block_size=1024, 64] "kv.v.1"'
contains "$tmp/out" 'output "logits" ='
n=$(grep -c ' = assign ' "$tmp/out")
if [ "$n" -eq 4 ]; then ok; else bad "--decode on 2 layers made $n assigns, not 4"; fi
if grep -q '"loss"\|flash_attention' "$tmp/out"; then bad "--decode kept the loss or a flash_attention"; else ok; fi
grep -v '^# the IR above' "$tmp/out" > "$tmp/decode.tgir"
expect_status 0 "$tgc" "$tmp/decode.tgir" --emit ir
if cmp -s "$tmp/out" "$tmp/decode.tgir"; then ok; else bad "the decode step's IR does not read back the same"; fi
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=2 --dump-after decode
contains "$tmp/out" "# the IR above is after the decode pass"
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=1 -D B=1 --decode --emit c -o "$tmp/decode_c"
contains "$tmp/decode_c/fusion.txt" "eq where x2 assign x2"
expect_status 1 "$tgc" models/gpt2.tg -D T=4 --decode --check
contains "$tmp/out" "models/gpt2.tg:75:50: error: decode: the positions here are 4 long"
expect_status 2 "$tgc" models/gpt2.tg --decode --grad
contains "$tmp/out" "a decode step has no gradient"

expect_status 2 "$tgc" models/gpt2.tg --dump-after fuse_everything
contains "$tmp/out" "no such pass; the passes are:"

# a pass that fails after -o DIR has made the directory and opened its
# fusion report: exit 1, and (in the sanitizer build) nothing leaks
printf 'config { B = 2 }\ninput x: f32[B]\nparam w: [B] = zeros\noutput y = sum(x * w)\n' > "$tmp/noloss.tg"
expect_status 1 "$tgc" "$tmp/noloss.tg" --emit cuda -o "$tmp/noloss.d"
contains "$tmp/out" "no output named 'loss'"

# -o with nothing to write to it is refused, not silently ignored
expect_status 2 "$tgc" models/gpt2.tg --report fusion -o "$tmp/r.txt"
contains "$tmp/out" "nothing to write there"

# a failed compile leaves an existing output file alone
echo "precious" > "$tmp/keep.tgir"
expect_status 1 "$tgc" tests/bad/matmul_shape.tg --emit ir -o "$tmp/keep.tgir"
contains "$tmp/keep.tgir" "precious"

# --emit dot
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=1 --emit dot
contains "$tmp/out" "digraph"
contains "$tmp/out" "wte.weight"
if command -v dot > /dev/null; then
  expect_status 0 dot -Tsvg "$tmp/out" -o "$tmp/g.svg"
fi

# --check prints nothing
expect_status 0 "$tgc" models/gpt2.tg --check
if [ -s "$tmp/out" ]; then bad "--check printed something"; else ok; fi

# imports: -I and TG_PATH
mkdir -p "$tmp/lib" "$tmp/model"
printf 'block double(x) { return 2 * x }\n' > "$tmp/lib/mylib.tg"
printf 'import "mylib.tg"\ninput x: f32[3]\noutput y = sum(double(x))\n' > "$tmp/model/m.tg"
expect_status 1 "$tgc" "$tmp/model/m.tg"
contains "$tmp/out" "cannot find 'mylib.tg'"
expect_status 0 "$tgc" "$tmp/model/m.tg" -I "$tmp/lib"
expect_status 0 env TG_PATH="/nonexistent:$tmp/lib" "$tgc" "$tmp/model/m.tg"

# --help documents every flag; usage errors exit 2
expect_status 0 "$tgc" --help
for flag in --stats "--emit ir" "--emit dot" --check --grad --decode --dump-after --report --pad-multiple -D -I -o --help --version; do
  contains "$tmp/out" "$flag"
done
expect_status 0 "$tgc" --version
expect_status 2 "$tgc"
contains "$tmp/out" "no input file"
expect_status 2 "$tgc" models/gpt2.tg --stat
contains "$tmp/out" "did you mean '--stats'?"
expect_status 2 "$tgc" models/gpt2.tg --emit ptx
contains "$tmp/out" "expected ir, dot, cuda, cubin or c"
expect_status 2 "$tgc" models/gpt2.tg -D n_layer
# --emit cubin: every distinct kernel compiled by NVRTC, cold then warm
small=(-D n_layer=2 -D n_embd=64 -D n_head=4 -D B=2 -D T=64 -D vocab=65)
TG_CACHE=$tmp/cache expect_status 0 "$tgc" models/gpt2.tg "${small[@]}" --emit cubin -o "$tmp/cubin"
contains "$tmp/out" "(cold: "
n=$(sed -n 's/^compiled \([0-9]*\) kernels for sm_90 .*/\1/p' "$tmp/out")
[ -n "$n" ] && [ "$(ls "$tmp/cubin"/f_*.cubin | wc -l)" -eq "$n" ] && ok || bad "--emit cubin: $n kernels, $(ls "$tmp/cubin" | tr '\n' ' ')"
TG_CACHE=$tmp/cache expect_status 0 "$tgc" models/gpt2.tg "${small[@]}" --emit cubin -o "$tmp/cubin"
contains "$tmp/out" "(warm: 0 compiled, $n cached"
# GPT-2 124M's own kernels (T = 1024, the 50304-wide padded vocabulary, bf16),
# at the batches the GPU check's numerics and throughput stages run: what a
# GPU session would compile first, compiled here by NVRTC for sm_90
for b in 8 64; do
  TG_CACHE=$tmp/cache expect_status 0 "$tgc" models/gpt2.tg -D B=$b --emit cubin -o "$tmp/cubin124m"
  contains "$tmp/out" "kernels for sm_90"
done
expect_status 2 "$tgc" models/gpt2.tg --emit cubin
contains "$tmp/out" "--emit cubin needs -o DIR"
expect_status 2 "$tgc" models/gpt2.tg --emit cuda --arch sm_90
contains "$tmp/out" "--arch is for --emit cubin"
expect_status 2 "$tgc" models/gpt2.tg models/std.tg

# the program's models/ is found when it runs (base/program_dir.c), not
# compiled in: a copy of tgc in another tree imports that tree's std.tg
# (here with a block the source tree's lacks), and no binary holds the
# source tree's models/ path
reloc=$tmp/reloc
mkdir -p "$reloc/build" "$reloc/models" "$reloc/user"
cp "$tgc" "$reloc/build/tgc"
cp models/std.tg "$reloc/models/std.tg"
printf '\nblock only_in_the_copy(x) {\n  return x * 2\n}\n' >> "$reloc/models/std.tg"
printf 'import "std.tg"\nconfig {\n  N = 4\n}\ninput x: f32[N]\noutput y = sum(only_in_the_copy(x))\n' > "$reloc/user/m.tg"
expect_status 0 "$reloc/build/tgc" "$reloc/user/m.tg" --check
expect_status 1 "$tgc" "$reloc/user/m.tg" --check
contains "$tmp/out" "only_in_the_copy"
if grep -qaF "$src/models" "$tgc" "$(dirname "$tgc")/tgrun"; then bad "a binary holds the path $src/models"; else ok; fi

# --report schedule names each gradient by its parameter; --report memplan
# opens with the totals and the ten largest buffers, named
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=1 --report schedule
contains "$tmp/out" "wte.weight (%"
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=1 --report memplan
if [ "$(sed -n 3p "$tmp/out")" = "memplan: the 10 largest:" ] &&
   [ "$(sed -n 4,13p "$tmp/out" | grep -c '^memplan:   [0-9.]* [kMG]\?B  %[0-9]* .* ([a-z0-9]*\.tg:[0-9]*)$')" = 10 ]; then ok
else bad "memplan's report does not open with the ten largest buffers, named"; head -16 "$tmp/out"; fi

# --emit dot of a fused graph: a cluster a kernel, constants in their
# readers' labels, and one layer of the training graph laid out by dot in
# seconds
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=1 --grad --emit dot
cp "$tmp/out" "$tmp/l1.dot"
contains "$tmp/l1.dot" "subgraph cluster_k0 {"
if grep -q 'label="const' "$tmp/l1.dot"; then bad "a constant read by a node is a node of its own"; else ok; fi
if command -v dot > /dev/null; then
  t0=$(date +%s)
  if timeout 120 dot -Tsvg "$tmp/l1.dot" > "$tmp/l1.svg"; then ok; else bad "dot failed or took over 120 s"; fi
  echo "dot: one GPT-2 layer's training graph in $(( $(date +%s) - t0 )) s"
fi

# --report html: the page beside what --emit cuda writes; it needs -o DIR
# and the training step; a model that fails gets a page with its error
# (the page in a browser: tests/report/check_page.py)
expect_status 0 "$tgc" models/gpt2.tg -D n_layer=2 --report html --dump-after fuse -o "$tmp/html"
contains "$tmp/out" "wrote $tmp/html/index.html"
for f in index.html gpt2.cu manifest.json fusion.txt; do
  if [ -s "$tmp/html/$f" ]; then ok; else bad "--report html wrote no $f"; fi
done
if grep -q '"ir_pass": "fuse"' "$tmp/html/index.html"; then ok; else bad "--dump-after fuse: no IR on the page"; fi
if grep -q '# the IR above is after' "$tmp/out"; then bad "--report html printed the IR to stdout"; else ok; fi
# dot draws the step with two of its plugins (tools/tgc_dot.c): the page
# holds dot's drawing, and the config tgc made for dot is gone after; where
# that config fails (GVBINDIR naming one whose plugins are not there), dot
# runs as installed, fails the same, and the page draws its own layout
if command -v dot > /dev/null; then
  mkdir -p "$tmp/tmpdir" "$tmp/badgv"
  expect_status 0 env TMPDIR="$tmp/tmpdir" "$tgc" models/gpt2.tg -D n_layer=2 --report html -o "$tmp/html_dot"
  if grep -q 'class="node"' "$tmp/html_dot/step.svg" && grep -q '"step_svg": "\\u003csvg' "$tmp/html_dot/index.html"
  then ok; else bad "the page does not hold dot's drawing of the step"; fi
  if [ -z "$(ls -A "$tmp/tmpdir")" ]; then ok; else bad "tgc left its config for dot behind: $(ls "$tmp/tmpdir")"; fi
  printf 'libgvplugin_core.so.6 core {\n\tdevice {\n\t\tsvg:svg 1\n\t}\n}\nlibgvplugin_dot_layout.so.6 dot_layout {\n\tlayout {\n\t\tdot 0\n\t}\n}\n' \
    > "$tmp/badgv/config6a"
  expect_status 0 env GVBINDIR="$tmp/badgv" TMPDIR="$tmp/tmpdir" "$tgc" models/gpt2.tg -D n_layer=2 --report html \
    -o "$tmp/html_badgv"
  if grep -q '"step_svg": ""' "$tmp/html_badgv/index.html"; then ok; else bad "a failed dot left the page without its own layout"; fi
  if [ -z "$(ls -A "$tmp/tmpdir")" ]; then ok; else bad "tgc left its config for dot behind: $(ls "$tmp/tmpdir")"; fi
fi
expect_status 2 "$tgc" models/gpt2.tg --report html
contains "$tmp/out" "--report html needs -o DIR"
expect_status 2 "$tgc" models/gpt2.tg --report html --decode -o "$tmp/html2"
contains "$tmp/out" "--report html shows the training step"
expect_status 1 "$tgc" tests/bad/undefined_config.tg --report html -o "$tmp/bad_html"
contains "$tmp/out" "error: unknown name 'B'"
if grep -q "unknown name 'B'" "$tmp/bad_html/index.html"; then ok; else bad "the failing model's page lacks its error"; fi
# ... failing in a pass: the passes that ran, the one that stopped last (unfinished)
printf 'config { n = 2 }\ninput x: f32[n]\noutput y = sum(x)\n' > "$tmp/no_loss.tg"
expect_status 1 "$tgc" "$tmp/no_loss.tg" --report html -o "$tmp/no_loss_html"
contains "$tmp/out" "no output named 'loss'"
if grep -q '{"name": "autodiff", .*"seconds": -1' "$tmp/no_loss_html/index.html" &&
   grep -q '{"name": "precision", .*"kernels": 0, "seconds": [0-9]' "$tmp/no_loss_html/index.html"; then ok
else bad "the page of a model failing in autodiff does not show the passes before it done and autodiff stopped"; fi

finish
