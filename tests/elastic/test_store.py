"""The elastic commit store (accord/elastic/store.py) with two writers in one folder, as
ranks that count as two hosts on one machine have (ACCORD_HOSTNAME, or hosts given to
accordrun as aliases of one machine): each writes every commit whole under a name of its
own, so neither renames the other's half-written file or fails on the file the other
removed, and what is left loads.

  test_store.py
"""
import os
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:
    print(f"skipped: {sys.executable} has no torch")
    sys.exit(77)

from accord.elastic.store import CommitStore  # noqa: E402


class TwoWriters(unittest.TestCase):
    def test_two_writers_share_a_folder(self):
        with tempfile.TemporaryDirectory() as folder:
            writers = [CommitStore(folder, writer=True) for _ in range(2)]
            state = {"weights": torch.arange(1 << 18, dtype=torch.float32)}
            for number in range(1, 41):
                state["number"] = number
                for w in writers:  # both write at once, on threads of their own
                    w.write(number, dict(state))
                for w in writers:
                    w.wait()  # raises what the write failed with
                self.assertEqual(sorted(os.listdir(folder)), [f"commit-{number}.pt"])
            loaded = writers[0].load(writers[1].newest())
            self.assertEqual(loaded["number"], 40)
            self.assertTrue(torch.equal(loaded["weights"], state["weights"]))
            for w in writers:
                w.remove()
            self.assertFalse(os.path.exists(folder))
            os.makedirs(folder)  # for TemporaryDirectory's clean-up


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
