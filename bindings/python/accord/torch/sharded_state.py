"""ShardedOptimizer's checkpoints, in two forms that load on any number of ranks.

Consolidated: torch's own optimizer format (``state`` keyed by each parameter's position
in the param groups, frozen ones included, and ``param_groups``), gathered to one rank
a few parameters at a time, so that no rank ever holds much more than its share plus
the whole on the receiving rank. A plain optimizer of the same class loads it, and a
ShardedOptimizer loads a plain optimizer's. For fp16/bf16 parameters the fp32 masters
travel under ``accord_master_params`` (torch ignores the key).

Per rank: each rank's own pieces with the cut they were taken with (offset and count of
every parameter), no communication. Loading takes every rank's file and copies, for
each piece of the new cut, the overlapping parts of the old pieces.

A state entry is per element when it is a tensor shaped like its piece (1-D, the
piece's count) - or, consolidated, shaped like its parameter; anything else (Adam's
``step``, a number) is the same on every rank and kept once.
"""

import torch

from accord.basics import synchronize
from accord.torch.functions import allgather_object
from accord.torch.gather import grouped_allgather_into

# A consolidation round gathers at most this much state per rank (64 MiB), bounding the
# memory it takes beyond the shards themselves.
_ROUND_BYTES = 64 << 20
_MASTER = "accord_master_params"


def _per_element(value, shape):
    return isinstance(value, torch.Tensor) and len(shape) > 0 and tuple(value.shape) == shape


def _on_host(value):
    """A copy in host memory of a tensor kept once per piece (Adam's step, on the GPU in
    a fused or capturable group): pickled to the other ranks, a CUDA tensor would land
    on the sender's GPU there, and the consolidated state must not alias the live one."""
    return value.detach().to("cpu", copy=True) if isinstance(value, torch.Tensor) else value


def _groups(opt):
    """param_groups in torch's format: parameters as their positions."""
    out, index = [], 0
    for group in opt.param_groups:
        packed = {k: v for k, v in group.items() if k != "params"}
        packed["params"] = list(range(index, index + len(group["params"])))
        index += len(group["params"])
        out.append(packed)
    return out


def _layout(opt):
    """What each rank must know of a rank's state: for each of its pieces with state,
    each key's kind - ("element", dtype) or ("value", the value itself)."""
    layout = {}
    for s in opt._shards:
        values = opt._inner.state.get(s.piece, {}) if s.count else {}
        layout[s.index] = {k: ("element", v.dtype) if _per_element(v, tuple(s.piece.shape))
                           else ("value", _on_host(v)) for k, v in values.items()}
    return layout


def consolidate(opt, to):
    """Collective over opt.process_set; the whole state on rank ``to`` of the set, None
    elsewhere (``to`` None: on every rank)."""
    ps = opt.process_set
    layouts = allgather_object(_layout(opt), name="sharded.state.layout", process_set=ps) \
        if ps.size() > 1 else [_layout(opt)]
    state, masters = {}, {}
    rounds, current, used = [], [], 0
    for s in opt._shards:
        current.append(s)
        used += s.param.numel() * 4 * (1 + len(layouts[0].get(s.index, {})))
        if used >= _ROUND_BYTES:
            rounds.append(current)
            current, used = [], 0
    rounds.append(current)
    for shards in rounds:
        # The tensors gathered, each into a whole parameter's worth (the cut is known:
        # no exchange of row counts ahead of a CUDA allgather), and (shard, key) of each.
        parts, outputs, where = [], [], []
        for s in shards:
            kinds = next((l[s.index] for l in layouts if l.get(s.index)), {})
            entry = {}
            for k, (kind, v) in kinds.items():
                if kind == "value":
                    entry[k] = v
                    continue
                mine = opt._inner.state[s.piece][k] if s.count else \
                    torch.empty(0, dtype=v, device=s.piece.device)
                parts.append(mine.detach().reshape(-1))
                outputs.append(torch.empty(s.param.numel(), dtype=v, device=s.piece.device))
                where.append((s, k))
            if kinds:
                state[s.index] = entry
            if s.master:
                parts.append(s.piece.detach())
                outputs.append(torch.empty(s.param.numel(), dtype=s.piece.dtype,
                                           device=s.piece.device))
                where.append((s, _MASTER))
        if not parts:
            continue
        full = parts if ps.size() == 1 else synchronize(
            grouped_allgather_into(parts, outputs, name="sharded.state", process_set=ps))
        if to is not None and ps.rank() != to:
            continue
        # Kept in host memory: the whole state of a model that needed sharding may not
        # fit beside it on one GPU (and a checkpoint or an elastic commit is saved from
        # there); loading puts each value back on its parameter's device.
        for (s, k), flat in zip(where, full):
            whole = flat.view(s.param.shape).to("cpu", copy=True)
            if k == _MASTER:
                masters[s.index] = whole
            else:
                state[s.index][k] = whole
    if to is not None and ps.rank() != to:
        return None
    out = {"state": state, "param_groups": _groups(opt)}
    if masters:
        out[_MASTER] = masters
    return out


def local_shard(opt):
    cut = {s.index: (s.name, s.param.numel(), s.offset, s.count) for s in opt._shards}
    state = {s.index: {k: (v.clone() if isinstance(v, torch.Tensor) else v)
                       for k, v in opt._inner.state.get(s.piece, {}).items()}
             for s in opt._shards if s.count and s.piece in opt._inner.state}
    masters = {s.index: s.piece.detach().clone() for s in opt._shards if s.master}
    return {"accord_sharded": {"rank": opt.process_set.rank(), "size": opt.process_set.size(),
                               "cut": cut},
            "state": state, "param_groups": _groups(opt), _MASTER: masters}


def _load_groups(opt, groups):
    if len(groups) != len(opt.param_groups) or any(
            len(g["params"]) != len(mine["params"]) for g, mine in zip(groups, opt.param_groups)):
        raise ValueError(
            "ShardedOptimizer: the checkpoint's parameter groups (sizes "
            f"{[len(g['params']) for g in groups]}) do not match the optimizer's "
            f"({[len(g['params']) for g in opt.param_groups]})")
    for mine, loaded in zip(opt.param_groups, groups):
        mine.update({k: v for k, v in loaded.items() if k != "params"})


def _set_piece_state(opt, s, values, master):
    """Installs a piece's state (per-element tensors already cut to the piece), cast to
    the piece's device, and floating tensors to its dtype, as torch's loader does; and
    as torch's, a ``step`` stays where it was (on the CPU) unless the group is fused or
    capturable, so that the update does not read it back from the GPU every step."""
    if master is not None and s.master:
        with torch.no_grad():
            s.piece.copy_(master)
    if not s.count:
        return
    group = opt.param_groups[s.group]
    on_device = group.get("fused") or group.get("capturable")
    state = {}
    for k, v in values.items():
        if isinstance(v, torch.Tensor) and k == "step":
            v = v.to(s.piece.device, torch.float32, copy=True) if on_device else v.clone()
        elif isinstance(v, torch.Tensor):
            v = v.to(s.piece.device, s.piece.dtype if v.is_floating_point() and v.dim() > 0
                     else v.dtype, copy=True)
        state[k] = v
    if state:
        opt._inner.state[s.piece] = state
    else:
        opt._inner.state.pop(s.piece, None)


def load_full(opt, state_dict):
    _load_groups(opt, state_dict["param_groups"])
    masters = state_dict.get(_MASTER, {})
    opt._inner.state.clear()
    for s in opt._shards:
        shape, end = tuple(s.param.shape), s.offset + s.count
        values = {}
        for k, v in state_dict["state"].get(s.index, {}).items():
            if isinstance(v, torch.Tensor) and v.dim() > 0 and not _per_element(v, shape):
                raise ValueError(
                    f"ShardedOptimizer.load_state_dict: state '{k}' of {s.describe()} has "
                    f"shape {list(v.shape)}: the checkpoint is of another model")
            values[k] = v.reshape(-1)[s.offset:end] if _per_element(v, shape) else v
        master = masters.get(s.index)
        if master is not None:
            master = master.reshape(-1)[s.offset:end]
        _set_piece_state(opt, s, values, master)
    opt._consolidated = None


def load_shards(opt, shards):
    shards = sorted(shards, key=lambda d: d["accord_sharded"]["rank"])
    sizes = {d["accord_sharded"]["size"] for d in shards}
    ranks = [d["accord_sharded"]["rank"] for d in shards]
    if len(sizes) != 1 or ranks != list(range(sizes.pop())):
        raise ValueError("ShardedOptimizer.load_sharded_state_dict: give the list of every "
                         "rank's sharded_state_dict() from one checkpoint (ranks found: "
                         f"{ranks})")
    _load_groups(opt, shards[0]["param_groups"])
    opt._inner.state.clear()
    for s in opt._shards:
        values, master, end = {}, None, s.offset + s.count
        for d in shards:
            name, numel, offset, count = d["accord_sharded"]["cut"].get(
                s.index, (None, None, 0, 0))
            if name is not None and (name != s.name or numel != s.param.numel()):
                raise ValueError(
                    f"ShardedOptimizer.load_sharded_state_dict: parameter {s.index} is "
                    f"'{name}' of {numel} elements in the checkpoint, but {s.describe()} "
                    "here")
            lo, hi = max(offset, s.offset), min(offset + count, end)
            # Each rank's file holds tensors on its own device (saved without
            # map_location): the pieces of one part are joined on this one's.
            for k, v in d["state"].get(s.index, {}).items():
                if _per_element(v, (count,)):
                    if hi > lo:
                        values.setdefault(k, []).append(
                            v[lo - offset:hi - offset].to(s.piece.device))
                else:
                    values.setdefault(k, v)
            m = d[_MASTER].get(s.index)
            if m is not None and hi > lo:
                master = (master or []) + [m[lo - offset:hi - offset].to(s.piece.device)]
        values = {k: torch.cat(v) if isinstance(v, list) else v for k, v in values.items()}
        _set_piece_state(opt, s, values, None if master is None else torch.cat(master))
    opt._consolidated = None

