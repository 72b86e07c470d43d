#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the ResNet trainer under
# mpirun -np 2 on Fashion-MNIST (CPU). Extra arguments go to accord-resnet.
#
#   bash ci/run-main.sh [accord-resnet arguments...]
#   bash ci/run-main.sh --epochs 1
#
# accord-resnet's own flags: build/examples/resnet/accord-resnet --help (once built).
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
bash ci/build.sh
build_dir=${ACCORD_BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun --oversubscribe --bind-to none -np 2 "$build_dir/examples/resnet/accord-resnet" "$@"
