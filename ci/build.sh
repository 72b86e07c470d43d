#!/usr/bin/env bash
# Configures and builds everything into ${ACCORD_BUILD_DIR:-build} (incremental).
#
#   bash ci/build.sh [cmake arguments for the first configure...]
#
# ACCORD_JOBS compile jobs (default: every core).
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${ACCORD_BUILD_DIR:-build}
jobs=${ACCORD_JOBS:-$(nproc)}
python_args=()
# The Python bindings are built for Debian's interpreter, the one with Debian's PyTorch
# (and the one ci/python-env.sh makes the PyTorch 2 environment from).
[ -x /usr/bin/python3 ] && python_args=(-DPython_EXECUTABLE=/usr/bin/python3)
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${python_args[@]}" "$@"
fi
cmake --build "$build_dir" -j "$jobs"
