"""Elastic training (Horovod's hvd.elastic) is not part of Accord: a job keeps the ranks
it started with. Anything used from here says so, rather than failing with an
AttributeError."""


def __getattr__(name):
    raise NotImplementedError(
        f"accord.torch.elastic.{name}: elastic training is not part of Accord; a job runs "
        "with the ranks it started with (checkpoint and restart the job to change them)")
