"""Checks an accord-report directory against the metrics files it came from.

  python3 check_report.py REPORT_DIR METRICS.jsonl...

Recomputes every number from the metrics files on its own (totals, throughput,
speed-up, E_G, time shares, accuracy) and compares it with summary.json and with each
table cell of index.md, to the cell's printed precision; checks that every plot is a
whole PNG. Prints each problem and exits 1 if there is any. Standard library only, so
it shares no code with the tool it checks.
"""
import json
import os
import re
import struct
import sys
import zlib

PLOTS = ("throughput.png", "efficiency.png", "time_split.png", "overview.png")


def read(path, mode="r"):
    with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
        return f.read()


def png_problem(path):
    """None for a PNG whose chunks are all intact, else what is wrong."""
    try:
        data = read(path, "rb")
    except OSError as e:
        return f"cannot read: {e.strerror}"
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "no PNG signature"
    pos, chunks = 8, []
    while pos + 12 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length] or b"\0\0\0\0")
        if len(body) != length or zlib.crc32(kind + body) != crc:
            return f"chunk {kind!r} at byte {pos} is damaged"
        chunks.append((kind, body))
        pos += 12 + length
    if not chunks or chunks[0][0] != b"IHDR" or chunks[-1][0] != b"IEND":
        return "does not start with IHDR and end with IEND"
    width, height = struct.unpack(">II", chunks[0][1][:8])
    if width < 300 or height < 200:  # too small to read
        return f"{width}x{height} pixels"
    return None


def totals(path):
    """The run's own numbers, from its JSON lines."""
    lines = [json.loads(l) for l in read(path).splitlines() if l.strip()]
    t = {k: sum(l[k] for l in lines) for k in ("seconds", "images", "compute_s", "comm_wait_s", "data_wait_s")}
    t.update(ranks=lines[0]["ranks"], batch_size=lines[0]["batch_size"], global_batch=lines[0]["global_batch"],
             schedule=lines[0]["schedule"], epochs=len(lines), val_top1=lines[-1].get("val_top1"))
    t["images_per_sec"] = t["images"] / t["seconds"]
    t["compute_share"] = t["compute_s"] / t["seconds"]
    t["comm_share"] = t["comm_wait_s"] / t["seconds"]
    t["data_share"] = t["data_wait_s"] / t["seconds"]
    t["other_share"] = max(0.0, 1 - t["compute_share"] - t["comm_share"] - t["data_share"])
    return t


def derive(runs):
    """Speed-up and E_G of every run against the fewest-ranks run of its group."""
    for name, r in runs.items():
        group = [o for o in runs.values() if (o["batch_size"], o["schedule"]) == (r["batch_size"], r["schedule"])]
        ref = min(group, key=lambda o: o["ranks"])
        r["reference"] = next(n for n, o in runs.items() if o is ref)
        r["speedup"] = r["images_per_sec"] / ref["images_per_sec"]
        r["efficiency"] = r["speedup"] * ref["ranks"] / r["ranks"]


def tables(md):
    """{section heading: [row dicts]} for every Markdown table of the page."""
    out, section, header = {}, None, None
    for line in md.splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not all(set(c) <= set("-:") for c in cells):
                out.setdefault(section, []).append(dict(zip(header, cells)))
        else:
            header = None
    return out


def cell_matches(text, value):
    """The cell shows value to its own precision ("12.3", "45.6%")."""
    scale = 100 if text.endswith("%") else 1
    body = text.rstrip("%")
    try:
        shown = float(body)
    except ValueError:
        return False
    digits = len(body.split(".")[1]) if "." in body else 0
    return abs(shown - scale * value) <= 0.5 * 10 ** -digits + 1e-9


class Checker:
    def __init__(self, report, metrics):
        self.report, self.problems = report, []
        self.metrics = {os.path.realpath(p): p for p in metrics}

    def fail(self, text):
        self.problems.append(text)

    def same(self, where, shown, value):
        if isinstance(value, (int, float)) and isinstance(shown, (int, float)):
            if abs(shown - value) <= 1e-9 * max(1.0, abs(value)):
                return
        elif shown == value:
            return
        self.fail(f"{where}: {shown!r}, but the metrics give {value!r}")

    def run(self):
        for name in ("index.md", "summary.json"):
            if not os.path.isfile(os.path.join(self.report, name)):
                self.fail(f"{name} is missing")
        if self.problems:
            return self.problems
        summary = json.loads(read(os.path.join(self.report, "summary.json")))
        md = read(os.path.join(self.report, "index.md"))
        runs = self.check_runs(summary)
        self.check_plots(summary, md, runs)
        self.check_summary(summary, runs)
        self.check_tables(tables(md), runs)
        return self.problems

    def check_runs(self, summary):
        """{name: recomputed numbers}, each summary run tied to one given metrics file."""
        runs = {}
        for r in summary["runs"]:
            real = os.path.realpath(r["file"])
            if real not in self.metrics:
                self.fail(f"summary.json run {r['name']} comes from {r['file']}, which was not given")
                continue
            runs[r["name"]] = totals(self.metrics.pop(real))
        for path in self.metrics.values():
            self.fail(f"{path} is not in the report")
        derive(runs)
        return runs

    def check_plots(self, summary, md, runs):
        wanted = set(PLOTS) | ({"accuracy.png"} if any(r["val_top1"] is not None for r in runs.values()) else set())
        for name in sorted(wanted | set(summary.get("plots", [])) | set(re.findall(r"!\[[^]]*\]\(([^)]+)\)", md))):
            problem = png_problem(os.path.join(self.report, name))
            if problem:
                self.fail(f"{name}: {problem}")

    def check_summary(self, summary, runs):
        for r in summary["runs"]:
            for k, v in runs.get(r["name"], {}).items():
                if k not in ("speedup", "efficiency", "reference"):
                    self.same(f"summary.json run {r['name']} {k}", r.get(k), v)
        covered = []
        for g in summary["scaling"]:
            for p in g["points"]:
                covered.append(p["run"])
                for k in ("ranks", "global_batch", "images_per_sec", "speedup", "efficiency"):
                    self.same(f"summary.json scaling {p['run']} {k}", p[k], runs[p["run"]][k])
        if sorted(covered) != sorted(runs):
            self.fail(f"summary.json scaling covers {sorted(covered)}, not every run once {sorted(runs)}")
        for s in summary["accuracy"]:
            for p in s["points"]:
                self.same(f"summary.json accuracy {p['run']} val_top1", p["val_top1"], runs[p["run"]]["val_top1"])
                self.same(f"summary.json accuracy {p['run']} schedule", s["schedule"], runs[p["run"]]["schedule"])

    def check_rows(self, where, rows, runs, columns, want_runs):
        seen = []
        for row in rows:
            name = row.get("Run")
            if name not in runs:
                self.fail(f"index.md {where}: row for unknown run {name!r}")
                continue
            seen.append(name)
            for column, key in columns.items():
                value = runs[name][key]
                text = row.get(column, "")
                ok = cell_matches(text, value) if isinstance(value, float) else text == str(value)
                if not ok:
                    self.fail(f"index.md {where}, run {name}, {column}: {text!r}, but the metrics give {value!r}")
        if sorted(seen) != sorted(want_runs):
            self.fail(f"index.md {where}: rows for {sorted(seen)}, expected each of {sorted(want_runs)} once")

    def check_tables(self, found, runs):
        scaling = next((rows for title, rows in found.items() if title.startswith("Throughput")), [])
        self.check_rows("scaling tables", scaling, runs,
                        {"Batch/rank": "batch_size", "Schedule": "schedule", "Ranks": "ranks",
                         "Global batch": "global_batch", "img/s": "images_per_sec", "Reference": "reference",
                         "Speed-up": "speedup", "E_G": "efficiency"}, list(runs))
        split = next((rows for title, rows in found.items() if title.startswith("Time split")), [])
        self.check_rows("time split table", split, runs,
                        {"Ranks": "ranks", "Global batch": "global_batch", "Schedule": "schedule", "Epochs": "epochs",
                         "Time (s)": "seconds", "Compute (s)": "compute_s", "Communication (s)": "comm_wait_s",
                         "Data (s)": "data_wait_s", "Compute": "compute_share", "Communication": "comm_share",
                         "Data": "data_share", "Other": "other_share"}, list(runs))
        accuracy = next((rows for title, rows in found.items() if title.startswith("Validation accuracy")), [])
        self.check_rows("accuracy table", accuracy, runs,
                        {"Schedule": "schedule", "Ranks": "ranks", "Global batch": "global_batch",
                         "Epochs": "epochs", "Val top-1": "val_top1"},
                        [n for n, r in runs.items() if r["val_top1"] is not None])


def check(report, metrics):
    return Checker(report, metrics).run()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    problems = check(sys.argv[1], sys.argv[2:])
    for p in problems:
        print("check_report:", p)
    print(f"check_report: {sys.argv[1]}: " + (f"{len(problems)} problem(s)" if problems else "all numbers agree"))
    sys.exit(1 if problems else 0)
