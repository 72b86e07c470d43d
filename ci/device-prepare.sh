#!/usr/bin/env bash
# Prepares a run on a lent GPU machine (run it here, on the Debian build machine).
#
# That machine has CUDA, cuDNN, NCCL and PyTorch but none of Debian's libraries Accord
# links (OpenMPI, oneTBB, spdlog and theirs), and it cannot download anything. So this
# builds Accord here into build/, downloads those libraries as Debian packages into
# .debs/ and puts a slice of Fashion-MNIST into .data/; ci/device-run.sh unpacks the
# packages there into a folder of their own. Carry `build`, `.debs` and `.data` to the
# machine, then run `bash ci/device-run.sh <command>` there.
#
# ACCORD_DEVICE_TARGETS=gpu builds only what the GPU check (ci/gpu-check.sh) runs
# (libaccord, the GPU tests, the MPI tests it also runs, accord-bench, the trainer and
# its data tools) in a build folder of its own, build-gpu/, so that build/ stays as it
# is here; it then stages a copy without object files and archives in build-device/.
# Carry `build-device`, `.debs` and `.data`; ci/device-run.sh puts build-device in place
# there.
# What travels must stay under the device tool's 64 MiB; the size is printed.
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
gpu_targets=(accord accord_gpu_tests gpu_test_device_collectives gpu_test_device_errors gpu_test_device_fault
             accord-bench mpi_test_allreduce mpi_test_allgather mpi_test_broadcast mpi_test_errors
             accord_gpu_cudnn_tests accord-resnet accord-make-jpegs accord-pack accord-data-bench
             accord-fusion-probe)
dir=build  # what the checks below look at
if [ "${ACCORD_DEVICE_TARGETS:-}" = gpu ]; then
  dir=build-gpu
  [ -f build-gpu/build.ninja ] || cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build build-gpu -j "${ACCORD_JOBS:-$(nproc)}" --target "${gpu_targets[@]}"
  grep -q '^NCCL_LIBRARY:FILEPATH=/' build-gpu/CMakeCache.txt ||
    echo "ci/device-prepare.sh: warning: this build has no NCCL; the GPU check runs the staged path only" >&2
elif [ -n "${ACCORD_DEVICE_TARGETS:-}" ]; then
  [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
  # shellcheck disable=SC2086  # a list of target names
  cmake --build build -j "${ACCORD_JOBS:-$(nproc)}" --target ${ACCORD_DEVICE_TARGETS}
else
  bash ci/build.sh
fi

# Runtime libraries only: what libaccord, mpirun/orted and OpenMPI's and PMIx's
# plugins load, as resolved on this machine, minus the C/C++ runtime every image has.
packages=(
  openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1
  libnl-3-200 libnl-route-3-200 libnuma1 libpsm-infinipath1 libpsm2-2 libmunge2 libatomic1
  libtbb12 libtbbmalloc2 libspdlog1.10 libfmt9
  libopenmpi-dev  # mpi.h, for ci/device-python.sh to compile accord._core there
  libdnnl2 ocl-icd-libopencl1 libgomp1 libjpeg62-turbo  # the trainer (accord-resnet) and its GPU tests
)
rm -rf .debs && mkdir -p .debs
(cd .debs && apt-get download "${packages[@]}" > /dev/null 2>&1)
echo "ci/device-prepare.sh: $(ls .debs | wc -l) packages in .debs ($(du -sh .debs | cut -f1)), $dir/ ready"

# The trainer's GPU tests train on Fashion-MNIST, which that machine lacks and whose
# 30 MB would not fit beside the build: the first 12000 training and 2000 test images,
# in the same IDX files, go in .data/fashion-mnist/ (carry .data too; ci/device-run.sh
# points the tests at it with TEST_FASHION_MNIST_DIR).
python3 - /usr/share/datasets/fashion-mnist .data/fashion-mnist 12000 2000 <<'PY'
import gzip, os, struct, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dst, exist_ok=True)
for split, n in (("train", n_train), ("t10k", n_test)):
    for kind in ("images-idx3", "labels-idx1"):
        name = f"{split}-{kind}-ubyte.gz"
        with gzip.open(os.path.join(src, name), "rb") as f:
            data = f.read()
        dims = data[3]
        shape = list(struct.unpack(f">{dims}I", data[4:4 + 4 * dims]))
        per = 1
        for d in shape[1:]:
            per *= d
        shape[0] = min(n, shape[0])
        head = data[:4] + struct.pack(f">{dims}I", *shape)
        body = data[4 + 4 * dims:4 + 4 * dims + shape[0] * per]
        with gzip.open(os.path.join(dst, name), "wb", compresslevel=9) as f:
            f.write(head + body)
PY
echo "ci/device-prepare.sh: Fashion-MNIST's first 12000 + 2000 images in .data ($(du -sh .data | cut -f1))"

# Anything the binaries need that is neither in those packages nor in a base image
# would fail there at load time: say so here instead.
missing=$(for f in $dir/libaccord.so $dir/tools/accord-bench $dir/examples/resnet/accord-resnet \
                   /usr/bin/orted \
                   /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so; do
            ldd "$f" | awk '/=>/ {print $3}'
          done | sort -u | xargs -r readlink -f | { xargs -r dpkg -S 2>/dev/null || true; } | cut -d: -f1 |
          sort -u | grep -vxE 'libc6|libgcc-s1|libstdc\+\+6|zlib1g|libudev1|libuuid1' |
          while read -r p; do ls .debs/"${p}"_*.deb > /dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  echo "ci/device-prepare.sh: also needed, add to the list above: $missing" >&2
  exit 1
fi

# The device tool carries at most 64 MiB (working tree included). Object files and
# static archives are not needed there.
if [ "$dir" = build-gpu ]; then
  rm -rf build-device
  cp -a build-gpu build-device
  find build-device \( -name '*.o' -o -name '*.a' \) -delete
  # Nor CTest's record of local runs, where the GPU tests took no time (skipped): its
  # costs would order the tests there.
  rm -rf build-device/Testing
  # Nor are the symbol tables: stripped, the binaries take about half the room.
  find build-device -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c \
      'for f; do head -c 4 "$f" | grep -q ELF && strip --strip-unneeded "$f"; done' sh {} +
  rm -rf build-device/CMakeFiles/*/CompilerId*
  # What was built, for the GPU check's report: the copy there has no .git.
  echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' with local changes')" \
    > build-device/COMMIT
  size_kib=$(du -sk build-device .debs .data | awk '{s += $1} END {print s}')
  echo "ci/device-prepare.sh: build-device/, .debs/ and .data/ take $((size_kib / 1024)) MiB; carry all three"
  exit 0
fi
# A full build/: ACCORD_DEVICE_SLIM=1 deletes its object files (the next build here
# recompiles them).
if [ "${ACCORD_DEVICE_SLIM:-0}" = 1 ]; then
  find build -name '*.o' -delete
fi
size_kib=$(du -sk build .debs .data | awk '{s += $1} END {print s}')
echo "ci/device-prepare.sh: build/, .debs/ and .data/ take $((size_kib / 1024)) MiB"
if [ "$size_kib" -gt $((56 * 1024)) ]; then
  echo "ci/device-prepare.sh: that is near or over the device tool's 64 MiB: rerun with" \
       "ACCORD_DEVICE_SLIM=1 (drops object files), or ACCORD_DEVICE_TARGETS=gpu" >&2
fi
