"""A rank lost in the middle of a training step, in a Horovod script without elastic
training: the last rank leaves (os._exit) inside backward, after its gradient hooks
have submitted some of the step's allreduces. On every survivor the step must raise
HorovodInternalError (a RuntimeError, what Horovod scripts catch) naming the lost rank,
within ACCORD_STALL_SHUTDOWN_TIME plus the roll call and a second of the last step that
worked; a later collective must raise at once; and the interpreter must then exit by
itself (sys.exit runs accord's shutdown at exit, which must not wait for the lost rank).

    mpirun -np 3 --mca orte_abort_on_non_zero_status 0 python3 fault_train.py

Each survivor prints "PY-FAULT-DETECTED by rank R" when every check holds, else
"PY-FAULT-CHECK-FAILED by rank R" with what went wrong, and exits 1; CTest
(tests/support/run_expect_abort.cmake) counts the lines and bounds the job's time.
"""
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

import accord.torch as hvd
from helpers import start_script


def main():
    stall, scale = start_script(__doc__)
    me, n = hvd.rank(), hvd.size()
    victim = n - 1
    # As tests/support/fault_test.h: the roll call's time, and a second for noticing,
    # which sanitizer builds stretch.
    limit = stall + min(max(stall / 4, 0.1), 2.0) + 1.0 * scale
    torch.manual_seed(0)
    # About 1.3 M parameters: several fusion buffers a step, in flight one after another.
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    if me == victim:
        # The first layer's weight gets its gradient last in backward: by then the other
        # layers' allreduces are on their way.
        def leave(grad):
            if leave.armed:
                os.write(2, b"[victim] leaving inside backward\n")
                os._exit(3)
            return grad
        leave.armed = False
        model[0].weight.register_hook(leave)

    last_ok, step, error = time.monotonic(), 0, None
    try:
        while step < 10000:
            if me == victim and step == 20:
                leave.armed = True
            x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            last_ok, step = time.monotonic(), step + 1
    except Exception as e:  # noqa: BLE001 (its class is checked below)
        error = e
    waited = time.monotonic() - last_ok

    problems = []
    if not isinstance(error, hvd.HorovodInternalError):  # a RuntimeError (test_errors.py)
        problems.append(f"the step raised {type(error).__name__}, not HorovodInternalError")
    message = str(error)
    if not re.search(rf"\brank {victim} (did not|stopped answering)", message):
        problems.append(f"the message does not blame rank {victim}")
    if waited > limit:
        problems.append(f"it took {waited:.2f} s, over the limit of {limit:.2f} s")
    if step < 20:
        problems.append(f"only {step} steps before the failure, expected 20")
    started = time.monotonic()
    try:
        hvd.allreduce(torch.ones(4), name="fault.later")
        problems.append("a later allreduce succeeded")
    except hvd.HorovodInternalError:
        if time.monotonic() - started > 1.0 * scale:
            problems.append(f"a later allreduce took over {scale:g} s to fail")
    verdict = "PY-FAULT-CHECK-FAILED" if problems else "PY-FAULT-DETECTED"
    print(f"{verdict} by rank {me} at step {step}: {type(error).__name__} {waited:.2f} s after the "
          f"last step (limit {limit:.2f} s){': ' + '; '.join(problems) if problems else ''}: "
          f"{message}", file=sys.stderr, flush=True)
    sys.exit(1)  # the interpreter's exit runs accord's shutdown, which must return


if __name__ == "__main__":
    main()
