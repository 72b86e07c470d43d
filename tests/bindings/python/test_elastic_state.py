"""hvd.elastic's State, TorchState and ElasticSampler within one run of the processes
(no restart; tests/elastic/ covers restarts): what Horovod scripts do with them, on
every rank. Without ACCORDRUN_ELASTIC_JOB a commit stays in memory."""

import pytest
import torch

BATCH = 2


class Items(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        return i

    def __len__(self):
        return self.n


def gathered(hvd, indices):
    """Every rank's indices, in one list."""
    return [i for part in hvd.allgather_object(sorted(int(i) for i in indices)) for i in part]


def test_horovods_submodule_paths_name_the_same_classes(hvd):
    """Scripts import ElasticSampler and TorchState from horovod.torch.elastic.sampler
    and .state (Horovod's Ray example does), or reach them as attributes of
    hvd.elastic, which also has init and shutdown as Horovod's does."""
    assert hvd.elastic.sampler.ElasticSampler is hvd.elastic.ElasticSampler
    assert hvd.elastic.state.TorchState is hvd.elastic.TorchState
    from accord.torch.elastic.sampler import ElasticSampler
    from accord.torch.elastic.state import TorchState
    assert ElasticSampler is hvd.elastic.ElasticSampler
    assert TorchState is hvd.elastic.TorchState
    assert hvd.elastic.init is hvd.init and hvd.elastic.shutdown is hvd.shutdown


def test_sampler_state_in_horovods_format(hvd):
    """Horovod's sampler state is {epoch, processed_num}: a script reading
    state_dict()["processed_num"] got a KeyError, and loading a checkpoint of Horovod's
    sampler raised KeyError('processed_indices'). Loaded, the epoch goes on with that
    many samples taken off, every rank agreeing on which."""
    n, total = hvd.size(), 10 * hvd.size() + 1
    sampler = hvd.elastic.ElasticSampler(Items(total), shuffle=True, seed=5)
    sampler.load_state_dict({"epoch": 2, "processed_num": 4})
    assert sampler.epoch == 2 and sampler.processed_num == 4
    assert len(sampler.remaining_indices) == total - 4
    assert sampler.state_dict()["processed_num"] == 4
    mine = hvd.allgather_object(list(sampler))
    # every remaining sample on some rank (a rank short of one repeats one, as Horovod's)
    assert {i for r in mine for i in r} == set(sampler.remaining_indices)
    plain = hvd.elastic.ElasticSampler(Items(total), shuffle=True, seed=5)
    plain.set_epoch(2)  # the same epoch from its start: its first 4 are the ones taken
    assert set(plain.remaining_indices[:4]) == sampler.processed_indices
    again = hvd.elastic.ElasticSampler(Items(total), shuffle=True, seed=5)
    again.load_state_dict(sampler.state_dict())  # Accord's own keys win
    assert again.processed_indices == sampler.processed_indices
    with pytest.raises(ValueError, match=r"expected 'epoch' with 'processed_indices' .*got "
                                         r"keys \['epoch'\]"):
        again.load_state_dict({"epoch": 0})
    assert sum(len(r) for r in mine) >= total - 4 and len(mine) == n


def test_processed_num_counts_every_ranks_samples_as_horovod_does(hvd):
    n = hvd.size()
    sampler = hvd.elastic.ElasticSampler(Items(8 * n), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(sampler=sampler)
    state.sync()
    assert sampler.processed_num == 0
    for b, _ in enumerate(torch.utils.data.DataLoader(Items(8 * n), batch_size=BATCH,
                                                      sampler=sampler)):
        sampler.record_batch(b, BATCH)
        assert sampler.processed_num == BATCH * n * (b + 1)
        if b == 1:
            break
    state.commit()  # gathers every rank's record: the count becomes exact
    assert sampler.processed_num == len(sampler.processed_indices) == 2 * BATCH * n
    sampler.record_batch(2, BATCH)
    assert sampler.processed_num == 3 * BATCH * n
    state.restore()
    assert sampler.processed_num == 2 * BATCH * n
    sampler.set_epoch(1)
    assert sampler.processed_num == 0


def test_record_batch_records_the_batch_a_resumed_loop_takes(hvd):
    """After a restore the remaining samples are dealt anew and a loop over them starts
    again; whatever number the script gives its batches (Horovod's own tests carry on
    counting), each records the batch it took, and the epoch takes each sample once."""
    n = hvd.size()
    total = 10 * n + 1  # a last round shorter than a batch per rank
    sampler = hvd.elastic.ElasticSampler(Items(total), shuffle=True, seed=5, batch_size=BATCH)
    state = hvd.elastic.TorchState(sampler=sampler, epoch=0)
    state.sync()
    loader = torch.utils.data.DataLoader(Items(total), batch_size=BATCH, sampler=sampler)
    taken = []
    for b, batch in enumerate(loader):
        taken += batch.tolist()
        sampler.record_batch(b, BATCH)
        if b == 1:
            break
    state.commit()
    for b, batch in enumerate(loader):  # lost: not committed
        sampler.record_batch(2 + b, BATCH)
        if b == 1:
            break
    state.restore()
    assert sorted(sampler.processed_indices) == sorted(gathered(hvd, taken))
    for b, batch in enumerate(loader, start=2):  # numbered on from the interruption
        assert batch.tolist() == sampler.get_indices(b - 2, BATCH)
        taken += batch.tolist()
        sampler.record_batch(b, BATCH)
    everyone = gathered(hvd, taken)
    assert set(everyone) == set(range(total))
    # Only the padding of the last round repeats a sample (fewer left than ranks).
    assert len(everyone) - total < n
    state.commit()
    assert sampler.processed_num == total
    state.sync()  # deals what is left of the epoch: nothing
    assert len(sampler) == 0


def test_a_new_pass_over_the_sampler_records_from_its_first_batch(hvd):
    sampler = hvd.elastic.ElasticSampler(Items(6 * hvd.size()), shuffle=False)
    first = list(sampler)
    sampler.record_batch(0, BATCH)
    sampler.record_batch(1, BATCH)
    assert sorted(sampler.processed_indices) == sorted(first[:2 * BATCH])
    assert list(sampler) == first  # a second pass, the same samples: nothing new
    sampler.record_batch(0, BATCH)
    assert sorted(sampler.processed_indices) == sorted(first[:2 * BATCH])
    assert sampler.processed_num == 2 * BATCH * hvd.size()
    sampler.record_batch(1, 100)  # past the end: the rest of the pass, no more
    assert sorted(sampler.processed_indices) == sorted(first)


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", None])
def test_record_batch_refuses_a_batch_size_that_is_not_a_positive_integer(hvd, bad):
    sampler = hvd.elastic.ElasticSampler(Items(8))
    with pytest.raises(ValueError, match=f"batch_size {bad!r}: expected a positive integer"):
        sampler.record_batch(0, bad)
    assert sampler.processed_num == 0


def test_on_hosts_updated_on_one_rank_interrupts_every_rank_once(hvd):
    state = hvd.elastic.State(bcast_object=hvd.broadcast_object, get_rank=hvd.rank)
    state.check_host_updates()  # nothing announced
    if hvd.rank() == 0:
        state.on_hosts_updated(5, None)
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as raised:
        state.commit()
    assert raised.value.committed
    state.check_host_updates()  # acted on: not again
    state.on_hosts_updated(5)  # no newer than the one acted on
    state.check_host_updates()
    if hvd.rank() == hvd.size() - 1:
        state.on_hosts_updated(6.5)
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt):
        state.check_host_updates()
    with pytest.raises(TypeError, match=r"timestamp must be a number, got 'soon'"):
        state.on_hosts_updated("soon")


def rank_model(rank):
    torch.manual_seed(rank)
    return torch.nn.Linear(3, 2)


def step(model, opt):
    opt.zero_grad()
    model(torch.ones(4, 3)).sum().backward()
    opt.step()


def test_restore_after_sync_puts_back_what_sync_gave_every_rank(hvd):
    me = hvd.rank()
    model = rank_model(me)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step(model, opt)
    state = hvd.elastic.TorchState(model, opt, batch=20 + me, epoch=10 + me)
    with pytest.raises(ValueError, match="nothing was committed or synced yet"):
        state.restore()
    state.sync()
    root = rank_model(0)
    root_opt = torch.optim.SGD(root.parameters(), lr=0.1, momentum=0.9)
    step(root, root_opt)
    synced = {k: v.clone() for k, v in model.state_dict().items()}
    for k, v in root.state_dict().items():
        assert torch.equal(synced[k], v), k
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    step(model, opt)
    state.batch, state.epoch = 99, 98
    state.restore()
    for k, v in model.state_dict().items():
        assert torch.equal(v, synced[k]), k
    for p, m in zip(model.parameters(), momentum):
        assert torch.equal(opt.state[p]["momentum_buffer"], m)
    assert (state.batch, state.epoch) == (20, 10)
    # A commit is the point to go back to from then on.
    step(model, opt)
    state.batch = 21
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    step(model, opt)
    state.batch = 22
    state.restore()
    for k, v in model.state_dict().items():
        assert torch.equal(v, committed[k]), k
    assert state.batch == 21


def test_a_model_or_optimizer_assigned_to_the_state_is_the_one_it_keeps(hvd):
    me = hvd.rank()
    first = rank_model(me)
    state = hvd.elastic.TorchState(first, None, ema=rank_model(me + 7), best=None)
    second = rank_model(me + 1)
    state.model = second
    opt = torch.optim.SGD(second.parameters(), lr=0.5, momentum=0.9)
    state.optimizer = opt  # given as None
    step(second, opt)
    ema = state.ema
    state.sync()  # every rank: rank 0's second model, optimizer and ema
    assert state.ema is ema, "a model under any name is loaded in place, not replaced"
    expected = {k: v.clone() for k, v in second.state_dict().items()}
    with torch.no_grad():
        for p in list(second.parameters()) + list(ema.parameters()):
            p.add_(1.0)
        for p in first.parameters():
            p.zero_()
    state.best = 0.5
    state.restore()
    for k, v in second.state_dict().items():
        assert torch.equal(v, expected[k]), k
    for (k, v), (_, e) in zip(ema.state_dict().items(), rank_model(7).state_dict().items()):
        assert torch.equal(v, e), k
    assert state.best is None
    assert all(bool((p == 0).all()) for p in first.parameters()), "the first model is let go"
    with pytest.raises(TypeError, match=r"TorchState.model holds a torch.nn.Module.*got SGD"):
        state.model = opt
    with pytest.raises(TypeError, match=r"TorchState.optimizer holds a torch.optim.Optimizer.*got NoneType"):
        state.optimizer = None
    assert state.model is second and state.optimizer is opt


def sharded_run(hvd, stage):
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    opt = hvd.ShardedOptimizer(torch.optim.AdamW(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters(), stage=stage)
    return model, opt


def sharded_steps(model, opt, first, count, rank):
    for step in range(first, first + count):
        g = torch.Generator().manual_seed(100 * step + rank)
        opt.zero_grad()
        model(torch.randn(4, 5, generator=g)).pow(2).mean().backward()
        opt.step()


def parts_equal(a, b):
    """Two sharded_state_dict()s hold the same values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(parts_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(parts_equal(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("stage", [1, 2])
def test_a_sharded_optimizer_is_committed_restored_and_resumed(hvd, stage):
    me = hvd.rank()
    model, opt = sharded_run(hvd, stage)
    state = hvd.elastic.TorchState(model, opt, step=0)
    state.sync()
    sharded_steps(model, opt, 0, 2, me)
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    part = opt.sharded_state_dict()
    assert all(p.numel() < sum(q.numel() for q in model.parameters())
               for p in part["state"][0].values() if isinstance(p, torch.Tensor) and p.dim())
    sharded_steps(model, opt, 2, 2, me)  # not committed
    state.restore()
    for k, v in model.state_dict().items():
        assert torch.equal(v, committed[k]), k
    assert parts_equal(opt.sharded_state_dict(), part)
    # After the restore the run goes on as one that was never interrupted.
    sharded_steps(model, opt, 2, 2, me)
    reference, ref_opt = sharded_run(hvd, stage)
    sharded_steps(reference, ref_opt, 0, 4, me)
    for (k, v), (_, r) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(v, r), k
    # resume() loads the commit on one rank and hands every rank its part.
    state.restore()
    with torch.no_grad():
        for s in opt._inner.state.values():
            for v in s.values():
                if isinstance(v, torch.Tensor) and v.dim() and me != 0:
                    v.add_(1.0)  # every rank but the loading one goes astray
    state.resume(after_reset=False)
    assert parts_equal(opt.sharded_state_dict(), part)
    for k, v in model.state_dict().items():
        assert torch.equal(v, committed[k]), k
