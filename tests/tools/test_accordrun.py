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


def hostfile(test, data):
    """A hostfile holding `data` (bytes or text), removed after `test`."""
    with tempfile.NamedTemporaryFile("wb", suffix=".hosts", delete=False) as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    test.addCleanup(os.unlink, f.name)
    return f.name


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

    def test_elastic_driver_variables_join_an_mca_env_list_too(self):
        # The elastic driver's own variables (ACCORDRUN_ELASTIC_*) went by -x regardless,
        # and mpirun refused every run of the job.
        out = io.StringIO()
        with tempfile.TemporaryDirectory() as store, redirect_stdout(out):
            rc, _, _ = command(["--dry-run", "--min-np", "1", "-np", "2", "-H", "localhost:2",
                                "--elastic-store", store, "prog"],
                               {"OMPI_MCA_mca_base_env_list": "LD_PRELOAD=/x.so"})
        self.assertEqual(rc, 0)
        self.assertNotIn(" -x ", out.getvalue())
        self.assertRegex(out.getvalue(), r"OMPI_MCA_mca_base_env_list='LD_PRELOAD=/x\.so;"
                                         r"[^']*ACCORDRUN_ELASTIC_JOB;[^']*ACCORDRUN_ELASTIC_STORE'")

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
        path = hostfile(self, "localhost\n")
        rc, cmd, _ = command(["-np", "2", "--hostfile", path, "prog"], {})
        self.assertEqual(rc, 0)
        self.assertEqual(cmd[cmd.index("--hostfile") + 1], os.path.abspath(path))
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


class HorovodrunLines(unittest.TestCase):
    """horovodrun's command line: a Horovod job's launch line with horovodrun changed to
    accordrun."""

    def error(self, argv, environ=None):
        err = io.StringIO()
        with mock.patch.object(sys, "stderr", err):
            rc, cmd, _ = command(argv, environ)
        self.assertEqual(rc, 2, argv)
        self.assertIsNone(cmd)
        return err.getvalue()

    def test_tunables_in_horovods_units_set_accords_settings(self):
        rc, cmd, env = command(["--num-proc", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
                                "--cache-capacity", "0", "--timeline-filename", "t.json", "--autotune",
                                "--autotune-log-file", "a.csv", "--stall-check-warning-time-seconds", "30",
                                "--stall-check-shutdown-time-seconds", "120", "--log-level", "WARNING",
                                "python3", "train.py"], {"HOROVOD_FUSION_THRESHOLD": "1"})
        self.assertEqual(rc, 0)
        self.assertEqual(cmd[:3], ["mpirun", "-np", "2"])
        self.assertEqual(cmd[-2:], ["python3", "train.py"])
        expected = {"ACCORD_FUSION_THRESHOLD": "32M", "ACCORD_CYCLE_TIME": "2.5", "ACCORD_CACHE_CAPACITY": "0",
                    "ACCORD_TIMELINE": os.path.abspath("t.json"), "ACCORD_AUTOTUNE": "1",
                    "ACCORD_AUTOTUNE_LOG": os.path.abspath("a.csv"), "ACCORD_STALL_CHECK_TIME": "30",
                    "ACCORD_STALL_SHUTDOWN_TIME": "120", "ACCORD_LOG_LEVEL": "WARNING"}
        for var, value in expected.items():
            self.assertEqual(env.get(var), value, var)
            self.assertIn(var, cmd)
        self.assertNotIn("HOROVOD_FUSION_THRESHOLD", env)  # the flag wins, as Accord's own

    def test_hierarchical_allreduce_is_a_switch_or_takes_a_value(self):
        for argv, value in ((["--hierarchical-allreduce", "python3", "t.py"], "1"),
                            (["--hierarchical-allreduce", "-np", "2", "python3", "t.py"], "1"),
                            (["--hierarchical-allreduce", "2", "python3", "t.py"], "2"),
                            (["--hierarchical-allreduce=0", "python3", "t.py"], "0"),
                            (["--no-hierarchical-allreduce", "python3", "t.py"], "0"),
                            (["--log-level", "info", "--hierarchical-allreduce", "python3", "t.py"], "1"),
                            (["--mpi-args=--hierarchical-allreduce", "python3", "t.py"], None),
                            (["python3", "t.py", "--hierarchical-allreduce"], None)):
            with self.subTest(argv=argv):
                rc, cmd, env = command(argv, {})
                self.assertEqual(rc, 0)
                self.assertEqual(env.get("ACCORD_HIERARCHICAL_ALLREDUCE"), value)
                self.assertEqual(cmd[-2:] if argv[-1] == "t.py" else cmd[-3:], argv[argv.index("python3"):])
        # A number is accordrun's value, checked as such.
        self.assertIn("ACCORD_HIERARCHICAL_ALLREDUCE='3'", self.error(["--hierarchical-allreduce", "3", "prog"]))

    def test_settings_without_a_counterpart_set_horovods_variables(self):
        rc, cmd, env = command(["-np", "2", "--no-stall-check", "--torus-allreduce", "--num-nccl-streams", "2",
                                "--log-without-timestamp", "--autotune-warmup-samples", "3",
                                "--stall-check", "--no-torus-allreduce", "prog"], {})
        self.assertEqual(rc, 0)
        for var, value in (("HOROVOD_STALL_CHECK_DISABLE", "1"), ("HOROVOD_TORUS_ALLREDUCE", "1"),
                           ("HOROVOD_NUM_NCCL_STREAMS", "2"), ("HOROVOD_LOG_HIDE_TIME", "1"),
                           ("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "3")):
            self.assertEqual(env.get(var), value, var)
            self.assertEqual(cmd[cmd.index(var) - 1], "-x")
        self.assertNotIn("HOROVOD_HIERARCHICAL_ALLGATHER", env)

    def test_launcher_flags_become_mpiruns(self):
        rc, cmd, env = command(["-np", "2", "-H", "a:1,b:1", "--network-interfaces", "eth0,ib0", "-p", "2222",
                                "-i", "/keys/id_rsa", "--tcp", "--binding-args", "--bind-to socket --map-by socket",
                                "-prefix-timestamp", "--output-filename", "logs", "--disable-cache",
                                "--start-timeout", "60", "--mpi", "prog"], {})
        self.assertEqual(rc, 0)
        line = " ".join(cmd)
        for part in ("--mca btl_tcp_if_include eth0,ib0 --mca oob_tcp_if_include eth0,ib0",
                     "--mca plm_rsh_args -p 2222 -i /keys/id_rsa", "--mca pml ob1 --mca btl self,vader,tcp",
                     "--bind-to socket --map-by socket", "--timestamp-output",
                     f"--output-filename {os.path.abspath('logs')}", "-x NCCL_SOCKET_IFNAME"):
            self.assertIn(part, line)
        self.assertNotIn("--bind-to none", line)
        self.assertEqual(env["NCCL_SOCKET_IFNAME"], "eth0,ib0")
        self.assertEqual(cmd[-1], "prog")
        # Inside a SLURM allocation the interfaces reach the ranks as variables.
        rc, cmd, env = command(["--network-interface", "eth1", "prog"], {"SLURM_JOB_ID": "7"})
        self.assertEqual(rc, 0)
        self.assertEqual(cmd[0], "srun")
        self.assertEqual((env["OMPI_MCA_btl_tcp_if_include"], env["NCCL_SOCKET_IFNAME"]), ("eth1", "eth1"))

    def test_horovodrun_spellings_of_accordruns_flags(self):
        rc, cmd, _ = command(["--num-proc", "4", "-hostfile", hostfile(self, "a slots=2\nb slots=2\n"), "prog"], {})
        self.assertEqual(rc, 0)
        self.assertEqual(cmd[:5], ["mpirun", "-np", "4", "-H", "a:2,b:2"])
        out = io.StringIO()
        with redirect_stdout(out):
            rc, cmd, _ = command(["--dry-run", "--min-num-proc", "1", "--max-num-proc", "2", "-H", "localhost:2",
                                  "prog"], {})
        self.assertEqual(rc, 0)
        self.assertRegex(out.getvalue(), r"mpirun -np 2 -H localhost:2 .* prog\n")
        out = io.StringIO()
        with redirect_stdout(out):
            rc, _, _ = command(["-v"])
        self.assertEqual((rc, out.getvalue()), (0, f"accordrun (Accord {ar.VERSION})\n"))
        self.assertRegex(ar.VERSION, r"^[0-9]+\.[0-9]+\.[0-9]+$")

    def test_gloo_runs_over_mpi_with_a_note(self):
        err = io.StringIO()
        with mock.patch.object(sys, "stderr", err):
            rc, cmd, _ = command(["-np", "2", "--gloo", "prog"], {})
        self.assertEqual(rc, 0)
        self.assertEqual(cmd[0], "mpirun")
        self.assertIn("--gloo: Accord runs over MPI; the job starts with mpirun", err.getvalue())

    def test_what_accordrun_cannot_do_is_refused_with_the_reason(self):
        cases = [(["--jsrun", "prog"], "--jsrun: Accord starts its ranks with mpirun or srun"),
                 (["--config-file", "c.yaml", "prog"], "--config-file c.yaml: accordrun does not read"),
                 (["--fusion-threshold-mb", "8", "--fusion-threshold", "1M", "prog"],
                  "--fusion-threshold-mb and --fusion-threshold set the same setting"),
                 (["--fusion-threshold-mb", "-1", "prog"], "--fusion-threshold-mb -1: expected 0 or more MiB"),
                 (["--fusion-threshold-mb", "5000", "prog"],
                  "--fusion-threshold-mb (as --fusion-threshold): ACCORD_FUSION_THRESHOLD='5000M'"),
                 (["--cycle-time-ms", "fast", "prog"],
                  "--cycle-time-ms (as --cycle-time): ACCORD_CYCLE_TIME='fast'"),
                 (["-np", "2", "--min-np", "1", "-H", "a:2", "--elastic-timeout", "-5", "prog"],
                  "--elastic-timeout -5: expected seconds, 0 or more"),
                 (["-np", "2", "--min-np", "1", "-H", "a:2", "--discovery-interval", "0", "prog"],
                  "--discovery-interval 0: expected seconds above 0"),
                 (["--ssh-port", "0", "prog"], "--ssh-port 0: expected a port from 1 to 65535"),
                 (["-i", "/keys/id rsa", "prog"], "--ssh-identity-file '/keys/id rsa': Open MPI splits"),
                 (["--network-interfaces", "eth0;reboot", "prog"], "--network-interfaces 'eth0;reboot'"),
                 (["--binding-args", "--bind-to 'core", "prog"], "--binding-args"),
                 (["--launcher", "srun", "--output-filename", "d", "prog"], "--output-filename is for mpirun"),
                 (["--launcher", "srun", "-p", "22", "prog"], "--ssh-port is for mpirun")]
        for argv, part in cases:
            with self.subTest(argv=argv):
                self.assertIn(part, self.error(argv, {}))


class SettingFlags(unittest.TestCase):
    """accordrun's setting flags come from the table of settings (runtime/settings.def)
    through accord-settings: every setting has its flag, and each flag's value is
    checked as init() checks it, before mpirun starts."""

    # Settings that are the same for every rank of a job have a flag; these are set per
    # rank, where a launcher flag would give every rank the same value.
    PER_RANK = {"ACCORD_HOSTNAME"}

    def table(self):
        return ar.settings_table()

    def test_the_table_names_every_setting_once(self):
        names = [s["name"] for s in self.table()]
        self.assertEqual(len(names), len(set(names)))
        for name in ("ACCORD_FUSION_THRESHOLD", "ACCORD_CYCLE_TIME", "ACCORD_TIMELINE", "ACCORD_AUTOTUNE_LOG"):
            self.assertIn(name, names)

    def test_every_setting_has_its_flag(self):
        for setting in self.table():
            with self.subTest(setting=setting["name"]):
                flag = ar.flag_of(setting)
                if setting["name"] in self.PER_RANK:
                    self.assertIsNone(flag)
                    continue
                self.assertIsNotNone(flag, "a setting of the whole job without an accordrun flag")
                argv = ["-np", "2", flag[0]]
                if flag[1] is None:
                    argv.append(setting["example"])
                if setting["autotune_only"]:
                    argv.append("--autotune")
                environ = {setting["horovod"]: setting["example"] or "1"} if setting["horovod"] else {}
                rc, cmd, env = command(argv + ["prog"], environ)
                self.assertEqual(rc, 0)
                wanted = flag[1] if flag[1] is not None else setting["example"]
                if setting["kind"] == "path":
                    wanted = os.path.abspath(wanted)
                self.assertEqual(env[setting["name"]], wanted)
                self.assertIn(setting["name"], cmd)
                if setting["horovod"]:
                    self.assertNotIn(setting["horovod"], env)  # the flag replaces Horovod's name
                # Listed in --help with the variable it sets.
                out = io.StringIO()
                with redirect_stdout(out):
                    command(["--help"])
                self.assertRegex(out.getvalue(), rf"{flag[0]}\b.*\n?.*{setting['name']}")

    def test_settings_check_warns_of_what_init_ignores(self):
        out = subprocess.run([ar.SETTINGS_TOOL, "--check", "ACCORD_FUSION_THRESHOLDD=1M",
                              "HOROVOD_HIERARCHICAL_ALLGATHER=1", "ACCORD_CYCLE_TIME=1"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)  # init() runs on: a warning, not an error
        self.assertIn("warning: ACCORD_FUSION_THRESHOLDD is not an Accord variable; init() ignores it",
                      out.stderr)
        self.assertIn("warning: HOROVOD_HIERARCHICAL_ALLGATHER is a Horovod setting Accord does not read",
                      out.stderr)
        self.assertNotIn("ACCORD_CYCLE_TIME", out.stderr)

    def test_a_bad_value_is_refused_before_mpirun_with_inits_message(self):
        for setting in self.table():
            flag = ar.flag_of(setting)
            if flag is None or flag[1] is not None or setting["kind"] in ("path", "list"):
                continue
            # A word after it is the program: horovodrun's --hierarchical-allreduce is a
            # switch (HorovodrunLines).
            bogus = "7" if flag[0] == "--hierarchical-allreduce" else "bogus"
            with self.subTest(flag=flag[0]):
                err = io.StringIO()
                with mock.patch.object(sys, "stderr", err):
                    tuning = ["--autotune"] if setting["autotune_only"] else []
                    rc, cmd, _ = command(["-np", "2", flag[0], bogus] + tuning + ["prog"])
                self.assertEqual(rc, 2)
                self.assertIsNone(cmd)
                self.assertEqual(err.getvalue(), f"accordrun: {flag[0]}: {setting['name']}='{bogus}': expected "
                                                 f"{setting['expected']}\n")
        err = io.StringIO()
        with mock.patch.object(sys, "stderr", err):
            rc, cmd, _ = command(["-np", "2", "--fusion-threshold", "abc", "prog"])
        self.assertEqual((rc, cmd), (2, None))
        self.assertEqual(err.getvalue(), "accordrun: --fusion-threshold: ACCORD_FUSION_THRESHOLD='abc': expected "
                                         "bytes between 0 and 4294967296 (4G), suffixes K, M, G; 0 disables fusion\n")
        for argv, part in [(["--stall-shutdown-time", "0.0004"], "below the resolution of 1 millisecond"),
                           (["--autotune", "--autotune-start", "ACCORD_CACHE_CAPACITY=1"],
                            "--autotune-start: ACCORD_AUTOTUNE_START='ACCORD_CACHE_CAPACITY=1': expected"),
                           (["--autotune", "--cycle-time", "1", "--autotune-start", "ACCORD_CYCLE_TIME=2"],
                            "--autotune-start: ACCORD_AUTOTUNE_START names ACCORD_CYCLE_TIME, which is also set"),
                           (["--autotune-steps", "3"], "--autotune-steps needs --autotune (or ACCORD_AUTOTUNE=1)")]:
            with self.subTest(argv=argv):
                err = io.StringIO()
                with mock.patch.object(sys, "stderr", err):
                    rc, cmd, _ = command(["-np", "2"] + argv + ["prog"])
                self.assertEqual((rc, cmd), (2, None))
                self.assertIn(part, err.getvalue())
        # Good values pass, in any spelling init() takes.
        rc, _, env = command(["-np", "2", "--fusion-threshold", "2MiB", "--log-level", "WARNING", "prog"])
        self.assertEqual(rc, 0)
        self.assertEqual(env["ACCORD_FUSION_THRESHOLD"], "2MiB")


class LauncherInput(unittest.TestCase):
    """What a user may hand accordrun by mistake ends in a message, never a traceback, and
    nothing mpirun cannot count reaches it."""

    def error(self, argv):
        err = io.StringIO()
        with mock.patch.object(sys, "stderr", err):
            rc, cmd, _ = command(argv)
        self.assertEqual(rc, 2, err.getvalue())
        self.assertIsNone(cmd)
        return err.getvalue()

    def test_a_hostfile_that_is_not_text(self):
        for data in (b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00", b"node1 slots=2\n\x00\x00\x00\n"):
            with self.subTest(data=data):
                path = hostfile(self, data)
                self.assertIn(f"hostfile '{path}' is not text", self.error(["--hostfile", path, "prog"]))

    def test_mpi_args_with_an_unclosed_quote(self):
        message = self.error(["-np", "2", "--mpi-args", "--mca btl 'tcp,self", "prog"])
        self.assertIn("accordrun: --mpi-args \"--mca btl 'tcp,self\": No closing quotation", message)

    def test_slot_counts_past_what_mpirun_counts(self):
        huge = "99999999999999999999"
        path = hostfile(self, f"node1 slots={huge}\n".encode())
        self.assertIn(f"{path}:1: expected", self.error(["--hostfile", path, "prog"]))
        path = hostfile(self, b"node1 slots=2 max_slots=2147483648\n")
        self.assertIn(f"{path}:1: expected", self.error(["--hostfile", path, "prog"]))
        self.assertIn(f"has {huge} slots: expected 1 to 2147483647", self.error(["-H", f"a:{huge}", "prog"]))
        self.assertIn("more than mpirun counts", self.error(["-H", "a:2147483647,b:2", "prog"]))
        self.assertIn(f"-np {huge}: expected 1 to 2147483647", self.error(["-np", huge, "prog"]))
        # The largest counts still go through.
        rc, cmd, _ = command(["-np", "2", "-H", "a:2147483647", "prog"])
        self.assertEqual(rc, 0)
        self.assertIn("a:2147483647", cmd)


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

    def test_a_horovodrun_line_on_two_ranks(self):
        # Every HOROVOD_ variable accordrun sets for horovodrun's flags is one rank 0
        # names at init, with what Accord does instead.
        flags = []
        for flag, (var, metavar) in ar.HOROVODRUN_VARIABLES.items():
            flags += [flag] if metavar is None else [flag, "1"]
        out = subprocess.run([ACCORDRUN, "--num-proc", "2", "--oversubscribe", "--fusion-threshold-mb", "1",
                              "--cycle-time-ms", "1", "--verbose"] + flags + [MPI_PROGRAM],
                             capture_output=True, text=True, timeout=120)
        text = out.stdout + out.stderr
        self.assertEqual(out.returncode, 0, text)
        self.assertIn("2 rank(s), 0 failure(s)", text)
        self.assertRegex(out.stderr, r"accordrun: mpirun -np 2 .*-x ACCORD_FUSION_THRESHOLD")
        for var, _ in set(ar.HOROVODRUN_VARIABLES.values()):
            self.assertIn(f"{var} is a Horovod setting Accord does not read", text)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
