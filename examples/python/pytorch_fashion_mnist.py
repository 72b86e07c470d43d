#!/usr/bin/env python3
"""Train a small CNN on Fashion-MNIST with Accord, one shard of the data per rank.

Reads the four gzipped IDX files of Debian's dataset-fashion-mnist package
(/usr/share/datasets/fashion-mnist; `apt-get install dataset-fashion-mnist`) or any
directory holding the same files, gzipped or not. Each epoch every rank trains on its
own 1/size of the shuffled training set (DistributedSampler), gradients are averaged
with accord.torch.DistributedOptimizer, and the loss and accuracy on the test set are
summed over all ranks with hvd.allreduce, so the printed figures cover the whole set.

The learning rate is --lr times the number of ranks: the global batch grows with the
ranks, and so does the step that keeps the epoch's progress the same.

    mpirun -np 2 python3 examples/python/pytorch_fashion_mnist.py
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

import accord.torch as hvd

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
# Mean and standard deviation of the training images' pixels, scaled to [0, 1].
PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3, help="passes over the training set (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=64, help="images per rank and step (default: %(default)s)")
    p.add_argument("--lr", type=float, default=0.01,
                   help="SGD learning rate for one rank; multiplied by the number of ranks (default: %(default)s)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: %(default)s)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="directory with the Fashion-MNIST IDX files (default: %(default)s)")
    p.add_argument("--train-samples", type=int, default=0,
                   help="train on the first N training images only; 0: all 60000 (default: %(default)s)")
    p.add_argument("--seed", type=int, default=42, help="seed of the initial weights and shuffles (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0,
                   help="PyTorch CPU threads per rank; 0: this host's cores divided among its ranks")
    args = p.parse_args()
    if args.epochs < 1 or args.batch_size < 1 or args.lr <= 0:
        p.error("--epochs and --batch-size must be at least 1 and --lr positive")
    if args.train_samples < 0 or args.threads < 0:
        p.error("--train-samples and --threads must not be negative")
    return args


def find_file(data_dir, name):
    for candidate in (name + ".gz", name):
        path = os.path.join(data_dir, candidate)
        if os.path.isfile(path):
            return path
    return None


def check_data_dir(data_dir):
    """Exits with a message naming every missing file, before any rank starts Accord."""
    names = [n for pair in FILES.values() for n in pair]
    missing = [n for n in names if find_file(data_dir, n) is None]
    if missing:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {data_dir} lacks {', '.join(m + '[.gz]' for m in missing)}: "
                 f"install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
                 f"or pass --data-dir with the Fashion-MNIST IDX files")


def read_idx(path, magic, item_shape):
    """The array of an IDX file: magic (dtype and rank), big-endian sizes, bytes."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    rank = len(item_shape) + 1
    header = 4 + 4 * rank
    if len(raw) < header or struct.unpack(">I", raw[:4])[0] != magic:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes with {rank} dimension(s)")
    dims = struct.unpack(f">{rank}I", raw[4:header])
    if tuple(dims[1:]) != item_shape or len(raw) != header + int(np.prod(dims)):
        raise ValueError(f"{path}: sizes {dims} and {len(raw) - header} data bytes do not fit "
                         f"items of shape {item_shape}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def load(data_dir, split):
    images_name, labels_name = FILES[split]
    images = read_idx(find_file(data_dir, images_name), 0x803, (28, 28))
    labels = read_idx(find_file(data_dir, labels_name), 0x801, ())
    if len(images) != len(labels):
        raise ValueError(f"{data_dir}: {len(images)} {split} images but {len(labels)} labels")
    x = (torch.from_numpy(images.astype(np.float32)) / 255 - PIXEL_MEAN) / PIXEL_STD
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    """Two 3x3 convolutions with pooling and two linear layers: ~90% on Fashion-MNIST."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)   # 28x28 -> pool -> 14x14
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)  # 14x14 -> pool -> 7x7
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)
        self.dropout = nn.Dropout(0.25)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


def train_epoch(model, optimizer, x, y, sampler, epoch, batch_size):
    """One pass over this rank's shard; the shard's mean loss averaged over the ranks.
    DistributedSampler pads every shard to the same length, so all ranks take the same
    number of steps and submit the same allreduces."""
    model.train()
    sampler.set_epoch(epoch)
    order = torch.tensor(list(sampler))
    total, steps = 0.0, 0
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
        total += loss.item()
        steps += 1
    return hvd.allreduce(torch.tensor(total / steps), name="train.loss", op=hvd.Average).item()


@torch.no_grad()
def evaluate(model, x, y):
    """Loss and accuracy over the whole test set: each rank scores every size-th image
    and the sums are added up over the ranks, so no image counts twice."""
    model.eval()
    shard = slice(hvd.rank(), None, hvd.size())
    xs, ys = x[shard], y[shard]
    loss_sum = correct = 0.0
    for start in range(0, len(xs), 1000):
        logits = model(xs[start:start + 1000])
        target = ys[start:start + 1000]
        loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
        correct += (logits.argmax(1) == target).sum().item()
    sums = torch.tensor([loss_sum, correct, len(xs)], dtype=torch.float64)
    loss_sum, correct, count = hvd.allreduce(sums, name="test.sums", op=hvd.Sum).tolist()
    return loss_sum / count, correct / count


def weight_spread(model):
    """The largest difference of any weight between two ranks: 0 when, as data-parallel
    training promises, every rank holds exactly the same model."""
    flat = torch.cat([t.detach().flatten().double() for t in model.state_dict().values()])
    high = hvd.allreduce(flat, name="check.max", op=hvd.Max)
    low = hvd.allreduce(flat, name="check.min", op=hvd.Min)
    return (high - low).max().item()


def main():
    args = parse_args()
    check_data_dir(args.data_dir)
    hvd.init()
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(args.threads or max(1, cores // hvd.local_size()))
    torch.manual_seed(args.seed)

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    if args.train_samples:
        x_train, y_train = x_train[:args.train_samples], y_train[:args.train_samples]
    sampler = DistributedSampler(range(len(x_train)), num_replicas=hvd.size(), rank=hvd.rank(),
                                 shuffle=True, seed=args.seed)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    # Rank 0's initial weights and optimizer state on every rank: the ranks start equal
    # and, averaging the same gradients, stay equal.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    if hvd.rank() == 0:
        print(f"Fashion-MNIST: {len(x_train)} training images ({len(sampler)} per rank), "
              f"{len(x_test)} test images; {hvd.size()} rank(s), batch {args.batch_size} per rank, "
              f"lr {args.lr * hvd.size():g}, {torch.get_num_threads()} thread(s) per rank", flush=True)
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        train_loss = train_epoch(model, optimizer, x_train, y_train, sampler, epoch, args.batch_size)
        test_loss, accuracy = evaluate(model, x_test, y_test)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: train loss {train_loss:.4f}, test loss {test_loss:.4f}, "
                  f"test accuracy {100 * accuracy:.2f}% ({time.perf_counter() - start:.1f} s)", flush=True)
    spread = weight_spread(model)
    if hvd.rank() == 0:
        print(f"final test accuracy {100 * accuracy:.2f}%")
        print(f"weights identical on all {hvd.size()} ranks" if spread == 0
              else f"weights differ between ranks by up to {spread:g}", flush=True)
    sys.exit(0 if spread == 0 else 1)


if __name__ == "__main__":
    main()
