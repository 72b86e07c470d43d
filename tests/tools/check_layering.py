#!/usr/bin/env python3
"""check_layering.py <source root>: fails when the tree's layering is broken.

C++: every quoted #include in runtime/, ops/, bindings/src/, tools/ and examples/ is
mapped to the part of the tree it names (runtime, ops/common, ops/mpi, ...). A part may
include only what ALLOWED lists for it, so that no backend reaches into another
backend's folder and the runtime never depends on ops/. The parts must also form no
circle.

Python: every import inside the accord package, module-level or inside a function, is
an edge of the module graph, which must have no circle (a circle that only works
because one side imports late still ties the two modules into one).

Prints each violation with the file and line and exits 1; exits 0 when clean.
"""

import ast
import pathlib
import re
import sys

# The parts of the C++ tree, the longest prefix first; a file belongs to the first that
# its path starts with.
PARTS = ["runtime/include", "runtime", "ops/common", "ops/mpi", "ops/shm", "ops/cpu",
         "ops/cuda", "ops/nccl", "bindings/src", "tools", "examples/resnet",
         "examples/embed"]

# What each part may include besides itself. The host ops (ops/mpi) run on MPI and, among
# the ranks of one host, on the shared-memory transport (ops/shm), which knows nothing of
# them. The device ops reach the host ops only through the dispatcher (ops/common).
ALLOWED = {
    "runtime/include": set(),
    "runtime": {"runtime/include"},
    "ops/common": {"runtime", "runtime/include", "ops/cpu"},
    "ops/cpu": {"runtime", "runtime/include"},
    "ops/shm": {"runtime", "runtime/include", "ops/common", "ops/cpu"},
    "ops/mpi": {"runtime", "runtime/include", "ops/common", "ops/cpu", "ops/shm"},
    "ops/cuda": {"runtime", "runtime/include", "ops/common", "ops/cpu"},
    "ops/nccl": {"runtime", "runtime/include", "ops/common", "ops/cpu", "ops/cuda"},
    "bindings/src": {"runtime/include"},
    "tools": {"runtime/include", "runtime", "ops/cpu", "examples/resnet"},
    "examples/resnet": {"runtime/include"},
    "examples/embed": {"runtime/include"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".h", ".cc", ".cu", ".cuh", ".def")


def part_of(path):
    for part in PARTS:
        if path == part or path.startswith(part + "/"):
            return part
    return None


def resolve(root, source, name):
    """The tree path an #include names: relative to the including file's folder, to the
    repository root, or to runtime/include (the public headers)."""
    for base in (source.parent, root, root / "runtime/include"):
        candidate = (base / name).resolve()
        if candidate.is_file() and root in candidate.parents:
            return candidate.relative_to(root).as_posix()
    return None


def find_cycle(graph):
    """One circle in `graph` (node -> set of nodes) as a list of nodes, or None."""
    state = {}

    def visit(node, trail):
        state[node] = "open"
        trail.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, trail)
                if found:
                    return found
        trail.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def check_cpp(root):
    problems, graph = [], {}
    for folder in ("runtime", "ops", "bindings/src", "tools", "examples/resnet", "examples/embed"):
        for source in sorted((root / folder).rglob("*")):
            if source.suffix not in SOURCES or not source.is_file():
                continue
            rel = source.relative_to(root).as_posix()
            mine = part_of(rel)
            text = source.read_text(errors="replace")
            for match in INCLUDE.finditer(text):
                target = resolve(root, source, match.group(1))
                theirs = part_of(target) if target else None
                if theirs is None or theirs == mine:
                    continue
                graph.setdefault(mine, set()).add(theirs)
                if theirs not in ALLOWED.get(mine, set()):
                    line = text.count("\n", 0, match.start()) + 1
                    problems.append(f"{rel}:{line}: {mine} includes {target} ({theirs}), "
                                    f"which {mine} may not depend on")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("C++ parts form a circle: " + " -> ".join(cycle))
    return problems


def check_python(root):
    package = root / "bindings/python"
    modules = {}
    for path in sorted((package / "accord").rglob("*.py")):
        rel = path.relative_to(package).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = path
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                if target in modules and target != name and not name.startswith(target + "."):
                    graph.setdefault(name, set()).add(target)
    cycle = find_cycle(graph)
    return ["Python modules import each other: " + " -> ".join(cycle)] if cycle else []


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems = check_cpp(root) + check_python(root)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("layering: no backend reaches into another's folder, no include or import circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
