"""The wheel (`pip install .`): what a user who installs Accord with pip gets.

  python3 test_wheel.py <source> <work folder> <python that builds> <python to install over>

Builds the wheel with scikit-build-core from <python that builds> (no build isolation
and no index: ci/python-env.sh puts scikit-build-core and pybind11 there), keeping its
CMake tree in <work folder>/build so that a second run only relinks. Installs it into a
fresh virtual environment that sees <python to install over>'s site-packages (PyTorch,
NumPy) and runs everything from there, outside the source and build trees: the package,
accordrun --check-build and --help (which need accord-settings and build-info.json from
the wheel), a 2-rank job started by the wheel's accordrun, accord.run (which finds
accordrun beside the environment's python) and an elastic --dry-run (which needs the
driver beside it).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

SOURCE, WORK, BUILD_PYTHON, BASE_PYTHON = sys.argv[1:5]
del sys.argv[1:5]

# The wheel's version is the public header's.
with open(os.path.join(SOURCE, "runtime", "include", "accord", "accord.h")) as f:
    header = f.read()
VERSION = ".".join(re.search(rf"#define ACCORD_VERSION_{part} (\d+)", header).group(1)
                   for part in ("MAJOR", "MINOR", "PATCH"))

JOB = """
import os, sys
import numpy as np
import torch
import accord, accord.numpy as anp, accord.torch as hvd
here = os.path.realpath(accord.__file__)
assert here.startswith(os.path.realpath(sys.prefix) + os.sep), (here, sys.prefix)
hvd.init()
total = hvd.allreduce(torch.full((5,), float(hvd.rank() + 1)), op=hvd.Sum)
assert total.tolist() == [3.0] * 5, total
gathered = anp.allgather(np.arange(3, dtype=np.int32) + 10 * hvd.rank())
assert gathered.tolist() == [0, 1, 2, 10, 11, 12], gathered
print(f"rank {hvd.rank()} of {hvd.size()}: accord {accord.__version__} from the wheel", flush=True)
hvd.shutdown()
"""

env = None       # the runs' environment: nothing of the build tree's on the paths
venv = None      # the virtual environment the wheel is installed in
wheel = None


def run(cmd, timeout=300, check=True):
    out = subprocess.run(cmd, env=env, cwd=WORK, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def setUpModule():
    global env, venv, wheel
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    os.makedirs(WORK, exist_ok=True)
    missing = subprocess.run([BUILD_PYTHON, "-c", "import scikit_build_core, pybind11"],
                             capture_output=True, text=True)
    if missing.returncode != 0:
        raise unittest.SkipTest(f"{BUILD_PYTHON} has no scikit-build-core or pybind11 "
                                f"(bash ci/python-env.sh installs them): {missing.stderr.strip()}")
    dist = tempfile.mkdtemp(prefix="dist-", dir=WORK)
    print("building the wheel (a few minutes the first time)", file=sys.stderr, flush=True)
    run([BUILD_PYTHON, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
         f"-Cbuild-dir={os.path.join(WORK, 'build')}", "-w", dist, SOURCE], timeout=1500)
    (wheel,) = [os.path.join(dist, name) for name in os.listdir(dist)]
    venv = os.path.join(WORK, "venv")
    shutil.rmtree(venv, ignore_errors=True)
    run([BASE_PYTHON, "-m", "venv", "--system-site-packages", venv])
    run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-deps", "--no-index", wheel])
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")


def tearDownModule():
    if wheel:
        shutil.rmtree(os.path.dirname(wheel), ignore_errors=True)


def bin_(name):
    return os.path.join(venv, "bin", name)


class Wheel(unittest.TestCase):
    def test_contents(self):
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
        self.assertIn(f"accord-{VERSION}.data/scripts/accordrun", names)
        self.assertIn(f"accord-{VERSION}.data/scripts/accord-settings", names)
        self.assertIn(f"accord-{VERSION}.data/scripts/accord_elastic.py", names)
        self.assertIn(f"accord-{VERSION}.data/data/share/accord/build-info.json", names)
        # One libaccord: a zip keeps no links, a versioned library would be there twice.
        self.assertEqual([n for n in names if "libaccord" in n], ["accord/libaccord.so"])
        self.assertIn("accord/torch/elastic/sampler.py", names)

    def test_package_imports_from_the_environment(self):
        out = run([bin_("python"), "-c", "import accord, accord.torch, accord.numpy; "
                   "print(accord.__version__, accord.__file__)"])
        version, path = out.stdout.split()
        self.assertEqual(version, VERSION)
        self.assertTrue(os.path.realpath(path).startswith(os.path.realpath(venv) + os.sep), path)

    def test_check_build_reads_the_wheels_build_info(self):
        out = run([bin_("accordrun"), "--check-build"])
        self.assertIn(f"Accord {VERSION} was built with:", out.stdout)
        self.assertRegex(out.stdout, r"Python bindings\s+yes")
        self.assertRegex(out.stdout, r"MPI\s+\S")

    def test_accordrun_runs_the_environments_python(self):
        with open(bin_("accordrun")) as f:
            first = f.readline()
        self.assertTrue(first.startswith("#!") and first[2:].strip().startswith(venv), first)

    def test_help_has_the_settings_flags(self):
        out = run([bin_("accordrun"), "--help"])
        # The setting flags come from accord-settings, installed beside accordrun.
        self.assertIn("--fusion-threshold", out.stdout)
        self.assertIn("--stall-shutdown-time", out.stdout)
        bad = run([bin_("accordrun"), "-np", "2", "--fusion-threshold", "lots", "true"], check=False)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("lots", bad.stderr)

    def test_two_ranks_started_by_the_wheels_accordrun(self):
        out = run([bin_("accordrun"), "-np", "2", "--oversubscribe", bin_("python"), "-c", JOB],
                  timeout=120)
        for r in range(2):
            self.assertIn(f"rank {r} of 2: accord {VERSION} from the wheel", out.stdout)

    def test_accord_run_finds_the_wheels_accordrun(self):
        # Beside the environment's python, not on PATH: a notebook's kernel has no
        # activated environment.
        plain = dict(env, PATH=os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                               if p != os.path.join(venv, "bin")))
        out = subprocess.run([bin_("python"), "-c", "import accord, math; "
                              "print('values', accord.run(math.factorial, args=(4,), num_proc=2))"],
                             env=plain, cwd=WORK, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("values [24, 24]", out.stdout)

    def test_elastic_dry_run_finds_its_driver(self):
        out = run([bin_("accordrun"), "--dry-run", "-np", "2", "--min-np", "1", "-H", "localhost:2",
                   bin_("python"), "train.py"])
        self.assertIn("ACCORDRUN_ELASTIC_JOB=", out.stdout)
        self.assertRegex(out.stdout, r"mpirun -np 2 -H localhost:2 .*train\.py")


if __name__ == "__main__":
    unittest.main(verbosity=2)
