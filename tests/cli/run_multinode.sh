#!/usr/bin/env bash
# run_multinode.sh TGRUN SRCDIR: 2 "nodes" on this machine, as
# docs/parallel.md#across-machines starts ranks on several: Open MPI's
# mpirun with a hostfile naming two hosts, node1 and node2, one slot each.
# Its launch agent (ssh between real machines) is a script here that runs
# the command on this machine instead, so mpirun sees two nodes of one rank
# each (OMPI_COMM_WORLD_LOCAL_SIZE 1, local rank 0 on each: the GPU each
# would open) and wires the ranks over TCP as between machines.
#
# - the two ranks train the tiny char model and give exactly the losses of
#   `tgrun --nproc 2` on one node (2 ranks: a + b = b + a, the same bits);
# - rank 0 alone writes out_dir;
# - a rank of a node that dies takes the run down with a non-zero status
#   within rank_timeout.
set -u
src=$(cd "$2" && pwd)
. "$src/tests/cli/testlib.sh"
tgrun=$(abspath "$1")
export TG_CACHE=$tmp/cache
data=${TG_DATA:-$src/../shared/data}
cd "$src"

if [ -n "${TG_SANITIZED:-}" ] || ! command -v mpirun > /dev/null; then
  echo "mpirun is missing (openmpi-bin) or the build is sanitized: nothing to run"
  finish
  exit $?
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tiny_char_run "$data"

cat > "$tmp/agent" <<'SH'
#!/bin/sh
# stands in for ssh: drops its options and the host name, runs the command here
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
shift
exec sh -c "$*"
SH
chmod +x "$tmp/agent"
printf 'node1 slots=1\nnode2 slots=1\n' > "$tmp/hostfile"
launch=(mpirun --hostfile "$tmp/hostfile" --mca plm_rsh_agent "$tmp/agent" -np 2)


# where each rank landed: a wrapper records the launcher's view, then is tgrun
cat > "$tmp/rank.sh" <<SH
#!/bin/sh
echo "rank \$OMPI_COMM_WORLD_RANK: local rank \$OMPI_COMM_WORLD_LOCAL_RANK of \$OMPI_COMM_WORLD_LOCAL_SIZE" > "$tmp/where.\$OMPI_COMM_WORLD_RANK"
exec "$tgrun" "\$@"
SH
chmod +x "$tmp/rank.sh"
expect_status 0 timeout 300 "${launch[@]}" "$tmp/rank.sh" "$s" out_dir="$tmp/nodes"
contains "$tmp/where.0" "rank 0: local rank 0 of 1"
contains "$tmp/where.1" "rank 1: local rank 0 of 1"
contains "$tmp/out" "x 2 ranks"
run_losses "$tmp/nodes/metrics.jsonl" > "$tmp/nodes.losses"

expect_status 0 timeout 300 "$tgrun" --nproc 2 "$s" out_dir="$tmp/one"
run_losses "$tmp/one/metrics.jsonl" > "$tmp/one.losses"
if [ -s "$tmp/one.losses" ] && diff "$tmp/one.losses" "$tmp/nodes.losses" > "$tmp/diff"; then ok
else bad "2 nodes and 1 node of 2 ranks differ:"; cat "$tmp/diff"; fi
[ "$(grep -vc val "$tmp/nodes.losses")" = 4 ] && ok || bad "expected 4 steps: $(cat "$tmp/nodes.losses")"

# a rank that dies on its node: the other stops, mpirun's status is not 0
cat > "$tmp/dies.sh" <<SH
#!/bin/sh
if [ "\$OMPI_COMM_WORLD_RANK" = 1 ]; then sleep 3; exit 7; fi
exec "$tgrun" "\$@"
SH
chmod +x "$tmp/dies.sh"
"${launch[@]}" "$tmp/dies.sh" "$s" out_dir="$tmp/dead" rank_timeout=20 max_steps=100000 > "$tmp/dead.out" 2>&1
rc=$?
[ $rc -ne 0 ] && ok || bad "a dead rank's run exited 0"

finish
