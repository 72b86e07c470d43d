#!/usr/bin/env bash
# The GPU check, in one command on a machine with a GPU: the GPU build's tests
# (ctest -L gpu: CUDA kernels, every device collective with NCCL on one rank and staged
# through MPI on one and two ranks, the error paths), the host MPI tests of the same
# build, and the device benchmarks (accord-bench --device cuda). Results go to $OUT
# (the device tool's output folder; ./gpu-check-out elsewhere), and a summary is
# printed last.
#
# On the build machine (no GPU needed), then through the device tool:
#   ACCORD_DEVICE_TARGETS=gpu ACCORD_DEVICE_SLIM=1 bash ci/device-prepare.sh
#   run: bash ci/device-run.sh bash ci/gpu-check.sh        (carry: build, .debs)
#
# Every step runs even when one before it failed; the exit status is non-zero when any
# test failed or the benchmark did not finish.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0

say "== gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
say "$(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1)"

# libaccord links libnccl.so.2, found on the build machine under the CUDA toolkit.
# Here it may live elsewhere: the toolkit, the system, or PyTorch's nvidia-nccl wheel.
if ldd build/libaccord.so | grep -q 'libnccl.so.2 => not found'; then
  nccl_dir=""
  for candidate in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu \
      "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)"; do
    if [ -n "$candidate" ] && [ -e "$candidate/libnccl.so.2" ]; then nccl_dir=$candidate; break; fi
  done
  if [ -z "$nccl_dir" ]; then
    nccl_dir=$(dirname "$(find / -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null)
  fi
  if [ -n "$nccl_dir" ] && [ -e "$nccl_dir/libnccl.so.2" ]; then
    export LD_LIBRARY_PATH=$nccl_dir:${LD_LIBRARY_PATH:-}
  fi
fi
say "NCCL: $(ldd build/libaccord.so | awk '/libnccl/ {print $3}')"
if ldd build/libaccord.so | grep -q 'not found'; then
  say "FAILED: libaccord cannot load here:"
  ldd build/libaccord.so | grep 'not found' | tee -a "$summary"
  exit 1
fi

# 1. The GPU tests (kernels, device collectives, errors).
junit=()  # CTest 3.21+ also writes JUnit XML
ctest --help 2>/dev/null | grep -q -- --output-junit && junit=(--output-junit "$out/gpu-tests.xml")
ctest --test-dir build -L gpu --output-on-failure --timeout 240 "${junit[@]}" \
      > "$out/gpu-tests.log" 2>&1 || status=1
say "gpu tests:  $(grep -E 'tests passed|tests failed' "$out/gpu-tests.log" | tail -1)"
grep -E '\((Failed|Timeout|Not Run|Skipped)\)|\*\*\*(Failed|Timeout)' "$out/gpu-tests.log" |
  sed 's/^/  /' | tee -a "$summary"

# 2. The host collectives of the same build (the runtime changes touch them too).
ctest --test-dir build -R 'mpi\.(allreduce|allgather|broadcast|errors)\.' --timeout 240 \
      > "$out/cpu-tests.log" 2>&1 || status=1
say "mpi tests:  $(grep -E 'tests passed|tests failed' "$out/cpu-tests.log" | tail -1)"

# 3. The device benchmarks: one rank per GPU of this machine.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 1 ] || gpus=1
timeout 300 mpirun -np "$gpus" --allow-run-as-root --bind-to none \
    build/tools/accord-bench --device cuda --max-bytes 256M --csv "$out/bench-cuda.csv" \
    > "$out/bench-cuda.log" 2>&1 || status=1
say "bench ($gpus rank(s)):"
grep -E 'latency_cuda|resnet50_cuda' "$out/bench-cuda.log" | sed 's/^ */  /' | tee -a "$summary"
grep -E '^ +[0-9]+ ' "$out/bench-cuda.log" | awk '$1 == 4096 || $1 == 1048576 || $1 == 67108864 || $1 == 268435456' |
  sed 's/^/  sweep /' | tee -a "$summary"
say "== gpu-check: $([ $status -eq 0 ] && echo 'all passed' || echo 'FAILURES, see the logs') (logs in $out)"
exit $status
