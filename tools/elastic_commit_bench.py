#!/usr/bin/env python3
"""What hvd.elastic's commit() costs, against copy.deepcopy of the same state.

  PYTHONPATH=<build>/python python3 tools/elastic_commit_bench.py [--model resnet18] [--repeat 10]

Runs on one rank (no mpirun needed). The state is a torchvision ResNet's parameters and
buffers with SGD momentum (after one step, so the momentum exists). Prints the median
time of: commit() in memory only; commit() with the host's disk copy (the part the
training thread waits for, and the write that runs beside it); deepcopy of the model's
and the optimizer's state_dicts.
"""
import argparse
import copy
import os
import statistics
import tempfile
import time

import torch
import torchvision

import accord.torch as hvd


def median_ms(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    hvd.init()
    model = getattr(torchvision.models, args.model)()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    optimizer.step()
    mb = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 2**20
    with tempfile.TemporaryDirectory() as store:
        os.environ.pop("ACCORDRUN_ELASTIC_JOB", None)
        state = hvd.elastic.TorchState(model, optimizer, epoch=0)
        state.commit()  # the first allocates; later ones reuse freed memory
        memory = median_ms(state.commit, args.repeat)
        os.environ.update(ACCORDRUN_ELASTIC_JOB="bench", ACCORDRUN_ELASTIC_STORE=store)
        state = hvd.elastic.TorchState(model, optimizer, epoch=0)
        state.commit()
        state.store().wait()

        foreground, written = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            state.commit()
            mid = time.perf_counter()
            state.store().wait()
            foreground.append((mid - start) * 1e3)
            written.append((time.perf_counter() - mid) * 1e3)
        deep = median_ms(lambda: (copy.deepcopy(model.state_dict()),
                                  copy.deepcopy(optimizer.state_dict())), args.repeat)
    print(f"{args.model}: {mb:.1f} MiB of parameters and buffers (+ momentum), {torch.get_num_threads()} threads")
    print(f"  commit(), in memory only            {memory:8.1f} ms")
    print(f"  commit(), with the host's disk copy {statistics.median(foreground):8.1f} ms "
          f"(then {statistics.median(written):.1f} ms more writing on the store's thread)")
    print(f"  copy.deepcopy of the state_dicts    {deep:8.1f} ms")
    hvd.shutdown()


if __name__ == "__main__":
    main()
