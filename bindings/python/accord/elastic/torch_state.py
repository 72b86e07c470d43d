"""TorchState: a model, an optimizer, ElasticSamplers, objects of registered handlers
and plain attributes, committed together (the handlers: torch_handlers.py, and Horovod's
registry in handlers.py)."""

from accord.elastic.handlers import RegisteredHandler, kind_of
from accord.elastic.state import ObjectHandler, State
from accord.elastic.torch_handlers import (ModelHandler, OptimizerHandler, SamplerHandler,
                                           ShardedOptimizerHandler)


class TorchState(State):
    """Horovod's TorchState(model, optimizer, **kwargs). Every keyword whose value the
    handler registry (handlers.py; by default: a torch.nn.Module, a
    torch.optim.Optimizer, an ElasticSampler) has a handler for has its state committed,
    restored and synced by it (a model's state_dict, an optimizer's, a sampler's epoch
    and processed indices, or what a registered handler of the script's saves), the
    others are plain attributes (pickled). Assigning another object of the same kind to
    such an attribute (``state.model = model``) makes the state keep that one from then
    on; assigning a model, an optimizer or a sampler to ``model`` or ``optimizer`` given
    as None, too."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        super().__init__()
        object.__setattr__(self, "_kinds", {})  # attribute name -> (handler key, class)
        plain = {}
        for name, value in dict(model=model, optimizer=optimizer, **kwargs).items():
            if kind_of(value) is not None:
                setattr(self, name, value)  # a handler of its kind (__setattr__)
            elif value is None and name in ("model", "optimizer"):
                object.__setattr__(self, name, None)  # one may be assigned later
            else:
                object.__setattr__(self, name, value)
                plain[name] = value
        if plain:
            self._add_handler("objects", ObjectHandler(self, plain))

    def __setattr__(self, name, value):
        kinds = self.__dict__.get("_kinds")
        if kinds is None or name.startswith("_"):
            return object.__setattr__(self, name, value)
        found = kind_of(value)
        if name in kinds:
            key, cls = kinds[name]
            if found is None or found[1] is not cls:
                raise TypeError(
                    f"TorchState.{name} holds {_described(key, cls)}, whose state is committed "
                    f"and synced as one; got {type(value).__name__}. Give the state a new "
                    "attribute for another kind of object")
            if isinstance(self._handlers[key], RegisteredHandler):
                self._handlers[key].set_value(value)
            else:
                self._handlers[key] = _handler(found[0], value, name)
        elif found is not None and not self._is_plain(name):
            kind, cls = found
            key = name if name in ("model", "optimizer") and kind == name else f"{kind}.{name}"
            handler = _handler(kind, value, name) if kind != "handler" else \
                RegisteredHandler(cls(value), name)  # may refuse: nothing changed yet
            kinds[name] = key, cls
            self._add_handler(key, handler)
        object.__setattr__(self, name, value)

    def _is_plain(self, name):
        objects = self._handlers.get("objects")
        return objects is not None and name in objects.names


_KIND_NAMES = {"model": "a torch.nn.Module", "optimizer": "a torch.optim.Optimizer",
               "sampler": "an accord.elastic.ElasticSampler"}


def _described(key, cls):
    kind = key.split(".", 1)[0]
    return _KIND_NAMES.get(kind) or f"an object kept by the registered {cls.__name__}"


def _handler(kind, value, name):
    if kind == "model":
        return ModelHandler(value)
    if kind == "optimizer":
        if hasattr(value, "sharded_state_dict"):
            return ShardedOptimizerHandler(value, name)
        return OptimizerHandler(value)
    return SamplerHandler(value, name)
