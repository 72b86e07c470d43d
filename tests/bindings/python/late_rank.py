"""A rank that comes to a collective after the others gave up on it: rank 0's allreduce
fails with StallError (a HorovodInternalError, so a RuntimeError, as Horovod scripts
catch it) after ACCORD_STALL_SHUTDOWN_TIME, and rank 0 shuts down; the other ranks wake
up later, their allreduce fails at once with ShutDownError, and they shut down too.
Every rank reached shutdown() within ACCORD_SHUTDOWN_WAIT_TIME, so every rank
finalizes MPI and the job exits 0, as a Horovod script that catches the error expects.

    ACCORD_STALL_SHUTDOWN_TIME=2 mpirun -np 2 python3 late_rank.py

Each rank prints "LATE-RANK-OK rank R" when every check holds, else
"LATE-RANK-FAILED rank R: ..." and exits 1; a rank that left MPI unfinalized makes
mpirun exit non-zero, which fails the test as well.
"""
import time

import torch

import accord.torch as hvd
from helpers import end_script, start_script


def main():
    stall, scale = start_script(__doc__)
    me = hvd.rank()
    hvd.barrier()
    start = time.monotonic()
    problems = []
    if me != 0:
        # Well past rank 0's timeout and its shutdown, which every rank's background
        # thread takes part in.
        time.sleep(2 * stall + 1.0 * scale)
    submitted = time.monotonic()
    try:
        hvd.allreduce(torch.ones(4), name="late", op=hvd.Sum)
        problems.append("the allreduce succeeded")
    except RuntimeError as error:
        took = time.monotonic() - submitted
        expected = hvd.StallError if me == 0 else hvd.ShutDownError
        if not isinstance(error, expected):
            problems.append(f"{type(error).__name__} where {expected.__name__} was expected: "
                            f"{error}")
        if me == 0 and not stall <= took <= stall + 1.0 * scale:
            problems.append(f"failed after {took:.1f} s, not within 1 s past the stall bound "
                            f"{stall} s")
        if me != 0 and took > 1.0 * scale:
            problems.append(f"the late allreduce took {took:.1f} s to fail")
    hvd.shutdown()
    if hvd.is_initialized():
        problems.append("still initialized after shutdown()")
    end_script("LATE-RANK", me, problems, time.monotonic() - start)


if __name__ == "__main__":
    main()
