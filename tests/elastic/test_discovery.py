"""accordrun's elastic driver under a host discovery script, on simulated hosts with
train.py (run inside `simhosts.sh <slots> --run`, as test_driver.py): hosts offered and
withdrawn while the job runs, and --min-np waiting for them.

  test_discovery.py <scenario> <accordrun> <python>

  grow     discovery offers simhost0:2, then simhost1:2 as well: the job moves to 2+2
           ranks at its next commit (one reset, no step lost or repeated, the reset
           callback rescales the learning rate)
  shrink   discovery withdraws simhost1 from 2+2: the job goes on with 2 ranks at its
           next commit, no failure recorded, no step lost or repeated
  min-np   2+2 ranks with --min-np 4 under a discovery script that offers no other host;
           simhost1's ranks killed: the launcher waits --elastic-timeout for hosts, then
           exits non-zero naming the hosts it had and lost (with fixed hosts it stops at
           once, nothing being able to come back: test elastic.no-hosts-left)
  min-np-offer  the same on 2+2(+2) ranks under a discovery script, which offers simhost2:2
           while the launcher waits: the job goes on on simhost0 and simhost2 and finishes
"""
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_log import Checks, signal_host  # noqa: E402
from test_driver import accordrun, check_training, main  # noqa: E402


def below_min_np(accordrun_path, python, out, check, offered, elastic_timeout):
    """A job of 4 ranks with --min-np 4 under a discovery script offering ``offered``:
    simhost1's ranks killed at step 3, leaving the launcher 2 slots."""
    script = discovery(out, offered)
    run = accordrun(accordrun_path, python, out, ["-np", "4", "--min-np", "4", "--elastic-timeout",
                                                  str(elastic_timeout), "--host-discovery-script",
                                                  script, "--discovery-interval", "0.5"])
    t, _ = run.wait_for(r"^STEP 3 ", 120)
    check(t is not None, "training reached step 3 on 4 ranks")
    if t is not None:
        signal_host(out, 0, "simhost1", signal.SIGKILL)
    return run


def scenario_min_np(accordrun_path, python, out, hosts):
    check = Checks()
    run = below_min_np(accordrun_path, python, out, check,
                       "".join(f"{h}\n" for h in hosts.split(",")), 4)
    rc = run.finish(120)
    check(rc != 0, f"accordrun exits non-zero (got {rc})")
    reset_t, _ = run.wait_for(r"accordrun: reset 1: ", 0)
    end_t, m = run.wait_for(r"accordrun: only (\d+) slots usable .*fewer than --min-np 4.*had (.*); lost: (.*)\. Stopping", 0)
    check(m is not None and m.group(1) == "2" and "simhost0:2, simhost1:2" in m.group(2)
          and "simhost1" in m.group(3) and "signal 9" in m.group(3),
          f"the message names the hosts it had and lost: {m.group(0) if m else None}")
    if reset_t and end_t:
        check(end_t - reset_t >= 4, f"it waited --elastic-timeout 4 s ({end_t - reset_t:.1f} s)")
    check(not run.matching(r"^STEP \d+ epoch \d+ size 2 "), "no training on fewer than --min-np ranks")
    return check.failed


def discovery(out, text):
    """Makes <out>/discover.sh print ``text`` (rewritten atomically)."""
    script = os.path.join(out, "discover.sh")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\ncat {os.path.join(out, 'hosts.txt')}\n")
        os.chmod(script, 0o755)
    with open(os.path.join(out, "hosts.tmp"), "w") as f:
        f.write(text)
    os.replace(os.path.join(out, "hosts.tmp"), os.path.join(out, "hosts.txt"))
    assert os.access(script, os.X_OK), f"{script} must be executable for accordrun"
    return script


def scenario_resize(accordrun_path, python, out, first, then, final_size):
    check = Checks()
    script = discovery(out, first)
    run = accordrun(accordrun_path, python, out, ["-np", "2", "--min-np", "2", "--max-np", "4",
                                                  "--host-discovery-script", script,
                                                  "--discovery-interval", "0.5"])
    t, _ = run.wait_for(r"^STEP 5 ", 120)
    check(t is not None, "training reached step 5")
    discovery(out, then)
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    steps, redone = check_training(run, check, 3, final_size)
    check(redone == 0, f"no step repeated ({redone})")
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    check(len(resets) == 1 and "the hosts changed" in resets[0][1].group(2)
          and "blacklisted" not in resets[0][1].group(2),
          f"one reset, for the hosts: {[m.group(0) for _, m in resets]}")
    check(not run.matching(r'"event": "(failed|raised)"'), "no rank reported a failure")
    lr = f"{0.01 * final_size:g}"
    check(bool(run.matching(rf"^RESET size {final_size} lr {lr}$")) and
          all(m.group(1) == lr for _, m in run.matching(rf"^STEP \d+ epoch \d+ size {final_size} lr (\S+)")),
          f"the reset callback set the learning rate to {lr} for {final_size} ranks")
    return check.failed


def scenario_grow(accordrun_path, python, out, hosts):
    return scenario_resize(accordrun_path, python, out, "simhost0:2\n", "simhost0:2\nsimhost1:2\n", 4)


def scenario_shrink(accordrun_path, python, out, hosts):
    return scenario_resize(accordrun_path, python, out, "simhost0:2\nsimhost1:2\n", "simhost0:2\n", 2)


def scenario_min_np_offer(accordrun_path, python, out, hosts):
    check = Checks()
    run = below_min_np(accordrun_path, python, out, check, "simhost0:2\nsimhost1:2\n", 60)
    waiting, _ = run.wait_for(r"accordrun: only 2 slots usable, fewer than --min-np 4; waiting up to 60 s", 60)
    check(waiting is not None, "the launcher says it waits for hosts")
    offered = None
    if waiting is not None:
        time.sleep(2)  # a host offered a while into the wait, not at once
        discovery(out, "simhost0:2\nsimhost1:2\nsimhost2:2\n")
        offered = time.monotonic()
    rc = run.finish(300)
    check(rc == 0, f"accordrun exits 0 (got {rc})")
    started = run.matching(r"accordrun: starting (\d+) ranks on (.*) \(reset 1\)")
    check(len(started) == 1 and started[0][1].groups() == ("4", "simhost0:2, simhost2:2"),
          f"the job restarts on simhost0 and simhost2: {[m.group(0) for _, m in started]}")
    if started and offered:
        check(started[0][0] >= offered, "and only after simhost2 was offered")
        print(f"FIGURE restart {started[0][0] - offered:.1f} s after the offer", flush=True)
    check_training(run, check, 3, 4)
    check(not run.matching(r"^STEP \d+ epoch \d+ size 2 "), "no training on fewer than --min-np ranks")
    check(not run.matching(r"Stopping"), "the launcher did not give up")
    return check.failed


SCENARIOS = {"grow": scenario_grow, "shrink": scenario_shrink, "min-np": scenario_min_np,
             "min-np-offer": scenario_min_np_offer}

if __name__ == "__main__":
    sys.exit(main(SCENARIOS))
