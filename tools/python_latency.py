"""The Python layer's own cost: a 4 KiB float32 allreduce (Sum, same name every time,
so the response cache hits as in accord-bench's latency case) timed from Python, run
under mpirun. Each iteration, as accord-bench does it: MPI_Barrier (Open MPI's, called
through ctypes: it spins, so the ranks start together), time one call, maximum over
ranks; medians per way of calling, the ways interleaved so a slow phase of a shared
machine hits them alike. tools/python_overhead.sh runs it beside accord-bench.

    mpirun -np 2 python3 tools/python_latency.py --iters 2000
"""

import argparse
import ctypes
import statistics
import time

import torch

import accord.torch as hvd
from accord import _core


def mpi_barrier():
    """MPI_Barrier on MPI_COMM_WORLD through the libmpi Accord already loaded. Accord's
    own barrier would do, but its ranks wake from a condition variable one after the
    other, and the later one's wake-up would be timed as part of the allreduce."""
    try:
        lib = ctypes.CDLL("libmpi.so.40")
        world = ctypes.addressof(ctypes.c_char.in_dll(lib, "ompi_mpi_comm_world"))
    except (OSError, ValueError):
        print("no Open MPI libmpi.so.40: timing after Accord's barrier instead")
        return hvd.barrier
    lib.MPI_Barrier.argtypes = [ctypes.c_void_p]
    return lambda: lib.MPI_Barrier(world)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    # One intra-op thread: torch's idle OpenMP workers spin for a while after each
    # parallel op and, on a small machine, take the cores Accord's threads wait for. That
    # is torch's cost, not the bindings', and accord-bench has no such threads.
    torch.set_num_threads(1)
    hvd.init()
    buffers = {k: torch.zeros(1024, dtype=torch.float32) for k in ("core", "inplace", "autograd")}
    core = buffers["core"]
    ways = {
        # The binding alone: what accord.torch adds on top is the difference.
        "accord._core allreduce_async().wait()": lambda: _core.allreduce_async(
            core.data_ptr(), _core.float32, core.shape, -1, "lat.core", hvd.Sum, 1.0, 1.0,
            0).wait(),
        "hvd.allreduce_(t) (in place)": lambda: hvd.allreduce_(
            buffers["inplace"], name="lat.inplace", op=hvd.Sum),
        "hvd.allreduce(t) (autograd, new tensor)": lambda: hvd.allreduce(
            buffers["autograd"], name="lat.autograd", op=hvd.Sum),
    }
    barrier = mpi_barrier()
    times = {k: [] for k in ways}
    for it in range(args.warmup + args.iters):
        for name, call in ways.items():
            barrier()
            t0 = time.perf_counter()
            call()
            dt = time.perf_counter() - t0
            if it >= args.warmup:
                times[name].append(dt)
    for name, samples in times.items():
        worst = hvd.allreduce_(torch.tensor(samples, dtype=torch.float64), op=hvd.Max,
                               name=f"lat.times.{name}")
        if hvd.rank() == 0:
            print(f"  python   {statistics.median(worst.tolist()) * 1e6:6.1f} us   {name}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
