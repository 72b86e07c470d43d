#!/usr/bin/env bash
# accord-resnet vs PyTorch training throughput on the CPU (ResNet-18 and ResNet-50,
# synthetic 224x224 data, one process each, same batch and threads).
#   examples/resnet/bench/bench_vs_pytorch.sh [--batch-size 32 --steps 10 ...]
# Needs a built accord-resnet (ACCORD_RESNET=path, default build/) and a Python with
# torch + torchvision; Debian's CPU-only packages are the light way to get them:
#   apt-get install -y --no-install-recommends python3-torchvision
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$py" ] || continue
  if "$py" -c 'import torch, torchvision' 2>/dev/null; then
    exec "$py" "$here/bench_vs_pytorch.py" "$@"
  fi
done
echo "bench_vs_pytorch.sh: no Python with torch and torchvision found;" >&2
echo "  apt-get install -y --no-install-recommends python3-torchvision" >&2
exit 1
