#!/usr/bin/env python3
"""Training throughput of accord-resnet against PyTorch on the CPU.

Trains ResNet-18 and ResNet-50 (torchvision's architectures, 1000 classes, 224x224
synthetic images) for a fixed number of steps in one process with each framework --
same batch, same thread count, SGD with momentum, label smoothing 0.1 -- and prints
images/s for both and the ratio accord / PyTorch.

The first steps of each run build kernels (oneDNN primitives in both) and are not
timed. accord-resnet reports per epoch, so its run is cut into epochs of
--warmup-steps steps and every epoch after the first is timed.

PyTorch: Debian's python3-torch and python3-torchvision (CPU-only, built with the same
oneDNN 2.6 as accord-resnet) are enough: `apt-get install python3-torchvision`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run_accord(exe, model, batch, size, steps, warmup, threads):
    epochs = 1 + max(1, -(-steps // warmup))  # one untimed epoch, then >= steps timed
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [exe, "--model", model, "--dataset", "synthetic", "--stem", "imagenet",
               "--width", "1", "--classes", "1000", "--image-size", str(size),
               "--batch-size", str(batch), "--synthetic-size", str(batch * warmup),
               "--epochs", str(epochs), "--warmup-epochs", "0", "--no-eval",
               "--no-progress", "--threads", str(threads), "--metrics", metrics]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(metrics) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    timed = rows[1:]
    images = sum(r["steps"] for r in timed) * batch
    seconds = sum(r["seconds"] for r in timed)
    return images / seconds


def run_torch(model, batch, size, steps, warmup, threads):
    import torch
    import torchvision

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = getattr(torchvision.models, model)(num_classes=1000)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-5)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 1000, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - t0)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_exe = os.path.join(here, "..", "..", "..", "build", "examples", "resnet", "accord-resnet")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--accord-resnet", default=os.environ.get("ACCORD_RESNET", default_exe))
    p.add_argument("--models", default="resnet18,resnet50")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=10, help="timed steps per framework and model")
    p.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per framework, interleaved; the median is reported")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    if not os.access(a.accord_resnet, os.X_OK):
        sys.exit(f"bench: no accord-resnet at {a.accord_resnet} (build it, or pass --accord-resnet)")
    try:
        import torch, torchvision  # noqa: F401
    except ImportError:
        sys.exit("bench: PyTorch is not importable by %s; install python3-torchvision "
                 "(Debian) or torch + torchvision (pip)" % sys.executable)

    print(f"batch {a.batch_size}, {a.image_size}x{a.image_size}, {a.threads} threads, "
          f"{a.steps} timed steps after {a.warmup_steps} untimed, median of {a.repeats}; "
          f"torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'model':<10} {'accord img/s':>13} {'pytorch img/s':>14} {'ratio':>7}")
    results = []
    for model in a.models.split(","):
        accs, pts = [], []
        for _ in range(a.repeats):  # interleaved, so a busy spell hits both frameworks
            accs.append(run_accord(a.accord_resnet, model, a.batch_size, a.image_size,
                                   a.steps, a.warmup_steps, a.threads))
            pts.append(run_torch(model, a.batch_size, a.image_size, a.steps, a.warmup_steps,
                                 a.threads))
        acc, pt = statistics.median(accs), statistics.median(pts)
        print(f"{model:<10} {acc:>13.2f} {pt:>14.2f} {acc / pt:>6.2f}x", flush=True)
        results.append({"model": model, "accord_img_s": acc, "pytorch_img_s": pt,
                        "accord_runs": accs, "pytorch_runs": pts,
                        "ratio": acc / pt, "batch": a.batch_size, "threads": a.threads})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
