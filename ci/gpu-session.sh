#!/usr/bin/env bash
# Every GPU question the open issues still ask, in one device call, most pressing first,
# within one budget (a lease is about 15 minutes, starts included; a call at most 600 s):
#   checks   ci/gpu-check.sh tests python: the device collectives through NCCL ranks
#            sharing the GPU, their faults and the simulated hosts' hierarchy (issue
#            38; ACCORD_GPU_TESTS_MATCHING narrows them), beside accord.torch on CUDA
#            tensors, the sharded optimizer's and its loss scaler's GPU tests among them
#            (issues 34 and 37);
#   horovod  Horovod's own test_torch.py on CUDA tensors (issue 34), when the file was
#            carried in .horovod/ (after checks, whose Python step compiles accord._core
#            for this machine's python3): first test_horovod_join_allreduce alone on two
#            ranks sharing the GPU, with a 15 s stall bound and rank 0's timeline, every
#            rank's threads' stacks taken (cuda-gdb) if it still runs after 22 s; then
#            the whole file at -np 2 with the ranks sharing the GPU through NCCL (the
#            join left to the probe), then at -np 1;
#   trainer  ci/gpu-trainer-probe.sh: the fused block's tests, cuDNN's fused patterns,
#            ResNet-50 graphed and layer by layer, and packed JPEGs decoded by this
#            machine's cores against synthetic data (issue 39); ACCORD_SESSION_PROBE
#            names its steps (default: tests probe trainer data).
# Each part gets its share of what is left (checks 45%, horovod a half of the rest or
# all of it without trainer, trainer all that remains); a summary of all three is
# printed last. The device tool brings back at most 8 files from $OUT, so $OUT
# (./gpu-session-out elsewhere) holds two: session-summary.txt and
# gpu-session-logs.tar.gz, every part's logs, remade after each part (so that a call
# stopped midway still brings back what ran).
#
# The trainer wants more time than one call leaves it beside the others: in a lease,
# run checks and horovod in the first call and the trainer in a second, at once, while
# the machine is still warm.
#
# On the build machine, then through the device tool:
#   ACCORD_DEVICE_TARGETS=gpu bash ci/device-prepare.sh
#   bash ci/device-rehearse.sh bash ci/gpu-session.sh --budget 540 checks horovod
#   run: bash ci/device-run.sh bash ci/gpu-session.sh --budget 540 checks horovod
#        (timeout_s 600; carry build-device, .debs, .data and .horovod)
#   run: bash ci/device-run.sh bash ci/gpu-session.sh --budget 180 trainer
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
# The scripts' own settings (ACCORD_GPU_* for gpu-check.sh, ACCORD_PROBE_* for the
# trainer probe, ACCORD_SESSION_* for this one) go to the script that reads them only:
# exported, they would reach the Horovod runs' ranks, where the runtime warns at every
# init that they are not its variables.
check_env=() probe_env=()
for setting in ${!ACCORD_GPU_@}; do check_env+=("$setting=${!setting}"); export -n "$setting"; done
for setting in ${!ACCORD_PROBE_@}; do probe_env+=("$setting=${!setting}"); export -n "$setting"; done
for setting in ${!ACCORD_SESSION_@}; do export -n "$setting"; done
out=${OUT:-$PWD/gpu-session-out}
mkdir -p "$out"
logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu-session.XXXXXX")
summary=$logs/session-summary.txt
: > "$summary"
# Written beside and renamed, so that a call cut off while packing keeps the last whole
# archive (the device tool brings back what $OUT holds then).
pack() {
  tar -czf "$out/.logs.tar.gz.part" -C "$logs" . 2> /dev/null &&
    mv -f "$out/.logs.tar.gz.part" "$out/gpu-session-logs.tar.gz"
  cp "$summary" "$out/.summary.part" && mv -f "$out/.summary.part" "$out/session-summary.txt"
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
# the ranks it waits for) to come before pytest's 30 s limit, and rank 0's timeline
# (which collectives ran, how long each took: slow or stuck); should it still run after
# 22 s, every rank's threads' stacks (cuda-gdb: that machine has no gdb), taken at once,
# go into horovod-join/stacks.txt.
join_probe() {  # <seconds>
  local t=$1 dbg pid watcher rc
  if [ "$t" -lt 50 ]; then say "horovod join probe: NOT RUN: $t s of the budget for it"; status=1; return; fi
  progress "horovod join probe, $t s"
  mkdir -p "$logs/horovod-join"
  ACCORD_STALL_SHUTDOWN_TIME=15 timeout -k 10 "$t" bash ci/horovod-acceptance.sh .horovod/test_torch.py \
      --cuda --np 2 --python python3 --pythonpath /tmp/accord-python \
      --prefix 'bash ci/nccl-one-gpu.sh --hosts 1,1' --timeout 30 --total $((t - 5)) \
      --timeline "$logs/horovod-join/timeline.json" \
      --out "$logs/horovod-join" -- -k join_allreduce > "$logs/horovod-join.log" 2>&1 &
  pid=$!
  dbg=$(command -v cuda-gdb || command -v gdb || true)
  (
    sleep 22
    [ -n "$dbg" ] || exit 0
    for p in $(pgrep -f 'pytest.*test_torch.py'); do
      case $(cat "/proc/$p/comm" 2>/dev/null) in python*) ;; *) continue ;; esac
      (
        echo "== pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-160)"
        timeout 20 "$dbg" -p "$p" -batch -ex 'thread apply all bt' 2>&1 | grep -v '^\[New LWP'
      ) > "$logs/horovod-join/stacks-$p.txt" 2>&1 &
    done
    wait
    cat "$logs"/horovod-join/stacks-*.txt > "$logs/horovod-join/stacks.txt" 2> /dev/null
  ) &
  watcher=$!
  wait "$pid"
  rc=$?
  # Still asleep: it wakes, finds no rank left and ends; taking stacks: it ends within
  # its debugger's 20 s and puts them together.
  pkill -P "$watcher" sleep 2> /dev/null
  wait "$watcher" 2> /dev/null
  [ $rc -eq 0 ] || status=1
  say "horovod join probe, CUDA, -np 2, stall bound 15 s (exit $rc$([ -s "$logs/horovod-join/stacks.txt" ] && echo ', stacks taken at 22 s')):"
  grep -E '^rank [0-9]+:|^  FAILED|^E  |stall|did not join' "$logs/horovod-join.log" | head -20 | sed 's/^/  /' >> "$summary"
  # Rank 0's timeline, in short: what was still under way at its end (stuck), and the
  # longest phases (slow).
  [ -s "$logs/horovod-join/timeline.json" ] || return 0
  python3 - "$logs/horovod-join/timeline.json" <<'EOF' 2>&1 | head -12 | sed 's/^/  timeline: /' >> "$summary"
import json
import sys

events = json.load(open(sys.argv[1]))
names = {e["tid"]: e["args"]["name"] for e in events
         if e.get("ph") == "M" and e.get("name") == "thread_name"}
opened, spans = {}, []
for e in events:
    ph, tid = e.get("ph"), e.get("tid")
    if ph == "B":
        opened.setdefault(tid, []).append(e)
    elif ph == "E" and opened.get(tid):
        b = opened[tid].pop()
        spans.append((e["ts"] - b["ts"], names.get(tid, tid), b.get("name")))
    elif ph == "X":
        spans.append((e.get("dur", 0), names.get(tid, tid), e.get("name")))
end = max((e.get("ts", 0) for e in events), default=0)
print(f"{len(events)} events, the last at {end / 1e6:.2f} s")
for tid, stack in opened.items():
    for b in stack:
        print(f"under way at the end: {names.get(tid, tid)} {b.get('name')}, "
              f"for {(end - b['ts']) / 1e6:.2f} s")
for dur, name, phase in sorted(spans, key=lambda s: -s[0])[:5]:
    print(f"longest: {name} {phase} {dur / 1e3:.1f} ms")
EOF
}

if wants checks; then
  share=$(( $(left) * 45 / 100 ))
  if [ "$share" -ge 60 ]; then
    say "checks ($share s):"
    progress "checks, $share s"
    env "${check_env[@]}" OUT="$logs/checks" bash ci/gpu-check.sh --budget "$share" tests python > "$logs/checks.log" 2>&1 || status=1
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
    # The join first (the question issue 34 left open), then two ranks sharing the GPU
    # (the layout Horovod's count is for), then one rank, whose failures are mostly
    # those of one rank alone. The two-rank run leaves the join out: the probe has it,
    # and on its own it could hold the run for the whole per-test limit.
    probe=$(( share / 4 > 75 ? 75 : (share / 4 < 50 ? 50 : share / 4) ))
    join_probe "$probe"
    pack
    share=$((share - probe))
    for run in 2 1; do
      t=$(( run == 2 ? share * 2 / 3 : share - share * 2 / 3 ))
      [ "$t" -le "$(left)" ] || t=$(left)
      if [ "$t" -lt 30 ]; then
        say "horovod -np $run: NOT RUN: $t s of the budget for it"; status=1; continue
      fi
      progress "horovod -np $run, $t s"
      prefix=()
      select=()
      # Each rank a simulated host of its own: local_rank() 0 on both, the one GPU.
      if [ $run = 2 ]; then
        prefix=(--prefix 'bash ci/nccl-one-gpu.sh --hosts 1,1')
        select=(-- -k 'not join_allreduce')
      fi
      ACCORD_STALL_SHUTDOWN_TIME=20 timeout -k 10 "$t" bash ci/horovod-acceptance.sh \
          .horovod/test_torch.py --cuda --np "$run" --python python3 --pythonpath /tmp/accord-python \
          "${prefix[@]}" --timeout 30 --total $((t - 10)) --out "$logs/horovod-np$run" \
          "${select[@]}" > "$logs/horovod-np$run.log" 2>&1
      rc=$?
      [ $rc -eq 0 ] || status=1
      cut=
      grep -q 'was stopped' "$logs/horovod-np$run.log" && cut=', stopped at the budget'
      [ $rc -eq 124 ] && cut=', stopped at the budget'
      say "horovod test_torch.py, CUDA, -np $run$([ $run = 2 ] && echo ', sharing the GPU through NCCL, join_allreduce left to the probe') (exit $rc$cut):"
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
    env "${probe_env[@]}" OUT="$logs/trainer" bash ci/gpu-trainer-probe.sh --budget "$t" ${ACCORD_SESSION_PROBE:-tests probe trainer data} \
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
