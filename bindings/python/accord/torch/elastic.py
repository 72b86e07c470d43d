"""Elastic training (Horovod's hvd.elastic) is not part of Accord: a job keeps the ranks
it started with. Anything used from here says so, rather than failing with an
AttributeError."""


def __getattr__(name):
    if name.startswith("__") and name.endswith("__"):
        # Python's own probes must find a plain missing attribute: `from ... import X`
        # asks for __path__ first, copy, pickle and inspect for other dunders.
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise NotImplementedError(
        f"accord.torch.elastic.{name}: elastic training is not part of Accord; a job runs "
        "with the ranks it started with (checkpoint and restart the job to change them)")
