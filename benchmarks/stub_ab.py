"""The shipped plugin against a variant of itself, in one server beside native: each stub's
CPU per request, so a change to the plugin's call path is measured on Triton's own stub,
not only in process (``scripts/call_path.py``). The EMULATED flat profile at time scale 1
(``--device``), perf_analyzer at one open-loop rate (Poisson, the benchmark's mix, its SLA
classes for the plugin; ``scripts/hold_speed.py``'s repository and measurement).

A variant (``explicit_b``) is the shipped model with ``--params`` set, or running another
tree's code (``--tree``: a ``git worktree`` of another commit; its stub puts that tree first
on ``sys.path``, so it imports that tree's packages: python_backend runs each model in its
own stub process). Rounds alternate the order (A, B, native; then native, B, A), so the 2
shared cores' drift falls on all three alike. ``--perf-s`` then records each stub with
``perf`` (CPU clock; where ``perf`` is installed) while it serves, and the page splits each
stub's CPU per request by the library it ran in: the Python interpreter, numpy, the stub's
C++, libc.

    .venv/bin/python scripts/stub_ab.py [--tree PATH] [--params JSON] [--rate 1440]
        [--rounds 4] [--measurement-ms 10000] [--device flat] [--perf-s 0] [--out PAGE]

CPU per request is each stub process's CPU (``/proc``, every thread) over the row, per
request Triton answered (``hold_speed.measure``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchmarks.hold_speed import (DEVICES, NATIVE, SHIPPED, Row, add_variant, measure,
                                   shipped_beside_native)
from benchmarks.pages import write_page
from benchmarks.procinfo import find_stub

VARIANT = "explicit_b"
PERF_HZ = 1999  # not a multiple of the stub's own periods


def variant_model(repo: str, tree: str | None, params: dict[str, str], device: str) -> str:
    """Model ``VARIANT`` in ``repo``: the shipped model on ``device`` with ``params`` set
    (``hold_speed.add_variant``), its stub importing from ``tree`` first where one is given.
    Returns its name."""
    model_py = os.path.join(add_variant(repo, params, device, name=VARIANT), "1", "model.py")
    if tree:
        with open(model_py, encoding="utf-8") as fh:
            shipped = fh.read()
        with open(model_py, "w", encoding="utf-8") as fh:
            fh.write(f"import sys\nsys.path.insert(0, {os.path.abspath(tree)!r})\n{shipped}")
    return VARIANT


def perf_by_library(report: str) -> dict[str, int]:
    """Samples by library from ``perf report --no-children --sort dso -n -q -g none``
    output (a line: its share, its samples, the library)."""
    samples: dict[str, int] = {}
    for line in report.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith("%") and parts[1].isdigit():
            samples[" ".join(parts[2:])] = int(parts[1])
    return samples


def share(samples: dict[str, int], library: str) -> float:
    """``library``'s share of a stub's perf samples."""
    return samples.get(library, 0) / max(1, sum(samples.values()))


def record_perf(pid: int, seconds: float, out: str) -> subprocess.Popen:
    return subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", str(PERF_HZ), "-g",
                             "-o", out, "-p", str(pid), "--", "sleep", f"{seconds:g}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def read_perf(path: str) -> dict[str, int]:
    report = subprocess.run(["perf", "report", "-i", path, "--no-children", "--sort", "dso",
                             "-n", "-q", "-g", "none"], capture_output=True, text=True,
                            check=False)
    return perf_by_library(report.stdout)


def run(args) -> tuple[dict[str, list[Row]], dict[str, tuple[dict[str, int], Row]]]:
    """Each model's rows, A / B / native alternated, then (``--perf-s``) each stub's perf
    samples by library with the row it was recorded over."""
    rows: dict[str, list[Row]] = {"A": [], "B": [], "native": []}
    perf: dict[str, tuple[dict[str, int], Row]] = {}
    params = json.loads(args.params)
    with tempfile.TemporaryDirectory() as tmp, shipped_beside_native(
            tmp, args.device, also=lambda repo: variant_model(repo, args.tree, params,
                                                             args.device)) as (server, _, data):
        order = [("A", SHIPPED), ("B", VARIANT), ("native", NATIVE)]
        for r in range(args.rounds):
            for name, model in (order if r % 2 == 0 else order[::-1]):
                row = measure(server, model, data[model], args.rate, None, args.measurement_ms)
                rows[name].append(row)
                print(r + 1, name, row, flush=True)
        if args.perf_s and shutil.which("perf"):
            for name, model in order:
                out = os.path.join(tmp, f"{name}.perf")
                spy = record_perf(find_stub(server.process.pid, model), args.perf_s, out)
                row = measure(server, model, data[model], args.rate, None,
                              int(args.perf_s * 1000) - 1000)
                spy.wait()
                perf[name] = (read_perf(out), row)
    return rows, perf


def median_us(rows: list[Row]) -> float:
    return statistics.median(r.stub_us for r in rows if r.stub_us is not None)


def page(rows: dict[str, list[Row]], perf: dict[str, tuple[dict[str, int], Row]],
         args) -> list[str]:
    variant = (f"the code of `{args.tree}`" if args.tree else "the shipped code") + (
        f" with parameters `{args.params}`" if json.loads(args.params) else "")
    cmd = (f"scripts/stub_ab.py --rate {args.rate:g} --rounds {args.rounds} "
           f"--measurement-ms {args.measurement_ms} --device {args.device}"
           + (f" --tree {args.tree}" if args.tree else "")
           + (f" --params '{args.params}'" if json.loads(args.params) else "")
           + (f" --perf-s {args.perf_s:g}" if args.perf_s else ""))
    lines = [f"# The shipped plugin (A) against a variant (B), beside native, at "
             f"{args.rate:g} req/s (EMULATED {args.device})", "",
             f"Generated by `.venv/bin/python {cmd} --out ...` on this machine (2 shared "
             "cores). One server; A is the shipped model, B the shipped model running "
             f"{variant}; native is Triton's dynamic batcher. Stub CPU per request: the "
             "stub process's CPU (every thread, /proc) over the row / requests answered. "
             "Rounds alternate the order.", "",
             "| round | A: stub CPU (us/req) | B | native | B / A | A / native | B / native |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for i, (a, b, n) in enumerate(zip(rows["A"], rows["B"], rows["native"]), 1):
        lines.append(f"| {i} | {a.stub_us:.1f} | {b.stub_us:.1f} | {n.stub_us:.1f} | "
                     f"{b.stub_us / a.stub_us:.3f} | {a.stub_us / n.stub_us:.3f} | "
                     f"{b.stub_us / n.stub_us:.3f} |")
    a, b, n = (median_us(rows[k]) for k in ("A", "B", "native"))
    lines += [f"| median | {a:.1f} | {b:.1f} | {n:.1f} | {b / a:.3f} | {a / n:.3f} | "
              f"{b / n:.3f} |", "",
              "Requests per execute() call (medians): " + ", ".join(
                  f"{k} {statistics.median(r.per_call for r in v if r.per_call):.1f}"
                  for k, v in rows.items()) + "; P50 (ms): " + ", ".join(
                  f"{k} {statistics.median(r.p50_ms for r in v if r.p50_ms):.1f}"
                  for k, v in rows.items()) + "."]
    if perf:
        libraries = sorted({lib for samples, _ in perf.values() for lib in samples},
                           key=lambda lib: -perf["A"][0].get(lib, 0))[:8]
        lines += ["", f"Each stub recorded with `perf record -e cpu-clock -F {PERF_HZ}` over "
                  f"{args.perf_s:g} s while serving: its CPU per request (us) by library "
                  "(its share of the samples x the stub's CPU per request over that row).", "",
                  "| library | " + " | ".join(perf) + " |", "|---|" + "---:|" * len(perf)]
        for lib in libraries:
            cells = [f"{share(perf[k][0], lib) * (perf[k][1].stub_us or 0.0):.1f}"
                     for k in perf]
            lines.append(f"| {lib} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default="", help="B runs this tree's code")
    parser.add_argument("--params", default="{}", help="B's parameters, a JSON object")
    parser.add_argument("--rate", type=float, default=1440.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--measurement-ms", type=int, default=10000)
    parser.add_argument("--device", choices=sorted(DEVICES), default="flat")
    parser.add_argument("--perf-s", type=float, default=0.0)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    rows, perf = run(args)
    lines = page(rows, perf, args)
    print("\n".join(lines))
    if args.out:
        write_page(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
