"""accordrun's elastic driver on hosts named by an alias or an address, as -H and
discovery scripts often name them (10.0.0.5, localhost, 127.0.0.1): the driver blames
the host it put the failed rank on, by the name it was given, not the machine's own
name that the rank and mpirun report (which no host list holds, so leaving it out
changed nothing and the job failed again on the same hosts until the reset limit).
And where ranks on every host raised in user code, the same error or errors alike but
for their numbers (each naming its rank), the driver stops with the script's failure,
as Horovod's does when all its workers failed, instead of blaming every host.

Two hosts on this machine: -H localhost:2,127.0.0.1:2 (ranks 2 and 3 on 127.0.0.1),
no simulated hosts needed.

  test_host_aliases.py <accordrun> <python>
"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

ACCORDRUN, PYTHON = sys.argv[1], sys.argv[2]

# Six steps, a commit after each; at step 3 of the first run the ranks named by the
# mode fail.
JOB = r"""
import os, sys
import torch
import accord.torch as hvd

hvd.init()
mode = sys.argv[1]
names = ("HOSTNAME", "RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")
print(f"run {os.environ['ACCORDRUN_ELASTIC_RESET']} rank {hvd.rank()}: "
      + " ".join(f"{n}={os.environ.get('HOROVOD_' + n)}" for n in names), flush=True)
if mode == "setup":  # a mistake in the set-up, outside hvd.elastic.run, on every rank
    raise ValueError(f"no such dataset on rank {hvd.rank()}")
state = hvd.elastic.ObjectState(step=0)


@hvd.elastic.run
def train(state):
    if hvd.rank() == 0:
        print(f"run {os.environ['ACCORDRUN_ELASTIC_RESET']} starts at step {state.step}", flush=True)
    while state.step < 6:
        first_run = os.environ.get("ACCORDRUN_ELASTIC_RESET") == "0"
        if state.step == 3 and first_run:
            if mode == "kill" and hvd.rank() == 3:
                os.kill(os.getpid(), 9)
            if mode == "raise" and hvd.rank() == 3:
                raise RuntimeError("rank 3 fails")
            if mode == "raise-each":
                raise RuntimeError(f"rank {hvd.rank()} fails")
            if mode == "raise-same":
                raise RuntimeError("every rank fails alike")
            if mode == "raise-mid-line":  # each rank's line of progress left unfinished
                os.write(2, f"rank {hvd.rank()}: step 3 of 6 ".encode())
                raise RuntimeError("every rank fails alike")
        total = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="ones")
        assert int(total) == hvd.size(), (int(total), hvd.size())
        state.step += 1
        state.commit()
    if hvd.rank() == 0:
        print(f"done on {hvd.size()} ranks", flush=True)


train(state)
"""


def accordrun(mode, slots=2):
    """(exit status, the launcher's and the job's output) of a job on the two aliases,
    ``slots`` ranks on each."""
    with tempfile.TemporaryDirectory() as folder:
        job = os.path.join(folder, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        cmd = [ACCORDRUN, "-np", str(2 * slots), "--min-np", str(slots),
               "-H", f"localhost:{slots},127.0.0.1:{slots}",
               "--reset-limit", "2", "--elastic-store", os.path.join(folder, "store"),
               PYTHON, job, mode]
        start = time.monotonic()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=240)
    launcher = "\n".join(line for line in p.stdout.splitlines() if line.startswith("accordrun:"))
    print(f"+ {' '.join(cmd)}\n  exit {p.returncode} after {time.monotonic() - start:.1f} s\n"
          f"{launcher}", flush=True)
    return p.returncode, p.stdout


class HostAliases(unittest.TestCase):
    def assert_moved_to_localhost(self, rc, out, cause):
        self.assertEqual(rc, 0, out)
        self.assertIn(f"accordrun: reset 1: rank 3 on 127.0.0.1 {cause}", out)
        self.assertIn("blacklisted 127.0.0.1 for good", out)
        self.assertIn("accordrun: starting 2 ranks on localhost:2 (reset 1)", out)
        self.assertIn("done on 2 ranks", out)
        self.assertNotIn("reset 2", out)
        # From the commit after step 3, which the two aliases' ranks kept on this
        # machine's disk (the store is the machine's, whatever its hosts are called).
        self.assertIn("run 0 starts at step 0", out)
        self.assertIn("run 1 starts at step 3", out)

    def test_a_killed_rank_blames_the_alias_it_ran_on(self):
        rc, out = accordrun("kill")
        self.assert_moved_to_localhost(rc, out, "was killed by signal 9")
        # Each rank has the variables horovodrun's elastic launcher sets: its host by
        # the name -H gave it, its rank in the current run (the processes restart), and
        # Accord's counts (the two aliases are one machine: 4 ranks share it).
        for r in range(4):
            self.assertIn(f"run 0 rank {r}: HOSTNAME={'localhost' if r < 2 else '127.0.0.1'} "
                          f"RANK={r} SIZE=4 LOCAL_RANK={r} LOCAL_SIZE=4 CROSS_RANK=0 "
                          "CROSS_SIZE=1", out)
        for r in range(2):
            self.assertIn(f"run 1 rank {r}: HOSTNAME=localhost RANK={r} SIZE=2 LOCAL_RANK={r} "
                          "LOCAL_SIZE=2 CROSS_RANK=0 CROSS_SIZE=1", out)

    def test_a_raising_rank_blames_the_alias_it_ran_on(self):
        rc, out = accordrun("raise")
        self.assert_moved_to_localhost(rc, out, "raised RuntimeError: rank 3 fails")

    def assert_stopped(self, mode, cause, slots=2):
        """The job stops at once, with ``cause`` (a pattern) as the script's own failure."""
        rc, out = accordrun(mode, slots)
        self.assertNotEqual(rc, 0)
        self.assertRegex(out, r"accordrun: not restarting: ranks on every host \(localhost, "
                              r"127\.0\.0\.1\) raised " + cause)
        self.assertNotIn("reset 1", out)

    def test_every_rank_raising_its_own_error_stops_the_job(self):
        # Errors alike but for the rank they name: the script's own, on every host.
        self.assert_stopped("raise-each", r"the same error but for its numbers: rank [01] on "
                            r"localhost raised RuntimeError: rank [01] fails; rank [23] on "
                            r"127\.0\.0\.1 raised RuntimeError: rank [23] fails; exiting with status")

    def test_a_set_up_error_on_every_rank_stops_the_job(self):
        # Raised after init() but outside hvd.elastic.run: reported all the same, so the
        # job stops at once rather than costing each host a reset.
        self.assert_stopped("setup", r"the same error but for its numbers: rank [01] on localhost "
                                     r"raised ValueError: no such dataset on rank [01]; ")

    def test_every_rank_raising_the_same_error_stops_the_job(self):
        self.assert_stopped("raise-same", r"RuntimeError: every rank fails alike; exiting")

    def test_reports_in_the_middle_of_a_line_are_read(self):
        # mpirun passes on each rank's output as it comes, so a report lands after an
        # unfinished line of another rank's (a progress bar, a traceback written piece by
        # piece), or of its own: here the first report always does. One rank a host, so
        # that a report missed would be its host's.
        self.assert_stopped("raise-mid-line", r"RuntimeError: every rank fails alike; exiting",
                            slots=1)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
