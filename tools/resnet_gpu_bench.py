#!/usr/bin/env python3
"""Training throughput of accord-resnet against PyTorch on the same GPU, in one run.

For each model:batch pair, on synthetic 224x224 data, measures training images per
second of torchvision's model in PyTorch (channels_last, bf16 autocast by default, or
fp16 autocast with a GradScaler, tf32 or fp32; SGD with momentum; eager and
torch.compile) and of `accord-resnet --device cuda` with the same model, batch,
optimizer and --precision (its steps launched layer by layer, as CUDA graphs, and in
16 bits as graphs with --cudnn-fusion), then prints them, the ratio, and
the fraction of the GPU's peak bf16 FLOP/s each reaches (a training image costs three
forward passes: about 24.5 GFLOP for ResNet-50).

    python3 tools/resnet_gpu_bench.py                      # the full table
    python3 tools/resnet_gpu_bench.py --runs resnet50:128 --compile off
    python3 tools/resnet_gpu_bench.py --accord-resnet build/examples/resnet/accord-resnet
    python3 tools/resnet_gpu_bench.py --budget 300 --json r.json   # what fits in 5 minutes

Where accord-resnet has no `--device cuda` (a CPU-only build), its column says so and
the PyTorch figures are still measured.
"""

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time

# Forward multiply-adds per 224x224 image (torchvision's models), x2 FLOP per MAC,
# x3 for forward + backward (data and weight gradients).
GMAC_FORWARD = {"resnet18": 1.82, "resnet34": 3.67, "resnet50": 4.09, "resnet101": 7.80,
                "resnet152": 11.51}
# Dense bf16 tensor-core peaks (TFLOP/s), from NVIDIA's data sheets; the first name
# found in the device's wins (the PCIe and NVL H100s before the SXM one).
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H200": 989.0,
                    "A100": 312.0, "L40S": 362.0}


def train_gflop(model):
    return GMAC_FORWARD[model] * 2 * 3


def gpu_peak(name):
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops
    return None


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="resnet50:128,resnet50:256,resnet101:128,resnet152:128",
                   help="comma-separated model:batch pairs (default: %(default)s)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per run (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (default: %(default)s)")
    p.add_argument("--compile", choices=["off", "on", "both"], default="both",
                   help="PyTorch runs without and/or with torch.compile (default: %(default)s)")
    p.add_argument("--skip", default="",
                   help="comma-separated trainer modes not to measure, of layers, graphs "
                        "and fusion (e.g. --skip layers,fusion: a short run of the "
                        "comparison that matters)")
    p.add_argument("--accord-resnet", default="build/examples/resnet/accord-resnet",
                   help="the trainer to measure (default: %(default)s)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32", "tf32"],
                   help="both sides' precision; fp16 with loss scaling on both "
                        "(default: %(default)s)")
    p.add_argument("--json", help="also write the results here as JSON, after each "
                                  "measurement")
    p.add_argument("--budget", type=float, default=0,
                   help="seconds for the whole run (0: no limit): measurements go in order "
                        "of importance (PyTorch eager and the trainer's default for every "
                        "pair, then torch.compile, then the trainer's other modes), and one that "
                        "would not finish in what is left is skipped and listed")
    args = p.parse_args()
    runs = []
    for item in args.runs.split(","):
        m = re.fullmatch(r"(resnet\d+):(\d+)", item.strip())
        if not m or m.group(1) not in GMAC_FORWARD:
            p.error(f"--runs: '{item}' is not model:batch with model one of "
                    f"{', '.join(GMAC_FORWARD)} (e.g. resnet50:128)")
        if int(m.group(2)) < 1:
            p.error(f"--runs: '{item}': the batch must be at least 1")
        runs.append((m.group(1), int(m.group(2))))
    if args.steps < 1 or args.warmup < 0:
        p.error(f"--steps must be >= 1 and --warmup >= 0 (got {args.steps}, {args.warmup})")
    args.skip = [m.strip() for m in args.skip.split(",") if m.strip()]
    for mode in args.skip:
        if mode not in SKIPPABLE:
            p.error(f"--skip: '{mode}' is not one of {', '.join(SKIPPABLE)}")
    if args.budget < 0:
        p.error(f"--budget must be >= 0 seconds (got {args.budget:g})")
    return args, runs


def torch_images_per_sec(torch, torchvision, model_name, batch, steps, warmup, precision,
                         compiled):
    """Synthetic data resident on the GPU, as accord-resnet's synthetic mode does."""
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    model = getattr(torchvision.models, model_name)(num_classes=1000).to(device)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    x = torch.randn(batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    autocast = precision in ("bf16", "fp16")
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    # fp16 needs its gradients scaled, as accord-resnet's fp16 does.
    try:
        scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    except (AttributeError, TypeError):  # PyTorch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=precision == "fp16")

    def step(m):
        with torch.autocast("cuda", dtype=dtype, enabled=autocast):
            loss = loss_fn(m(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    run = torch.compile(model) if compiled else model
    t0 = time.perf_counter()
    for _ in range(warmup):
        step(run)
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - t0
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step(run)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    del run, model, opt
    torch.cuda.empty_cache()
    return batch * steps / seconds, setup_s


def accord_images_per_sec(exe, model_name, batch, steps, warmup, precision, extra=(),
                          timeout=None):
    """Returns (img/s, None) or (None, why not). `extra`: flags such as --cuda-graphs;
    `timeout`: seconds the run may take (None: no limit)."""
    if not os.path.exists(exe):
        return None, f"{exe} not found"
    shown = subprocess.run([exe, "--help"], capture_output=True, text=True)
    if shown.returncode != 0:  # e.g. a shared library missing on this machine
        tail = (shown.stderr or shown.stdout).strip().splitlines()[-1:]
        return None, f"{exe} --help failed (exit {shown.returncode}): {' '.join(tail)}"
    help_text = shown.stdout
    if "--device" not in help_text:
        return None, "this accord-resnet has no --device (CPU-only build)"
    # Two epochs of `steps` batches: the first warms up (cuDNN plans, allocations), the
    # second's rate is the one reported, so one-time costs stay out of it as they do
    # out of PyTorch's timed steps. (`warmup` is PyTorch's; an epoch covers more.)
    cmd = [exe, "--device", "cuda", "--model", model_name, "--stem", "imagenet", "--width", "1",
           "--dataset", "synthetic", "--image-size", "224", "--classes", "1000",
           "--batch-size", str(batch), "--steps", str(2 * max(steps, warmup)),
           "--synthetic-size", str(batch * max(steps, warmup)), "--epochs", "2", "--no-eval",
           "--no-progress", "--metrics", "/dev/stdout"]
    # Timed convolution algorithms on both sides: PyTorch's run sets cudnn.benchmark.
    # The search happens in the first epoch; the rate is the second's.
    if "--cudnn-search" in help_text:
        cmd.append("--cudnn-search")
    for flag in extra:
        if flag not in help_text:
            return None, f"this accord-resnet has no {flag}"
        cmd.append(flag)
    note = None
    # The trainer's --precision choices, as its help lists them ("{fp32,tf32}").
    m = re.search(r"--precision\s+\S*\{([^}]*)\}", help_text)
    offered = m.group(1).split(",") if m else ["fp32"]
    if precision in offered:
        used = precision
    else:  # the closest it has: tf32 (tensor cores) before plain fp32
        used = "tf32" if "tf32" in offered else "fp32"
        note = f"{used}: this accord-resnet has no {precision}"
    if m:
        cmd += ["--precision", used]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"stopped at the budget's end after {timeout:.0f} s"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return None, f"exit {proc.returncode}: {' | '.join(tail)}"
    rates = [json.loads(line)["images_per_sec"] for line in proc.stdout.splitlines()
             if line.startswith("{") and "images_per_sec" in line]
    if not rates:
        return None, "no images_per_sec in its metrics"
    return rates[-1], note


# Each measurement of a model:batch pair, in the order a --budget cuts them short: the
# comparison the figures are about first (PyTorch eager against the trainer's one-rank
# default, graphed steps) for every pair, then torch.compile (the other half of that
# comparison), the trainer's fused 16-bit steps (whether fusion pays), and its steps
# launched layer by layer (its default on several ranks).
MEASURES = {
    "torch_eager": ("pytorch eager", None),
    "torch_compile": ("pytorch compile", None),
    "accord": ("accord-resnet layers", ("--no-cuda-graphs",)),
    "accord_graphs": ("accord-resnet graphs", ("--cuda-graphs",)),
    "accord_fusion": ("accord-resnet fusion", ("--cuda-graphs", "--cudnn-fusion")),
}
# Seconds a measurement is expected to take before one of its kind has been timed.
FIRST_GUESS_S = {"torch_eager": 30, "torch_compile": 75, "accord": 60, "accord_graphs": 60,
                 "accord_fusion": 90}


# --skip's names of the trainer's modes.
SKIPPABLE = {"layers": "accord", "graphs": "accord_graphs", "fusion": "accord_fusion"}


def plan(runs, compile_mode, precision, skip=()):
    tiers = [["torch_eager", "accord_graphs"] if compile_mode != "on" else ["accord_graphs"]]
    if compile_mode != "off":
        tiers.append(["torch_compile"])
    if precision in ("bf16", "fp16"):
        tiers.append(["accord_fusion"])
    tiers.append(["accord"])
    skipped = {SKIPPABLE[mode] for mode in skip}
    return [(pair, key) for tier in tiers for pair in runs for key in tier if key not in skipped]


# A trainer mode not timed yet, against its graphed steps (the first timed): launched
# layer by layer about as long, and fused steps longer (each shape is also timed fused
# and plain on its first step).
AFTER_GRAPHS = {"accord": 1.2, "accord_fusion": 1.5}


def expected_seconds(key, pair, spent):
    """What `key` on `pair` should take, from the same kind's earlier measurements scaled
    by work (batch x GFLOP per image), or for another trainer mode from its graphed
    steps', or a first guess; a compilation does not scale."""
    done = [(p, s) for (p, k), s in spent.items() if k == key]
    if not done:
        if key in AFTER_GRAPHS and any(k == "accord_graphs" for _, k in spent):
            return AFTER_GRAPHS[key] * expected_seconds("accord_graphs", pair, spent)
        return FIRST_GUESS_S[key]
    if key == "torch_compile":
        return max(s for _, s in done)
    work = lambda p: p[1] * train_gflop(p[0])
    return max(s * work(pair) / work(p) for p, s in done)


class BudgetSpent(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raises BudgetSpent in the block after `seconds` (None: no limit), so that a PyTorch
    measurement (a torch.compile above all) cannot run past the budget."""
    if seconds is None:
        yield
        return

    def expire(signum, frame):
        raise BudgetSpent()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def main():
    args, runs = parse_args()
    try:
        import torch
        import torchvision
    except ImportError as e:
        sys.exit(f"resnet_gpu_bench: needs PyTorch and torchvision ({e})")
    if not torch.cuda.is_available():
        sys.exit("resnet_gpu_bench: no CUDA GPU visible to PyTorch")
    started = time.monotonic()
    gpu = torch.cuda.get_device_name(0)
    peak = gpu_peak(gpu)
    print(f"device: {gpu}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"precision {args.precision}; {args.steps} timed steps after {args.warmup}; "
          f"peak bf16 {peak or '?'} TFLOP/s"
          + (f"; budget {args.budget:.0f} s" if args.budget else ""), flush=True)
    rows = {pair: {"model": pair[0], "batch": pair[1], "gflop_per_image": train_gflop(pair[0])}
            for pair in runs}
    spent = {}  # (pair, key) -> seconds the measurement took
    skipped = []

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": gpu, "torch": torch.__version__,
                           "precision": args.precision, "peak_bf16_tflops": peak,
                           "results": list(rows.values()),
                           "not_measured": [f"{p[0]}:{p[1]} {k}" for p, k in skipped]},
                          f, indent=2)

    def line(row, key, ips, note=""):
        label = MEASURES[key][0]
        pct = (f"{100 * ips * row['gflop_per_image'] / 1e3 / peak:6.1f}%"
               if peak and ips else "      ?")
        eager = row.get("torch_eager")
        ratio = f"{ips / eager:8.2f}x" if eager and ips and key != "torch_eager" else ""
        value = f"{ips:9.1f}" if ips else f"{'-':>9}"
        return (f"{row['model']:<10} {row['batch']:>5} {label:<22} {value} {pct} {ratio:>9} "
                f"{note}").rstrip()

    header = f"{'model':<10} {'batch':>5} {'framework':<22} {'img/s':>9} {'% peak':>7} {'vs eager':>9}"
    print(header)
    print("-" * len(header), flush=True)
    for pair, key in plan(runs, args.compile, args.precision, args.skip):
        row = rows[pair]
        label, flags = MEASURES[key]
        left = args.budget - (time.monotonic() - started) if args.budget else None
        if left is not None and expected_seconds(key, pair, spent) > left:
            skipped.append((pair, key))
            print(line(row, key, None, f"not measured: {max(left, 0):.0f} s of the budget left"),
                  flush=True)
            continue
        t0 = time.monotonic()
        note = ""
        ips, why = None, None
        if key.startswith("torch"):
            compiled = key == "torch_compile"
            try:
                with time_limit(left):
                    ips, setup_s = torch_images_per_sec(torch, torchvision, pair[0], pair[1],
                                                        args.steps, args.warmup, args.precision,
                                                        compiled)
                if compiled:
                    note = f"(warm-up {setup_s:.0f} s)"
            except BudgetSpent:
                why = f"stopped at the budget's end after {left:.0f} s"
        else:
            ips, why = accord_images_per_sec(args.accord_resnet, pair[0], pair[1], args.steps,
                                             args.warmup, args.precision, flags, left)
        spent[(pair, key)] = round(time.monotonic() - t0, 1)
        if why and why.startswith("stopped at the budget's end"):
            skipped.append((pair, key))  # not measured, as if skipped: not a failure
            print(line(row, key, None, f"not measured: {why}"), flush=True)
            save()
            continue
        if why:
            row[key + "_error"] = why
            note = why
        row[key + "_seconds"] = spent[(pair, key)]
        row[key] = ips
        print(line(row, key, ips, note), flush=True)
        save()
    save()
    # The table again, a pair's lines together, for the end of a log.
    print(f"\n== img/s by model and batch\n{header}\n{'-' * len(header)}")
    for pair in runs:
        for key in MEASURES:
            if key in rows[pair]:
                print(line(rows[pair], key, rows[pair][key],
                           rows[pair].get(key + "_error", "")))
    print(f"({time.monotonic() - started:.0f} s in all)")
    if skipped:
        print("not measured within the budget: "
              + ", ".join(f"{p[0]}:{p[1]} {MEASURES[k][0]}" for p, k in skipped))
    failed = [f"{r['model']}:{r['batch']} {MEASURES[k][0]}" for r in rows.values()
              for k in MEASURES if k in r and r[k] is None]
    if failed:
        sys.exit(f"resnet_gpu_bench: no rate for {', '.join(failed)} (see the notes above)")


if __name__ == "__main__":
    main()
