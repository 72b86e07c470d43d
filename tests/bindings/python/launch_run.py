"""accord.run (Horovod's horovod.run): a function on every rank of a job it starts, from
a plain process (not under mpirun: it runs mpirun itself, through accordrun).

  PYTHONPATH=<build>/python python3 launch_run.py

Its functions are this script's own (found on the ranks by loading it under another
name, so the part below `if __name__ == "__main__":` runs here only) and a standard
module's.
"""
import contextlib
import io
import math
import os
import sys
import tempfile
import time
import unittest

import accord
from accord.runner import TASK_VARIABLE


def collective_sum(base, scale=1):
    import torch
    import accord.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(base + hvd.rank())]), op=hvd.Sum)
    print(f"rank {hvd.rank()} of {hvd.size()} says hello", flush=True)
    return {"rank": hvd.rank(), "size": hvd.size(), "sum": total.item() * scale}


def raise_on_rank_one():
    import accord.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank one refuses")
    return hvd.rank()


def raise_while_the_other_waits():
    import time
    import accord.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise RuntimeError("rank one fails")
    time.sleep(120)


class Unpicklable:
    def __reduce__(self):
        raise TypeError("this object stays where it is")


def return_unpicklable():
    return Unpicklable()


def nested_run():
    return accord.run(math.factorial, args=(3,), num_proc=1)


def folders():
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("accord-run-")}


class Run(unittest.TestCase):
    def run_quietly(self, *args, **kwargs):
        """accord.run with the job's output captured from sys.stdout (as a notebook's)."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            values = accord.run(*args, **kwargs)
        return values, out.getvalue()

    def test_values_of_every_rank_in_rank_order(self):
        before = folders()
        values, out = self.run_quietly(collective_sum, args=(10,), kwargs={"scale": 2}, num_proc=2)
        self.assertEqual(values, [{"rank": 0, "size": 2, "sum": 42.0}, {"rank": 1, "size": 2, "sum": 42.0}])
        for r in range(2):
            self.assertIn(f"rank {r} of 2 says hello", out)  # the ranks' output, through sys.stdout
        self.assertNotIn("is not an Accord variable", out)
        self.assertEqual(folders(), before)  # the run's folder is gone

    def test_a_modules_function_and_horovods_names(self):
        values, _ = self.run_quietly(math.factorial, args=(5,), num_proc=3, hosts="localhost:3")
        self.assertEqual(values, [120, 120, 120])
        values, _ = self.run_quietly(math.factorial, args=(2,), num_proc=2, hosts=["localhost:1", "localhost:1"])
        self.assertEqual(values, [2, 2])
        # Without hosts, num_proc slots of this host, as horovod.run: more than the cores
        # of a 2-core machine, without mpirun's oversubscription setting.
        os.environ.pop("OMPI_MCA_rmaps_base_oversubscribe", None)
        values, _ = self.run_quietly(math.factorial, args=(3,), num_proc=3)
        self.assertEqual(values, [6, 6, 6])
        with self.assertWarns(DeprecationWarning):
            values, _ = self.run_quietly(math.factorial, args=(4,), np=2)
        self.assertEqual(values, [24, 24])

    def test_a_ranks_exception_names_the_rank_with_its_traceback(self):
        with self.assertRaises(RuntimeError) as caught:
            self.run_quietly(raise_on_rank_one, num_proc=2)
        message = str(caught.exception)
        self.assertIn("accord.run: mpirun failed with exit code 1: rank 1 raised ValueError: rank one refuses",
                      message)
        self.assertIn("in raise_on_rank_one", message)
        self.assertIsInstance(caught.exception.__cause__, ValueError)

    def test_a_failed_rank_ends_the_others_at_once(self):
        started = time.monotonic()
        with self.assertRaisesRegex(RuntimeError, "mpirun failed with exit code 1: rank 1 raised RuntimeError"):
            self.run_quietly(raise_while_the_other_waits, num_proc=2)
        self.assertLess(time.monotonic() - started, 60)

    def test_a_value_that_cannot_go_back(self):
        with self.assertRaises(RuntimeError) as caught:
            self.run_quietly(return_unpicklable, num_proc=1)
        self.assertIn("rank 0 raised TypeError: its return value cannot be sent back: this object stays "
                      "where it is", str(caught.exception))

    def test_called_on_a_rank_it_refuses(self):
        with self.assertRaises(RuntimeError) as caught:
            self.run_quietly(nested_run, num_proc=1)
        self.assertIn("accord.run was called on a rank of a job accord.run started", str(caught.exception))

    def test_what_cannot_be_sent_is_refused_before_anything_starts(self):
        try:
            import cloudpickle  # noqa: F401  (sends these by value)
        except ImportError:
            with self.assertRaisesRegex(ValueError, r"cannot be sent to the ranks .*install cloudpickle"):
                accord.run(lambda: 1, num_proc=1)
            with self.assertRaisesRegex(ValueError, r"cannot be sent to the ranks"):
                accord.run(math.factorial, args=(Unpicklable(),), num_proc=1)
        else:
            self.assertEqual(self.run_quietly(lambda: 7, num_proc=2)[0], [7, 7])

    def test_bad_arguments(self):
        for kwargs, message in (({"num_proc": 0}, r"num_proc=0: expected a whole number"),
                                ({"num_proc": 2.5}, r"num_proc=2.5"),
                                ({"hosts": "a:1", "hostfile": "h"}, "hosts or hostfile, not both"),
                                ({"use_gloo": True, "use_mpi": True}, "use_gloo or use_mpi, not both")):
            with self.subTest(kwargs=kwargs):
                with self.assertRaisesRegex(ValueError, message):
                    accord.run(math.factorial, args=(1,), **kwargs)
        with self.assertRaisesRegex(TypeError, "func must be callable, got int"):
            accord.run(3)

    def test_a_launcher_error_is_the_jobs_failure(self):
        # accordrun refuses the host list before anything starts: no rank leaves a result.
        with self.assertRaises(RuntimeError) as caught:
            self.run_quietly(math.factorial, args=(1,), num_proc=4, hosts="localhost:2")
        self.assertIn("accord.run: mpirun failed with exit code 2, and no rank left a result",
                      str(caught.exception))


if __name__ == "__main__":
    assert not os.environ.get(TASK_VARIABLE)
    unittest.main(verbosity=2)
