"""Ranks that give one name to different collectives: rank 0 an allreduce "diverged",
the others an allgather "diverged"; rank 0 a grouped allreduce "grp", the others a
single allreduce "grp.0". In accord.torch, as in Horovod, each operation has names of
its own (allreduce.diverged, allgather.diverged), so this is not a mismatch the
negotiation can see at once: each side waits for the other. What Accord adds: the stall
report names what the missing ranks submitted under that name instead, and every
handle fails with StallError (a HorovodInternalError) within ACCORD_STALL_SHUTDOWN_TIME
plus a second; the interpreter then exits by itself.

    mpirun -np 2 --mca orte_abort_on_non_zero_status 0 python3 diverged_names.py

Each rank prints "DIVERGED-NAMES-OK rank R" when every check holds, else
"DIVERGED-NAMES-FAILED rank R: ..." and exits 1; CTest
(tests/support/run_expect_abort.cmake) counts the lines and bounds the job's time.
"""
import re
import time

import torch

import accord.torch as hvd
from helpers import end_script, start_script


def main():
    stall, scale = start_script(__doc__)
    me, n = hvd.rank(), hvd.size()
    others = "rank 1" if n == 2 else "ranks " + ",".join(str(r) for r in range(1, n))
    hvd.barrier()
    start = time.monotonic()
    if me == 0:
        handles = [hvd.allreduce_async(torch.ones(4), name="diverged"),
                   hvd.grouped_allreduce_async([torch.ones(2)], name="grp")]
        expected = [f"allreduce 'diverged' waited .* {others} submitted allgather 'diverged' "
                    "under that name instead",
                    f"grouped allreduce 'grp.0' waited .* {others} submitted allreduce 'grp.0' "
                    "under that name instead"]
    else:
        handles = [hvd.allgather_async(torch.ones(4), name="diverged"),
                   hvd.allreduce_async(torch.ones(2), name="grp.0")]
        expected = ["allgather 'diverged' waited .* rank 0 submitted allreduce 'diverged' "
                    "under that name instead",
                    "allreduce 'grp.0' waited .* rank 0 submitted grouped allreduce 'grp.0' "
                    "under that name instead"]
    problems = []
    for handle, pattern in zip(handles, expected):
        try:
            hvd.synchronize(handle)
            problems.append(f"no error where /{pattern}/ was expected")
        except hvd.StallError as error:
            if not re.search(pattern, str(error)):
                problems.append(f"/{pattern}/ not in: {error}")
    elapsed = time.monotonic() - start
    if elapsed > stall + 1.0 * scale:
        problems.append(f"failed after {elapsed:.1f} s, past the stall bound {stall} s + 1 s")
    end_script("DIVERGED-NAMES", me, problems, elapsed)


if __name__ == "__main__":
    main()
