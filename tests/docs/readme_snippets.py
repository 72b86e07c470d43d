#!/usr/bin/env python3
"""Runs the examples of README.md as they are written there, and checks what they print.

A fenced block is an example under test when the line above it is a
`<!-- tested: ... -->` comment. The README holds exactly one such ```cpp block and one
```python block; a missing marker fails the test rather than leaving an example untested.

  readme_snippets.py cpp    --readme R --source F --build-dir B --target T --exe E --mpiexec M
  readme_snippets.py python --readme R --python P --pythonpath D --mpiexec M

cpp: writes the block to F (the source of CMake target T, rewritten only when it
changed), builds T in B, runs E under `mpirun -np 2` and expects every rank to print
"rank <r> of 2: grad[0] = 0.5" (ranks 0 and 1 averaged). python: runs the block under
`mpirun -np 2` with P and PYTHONPATH=D, expects both ranks to print the same bias, and
that bias to be the one a single process gets by stepping with the average of the two
ranks' gradients. Exit status 77 (skipped) when P lacks torch.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

RANKS = 2
RUN_TIMEOUT_S = 120  # mpirun of a 2-rank example; it takes about a second


def extract(readme_path, lang):
    """The one fenced ```lang block right under a `<!-- tested: -->` comment."""
    with open(readme_path, encoding="utf-8") as f:
        text = f.read()
    pattern = re.compile(r"^<!-- tested:[^\n]*-->\n```" + re.escape(lang) + r"\n(.*?)^```$",
                         re.MULTILINE | re.DOTALL)
    blocks = pattern.findall(text)
    if len(blocks) != 1:
        sys.exit(f"{readme_path}: expected one ```{lang} block under a '<!-- tested: ... -->' "
                 f"line, found {len(blocks)}")
    return blocks[0]


def mpirun(mpiexec, argv, env=None):
    cmd = [mpiexec, "-np", str(RANKS), "--allow-run-as-root", "--oversubscribe",
           "--bind-to", "none"] + argv
    print("+", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        sys.exit(f"the example did not finish within {RUN_TIMEOUT_S} s; output:\n{e.output}")
    print(p.stdout, flush=True)
    if p.returncode != 0:
        sys.exit(f"the example exited with status {p.returncode}")
    return p.stdout


def run_cpp(a):
    code = extract(a.readme, "cpp")
    old = open(a.source, encoding="utf-8").read() if os.path.exists(a.source) else None
    if code != old:  # keep the timestamp, and so the build, when nothing changed
        with open(a.source, "w", encoding="utf-8") as f:
            f.write(code)
    build = subprocess.run(["cmake", "--build", a.build_dir, "--target", a.target])
    if build.returncode != 0:
        sys.exit(f"README.md's C++ example does not build (target {a.target}, {a.source})")
    out = mpirun(a.mpiexec, [a.exe])
    # Anywhere in the output: one rank's line may land before another's newline.
    lines = sorted(re.findall(r"rank \d+ of \d+: grad\[0\] = [-+.0-9e]+", out))
    want = [f"rank {r} of {RANKS}: grad[0] = 0.5" for r in range(RANKS)]
    if lines != want:
        sys.exit(f"expected the lines {want}, got {lines}")
    print("C++ example: every rank holds the average, 0.5")


def reference_bias():
    """What the Python example must print: rank 0's start, stepped once with the average
    of both ranks' gradients, as one process computes it."""
    import torch
    grads = []
    start = None
    for r in range(RANKS):
        torch.manual_seed(r)
        model = torch.nn.Linear(10, 1)
        if start is None:
            start = model
        else:
            model.load_state_dict(start.state_dict())
        x = torch.randn(32, 10)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        loss.backward()
        grads.append(model.bias.grad.item())
    lr = 0.01 * RANKS
    return start.bias.item() - lr * sum(grads) / RANKS, grads


def run_python(a):
    code = extract(a.readme, "python")
    check = subprocess.run([a.python, "-c", "import torch"], capture_output=True)
    if check.returncode != 0:
        print(f"SKIPPED: {a.python} has no torch (Debian: apt-get install python3-torch)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "readme_example.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(code)
        env = dict(os.environ, PYTHONPATH=a.pythonpath)
        out = mpirun(a.mpiexec, [a.python, script], env=env)
    # Anywhere in the output, not line by line: mpirun forwards each rank's writes as
    # they come, so one rank's line can land before the other's newline.
    found = dict(re.findall(r"rank (\d+) of %d: bias (-?\d+\.\d{6})" % RANKS, out))
    if sorted(found) != [str(r) for r in range(RANKS)]:
        sys.exit(f"expected a bias line from each of {RANKS} ranks, got {found}")
    want, grads = reference_bias()
    if abs(grads[0] - grads[1]) < 1e-3:
        sys.exit(f"the ranks' gradients {grads} are too close to tell averaging from none")
    for r, text in sorted(found.items()):
        if abs(float(text) - want) > 2e-6:
            sys.exit(f"rank {r} printed bias {text}, expected {want:.6f} (rank 0's start "
                     f"stepped with the average of the gradients {grads})")
    print(f"Python example: both ranks stepped to bias {want:.6f} with the averaged gradient")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("lang", choices=["cpp", "python"])
    p.add_argument("--readme", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--source")
    p.add_argument("--build-dir")
    p.add_argument("--target")
    p.add_argument("--exe")
    p.add_argument("--python")
    p.add_argument("--pythonpath")
    a = p.parse_args()
    run_cpp(a) if a.lang == "cpp" else run_python(a)


if __name__ == "__main__":
    main()
