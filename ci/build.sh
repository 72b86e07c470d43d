#!/usr/bin/env bash
# Configures and builds everything into ${ACCORD_BUILD_DIR:-build} (incremental).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${ACCORD_BUILD_DIR:-build}
jobs=${ACCORD_JOBS:-$(nproc)}
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$build_dir" -j "$jobs"
