#!/usr/bin/env bash
# The Python layer's overhead: a 4 KiB allreduce from C++ (accord-bench's latency case)
# and from Python (tools/python_latency.py), alternately, each run on 2 ranks.
#   bash tools/python_overhead.sh [rounds] [python]
# Needs a build (bash ci/build.sh); python defaults to Debian's python3.
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
python=${2:-/usr/bin/python3}
build_dir=${ACCORD_BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHONPATH=$PWD/$build_dir/python${PYTHONPATH:+:$PYTHONPATH}
run() { mpirun -np 2 --bind-to none "$@"; }
for round in $(seq "$rounds"); do
  echo "round $round"
  run "$build_dir/tools/accord-bench" --min-bytes 4K --max-bytes 4K --iters 1 --warmup 0 \
      --latency-iters 2000 --resnet-steps 1 | grep -E '^  latency' |
      sed 's/^  latency  accord/  c++      /'
  run "$python" tools/python_latency.py --iters 2000
done
