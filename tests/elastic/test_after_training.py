"""A host lost after training, in the script's work after hvd.elastic.run (a final
evaluation, a save), on simulated hosts with train.py (run inside `simhosts.sh 2,2
--run`, as test_driver.py):

  test_after_training.py <scenario> <accordrun> <python>

  after    2+2 ranks; simhost1's ranks frozen (SIGSTOP) once training is over (train.py's
           --after-pause window before its final allgather): the survivors, failing in
           that allgather within the stall bound, report the lost ranks and leave for a
           restart (their host is not blamed), the launcher
           says training had finished, and the job restarts on simhost0 at the end of
           training: no step is taken again, the work after hvd.elastic.run runs again
           and the job ends well, simhost0's commits removed
  after-lost  simhost1's ranks killed (SIGKILL; mpirun ends the others) and every host's
           commits deleted: the restart finds no final
           commit and the launcher stops with TrainingLostError instead of training again
           from the beginning
"""
import os
import shutil
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_log import Checks, signal_host  # noqa: E402
from test_driver import accordrun, check_training, main  # noqa: E402


def fail_after_training(accordrun_path, python, out, hosts, lose_commits):
    sig = signal.SIGKILL if lose_commits else signal.SIGSTOP
    check = Checks()
    run = accordrun(accordrun_path, python, out, ["-np", "4", "--min-np", "2", "-H", hosts],
                    ["--after-pause", "5"])
    t, _ = run.wait_for(r"^TRAINED size 4 epochs 3", 120)
    check(t is not None, "training finished on 4 ranks")
    store = os.path.join(out, "store")
    if t is not None:
        ranks = signal_host(out, 0, "simhost1", sig)
        # Without simhost1's ranks signalled, nothing below would test a lost host.
        assert ranks == [2, 3], f"simhost1's ranks, from their pid files: {ranks} (want [2, 3])"
        if lose_commits:
            shutil.rmtree(store, ignore_errors=True)
    rc = run.finish(300)
    resets = run.matching(r"accordrun: reset (\d+): (.*)")
    if not lose_commits:
        check(len(run.matching(r'"event": "failed", .*"lost_ranks": \[2, 3\]')) == 2,
              "both survivors report ranks 2 and 3 lost")
    check(len(resets) == 1 and "simhost1" in resets[0][1].group(2)
          and "blacklisted simhost1" in resets[0][1].group(2)
          and "simhost0" not in resets[0][1].group(2)
          and "training had finished (commit " in resets[0][1].group(2),
          f"one reset, blaming simhost1 alone and saying training had finished: "
          f"{[m.group(0) for _, m in resets]}")
    check(not run.matching(r"^STEP \d+ epoch \d+ size 2 "), "no step taken again after training")
    if not lose_commits:
        check(rc == 0, f"accordrun exits 0 (got {rc})")
        check_training(run, check, 3, 2, redone_limit=0)
        check(bool(run.matching(r"^TRAINED size 2 epochs 3")),
              "the restart resumed at the end of training")
        left = [os.path.join(d, f) for d, _, files in os.walk(store) for f in files
                if os.path.basename(d) == "simhost0"]  # simhost1's copy went with its ranks
        check(not left, f"simhost0's commits are removed once the job ends well: {left}")
    else:
        check(rc != 0, f"accordrun exits non-zero (got {rc})")
        stop = run.matching(r"accordrun: not restarting: rank \d+ on simhost0 raised "
                            r"TrainingLostError: training had finished before this restart")
        check(len(stop) == 1, "the launcher stops, saying the final commit is gone")
        check(not run.matching(r"^TRAINED size 2"), "nothing trained again")
    return check.failed


SCENARIOS = {"after": lambda *a: fail_after_training(*a, lose_commits=False),
             "after-lost": lambda *a: fail_after_training(*a, lose_commits=True)}

if __name__ == "__main__":
    sys.exit(main(SCENARIOS))
