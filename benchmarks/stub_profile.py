"""Where each stub's time goes, function by function: py-spy attached to the shipped
plugin's stub and to native's, each under the same perf_analyzer load in one server
(``scripts/hold_speed.py``'s repository: the benchmark's long-tailed mix, Poisson, the SLA
classes for explicit).

    .venv/bin/python scripts/stub_profile.py [--profile flat|h200_minilm|host_bound]
        [--rate 1200 | --concurrency 64] [--seconds 12] [--out PAGE] [--raw-dir DIR]
        [--lines] [--native]

py-spy samples the stub's threads (``record --nonblocking --threads --function``, 400 Hz,
raw stacks) from before perf_analyzer starts until it ends (it repeats its ``--seconds``
window until the figures are stable), so the samples cover the requests counted. A
sample's thread is named as py-spy names it. Per model the page gives each thread's
samples and the stub's CPU (schedstat, every thread) over the run, then the ``execute()``
thread's functions by inclusive samples, as sampled microseconds per request Triton
answered: the two models, which answer the same load, compare row by row. Samples of the
``execute()`` thread with no Python frame are python_backend's own C++ loop (receiving the
requests from shared memory, sending the responses). py-spy leaves out a thread it sees
idle, but it still samples ``time.sleep``: the EMULATED device's sleep shows as
``EmulatedDevice.run``'s own samples, so sampled time is not CPU time. cProfile
(``EXPLICIT_BATCHING_CPROFILE_DIR``) inflates each stage about 3x; a sampler does not.
``--raw-dir`` keeps py-spy's stacks of every thread; ``--native`` samples C/C++ frames too,
which py-spy does only by pausing the stub at each sample: that slows it, read the shares,
not the rates. ``--lines`` names each frame by the line it was on, not its function (the
page's rows then are lines).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.hold_speed import DEVICES, measure, shipped_beside_native
from benchmarks.pages import write_page
from benchmarks.procinfo import find_stub

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "results", "stub_profile.md")
SAMPLE_HZ = 400
US_PER_SAMPLE = 1e6 / SAMPLE_HZ
NO_PYTHON = "(no Python frame: python_backend's C++ loop)"
_LOCATION = re.compile(r"\s*\((?:[^()]*/)?([^/()]+:\d+)\)$")


def frame_name(frame: str) -> str:
    """``func (/path/to/file.py:12)`` as ``func (file.py:12)``."""
    return _LOCATION.sub(r" (\1)", frame)


def parse_raw(lines) -> dict[str, dict]:
    """py-spy's raw output (``thread;frame;...;frame count`` per line, ``--threads``) as
    {thread: {"samples": n, "self": Counter, "inclusive": Counter}}; a sample with no
    Python frame counts under ``NO_PYTHON``."""
    out: dict[str, dict] = {}
    for line in lines:
        line = line.rstrip()
        if not line or " " not in line:
            continue
        stack, count = line.rsplit(" ", 1)
        if not count.isdigit():
            continue
        n = int(count)
        thread, *frames = stack.split(";")
        t = out.setdefault(thread, {"samples": 0, "self": collections.Counter(),
                                    "inclusive": collections.Counter()})
        t["samples"] += n
        names = [frame_name(f) for f in frames] or [NO_PYTHON]
        t["self"][names[-1]] += n
        for name in set(names):
            t["inclusive"][name] += n
    return out


def main_thread(threads: dict[str, dict]) -> str | None:
    """The thread that runs ``execute()``: py-spy names it MainThread; else the busiest."""
    for name in threads:
        if "MainThread" in name:
            return name
    return max(threads, key=lambda k: threads[k]["samples"]) if threads else None


def run(profile: str, rate: float, concurrency: int, seconds: int, py_spy: str,
        tmp: str, raw_dir: str | None = None, native: bool = False,
        lines: bool = False) -> list[dict]:
    out = []
    with shipped_beside_native(tmp, profile) as (server, models, data):
        pids = {m: find_stub(server.process.pid, m) for m in models}
        for m in models:
            raw = os.path.join(tmp, f"{m}.raw")
            spy = subprocess.Popen(
                [py_spy, "record", "--pid", str(pids[m]), "--rate", str(SAMPLE_HZ),
                 "--format", "raw", *([] if lines else ["--function"]), "--threads",
                 "-o", raw,
                 # py-spy reads native stacks only with the process paused at each sample
                 *(["--native"] if native else ["--nonblocking"])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # py-spy attached
            row = measure(server, m, data[m], rate, None, seconds * 1000,
                          concurrency=concurrency)
            # perf_analyzer repeats its window until stable: the samples end with it, so
            # they cover the requests counted (py-spy writes its file on SIGINT)
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
            if raw_dir:  # every thread's stacks, for a look beyond the page's table
                os.makedirs(raw_dir, exist_ok=True)
                shutil.copy(raw, raw_dir)
            with open(raw, encoding="utf-8", errors="replace") as fh:
                out.append({"model": m, "row": row, "threads": parse_raw(fh)})
            print(m, row.throughput, row.p50_ms, row.error[:80], flush=True)
    return out


def page(runs: list[dict], args, top: int = 40) -> list[str]:
    load = (f"closed loop, concurrency {args.concurrency}" if args.concurrency
            else f"open loop, {args.rate:g} req/s")
    lines = [f"# Where each stub's time goes (py-spy; EMULATED {args.profile}, {load})", "",
             f"Generated by `.venv/bin/python scripts/stub_profile.py --profile {args.profile} "
             + (f"--concurrency {args.concurrency}" if args.concurrency
                else f"--rate {args.rate:g}")
             + f" --seconds {args.seconds}` on this machine (2 shared cores: tritonserver, both "
             "stubs, perf_analyzer and py-spy share them; the EMULATED device sleeps each "
             f"batch's modelled cost, it is not a GPU). py-spy at {SAMPLE_HZ} Hz, one model "
             "at a time under the same load, sampling while perf_analyzer runs; figures are "
             "sampled microseconds per request Triton answered (samples / rate / requests; "
             "the device's sleep is sampled too, so they are not CPU): compare the models "
             "row by row. The explicit model is the shipped default (intake hold).", ""]
    for r in runs:
        row = r["row"]
        lines.append(f"- `{r['model']}`: {row.throughput or 0:.0f} req/s answered, P50 "
                     f"{row.p50_ms or 0:.1f} ms, stub CPU {row.stub_us or 0:.0f} us/request, "
                     f"{row.per_call or 0:.1f} requests per call {row.error[:100]}")
    lines += ["", "Threads (sampled us per request; the stub's CPU, schedstat, in us per "
              "request):", "", "| model | thread | sampled | CPU |", "|---|---|---:|---:|"]
    for r in runs:
        k = US_PER_SAMPLE / max(1, r["row"].answered)
        cpu = f"{r['row'].stub_us or 0:.0f} (all threads)"
        for i, (name, t) in enumerate(sorted(r["threads"].items(),
                                             key=lambda kv: -kv[1]["samples"])):
            lines.append(f"| {r['model']} | {name} | {t['samples'] * k:.1f} | "
                         f"{'' if i else cpu} |")
    names: dict[str, dict[str, float]] = {}
    for r in runs:
        t = r["threads"].get(main_thread(r["threads"]) or "", {"inclusive": {}})
        k = US_PER_SAMPLE / max(1, r["row"].answered)
        for name, n in t["inclusive"].items():
            names.setdefault(name, {})[r["model"]] = n * k
    models = [r["model"] for r in runs]
    lines += ["", "The `execute()` thread, functions by inclusive sampled us per request "
              f"(the top {top} of either model):", "",
              "| function | " + " | ".join(models) + " |",
              "|---|" + "---:|" * len(models)]
    ranked = sorted(names.items(), key=lambda kv: -max(kv[1].values()))[:top]
    for name, per in ranked:
        lines.append(f"| {name.replace('|', '/')} | "
                     + " | ".join(f"{per.get(m, 0.0):.1f}" for m in models) + " |")
    return lines + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(DEVICES), default="flat")
    parser.add_argument("--rate", type=float, default=1200.0)
    parser.add_argument("--concurrency", type=int, default=0,
                        help="closed loop with this many in flight (instead of --rate)")
    parser.add_argument("--seconds", type=int, default=12)
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--native", action="store_true",
                        help="sample C/C++ frames too (py-spy --native)")
    parser.add_argument("--raw-dir", help="keep py-spy's raw stacks (one file per model) here")
    parser.add_argument("--lines", action="store_true",
                        help="frames by the line each was on, not by function (for --raw-dir)")
    args = parser.parse_args()
    if not args.py_spy:
        parser.error("py-spy is needed (pip install py-spy, or --py-spy PATH)")
    with tempfile.TemporaryDirectory(prefix="stub-profile-") as tmp:
        runs = run(args.profile, args.rate, args.concurrency, args.seconds, args.py_spy, tmp,
                   args.raw_dir, args.native, args.lines)
    write_page(args.out, "\n".join(page(runs, args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
