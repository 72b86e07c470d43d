#!/usr/bin/env bash
# Creates (or reuses) the virtual environment in which the Python tests also run
# against the current PyTorch 2.x from PyPI, beside Debian's PyTorch 1.13 in
# /usr/bin/python3. Prints the environment's python. Safe to run again: an environment
# that already imports torch 2 is left as it is.
#   ACCORD_TORCH2_VENV  where it lives (default ~/.cache/accord/torch2-venv)
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -euo pipefail
venv=${ACCORD_TORCH2_VENV:-$HOME/.cache/accord/torch2-venv}
python=$venv/bin/python
check='import sys, torch, numpy, pytest, pytest_timeout; sys.exit(int(torch.__version__.split(".")[0]) < 2)'
# <package>: from PyTorch's CPU-only index where it is reachable, else PyPI's default.
install_torch_package() {
  "$python" -m pip install --quiet --retries 1 --timeout 15 \
    --index-url https://download.pytorch.org/whl/cpu "$1" >&2 2> /dev/null ||
    "$python" -m pip install --quiet "$1" >&2
}
# torchvision: for the examples (examples/python: the benchmarks' ResNets);
# pip picks the release made for the installed torch.
ensure_torchvision() {
  "$python" -c 'import torchvision' 2> /dev/null || install_torch_package torchvision
}
# scikit-build-core and pybind11: for the wheel's test (tests/tools/test_wheel.py), which
# builds `pip install .`'s wheel here without build isolation, so without the network.
ensure_wheel_tools() {
  "$python" -c 'import scikit_build_core, pybind11' 2> /dev/null ||
    "$python" -m pip install --quiet scikit-build-core pybind11 >&2
}
if [ -x "$python" ] && "$python" -c "$check" 2> /dev/null; then
  ensure_torchvision
  ensure_wheel_tools
  echo "$python"
  exit 0
fi
echo "ci/python-env.sh: creating $venv (PyTorch 2.x from PyPI; a few minutes the first time)" >&2
# Debian's interpreter, the one Accord's extension is built for; not the system's
# site-packages, so that Debian's torch 1.13 stays out.
/usr/bin/python3 -m venv --clear "$venv"
"$python" -m pip install --quiet --upgrade pip >&2
install_torch_package torch
"$python" -m pip install --quiet numpy pytest pytest-timeout >&2
ensure_torchvision
ensure_wheel_tools
"$python" -c "$check"
echo "$python"
