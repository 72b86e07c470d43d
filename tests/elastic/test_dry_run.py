"""`accordrun --dry-run` with elastic flags: prints the driver's first mpirun command (on
the hosts usable now, at most --max-np ranks, with the variables it passes the ranks)
and starts nothing; below --min-np it says so and exits 1.

  test_dry_run.py <accordrun>
"""
import os
import shlex
import subprocess
import sys
import tempfile
import unittest

ACCORDRUN = None  # set from the command line below


def accordrun(*args):
    try:  # a dry run answers at once; one that runs the job tries to reach the hosts
        p = subprocess.run([ACCORDRUN, *args], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired as e:
        p = subprocess.CompletedProcess(e.cmd, None, (e.stdout or b"").decode(), (e.stderr or b"").decode())
    print(f"+ accordrun {' '.join(args)}\n  exit {p.returncode}\n  stdout: {p.stdout}  stderr: {p.stderr}")
    return p


def words(line):
    """(variables set, argv) of a printed command."""
    parts = shlex.split(line)
    env = {}
    while parts and "=" in parts[0] and not parts[0].startswith("-"):
        k, v = parts.pop(0).split("=", 1)
        env[k] = v
    return env, parts


def after(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


class DryRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.marker = os.path.join(self.tmp.name, "ran")
        self.script = os.path.join(self.tmp.name, "hosts.sh")
        with open(self.script, "w") as f:
            f.write("#!/bin/sh\necho nodea:2\necho nodeb:3\n")
        os.chmod(self.script, 0o755)

    def tearDown(self):
        self.assertFalse(os.path.exists(self.marker), "the dry run started the program")
        self.tmp.cleanup()

    def test_fixed_hosts_first_run_takes_every_slot_up_to_np(self):
        store = os.path.join(self.tmp.name, "store")
        p = accordrun("--dry-run", "-np", "3", "--min-np", "2", "-H", "nodea:2,nodeb:2",
                      "--elastic-store", store, "touch", self.marker)
        self.assertEqual(p.returncode, 0)
        lines = p.stdout.strip().splitlines()
        self.assertEqual(len(lines), 1, "one command printed")
        env, argv = words(lines[0])
        self.assertEqual(os.path.basename(argv[0]), "mpirun")
        self.assertEqual(after(argv, "-np"), ["3"])
        self.assertEqual(after(argv, "-H"), ["nodea:2,nodeb:1"])
        self.assertEqual(argv[-2:], ["touch", self.marker], "the program last")
        # By -x, or through Open MPI's mca_base_env_list where the caller set it (as
        # ci/sanitize.sh does): mpirun refuses -x beside it.
        passed = set(after(argv, "-x")) | set(
            env.get("OMPI_MCA_mca_base_env_list", "").split(";"))
        self.assertLessEqual({"ACCORDRUN_ELASTIC_JOB", "ACCORDRUN_ELASTIC_RESET",
                              "ACCORDRUN_ELASTIC_NOTICE", "ACCORDRUN_ELASTIC_STORE",
                              "ACCORDRUN_ELASTIC_HOSTS"},
                             passed, "the driver's variables passed to the ranks")
        self.assertEqual(env.get("ACCORDRUN_ELASTIC_RESET"), "0")
        self.assertEqual(env.get("ACCORDRUN_ELASTIC_HOSTS"), "nodea:2,nodeb:1",
                         "the run's hosts and ranks, as -H gives them")
        self.assertEqual(env.get("ACCORDRUN_ELASTIC_STORE"), store)
        self.assertNotIn("accordrun: starting", p.stderr, "the driver started a job")

    def test_discovery_script_run_once_capped_at_max_np(self):
        p = accordrun("--dry-run", "--min-np", "2", "--max-np", "4", "--host-discovery-script",
                      self.script, "touch", self.marker)
        self.assertEqual(p.returncode, 0)
        env, argv = words(p.stdout.strip())
        self.assertEqual(after(argv, "-np"), ["4"])
        self.assertEqual(after(argv, "-H"), ["nodea:2,nodeb:2"])

    def test_below_min_np_says_so_and_exits_1_without_waiting(self):
        p = accordrun("--dry-run", "--min-np", "6", "--host-discovery-script", self.script,
                      "--elastic-timeout", "300", "touch", self.marker)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stdout, "")
        self.assertIn("fewer than --min-np 6", p.stderr)
        self.assertIn("nodea:2, nodeb:3", p.stderr)


if __name__ == "__main__":
    ACCORDRUN = sys.argv[1]
    unittest.main(argv=[sys.argv[0]], verbosity=2)
