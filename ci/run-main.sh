#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the ResNet trainer under
# mpirun -np 2 on Fashion-MNIST (CPU). Extra arguments go to accord-resnet.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
bash ci/build.sh
build_dir=${ACCORD_BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun --oversubscribe --bind-to none -np 2 "$build_dir/examples/resnet/accord-resnet" "$@"
