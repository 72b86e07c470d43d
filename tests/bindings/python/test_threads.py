"""accord.torch from several Python threads at once, as a script with a metrics thread or
a thread per model replica has it: four threads per rank submit collectives of every
kind, blocking and asynchronous, names reused every round, while the main thread waits.
The bindings release the GIL while a collective waits and allocate outputs without it;
every result is checked, and a thread that deadlocks fails the test at its join's
deadline instead of hanging the suite."""

import random
import threading

import torch

from helpers import DTYPES, OPS, assert_equal, reduced, rows_of, sent

THREADS = 4
ROUNDS = 25


def _round(hvd, t, rnd, me, n):
    """One round of thread t: every kind of collective, the same on every rank, submitted
    in this rank's own order and awaited in another."""
    rng = random.Random(1000 * t + rnd)  # the jobs: the same on every rank
    dtype = rng.choice(DTYPES)
    op_name = rng.choice(sorted(OPS))
    op = OPS[op_name]
    shape = (rng.choice([0, 1, 7, 300, 20000]),)
    rows = [(rnd + r) % 3 for r in range(n)]
    root = rng.randrange(n)
    prefix = f"threads.t{t}.j"  # reused every round: the response cache's path
    jobs = []

    def allreduce():
        x = sent(me, shape, dtype, op)
        return (hvd.allreduce_async(x, name=prefix + "ar", op=op),
                lambda out: assert_equal(out, reduced(range(n), shape, dtype, op),
                                         f"allreduce {dtype} {op_name}"))

    def grouped():
        xs = [sent(me, (k + 2,), torch.float32, hvd.Sum) for k in range(3)]
        return (hvd.grouped_allreduce_async(xs, name=prefix + "grouped", op=hvd.Sum),
                lambda outs: [assert_equal(o, reduced(range(n), (k + 2,), torch.float32, hvd.Sum),
                                           f"grouped member {k}") for k, o in enumerate(outs)])

    def allgather():
        x = rows_of(me, rows[me], 3, dtype)
        want = torch.cat([rows_of(r, rows[r], 3, dtype) for r in range(n)])
        return (hvd.allgather_async(x, name=prefix + "gather"),
                lambda out: assert_equal(out, want, f"allgather {dtype}"))

    def broadcast():
        x = rows_of(me, 5, 2, dtype)
        return (hvd.broadcast_async(x, root, name=prefix + "bcast"),
                lambda out: assert_equal(out, rows_of(root, 5, 2, dtype), f"broadcast from {root}"))

    def alltoall():
        splits = torch.tensor([(me + r) % 2 + 1 for r in range(n)])
        x = torch.cat([rows_of(me * n + r, int(splits[r]), 2, dtype) for r in range(n)])
        want = torch.cat([rows_of(s * n + me, (s + me) % 2 + 1, 2, dtype) for s in range(n)])
        return (hvd.alltoall_async(x, splits=splits, name=prefix + "alltoall"),
                lambda out: assert_equal(out[0] if isinstance(out, tuple) else out, want,
                                         f"alltoall {dtype}"))

    def blocking_allreduce():
        x = sent(me, (9,), torch.float64, hvd.Max)
        out = hvd.allreduce(x, name=prefix + "blocking", op=hvd.Max)
        assert_equal(out, reduced(range(n), (9,), torch.float64, hvd.Max), "blocking allreduce")
        return None

    makers = [allreduce, grouped, allgather, broadcast, alltoall]
    random.Random(me * 7919 + 31 * t + rnd).shuffle(makers)  # this rank's own order
    for make in makers:
        jobs.append(make())
    blocking_allreduce()  # while this thread's others are in flight
    random.Random(me + 17 * rnd).shuffle(jobs)
    for handle, check in jobs:
        check(hvd.synchronize(handle))


def test_four_threads_per_rank_every_collective_names_reused(hvd):
    me, n = hvd.rank(), hvd.size()
    failures = []

    def run(t):
        try:
            for rnd in range(ROUNDS):
                _round(hvd, t, rnd, me, n)
        except BaseException as e:  # noqa: B036 (reported by the main thread)
            failures.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=90)
    alive = [t for t, th in enumerate(threads) if th.is_alive()]
    assert not alive, f"threads {alive} still running after 90 s (a deadlock?)"
    assert not failures, "; ".join(failures[:5])
