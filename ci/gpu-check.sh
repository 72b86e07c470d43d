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
#   run: bash ci/device-run.sh bash ci/gpu-check.sh        (carry: build-device, .debs)
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

# 1. The GPU tests (kernels, device collectives, errors).
junit=()  # CTest 3.21+ also writes JUnit XML
ctest --help 2>/dev/null | grep -q -- --output-junit && junit=(--output-junit "$out/gpu-tests.xml")
ctest --test-dir build -L gpu --output-on-failure --timeout "${ACCORD_GPU_TEST_TIMEOUT:-240}" "${junit[@]}" \
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
# 4. accord.torch on CUDA tensors, against this machine's PyTorch (one rank).
timeout 300 bash ci/device-python.sh test_cuda.py test_errors.py \
    > "$out/python-cuda.log" 2>&1 || status=1
say "python (CUDA tensors): $(grep -E '[0-9]+ (passed|failed)' "$out/python-cuda.log" | tail -1)"

# 5. The trainer on the GPU against PyTorch (issue figures: img/s, % of peak).
if [ -x build/examples/resnet/accord-resnet ]; then
  timeout 400 python3 tools/resnet_gpu_bench.py --runs "${ACCORD_GPU_BENCH_RUNS:-resnet50:128}" \
      --compile off --steps 20 --warmup 5 --json "$out/resnet-gpu.json" \
      > "$out/resnet-gpu.log" 2>&1 || status=1
  say "trainer vs PyTorch:"
  sed 's/^/  /' "$out/resnet-gpu.log" | tail -8 | tee -a "$summary"
fi
# 6. Where the trainer's GPU time goes, by layer kind (ResNet-50, batch 128; bf16 unless
#    ACCORD_GPU_PROFILE_PRECISION says otherwise).
profile_precision=${ACCORD_GPU_PROFILE_PRECISION:-bf16}
if [ -x build/examples/resnet/accord-resnet ]; then
  timeout 180 build/examples/resnet/accord-resnet --device cuda --precision "$profile_precision" --model resnet50 \
      --width 1 --stem imagenet --dataset synthetic --image-size 224 --classes 1000 \
      --batch-size 128 --steps 20 --synthetic-size 2560 --epochs 1 --no-eval --no-progress \
      --gpu-profile > "$out/gpu-profile.log" 2>&1 || status=1
  say "trainer GPU profile (ResNet-50, $profile_precision, batch 128, 20 steps):"
  sed -n '/GPU time by kind/,$p' "$out/gpu-profile.log" | sed 's/^/  /' | tee -a "$summary"
fi
say "== gpu-check: $([ $status -eq 0 ] && echo 'all passed' || echo 'FAILURES, see the logs') (logs in $out)"
# The device tool brings back at most 8 files: there, the logs travel as one archive.
if [ -n "${OUT:-}" ]; then
  (cd "$out" && find . -maxdepth 1 -type f ! -name summary.txt ! -name gpu-check-logs.tar.gz -print0 |
     tar --null -czf gpu-check-logs.tar.gz -T - --remove-files)
fi
exit $status
