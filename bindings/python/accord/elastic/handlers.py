"""Horovod's state handlers (``horovod.torch.elastic.state``): ``StateHandler``,
``ModelStateHandler``, ``OptimizerStateHandler``, ``SamplerStateHandler`` and the
registry of which handler TorchState gives a value of which type
(``get_handler_registry``, ``set_handler_registry``).

A Horovod handler keeps its object (``value``) and its saved state in its own
attributes: ``save()`` copies the object's state into them, ``restore()`` puts it back,
``sync()`` makes every rank hold rank 0's. Accord's commits must outlive the process, so
a registered handler is driven through an adapter: a commit calls ``save()`` and keeps
the handler's attributes other than ``value`` (written to the host's disk with
torch.save: they must pickle, and ``save()`` must store new objects rather than change
the saved ones in place, as Horovod's own handlers do); a restore or a resume sets them
back and calls ``restore()``.

The registry's three built-in classes stand for Accord's own handlers
(torch_handlers.py), which also consolidate a ShardedOptimizer's parts and gather every
rank's sampler record; a subclass of one of them gets their behaviour through the same
methods, and a class of the script's own is used as written.
"""

import torch

from accord.elastic.sampler import ElasticSampler
from accord.elastic.torch_handlers import (ModelHandler, OptimizerHandler, SamplerHandler,
                                           ShardedOptimizerHandler)


class StateHandler:
    """Horovod's base: a handler of one object, ``value``. Subclasses implement save(),
    restore() and sync(); set_value() replaces the object and saves it."""

    # Attributes that are not the saved state: never written into a commit.
    _not_saved = frozenset({"value"})

    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self.save()


class _BuiltIn(StateHandler):
    """A built-in handler in Horovod's interface over Accord's own: ``saved`` holds
    the last snapshot."""

    _not_saved = frozenset({"value", "_accord"})

    def __init__(self, value):
        # Not saved here, as Horovod's are: a snapshot of a sampler or a sharded
        # optimizer is a collective. TorchState saves at its sync and commits.
        super().__init__(value)
        self._accord = self._make(value)
        self.saved = None

    def _make(self, value):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self._accord = self._make(value)

    def save(self):
        self.saved = self._accord.snapshot()

    def restore(self):
        if self.saved is None:
            raise ValueError(f"{type(self).__name__}.restore(): nothing was saved yet")
        getattr(self._accord, "restore", self._accord.load)(self.saved)

    def sync(self):
        self._accord.sync(0)


class ModelStateHandler(_BuiltIn):
    """A torch.nn.Module: its state_dict."""

    def _make(self, value):
        return ModelHandler(value)


class OptimizerStateHandler(_BuiltIn):
    """A torch.optim.Optimizer (plain, distributed or sharded): its state_dict, loaded
    in place."""

    def _make(self, value):
        if hasattr(value, "sharded_state_dict"):
            return ShardedOptimizerHandler(value, "registered")
        return OptimizerHandler(value)


class SamplerStateHandler(_BuiltIn):
    """An ElasticSampler: its epoch and the samples every rank has taken in it."""

    def _make(self, value):
        return SamplerHandler(value, "registered")


# The built-in classes, and the kind of Accord's own handler each stands for.
_BUILT_IN = {ModelStateHandler: "model", OptimizerStateHandler: "optimizer",
             SamplerStateHandler: "sampler"}
_registry = [(torch.nn.Module, ModelStateHandler),
             (torch.optim.Optimizer, OptimizerStateHandler),
             (ElasticSampler, SamplerStateHandler)]


def get_handler_registry():
    """The list of (type, handler class) pairs TorchState tries in order: the first
    whose type the value is an instance of gives its handler. The list itself, as
    Horovod returns it: changing it changes the registry."""
    return _registry


def set_handler_registry(registry):
    """Replaces the registry (for the TorchState attributes set from then on)."""
    entries = list(registry)
    for i, entry in enumerate(entries):
        ok = isinstance(entry, (tuple, list)) and len(entry) == 2 and \
            isinstance(entry[0], (type, tuple)) and callable(entry[1])
        if not ok:
            raise TypeError(f"set_handler_registry: entry {i} is {entry!r}; each entry must be "
                            "a (type, handler class) pair")
    global _registry
    _registry = registry if isinstance(registry, list) else entries


def kind_of(value):
    """(kind, handler class) for ``value`` from the registry, or None (a plain
    attribute). The kind is "model", "optimizer" or "sampler" where the class is the
    built-in one (Accord's own handler then keeps it), else "handler"."""
    for types, cls in get_handler_registry():
        if isinstance(value, types):
            return _BUILT_IN.get(cls, "handler"), cls
    return None


class RegisteredHandler:
    """A registered Horovod handler driven as an Accord one (state.py's interface)."""

    def __init__(self, handler, name):
        self.handler, self.name = handler, name

    def set_value(self, value):
        self.handler.set_value(value)

    def snapshot(self):
        self.handler.save()
        hidden = getattr(self.handler, "_not_saved", StateHandler._not_saved)
        return {k: v for k, v in vars(self.handler).items() if k not in hidden}

    def load(self, snapshot):
        vars(self.handler).update(snapshot)
        self.handler.restore()

    def sync(self, root):
        """Horovod's handlers sync from rank 0; after a restart the newest commit may
        have been loaded on another rank, which first hands it to every rank."""
        if root != 0:
            from accord.basics import rank
            from accord.torch.functions import broadcast_object
            saved = broadcast_object(self.snapshot() if rank() == root else None, root,
                                     name=f"accord.elastic.handler.{self.name}")
            if rank() != root:
                self.load(saved)
        self.handler.sync()
