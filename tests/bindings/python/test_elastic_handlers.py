"""Horovod's elastic state-handler registry (horovod.torch.elastic.state) on Accord's
State, within one run of the processes (tests/elastic/state_phase.py takes a registered
handler's commit across a restart): a handler of the script's own, a subclass of a
built-in one, and the registry's checks."""

import pytest
import torch

import accord.torch.elastic.state as elastic_state


class Tally:
    """A script's own object, neither a model nor an optimizer."""

    def __init__(self, total):
        self.total = total


class TallyHandler(elastic_state.StateHandler):
    """Written as for Horovod: the saved state in an attribute, sync from rank 0."""

    def __init__(self, tally):
        super().__init__(tally)
        self.saved_total = tally.total
        self.syncs = 0

    def save(self):
        self.saved_total = self.value.total

    def restore(self):
        self.value.total = self.saved_total

    def sync(self):
        import accord.torch as hvd
        self.syncs += 1
        self.value.total = hvd.broadcast_object(self.value.total, root_rank=0)


class CountingModelHandler(elastic_state.ModelStateHandler):
    """A subclass of a built-in handler: the built-in's behaviour, plus the script's."""
    saves = 0

    def save(self):
        type(self).saves += 1
        super().save()


@pytest.fixture
def registry():
    """The registry as it was, put back after the test."""
    before = list(elastic_state.get_handler_registry())
    yield elastic_state.get_handler_registry()
    elastic_state.set_handler_registry(before)


def rank_model(rank):
    torch.manual_seed(rank)
    return torch.nn.Linear(3, 2)


def test_the_registry_has_horovods_names_and_defaults(hvd, registry):
    assert hvd.elastic.state.StateHandler is elastic_state.StateHandler
    types = [t for t, _ in registry]
    assert types == [torch.nn.Module, torch.optim.Optimizer, hvd.elastic.ElasticSampler]
    assert [c.__name__ for _, c in registry] == [
        "ModelStateHandler", "OptimizerStateHandler", "SamplerStateHandler"]
    with pytest.raises(NotImplementedError):
        elastic_state.StateHandler(1).save()


def test_a_registered_handler_of_the_scripts_own_is_saved_restored_and_synced(hvd, registry):
    me = hvd.rank()
    elastic_state.set_handler_registry(registry + [(Tally, TallyHandler)])
    tally = Tally(100 + me)
    state = hvd.elastic.TorchState(rank_model(me), None, tally=tally, epoch=me)
    handler = state._handlers["handler.tally"].handler
    assert isinstance(handler, TallyHandler) and handler.value is tally
    state.sync()
    assert (tally.total, state.epoch, handler.syncs) == (100, 0, 1)
    tally.total = 7
    state.restore()
    assert tally.total == 100, "restore() puts back what sync() gave"
    tally.total = 8
    state.commit()
    tally.total = 9
    state.restore()
    assert tally.total == 8, "restore() puts back the commit"
    # Another object under the same name: Horovod's set_value() (which saves it), and
    # from then on restore() loads the commit into the new one.
    other = Tally(50)
    tally.total = 9
    state.tally = other
    assert handler.value is other and state.tally is other
    state.restore()
    assert other.total == 8 and tally.total == 9
    with pytest.raises(TypeError, match=r"TorchState.tally holds an object kept by the "
                                        r"registered TallyHandler.*got int"):
        state.tally = 3
    # After a restart the newest commit may be loaded on another rank than 0 (the
    # lowest that holds it): its saved state reaches every rank before Horovod's sync.
    last = hvd.size() - 1
    other.total = 1000 + me
    handler.save()
    state._root = last
    state.sync()
    assert other.total == 1000 + last


def test_a_subclass_of_a_built_in_handler_keeps_the_built_ins_behaviour(hvd, registry):
    me = hvd.rank()
    elastic_state.set_handler_registry([(torch.nn.Module, CountingModelHandler)] + registry[1:])
    model = rank_model(me)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model, opt)
    assert isinstance(state._handlers["handler.model"].handler, CountingModelHandler)
    with pytest.raises(ValueError, match=r"CountingModelHandler.restore\(\): nothing was saved"):
        state._handlers["handler.model"].handler.restore()
    state.sync()
    root = rank_model(0).state_dict()
    assert all(torch.equal(v, root[k]) for k, v in model.state_dict().items())
    opt.zero_grad()
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    for p in model.parameters():
        opt.state[p]["momentum_buffer"].zero_()
    state.restore()
    assert all(torch.equal(v, committed[k]) for k, v in model.state_dict().items())
    assert all(torch.equal(opt.state[p]["momentum_buffer"], m)
               for p, m in zip(model.parameters(), momentum))
    assert CountingModelHandler.saves == 2  # the sync's snapshot, the commit's


def test_an_empty_registry_keeps_a_model_as_a_plain_attribute(hvd, registry):
    elastic_state.set_handler_registry([])
    model = rank_model(hvd.rank())
    state = hvd.elastic.TorchState(model=model)
    assert not state._kinds and state._handlers["objects"].names == ["model"]
    state.sync()  # pickled from rank 0: every rank holds rank 0's object
    root = rank_model(0).state_dict()
    assert all(torch.equal(v, root[k]) for k, v in state.model.state_dict().items())


@pytest.mark.parametrize("bad", [[Tally], [(Tally,)], [("Tally", TallyHandler)],
                                 [(Tally, TallyHandler), (Tally, 3)]])
def test_set_handler_registry_refuses_an_entry_that_is_not_a_type_and_a_class(hvd, registry,
                                                                               bad):
    with pytest.raises(TypeError, match=rf"set_handler_registry: entry {len(bad) - 1} is .*"
                                        r"a \(type, handler class\) pair"):
        elastic_state.set_handler_registry(bad)
    assert elastic_state.get_handler_registry() is registry
