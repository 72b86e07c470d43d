"""accordrun's command lines, errors and a real run (standard library unittest).

  python3 test_accordrun.py <built accordrun> <an mpi test binary>
"""
import importlib.machinery
import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout
from unittest import mock

ACCORDRUN, MPI_PROGRAM = sys.argv[1], sys.argv[2]
loader = importlib.machinery.SourceFileLoader("accordrun", ACCORDRUN)
spec = importlib.util.spec_from_loader("accordrun", loader)
ar = importlib.util.module_from_spec(spec)
loader.exec_module(ar)


def command(argv, environ=None):
    """(argv, env) accordrun would run for `argv`, or the UsageError's message."""
    captured = {}

    def fake_exec(path, cmd, env):
        captured["cmd"], captured["env"] = cmd, env
        raise SystemExit(0)

    with mock.patch.dict(os.environ, environ or {}, clear=False), \
         mock.patch.object(ar.os, "execvpe", fake_exec), \
         mock.patch.object(ar.shutil, "which", lambda name: "/usr/bin/" + name):
        # Only where the test sets it (ci/sanitize.sh sets it for the whole suite).
        if "OMPI_MCA_mca_base_env_list" not in (environ or {}):
            os.environ.pop("OMPI_MCA_mca_base_env_list", None)
        try:
            rc = ar.main(argv)
        except SystemExit as e:
            rc = e.code
    return rc, captured.get("cmd"), captured.get("env")


class HostLists(unittest.TestCase):
    def test_hosts_and_slots(self):
        self.assertEqual(ar.parse_hosts("a:2,b.example.org:4,c"), [("a", 2), ("b.example.org", 4), ("c", 1)])
        # As Open MPI: a host named again adds its slots ('a,a' is a:2).
        self.assertEqual(ar.parse_hosts("localhost,localhost"), [("localhost", 2)])
        self.assertEqual(ar.parse_hosts("a:1,b,a:2"), [("a", 3), ("b", 1)])

    def test_bad_hosts_name_the_item(self):
        for text, part in [("a:2,b:", "bad host 'b:'"), ("a:0", "has 0 slots"), ("a:x", "bad host 'a:x'"),
                           ("", "bad host ''")]:
            with self.subTest(text=text):
                with self.assertRaises(ar.UsageError) as e:
                    ar.parse_hosts(text)
                self.assertIn(part, str(e.exception))

    def test_hostfile(self):
        with tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False) as f:
            f.write("# cluster\nnode1 slots=4\n\nnode2 slots=2 max_slots=8\nnode3 max_slots=8 slots=3\nnode4\n")
        # A line without slots=: Open MPI counts the host's cores (None here).
        self.assertEqual(ar.parse_hostfile(f.name), [("node1", 4), ("node2", 2), ("node3", 3), ("node4", None)])
        for text, part in [("node1 slots=4\nnode2 slots=zero\n", ":2: expected"),
                           ("node1 slots=2\nnode1 slots=2\n", ":2: host 'node1' is listed again")]:
            with open(f.name, "w") as g:
                g.write(text)
            with self.assertRaises(ar.UsageError) as e:
                ar.parse_hostfile(f.name)
            self.assertIn(f"{f.name}{part}", str(e.exception))
        os.unlink(f.name)
        with self.assertRaises(ar.UsageError) as e:
            ar.parse_hostfile(f.name)
        self.assertIn("cannot read hostfile", str(e.exception))


class CommandLines(unittest.TestCase):
    def test_variables_join_an_mca_env_list_instead_of_x(self):
        # Open MPI refuses -x beside mca_base_env_list.
        rc, cmd, env = command(["-np", "2", "prog"], {"OMPI_MCA_mca_base_env_list": "LD_PRELOAD=/x.so",
                                                      "ACCORD_LOG_LEVEL": "info"})
        self.assertEqual(rc, 0)
        self.assertNotIn("-x", cmd)
        items = env["OMPI_MCA_mca_base_env_list"].split(";")
        self.assertEqual(items[0], "LD_PRELOAD=/x.so")
        self.assertIn("ACCORD_LOG_LEVEL", items)

    def test_mpirun_with_hosts_settings_and_forwarded_variables(self):
        rc, cmd, env = command(["-np", "4", "-H", "a:2,b:2", "--cycle-time", "2", "--no-shared-memory",
                                "python3", "train.py", "--lr", "0.1"],
                               {"HOROVOD_FUSION_THRESHOLD": "1", "ACCORD_LOG_LEVEL": "info"})
        self.assertEqual(rc, 0)
        self.assertEqual(cmd[:5], ["mpirun", "-np", "4", "-H", "a:2,b:2"])
        self.assertEqual(cmd[-4:], ["python3", "train.py", "--lr", "0.1"])
        for var in ["ACCORD_CYCLE_TIME", "ACCORD_SHARED_MEMORY", "ACCORD_LOG_LEVEL", "HOROVOD_FUSION_THRESHOLD"]:
            self.assertIn(var, cmd[cmd.index("-x", 0):])
        self.assertEqual(env["ACCORD_CYCLE_TIME"], "2")
        self.assertEqual(env["ACCORD_SHARED_MEMORY"], "0")
        self.assertEqual("--allow-run-as-root" in cmd, os.geteuid() == 0)

    def test_timeline_and_autotune_flags(self):
        rc, cmd, env = command(["-np", "2", "--timeline", "t.json", "--autotune", "--autotune-log", "a.csv",
                                "--fusion-threshold", "4M", "--carry-bytes", "0", "prog"], {})
        self.assertEqual(rc, 0)
        self.assertEqual(env["ACCORD_TIMELINE"], os.path.abspath("t.json"))
        self.assertEqual(env["ACCORD_AUTOTUNE"], "1")
        self.assertEqual(env["ACCORD_AUTOTUNE_LOG"], os.path.abspath("a.csv"))
        self.assertEqual(env["ACCORD_FUSION_THRESHOLD"], "4M")
        self.assertEqual(env["ACCORD_CARRY_BYTES"], "0")
        for var in ["ACCORD_TIMELINE", "ACCORD_AUTOTUNE", "ACCORD_AUTOTUNE_LOG"]:
            self.assertIn(var, cmd)
        rc, _, _ = command(["-np", "2", "--autotune-log", "a.csv", "prog"], {})
        self.assertEqual(rc, 2)
        # ... unless the environment turns autotune on.
        for var in ("ACCORD_AUTOTUNE", "HOROVOD_AUTOTUNE"):
            rc, _, env = command(["-np", "2", "--autotune-log", "a.csv", "prog"], {var: "1"})
            self.assertEqual(rc, 0)
            self.assertEqual(env["ACCORD_AUTOTUNE_LOG"], os.path.abspath("a.csv"))

    def test_a_flag_replaces_horovods_name_of_its_setting(self):
        rc, cmd, env = command(["-np", "2", "--cycle-time", "1", "--timeline", "t.json", "prog"],
                               {"HOROVOD_CYCLE_TIME": "5", "HOROVOD_TIMELINE": "other.json",
                                "HOROVOD_FUSION_THRESHOLD": "1M"})
        self.assertEqual(rc, 0)
        self.assertEqual(env["ACCORD_CYCLE_TIME"], "1")
        self.assertNotIn("HOROVOD_CYCLE_TIME", env)
        self.assertNotIn("HOROVOD_TIMELINE", env)
        self.assertEqual(env["HOROVOD_FUSION_THRESHOLD"], "1M")  # no flag given for it
        self.assertNotIn("HOROVOD_CYCLE_TIME", cmd)

    def test_a_hostfile_without_slots_goes_to_mpirun_as_it_is(self):
        with tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False) as f:
            f.write("localhost\n")
        self.addCleanup(os.unlink, f.name)
        rc, cmd, _ = command(["-np", "2", "--hostfile", f.name, "prog"], {})
        self.assertEqual(rc, 0)
        self.assertEqual(cmd[cmd.index("--hostfile") + 1], os.path.abspath(f.name))
        self.assertNotIn("-H", cmd)

    def test_srun_inside_slurm(self):
        rc, cmd, _ = command(["-np", "8", "prog"], {"SLURM_JOB_ID": "42"})
        self.assertEqual(rc, 0)
        self.assertEqual(cmd[0], "srun")
        self.assertIn("8", cmd)

    def test_errors_exit_2_with_the_reason(self):
        cases = [(["-np", "5", "-H", "a:2,b:2", "prog"], "more than the 4 slots"),
                 (["-np", "0", "prog"], "-np 0"),
                 (["--launcher", "srun", "-H", "a:2", "prog"], "drop -H"),
                 (["--launcher", "srun", "--mpi-args", "--mca btl tcp", "prog"], "--mpi-args is for mpirun"),
                 (["--launcher", "srun", "--oversubscribe", "prog"], "--oversubscribe is for mpirun"),
                 (["-H", "a:2,,b", "prog"], "bad host ''")]
        for argv, part in cases:
            with self.subTest(argv=argv):
                err = io.StringIO()
                with mock.patch.object(sys, "stderr", err):
                    rc, cmd, _ = command(argv)
                self.assertEqual(rc, 2)
                self.assertIsNone(cmd)
                self.assertIn(part, err.getvalue())

    def test_unknown_option_and_missing_program(self):
        for argv in (["--bogus", "prog"], ["-np", "2"]):
            with self.subTest(argv=argv):
                with mock.patch.object(sys, "stderr", io.StringIO()):
                    rc, cmd, _ = command(argv)
                self.assertEqual(rc, 2)
                self.assertIsNone(cmd)

    def test_dry_run_prints_instead_of_running(self):
        out = io.StringIO()
        with redirect_stdout(out):
            rc, cmd, _ = command(["--dry-run", "--stall-shutdown-time", "30", "-np", "2", "prog"])
        self.assertEqual(rc, 0)
        self.assertIsNone(cmd)
        self.assertRegex(out.getvalue(), r"^ACCORD_STALL_SHUTDOWN_TIME=30 mpirun -np 2 .*-x ACCORD_STALL_SHUTDOWN_TIME.* prog\n$")


class RealRuns(unittest.TestCase):
    def test_check_build(self):
        out = subprocess.run([ACCORDRUN, "--check-build"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        for key in ("MPI", "CUDA", "NCCL", "oneDNN", "Python bindings"):
            self.assertRegex(out.stdout, rf"\n  {key} +\S")

    def test_a_job_on_two_ranks(self):
        out = subprocess.run([ACCORDRUN, "-np", "2", "--oversubscribe", "--stall-shutdown-time", "60",
                              MPI_PROGRAM], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("2 rank(s), 0 failure(s)", out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
