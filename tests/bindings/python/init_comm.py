"""accord.torch over the application's own ranks (mpirun -np 3 or 4; not a pytest file:
each phase starts and ends the runtime, which the suite's processes keep running).

1. Refusals before anything starts: a list without this rank, a rank outside the
   world, a list of non-integers, a comm of another type.
2. init(comm=[world ranks]): the job split in two groups (the first half of the world
   ranks and the rest), each ordered from its highest world rank down, each running its
   own Accord at the same time with the same tensor names.
With mpi4py (Debian's python3-mpi4py; it initializes MPI, so the runtime can start
again after shutdown):
3. init(comm=MPI.COMM_WORLD.Split(...)): the same groups from a communicator.
4. init(comm=MPI.COMM_WORLD, process_sets=[ProcessSet(split by parity)]): each rank's
   ProcessSet stands for its own half; lists with duplicates are refused as Horovod
   refuses them, on the ranks whose own list has one, the other sets registered; init()
   again with the same sets takes their ids; then the process ends without shutdown(),
   which must come before mpi4py finalizes MPI (the runner fails on Accord's complaint).
Prints INIT-COMM-OK <phases> on every rank that passed.
"""
import os
import sys

import torch

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

import accord.torch as hvd

# Before any init, the world's shape comes from the launcher (mpi4py may be absent).
WORLD_RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
WORLD_SIZE = int(os.environ["OMPI_COMM_WORLD_SIZE"])
FIRST_HALF = (WORLD_SIZE + 1) // 2
COLOR = 0 if WORLD_RANK < FIRST_HALF else 1
MEMBERS = [r for r in reversed(range(WORLD_SIZE)) if (0 if r < FIRST_HALF else 1) == COLOR]


def refused(call, *needles):
    try:
        call()
    except ValueError as e:
        missing = [n for n in needles if n not in str(e)]
        assert not missing, f"the message misses {missing}: {e}"
        return
    raise AssertionError(f"{call} was not refused")


def check_group():
    """Collectives over this rank's group reach its members only, in its order."""
    n = len(MEMBERS)
    assert hvd.size() == n, (hvd.size(), n)
    assert MEMBERS[hvd.rank()] == WORLD_RANK, (hvd.rank(), MEMBERS)
    assert hvd.local_size() == n and hvd.cross_size() == 1
    for step in range(3):
        # The same names in both groups at once; the last one is reduced in pieces.
        grads = [torch.full((100 + t if t < 5 else 1 << 20,), float(WORLD_RANK + step))
                 for t in range(6)]
        handles = [hvd.allreduce_async(g, name=f"grad.{t}", op=hvd.Sum)
                   for t, g in enumerate(grads)]
        for t, h in enumerate(handles):
            out = hvd.synchronize(h)
            want = float(sum(MEMBERS) + n * step)
            assert torch.all(out == want), (t, out[:3], want)
    gathered = hvd.allgather(torch.full((hvd.rank() + 1, 2), WORLD_RANK, dtype=torch.int64),
                             name="who")
    want = [w for r, w in enumerate(MEMBERS) for _ in range(r + 1)]
    assert gathered[:, 0].tolist() == want, (gathered[:, 0].tolist(), want)
    for root in range(n):
        got = hvd.broadcast(torch.tensor([WORLD_RANK]), root_rank=root, name="from")
        assert got.item() == MEMBERS[root], (root, got.item())


def refusals():
    other = (WORLD_RANK + 1) % WORLD_SIZE
    refused(lambda: hvd.init(comm=[other]), f"rank {WORLD_RANK} of MPI_COMM_WORLD",
            "not among the ranks given")
    refused(lambda: hvd.init(comm=[WORLD_RANK, WORLD_SIZE]), str(WORLD_SIZE),
            f"0..{WORLD_SIZE - 1}")
    refused(lambda: hvd.init(comm=[WORLD_RANK, 0.5]), "integers", "0.5")
    refused(lambda: hvd.init(comm="0,1"), "expected a list of ranks")
    assert not hvd.is_initialized()


def by_list():
    hvd.init(comm=MEMBERS)
    assert hvd.global_process_set.mpi_comm is None
    check_group()
    hvd.shutdown()


def by_communicator():
    group = MPI.COMM_WORLD.Split(COLOR, -WORLD_RANK)
    hvd.init(comm=group)
    assert hvd.global_process_set.mpi_comm is group
    check_group()
    # A second init over the same ranks does nothing; over others it is refused.
    hvd.init(comm=group)
    if WORLD_SIZE > len(MEMBERS):
        refused(lambda: hvd.init(comm=MPI.COMM_WORLD), "already runs")
    hvd.shutdown()
    group.Free()


def process_set_from_communicator():
    parity = MPI.COMM_WORLD.Split(WORLD_RANK % 2, WORLD_RANK)
    clone = MPI.COMM_WORLD.Dup()
    evens = list(range(0, WORLD_SIZE, 2))
    odds = list(range(1, WORLD_SIZE, 2))
    mine = evens if WORLD_RANK % 2 == 0 else odds
    table = hvd.mpi_ops._basics._get_process_set_ids_and_ranks
    # As Horovod's init: a set of every rank (the global set's ranks) is refused on every
    # rank, after the halves were registered; init() itself has started the runtime.
    refused(lambda: hvd.init(comm=MPI.COMM_WORLD,
                             process_sets=[hvd.ProcessSet(parity), hvd.ProcessSet(clone)]),
            f"ranks {list(range(WORLD_SIZE))} are already process set 0, the global set",
            "call init() again with each set once")
    assert hvd.is_initialized()
    assert table() == {0: list(range(WORLD_SIZE)), 1: evens, 2: odds}, table()
    # The even ranks twice, from the communicator on even ranks and from the list on
    # all: a duplicate on the even ranks only, which refuse it; the odd ranks go on.
    half, listed = hvd.ProcessSet(parity), hvd.ProcessSet(evens)
    if WORLD_RANK % 2 == 0:
        refused(lambda: hvd.init(comm=MPI.COMM_WORLD, process_sets=[half, listed]),
                f"ranks {evens} are given twice in this rank's list (a communicator and "
                f"the list {evens})")
        assert half.process_set_id == 1 and listed.process_set_id is None
    else:
        hvd.init(comm=MPI.COMM_WORLD, process_sets=[half, listed])
        assert (half.process_set_id, listed.process_set_id) == (2, 1)
    assert table() == {0: list(range(WORLD_SIZE)), 1: evens, 2: odds}, table()
    # A rank left out of the Split (MPI.COMM_NULL) is named on every rank, none hangs.
    rest = MPI.COMM_WORLD.Split(MPI.UNDEFINED if WORLD_RANK == 0 else 0, WORLD_RANK)
    refused(lambda: hvd.add_process_set(hvd.ProcessSet(rest)),
            "add_process_set: ProcessSet(comm): rank(s) [0] passed MPI.COMM_NULL")
    # Each set once: the sets registered above, under their ids; and again, the same.
    split = hvd.ProcessSet(parity)
    hvd.init(comm=MPI.COMM_WORLD, process_sets=[split])
    hvd.init(comm=MPI.COMM_WORLD, process_sets=[split])
    clone.Free()
    assert split.ranks == mine, (split.ranks, mine)
    assert split.process_set_id == (1 if WORLD_RANK % 2 == 0 else 2)
    assert split.rank() == mine.index(WORLD_RANK)
    assert "mpi_comm=" in repr(split)
    out = hvd.allreduce(torch.tensor([float(WORLD_RANK)]), op=hvd.Sum, process_set=split,
                        name="half")
    assert out.item() == sum(mine), (out.item(), mine)
    # The ranks of a registered set again, through add_process_set: refused on every
    # rank alike.
    refused(lambda: hvd.add_process_set(hvd.ProcessSet(parity)), "already process set")
    # Removing a set unregisters every object that held its id.
    assert hvd.remove_process_set(hvd.ProcessSet(evens)) is False  # never registered
    again = hvd.ProcessSet(evens)
    hvd.init(comm=MPI.COMM_WORLD, process_sets=[again])
    assert again.process_set_id == 1
    assert hvd.remove_process_set(again)
    holders = [half, split] if WORLD_RANK % 2 == 0 else [listed]
    assert all(ps.process_set_id is None for ps in [again, *holders])
    assert table() == {0: list(range(WORLD_SIZE)), 2: odds}, table()
    # Ends without shutdown(): at exit, before mpi4py finalizes MPI.


def main():
    phases = []
    refusals()
    phases.append("refusals")
    if MPI is None:
        by_list()  # Accord initialized MPI and finalized it at shutdown: the last phase
        phases.append("list")
    else:
        by_list()
        by_communicator()
        process_set_from_communicator()
        phases += ["list", "communicator", "process-set"]
    print(f"INIT-COMM-OK {' '.join(phases)} (world rank {WORLD_RANK})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
