"""The hooks by which DistributedOptimizer and ShardedOptimizer start a gradient's
reduction the moment backward has written it, one wrapper per parameter.

Wrapping parameters that an earlier wrapper still hooks (a notebook cell run again, an
optimizer made anew after loading a checkpoint or for fine-tuning a part) takes them
over: the earlier wrapper's hooks on them are removed, so that backward reduces each
gradient once, not once per wrapper under one name (which failed with "a collective
with this name is already in flight"), and the earlier wrapper, if stepped again,
raises naming the parameter it lost."""

import weakref

# id(parameter) -> (weakref to the parameter, weakref to its wrapper, the hook's handle)
_owners = {}


def on_grad_ready(p, hook, owner, kind):
    """Calls hook(p) once p.grad holds this backward pass's gradient, on behalf of
    ``owner`` (a ``kind``: DistributedOptimizer, ShardedOptimizer), which takes p over
    from any other wrapper hooking it. Returns what must be kept alive for the hook to
    stay."""
    take_over(p, owner, kind)
    if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
        handle = keep = p.register_post_accumulate_grad_hook(hook)
    else:
        # Older torch: a hook on the parameter's gradient accumulator, which runs after
        # it has written p.grad. The accumulator must be kept alive for the hook to stay.
        keep = p.expand_as(p).grad_fn.next_functions[0][0]
        handle = keep.register_hook(hook)
    _own(p, owner, handle)
    return keep


class _NoHook:
    def remove(self):
        pass


def claim(p, owner, kind):
    """Takes p over for ``owner``, which reduces nothing and so hooks nothing on it
    (DistributedOptimizer alone in its process set, or outside it): a later wrapper
    then takes p from it as from any other, and its step names what it lost instead of
    updating p a second time."""
    take_over(p, owner, kind)
    _own(p, owner, _NoHook())


def _own(p, owner, handle):
    key = id(p)

    def forget(ref):  # the parameter is gone: its id may be another's next
        if _owners.get(key, (None,))[0] is ref:
            del _owners[key]

    _owners[key] = (weakref.ref(p, forget), weakref.ref(owner), handle)


def take_over(p, owner, kind):
    """Removes the hooks another wrapper has on p."""
    entry = _owners.get(id(p))
    if entry is None or entry[0]() is not p:
        return
    earlier = entry[1]()
    if earlier is None or earlier is owner:
        return
    entry[2].remove()
    del _owners[id(p)]
    lost = vars(earlier).setdefault("_parameters_taken_over", [])
    lost.append((earlier._parameter_names.get(p, "?"), kind))


def check_not_taken_over(wrapper, what):
    """Raises where a later wrapper took over some of ``wrapper``'s parameters."""
    lost = vars(wrapper).get("_parameters_taken_over")
    if lost:
        name, by = lost[0]
        more = f" and {len(lost) - 1} more" if len(lost) > 1 else ""
        raise RuntimeError(
            f"{what}: parameter '{name}'{more} was wrapped again by a later {by}, which "
            "reduces its gradients now; step that optimizer instead (each parameter is "
            "reduced for the wrapper made last)")
