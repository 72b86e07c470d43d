"""How the optimizer wrappers name each parameter's collectives: by
``named_parameters`` where given (checked: (name, parameter) pairs, unique names, every
parameter of the optimizer named), else by its place in the param groups."""


def names_of(named_parameters, param_groups, params):
    if named_parameters is None:
        return {p: f"allreduce.noname.{i}.{j}"
                for i, group in enumerate(param_groups) for j, p in enumerate(group["params"])}
    named = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
        raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                         "usually model.named_parameters()")
    names = [n for n, _ in named]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique; duplicates: "
                         + ", ".join(duplicates))
    by_param = {p: n for n, p in named}
    unnamed = [p for p in params if p not in by_param]
    if unnamed:
        raise ValueError(f"named_parameters was given, but {len(unnamed)} parameter(s) of the "
                         f"optimizer are not in it (shapes: {[tuple(p.shape) for p in unnamed]})")
    return by_param
