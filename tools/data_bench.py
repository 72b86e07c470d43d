#!/usr/bin/env python3
"""Decode + augment throughput: accord-resnet's loader (folder and packed) against
PyTorch's DataLoader with torchvision transforms, on the same JPEG files, with the same
transforms and the same number of workers, in one invocation.

    tools/data_bench.py --build-dir build --data /tmp/accord-jpegs --workers 2

Makes the dataset (accord-make-jpegs) and its packed copy (accord-pack) where missing.
Each loader makes one untimed pass (page cache, worker start-up) and then --epochs
timed passes over train/; the transforms are random-resized crop, horizontal flip,
to-float and normalise, at --image-size.
"""
import argparse
import os
import re
import subprocess
import sys
import time


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not an integer >= 1")
    return value


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"data_bench.py: {' '.join(cmd)} failed ({done.returncode}):\n"
                 f"{done.stdout}{done.stderr}")
    return done.stdout


def accord_rate(args, dataset, data_dir):
    out = run([os.path.join(args.build_dir, "tools", "accord-data-bench"), "--dataset", dataset,
               "--data-dir", data_dir, "--data-workers", str(args.workers), "--batch-size",
               str(args.batch_size), "--image-size", str(args.image_size), "--epochs",
               str(args.epochs)])
    match = re.search(r"([0-9.]+) images/s", out)
    if not match:
        sys.exit(f"data_bench.py: cannot read accord-data-bench's output: {out!r}")
    return float(match.group(1))


def torch_rate(args, data_dir):
    import torch
    import torchvision.datasets as datasets
    import torchvision.transforms as T
    torch.set_num_threads(1)  # the workers do the work, as in the usual training script
    transform = T.Compose([
        T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    data = datasets.ImageFolder(data_dir, transform)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, drop_last=True,
                                         persistent_workers=True, prefetch_factor=2)
    images, seconds = 0, 0.0
    for epoch in range(args.epochs + 1):  # pass 0 is not timed
        t0 = time.perf_counter()
        n = sum(x.shape[0] for x, _ in loader)
        if epoch > 0:
            seconds += time.perf_counter() - t0
            images += n
    return images / seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default="build", help="where accord-data-bench was built")
    p.add_argument("--data", default="/tmp/accord-jpegs",
                   help="dataset folder (train/ with class subfolders); made if missing")
    p.add_argument("--images", type=positive, default=2000, help="training images when making it")
    p.add_argument("--workers", type=positive, default=2, help="decode workers, each loader")
    p.add_argument("--batch-size", type=positive, default=64)
    p.add_argument("--image-size", type=positive, default=224)
    p.add_argument("--epochs", type=positive, default=2, help="timed passes per loader")
    args = p.parse_args()
    tools = os.path.join(args.build_dir, "tools")
    if not os.path.isfile(os.path.join(tools, "accord-data-bench")):
        sys.exit(f"data_bench.py: no accord-data-bench in {tools}: build it "
                 f"(cmake --build {args.build_dir} --target accord-data-bench accord-pack "
                 "accord-make-jpegs) or pass --build-dir")
    train = os.path.join(args.data, "train")
    packed = os.path.join(args.data, "packed", "train")
    if not os.path.isdir(train):
        print(f"making {args.images} JPEGs in {args.data} ...", flush=True)
        run([os.path.join(tools, "accord-make-jpegs"), args.data, "--train", str(args.images),
             "--val", "0"])
    if not os.path.isfile(os.path.join(packed, "index.tsv")):
        run([os.path.join(tools, "accord-pack"), train, packed, "--shards", "4", "--quiet"])

    rates = {}
    rates["accord folder"] = accord_rate(args, "folder", train)
    rates["accord packed"] = accord_rate(args, "packed", packed)
    rates["torch DataLoader"] = torch_rate(args, train)
    print(f"decode + augment to {args.image_size}x{args.image_size}, {args.workers} workers, "
          f"batch {args.batch_size}, {args.epochs} timed passes over {train}")
    for name, rate in rates.items():
        print(f"  {name:18s} {rate:8.1f} images/s")
    base = rates["torch DataLoader"]
    print(f"  ratio folder / torch {rates['accord folder'] / base:.2f}x, "
          f"packed / torch {rates['accord packed'] / base:.2f}x")


if __name__ == "__main__":
    main()
