#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (what CI runs).
#
#   bash ci/test.sh [ctest arguments...]
#   bash ci/test.sh -L python             only the Python tests
#   bash ci/test.sh -R elastic -j 2       the elastic tests, two at a time
#
# The build folder is $ACCORD_BUILD_DIR (default build); ACCORD_JOBS compile jobs.
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh --tests
# The PyTorch 2 environment in which the Python tests also run (made once, then reused).
bash ci/python-env.sh > /dev/null
bash ci/build.sh
build_dir=${ACCORD_BUILD_DIR:-build}
# The multi-rank tests run as root inside containers: let OpenMPI do that.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error "$@"
