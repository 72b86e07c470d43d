"""allgather, broadcast, alltoall and reducescatter in their forms, for every dtype,
on the global set and on process sets; barrier and poll."""

import re

import pytest
import torch

from helpers import DTYPES, OPS, assert_equal, dtype_id, reduced, rows_of, sent

COLS = 3


def gathered(ranks, rows, dtype):
    return torch.cat([rows_of(r, rows(r), COLS, dtype) for r in ranks])


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_allgather(hvd, dtype):
    me, ranks = hvd.rank(), list(range(hvd.size()))
    rows = lambda r: r + 1  # noqa: E731  (first dimension differs per rank)
    expected = gathered(ranks, rows, dtype)
    x = rows_of(me, rows(me), COLS, dtype)
    assert_equal(hvd.allgather(x, name=f"ag.{dtype_id(dtype)}"), expected, "allgather")
    h = hvd.allgather_async(x, name=f"ag.{dtype_id(dtype)}.async")
    assert_equal(hvd.synchronize(h), expected, "allgather_async")
    assert_equal(x, rows_of(me, rows(me), COLS, dtype), "allgather leaves its input")
    outs = hvd.grouped_allgather([x, x[:1]], name=f"gag.{dtype_id(dtype)}")
    assert_equal(outs[0], expected, "grouped_allgather")
    assert_equal(outs[1], gathered(ranks, lambda r: 1, dtype), "grouped_allgather")
    h = hvd.grouped_allgather_async([x[:1]], name=f"gag.{dtype_id(dtype)}.async")
    assert_equal(hvd.synchronize(h)[0], gathered(ranks, lambda r: 1, dtype))


def test_allgather_zero_rows_on_some_ranks(hvd):
    me, ranks = hvd.rank(), list(range(hvd.size()))
    rows = lambda r: 0 if r % 2 == 0 else 2  # noqa: E731
    out = hvd.allgather(rows_of(me, rows(me), COLS, torch.float32), name="ag.zero_rows")
    assert_equal(out, gathered(ranks, rows, torch.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_broadcast(hvd, dtype):
    me, n = hvd.rank(), hvd.size()
    for root in range(n):
        expected = sent(root, (4, 5), dtype)
        x = sent(me, (4, 5), dtype)
        base = f"bc.{dtype_id(dtype)}.{root}"
        assert_equal(hvd.broadcast(x, root, name=base), expected, "broadcast")
        assert_equal(x, sent(me, (4, 5), dtype), "broadcast leaves its input")
        assert_equal(hvd.synchronize(hvd.broadcast_async(x, root, name=base + ".async")),
                     expected, "broadcast_async")
        y = x.clone()
        assert hvd.synchronize(hvd.broadcast_async_(y, root, name=base + ".async_")) is y
        assert_equal(y, expected, "broadcast_async_")
        assert hvd.broadcast_(x, root, name=base + ".inplace") is x
        assert_equal(x, expected, "broadcast_")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_alltoall(hvd, dtype):
    me, n = hvd.rank(), hvd.size()
    # Rank s sends (s + d) % 3 rows to rank d; the rows say who sent them and which.
    splits = lambda s: [(s + d) % 3 for d in range(n)]  # noqa: E731
    x = rows_of(me, sum(splits(me)), COLS, dtype)
    parts = []
    for s in range(n):
        start = sum(splits(s)[:me])
        parts.append(rows_of(s, sum(splits(s)), COLS, dtype)[start:start + splits(s)[me]])
    expected = torch.cat(parts)
    out, received = hvd.alltoall(x, splits=torch.tensor(splits(me), dtype=torch.int32),
                                 name=f"a2a.{dtype_id(dtype)}")
    assert_equal(out, expected, "alltoall")
    assert received.dtype == torch.int32
    assert received.tolist() == [splits(s)[me] for s in range(n)]
    out, received = hvd.synchronize(hvd.alltoall_async(x, splits(me), name=f"a2a.{dtype_id(dtype)}.async"))
    assert_equal(out, expected, "alltoall_async")
    assert received.dtype == torch.int32
    assert received.tolist() == [splits(s)[me] for s in range(n)]
    # As in Horovod, received splits take the dtype (and device) of the splits tensor.
    out, received = hvd.alltoall(x, splits=torch.tensor(splits(me), dtype=torch.int64),
                                 name=f"a2a.{dtype_id(dtype)}.int64")
    assert_equal(out, expected, "alltoall, int64 splits")
    assert received.dtype == torch.int64 and received.tolist() == [splits(s)[me] for s in range(n)]


def test_alltoall_equal_splits_returns_only_the_tensor(hvd):
    me, n = hvd.rank(), hvd.size()
    x = rows_of(me, 2 * n, COLS, torch.float64)
    out = hvd.alltoall(x, name="a2a.equal")
    expected = torch.cat([rows_of(s, 2 * n, COLS, torch.float64)[2 * me:2 * me + 2]
                          for s in range(n)])
    assert isinstance(out, torch.Tensor)
    assert_equal(out, expected)


@pytest.mark.parametrize("op_name", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reducescatter(hvd, dtype, op_name):
    op = OPS[op_name]
    me, n = hvd.rank(), hvd.size()
    rows = 2 * n + 1  # uneven: the first rank gets a row more
    full = reduced(list(range(n)), (rows, COLS), dtype, op)
    start = sum(rows // n + (1 if r < rows % n else 0) for r in range(me))
    mine = rows // n + (1 if me < rows % n else 0)
    expected = full[start:start + mine]
    x = sent(me, (rows, COLS), dtype, op)
    name = f"rs.{dtype_id(dtype)}.{op_name}"
    assert_equal(hvd.reducescatter(x, name=name, op=op), expected, "reducescatter")
    assert_equal(hvd.synchronize(hvd.reducescatter_async(x, name=name + ".async", op=op)),
                 expected, "reducescatter_async")
    outs = hvd.grouped_reducescatter([x, x], name=name + ".grouped", op=op)
    assert_equal(outs[0], expected, "grouped_reducescatter")
    assert_equal(outs[1], expected, "grouped_reducescatter")
    h = hvd.grouped_reducescatter_async([x], name=name + ".grouped_async", op=op)
    assert_equal(hvd.synchronize(h)[0], expected, "grouped_reducescatter_async")


def test_reducescatter_default_is_average_with_scale_factors(hvd):
    me, n = hvd.rank(), hvd.size()
    x = sent(me, (n, 4), torch.float64)
    out = hvd.reducescatter(x, name="rs.default", prescale_factor=0.5, postscale_factor=4.0)
    full = reduced(list(range(n)), (n, 4), torch.float64, hvd.Average, 0.5, 4.0)
    assert_equal(out, full[me:me + 1])


def test_into_prepared_outputs(hvd):
    # Accord's own callers (the sharded optimizer) reduce-scatter into a kept buffer and
    # allgather in place: this rank's rows of the output are the input itself.
    from accord.torch.gather import grouped_allgather_into

    me, n = hvd.rank(), hvd.size()
    rows = 2 * n + 1
    start = sum(rows // n + (1 if r < rows % n else 0) for r in range(me))
    mine = rows // n + (1 if me < rows % n else 0)
    x = sent(me, (rows, COLS), torch.float32, hvd.Sum)
    kept = torch.full((mine, COLS), -1.0)
    out = hvd.synchronize(hvd.reducescatter_async(x, name="rs.into", op=hvd.Sum, output=kept))
    assert out is kept
    assert_equal(kept, reduced(list(range(n)), (rows, COLS), torch.float32,
                               hvd.Sum)[start:start + mine], "reducescatter into")

    whole = torch.zeros(rows, COLS)
    whole[start:start + mine] = rows_of(me, mine, COLS, torch.float32)
    parts = [whole[start:start + mine], whole[start:start + 1]]
    outs = hvd.synchronize(grouped_allgather_into(parts, [whole, None], name="ag.into"))
    assert outs[0] is whole
    expected = torch.cat([rows_of(r, rows // n + (1 if r < rows % n else 0), COLS,
                                  torch.float32) for r in range(n)])
    assert_equal(whole, expected, "allgather in place")
    assert outs[1].shape == (n, COLS)  # None: Accord allocates, as without outputs
    with pytest.raises(hvd.InvalidCollectiveError, match=r"prepared for \[1,3\] does not fit"):
        hvd.synchronize(grouped_allgather_into([parts[1]], [torch.zeros(1, COLS)],
                                                name="ag.wrong"))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_collectives_on_process_sets(hvd, process_sets, dtype):
    me = hvd.rank()
    for ps in process_sets:
        tag = f"ps{ps.process_set_id}.{dtype_id(dtype)}"
        if not ps.included():
            with pytest.raises(ValueError):
                hvd.allgather(torch.ones(1, 2, dtype=dtype), name=f"{tag}.ag", process_set=ps)
            continue
        ranks, k = ps.ranks, ps.size()
        sr = ps.rank()
        assert ranks[sr] == me
        out = hvd.allgather(rows_of(me, 2, COLS, dtype), name=f"{tag}.ag", process_set=ps)
        assert_equal(out, gathered(ranks, lambda r: 2, dtype), f"allgather on {ranks}")
        root = ranks[-1]  # a global rank, as in Horovod
        out = hvd.broadcast(sent(me, (3,), dtype), root, name=f"{tag}.bc", process_set=ps)
        assert_equal(out, sent(root, (3,), dtype), f"broadcast on {ranks}")
        x = rows_of(me, k, COLS, dtype)
        out = hvd.alltoall(x, name=f"{tag}.a2a", process_set=ps)
        assert_equal(out, torch.cat([rows_of(r, k, COLS, dtype)[sr:sr + 1] for r in ranks]),
                     f"alltoall on {ranks}")
        x = sent(me, (k, 2), dtype)
        out = hvd.reducescatter(x, name=f"{tag}.rs", op=hvd.Sum, process_set=ps)
        assert_equal(out, reduced(ranks, (k, 2), dtype, hvd.Sum)[sr:sr + 1],
                     f"reducescatter on {ranks}")
        outs = hvd.grouped_allreduce([sent(me, (2,), dtype)], name=f"{tag}.gar", op=hvd.Max,
                                     process_set=ps)
        assert_equal(outs[0], reduced(ranks, (2,), dtype, hvd.Max))
        hvd.barrier(process_set=ps)
        outsider = next((r for r in range(hvd.size()) if r not in ranks), hvd.size())
        with pytest.raises(ValueError, match="root rank"):
            hvd.broadcast(torch.ones(1, dtype=dtype), root_rank=outsider, process_set=ps)


def test_process_set_queries(hvd, process_sets):
    for ps in process_sets:
        assert ps.size() == len(ps.ranks)
        assert ps.included() == (hvd.rank() in ps.ranks)
        assert ps.rank() == (ps.ranks.index(hvd.rank()) if ps.included() else None)
    assert hvd.global_process_set.size() == hvd.size()
    assert hvd.global_process_set.ranks == list(range(hvd.size()))


def test_add_and_remove_process_set(hvd, process_sets):
    """On the even ranks' set ([0] with 2 ranks, where every other set is taken too):
    removed, then registered again, under a new id."""
    ps = process_sets[0]
    ranks, old_id = list(ps.ranks), ps.process_set_id
    with pytest.raises(ValueError, match=re.escape(f"ranks {ranks} are already process set "
                                                   f"{old_id};")):
        hvd.add_process_set(ranks)
    everyone = list(range(hvd.size()))
    with pytest.raises(ValueError, match=re.escape(f"ranks {everyone} are already process set 0;")):
        hvd.add_process_set(hvd.ProcessSet(everyone))
    assert hvd.remove_process_set(ps)
    assert ps.process_set_id is None
    assert not hvd.remove_process_set(ps)
    assert not hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    assert hvd.add_process_set(ps) is ps  # the same ranks again, now that they are free
    assert ps.process_set_id not in (None, 0) and ps.ranks == ranks
    if ps.included():
        total = hvd.allreduce(torch.tensor([5.0]), op=hvd.Sum, process_set=ps).item()
        assert total == 5.0 * len(ranks)


def test_init_process_sets_as_horovods(hvd, process_sets):
    """init(process_sets=[...]) again, as Horovod's own tests call it: a set already
    registered is that set again; a list naming a set twice, or the global set's ranks,
    raises ValueError (here on every rank, the lists being the same) after registering
    the other sets; init() again with each set once goes on, and again with the same
    objects too. Removing a set unregisters every object that held its id."""
    n = hvd.size()
    table = hvd.mpi_ops._basics._get_process_set_ids_and_ranks
    known = process_sets[0]
    assert table()[0] == list(range(n)) and table()[known.process_set_id] == known.ranks
    fresh = [n - 1]  # the fixture's own set with 2 ranks ({1}); a new one with 3 ({2})
    was_new = fresh not in table().values()
    first = [hvd.ProcessSet(reversed(known.ranks)), hvd.ProcessSet(fresh),
             hvd.ProcessSet(list(known.ranks)), hvd.ProcessSet(range(n))]
    with pytest.raises(ValueError) as refused:
        hvd.init(process_sets=first)
    message = str(refused.value)
    assert f"ranks {known.ranks} are given twice in this rank's list (the list " \
           f"{known.ranks} and the list {known.ranks})" in message, message
    assert f"ranks {list(range(n))} are already process set 0, the global set" in message
    assert [ps.process_set_id for ps in first][:3] == \
        [known.process_set_id, {tuple(r): i for i, r in table().items()}[tuple(fresh)], None]
    again = [hvd.ProcessSet(known.ranks), hvd.ProcessSet(fresh)]
    hvd.init(process_sets=again)
    hvd.init(process_sets=again)
    assert [ps.process_set_id for ps in again] == [known.process_set_id,
                                                  first[1].process_set_id]
    if again[1].included():
        total = hvd.allreduce(torch.tensor([2.0]), op=hvd.Sum, process_set=again[1],
                              name="init.again").item()
        assert total == 2.0 * len(fresh)
    if was_new:
        assert hvd.remove_process_set(again[1])
        assert first[1].process_set_id is None and fresh not in table().values()
    assert known.process_set_id is not None  # untouched throughout


@pytest.mark.parametrize("contiguous", [True, False])
def test_wait_on_stream_of_a_cpu_collective_waits_on_the_host(hvd, contiguous):
    """No GPU work to wait for: wait_on_stream returns False once the collective
    completed, and the handle stays valid for synchronize(), which gives the result
    (copied back into a tensor that was not contiguous)."""
    t = torch.full((1 << 16,), float(hvd.rank()))
    if not contiguous:
        t = torch.full((1 << 16, 2), float(hvd.rank()))[:, 1]
    handle = hvd.allreduce_async_(t, op=hvd.Sum, name=f"cpu.wait_on_stream.{contiguous}")
    assert hvd.wait_on_stream(handle) is False
    assert hvd.poll(handle)
    n = hvd.size()
    assert hvd.synchronize(handle) is t
    assert torch.all(t == n * (n - 1) / 2)
    with pytest.raises(ValueError, match="wait_on_stream: handle .* unknown"):
        hvd.wait_on_stream(handle)


def test_barrier(hvd):
    hvd.barrier()


def test_collectives_really_run_asynchronously(hvd):
    """A large batch of allreduces is still running when the calls have returned:
    poll() says False at least once before synchronize()."""
    tensors = [torch.full((1 << 20,), float(hvd.rank()), dtype=torch.float32) for _ in range(16)]
    handles = [hvd.allreduce_async_(t, name=f"async.{i}", op=hvd.Sum)
               for i, t in enumerate(tensors)]
    seen_pending = not all(hvd.poll(h) for h in handles)
    for h in handles:
        hvd.synchronize(h)
    assert seen_pending, "every allreduce had finished before poll() was called"
    n = hvd.size()
    assert all(torch.all(t == n * (n - 1) / 2) for t in tensors)
    with pytest.raises(ValueError, match="unknown"):
        hvd.poll(handles[0])  # synchronized: the handle is gone


# ---- bool and uint16, which Horovod's CPU path also takes ---------------------------------
def test_bool_collectives(hvd):
    """Bool tensors move as they are; reduced, Sum and Max are logical or, Min and
    Product logical and; Average and scale factors are refused at once."""
    me, n = hvd.rank(), hvd.size()
    pattern = lambda r: torch.tensor([r % 2 == 0, r == 0, True, False, r == n - 1])  # noqa: E731
    x = pattern(me)
    every = torch.stack([pattern(r) for r in range(n)])
    for op, expected in ((hvd.Sum, every.any(0)), (hvd.Max, every.any(0)),
                         (hvd.Min, every.all(0)), (hvd.Product, every.all(0))):
        out = hvd.allreduce(x, op=op, name=f"bool.ar.{op}")
        assert out.dtype == torch.bool and torch.equal(out, expected), (op, out, expected)
    out = hvd.allgather(x.reshape(1, -1), name="bool.ag")
    assert out.dtype == torch.bool and torch.equal(out, every)
    assert torch.equal(hvd.broadcast(x, n - 1, name="bool.bc"), pattern(n - 1))
    # Every rank sends its pattern to each rank, so each receives every rank's.
    out = hvd.alltoall(x.reshape(1, -1).expand(n, -1).contiguous(), name="bool.a2a")
    assert out.dtype == torch.bool and torch.equal(out, every)
    rs = hvd.reducescatter(x.reshape(1, -1).expand(n, -1).contiguous(), op=hvd.Max,
                           name="bool.rs")
    assert torch.equal(rs, every.any(0, keepdim=True))
    with pytest.raises(ValueError, match="Average is not defined for bool"):
        hvd.allreduce(x, name="bool.average")
    with pytest.raises(ValueError, match="bool tensors cannot be scaled"):
        hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, name="bool.scaled")


@pytest.mark.skipif(not hasattr(torch, "uint16"), reason="torch.uint16 is PyTorch >= 2.3")
def test_uint16_collectives(hvd):
    me, n = hvd.rank(), hvd.size()
    values = lambda r: torch.tensor([0, 1, 65535 - r, 300 * r], dtype=torch.int64)  # noqa: E731
    x = values(me).to(torch.uint16)
    out = hvd.allgather(x, name="u16.ag")
    assert out.dtype == torch.uint16
    assert out.to(torch.int64).tolist() == torch.cat([values(r) for r in range(n)]).tolist()
    out = hvd.broadcast(x, 0, name="u16.bc")
    assert out.to(torch.int64).tolist() == values(0).tolist()
    out = hvd.allreduce(x, op=hvd.Min, name="u16.min")
    expected = torch.stack([values(r) for r in range(n)]).min(0).values
    assert out.dtype == torch.uint16 and out.to(torch.int64).tolist() == expected.tolist()
    out = hvd.allreduce(torch.tensor([7 + me], dtype=torch.uint16), op=hvd.Average,
                        name="u16.average")
    assert out.to(torch.int64).item() == (sum(7 + r for r in range(n))) // n


def test_groups_of_gathers_and_scatters_over_several_steps(hvd):
    # A group is negotiated once, then answered by the response cache: each step's
    # results must be that step's, whichever way the group went. Two dtypes make two
    # groups under one handle; the rows of a member differ by rank (0 on rank 0).
    me, n = hvd.rank(), hvd.size()
    for step in range(3):
        parts = [rows_of(me + step, me + 1, COLS, torch.float32),
                 rows_of(me, me, COLS, torch.float64),
                 rows_of(me + step, 2, COLS, torch.float32)]
        outs = hvd.grouped_allgather(parts, name="gag.steps")
        assert_equal(outs[0], torch.cat([rows_of(r + step, r + 1, COLS, torch.float32)
                                         for r in range(n)]), f"step {step}, member 0")
        assert_equal(outs[1], torch.cat([rows_of(r, r, COLS, torch.float64) for r in range(n)]),
                     f"step {step}, member 1")
        assert_equal(outs[2], torch.cat([rows_of(r + step, 2, COLS, torch.float32)
                                         for r in range(n)]), f"step {step}, member 2")
        xs = [sent(me + step, (2 * n + 1, COLS), torch.float32, hvd.Sum),
              sent(me, (n, 2), torch.float32, hvd.Sum)]
        outs = hvd.grouped_reducescatter(xs, name="grs.steps", op=hvd.Sum)
        full = reduced([r + step for r in range(n)], (2 * n + 1, COLS), torch.float32, hvd.Sum)
        start = sum(2 + (1 if r < 1 else 0) for r in range(me))
        assert_equal(outs[0], full[start:start + 2 + (1 if me < 1 else 0)], f"step {step}")
        assert_equal(outs[1], reduced(list(range(n)), (n, 2), torch.float32,
                                      hvd.Sum)[me:me + 1], f"step {step}")


def test_a_group_of_different_sizes_on_two_ranks_fails_at_once_on_every_rank(hvd):
    # The members of a group carry its size: a rank that grouped fewer tensors fails
    # the group on every rank in the cycle they meet, not after the stall bound.
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    me = hvd.rank()
    count = 3 if me == 0 else 2
    parts = [torch.ones(1, COLS) for _ in range(count)]
    with pytest.raises(hvd.MismatchError,
                       match=r"grouped allgather 'gag.sizes': rank \d sent \d tensors, rank \d "
                             r"sent \d"):
        hvd.grouped_allgather(parts, name="gag.sizes")
    assert_equal(hvd.grouped_allgather([torch.ones(1, COLS)], name="gag.after")[0],
                 torch.ones(hvd.size(), COLS), "a group after the failed one")
