"""accord-report: its errors, its numbers against check_report.py, and a real sweep.

  python3 test_report.py <accord-report> [<accord-resnet>] [MadeUpRuns | RealSweep | SimhostsSweep]

Without accord-resnet only the tests on made-up metrics files run; with it, also a
tiny sweep (Fashion-MNIST, 1 and 2 ranks, three schedules) whose report is checked,
and the same scaling runs across simulated hosts (SimhostsSweep: root, and
ACCORD_TEST_SIMHOSTS naming tests/multihost/simhosts.sh). CTest runs the classes as
separate tests.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

REPORT = os.path.abspath(sys.argv[1])
TRAINER = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 and os.path.isfile(sys.argv[2]) else None
SELECTED = sys.argv[3 if TRAINER else 2:]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_report  # noqa: E402

MODEL = "resnet18 classes=10 in=1 stem=cifar width=0.125"


def line(ranks, batch, schedule, epoch=1, seconds=10.0, images=3200, val=0.75, model=MODEL, **extra):
    obj = {"epoch": epoch, "steps": images // (ranks * batch), "skipped_steps": 0, "global_step": epoch * 10,
           "lr": 0.1, "train_loss": 0.9, "train_acc": 0.6, "val_loss": 0.7, "val_top1": val,
           "seconds": seconds, "images_per_sec": round(images / seconds, 2),
           "images_per_sec_per_rank": round(images / seconds / ranks, 2), "compute_s": 0.7 * seconds,
           "comm_wait_s": 0.1 * seconds * (ranks - 1), "data_wait_s": 0.05 * seconds, "ranks": ranks,
           "images": images, "batch_size": batch, "global_batch": ranks * batch, "schedule": schedule,
           "model": model, "dataset": "fashion-mnist", "image_size": 28, "device": "cpu"}
    obj.update(extra)
    return json.dumps(obj)


def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)


def report(*args, env=None):
    return subprocess.run([sys.executable, REPORT, *args], capture_output=True, text=True, timeout=600,
                          env=env)


# A made-up sweep's launcher (for --mpirun) starts the command as its child, as mpirun
# starts ranks; its trainer writes its pid and its parent's, then sleeps (FAKE_MODE
# sleep) or copies $FAKE_DIR/metrics to its --metrics file.
FAKE_LAUNCHER = """#!/bin/sh
shift 2  # -np N
"$@" &
wait
"""
FAKE_TRAINER = """#!{python}
import os, shutil, sys, time
d = os.environ["FAKE_DIR"]
with open(os.path.join(d, "pids.tmp"), "w") as f:
    f.write(f"{{os.getpid()}} {{os.getppid()}}")
os.rename(os.path.join(d, "pids.tmp"), os.path.join(d, "pids"))
if os.environ["FAKE_MODE"] == "sleep":
    time.sleep(60)
shutil.copy(os.path.join(d, "metrics"), sys.argv[sys.argv.index("--metrics") + 1])
"""


def alive(pid):
    """Whether pid runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(condition, seconds):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class MadeUpRuns(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="accord-report-test.")
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name, *lines):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write("".join(l + "\n" for l in lines))
        return path

    def runs(self):
        """Two epochs per run; 2 ranks at 1.6x the throughput of 1, 4 ranks at 2.4x."""
        return [self.write("r1_b32_step.jsonl", line(1, 32, "step", 1, 10.0, 3200, 0.70),
                           line(1, 32, "step", 2, 10.5, 3200, 0.78)),
                self.write("r2_b32_step.jsonl", line(2, 32, "step", 1, 6.25, 3200, 0.69),
                           line(2, 32, "step", 2, 6.25, 3200, 0.775)),
                self.write("r4_b32_step.jsonl", line(4, 32, "step", 1, 4.0, 3200, 0.66)),
                self.write("r2_b64_cosine.jsonl", line(2, 64, "cosine", 1, 5.0, 3200, 0.71)),
                self.write("r2_b64_exponential.jsonl", line(2, 64, "exponential", 1, 5.0, 3200, 0.7))]

    def test_numbers_and_check(self):
        paths, out = self.runs(), os.path.join(self.dir, "out")
        p = report("--out", out, *paths)
        self.assertEqual(p.returncode, 0, p.stderr)
        summary = json.loads(check_report.read(os.path.join(out, "summary.json")))
        step = next(g for g in summary["scaling"] if g["schedule"] == "step")
        by_ranks = {pt["ranks"]: pt for pt in step["points"]}
        # Worked by hand: 6400 images in 20.5 s; 6400 in 12.5 s; 3200 in 4 s.
        self.assertAlmostEqual(by_ranks[1]["images_per_sec"], 6400 / 20.5)
        self.assertAlmostEqual(by_ranks[2]["speedup"], 512 / (6400 / 20.5))
        self.assertAlmostEqual(by_ranks[4]["efficiency"], 800 / (6400 / 20.5) / 4)
        run2 = next(r for r in summary["runs"] if r["name"] == "r2_b32_step")
        self.assertAlmostEqual(run2["comm_share"], 0.1)
        # 4 ranks: the three timers sum to 105% of the wall time; no negative "other".
        run4 = next(r for r in summary["runs"] if r["name"] == "r4_b32_step")
        self.assertEqual(run4["other_share"], 0.0)
        self.assertAlmostEqual(run2["val_top1"], 0.775)  # the last epoch's
        self.assertEqual(check_report.check(out, paths), [])

    def test_checker_catches_a_changed_number(self):
        paths, out = self.runs(), os.path.join(self.dir, "out")
        self.assertEqual(report("--out", out, *paths).returncode, 0)
        index = os.path.join(out, "index.md")
        good = check_report.read(index)
        for old, new in [("| 2 | 64 | 512.0 |", "| 2 | 64 | 512.1 |"),   # img/s
                         ("| 1.64 | 82.0% |", "| 1.64 | 83.0% |"),          # E_G
                         ("| 10.0% | 5.0% |", "| 10.0% | 6.0% |"),          # a share
                         ("| 77.50% |", "| 78.50% |")]:                     # accuracy
            with self.subTest(change=old):
                self.assertIn(old, good)
                write(index, good.replace(old, new, 1))
                problems = check_report.check(out, paths)
                self.assertTrue(problems, f"{old} -> {new} went unnoticed")
        write(index, good)
        summary_path = os.path.join(out, "summary.json")
        summary = json.loads(check_report.read(summary_path))
        summary["scaling"][0]["points"][-1]["efficiency"] *= 1.01
        write(summary_path, json.dumps(summary))
        self.assertTrue(any("efficiency" in p for p in check_report.check(out, paths)))
        # One missing run, and one damaged plot.
        self.assertTrue(any("not in the report" in p
                            for p in check_report.check(out, paths + [self.write("extra.jsonl", line(8, 32, "step"))])))
        png = os.path.join(out, "efficiency.png")
        data = bytearray(check_report.read(png, "rb"))
        data[200] ^= 0xFF
        write(png, bytes(data), "wb")
        self.assertTrue(any(p.startswith("efficiency.png: chunk") for p in check_report.check(out, paths)))

    def fake_sweep(self, mode, pythonpath=None):
        """accord-report's command and environment for a 1-run sweep of a made-up trainer."""
        fake = os.path.join(self.dir, "fake")
        os.makedirs(fake)
        for name, text in (("launcher", FAKE_LAUNCHER), ("trainer", FAKE_TRAINER.format(python=sys.executable)),
                           ("metrics", line(1, 32, "step") + "\n")):
            write(os.path.join(fake, name), text)
            os.chmod(os.path.join(fake, name), 0o755)
        env = dict(os.environ, FAKE_DIR=fake, FAKE_MODE=mode)
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
        args = ["--out", os.path.join(self.dir, "out"), "--sweep-ranks", "1", "--batch-size", "32",
                "--schedules", "step", "--trainer", os.path.join(fake, "trainer"),
                "--mpirun", os.path.join(fake, "launcher"), "--timeout", "60"]
        return args, env, os.path.join(fake, "pids")

    def test_made_up_sweep(self):
        args, env, pids = self.fake_sweep("metrics")
        p = report(*args, env=env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("[1/1] 1 rank(s) x batch 32, step schedule", p.stdout)
        self.assertTrue(os.path.exists(pids))
        summary = json.loads(check_report.read(os.path.join(self.dir, "out", "summary.json")))
        self.assertAlmostEqual(summary["runs"][0]["images_per_sec"], 320.0)

    def test_missing_matplotlib_is_said_before_the_first_run(self):
        no_matplotlib = os.path.join(self.dir, "no-matplotlib")
        os.makedirs(os.path.join(no_matplotlib, "matplotlib"))
        write(os.path.join(no_matplotlib, "matplotlib", "__init__.py"), "raise ImportError('made up')\n")
        args, env, pids = self.fake_sweep("metrics", pythonpath=no_matplotlib)
        p = report(*args, env=env)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("the plots need matplotlib, which " + sys.executable + " cannot import", p.stderr)
        self.assertFalse(os.path.exists(pids), "a run was started")
        self.assertNotIn("[1/1]", p.stdout)

    def test_a_signal_stops_the_sweep_and_its_run(self):
        """SIGINT (Ctrl-C) and SIGTERM end the running launcher and trainer too (they
        have a session of their own), with one line and status 128 + the signal."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal=sig.name):
                shutil.rmtree(os.path.join(self.dir, "fake"), ignore_errors=True)
                args, env, pids = self.fake_sweep("sleep")
                proc = subprocess.Popen([sys.executable, REPORT, *args], env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                self.addCleanup(proc.kill)
                self.assertTrue(wait_for(lambda: os.path.exists(pids), 30), "the trainer never started")
                trainer, launcher = (int(pid) for pid in check_report.read(pids).split())
                for pid in (trainer, launcher):
                    self.addCleanup(lambda pid=pid: alive(pid) and os.kill(pid, signal.SIGKILL))
                proc.send_signal(sig)
                out, err = proc.communicate(timeout=30)
                self.assertTrue(wait_for(lambda: not alive(trainer) and not alive(launcher), 5),
                                "the run's processes survived")
                self.assertEqual(err, f"accord-report: stopped by {sig.name} during run r1_b32_step, whose "
                                      "processes it ended\n")
                self.assertEqual(proc.returncode, 128 + sig)
                self.assertTrue(out.endswith(" stopped\n"), out)

    def test_errors_name_the_file_and_value(self):
        good = self.write("good.jsonl", line(1, 32, "step"))
        binary = os.path.join(self.dir, "binary.jsonl")
        write(binary, b"\x89PNG\r\n\x1a\n\x00\xff", "wb")
        bad_json = self.write("bad.jsonl", line(1, 32, "step"), "{\"epoch\": 2,")
        old = self.write("old.jsonl", json.dumps({"epoch": 1, "seconds": 1.0}))
        other = self.write("other.jsonl", line(2, 32, "step", model="resnet50 classes=10 in=1 stem=cifar width=1"))
        mixed = self.write("mixed.jsonl", line(1, 32, "step"), line(2, 32, "step", epoch=2))
        same = self.write("same.jsonl", line(1, 32, "step"))
        os.makedirs(os.path.join(self.dir, "d"))
        cases = [([os.path.join(self.dir, "nope.jsonl")], "cannot read metrics file " + self.dir + "/nope.jsonl"),
                 ([self.write("empty.jsonl")], "empty.jsonl is empty"),
                 ([bad_json], "bad.jsonl:2: not a JSON object"),
                 ([old], "old.jsonl:1: no images, compute_s"),
                 ([good, other], "other.jsonl has model 'resnet50"),
                 ([mixed], "mixed.jsonl:2: ranks is 2 but 1 on the first line"),
                 ([good, same], "good.jsonl and " + same + " are both 1 rank(s) x batch 32"),
                 (["--sweep-ranks", "1,x"], "--sweep-ranks '1,x': expected positive integers"),
                 (["--sweep-ranks", "0,2"], "0 is not a positive integer"),
                 (["--sweep-ranks", "2", "--sweep-batch", "33"], "global batch 33 does not divide among 2 ranks"),
                 (["--sweep-ranks", "1", "--schedules", "step,linear"], "unknown schedule 'linear'"),
                 (["--sweep-ranks", "1", "--", "--batch-size", "8"], "trainer argument --batch-size"),
                 (["--sweep-ranks", "1", "--trainer", self.dir], "--trainer " + self.dir + ": not an executable"),
                 ([binary], f"metrics file {binary} is not text (byte 0 is 0x89, not UTF-8)"),
                 (["--out", "/proc/x", good], "--out /proc/x: cannot create /proc/x: "),
                 (["--out", "/proc/x", "--sweep-ranks", "1", "--trainer", sys.executable],
                  "--out /proc/x: cannot create /proc/x: "),
                 (["--out", good, good], f"--out {good}: {good} exists and is not a directory"),
                 ([], "nothing to report")]
        for args, message in cases:
            with self.subTest(args=args):
                p = report("--out", os.path.join(self.dir, "out"), *args)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertIn(message, p.stderr)
                self.assertNotIn("Traceback", p.stderr)


@unittest.skipUnless(TRAINER, "no accord-resnet given")
def checked_sweep(test, out, runs):
    """The metrics files of a sweep's `runs` runs in `out`, after check_report found the
    report true to them."""
    runs_dir = os.path.join(out, "runs")
    metrics = sorted(os.path.join(runs_dir, f) for f in os.listdir(runs_dir) if f.endswith(".jsonl"))
    test.assertEqual(len(metrics), runs)
    test.assertEqual(check_report.check(out, metrics), [])
    return metrics


class RealSweep(unittest.TestCase):
    def test_tiny_sweep(self):
        out = tempfile.mkdtemp(prefix="accord-report-sweep.")
        self.addCleanup(shutil.rmtree, out)
        # Two global batches x three schedules at 2 ranks, plus the 1-rank scaling run:
        # 7 runs of 6 steps on 2 cores. Each evaluates on the 10,000 test images.
        p = report("--out", out, "--sweep-ranks", "1,2", "--batch-size", "16", "--sweep-batch", "32,64",
                   "--schedules", "step,cosine,exponential", "--trainer", TRAINER, "--timeout", "120",
                   "--mpirun", os.environ.get("ACCORD_TEST_MPIRUN", "mpirun"), "--",
                   "--steps", "6", "--train-limit", "512", "--threads", "1",
                   "--warmup-epochs", "0", "--milestones", "0.5", "--gamma", "0.5", "--seed", "7")
        print(p.stdout, p.stderr, sep="\n")
        self.assertEqual(p.returncode, 0)
        self.assertIn("[7/7] 2 rank(s) x batch 32, exponential schedule", p.stdout)
        metrics = checked_sweep(self, out, 7)
        summary = json.loads(check_report.read(os.path.join(out, "summary.json")))
        self.assertEqual(sorted(s["schedule"] for s in summary["accuracy"] if s["ranks"] == 2),
                         ["cosine", "exponential", "step"])


class SimhostsSweep(unittest.TestCase):
    """The scaling runs across simulated hosts, one rank per host (--simhosts; root)."""

    def test_sweep_across_simulated_hosts(self):
        simhosts = os.environ.get("ACCORD_TEST_SIMHOSTS")
        if not simhosts:
            self.fail("ACCORD_TEST_SIMHOSTS must name tests/multihost/simhosts.sh")
        out = tempfile.mkdtemp(prefix="accord-report-simhosts.")
        self.addCleanup(shutil.rmtree, out)
        p = report("--out", out, "--sweep-ranks", "1,2", "--batch-size", "16", "--schedules", "step",
                   "--simhosts", simhosts, "--trainer", TRAINER, "--timeout", "120", "--",
                   "--steps", "6", "--train-limit", "512", "--threads", "1", "--warmup-epochs", "0",
                   "--seed", "7")
        print(p.stdout, p.stderr, sep="\n")
        if p.returncode != 0 and "skipped: " in p.stdout + p.stderr:
            self.skipTest("simhosts.sh cannot make hosts here")
        self.assertEqual(p.returncode, 0)
        self.assertIn("[2/2] 2 rank(s) x batch 16", p.stdout)
        metrics = checked_sweep(self, out, 2)
        ranks = sorted(json.loads(check_report.read(m).splitlines()[-1])["ranks"] for m in metrics)
        self.assertEqual(ranks, [1, 2])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + SELECTED, verbosity=2)
