"""accord.numpy: the same collectives on NumPy arrays, through the same runtime."""

import subprocess
import sys

import numpy as np
import pytest

import accord.numpy as acc

DTYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64, np.float16, np.float32,
          np.float64]


def sent(rank, shape, dtype):
    n = int(np.prod(shape))
    return ((np.arange(n) * 3 + rank) % 11 + rank).reshape(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_collectives(hvd, dtype):
    me, n = acc.rank(), acc.size()
    assert (me, n) == (hvd.rank(), hvd.size())  # one runtime for both modules
    tag = np.dtype(dtype).name
    x = sent(me, (4, 3), dtype)
    total = sum(sent(r, (4, 3), np.float64) for r in range(n))
    out = acc.allreduce(x, op=acc.Sum, name=f"np.ar.{tag}")
    assert out.dtype == np.dtype(dtype) and np.array_equal(out, total.astype(dtype))
    assert np.array_equal(x, sent(me, (4, 3), dtype))
    assert acc.allreduce_(x, op=acc.Max, name=f"np.ar_.{tag}") is x
    assert np.array_equal(x, np.max([sent(r, (4, 3), dtype) for r in range(n)], axis=0))
    h = acc.allreduce_async(sent(me, (4, 3), dtype), op=acc.Sum, name=f"np.ar.async.{tag}")
    assert np.array_equal(acc.synchronize(h), total.astype(dtype))

    rows = np.concatenate([sent(r, (r + 1, 2), dtype) for r in range(n)])
    got = acc.allgather(sent(me, (me + 1, 2), dtype), name=f"np.ag.{tag}")
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, rows)

    y = sent(me, (3,), dtype)
    assert np.array_equal(acc.broadcast(y, n - 1, name=f"np.bc.{tag}"), sent(n - 1, (3,), dtype))
    acc.broadcast_(y, 0, name=f"np.bc_.{tag}")
    assert np.array_equal(y, sent(0, (3,), dtype))

    out, received = acc.alltoall(np.full((n, 2), me, dtype=dtype), splits=[1] * n,
                                 name=f"np.a2a.{tag}")
    assert np.array_equal(out, np.repeat(np.arange(n), 2).reshape(n, 2).astype(dtype))
    assert received.tolist() == [1] * n

    rs = acc.reducescatter(sent(me, (n, 2), dtype), op=acc.Sum, name=f"np.rs.{tag}")
    assert np.array_equal(rs, sum(sent(r, (n, 2), np.float64) for r in range(n))[me:me + 1]
                          .astype(dtype))


def test_numpy_bool(hvd):
    me, n = acc.rank(), acc.size()
    x = np.array([me == 0, True, False, me % 2 == 1])
    every = np.stack([np.array([r == 0, True, False, r % 2 == 1]) for r in range(n)])
    out = acc.allreduce(x, op=acc.Sum, name="np.bool.or")
    assert out.dtype == np.bool_ and np.array_equal(out, every.any(0))
    assert np.array_equal(acc.allreduce(x, op=acc.Min, name="np.bool.and"), every.all(0))
    got = acc.allgather(x.reshape(1, -1), name="np.bool.ag")
    assert got.dtype == np.bool_ and np.array_equal(got, every)


def test_numpy_non_contiguous_and_grouped_and_errors(hvd):
    n = acc.size()
    base = np.arange(12, dtype=np.float64).reshape(3, 4)
    view = base.T
    acc.allreduce_(view, op=acc.Sum, name="np.noncontig")
    assert np.array_equal(base, np.arange(12, dtype=np.float64).reshape(3, 4) * n)
    outs = acc.grouped_allreduce([np.ones(3), np.ones((2, 2))], op=acc.Sum, name="np.group")
    assert all(np.all(o == n) for o in outs)
    with pytest.raises(ValueError, match="not supported"):
        acc.allreduce(np.ones(2, dtype=np.complex64))
    with pytest.raises(ValueError, match="read-only"):
        frozen = np.ones(2)
        frozen.flags.writeable = False
        acc.allreduce_(frozen)
    with pytest.raises(ValueError, match="Adasum needs a floating-point tensor"):
        acc.allreduce(np.ones(2, dtype=np.int64), op=acc.Adasum)
    # The in-place forms take arrays only; a list or a scalar says so.
    for bad in ([1.0, 2.0], 3.0, np.float32(2)):
        with pytest.raises(ValueError, match="expected a numpy.ndarray"):
            acc.allreduce_(bad)
        with pytest.raises(ValueError, match="expected a numpy.ndarray"):
            acc.broadcast_(bad, 0)
    # A 0-d array or a scalar has no rows to gather, scatter or exchange: refused as the
    # runtime refuses it, not made a row of one.
    for call in (lambda x: acc.allgather(x), lambda x: acc.reducescatter(x, op=acc.Sum),
                 lambda x: acc.alltoall(x)):
        for scalar in (np.array(1.0, dtype=np.float32), 5):
            with pytest.raises(ValueError, match="at least one dimension"):
                call(scalar)


def test_torch_imports_after_accord_numpy(hvd):
    """PyTorch's wheels bring their own libnccl.so.2; Accord's extension, loaded first,
    must not take its place. In a process of its own (this one imported torch first)."""
    if hvd.rank() != 0:
        return
    p = subprocess.run([sys.executable, "-c",
                        "import accord.numpy, torch; print(torch.ones(2).sum().item())"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "2.0", p.stderr[-2000:]


@pytest.mark.parametrize("splits", [lambda n: [1.5] * n, lambda n: np.full(n, 1.0),
                                    lambda n: [1] * (n - 1) + [1.0]],
                         ids=["floats", "float array", "one float"])
def test_numpy_alltoall_splits_must_be_integers(hvd, splits):
    """Refused on the calling rank before anything is submitted, as accord.torch does:
    1.5 rows would otherwise be cut to 1 without a word."""
    n = acc.size()
    with pytest.raises(ValueError, match="splits must be integers"):
        acc.alltoall(np.zeros((n, 2), dtype=np.float32), splits=splits(n),
                     name="np.a2a.float_splits")
    # Integer splits of any integer type still work, and the name was not used up.
    out, received = acc.alltoall(np.full((n, 2), acc.rank(), dtype=np.float32),
                                 splits=np.ones(n, dtype=np.int64), name="np.a2a.float_splits")
    assert received.tolist() == [1] * n
    assert np.array_equal(out[:, 0], np.arange(n, dtype=np.float32))


def test_numpy_names_are_per_operation(hvd):
    """An allreduce and a broadcast named alike run at once, as in accord.torch."""
    me, n = acc.rank(), acc.size()
    summed = acc.allreduce_async(np.full(3, me + 1.0), op=acc.Sum, name="numpy.shared")
    sent_ = acc.broadcast_async(np.full(2, 10.0 * me), root_rank=n - 1, name="numpy.shared")
    assert acc.synchronize(summed).tolist() == [n * (n + 1) / 2] * 3
    assert acc.synchronize(sent_).tolist() == [10.0 * (n - 1)] * 2
