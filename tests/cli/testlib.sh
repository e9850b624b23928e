# testlib.sh: what the CLI test scripts share (sourced, not run).
#
# Sets $tmp (a fresh directory, removed on exit) and counters; each check
# counts as passed or failed; `finish` prints the "N passed, N failed"
# line that CI reads and exits non-zero on any failure.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# The absolute path of a program given on the command line: the tests cd.
abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# expect_status WANT CMD...: runs CMD, output to $tmp/out, checks its status
expect_status() {
  local want=$1
  shift
  "$@" > "$tmp/out" 2>&1
  local rc=$?
  if [ $rc -eq "$want" ]; then ok; else bad "'$*' exited $rc, expected $want"; cat "$tmp/out"; fi
}

# contains FILE TEXT: FILE holds TEXT
contains() { if grep -qF -- "$2" "$1"; then ok; else bad "$1 lacks '$2'"; head -20 "$1"; fi; }

finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
