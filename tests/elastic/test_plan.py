"""Which hosts accordrun's elastic driver runs a job on (tools/accord_elastic.py, read
without starting a job): the hosts it runs on, or last ran on, stay first, so that a
discovery script listing the same hosts in another order neither restarts the job nor,
under --max-np, moves it off the hosts that hold its commits.

  test_plan.py <folder of accord_elastic.py>
"""
import sys
import unittest

sys.path.insert(0, sys.argv[1])
import accord_elastic  # noqa: E402

plan, same_hosts = accord_elastic.plan, accord_elastic.same_hosts


class Plan(unittest.TestCase):
    def test_first_run_takes_hosts_in_the_offered_order(self):
        self.assertEqual(plan({"a": 2, "b": 2}, None), [("a", 2), ("b", 2)])
        self.assertEqual(plan({"b": 2, "a": 2}, 3), [("b", 2), ("a", 1)])

    def test_the_hosts_of_the_run_stay_first_whatever_the_order_offered(self):
        # Discovery now prints b before a: the job keeps a, where its commits are.
        self.assertEqual(plan({"b": 1, "a": 1}, 1, keep=["a"]), [("a", 1)])
        self.assertEqual(plan({"c": 2, "b": 2, "a": 2}, 5, keep=["a", "b"]),
                         [("a", 2), ("b", 2), ("c", 1)])

    def test_a_kept_host_no_longer_offered_is_left_out(self):
        self.assertEqual(plan({"b": 1}, 1, keep=["a"]), [("b", 1)])
        self.assertEqual(plan({"a": 1, "c": 1}, None, keep=["b", "a"]), [("a", 1), ("c", 1)])

    def test_the_same_hosts_in_another_order_are_no_change(self):
        self.assertTrue(same_hosts([("a", 1), ("b", 1)], [("b", 1), ("a", 1)]))
        self.assertFalse(same_hosts([("a", 1), ("b", 1)], [("a", 1), ("b", 2)]))
        self.assertFalse(same_hosts([("a", 1)], [("a", 1), ("b", 1)]))


class Discovered(unittest.TestCase):
    def test_a_host_named_again_adds_its_slots_as_in_h(self):
        self.assertEqual(accord_elastic.parse_discovered("a:2\nb:1\na:2\n", None),
                         {"a": 4, "b": 1})


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
