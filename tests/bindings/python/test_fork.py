"""A process forked after init() (os.fork(), multiprocessing's "fork" method) has a copy
of Accord's runtime without its background thread: every call there raises
NotInitializedError at once, naming the process that owns the runtime, instead of
waiting forever. The parent's runtime goes on."""

import os
import signal
import time
import warnings

import torch

import accord.torch as hvd


def _in_forked_child(body):
    """Runs body() in a forked child and returns the text it returned, or "hung" when
    the child did not end by itself within 20 s."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            report = body()
        except BaseException as e:  # noqa: B036 (anything, reported to the parent)
            report = f"child raised {type(e).__name__}: {e}"
        os.write(write_end, report.encode())
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.005)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
        return "hung"
    chunks = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    return b"".join(chunks).decode()


def _outcome(call):
    try:
        call()
        return "ok"
    except Exception as e:  # noqa: BLE001 (the kind is the point)
        return f"{type(e).__name__}: {e}"


def test_calls_in_a_forked_child_raise_at_once(hvd):
    parent = os.getpid()

    def child():
        lines = [f"{what} -> {_outcome(call)}" for what, call in [
            ("allreduce", lambda: hvd.allreduce(torch.ones(2), name="fork.py.child")),
            ("rank", hvd.rank),
            ("shutdown", hvd.shutdown)]]
        lines.append(f"is_initialized -> {hvd.is_initialized()}")
        return "\n".join(lines)

    report = _in_forked_child(child)
    lines = dict(line.split(" -> ", 1) for line in report.splitlines() if " -> " in line)
    assert set(lines) == {"allreduce", "rank", "shutdown", "is_initialized"}, report
    for call in ("allreduce", "rank", "shutdown"):
        assert lines[call].startswith("NotInitializedError: "), report
        assert f"is a fork of process {parent}" in lines[call], report
        assert "spawn" in lines[call], report
    assert lines["is_initialized"] == "False", report
    # The parent's runtime is untouched.
    assert hvd.allreduce(torch.ones(3), op=hvd.Sum, name="fork.py.parent").tolist() == \
        [float(hvd.size())] * 3


def test_a_handle_pending_at_the_fork_raises_in_the_child(hvd):
    """Rank 0 forks while its allreduce waits for the others, who submit it only after
    rank 0's child has reported."""
    me, n = hvd.rank(), hvd.size()
    x = torch.ones(2)
    handle = None
    report = ""
    if me == 0:
        handle = hvd.allreduce_async(x, op=hvd.Sum, name="fork.py.pending")
        report = _in_forked_child(lambda: _outcome(lambda: hvd.synchronize(handle)))
    hvd.allreduce(torch.ones(1), name="fork.py.pending.sync")  # rank 0's child is done
    if me != 0:
        handle = hvd.allreduce_async(x, op=hvd.Sum, name="fork.py.pending")
    assert hvd.synchronize(handle).tolist() == [float(n)] * 2
    if me == 0 and n > 1:
        assert report.startswith("NotInitializedError: "), report
        assert f"is a fork of process {os.getpid()}" in report, report
