#!/usr/bin/env bash
# Rehearses, on this build machine, a run on a lent GPU machine, so that device time is
# not lost to a script that cannot start there. It copies what the device tool would
# (the working tree git knows of, and the carried build-device/, .debs/, .data/ and,
# where it is, .horovod/)
# into a scratch folder and runs ci/device-run.sh there in a mount namespace made to
# look like that machine: every file of the Debian packages in .debs/ hidden (an empty
# file in its place, so that whatever still reaches for one fails loudly), this
# checkout's path gone (the carried CTest files name it), and no Open MPI settings from
# this shell (but its ACCORD_* settings, which the device command line sets the same
# way). Without a GPU the GPU steps skip or fail for want of one; what the
# rehearsal shows is that everything loads and starts: the unpacked Open MPI runs the
# MPI tests, CTest finds every test, accord._core compiles against the carried build.
#
#   ACCORD_DEVICE_TARGETS=gpu bash ci/device-prepare.sh
#   bash ci/device-rehearse.sh [command...]   (default: bash ci/gpu-check.sh tests mpi python)
#
# Needs root (a mount namespace). The device machine's python3 has PyTorch and pybind11:
# ACCORD_REHEARSE_PYTHON names one here that has both (default: the PyTorch 2 virtual
# environment of ci/python-env.sh). Output goes to $ACCORD_REHEARSE_DIR/out (default
# /var/tmp/accord-rehearse/out), as $OUT on the device; what the device tool would not
# bring back from there (more than 8 files, too deep, too big, odd names) is named at
# the end. Exit status: the command's; 3 where it passed but $OUT breaks those limits.
set -euo pipefail
case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
esac
cd "$(dirname "$0")/.."
root=$(pwd)
for carried in build-device .debs .data; do
  [ -e "$carried" ] || {
    echo "ci/device-rehearse.sh: no $carried/: run ACCORD_DEVICE_TARGETS=gpu bash ci/device-prepare.sh first" >&2
    exit 2
  }
done
[ "$(id -u)" -eq 0 ] || { echo "ci/device-rehearse.sh: needs root, for a mount namespace" >&2; exit 2; }
python=${ACCORD_REHEARSE_PYTHON:-${ACCORD_TORCH2_VENV:-$HOME/.cache/accord/torch2-venv}/bin/python}
"$python" -c 'import torch, pybind11, pytest' 2> /dev/null || {
  echo "ci/device-rehearse.sh: $python lacks torch, pybind11 or pytest, which the device's python3 has" \
       "(bash ci/python-env.sh makes the default; then: $python -m pip install pybind11)" >&2
  exit 2
}
[ $# -gt 0 ] || set -- bash ci/gpu-check.sh tests mpi python

scratch=${ACCORD_REHEARSE_DIR:-/var/tmp/accord-rehearse}
# The folder that holds this checkout is hidden inside (an empty one in its place), so
# that the checkout's path does not exist there, as on the device: the scratch copy
# must lie elsewhere.
gone=$(dirname "$root")
case "$gone" in
  /) echo "ci/device-rehearse.sh: the checkout $root sits at the top; clone it one folder deeper" >&2
     exit 2 ;;
esac
case "$scratch/" in
  "$gone"/*) echo "ci/device-rehearse.sh: ACCORD_REHEARSE_DIR=$scratch lies in $gone, which the rehearsal hides: pick another" >&2
     exit 2 ;;
esac
rm -rf "$scratch" && mkdir -p "$scratch/repo" "$scratch/out"
git ls-files -z --cached --others --exclude-standard |
  tar -cf - --null --ignore-failed-read -T - 2> /dev/null | tar -xf - -C "$scratch/repo"
cp -a build-device .debs .data "$scratch/repo/"
# Horovod's test file, where it was fetched (ci/gpu-session.sh's horovod part reads it).
[ ! -d .horovod ] || cp -a .horovod "$scratch/repo/"
# The device's python3 is the one with PyTorch: its folder comes first on PATH (a link
# to a virtual environment's interpreter would not find the environment).
python_bin=$(dirname "$python")
[ -x "$python_bin/python3" ] || { echo "ci/device-rehearse.sh: no python3 beside $python" >&2; exit 2; }

# Every file the carried packages installed here (their documentation aside).
hidden=$scratch/hidden.txt
for deb in .debs/*.deb; do dpkg-deb -f "$deb" Package; done | xargs dpkg -L 2> /dev/null |
  grep -vE '^/usr/share/(doc|man|lintian)/' |
  while read -r f; do [ -d "$f" ] || { [ -e "$f" ] && echo "$f"; }; done > "$hidden"
echo "ci/device-rehearse.sh: hiding $(wc -l < "$hidden") files of $(ls .debs | wc -l) packages," \
     "and $gone; running in $scratch/repo: $*"
# The unpacked packages and the Python package are rebuilt as on a fresh machine.
rm -rf /tmp/accord-debs /tmp/accord-python

# Inside the namespace: hide, then run as the device tool does (from the repository
# root, $OUT set, a plain environment).
rc=0
unshare --mount --propagation private bash -s -- "$scratch" "$gone" "$python_bin" "$@" <<'INSIDE' || rc=$?
set -euo pipefail
scratch=$1 gone=$2 python_bin=$3
shift 3
while read -r f; do mount --bind /dev/null "$f"; done < "$scratch/hidden.txt"
mount -t tmpfs tmpfs "$gone"
cd "$scratch/repo"
# Accord's settings of this shell, as the device command line would set them
# (ACCORD_GPU_TESTS_MATCHING=... bash ci/device-run.sh ...).
settings=()
while read -r v; do settings+=("$v=${!v}"); done < <(compgen -e | grep '^ACCORD_' |
  grep -Ev '^ACCORD_(REHEARSE_|TORCH2_VENV$|DEVICE_TARGETS$|JOBS$)')
exec env -i HOME="$HOME" TERM=dumb OUT="$scratch/out" \
  PATH="$python_bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  "${settings[@]}" bash ci/device-run.sh "$@" < /dev/null
INSIDE

# What the device tool would not bring back from $OUT: more than 8 files, files more
# than two folders down, over 16 MiB, or with names outside letters, digits, '.', '_'
# and '-'.
(
  cd "$scratch/out"
  bad=0
  files=$(find . -type f | wc -l)
  if [ "$files" -gt 8 ]; then
    echo "ci/device-rehearse.sh: \$OUT holds $files files; the device tool brings back 8:" >&2
    find . -type f | sed 's/^/  /' >&2
    bad=1
  fi
  while read -r f; do
    echo "ci/device-rehearse.sh: \$OUT/${f#./} would not come back (more than two folders down)" >&2
    bad=1
  done < <(find . -mindepth 4 -type f)
  while read -r f; do
    echo "ci/device-rehearse.sh: \$OUT/${f#./} would not come back (over 16 MiB)" >&2
    bad=1
  done < <(find . -type f -size +16M)
  while read -r f; do
    echo "ci/device-rehearse.sh: \$OUT/${f#./} would not come back (its name)" >&2
    bad=1
  done < <(find . -mindepth 1 -name '*[!A-Za-z0-9._-]*')
  [ $bad = 0 ] && echo "ci/device-rehearse.sh: \$OUT ($scratch/out): $files file(s), all within the device tool's limits"
  exit $bad
) || { [ $rc -ne 0 ] || rc=3; }
exit $rc
