"""Values for multi-rank tests: what each rank sends, and what every collective must
then give back, computed independently of Accord. And the start of the scripts mpirun
runs on their own (fault_train.py, diverged_names.py, late_rank.py), and their verdict."""

import argparse
import os
import sys

import torch

import accord.torch as hvd

# Every dtype whose values sent() can hold; bool (logic) and uint16 (PyTorch >= 2.3, with
# few operations) have tests of their own.
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max,
       "product": hvd.Product}


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def sent(rank, shape, dtype, op=None):
    """What ``rank`` sends: small integers, exact in every dtype and never overflowing
    int8 when summed over 4 ranks (products stay within 1..16)."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.float64)
    if op == hvd.Product:
        v = torch.remainder(i + rank, 2) + 1
    elif dtype == torch.uint8:
        v = torch.remainder(i * 3 + rank, 11) + rank
    else:
        v = torch.remainder(i * 3 + rank, 11) - 5 + rank
    return v.reshape(shape).to(dtype)


def scaled(values, dtype, factor, divisor=1):
    """``values`` (float64) times factor / divisor as Accord (and Horovod) scale
    ``dtype``: in float64, then for integer dtypes truncated toward zero and
    saturated."""
    out = values * factor / divisor
    if dtype.is_floating_point:
        return out
    info = torch.iinfo(dtype)
    return torch.trunc(out).clamp(info.min, info.max)


def reduced(ranks, shape, dtype, op, prescale=1.0, postscale=1.0):
    """The reduction over ``ranks`` of what they sent, as Accord defines it (Horovod's
    definition): each rank's tensor times prescale, reduced, times postscale (and, for
    Average, divided by the number of ranks); integer dtypes truncated toward zero
    after each scaling."""
    values = torch.stack([scaled(sent(r, shape, dtype, op).to(torch.float64), dtype, prescale)
                          for r in ranks])
    if op == hvd.Sum:
        out = values.sum(0)
    elif op == hvd.Average:
        out = values.sum(0)
    elif op == hvd.Min:
        out = values.min(0).values
    elif op == hvd.Max:
        out = values.max(0).values
    else:
        out = values.prod(0)
    out = scaled(out, dtype, postscale, len(ranks) if op == hvd.Average else 1)
    return out.to(dtype)


def tolerance(dtype):
    return {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6 if dtype.is_floating_point
                                                            else 0)


def assert_equal(actual, expected, what=""):
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), \
        f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    tol = tolerance(expected.dtype)
    a = actual.to(torch.float64)
    e = expected.to(torch.float64)
    bad = (a - e).abs() > tol * e.abs().clamp(min=1)
    assert not bad.any(), f"{what}: {int(bad.sum())} elements differ, e.g. " \
        f"{a[bad][:5].tolist()} instead of {e[bad][:5].tolist()}"


def rows_of(rank, rows, cols, dtype):
    """A (rows, cols) block whose every value says which rank and row it came from."""
    r = torch.arange(rows, dtype=torch.float64).unsqueeze(1)
    c = torch.arange(cols, dtype=torch.float64)
    return (rank * 16 + torch.remainder(r * cols + c, 16)).to(dtype)


def start_script(doc):
    """For a script mpirun runs on its own: --help from its docstring, init(), and the
    bounds it checks against: (ACCORD_STALL_SHUTDOWN_TIME, the time scale sanitizer
    builds stretch waits by, as ci/sanitize.sh sets ACCORD_TEST_TIME_SCALE)."""
    argparse.ArgumentParser(description=doc.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    hvd.init()
    stall = float(os.environ.get("ACCORD_STALL_SHUTDOWN_TIME", "300"))
    scale = max(1.0, float(os.environ.get("ACCORD_TEST_TIME_SCALE", "1")))
    return stall, scale


def end_script(marker, rank, problems, elapsed):
    """A script's verdict, the line its CTest counts: "<marker>-OK rank R after T s", or
    "<marker>-FAILED rank R: ..." and exit status 1."""
    if problems:
        print(f"{marker}-FAILED rank {rank}: " + "; ".join(problems), flush=True)
        sys.exit(1)
    print(f"{marker}-OK rank {rank} after {elapsed:.1f} s", flush=True)
