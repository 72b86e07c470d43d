#!/usr/bin/env bash
# Horovod's own PyTorch tests against accord.torch: the drop-in's acceptance check.
#
# Runs Horovod's test/parallel/test_torch.py (or another of its PyTorch test files:
# test_adasum_pytorch.py, test_timeline.py), unchanged, through an import shim that
# makes `import horovod.torch` load accord.torch, under mpirun with pytest, and prints
# each rank's passed / failed / skipped counts and the tests that failed. The test file
# is Horovod's and stays outside this repository (fetch it from Horovod's repository,
# tag v0.28.1, e.g. into the ignored folder .horovod/); the shim is written into a
# temporary folder on every run.
#
#   bash ci/horovod-acceptance.sh TEST_FILE [--np N] [--python PY] [--pythonpath DIR]
#        [--cuda] [--prefix 'CMD ARGS'] [--timeout SECONDS] [--total SECONDS]
#        [--out DIR] [--timeline FILE] [--no-mpirun] [--script] [-- PYTEST ARGS...]
#
#   --np N            ranks (default 2)
#   --no-mpirun       one plain process, for tests that start their own jobs
#                     (test/integration/test_interactiverun.py: horovod.run;
#                     test_elastic_torch.py: horovodrun's elastic lines, through
#                     accordrun; its elastic_common.py beside it, its script in
#                     data/elastic_torch_main.py; needs mock and psutil)
#   --script          run the file as a script on every rank (python FILE ARGS), as
#                     Horovod's CI runs test/integration/test_stall.py; the verdict is
#                     the job's exit status, and the stall bound is the script's own
#   --python PY       interpreter with PyTorch (default /usr/bin/python3, Debian's 1.13)
#   --pythonpath DIR  folder holding the accord package (default <build>/python, the
#                     build folder being $ACCORD_BUILD_DIR or build)
#   --cuda            keep the GPU visible and run the CUDA tests too; without it the
#                     GPU is hidden and the tests named *gpu* are deselected
#                     (-k "not gpu"), as for Horovod's own CPU count
#   --prefix CMD      put CMD in front of python on every rank, e.g.
#                     --prefix 'bash ci/nccl-one-gpu.sh' for ranks sharing one GPU
#   --timeout S       per-test limit, through pytest-timeout where installed (default 300)
#   --total S         limit for the whole run (default 3000)
#   --out DIR         logs and per-rank JUnit files (default $OUT, else a new folder in /tmp)
#   --timeline FILE   rank 0 records Accord's timeline there from the first init() on
#                     (start_timeline: test_torch.py sets HOROVOD_TIMELINE=DYNAMIC, which
#                     ACCORD_TIMELINE=FILE would contradict)
#   after --           further pytest arguments (a later -k replaces the default one)
#
# Accord's settings in the environment (ACCORD_*) reach every rank; the stall bound is
# 60 s unless ACCORD_STALL_SHUTDOWN_TIME says otherwise.
#
# Exit status: 0 when no rank had a failure or error (with --script: when the job exited
# 0), 1 otherwise, 2 for bad usage.
#
# Examples (CPU, this machine; the counts Horovod 0.28.1 itself gets are 103 passed,
# 6 skipped):
#   bash ci/horovod-acceptance.sh .horovod/test_torch.py --np 2
#   bash ci/horovod-acceptance.sh .horovod/test_torch.py --np 3 \
#        --python ~/.cache/accord/torch2-venv/bin/python
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;; esac
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '11,14p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
test_file=$1
shift
[ -f "$test_file" ] || { echo "ci/horovod-acceptance.sh: no test file '$test_file'" >&2; exit 2; }
test_file=$(cd "$(dirname "$test_file")" && pwd)/$(basename "$test_file")
np=2
python=/usr/bin/python3
pythonpath=$root/${ACCORD_BUILD_DIR:-build}/python
cuda=0
prefix=""
per_test=300
total=3000
out=${OUT:-}
script=0
timeline=""
while [ $# -gt 0 ]; do
  case $1 in
    --np) np=$2; shift ;;
    --python) python=$2; shift ;;
    --pythonpath) pythonpath=$2; shift ;;
    --cuda) cuda=1 ;;
    --prefix) prefix=$2; shift ;;
    --timeout) per_test=$2; shift ;;
    --total) total=$2; shift ;;
    --out) out=$2; shift ;;
    --timeline) timeline=$2; shift ;;
    --no-mpirun) np=0 ;;
    --script) script=1 ;;
    --) shift; break ;;
    *) echo "ci/horovod-acceptance.sh: unknown option '$1'" >&2; usage ;;
  esac
  shift
done
[[ "$np" =~ ^[0-9]+$ ]] || { echo "ci/horovod-acceptance.sh: --np '$np'" >&2; exit 2; }
pythonpath=$(cd "$pythonpath" 2>/dev/null && pwd) || {
  echo "ci/horovod-acceptance.sh: no accord package folder (--pythonpath); build it with" \
       "bash ci/build.sh" >&2
  exit 2
}
[ -d "$pythonpath/accord" ] || { echo "ci/horovod-acceptance.sh: no accord/ in $pythonpath" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -n "$out" ] || out=$(mktemp -d /tmp/horovod-acceptance.XXXXXX)
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/junit-rank*.xml "$out"/rank*.log
if [ -n "$timeline" ]; then  # the ranks run elsewhere
  timeline=$(realpath -m "$timeline")
  mkdir -p "$(dirname "$timeline")"
fi

# ---- the shim: horovod.torch is accord.torch ------------------------------------------
shim=$work/shim
mkdir -p "$shim/horovod/torch"
cat > "$shim/horovod/__init__.py" <<'EOF'
"""Horovod's import path served by Accord (written by ci/horovod-acceptance.sh)."""
from accord.runner import run  # noqa: F401  (horovod.run)
EOF
# horovod.runner: run(), and the two internals test_interactiverun.py imports for its
# Gloo-only elastic test (which skips: gloo_built() is False).
mkdir -p "$shim/horovod/runner"
cat > "$shim/horovod/runner/__init__.py" <<'EOF'
from accord.runner import run  # noqa: F401


class _HorovodArgs:
    pass
EOF
# horovod.runner.launch: parse_args() and _run_elastic(), with which
# test/integration/elastic_common.py runs a horovodrun command line in-process: here
# the line goes to accordrun unchanged (it takes horovodrun's flags), with the two
# driver constants the tests patch as accordrun's flags. A failed job raises
# RuntimeError as Horovod's launcher does, with Horovod's first words (which the tests
# match) followed by accordrun's own last lines; the reset limit's message is
# accordrun's.
cat > "$shim/horovod/runner/launch.py" <<'EOF'
import collections
import os
import subprocess
import sys


def _run(args):
    raise NotImplementedError("horovod.runner.launch._run is Horovod's internal launcher")


class _Args:
    def __init__(self, argv):
        self.argv = list(argv)


def parse_args():
    return _Args(sys.argv[1:])


def _run_elastic(args):
    from horovod.runner.elastic import driver
    interval = max(float(driver.DISCOVER_HOSTS_FREQUENCY_SECS), 0.1)
    # accordrun under the interpreter under test: run through a pyenv shim, it would
    # put pyenv's own Python first on the ranks' PATH, before the shim's `python`.
    cmd = [sys.executable, os.environ["ACCEPTANCE_ACCORDRUN"], "--discovery-interval", f"{interval:g}",
           "--elastic-timeout", f"{float(driver.ELASTIC_TIMEOUT_SECS):g}", *args.argv]
    print("+", " ".join(cmd), flush=True)
    tail = collections.deque(maxlen=40)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        for line in p.stdout:
            sys.stdout.write(line)
            tail.append(line)
    if p.returncode != 0:
        raise RuntimeError("Horovod detected that one or more processes exited with non-zero "
                           f"status (accordrun exited {p.returncode}):\n" + "".join(tail))
EOF
mkdir -p "$shim/horovod/runner/common/util" "$shim/horovod/runner/elastic"
: > "$shim/horovod/runner/common/__init__.py"
: > "$shim/horovod/runner/common/util/__init__.py"
cat > "$shim/horovod/runner/common/util/config_parser.py" <<'EOF'
def set_env_from_args(env, args):
    return env  # accordrun turns horovodrun's flags into settings itself
EOF
: > "$shim/horovod/runner/elastic/__init__.py"
cat > "$shim/horovod/runner/elastic/constants.py" <<'EOF'
RESET_LIMIT_EXCEEDED_MESSAGE = "reset limit {} reached"  # accordrun's words
EOF
cat > "$shim/horovod/runner/elastic/driver.py" <<'EOF'
DISCOVER_HOSTS_FREQUENCY_SECS = 1.0  # accordrun --discovery-interval
ELASTIC_TIMEOUT_SECS = 600           # accordrun --elastic-timeout
EOF
cat > "$shim/horovod/runner/gloo_run.py" <<'EOF'
def _get_min_start_hosts(settings):
    return 1
EOF
# Horovod's elastic test script (test/integration/data/elastic_torch_main.py) also reads
# a private attribute of Horovod's State: _host_messages, the queue of the driver's
# notices of new hosts, which its rank 0 polls with empty(). Accord's rank 0 holds the
# same notice as a flag (accord/elastic/notice.py), and on_hosts_updated()'s as the
# state's newest announced time; the shim lends them that name.
cat > "$shim/horovod/torch/__init__.py" <<'EOF'
import os
import sys

import accord.torch
from accord.elastic import notice
from accord.elastic.state import State


class _HostMessages:
    def __init__(self, state):
        self.state = state

    def empty(self):
        announced = self.state._announced > self.state._acted_on  # on_hosts_updated()
        return not (notice.hosts_updated() or announced)


State._host_messages = property(_HostMessages)

# --timeline: the timeline from the first init() on, on every rank (rank 0 writes it).
_timeline = os.environ.get("ACCEPTANCE_TIMELINE")
if _timeline:
    _init = accord.torch.init

    def _init_and_record(*args, **kwargs):
        result = _init(*args, **kwargs)
        if not _init_and_record.started:
            _init_and_record.started = True
            accord.torch.start_timeline(_timeline)
        return result

    _init_and_record.started = False
    accord.torch.init = _init_and_record
sys.modules[__name__] = accord.torch
EOF
# horovod.common.util.env, which test_timeline.py imports: settings in the environment
# for the length of a with-block.
mkdir -p "$shim/horovod/common"
: > "$shim/horovod/common/__init__.py"
cat > "$shim/horovod/common/util.py" <<'EOF'
import contextlib
import os

from accord.basics import gloo_built, mpi_built  # noqa: F401


@contextlib.contextmanager
def env(**settings):
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update({name: str(value) for name, value in settings.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
EOF
# The helpers the test files import from Horovod's test/utils/common.py, as they use
# them (override_args: elastic_common.py).
cat > "$shim/common.py" <<'EOF'
import contextlib
import os
import sys
import tempfile


def mpi_env_rank_and_size():
    for rank, size in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if rank in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def skip_or_fail_gpu_test(test, message):
    if int(os.environ.get("HOROVOD_TEST_GPU", 0)):
        test.fail(message)
    test.skipTest(message)


@contextlib.contextmanager
def override_args(tool=None, *args):
    saved = sys.argv[:]
    try:
        if tool:
            sys.argv[0] = tool
        sys.argv[1:] = args
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def temppath():
    with tempfile.TemporaryDirectory() as folder:
        yield os.path.join(folder, "temp_test_file")
EOF

# ---- pytest settings of this run -----------------------------------------------------
timeout_opts=()
if "$python" -c 'import pytest_timeout' 2>/dev/null; then
  timeout_opts=(-o "timeout=$per_test" -o timeout_method=signal)
else
  echo "ci/horovod-acceptance.sh: $python has no pytest-timeout: no per-test limit" >&2
fi
printf '[pytest]\n' > "$work/pytest.ini"
select=()
[ $cuda = 1 ] || select=(-k "not gpu")

# Each rank: its own log and JUnit file; rank 0's output also on the terminal.
cat > "$work/rank.sh" <<'EOF'
#!/usr/bin/env bash
set -o pipefail
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
junit=()
[ "$ACCEPTANCE_SCRIPT" = 1 ] || junit=(--junitxml="$ACCEPTANCE_OUT/junit-rank$rank.xml")
if [ "$rank" = 0 ]; then
  "$@" "${junit[@]}" 2>&1 | tee "$ACCEPTANCE_OUT/rank$rank.log"
else
  "$@" "${junit[@]}" > "$ACCEPTANCE_OUT/rank$rank.log" 2>&1
fi
EOF

# `python` in the commands a test starts (elastic_common.py's horovodrun line) is the
# interpreter under test.
mkdir -p "$shim/bin"
printf '#!/bin/sh\nexec %q "$@"\n' "$(command -v "$python")" > "$shim/bin/python"
chmod +x "$shim/bin/python"
env_vars=(
  "PYTHONPATH=$shim:$pythonpath${PYTHONPATH:+:$PYTHONPATH}"
  "PATH=$shim/bin:$PATH"
  "ACCEPTANCE_ACCORDRUN=$(dirname "$pythonpath")/tools/accordrun"
  "ACCEPTANCE_OUT=$out"
  "ACCEPTANCE_SCRIPT=$script"
  "ACCEPTANCE_TIMELINE=$timeline"
  "OMPI_MCA_mpi_yield_when_idle=1"
)
# A collective some rank never submits fails after a minute rather than five, so a
# failing test cannot hold up the ones after it for long. A script sets its own.
if [ $script = 0 ]; then
  env_vars+=("ACCORD_STALL_SHUTDOWN_TIME=${ACCORD_STALL_SHUTDOWN_TIME:-60}")
elif [ -n "${ACCORD_STALL_SHUTDOWN_TIME:-}" ]; then
  env_vars+=("ACCORD_STALL_SHUTDOWN_TIME=$ACCORD_STALL_SHUTDOWN_TIME")
fi
[ $cuda = 1 ] || env_vars+=("CUDA_VISIBLE_DEVICES=")
mpi_env=()
for v in "${env_vars[@]}"; do mpi_env+=(-x "$v"); done
# Accord's other settings of this shell (a log level, a timeline) reach every rank.
while read -r v; do
  [ "$v" = ACCORD_STALL_SHUTDOWN_TIME ] || mpi_env+=(-x "$v")
done < <(compgen -e | grep '^ACCORD_')
read -r -a prefix_words <<< "$prefix"
# Files the prefix names (a wrapper script) are found from here, before the cd below.
for i in "${!prefix_words[@]}"; do
  [ -f "${prefix_words[i]}" ] && prefix_words[i]=$(realpath "${prefix_words[i]}")
done

ranks="$np rank(s)"
[ "$np" = 0 ] && ranks="one process without mpirun"
echo "ci/horovod-acceptance.sh: $ranks, $("$python" -c 'import sys, torch; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}")'), accord from $pythonpath, cuda=$cuda"
cd "$work" || exit 2
started=$(date +%s)
pytest_command=("$python" -m pytest -c "$work/pytest.ini" --rootdir "$work" -p no:cacheprovider
                --color=no -v -rfEs "${timeout_opts[@]}" "${select[@]}" "$@" "$test_file")
[ $script = 1 ] && pytest_command=("$python" "$test_file" "$@")
if [ "$np" = 0 ]; then  # one plain process, with the ranks' environment
  np=1
  timeout --signal=TERM --kill-after=30 "$total" \
    env "${env_vars[@]}" "${prefix_words[@]}" bash "$work/rank.sh" "${pytest_command[@]}"
else
  timeout --signal=TERM --kill-after=30 "$total" \
    "${MPIRUN:-mpirun}" --allow-run-as-root --oversubscribe --bind-to none -np "$np" "${mpi_env[@]}" \
    "${prefix_words[@]}" bash "$work/rank.sh" "${pytest_command[@]}"
fi
status=$?
echo "ci/horovod-acceptance.sh: the run exited $status after $(( $(date +%s) - started )) s"
[ $status -eq 124 ] && echo "ci/horovod-acceptance.sh: the run passed --total $total s and was stopped"

if [ $script = 1 ]; then  # the job's exit status is the verdict
  for ((rank = 0; rank < np; rank++)); do
    echo "rank $rank's last line: $(tail -n 1 "$out/rank$rank.log" 2>/dev/null)"
  done
  verdict=passed
  [ $status = 0 ] || verdict=failed
  echo "ci/horovod-acceptance.sh: the script $verdict; logs: $out"
  [ $status = 0 ] || exit 1
  exit 0
fi

# ---- per-rank counts from the JUnit files --------------------------------------------
"$python" - "$out" "$np" <<'EOF'
import os
import re
import sys
import xml.etree.ElementTree as ET

out, np_ = sys.argv[1], int(sys.argv[2])
bad = False
failed_by_test = {}


def from_log(rank):
    """A rank stopped before pytest wrote its JUnit file: its counts so far, and the
    test it was in, from its verbose log (one line per test, the verdict appended when
    the test ends)."""
    counts = {"PASSED": 0, "FAILED": 0, "ERROR": 0, "SKIPPED": 0}
    running = None
    try:
        lines = open(os.path.join(out, f"rank{rank}.log"), errors="replace").read().splitlines()
    except OSError:
        return "no log"
    for line in lines:
        m = re.match(r"(\S+::\S+)(?: (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b)?", line)
        if not m:
            continue
        if m.group(2):
            verdict = {"XFAIL": "SKIPPED", "XPASS": "PASSED"}.get(m.group(2), m.group(2))
            counts[verdict] += 1
            running = None
            if verdict in ("FAILED", "ERROR"):
                failed_by_test.setdefault(m.group(1).split("::")[-1], []).append(rank)
        else:
            running = m.group(1).split("::")[-1]
    so_far = (f"{counts['PASSED']} passed, {counts['FAILED']} failed, {counts['ERROR']} errors, "
              f"{counts['SKIPPED']} skipped so far")
    return so_far + (f"; stopped in {running}" if running else "")


for rank in range(np_):
    path = os.path.join(out, f"junit-rank{rank}.xml")
    if not os.path.exists(path):
        print(f"rank {rank}: no results (the rank did not finish: {from_log(rank)}; see "
              f"{out}/rank{rank}.log)")
        bad = True
        continue
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        name = case.get("name")
        if "failure" in kinds or "error" in kinds:
            counts["failed" if "failure" in kinds else "errors"] += 1
            failed_by_test.setdefault(name, []).append(rank)
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    bad = bad or counts["failed"] or counts["errors"]
    print(f"rank {rank}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['errors']} errors, {counts['skipped']} skipped")
for name, ranks in sorted(failed_by_test.items()):
    print(f"  FAILED {name} (rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))})")
print(f"logs and JUnit files: {out}")
sys.exit(1 if bad else 0)
EOF
summary=$?
[ $status -eq 0 ] || [ $summary -ne 0 ] || summary=1
exit $summary
