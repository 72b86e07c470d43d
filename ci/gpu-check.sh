#!/usr/bin/env bash
# The GPU check, in one command on a machine with a GPU: the GPU build's tests
# (ctest -L gpu: CUDA kernels, every device collective with NCCL on one rank and staged
# through MPI on one and two ranks, the error paths, the trainer's cuDNN layers), the
# host MPI tests of the same build, the device benchmarks (accord-bench --device cuda),
# accord.torch on CUDA tensors (ci/device-python.sh), and the trainer on the GPU against
# PyTorch (tools/resnet_gpu_bench.py), and the trainer's GPU time by layer kind
# (--gpu-profile). Results go to $OUT
# (the device tool's output folder; ./gpu-check-out elsewhere), and a summary is
# printed last.
#
# On the build machine (no GPU needed), then through the device tool:
#   ACCORD_DEVICE_TARGETS=gpu bash ci/device-prepare.sh
#   run: bash ci/device-run.sh bash ci/gpu-check.sh        (carry: build-device, .debs, .data)
#
#   bash ci/gpu-check.sh [tests] [trainer-tests] [mpi] [bench] [python] [trainer] [profile]
# runs the steps named (all of them when none is), so that a device call can stay under
# its time limit: e.g. `tests` in one call, `trainer-tests` in the next (the GPU tests
# labelled trainer: whole accord-resnet runs), the rest after.
#
# Every step runs even when one before it failed; the exit status is non-zero when any
# test failed, the benchmark did not finish, or a GPU step said "no GPU" on a machine
# that has one. The logs are archived after every step, so a call cut off at its limit
# still brings back what finished.
set -uo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests trainer-tests mpi bench python trainer profile)
for step in "${steps[@]}"; do
  case $step in
    tests | trainer-tests | mpi | bench | python | trainer | profile) ;;
    *) echo "ci/gpu-check.sh: unknown step '$step' (expected tests, trainer-tests, mpi, bench," \
            "python, trainer or profile)" >&2
       exit 2 ;;
  esac
done
wants() { [[ " ${steps[*]} " == *" $1 "* ]]; }
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0
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

say "== gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
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
#    whole accord-resnet runs on the GPU (trainer-tests: those labelled trainer too).
gpu_tests() {  # <log name> <ctest label arguments...>
  local name=$1
  shift
  local junit=()  # CTest 3.21+ also writes JUnit XML
  ctest --help 2>/dev/null | grep -q -- --output-junit && junit=(--output-junit "$logs/$name.xml")
  ctest --test-dir build "$@" --output-on-failure --timeout "${ACCORD_GPU_TEST_TIMEOUT:-240}" \
        "${junit[@]}" > "$logs/$name.log" 2>&1 || status=1
  say "$name:  $(grep -E 'tests passed|tests failed' "$logs/$name.log" | tail -1)"
  grep -E '\((Failed|Timeout|Not Run|Skipped)\)|\*\*\*(Failed|Timeout)' "$logs/$name.log" |
    sed 's/^/  /' | tee -a "$summary"
  gpu_missing "$logs/$name.log"
  pack
}
if wants tests; then gpu_tests gpu-tests -L gpu -LE trainer; fi
if wants trainer-tests; then gpu_tests gpu-trainer-tests -L gpu -L trainer; fi

# 2. The host collectives of the same build (the runtime changes touch them too).
if wants mpi; then
  ctest --test-dir build -R 'mpi\.(allreduce|allgather|broadcast|errors)\.' --timeout 240 \
        > "$logs/cpu-tests.log" 2>&1 || status=1
  say "mpi tests:  $(grep -E 'tests passed|tests failed' "$logs/cpu-tests.log" | tail -1)"
  pack
fi

# 3. The device benchmarks: one rank per GPU of this machine.
if wants bench; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$gpus" -ge 1 ] || gpus=1
  timeout 300 mpirun -np "$gpus" --allow-run-as-root --bind-to none \
      build/tools/accord-bench --device cuda --max-bytes 256M --csv "$logs/bench-cuda.csv" \
      > "$logs/bench-cuda.log" 2>&1 || status=1
  say "bench ($gpus rank(s)):"
  grep -E 'latency_cuda|resnet50_cuda' "$logs/bench-cuda.log" | sed 's/^ */  /' | tee -a "$summary"
  grep -E '^ +[0-9]+ ' "$logs/bench-cuda.log" | awk '$1 == 4096 || $1 == 1048576 || $1 == 67108864 || $1 == 268435456' |
    sed 's/^/  sweep /' | tee -a "$summary"
  pack
fi

# 4. accord.torch on CUDA tensors, against this machine's PyTorch (one rank).
if wants python; then
  timeout 300 bash ci/device-python.sh test_cuda.py test_errors.py \
      > "$logs/python-cuda.log" 2>&1 || status=1
  say "python (CUDA tensors): $(grep -E '[0-9]+ (passed|failed)' "$logs/python-cuda.log" | tail -1)"
  gpu_missing "$logs/python-cuda.log"
  pack
fi

# 5. The trainer on the GPU against PyTorch (issue figures: img/s, % of peak).
if wants trainer && [ -x build/examples/resnet/accord-resnet ]; then
  timeout 400 python3 tools/resnet_gpu_bench.py --runs "${ACCORD_GPU_BENCH_RUNS:-resnet50:128}" \
      --compile off --steps 20 --warmup 5 --json "$logs/resnet-gpu.json" \
      > "$logs/resnet-gpu.log" 2>&1 || status=1
  say "trainer vs PyTorch:"
  sed 's/^/  /' "$logs/resnet-gpu.log" | tail -8 | tee -a "$summary"
  pack
fi

# 6. Where the trainer's GPU time goes, by layer kind (ResNet-50, batch 128; bf16 unless
#    ACCORD_GPU_PROFILE_PRECISION says otherwise).
profile_precision=${ACCORD_GPU_PROFILE_PRECISION:-bf16}
if wants profile && [ -x build/examples/resnet/accord-resnet ]; then
  timeout 180 build/examples/resnet/accord-resnet --device cuda --precision "$profile_precision" --model resnet50 \
      --width 1 --stem imagenet --dataset synthetic --image-size 224 --classes 1000 \
      --batch-size 128 --steps 20 --synthetic-size 2560 --epochs 1 --no-eval --no-progress \
      --gpu-profile > "$logs/gpu-profile.log" 2>&1 || status=1
  say "trainer GPU profile (ResNet-50, $profile_precision, batch 128, 20 steps):"
  sed -n '/GPU time by kind/,$p' "$logs/gpu-profile.log" | sed 's/^/  /' | tee -a "$summary"
  pack
fi
say "== gpu-check (${steps[*]}): $([ $status -eq 0 ] && echo 'all passed' || echo 'FAILURES, see the logs') (logs in $out)"
pack
rm -rf "$logs"
exit $status
