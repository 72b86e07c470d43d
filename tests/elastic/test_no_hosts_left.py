"""accordrun's elastic driver on fixed hosts (-H) that fail: once every usable slot is
gone for good, nothing can come back, so it stops at once (rather than waiting
--elastic-timeout for hosts that cannot be offered) and names what it lost; with
--blacklist-cooldown-range the host comes back after its cool-down and the job is
started again. The job here fails before it trains (a script that exits 3 on every
rank), as a script with a mistake does. On this host, no simulated hosts needed.

  test_no_hosts_left.py <accordrun> <python>
"""
import os
import subprocess
import sys
import time

ACCORDRUN, PYTHON = sys.argv[1], sys.argv[2]
failed = []


def check(cond, what):
    print(("ok: " if cond else "FAILED: ") + what, flush=True)
    if not cond:
        failed.append(what)


def accordrun(*flags):
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


rc, err, took = accordrun()
check(rc not in (0, None), f"accordrun exits non-zero (got {rc})")
check(took < 60, f"it stops at once, not after --elastic-timeout 300 s ({took:.1f} s)")
check("reset 1: " in err and "localhost exited with status 3" in err and "blacklisted localhost for good" in err,
      "the reset names the host and the status")
check("only 0 slots usable (none), fewer than --min-np 2, and none can come back" in err
      and "--blacklist-cooldown-range" in err and "lost: localhost: " in err and "Stopping." in err,
      "the end says why no host can come back, and what was lost")
check("waiting up to" not in err, "it does not say it waits")

rc, err, took = accordrun("--blacklist-cooldown-range", "1", "1", "--reset-limit", "1")
check(rc not in (0, None), f"with a cool-down: accordrun exits non-zero (got {rc})")
check("blacklisted localhost for 1 s" in err and "(reset 1)" in err,
      "with a cool-down: the host comes back and the job starts again")
check("reset limit 1 reached" in err, "with a cool-down: the reset limit ends it")

print("OK" if not failed else f"FAILED: {len(failed)} check(s)")
sys.exit(1 if failed else 0)
