"""The GPU check's planning, where no GPU is needed: the order in which
tools/resnet_gpu_bench.py spends a --budget, its time estimates, its trainer runs cut
at the budget, and the arguments ci/gpu-check.sh and the benchmark refuse.

  python3 test_gpu_check.py <source dir> <accord-resnet>
"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE = os.path.abspath(sys.argv[1])
TRAINER = os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(SOURCE, "tools"))
import resnet_gpu_bench as bench  # noqa: E402

RUNS = [("resnet50", 128), ("resnet50", 256), ("resnet152", 128)]


class Plan(unittest.TestCase):
    def test_the_default_comparison_comes_first_for_every_pair(self):
        order = bench.plan(RUNS, "both", "bf16")
        self.assertEqual(order[:6], [(RUNS[0], "torch_eager"), (RUNS[0], "accord_graphs"),
                                     (RUNS[1], "torch_eager"), (RUNS[1], "accord_graphs"),
                                     (RUNS[2], "torch_eager"), (RUNS[2], "accord_graphs")])
        kinds = [key for _, key in order[6:]]
        self.assertEqual(kinds, ["torch_compile"] * 3 + ["accord_fusion"] * 3 + ["accord"] * 3)

    def test_every_measurement_once(self):
        for compile_mode, precision, per_pair in [("both", "bf16", 5), ("off", "bf16", 4),
                                                  ("on", "fp16", 4), ("off", "fp32", 3)]:
            order = bench.plan(RUNS, compile_mode, precision)
            self.assertEqual(len(order), len(set(order)), (compile_mode, precision))
            self.assertEqual(len(order), per_pair * len(RUNS), (compile_mode, precision))
        self.assertNotIn("accord_fusion", [k for _, k in bench.plan(RUNS, "both", "fp32")])
        self.assertNotIn("torch_eager", [k for _, k in bench.plan(RUNS, "on", "bf16")])
        self.assertNotIn("torch_compile", [k for _, k in bench.plan(RUNS, "off", "bf16")])

    def test_skipped_modes_are_left_out_and_the_rest_keep_their_order(self):
        order = bench.plan(RUNS, "both", "bf16", ["layers", "fusion"])
        kinds = [key for _, key in order]
        self.assertEqual(kinds, ["torch_eager", "accord_graphs"] * 3 + ["torch_compile"] * 3)


class Estimates(unittest.TestCase):
    def test_first_guess_then_scaled_by_work(self):
        self.assertEqual(bench.expected_seconds("accord", RUNS[0], {}),
                         bench.FIRST_GUESS_S["accord"])
        spent = {(RUNS[0], "accord"): 10.0, (RUNS[0], "torch_eager"): 4.0}
        self.assertAlmostEqual(bench.expected_seconds("accord", RUNS[1], spent), 20.0)
        ratio = 128 * bench.train_gflop("resnet152") / (128 * bench.train_gflop("resnet50"))
        self.assertAlmostEqual(bench.expected_seconds("accord", RUNS[2], spent), 10.0 * ratio)
        self.assertAlmostEqual(bench.expected_seconds("torch_eager", RUNS[1], spent), 8.0)
        # A kind not timed yet keeps its first guess, unless the trainer's graphed steps
        # were timed: its other modes then follow from those.
        self.assertEqual(bench.expected_seconds("accord_fusion", RUNS[1], spent),
                         bench.FIRST_GUESS_S["accord_fusion"])
        self.assertEqual(bench.expected_seconds("torch_compile", RUNS[1], spent),
                         bench.FIRST_GUESS_S["torch_compile"])
        spent[(RUNS[0], "accord_graphs")] = 6.0
        self.assertAlmostEqual(bench.expected_seconds("accord_fusion", RUNS[1], spent),
                               bench.AFTER_GRAPHS["accord_fusion"] * 12.0)
        self.assertAlmostEqual(bench.expected_seconds("accord", RUNS[0], spent), 10.0)

    def test_a_compilation_does_not_scale(self):
        spent = {(RUNS[0], "torch_compile"): 70.0, (RUNS[1], "torch_compile"): 90.0}
        self.assertEqual(bench.expected_seconds("torch_compile", RUNS[2], spent), 90.0)


class TimeLimit(unittest.TestCase):
    def test_a_block_past_its_time_is_stopped(self):
        t0 = time.monotonic()
        with self.assertRaises(bench.BudgetSpent):
            with bench.time_limit(0.2):
                time.sleep(10)
        self.assertLess(time.monotonic() - t0, 5)
        time.sleep(0.3)  # the timer is off again: nothing fires after the block

    def test_a_block_within_its_time_or_without_one_runs_through(self):
        with bench.time_limit(5):
            time.sleep(0.05)
        with bench.time_limit(None):
            time.sleep(0.05)


class TrainerRuns(unittest.TestCase):
    def test_a_run_past_its_time_is_stopped_and_named(self):
        # A trainer that answers --help as accord-resnet does and then never finishes.
        with tempfile.TemporaryDirectory() as tmp:
            slow = os.path.join(tmp, "slow-trainer")
            with open(slow, "w") as f:
                f.write("#!/bin/sh\n"
                        "[ \"$1\" = --help ] && { echo '--device --cuda-graphs "
                        "--precision {auto,fp32,bf16}'; exit 0; }\n"
                        "exec sleep 60\n")
            os.chmod(slow, 0o755)
            t0 = time.monotonic()
            ips, why = bench.accord_images_per_sec(slow, "resnet50", 256, 20, 5, "bf16",
                                                   ("--cuda-graphs",), timeout=1.0)
            self.assertIsNone(ips)
            self.assertEqual(why, "stopped at the budget's end after 1 s")
            self.assertLess(time.monotonic() - t0, 20)

    def test_the_real_trainer_without_a_gpu_gives_no_rate(self):
        ips, why = bench.accord_images_per_sec(TRAINER, "resnet50", 128, 2, 1, "bf16",
                                               ("--cuda-graphs",), timeout=60)
        if ips is not None:
            self.skipTest("this machine has a GPU")
        # The command line the benchmark builds is the trainer's: what stops it is the GPU.
        self.assertTrue(why.startswith("exit "), why)
        self.assertRegex(why, r"--device cuda: |GPU", why)

    def test_a_missing_trainer_is_named(self):
        ips, why = bench.accord_images_per_sec("/nonexistent/accord-resnet", "resnet50", 128,
                                               20, 5, "bf16")
        self.assertIsNone(ips)
        self.assertIn("/nonexistent/accord-resnet not found", why)


class Refusals(unittest.TestCase):
    def run_it(self, *cmd):
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, cwd=SOURCE)

    def test_gpu_check_refuses_a_bad_budget_or_step(self):
        script = os.path.join(SOURCE, "ci", "gpu-check.sh")
        for args, said in [
                (["--budget", "soon"], "--budget 'soon': expected whole seconds"),
                (["--budget", "30"], "--budget '30': expected whole seconds, at least 60"),
                (["--budget"], "--budget '': expected"),
                (["tests", "gpu"], "unknown step 'gpu'")]:
            proc = self.run_it("bash", script, *args)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            self.assertIn(said, proc.stderr, args)

    def test_benchmark_refuses_an_unknown_mode_to_skip(self):
        proc = self.run_it(sys.executable, os.path.join(SOURCE, "tools", "resnet_gpu_bench.py"),
                           "--skip", "graphs,eager")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--skip: 'eager' is not one of layers, graphs, fusion", proc.stderr)

    def test_benchmark_refuses_a_negative_budget(self):
        proc = self.run_it(sys.executable, os.path.join(SOURCE, "tools", "resnet_gpu_bench.py"),
                           "--budget", "-5")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--budget must be >= 0 seconds (got -5)", proc.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
