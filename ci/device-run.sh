#!/usr/bin/env bash
# Runs a command on a lent GPU machine with Debian's libraries that ci/device-prepare.sh
# downloaded into .debs/: unpacks them into a folder of their own (never into /), points
# PATH, LD_LIBRARY_PATH and OPAL_PREFIX at it, and makes the build tree's absolute paths
# (CTest's) valid. Example, from the repository root on that machine:
#   bash ci/device-run.sh ctest --test-dir build -L mpi
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$root/.debs" ] || { echo "ci/device-run.sh: no .debs/: run ci/device-prepare.sh and carry .debs" >&2; exit 2; }
# A GPU build staged by ci/device-prepare.sh (ACCORD_DEVICE_TARGETS=gpu) arrives as
# build-device/: it becomes build-gpu/ (the folder its CTest files name) and build/,
# replacing what an earlier call on a warm machine left there (a build/ that is a real
# folder, as on the build machine, is never touched).
if [ -d "$root/build-device" ] && { [ ! -e "$root/build" ] || [ -L "$root/build" ]; }; then
  rm -rf "$root/build-gpu"
  rm -f "$root/build"
  mv "$root/build-device" "$root/build-gpu"
  ln -s build-gpu "$root/build"
fi
prefix=${ACCORD_DEVICE_PREFIX:-/tmp/accord-debs}
if [ ! -f "$prefix/.unpacked" ]; then
  mkdir -p "$prefix"
  for deb in "$root"/.debs/*.deb; do dpkg -x "$deb" "$prefix"; done
  # Debian names these through update-alternatives, which dpkg -x does not run.
  ln -sf orterun "$prefix/usr/bin/mpirun"
  ln -sf orterun "$prefix/usr/bin/mpiexec"
  mkdir -p "$prefix/lib/x86_64-linux-gnu"
  for psm in "$prefix"/usr/lib/libpsm1/libpsm_infinipath.so.1.*; do
    [ -e "$psm" ] && ln -sf "$psm" "$prefix/lib/x86_64-linux-gnu/libpsm_infinipath.so.1"
  done
  touch "$prefix/.unpacked"
fi
lib=$prefix/usr/lib/x86_64-linux-gnu
export PATH=$prefix/usr/bin:$PATH
# A few packages (libnl's) still install under /lib rather than /usr/lib.
export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib:$lib/libfabric:$prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
# Open MPI and PMIx find their plugins and help files relative to these (the help
# files under OPAL_DATADIR/openmpi: without them a rank's abort prints no reason).
export OPAL_PREFIX=$prefix/usr
export OPAL_LIBDIR=$lib/openmpi/lib
export OPAL_DATADIR=$prefix/usr/share
# Debian's settings, as where the tests run in CI: no warnings about unused network
# components, and none of the fabric transports (ofi, openib, ucx) that its build of
# Open MPI leaves out by default.
export OPAL_SYSCONFDIR=$prefix/etc/openmpi
export PMIX_INSTALL_PREFIX=$lib/pmix2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The slice of Fashion-MNIST ci/device-prepare.sh staged: the trainer's tests read it.
# (Not an ACCORD_ name: the runtime warns about those it does not know.)
if [ -d "$root/.data/fashion-mnist" ]; then
  export TEST_FASHION_MNIST_DIR=$root/.data/fashion-mnist
fi
# CTest files name executables by the absolute path of the build machine's checkout,
# and that machine's mpiexec and cmake: make the path valid here and use the unpacked
# mpiexec (the same Open MPI, so this is harmless where the build was made) and the
# cmake on PATH.
build_root=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$root/build/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$build_root" ] && [ ! -e "$build_root" ]; then
  mkdir -p "$(dirname "$build_root")" && ln -s "$root" "$build_root"
fi
cmake_here=$(command -v cmake || echo /usr/bin/cmake)
# build/ may be a link (to build-gpu/): the trailing slash makes find go through it.
# mpiexec is named alone ("/usr/bin/mpiexec") or as the head of a list
# ("-DMPIRUN=/usr/bin/mpiexec;--allow-run-as-root;...", the trainer's tests).
find "$root/build/" -name CTestTestfile.cmake -print0 2>/dev/null |
  xargs -0 -r sed -i -e "s#\\([\"=]\\)/usr/bin/mpiexec\\([\";]\\)#\\1$prefix/usr/bin/mpiexec\\2#g" \
                     -e "s#\"/usr/bin/cmake\"#\"$cmake_here\"#g"
exec "$@"
