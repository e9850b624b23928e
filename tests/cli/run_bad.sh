#!/usr/bin/env bash
# run_bad.sh TGC SRCDIR [--update]
#
# Runs tgc on every malformed input in tests/bad/ and checks that it exits
# with status 1 and prints exactly NAME.expected (file:line:col: error:,
# the source line, the caret).  NAME.args, if present, holds extra
# arguments.  Inputs that cannot live in git as text (NUL bytes, bad UTF-8,
# absurd nesting, a directory, a missing file) are generated here.
# With --update, writes the .expected files instead (then review the diff).
set -u
tgc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute: the tests cd around
src=$(cd "$2" && pwd)  # absolute: it is also replaced by <src> in messages
update=${3:-}
bad="$src/tests/bad"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT

printf 'config { B = 2 }\ninput x: f32[B]\000\noutput y = sum(x)\n' > "$gen/not_text_nul.tg"
printf 'config { B = 2 }\n# caf\351 au lait\n' > "$gen/not_text_latin1.tg"
printf '\177ELF\002\001\001\000\000\000' > "$gen/not_text_elf.tg"
{ printf 'config { B = 2 }\ninput x: f32[B]\noutput y = sum('
  for _ in $(seq 20000); do printf '('; done; printf 'x'
  for _ in $(seq 20000); do printf ')'; done; printf ')\n'; } > "$gen/deep_nesting.tg"
mkdir "$gen/a_directory.tg"

pass=0
fail=0
failed=()

# check NAME DIR FILE [ARGS...]: run tgc in DIR on FILE, compare with NAME.expected
check() {
  local name=$1 dir=$2 file=$3
  shift 3
  local out rc
  out=$(cd "$dir" && "$tgc" "$file" "$@" 2>&1)
  rc=$?
  # The built-in models/ directory is an absolute path: keep it out of the
  # expected text so that it does not depend on where the checkout lives.
  out=${out//"$src"/<src>}
  if [ -n "$update" ]; then
    printf '%s\n' "$out" > "$bad/$name.expected"
  fi
  if [ $rc -ne 1 ]; then
    echo "FAIL $name: exit status $rc, expected 1"
    printf '%s\n' "$out" | head -20
    fail=$((fail + 1)); failed+=("$name")
  elif ! diff -u "$bad/$name.expected" <(printf '%s\n' "$out") > "$gen/diff"; then
    echo "FAIL $name: message differs from $name.expected"
    cat "$gen/diff"
    fail=$((fail + 1)); failed+=("$name")
  else
    pass=$((pass + 1))
  fi
}

for f in "$bad"/*.tg "$bad"/*.tgir; do
  [ -e "$f" ] || continue
  base=$(basename "$f")
  name=${base%.*}
  args=()
  # Imports resolve through the source tree, by a relative path, so that the
  # messages do not depend on where the checkout lives.
  [ "${base##*.}" = tg ] && args=(-I ../../models)
  if [ -f "$bad/$name.args" ]; then read -r -a extra < "$bad/$name.args"; args+=("${extra[@]}"); fi
  check "$name" "$bad" "$base" "${args[@]}"
done
for name in not_text_nul not_text_latin1 not_text_elf deep_nesting a_directory; do
  check "$name" "$gen" "$name.tg"
done
check missing_file "$gen" no_such_model.tg

echo "$pass passed, $fail failed"
[ $fail -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
