#!/bin/sh
# run_suite.sh <mpiexec> <np> <python> [pytest arguments]: runs this folder's pytest
# suite on <np> ranks with <python>. Exits 77 (CTest: skipped) when that interpreter
# lacks torch, numpy, pytest or pytest-timeout, saying how to get them.
mpiexec=$1 np=$2 python=$3
shift 3
if ! "$python" -c 'import torch, numpy, pytest, pytest_timeout' 2> /dev/null; then
  echo "skipped: $python cannot import torch, numpy, pytest and pytest_timeout;" \
       "bash ci/install-deps.sh installs Debian's, bash ci/python-env.sh the PyTorch 2 environment"
  exit 77
fi
cd "$(dirname "$0")" || exit 1
exec "$mpiexec" -np "$np" --allow-run-as-root --oversubscribe --bind-to none \
  "$python" -m pytest --color=no -q "$@"
