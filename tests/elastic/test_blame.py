"""Which host accordrun's elastic driver blames for a failed rank, from the output of a
run (tools/accord_elastic.py, read without starting a job): the name the driver was
given for it, whichever name the rank or mpirun reported; and when a failure is the
script's own, on every host, rather than a host's.

  test_blame.py <folder of accord_elastic.py>

(with accord's Python package on PYTHONPATH, for the ranks' side of the reports)
"""
import os
import select
import sys
import unittest

from accord import _driver

sys.path.insert(0, sys.argv[1])
import accord_elastic  # noqa: E402

ALIASES = [("localhost", 2), ("127.0.0.1", 2)]
NODES = [("node1", 2), ("node2", 2)]


class Run:
    """What failure_causes reads of a finished run."""

    def __init__(self, reports=(), stderr_tail=""):
        self.reports, self.stderr_tail = list(reports), stderr_tail


def raised(rank, host, error):
    return {"event": "raised", "rank": rank, "host": host, "error": error}


def script_failure(reports, chosen):
    return accord_elastic.script_failure(reports, chosen, accord_elastic.ranks_on(chosen))


def blamed(chosen, **run):
    return accord_elastic.failure_causes(Run(**run), 1, accord_elastic.ranks_on(chosen))[0]


class HostOf(unittest.TestCase):
    def test_a_name_of_the_run_is_taken_as_given(self):
        # srun's nodes, wherever srun placed the rank: node2 although rank 1 would be
        # node1's in turn.
        self.assertEqual(accord_elastic.host_of(1, "node2", ["node1", "node1", "node2"]), "node2")

    def test_an_alias_is_the_host_the_rank_was_put_on(self):
        hosts = accord_elastic.ranks_on(ALIASES)
        self.assertEqual([accord_elastic.host_of(r, "vm", hosts) for r in range(4)],
                         ["localhost", "localhost", "127.0.0.1", "127.0.0.1"])

    def test_a_rank_outside_the_run_keeps_its_name(self):
        self.assertEqual(accord_elastic.host_of(7, "vm", ["localhost"]), "vm")
        self.assertEqual(accord_elastic.host_of(None, "vm", ["localhost"]), "vm")


class FailureCauses(unittest.TestCase):
    def test_a_signal_on_an_alias_blames_the_alias(self):
        tail = "mpirun noticed that process rank 3 with PID 0 on node vm exited on signal 9 (Killed)."
        self.assertEqual(blamed(ALIASES, stderr_tail=tail),
                         {"127.0.0.1": "rank 3 on 127.0.0.1 was killed by signal 9 (Killed)"})

    def test_a_raise_on_an_alias_blames_the_alias(self):
        self.assertEqual(blamed(ALIASES, reports=[raised(1, "vm", "ValueError: x")]),
                         {"localhost": "rank 1 on localhost raised ValueError: x"})

    def test_named_hosts_are_blamed_as_named(self):
        tail = "mpirun noticed that process rank 0 with PID 0 on node node2 exited on signal 9."
        self.assertEqual(list(blamed(NODES, stderr_tail=tail)), ["node2"])


class ScriptFailure(unittest.TestCase):
    def test_the_same_error_on_every_host(self):
        self.assertEqual(
            script_failure([raised(0, "vm", "E: x"), raised(3, "vm", "E: x")], ALIASES),
            "ranks on every host (localhost, 127.0.0.1) raised E: x")

    def test_errors_alike_but_for_their_numbers(self):
        self.assertEqual(
            script_failure([raised(2, "node2", "E: rank 2 of 4"),
                                           raised(0, "node1", "E: rank 0 of 4")], NODES),
            "ranks on every host (node1, node2) raised the same error but for its numbers: "
            "rank 0 on node1 raised E: rank 0 of 4; rank 2 on node2 raised E: rank 2 of 4")

    def test_one_host_only_is_the_host_s_failure(self):
        self.assertIsNone(script_failure(
            [raised(0, "node1", "E: x"), raised(1, "node1", "E: x")], NODES))

    def test_different_errors_are_the_hosts_failures(self):
        self.assertIsNone(script_failure(
            [raised(0, "node1", "E: disk full"), raised(2, "node2", "E: out of memory")], NODES))


class ReportsIn(unittest.TestCase):
    """The reports read from a line of the job's output as mpirun passes it on."""
    REPORT = '[accord-elastic] {"event": "raised", "rank": 1, "error": "E: x"}'

    def test_a_line_of_its_own(self):
        self.assertEqual(accord_elastic.reports_in(self.REPORT + "\n"),
                         [{"event": "raised", "rank": 1, "error": "E: x"}])

    def test_after_another_rank_s_unfinished_line(self):
        # A traceback's "  File ..., in <" and then "module>" in two writes.
        line = '  File "job.py", line 7, in <' + self.REPORT + "\n"
        self.assertEqual([r["rank"] for r in accord_elastic.reports_in(line)], [1])

    def test_before_the_rest_of_another_line(self):
        line = "epoch 1: 40%" + self.REPORT + "|####      | 4/10\n"
        self.assertEqual([r["rank"] for r in accord_elastic.reports_in(line)], [1])

    def test_two_in_one_line(self):
        line = self.REPORT + self.REPORT.replace('"rank": 1', '"rank": 2') + "\n"
        self.assertEqual([r["rank"] for r in accord_elastic.reports_in(line)], [1, 2])

    def test_a_cut_report_is_passed_over(self):
        cut = self.REPORT[:40]
        self.assertEqual(accord_elastic.reports_in(cut + "\n"), [])
        self.assertEqual([r["rank"] for r in accord_elastic.reports_in(cut + self.REPORT)], [1])

    def test_no_marker_no_report(self):
        self.assertEqual(accord_elastic.reports_in('{"event": "raised"}\n'), [])
        self.assertEqual(accord_elastic.reports_in("[accord-elastic] [1, 2]\n"), [])


def written_report(**fields):
    """The bytes one report of a rank writes to its standard error."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    try:
        _driver.report("raised", **fields)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    with os.fdopen(read, "rb") as f:
        return f.read()


class ReportWrites(unittest.TestCase):
    """A rank's report goes out in one write that a pipe passes on whole."""

    def test_a_short_error_is_kept_whole(self):
        line = written_report(rank=1, host="h", error="E: x").decode()
        self.assertEqual(accord_elastic.reports_in(line),
                         [{"event": "raised", "rank": 1, "host": "h", "error": "E: x"}])

    def test_a_long_error_is_cut_to_fit_one_write(self):
        for error in ("E: " + "x" * 10000, "E: " + "\u00e9" * 5000, "E: line\n" * 2000):
            line = written_report(rank=1, host="h", error=error)
            self.assertLessEqual(len(line), select.PIPE_BUF)
            self.assertEqual(line.count(b"\n"), 1)
            [report] = accord_elastic.reports_in(line.decode())
            self.assertTrue(error.startswith(report["error"][:-len(" ...")]), report["error"][:40])
            self.assertTrue(report["error"].endswith(" ..."))
            self.assertGreater(len(report["error"]), 300)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
