#!/usr/bin/env bash
# Installs what Accord needs on Debian 12 and nothing already there: safe to run again.
#   bash ci/install-deps.sh [--tests]    --tests: also what only the test suite needs
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev   # MPI (host collectives, mpirun)
  libtbb-dev                   # oneTBB (parallel copies and kernels)
  libspdlog-dev                # logging
  nlohmann-json3-dev           # the timeline's JSON
  catch2                       # unit and MPI tests
  libcli11-dev                 # command-line flags of the tools and the trainer
  libdnnl-dev                  # oneDNN: the trainer's CPU backend
  ocl-icd-opencl-dev           # only a Recommends of libdnnl-dev, but its CMake config needs OpenCL
  zlib1g-dev                   # gzipped Fashion-MNIST files, CRC-32 of packed records
  libjpeg62-turbo-dev          # libjpeg-turbo: the trainer's JPEG folder and packed datasets
  dataset-fashion-mnist        # the trainer's default dataset
  python3-dev pybind11-dev     # the Python bindings (accord._core)
  python3-venv                 # the PyTorch 2.x test environment (ci/python-env.sh)
  python3-torch python3-numpy  # accord.torch and accord.numpy against Debian's PyTorch 1.13
  python3-cloudpickle          # accord.run: a notebook's functions sent by value
  python3-pytest python3-pytest-timeout  # the Python test suite
  python3-torchvision          # examples/python (ResNets of the benchmarks)
  python3-matplotlib           # accord-report's plots
)
case "${1:-}" in
  # accordrun's srun test; init(comm=...) with an mpi4py communicator (tests/bindings/python)
  --tests) packages+=(slurmctld slurmd slurm-client munge python3-mpi4py) ;;
  "") ;;
  *) echo "usage: ci/install-deps.sh [--tests]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "ci/install-deps.sh: all ${#packages[@]} packages present"
  exit 0
fi

echo "ci/install-deps.sh: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
