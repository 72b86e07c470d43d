#!/usr/bin/env bash
# accordrun inside a SLURM allocation (a one-node cluster that slurm_cluster.sh makes):
# srun starts the ranks (PMIx) instead of mpirun, the job's collectives run across them
# and pass their own checks, and a setting given as an accordrun flag (--timeline)
# reaches the ranks: rank 0 writes the timeline.
#   test_accordrun_slurm.sh <accordrun> <MPI test program>
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: test_accordrun_slurm.sh <accordrun> <MPI test program>" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
accordrun=$1
program=$2
out=$(mktemp -d /tmp/accordrun-slurm.XXXXXX)
trap 'rm -rf "$out"' EXIT

fail() { echo "FAIL: $*"; exit 1; }
# Each task says who started it before it becomes the test program. Under
# ci/sanitize.sh, Open MPI's mca_base_env_list carries the sanitizer's preload, which
# mpirun applies to its ranks and srun does not: the task applies it to the program.
preload=""
IFS=';' read -ra assignments <<< "${OMPI_MCA_mca_base_env_list:-}"
for a in "${assignments[@]}"; do
  case "$a" in LD_PRELOAD=*) preload=${a#LD_PRELOAD=} ;; esac
done
export ACCORD_TEST_TASK_PRELOAD=$preload
bash "$here/slurm_cluster.sh" 2 -- "$accordrun" --timeline "$out/timeline.json" -np 2 \
  bash -c 'echo "task ${SLURM_PROCID:-none} of ${SLURM_NTASKS:-none} in step ${SLURM_STEP_ID:-none}"
           [ -n "$ACCORD_TEST_TASK_PRELOAD" ] && export LD_PRELOAD=$ACCORD_TEST_TASK_PRELOAD
           exec "$0"' \
  "$program" > "$out/log" 2>&1
rc=$?
cat "$out/log"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || fail "the job exited with $rc"
for task in 0 1; do
  grep -Eq "^task $task of 2 in step [0-9]+$" "$out/log" || fail "srun did not start task $task of 2"
done
grep -q "2 rank(s), 0 failure(s)" "$out/log" || fail "the test program did not report 2 ranks without failures"
python3 - "$out/timeline.json" <<'PY' || fail "rank 0 wrote no timeline with the job's collectives"
import json, sys
events = json.load(open(sys.argv[1]))
names = [e.get("name", "") for e in events if isinstance(e, dict)]
assert "ALLREDUCE" in names, sorted(set(names))
PY
echo "accordrun under SLURM: 2 tasks started by srun, collectives passed, timeline written"
