#!/usr/bin/env bash
# Installs what Accord needs on Debian 12 and nothing already there: safe to run again.
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
  zlib1g-dev                   # gzipped Fashion-MNIST files
  dataset-fashion-mnist        # the trainer's default dataset
)

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
