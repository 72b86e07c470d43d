#!/usr/bin/env bash
# Every GPU question the open issues still ask, in one device call, most pressing first,
# within one budget (a lease is about 15 minutes, starts included; a call at most 600 s):
#   checks   ci/gpu-check.sh tests python: the device collectives through NCCL ranks
#            sharing the GPU, their faults and the simulated hosts' hierarchy (issue
#            38; ACCORD_GPU_TESTS_MATCHING narrows them), beside accord.torch on CUDA
#            tensors, the sharded optimizer's and its loss scaler's GPU tests among them
#            (issues 34 and 37);
#   horovod  Horovod's own test_torch.py on CUDA tensors at -np 1, then at -np 2 with
#            the ranks sharing the GPU through NCCL (issue 34), when the file was
#            carried in .horovod/ (after checks, whose Python step compiles accord._core
#            for this machine's python3); between the two, test_horovod_join_allreduce
#            alone on the two ranks with a 15 s stall bound, every rank's threads'
#            stacks taken (cuda-gdb) if it still runs after 30 s;
#   trainer  ci/gpu-trainer-probe.sh: the fused block's tests, cuDNN's fused patterns,
#            ResNet-50 graphed and layer by layer, and packed JPEGs decoded by this
#            machine's cores against synthetic data (issue 39); ACCORD_SESSION_PROBE
#            names its steps (default: tests probe trainer data).
# Each part gets its share of what is left (checks 45%, horovod a half of the rest,
# trainer all that remains); a summary of all three is printed last. The device tool
# brings back at most 8 files from $OUT, so $OUT (./gpu-session-out elsewhere) holds two:
# session-summary.txt and gpu-session-logs.tar.gz, every part's logs, remade after each
# part (so that a call stopped midway still brings back what ran).
#
# On the build machine, then through the device tool:
#   ACCORD_DEVICE_TARGETS=gpu bash ci/device-prepare.sh
#   bash ci/device-rehearse.sh bash ci/gpu-session.sh --budget 540
#   run: bash ci/device-run.sh bash ci/gpu-session.sh --budget 540
#        (timeout_s 600; carry build-device, .debs, .data and .horovod)
#
#   bash ci/gpu-session.sh [--budget SECONDS] [checks] [horovod] [trainer]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
budget=540
parts=()
while [ $# -gt 0 ]; do
  case $1 in
    --budget | --budget=*)
      if [ "$1" = --budget ]; then budget=${2:-}; shift; else budget=${1#--budget=}; fi
      [[ "$budget" =~ ^[0-9]+$ ]] && [ "$budget" -ge 120 ] || {
        echo "ci/gpu-session.sh: --budget '$budget': expected whole seconds, at least 120" >&2
        exit 2
      } ;;
    -h | --help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    checks | horovod | trainer) parts+=("$1") ;;
    *) echo "ci/gpu-session.sh: unknown argument '$1' (expected checks, horovod, trainer or" \
            "--budget SECONDS)" >&2
       exit 2 ;;
  esac
  shift
done
[ ${#parts[@]} -gt 0 ] || parts=(checks horovod trainer)
wants() { [[ " ${parts[*]} " == *" $1 "* ]]; }
out=${OUT:-$PWD/gpu-session-out}
mkdir -p "$out"
logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu-session.XXXXXX")
summary=$logs/session-summary.txt
: > "$summary"
pack() {
  tar -czf "$out/gpu-session-logs.tar.gz" -C "$logs" . 2> /dev/null
  cp "$summary" "$out/session-summary.txt"
}
started=$SECONDS
status=0
left() { echo $((budget - (SECONDS - started) - 5)); }
# The summary is printed whole at the end; while the parts run, one line each on stdout.
say() { echo "$*" >> "$summary"; }
progress() { echo "gpu-session: $* ($((SECONDS - started)) s)"; }
say "== gpu-session: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || cat build/COMMIT 2>/dev/null || echo "?"), budget $budget s, parts: ${parts[*]}"

# A part's own summary, whole, into the session's.
collect() {  # <part> <its summary file>
  if [ -f "$2" ]; then
    sed 's/^/  /' "$2" >> "$summary"
  else
    say "  (no summary: the part stopped before writing one)"
  fi
}

# The join that did not finish on two CUDA ranks (issue 34): test_horovod_join_allreduce
# alone, with a stall bound short enough for Accord's own diagnosis (the collective and
# the ranks it waits for) to come before pytest's 45 s limit; should it still run after
# 30 s, every rank's threads' stacks (cuda-gdb: that machine has no gdb) go into
# horovod-join/stacks.txt.
join_probe() {  # <seconds>
  local t=$1 dbg pid watcher rc
  if [ "$t" -lt 30 ]; then say "horovod join probe: NOT RUN: $t s of the budget for it"; status=1; return; fi
  progress "horovod join probe, $t s"
  mkdir -p "$logs/horovod-join"
  ACCORD_STALL_SHUTDOWN_TIME=15 timeout -k 10 "$t" bash ci/horovod-acceptance.sh .horovod/test_torch.py \
      --cuda --np 2 --python python3 --pythonpath /tmp/accord-python \
      --prefix 'bash ci/nccl-one-gpu.sh --hosts 1,1' --timeout 45 --total $((t - 5)) \
      --out "$logs/horovod-join" -- -k join_allreduce > "$logs/horovod-join.log" 2>&1 &
  pid=$!
  dbg=$(command -v cuda-gdb || command -v gdb || true)
  (
    sleep 30
    [ -n "$dbg" ] || exit 0
    for p in $(pgrep -f 'pytest.*test_torch.py'); do
      case $(cat "/proc/$p/comm" 2>/dev/null) in python*) ;; *) continue ;; esac
      echo "== pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-160)"
      timeout 20 "$dbg" -p "$p" -batch -ex 'thread apply all bt' 2>&1 | grep -v '^\[New LWP'
    done > "$logs/horovod-join/stacks.txt" 2>&1
  ) &
  watcher=$!
  wait "$pid"
  rc=$?
  kill "$watcher" 2> /dev/null
  pkill -P "$watcher" sleep 2> /dev/null
  [ $rc -eq 0 ] || status=1
  say "horovod join probe, CUDA, -np 2, stall bound 15 s (exit $rc$([ -s "$logs/horovod-join/stacks.txt" ] && echo ', stacks taken at 30 s')):"
  grep -E '^rank [0-9]+:|^  FAILED|^E  ' "$logs/horovod-join.log" | head -20 | sed 's/^/  /' >> "$summary"
}

if wants checks; then
  share=$(( $(left) * 45 / 100 ))
  if [ "$share" -ge 60 ]; then
    say "checks ($share s):"
    progress "checks, $share s"
    OUT=$logs/checks bash ci/gpu-check.sh --budget "$share" tests python > "$logs/checks.log" 2>&1 || status=1
    collect checks "$logs/checks/summary.txt"
    pack
  else
    say "checks: NOT RUN: $share s of the budget for it"; status=1
  fi
fi

if wants horovod; then
  core=$(ls /tmp/accord-python/accord/_core*.so 2>/dev/null | head -1)
  if [ ! -f .horovod/test_torch.py ]; then
    say "horovod: NOT RUN: no .horovod/test_torch.py (fetch Horovod's v0.28.1 file there and carry .horovod)"
    status=1
  elif [ -z "$core" ]; then
    say "horovod: NOT RUN: no accord._core for this python3 in /tmp/accord-python (the checks part's Python step compiles it)"
    status=1
  else
    share=$(left)
    wants trainer && share=$((share / 2))
    probe=$(( share / 3 < 55 ? share / 3 : 55 ))
    share=$((share - probe))
    for run in 1 join 2; do
      if [ $run = join ]; then
        join_probe "$probe"
        pack
        continue
      fi
      t=$(( run == 1 ? share * 2 / 5 : share - (share * 2 / 5) ))
      [ "$t" -le "$(left)" ] || t=$(left)
      if [ "$t" -lt 30 ]; then
        say "horovod -np $run: NOT RUN: $t s of the budget for it"; status=1; continue
      fi
      progress "horovod -np $run, $t s"
      prefix=()
      # Each rank a simulated host of its own: local_rank() 0 on both, the one GPU.
      [ $run = 2 ] && prefix=(--prefix 'bash ci/nccl-one-gpu.sh --hosts 1,1')
      timeout -k 10 "$t" bash ci/horovod-acceptance.sh .horovod/test_torch.py --cuda --np "$run" \
          --python python3 --pythonpath /tmp/accord-python "${prefix[@]}" --timeout 60 \
          --total $((t - 10)) --out "$logs/horovod-np$run" > "$logs/horovod-np$run.log" 2>&1
      rc=$?
      [ $rc -eq 0 ] || status=1
      say "horovod test_torch.py, CUDA, -np $run$([ $run = 2 ] && echo ', sharing the GPU through NCCL') (exit $rc$([ $rc -eq 124 ] && echo ', stopped at the budget')):"
      grep -E '^rank [0-9]+:|^  FAILED' "$logs/horovod-np$run.log" | sed 's/^/  /' >> "$summary"
      pack
    done
  fi
fi

if wants trainer; then
  t=$(left)
  if [ "$t" -ge 60 ]; then
    say "trainer ($t s):"
    progress "trainer, $t s"
    # shellcheck disable=SC2086  # a list of step names
    OUT=$logs/trainer bash ci/gpu-trainer-probe.sh --budget "$t" ${ACCORD_SESSION_PROBE:-tests probe trainer data} \
        > "$logs/trainer.log" 2>&1 || status=1
    collect trainer "$logs/trainer/summary.txt"
    pack
  else
    say "trainer: NOT RUN: $t s of the budget left"; status=1
  fi
fi

say "== gpu-session (${parts[*]}, $((SECONDS - started)) s of $budget): $([ $status -eq 0 ] && echo 'all passed' || echo 'FAILURES or parts not run, see each part')"
pack
cat "$summary"
exit $status
