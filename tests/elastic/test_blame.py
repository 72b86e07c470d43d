"""Which host accordrun's elastic driver blames for a failed rank, from the output of a
run (tools/accord_elastic.py, read without starting a job): the name the driver was
given for it, whichever name the rank or mpirun reported; and when a failure is the
script's own, on every host, rather than a host's.

  test_blame.py <folder of accord_elastic.py>
"""
import sys
import unittest

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


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
