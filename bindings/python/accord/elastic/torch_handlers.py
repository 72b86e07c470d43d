"""The handlers TorchState keeps a model, an optimizer (plain or sharded) and an
ElasticSampler with: each copies its object's state (snapshot), puts a copy back
(load), and makes every rank hold root's (sync). A snapshot clones the tensors (one copy
of the state, no pickling); the disk copy is written from it on the store's own
thread."""

import torch


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


class ShardedOptimizerHandler:
    """A ShardedOptimizer: each rank steps its own part of the state, but a commit must
    outlive any host and resume on any number of ranks, so a snapshot consolidates the
    whole state, in torch's format, on every rank (tensor allgathers a few parameters at
    a time): the live state stays 1/N per rank, the commit is the whole state, as a
    replicated optimizer's is. Loading it keeps this rank's part, cut for the ranks
    there are now. A sync after a load (resume() loads on one rank) hands the state
    that rank loaded to all; otherwise each rank's part is its own and only the
    hyperparameters are root's."""

    def __init__(self, optimizer, name):
        from accord.basics import global_process_set
        if optimizer.process_set is not global_process_set:
            raise TypeError(
                f"TorchState.{name}: a ShardedOptimizer over a process set "
                f"({optimizer.process_set!r}): elastic state is committed over every rank; "
                "shard over the global set")
        self.optimizer, self.name = optimizer, name
        self._loaded = None  # the state last loaded, for the next sync

    def snapshot(self):
        from accord.torch.sharded_state import consolidate
        return consolidate(self.optimizer, None)

    def load(self, snapshot):
        """On the rank that resume() loads on: the next sync() hands it to all."""
        self.optimizer.load_state_dict(snapshot)
        self._loaded = snapshot

    def restore(self, snapshot):
        """On every rank, each from its own copy of the same commit."""
        self.optimizer.load_state_dict(snapshot)

    def sync(self, root):
        from accord.basics import rank
        from accord.torch.functions import broadcast_object
        # None where root loaded nothing: then each rank's part stays its own.
        state = broadcast_object(self._loaded if rank() == root else None, root,
                                 name=f"accord.elastic.sharded.{self.name}")
        if state is not None and rank() != root:
            self.optimizer.load_state_dict(state)
        self.optimizer.broadcast_state(root)
        self._loaded = None


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
