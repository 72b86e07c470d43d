#!/usr/bin/env bash
# The Python suite on a lent GPU machine, against that machine's own PyTorch (its
# python3): compiles accord._core there, with its compiler and pybind11, against the
# carried build's libaccord, assembles the package in a folder of its own, and runs
# tests/bindings/python under mpirun on one rank, test_cuda.py included, then on two ranks
# sharing the GPU through NCCL and through MPI. Logs go to $OUT (./device-python-out
# elsewhere).
#
# On the build machine (no GPU needed), then through the device tool:
#   ACCORD_DEVICE_TARGETS=gpu bash ci/device-prepare.sh
#   run: bash ci/device-run.sh bash ci/device-python.sh [pytest arguments]
#                                                      (carry: build-device, .debs)
# With ACCORD_DEVICE_PYTHON_BUILD_ONLY=1 it stops once the package is assembled (in
# /tmp/accord-python, for PYTHONPATH: the sharded optimizer's benchmark in
# ci/gpu-check.sh uses it so).
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/device-python-out}
mkdir -p "$out"
py=${ACCORD_DEVICE_PYTHON:-python3}
prefix=${ACCORD_DEVICE_PREFIX:-/tmp/accord-debs}
mpi_include=$prefix/usr/lib/x86_64-linux-gnu/openmpi/include
[ -f "$mpi_include/mpi.h" ] || { echo "ci/device-python.sh: no mpi.h under $prefix: run it through ci/device-run.sh with .debs from ci/device-prepare.sh" >&2; exit 2; }

site=/tmp/accord-python
rm -rf "$site" && mkdir -p "$site"
cp -r bindings/python/accord "$site/"
ext=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
pybind=$("$py" -c 'import pybind11; print(pybind11.get_include())')
echo "ci/device-python.sh: $("$py" --version), torch $("$py" -c 'import torch; print(torch.__version__, torch.cuda.is_available())')"
# The same sources and flags as bindings/CMakeLists.txt's accord_python, each source
# compiled on its own core (pybind11 compiles slowly), then linked.
objects=$(mktemp -d)
pids=()
for src in module errors runtime collectives pending buffer dlpack; do
  "${CXX:-c++}" -O2 -std=c++20 -fPIC -fvisibility=hidden -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX \
    -I runtime/include -I "$include" -I "$pybind" -I "$mpi_include" \
    -c "bindings/src/$src.cc" -o "$objects/$src.o" > "$objects/$src.log" 2>&1 &
  pids+=($!)
done
compiled=1
for pid in "${pids[@]}"; do wait "$pid" || compiled=0; done
cat "$objects"/*.log > "$out/compile.log"
if [ $compiled = 1 ]; then
  "${CXX:-c++}" -shared "$objects"/*.o -L build -Wl,-rpath,"$PWD/build" -laccord \
    -L "$prefix/usr/lib/x86_64-linux-gnu/openmpi/lib" -lmpi \
    -o "$site/accord/_core$ext" >> "$out/compile.log" 2>&1 || true
fi
cat "$out/compile.log"
rm -rf "$objects"
[ -f "$site/accord/_core$ext" ] || exit 1
[ "${ACCORD_DEVICE_PYTHON_BUILD_ONLY:-0}" = 1 ] && exit 0

root=$PWD
cd tests/bindings/python
set -o pipefail
# One rank, CUDA tensors through NCCL; two ranks sharing the GPU through NCCL, each rank
# a host of its own for NCCL (ci/nccl-one-gpu.sh); and two ranks through MPI staged in
# page-locked memory (ACCORD_NCCL=0). The tests that need two ranks run in the last two,
# the mismatches among them.
status=0
for run in 1:1 2:1 2:0; do
  ranks=${run%:*} nccl=${run#*:}
  wrapper=()
  [ "$ranks" -gt 1 ] && [ "$nccl" = 1 ] && wrapper=(bash "$root/ci/nccl-one-gpu.sh")
  echo "== ci/device-python.sh: $ranks rank(s), ACCORD_NCCL=$nccl${wrapper:+, sharing the GPU through NCCL}"
  PYTHONPATH=$site ACCORD_STALL_SHUTDOWN_TIME=30 ACCORD_NCCL=$nccl \
    mpirun -np "$ranks" --allow-run-as-root --oversubscribe --bind-to none \
    "${wrapper[@]}" "$py" -m pytest --color=no -q -rs -p no:cacheprovider "$@" 2>&1 |
    tee "$out/pytest-np$ranks-nccl$nccl.log" || status=1
done
exit $status
