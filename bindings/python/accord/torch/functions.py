"""Broadcasting a model's and an optimizer's state (loaded into the optimizer's own
objects), and moving Python objects between ranks (pickled into uint8 tensors)."""

import pickle

import torch

from accord import _core
from accord.basics import global_process_set, rank, synchronize
from accord.torch._tensor import _DTYPES
from accord.torch.broadcast import broadcast_, broadcast_async_


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites the parameters on every rank with root's. ``params``: a dict such as
    ``model.state_dict()`` (broadcast in sorted key order), or an iterable of tensors
    or of (name, tensor) pairs such as ``model.named_parameters()``."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif hasattr(params, "__iter__"):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"broadcast_parameters: invalid params of type {type(params).__name__}")
    handles = [broadcast_async_(p, root_rank, name, process_set) for name, p in params]
    for handle in handles:
        synchronize(handle)


# ---- optimizer state -----------------------------------------------------------------
class _TensorSlot:
    """Stands for a tensor of the state in the pickled skeleton root broadcasts."""

    def __init__(self, index, tensor, owner=None):
        self.index = index
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype
        self.cuda = tensor.device.type == "cuda"
        self.owner = owner  # the position of the parameter whose state it is

    def empty(self, params):
        """Where a rank receives it: a CUDA tensor on the GPU of this rank's parameter
        that owns it (else its current GPU), not on root's, as Horovod makes each state
        tensor on its parameter's device."""
        device = "cpu"
        if self.cuda:
            owner = params[self.owner] if self.owner is not None and self.owner < len(params) \
                else None
            device = owner.device if owner is not None and owner.is_cuda else \
                torch.device("cuda", torch.cuda.current_device())
        return torch.empty(self.shape, dtype=self.dtype, device=device)


def _broadcastable(tensor):
    if tensor.dtype not in _DTYPES or tensor.is_sparse:
        return False
    return tensor.device.type == "cpu" or (tensor.device.type == "cuda" and _core.built["cuda"])


def _split(value, tensors, owner=None):
    """The value with each tensor Accord can broadcast (in host memory, or on a GPU in a
    build with the GPU path) replaced by a _TensorSlot (appending the tensor to
    ``tensors``); other values stay, to be pickled. ``owner``: the parameter position
    whose state ``value`` is."""
    if isinstance(value, torch.Tensor):
        if _broadcastable(value):
            tensors.append(value.detach())
            return _TensorSlot(len(tensors) - 1, value, owner)
        return value
    if isinstance(value, dict):
        return type(value)((k, _split(v, tensors, owner)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_split(v, tensors, owner) for v in value)
    return value


def _split_state_dict(state_dict, tensors):
    """_split of an optimizer's state_dict(), each parameter's state slotted with its
    position, so that a receiving rank puts it on that parameter's device."""
    out = {k: _split(v, tensors) for k, v in state_dict.items() if k != "state"}
    out["state"] = {index: _split(values, tensors, index)
                    for index, values in state_dict["state"].items()}
    return out


def _join(value, tensors):
    if isinstance(value, _TensorSlot):
        return tensors[value.index]
    if isinstance(value, dict):
        return type(value)((k, _join(v, tensors)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_join(v, tensors) for v in value)
    return value


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (per-parameter state and hyperparameters)
    identical to root's, in the objects the optimizer already has. Works whether or not
    the other ranks' optimizers have state yet (a checkpoint resumed on root only, say);
    tensors go as tensors, the rest of the structure pickled. On a rank whose optimizer
    has no state yet, parameters that require a gradient and have none get a zero one,
    as Horovod leaves them. ``model`` is accepted for Horovod's signature and not
    needed."""
    if hasattr(optimizer, "broadcast_state"):  # a ShardedOptimizer: each rank its own part
        return optimizer.broadcast_state(root_rank)
    if not optimizer.state:
        _zero_missing_grads(optimizer)
    tensors = []
    skeleton = _split_state_dict(optimizer.state_dict(), tensors) if rank() == root_rank \
        else None
    skeleton = broadcast_object(skeleton, root_rank, process_set=process_set)
    if rank() != root_rank:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        tensors = [slot.empty(params) for slot in _slots(skeleton)]
    handles = [broadcast_async_(t, root_rank, process_set=process_set) for t in tensors]
    for handle in handles:
        synchronize(handle)
    if rank() != root_rank:
        # In place: an LR scheduler, or the optimizer a DistributedOptimizer wraps, holds
        # the param groups and state, and must see root's values in them. (A
        # DistributedOptimizer's own load_state_dict keeps them already.)
        load_state_dict_in_place(optimizer, _join(skeleton, tensors))


def _zero_missing_grads(optimizer):
    """Gives every parameter that requires a gradient and has none a zero gradient, as
    Horovod's broadcast_optimizer_state leaves them on a rank whose optimizer has no
    state yet (it creates them to step once; Accord does not step). Scripts read
    ``p.grad`` right after it; frozen parameters keep None."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)


def load_state_dict_in_place(optimizer, state_dict, load=None):
    """``optimizer.load_state_dict(state_dict)`` (or ``load(state_dict)``) that keeps
    the optimizer's objects, as Horovod's broadcast_optimizer_state does: its
    param_groups list and dicts, its state dict, each parameter's state dict and the
    tensors in it are updated rather than replaced, so whatever holds them (an LR
    scheduler, the optimizer a DistributedOptimizer wraps) sees the loaded values."""
    groups, state = optimizer.param_groups, optimizer.state
    # torch checks the groups against the state dict and casts the values (dtype and
    # device of each parameter), into new objects; their contents go into the old ones.
    (load or optimizer.load_state_dict)(state_dict)
    loaded_groups, loaded_state = optimizer.param_groups, optimizer.state
    optimizer.param_groups, optimizer.state = groups, state
    for group, loaded in zip(groups, loaded_groups):
        _update_dict(group, {k: v for k, v in loaded.items() if k != "params"}, keep=("params",))
    for p in [p for p in state if p not in loaded_state]:
        del state[p]
    for p, values in loaded_state.items():
        _update_dict(state.setdefault(p, {}), values)


def _update_dict(target, source, keep=()):
    """Makes ``target`` hold ``source``'s items (and its ``keep`` keys), copying into a
    tensor already there when it has the same shape, dtype, device and layout."""
    for key in [k for k in target if k not in source and k not in keep]:
        del target[key]
    for key, value in source.items():
        old = target.get(key)
        if old is value:
            continue
        if isinstance(old, torch.Tensor) and isinstance(value, torch.Tensor) \
                and (old.shape, old.dtype, old.device, old.layout) \
                == (value.shape, value.dtype, value.device, value.layout):
            with torch.no_grad():
                old.copy_(value)
        else:
            target[key] = value


def _slots(value):
    found = []

    def walk(v):
        if isinstance(v, _TensorSlot):
            found.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(value)
    return sorted(found, key=lambda s: s.index)


# ---- Python objects ------------------------------------------------------------------
def _dumps(obj):
    try:  # cloudpickle, where installed, also takes lambdas and local classes (as Horovod)
        import cloudpickle
        return cloudpickle.dumps(obj)
    except ImportError:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _suffixed(name, suffix):
    return f"{name}.{suffix}" if name else None


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root's ``obj`` on every rank (pickled, so any picklable object).
    ``root_rank`` is a global rank. If root cannot pickle it, root raises that error and
    every other rank a pickle.PicklingError that quotes it, at once."""
    size = torch.zeros(1, dtype=torch.int64)
    failure = None
    if rank() == root_rank:
        try:
            data = bytearray(_dumps(obj))
        except Exception as e:  # the others are waiting: tell them, then raise it
            failure = e
            data = bytearray(f"{type(e).__name__}: {e}".encode())
        # A negative size says that root's error message follows, not the object.
        size[0] = len(data) if failure is None else -len(data)
    broadcast_(size, root_rank, _suffixed(name, "size"), process_set)
    if rank() != root_rank:
        data = bytearray(abs(int(size[0])))
    # The tensor shares the bytearray's memory: the broadcast writes straight into it.
    broadcast_(torch.frombuffer(data, dtype=torch.uint8), root_rank, _suffixed(name, "data"),
               process_set)
    if failure is not None:
        raise failure
    if size[0] < 0:
        raise pickle.PicklingError(f"broadcast_object: root rank {root_rank} could not pickle "
                                   f"the object: {data.decode(errors='replace')}")
    return obj if rank() == root_rank else pickle.loads(data)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's ``obj``, in rank order of the set."""
    data = bytearray(_dumps(obj))
    set_id = process_set._id("allgather_object")
    sizes = torch.tensor([len(data)], dtype=torch.int64)
    op = _core.allgather_async(sizes.data_ptr(), _core.int64, [1], -1, _suffixed(name, "size") or "",
                               set_id)
    op.wait()
    lengths = memoryview(op.output()).tolist()
    payload = torch.frombuffer(data, dtype=torch.uint8)
    op = _core.allgather_async(payload.data_ptr(), _core.uint8, [len(data)], -1,
                               _suffixed(name, "data") or "", set_id)
    op.wait()
    gathered = memoryview(op.output())
    objects, offset = [], 0
    for n in lengths:
        objects.append(pickle.loads(gathered[offset:offset + n]))
        offset += n
    return objects
