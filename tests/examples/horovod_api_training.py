#!/usr/bin/env python3
"""A training script written against Horovod's PyTorch API, the way Horovod's users
write them, and nothing else: the test suite runs it with only its import line changed
(`import horovod.torch as hvd` -> `import accord.torch as hvd`, run_example.py
--horovod), which is Accord's drop-in promise.

It uses what Horovod jobs rely on: hvd.init, rank/size/local_rank; a DistributedSampler
sharding the data by rank; the learning rate scaled by the ranks and by the backward
passes per step; broadcast_parameters and broadcast_optimizer_state from rank 0;
DistributedOptimizer with named parameters, fp16 gradient compression and
backward_passes_per_step (gradients accumulated locally over that many passes, then
averaged); metrics averaged with named allreduces (a metric_average helper); and, at the
end, a check that every rank holds the same weights.

Data: the four Fashion-MNIST IDX files (gzipped or not) in --data-dir.

    mpirun -np 2 python3 horovod_api_training.py --data-dir /usr/share/datasets/fashion-mnist
"""
import argparse
import gzip
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed

import horovod.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True, help="directory with the Fashion-MNIST IDX files")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32, help="images per backward pass and rank")
    p.add_argument("--batches-per-allreduce", type=int, default=2,
                   help="backward passes whose gradients are summed locally before each allreduce")
    p.add_argument("--lr", type=float, default=0.01, help="for one rank and one pass per step")
    p.add_argument("--train-samples", type=int, default=12000)
    p.add_argument("--test-samples", type=int, default=2000)
    p.add_argument("--no-fp16-allreduce", action="store_true",
                   help="send gradients in float32 instead of compressing them to float16")
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args()


def read_idx(data_dir, name, limit):
    """The first `limit` records of an IDX file (NAME or NAME.gz) as a numpy array."""
    path = os.path.join(data_dir, name)
    opener = open
    if not os.path.exists(path):
        path, opener = path + ".gz", gzip.open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    return array[:limit]


def dataset(data_dir, split, limit):
    images = read_idx(data_dir, f"{split}-images-idx3-ubyte", limit)
    labels = read_idx(data_dir, f"{split}-labels-idx1-ubyte", limit)
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return torch.utils.data.TensorDataset((x - 0.286) / 0.353, torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=5)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=5)
        self.fc1 = nn.Linear(512, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def train(model, optimizer, loader, sampler, epoch, passes):
    model.train()
    sampler.set_epoch(epoch)
    for data, target in loader:
        optimizer.zero_grad()
        # One step over `passes` slices of the batch: their gradients add up locally and
        # are averaged across ranks once, in step().
        for part, part_target in zip(data.chunk(passes), target.chunk(passes)):
            loss = F.nll_loss(model(part), part_target) / passes
            loss.backward()
        optimizer.step()


def test(model, loader, sampler):
    model.eval()
    loss, correct = 0.0, 0.0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    # Each rank saw its shard: average the per-rank means over all ranks.
    loss = metric_average(loss / len(sampler), "avg_loss")
    accuracy = metric_average(correct / len(sampler), "avg_accuracy")
    return loss, accuracy


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())

    train_set = dataset(args.data_dir, "train", args.train_samples)
    test_set = dataset(args.data_dir, "t10k", args.test_samples)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    passes = args.batches_per_allreduce
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size * passes,
                                               sampler=train_sampler)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=256, sampler=test_sampler)

    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size() * passes, momentum=0.9)
    # Every rank starts from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.none if args.no_fp16_allreduce else hvd.Compression.fp16
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         backward_passes_per_step=passes, op=hvd.Average)

    for epoch in range(1, args.epochs + 1):
        train(model, optimizer, train_loader, train_sampler, epoch, passes)
        loss, accuracy = test(model, test_loader, test_sampler)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test loss {loss:.4f}, test accuracy {100 * accuracy:.2f}%",
                  flush=True)

    # The averaged gradients kept every rank's weights equal: compare with rank 0's.
    same = all(torch.equal(p, hvd.broadcast(p.detach().clone(), root_rank=0, name=f"check.{n}"))
               for n, p in model.named_parameters())
    same = hvd.allreduce(torch.tensor(int(same)), op=hvd.Min, name="check.all").item() == 1
    if hvd.rank() == 0:
        print(f"weights {'identical' if same else 'DIFFERENT'} on all {hvd.size()} ranks", flush=True)


if __name__ == "__main__":
    main()
