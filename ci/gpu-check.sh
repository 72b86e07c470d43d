#!/usr/bin/env bash
# The GPU check, in one command on a machine with a GPU: the GPU build's tests
# (ctest -L gpu: CUDA kernels, every device collective with NCCL on 1-4 ranks (sharing
# the GPUs where there are fewer, ci/nccl-one-gpu.sh) and staged through MPI, across
# simulated hosts, the error paths and faults, the trainer's cuDNN layers, and whole
# accord-resnet runs on the GPU), accord.torch on CUDA tensors (ci/device-python.sh), the
# device benchmarks (accord-bench --device cuda, and Average on 2-4 ranks), the trainer
# on the GPU against PyTorch (tools/resnet_gpu_bench.py), the trainer's GPU time by
# layer kind (--gpu-profile), the host MPI tests of the same build, and, on the
# machine's CPU cores, the sharded optimizer against DistributedOptimizer and PyTorch's
# ZeroRedundancyOptimizer (examples/python/bench_sharded.py: 2 ranks, half the cores
# each; issue 37's step-time targets, which a 2-core VM cannot show). Results go to
# $OUT (the device tool's output folder; ./gpu-check-out elsewhere), and a summary is
# printed last.
#
# On the build machine (no GPU needed), then through the device tool:
#   ACCORD_DEVICE_TARGETS=gpu bash ci/device-prepare.sh
#   bash ci/device-rehearse.sh          (here: does everything load and start there?)
#   run: bash ci/device-run.sh bash ci/gpu-check.sh --budget 540
#                                      (timeout_s 600; carry: build-device, .debs, .data)
#
#   bash ci/gpu-check.sh [--budget SECONDS] [tests] [trainer-tests] [python] [bench]
#                        [average] [trainer] [profile] [mpi] [sharded]
# runs the steps named (all of them when none is), in that order of importance, except
# that the tests (CTest runs ACCORD_GPU_TEST_JOBS at once: 8 on 16 cores or more, else
# 4) and the Python suite run side by side. With --budget the whole check ends within
# that many seconds: the tests get a little over half of it, or all of it where no later
# step is named (CTest stops those still running in time to report), each later step at
# most what is left, the trainer benchmark measures what fits (its most telling figures
# first), and a step with too little left is reported NOT RUN. A device lease is short:
# one call should bring back everything.
#
# Narrower runs (a second call of a lease, say): ACCORD_GPU_TESTS_MATCHING (a CTest -R
# regular expression) picks among the GPU tests; ACCORD_GPU_TESTS_FIRST (another, which
# takes MATCHING's place for them) runs those it matches first, the others after them
# in what is left; ACCORD_GPU_BENCH_RUNS
# (model:batch pairs), ACCORD_GPU_BENCH_COMPILE (off, on, both) and
# ACCORD_GPU_BENCH_SKIP (trainer modes: layers, graphs, fusion) narrow the trainer
# benchmark; ACCORD_GPU_PROFILE_FLAGS adds trainer flags to the profile's run.
#
# Every step runs even when one before it failed; the exit status is non-zero when any
# test failed, a step did not finish or did not run, or a GPU step said "no GPU" on a
# machine that has one. The logs are archived after every step, so a call cut off at
# its limit still brings back what finished.
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
budget=0
steps=()
while [ $# -gt 0 ]; do
  case $1 in
    --budget | --budget=*)
      if [ "$1" = --budget ]; then budget=${2:-}; shift; else budget=${1#--budget=}; fi
      [[ "$budget" =~ ^[0-9]+$ ]] && [ "$budget" -ge 60 ] || {
        echo "ci/gpu-check.sh: --budget '$budget': expected whole seconds, at least 60" >&2
        exit 2
      } ;;
    tests | trainer-tests | python | bench | average | trainer | profile | mpi | sharded) steps+=("$1") ;;
    *) echo "ci/gpu-check.sh: unknown step '$1' (expected tests, trainer-tests, python," \
            "bench, average, trainer, profile, mpi, sharded or --budget SECONDS)" >&2
       exit 2 ;;
  esac
  shift
done
[ ${#steps[@]} -gt 0 ] || steps=(tests trainer-tests python bench average trainer profile mpi sharded)
wants() { [[ " ${steps[*]} " == *" $1 "* ]]; }
# This script's own settings stay out of the tests' environment, where the runtime
# would warn that they are not its variables.
for setting in ${!ACCORD_GPU_@}; do export -n "$setting"; done
# Tests at once: a rank's CUDA context and NCCL's threads want a core; the device
# machines have 16, this VM 2.
cores=$(nproc 2>/dev/null || echo 4)
test_jobs=${ACCORD_GPU_TEST_JOBS:-$((cores >= 16 ? 8 : 4))}
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0
# Seconds a step may take: what it wants, or what is left of the budget less the time
# the last archive needs; fails (printing what is left) when that is under its least.
started=$SECONDS
seconds_for() {  # <wanted> <least>
  [ "$budget" -gt 0 ] || { echo "$1"; return 0; }
  local left=$((budget - (SECONDS - started) - 10))
  [ "$left" -ge "$2" ] || { echo "$((left < 0 ? 0 : left))"; return 1; }
  echo $((left < $1 ? left : $1))
}
not_run() {  # <step> <seconds left>
  say "$1: NOT RUN: ${2} s of the budget left"
  status=1
}
# timeout's exit status when it stopped the command.
stopped() {  # <status> <what> <seconds>
  if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then say "  $2: stopped after $3 s (budget)"; fi
}
# The device tool brings back at most 8 files from $OUT: the logs are written beside it
# and travel as one archive, remade after every step.
logs=$(mktemp -d)
pack() {
  if [ -n "${OUT:-}" ]; then
    tar -czf "$out/gpu-check-logs.tar.gz" -C "$logs" .
  else
    cp -a "$logs"/. "$out"/
  fi
}
# A step that found "no GPU" on a machine that has one failed, whatever its status.
has_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
gpu_missing() {  # <log>
  if [ "$has_gpu" -gt 0 ] && grep -qE 'skipped: no GPU|SKIPPED .*needs a GPU' "$1"; then
    say "  FAILED: $(basename "$1") reports no GPU, but nvidia-smi lists one"
    status=1
  fi
}

# The copy on a device machine has no .git: ci/device-prepare.sh recorded the commit.
commit=$(git rev-parse --short HEAD 2>/dev/null || cat build/COMMIT 2>/dev/null || echo '?')
say "== gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit"
say "$(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1)"

# libaccord links libnccl.so.2, the trainer also libcudnn.so.9 and libcublas: found on
# the build machine under the CUDA toolkit. Here they may live elsewhere: the toolkit,
# the system, or PyTorch's nvidia-* wheels.
find_library_dir() {  # <soname> <python module of the wheel that carries it>
  local candidate
  for candidate in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu \
      "$(python3 -c "import $2, os; print(os.path.join(list($2.__path__)[0], 'lib'))" 2>/dev/null)"; do
    if [ -n "$candidate" ] && [ -e "$candidate/$1" ]; then echo "$candidate"; return; fi
  done
  dirname "$(find / -name "$1" -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null
}
for binary in build/libaccord.so build/examples/resnet/accord-resnet; do
  [ -e "$binary" ] || continue
  for lib in $(ldd "$binary" | awk '/=> not found/ {print $1}'); do
    case $lib in
      libnccl*) module=nvidia.nccl ;;
      libcudnn*) module=nvidia.cudnn ;;
      libcublasLt*) module=nvidia.cublas ;;
      libcublas*) module=nvidia.cublas ;;
      *) continue ;;
    esac
    dir=$(find_library_dir "$lib" "$module")
    if [ -n "$dir" ] && [ -e "$dir/$lib" ]; then export LD_LIBRARY_PATH=$dir:${LD_LIBRARY_PATH:-}; fi
  done
done
say "NCCL: $(ldd build/libaccord.so | awk '/libnccl/ {print $3}')"
if ldd build/libaccord.so | grep -q 'not found'; then
  say "FAILED: libaccord cannot load here:"
  ldd build/libaccord.so | grep 'not found' | tee -a "$summary"
  exit 1
fi

# 1. The GPU tests: kernels, device collectives, errors and the cuDNN layers (tests), and
#    whole accord-resnet runs on the GPU (trainer-tests: those labelled trainer too);
#    accord.torch on CUDA tensors (python) runs beside them.
python_pid=
if wants python; then
  if t=$(seconds_for 300 60); then
    (timeout -k 10 "$t" env OUT="$logs/python" bash ci/device-python.sh test_cuda.py test_errors.py \
       test_sharded.py::test_on_the_gpu_as_on_the_cpu test_sharded_state.py::test_checkpoint_on_the_gpu \
       test_sharded_scaler.py::test_grad_scaler_on_the_gpu \
       test_adasum.py::test_cuda_tensors_as_on_the_cpu \
       > "$logs/python-cuda.log" 2>&1; echo $? > "$logs/python.status") &
    python_pid=$!
    python_seconds=$t
  else
    not_run python "$t"
  fi
fi
labels=()
if wants tests && wants trainer-tests; then labels=(-L gpu)
elif wants tests; then labels=(-L gpu -LE trainer)
elif wants trainer-tests; then labels=(-L gpu -L trainer)
fi
[ ${#labels[@]} -gt 0 ] && [ -n "${ACCORD_GPU_TESTS_MATCHING:-}" ] && labels+=(-R "$ACCORD_GPU_TESTS_MATCHING")
# One CTest run of the GPU tests: its log and JUnit file under <name>, its summary lines.
run_tests() {  # <name> <seconds> <ctest selection...>
  local name=$1 t=$2 rc
  shift 2
  local extra=()  # CTest 3.21+ also writes JUnit XML
  ctest --help 2>/dev/null | grep -q -- --output-junit && extra=(--output-junit "$logs/$name.xml")
  # Passing tests' output is kept whole in the JUnit file (CTest keeps 1 KiB by
  # default): the fault tests' timing lines come after their stdout.
  ctest --help 2>/dev/null | grep -q -- --test-output-size-passed &&
    extra+=(--test-output-size-passed 65536)
  # CTest itself stops the tests still running shortly before the limit, so that its
  # summary and the JUnit file are still written (its stop time is a time of day: not
  # when that would be past midnight).
  if [ "$(date -d "+$t sec" +%j)" = "$(date +%j)" ]; then
    extra+=(--stop-time "$(date -d "+$((t - 15)) sec" +%H:%M:%S)")
  fi
  timeout -k 10 "$t" ctest --test-dir build "$@" -j "$test_jobs" --output-on-failure \
      --timeout "${ACCORD_GPU_TEST_TIMEOUT:-240}" "${extra[@]}" > "$logs/$name.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  say "$name ($*, -j $test_jobs):  $(grep -E 'tests passed|tests failed|No tests were found' "$logs/$name.log" | tail -1)"
  stopped $rc "$name" "$t"
  # CTest's own stop at the budget marks the tests it ended "Timeout", as it would a
  # hung one: say which it was.
  grep -q 'The stop time has been passed' "$logs/$name.log" &&
    say "  $name: CTest stopped at the budget; a test marked Timeout below may only have been cut short"
  grep -E '\((Failed|Timeout|Not Run|Skipped)\)|\*\*\*(Failed|Timeout)' "$logs/$name.log" |
    sed 's/^/  /' | tee -a "$summary"
  # Each fault test's bound, measured (its marker lines: who saw the fault, how soon).
  cat "$logs/$name.xml" "$logs/$name.log" 2>/dev/null | grep -oE 'DEVICE-FAULT-[A-Z-]+ by rank [0-9]+: [^&<]*' |
    sort -u | cut -c1-240 | sed 's/^/  /' | tee -a "$summary"
  gpu_missing "$logs/$name.log"
}
if [ ${#labels[@]} -gt 0 ]; then
  # Under a budget the tests get a little over half of it, the benchmarks the rest; all
  # of it where no step follows them (the Python suite runs beside them).
  share=$((budget * 55 / 100))
  wants bench || wants average || wants trainer || wants profile || wants mpi || share=$budget
  if t=$(seconds_for $((budget > 0 ? share : 7200)) 60); then
    if [ -n "${ACCORD_GPU_TESTS_FIRST:-}" ]; then
      # The tests that matter most first, with all the time if they need it; the
      # others then get what is left.
      tests_started=$SECONDS
      run_tests gpu-tests-first "$t" "${labels[@]}" -R "$ACCORD_GPU_TESTS_FIRST"
      pack
      rest=$((t - (SECONDS - tests_started)))
      if [ "$rest" -ge 45 ]; then
        run_tests gpu-tests-rest "$rest" "${labels[@]}" -E "$ACCORD_GPU_TESTS_FIRST"
      else
        not_run "gpu tests after the first ($ACCORD_GPU_TESTS_FIRST)" "$rest"
      fi
    else
      run_tests gpu-tests "$t" "${labels[@]}"
    fi
  else
    not_run "gpu tests" "$t"
  fi
  pack
fi
if [ -n "$python_pid" ]; then
  wait "$python_pid"
  rc=$(cat "$logs/python.status" 2>/dev/null)
  [[ "$rc" =~ ^[0-9]+$ ]] || rc=1
  [ "$rc" -eq 0 ] || status=1
  say "python (CUDA tensors):"
  grep -E '^== ci/device-python.sh|[0-9]+ (passed|failed)' "$logs/python-cuda.log" | sed 's/ in [0-9.]*s$//' | uniq | sed 's/^/  /' |
    tee -a "$summary"
  stopped "$rc" python "$python_seconds"
  gpu_missing "$logs/python-cuda.log"
  pack
fi

# 2. The device benchmarks: one rank per GPU of this machine.
if wants bench; then
  if t=$(seconds_for 60 30); then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    [ "$gpus" -ge 1 ] || gpus=1
    timeout -k 10 "$t" mpirun -np "$gpus" --allow-run-as-root --bind-to none \
        build/tools/accord-bench --device cuda --max-bytes 256M --csv "$logs/bench-cuda.csv" \
        > "$logs/bench-cuda.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    say "bench ($gpus rank(s)):"
    stopped $rc bench "$t"
    grep -E 'latency_cuda|resnet50_cuda|submitting the|submission_call' "$logs/bench-cuda.log" | sed 's/^ */  /' | tee -a "$summary"
    grep -E '^ +[0-9]+ ' "$logs/bench-cuda.log" | awk '$1 == 4096 || $1 == 1048576 || $1 == 67108864 || $1 == 268435456' |
      sed 's/^/  sweep /' | tee -a "$summary"
  else
    not_run bench "$t"
  fi
  pack
fi

# 2b. Average on NCCL: raw ncclAvg against Accord's, in time and error, with 2-4 ranks
#     sharing the GPUs where there are fewer (ci/nccl-one-gpu.sh): 3 ranks is where the
#     two differ, up to 64 MiB; 2 and 4 (powers of two) to 4 MiB; and one rank with NCCL
#     all the same (ACCORD_NCCL=2), where nothing crosses a socket: the cost of the
#     scaling pass that a sum divided afterwards adds, on the GPU alone.
if wants average; then
  for run in 3:64M 4:4M 2:4M 1:64M; do
    np=${run%:*} max=${run#*:}
    nccl=1
    [ "$np" -gt 1 ] || nccl=2
    if t=$(seconds_for 40 20); then
      ACCORD_NCCL=$nccl timeout -k 10 "$t" mpirun -np "$np" --allow-run-as-root --oversubscribe --bind-to none \
          bash ci/nccl-one-gpu.sh build/tools/accord-bench --device cuda --average-only \
          --max-bytes "$max" --iters 5 --warmup 2 > "$logs/bench-average-np$np.log" 2>&1
      rc=$?
      [ $rc -eq 0 ] || status=1
      say "average on NCCL, $np ranks:"
      stopped $rc "average study" "$t"
      grep -E '^ +(float32|bfloat16) ' "$logs/bench-average-np$np.log" | sed 's/^/  /' | tee -a "$summary"
    else
      not_run "average study ($np ranks)" "$t"
    fi
  done
  pack
fi

# 3. The trainer on the GPU against PyTorch (issue figures: img/s, % of peak): the
#    measurements that fit, most telling first, leaving the profile its time.
profile_seconds=0
wants profile && profile_seconds=60
if wants trainer && [ -x build/examples/resnet/accord-resnet ]; then
  if t=$(seconds_for $((480 + profile_seconds)) $((60 + profile_seconds))); then
    t=$((t - profile_seconds))
    timeout -k 10 "$t" python3 tools/resnet_gpu_bench.py \
        --runs "${ACCORD_GPU_BENCH_RUNS:-resnet50:128,resnet50:256,resnet101:128,resnet152:128}" \
        --compile "${ACCORD_GPU_BENCH_COMPILE:-both}" --skip "${ACCORD_GPU_BENCH_SKIP:-}" --steps 20 --warmup 5 --budget $((t - 15)) \
        --json "$logs/resnet-gpu.json" > "$logs/resnet-gpu.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    say "trainer vs PyTorch:"
    stopped $rc "trainer benchmark" "$t"
    # The closing table (or, cut short, what was measured).
    if grep -q '^== img/s by model and batch' "$logs/resnet-gpu.log"; then
      sed -n '/^== img\/s by model and batch/,$p' "$logs/resnet-gpu.log" | sed 's/^/  /' |
        tee -a "$summary"
    else
      sed 's/^/  /' "$logs/resnet-gpu.log" | tail -24 | tee -a "$summary"
    fi
  else
    not_run "trainer benchmark" "$t"
  fi
  pack
fi

# 4. Where the trainer's GPU and host time go, by layer kind (ResNet-50, batch 256, at
#    which the GPU rather than the host's launches bounds a step launched layer by layer,
#    so that the GPU times, taken between events around each call, hold no waits for
#    the host; bf16 unless ACCORD_GPU_PROFILE_PRECISION says otherwise), with the
#    convolution algorithms the benchmark's runs use (--cudnn-search);
#    ACCORD_GPU_PROFILE_FLAGS adds trainer flags (--cudnn-fusion, say). Three epochs of
#    20 steps (60); the profile leaves out the first, which pays the one-time costs
#    (algorithm searches, kernels loaded, buffers grown).
profile_precision=${ACCORD_GPU_PROFILE_PRECISION:-bf16}
if wants profile && [ -x build/examples/resnet/accord-resnet ]; then
  if t=$(seconds_for 180 30); then
    # shellcheck disable=SC2086  # a list of flags
    timeout -k 10 "$t" build/examples/resnet/accord-resnet --device cuda --precision "$profile_precision" --model resnet50 \
        --width 1 --stem imagenet --dataset synthetic --image-size 224 --classes 1000 \
        --batch-size 256 --steps 60 --synthetic-size 5120 --epochs 3 --no-eval --no-progress \
        --cudnn-search ${ACCORD_GPU_PROFILE_FLAGS:-} --gpu-profile > "$logs/gpu-profile.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    say "trainer GPU profile (ResNet-50, $profile_precision, batch 256, 60 steps${ACCORD_GPU_PROFILE_FLAGS:+, $ACCORD_GPU_PROFILE_FLAGS}):"
    stopped $rc profile "$t"
    sed -n '/profiled (the first step\|GPU time by kind/,$p' "$logs/gpu-profile.log" | sed 's/^/  /' |
      tee -a "$summary"
  else
    not_run profile "$t"
  fi
  pack
fi

# 5. The host collectives of the same build (CI runs them too, without a GPU).
if wants mpi; then
  if t=$(seconds_for 240 30); then
    timeout -k 10 "$t" ctest --test-dir build -R 'mpi\.(allreduce|allgather|broadcast|errors)\.' \
        -j "$test_jobs" --timeout 240 > "$logs/cpu-tests.log" 2>&1 || status=1
    say "mpi tests:  $(grep -E 'tests passed|tests failed' "$logs/cpu-tests.log" | tail -1)"
  else
    not_run "mpi tests" "$t"
  fi
  pack
fi
# 6. The sharded optimizer on this machine's CPU cores (issue 37): 2 ranks, half the
#    cores each, ResNet-50 and the 110 M-parameter transformer, every variant
#    interleaved in one run. accord.torch is built for this machine's python3 first
#    (ci/device-python.sh, unless its python step did it already). ACCORD_GPU_SHARDED_ARGS
#    replaces the benchmark's arguments (default: --rounds 6). A second run, ResNet-50
#    alone with one thread fewer per rank, follows where the budget has room.
if wants sharded; then
  if t=$(seconds_for 300 90); then
    sharded_started=$SECONDS
    site_ok=1
    ls /tmp/accord-python/accord/_core*.so > /dev/null 2>&1 ||
      ACCORD_DEVICE_PYTHON_BUILD_ONLY=1 OUT="$logs/python-build" timeout -k 5 "$t" \
        bash ci/device-python.sh > "$logs/sharded-build.log" 2>&1 || site_ok=0
    # Then ResNet-50 again with a core per rank left to the collectives' thread (every
    # variant alike), where time is left: how much the runtime's copies, on cores the
    # compute also wants, weigh in the first run.
    half=$((cores / 2 > 0 ? cores / 2 : 1))
    runs=("$half|${ACCORD_GPU_SHARDED_ARGS:---rounds 6}")
    [ "$half" -lt 2 ] || runs+=("$((half - 1))|--models resnet50 --rounds 6")
    for run in "${runs[@]}"; do
      threads=${run%%|*} args=${run#*|}
      t=$((t - (SECONDS - sharded_started)))
      sharded_started=$SECONDS
      say "sharded optimizer (CPU, 2 ranks x $threads threads, $args):"
      if [ $site_ok = 1 ] && [ "$t" -ge 30 ]; then
        # shellcheck disable=SC2086  # a list of arguments
        (cd examples/python && PYTHONPATH=/tmp/accord-python timeout -k 10 "$t" \
          mpirun -np 2 --allow-run-as-root --bind-to none python3 bench_sharded.py \
            --threads "$threads" $args) > "$logs/bench-sharded-$threads.log" 2>&1
        rc=$?
        [ $rc -eq 0 ] || status=1
        stopped $rc "sharded optimizer benchmark" "$t"
        grep -vE '^\s*$|Warning|warn\(' "$logs/bench-sharded-$threads.log" | tail -40 |
          sed 's/^/  /' | tee -a "$summary"
      elif [ $site_ok = 1 ]; then
        [ "$threads" = "$half" ] && status=1
        say "  NOT RUN: $t s of the budget left"
      else
        status=1
        say "  FAILED: accord.torch not built for this python3 ($t s left): $(tail -2 "$logs/sharded-build.log" | tr '\n' ' ')"
        break
      fi
    done
  else
    not_run "sharded optimizer benchmark" "$t"
  fi
  pack
fi
outcome='all passed'
[ $status -eq 0 ] || outcome='FAILURES or steps not run, see the logs'
within=$([ "$budget" -gt 0 ] && echo ", budget $budget s")
say "== gpu-check (${steps[*]}$within, $((SECONDS - started)) s): $outcome (logs in $out)"
pack
rm -rf "$logs"
exit $status
