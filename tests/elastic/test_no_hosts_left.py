"""accordrun's elastic driver on fixed hosts (-H) that fail: once every usable slot is
gone for good, nothing can come back, so it stops at once (rather than waiting
--elastic-timeout for hosts that cannot be offered) and names what it lost; with
--blacklist-cooldown-range the host comes back after its cool-down and the job is
started again. The job here fails before it trains (a script that exits 3 on every
rank), as a script with a mistake does. On this host, no simulated hosts needed.

  test_no_hosts_left.py <accordrun> <python>
"""
import subprocess
import sys
import time
import unittest

ACCORDRUN, PYTHON = sys.argv[1], sys.argv[2]


def accordrun(*flags):
    """(exit status or None if still running after 120 s, stderr, seconds taken)."""
    cmd = [ACCORDRUN, "-np", "2", "--min-np", "2", "-H", "localhost:2", "--elastic-timeout", "300",
           *flags, PYTHON, "-c", "raise SystemExit(3)"]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = None, (e.stderr or b"").decode()
    took = time.monotonic() - start
    print(f"+ {' '.join(cmd)}\n  exit {rc} after {took:.1f} s\n{err}", flush=True)
    return rc, err, took


class NoHostsLeft(unittest.TestCase):
    def test_fixed_hosts_blacklisted_for_good_stop_the_job_at_once(self):
        rc, err, took = accordrun()
        self.assertNotIn(rc, (0, None))
        self.assertLess(took, 60, "stopped at once, not after --elastic-timeout 300 s")
        self.assertIn("reset 1: ", err)
        self.assertIn("localhost exited with status 3", err)
        self.assertIn("blacklisted localhost for good", err)
        self.assertIn("only 0 slots usable (none), fewer than --min-np 2, and none can come back", err)
        self.assertIn("--blacklist-cooldown-range", err)
        self.assertIn("lost: localhost: ", err)
        self.assertIn("Stopping.", err)
        self.assertNotIn("waiting up to", err)

    def test_a_cool_down_brings_the_host_back(self):
        rc, err, _ = accordrun("--blacklist-cooldown-range", "1", "1", "--reset-limit", "1")
        self.assertNotIn(rc, (0, None))
        self.assertIn("blacklisted localhost for 1 s", err)
        self.assertIn("(reset 1)", err)
        self.assertIn("reset limit 1 reached", err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
