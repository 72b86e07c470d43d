#!/usr/bin/env bash
# Builds the whole suite with a sanitizer and runs it; any sanitizer report fails the
# test that caused it, and so the script.
#
#   bash ci/sanitize.sh [thread|address|all] [ctest arguments...]    (default: all)
#
#   thread   ThreadSanitizer, into build-tsan/: data races, lock-order inversions
#   address  AddressSanitizer + UndefinedBehaviorSanitizer, into build-asan/: out of
#            bounds, use after free, leaks (LeakSanitizer), undefined behaviour
#
# Builds are incremental; -j comes from ACCORD_JOBS (default: nproc).
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
which=${1:-all}
[ $# -gt 0 ] && shift
jobs=${ACCORD_JOBS:-$(nproc)}

case "$which" in
  thread | address) sanitizers=("$which") ;;
  all) sanitizers=(thread address) ;;
  *)
    echo "usage: ci/sanitize.sh [thread|address|all] [ctest arguments...]" >&2
    exit 2
    ;;
esac

# The multi-rank tests run as root inside containers: let Open MPI do that.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Every rank is on this host: shared memory (vader) and self only. The TCP transport
# runs progress threads inside Open MPI, whose uninstrumented synchronization
# ThreadSanitizer cannot see, and is not what these runs test.
export OMPI_MCA_btl=self,vader

# <sanitizer> <build dir> [cmake arguments...]
build() {
  local sanitizer=$1 dir=$2
  shift 2
  # Debian's interpreter, as ci/build.sh picks it: it has what the tools' tests import.
  local python_args=()
  [ -x /usr/bin/python3 ] && python_args=(-DPython_EXECUTABLE=/usr/bin/python3)
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DACCORD_SANITIZE="$sanitizer" "${python_args[@]}" "$@" || return
  elif [ ${#python_args[@]} -gt 0 ]; then
    # A folder configured before with another interpreter (one without matplotlib, say)
    # takes Debian's from now on.
    cmake -S . -B "$dir" "${python_args[@]}" > /dev/null || return
  fi
  cmake --build "$dir" -j "$jobs" || return
}

# <build dir>: fails unless CTest lists the unit tests. They are found by running their
# executable (Catch2's discovery), and one that crashes as it starts under a sanitizer
# leaves no test behind, without a word.
unit_tests_listed() {
  local dir=$1 count
  count=$(ctest --test-dir "$dir" -N -L '^unit$' | sed -n 's/^Total Tests: //p')
  [ "${count:-0}" -gt 0 ] && return
  echo "ci/sanitize.sh: CTest lists no unit test in $dir: $dir/tests/runtime/unit/accord_unit_tests" \
       "and $dir/tests/ops/unit/accord_ops_unit_tests do not start under the sanitizer" \
       "(run them to see why)" >&2
  return 1
}

# <build dir> <sanitizer runtime name>: makes mpirun preload, into every rank, the
# sanitizer's runtime (it must come first), the C++ runtime and ci/no_dlclose.c, which
# keeps Open MPI's plugins loaded so that reports can name their frames. The C++
# runtime matters to ranks that are Python interpreters: python3 does not link it, so
# without it the sanitizer finds no __cxa_throw to intercept when it starts, and the
# first C++ exception ends the process ("real___cxa_throw != 0").
keep_plugins_loaded() {
  local dir=$1 runtime_name=$2 runtime cxx
  cc -shared -fPIC -O2 -o "$dir/libno_dlclose.so" ci/no_dlclose.c || return
  runtime=$(ldd "$dir/tests/runtime/mpi/mpi_test_allreduce" | awk -v n="$runtime_name" '$1 ~ n {print $3}')
  cxx=$(ldd "$dir/tests/runtime/mpi/mpi_test_allreduce" | awk '$1 ~ /^libstdc\+\+/ {print $3}')
  export OMPI_MCA_mca_base_env_list="LD_PRELOAD=${runtime:+$runtime:}${cxx:+$cxx:}$root/$dir/libno_dlclose.so"
}

# ThreadSanitizer sees only the synchronization of instrumented code. Debian's oneTBB
# hands work to its threads and back through atomics inside libtbb.so, so every kernel
# that runs on oneTBB's workers would be reported as a race with the thread that waits
# for it. So oneTBB is built instrumented, from Debian's own source package of the
# installed version (fetched through a private apt configuration: the system's sources
# stay as they are), once, into a cache; sets tbb_prefix.
tbb_for_tsan() {
  local package version cache src build
  package=$(dpkg-query -W -f='${source:Package}' libtbb-dev) || return
  version=$(dpkg-query -W -f='${Version}' libtbb-dev) || return
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/accord
  tbb_prefix=$cache/tbb-tsan-$version
  [ -f "$tbb_prefix/lib/cmake/TBB/TBBConfig.cmake" ] && return
  echo "== ci/sanitize.sh: building oneTBB $version with ThreadSanitizer into $tbb_prefix"
  local apt=$cache/apt
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  echo "deb-src http://deb.debian.org/debian bookworm main" >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
  src=$(mktemp -d)
  apt-get "${opts[@]}" -qq update || return
  (cd "$src" && apt-get "${opts[@]}" -qq source --download-only "$package=$version") || return
  dpkg-source -x "$src/${package}_${version#*:}.dsc" "$src/tree" >/dev/null || return
  build=$src/build
  # Only libtbb: Accord links no other part of oneTBB.
  cmake -S "$src/tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTBB_SANITIZE=thread -DTBB_TEST=OFF -DTBB_STRICT=OFF -DTBBMALLOC_BUILD=OFF \
    -DTBB_DISABLE_HWLOC_AUTOMATIC_SEARCH=ON -DCMAKE_INSTALL_PREFIX="$tbb_prefix.tmp" \
    -DCMAKE_INSTALL_LIBDIR=lib >/dev/null || return
  cmake --build "$build" -j "$jobs" || return
  rm -rf "$tbb_prefix.tmp"
  cmake --install "$build" >/dev/null || return
  mv "$tbb_prefix.tmp" "$tbb_prefix"
  rm -rf "$src"
}

# set -e does not apply inside `run_x || status=1`: each step says `|| return`.
run_thread() {
  tbb_for_tsan || return
  build thread build-tsan -DTBB_DIR="$tbb_prefix/lib/cmake/TBB" || return
  unit_tests_listed build-tsan || return
  keep_plugins_loaded build-tsan libtsan || return
  # The instrumented oneTBB also for what finds its libraries by soname alone, such as
  # an application built against an installed Accord (tests/runtime/embed).
  export LD_LIBRARY_PATH=$tbb_prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # ci/tsan.supp, plus one line for each of Open MPI's and PMIx's plugins.
  local libmpi libdir
  libmpi=$(ldd build-tsan/tests/runtime/mpi/mpi_test_allreduce | awk '$1 ~ /libmpi\.so/ {print $3}')
  libdir=$(dirname "$(readlink -f "$libmpi")")
  {
    cat ci/tsan.supp
    find "$libdir"/openmpi "$libdir"/pmix* -name '*mca_*.so' -printf 'called_from_lib:/%f\n'
  } >build-tsan/tsan.supp || return
  # halt_on_error: the first report ends the process with exit code 66, so that the test
  # fails on its exit status as well as on the report in its output.
  export TSAN_OPTIONS="suppressions=$root/build-tsan/tsan.supp halt_on_error=1 exitcode=66"
  # Checks of elapsed time allow three times their usual slack
  # (tests/runtime/mpi/test_fault.cc).
  export ACCORD_TEST_TIME_SCALE=3
  # Excluded: the trainer's tests (labels trainer, trainer-mpi). The layers run in oneDNN,
  # whose OpenMP threads (libgomp) and JIT-compiled kernels are not instrumented, so
  # ThreadSanitizer reports races between them that it cannot judge (a memset inside
  # libdnnl against the main thread, in the pooling and model-gradient tests), and its
  # shadow memory breaks the data loader's bound on resident memory. They run under
  # AddressSanitizer.
  #
  # Also excluded: the DDP side of bench_ddp and the ZeroRedundancyOptimizer side of
  # bench_sharded, whose gloo threads race inside PyTorch (uninstrumented, not Accord's
  # code), and the tests in which a rank leaves in the
  # middle of an allreduce: under ThreadSanitizer the victim notices that its allreduce
  # started only once it has finished, so the survivors rightly succeed and the test's
  # premise fails (the freeze variants, and leaving in every other collective, still
  # run here; all of them run under AddressSanitizer and in the plain build). Adasum's
  # fault tests likewise, frozen or leaving: its victim fails once its last element has
  # changed, near the end of the collective, which comes seconds later here, so that the
  # survivors have finished, or the time from the collective's start outgrows the bound.
  #
  # And tools.data-tools, which makes writes fail with a file-size limit of a few KiB
  # (RLIMIT_FSIZE), under which ThreadSanitizer's own runtime dies of SIGBUS as the
  # process starts (even for --help); it runs under AddressSanitizer. And two tools
  # tests that run the trainer's code outside the trainer's label:
  # tools.data-bench (the trainer's data loader against PyTorch's, whose Debian build
  # links oneTBB and cannot load the instrumented one: "libtsan.so.2: cannot allocate
  # memory in static TLS block") and tools.gpu-check (accord-resnet started without
  # mpirun, so without the preloads mpirun gives a rank: Open MPI unloads a plugin that a
  # suppression names, which ThreadSanitizer treats as fatal). For the same reason as
  # the first, python.debian.* skip here ("cannot import torch"), and python.fault.debian.*,
  # which cannot skip, is left out; the torch2 ones run.
  ctest --test-dir build-tsan --output-on-failure --no-tests=error -LE '^trainer' \
    -E '^(examples\..*\.bench_(ddp|sharded)|(mpi|multihost)\.fault\.exit\.allreduce(_hierarchical)?\..*|mpi\.fault\.(exit|freeze)\.adasum\..*|python\.fault\.debian\..*|tools\.(data-bench|data-tools|gpu-check))$' "$@"
}

run_address() {
  build address build-asan || return
  unit_tests_listed build-asan || return
  keep_plugins_loaded build-asan libasan || return
  export ASAN_OPTIONS="halt_on_error=1 detect_leaks=1"
  export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"
  # Open MPI's, hwloc's and PMIx's own leaks only: never a frame of Accord's.
  export LSAN_OPTIONS="suppressions=$root/ci/lsan.supp print_suppressions=0"
  export ACCORD_TEST_TIME_SCALE=2
  local status=0
  ctest --test-dir build-asan --output-on-failure --no-tests=error -LE '^python$' \
    -E '^tools\.gpu-check$' "$@" || status=1
  # tools.gpu-check starts accord-resnet without mpirun, so without the preload that
  # keeps Open MPI's plugins loaded: the plugins' own leaks, which ci/lsan.supp names,
  # come from unloaded code that no suppression can match. No leak check there.
  ASAN_OPTIONS="halt_on_error=1 detect_leaks=0" \
    ctest --test-dir build-asan --output-on-failure --no-tests=ignore "$@" \
      -R '^tools\.gpu-check$' || status=1
  # The Python tests: out-of-bounds accesses, use after free and undefined behaviour as
  # everywhere, but no leak check. The interpreter and PyTorch, neither of them
  # instrumented, keep megabytes allocated until the process ends, by design; the C++
  # tests above check Accord's own allocations for leaks. Not the examples (label
  # examples): they reach Accord through the same bindings as the Python tests, and
  # train for minutes each under the sanitizer. Nor elastic.srun: srun starts its Python
  # ranks without Open MPI's mca_base_env_list, through which the sanitizer's runtime is
  # preloaded into every rank ("ASan runtime does not come first"); it runs in the plain
  # build, and the same driver under mpirun runs here (elastic.driver.*).
  ASAN_OPTIONS="halt_on_error=1 detect_leaks=0" \
    ctest --test-dir build-asan --output-on-failure --no-tests=ignore -L '^python$' \
      -LE '^examples$' -E '^elastic\.srun$' "$@" || status=1
  return $status
}

status=0
for sanitizer in "${sanitizers[@]}"; do
  start=$SECONDS
  echo "== ci/sanitize.sh: $sanitizer"
  # A subshell each: one sanitizer's settings do not leak into the other's run.
  ("run_$sanitizer" "$@") || status=1
  echo "== ci/sanitize.sh: $sanitizer took $((SECONDS - start)) s"
done
exit $status
