"""TorchState: a model, an optimizer, ElasticSamplers and plain attributes, committed
together. A snapshot clones the tensors (one copy of the state, no pickling); the disk
copy is written from it on the store's own thread."""

import torch

from accord.elastic.sampler import ElasticSampler
from accord.elastic.state import ObjectHandler, State


def _clone(value):
    """A copy of a state_dict-like structure, tensors cloned, the rest copied."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return type(value)((k, _clone(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_clone(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    return value


class ModelHandler:
    def __init__(self, model):
        self.model = model

    def snapshot(self):
        return _clone(self.model.state_dict())

    def load(self, snapshot):
        self.model.load_state_dict(snapshot)

    def sync(self, root):
        from accord.torch.functions import broadcast_parameters
        broadcast_parameters(self.model.state_dict(), root_rank=root)


class OptimizerHandler:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def snapshot(self):
        return _clone(self.optimizer.state_dict())

    def load(self, snapshot):
        # In place, so that an LR scheduler holding the optimizer's groups sees it.
        from accord.torch.functions import load_state_dict_in_place
        load_state_dict_in_place(self.optimizer, _clone(snapshot))

    def sync(self, root):
        from accord.torch.functions import broadcast_optimizer_state
        broadcast_optimizer_state(self.optimizer, root_rank=root)


class SamplerHandler:
    """An ElasticSampler's epoch and the indices processed in it. Each rank records only
    the batches it took; a snapshot first gathers what every rank recorded since the
    last one, so that any host's copy of the commit holds the whole epoch's record."""

    def __init__(self, sampler, name):
        self.sampler, self.name = sampler, name

    def snapshot(self):
        from accord.torch.functions import allgather_object
        gathered = allgather_object(sorted(self.sampler._take_new_indices()),
                                    name=f"accord.elastic.sampler.{self.name}")
        for indices in gathered:
            self.sampler.processed_indices.update(indices)
        return self.sampler.state_dict()

    def load(self, snapshot):
        self.sampler.load_state_dict(snapshot)

    def sync(self, root):
        from accord.torch.functions import broadcast_object
        self.sampler.load_state_dict(broadcast_object(
            self.sampler.state_dict(), root, name=f"accord.elastic.sampler.{self.name}"))

    def reset(self):
        self.sampler.reset()


class TorchState(State):
    """Horovod's TorchState(model, optimizer, **kwargs): ElasticSampler keywords keep
    their epoch and processed indices, the other keywords become attributes."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        super().__init__()
        self.model, self.optimizer = model, optimizer
        if model is not None:
            self._add_handler("model", ModelHandler(model))
        if optimizer is not None:
            self._add_handler("optimizer", OptimizerHandler(optimizer))
        plain = {}
        for name, value in kwargs.items():
            setattr(self, name, value)
            if isinstance(value, ElasticSampler):
                self._add_handler(f"sampler.{name}", SamplerHandler(value, name))
            else:
                plain[name] = value
        if plain:
            self._add_handler("objects", ObjectHandler(self, plain))
