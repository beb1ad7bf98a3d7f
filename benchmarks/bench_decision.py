"""Microbenchmark of one scheduling decision: ``Scheduler.schedule(now_s)`` at queue depth
~1000, per mode (default, explicit, emergency) and hardware profile (t4, a100).

Each case builds the shipped scheduler (``Scheduler.from_profile``) for a profile of
``model_repository/emulated_explicit/profiles/``, fills its queue to ``--depth`` requests
(long-tailed lengths 16..512, SLA classes 50/100/200 ms: ``simulation.workload``) and
forces the mode through the real zone detector, with a sidecar utilisation sample fed before
each call (0.30: safe -> default batching; 0.66: pre-warmed -> explicit control; 1.00 with the
deep queue: danger -> emergency policy). Every decision's mode is checked.

The clock advances by ``--step-ms`` after each call (or to the wake-up time a waiting
decision asked for, if that is sooner); a dispatched batch is fed back at once with
``batch_started`` / ``batch_finished`` as a batch of its estimated length that just finished
(latency windows, cost refit, compensation all run as in service). After each call the queue
is refilled to ``--depth`` with requests that arrived in the elapsed interval, so it holds
old and new requests, and calls dispatch and reject infeasible requests (the profiles'
``infeasible_policy: reject``). A deep queue always holds a request whose batching window
has closed, so to time decisions that wait as well, every ``--fresh-every``-th call finds
a burst instead: the queue emptied and refilled with ``--depth`` requests that arrived in
the last 2 ms (explicit control then waits for the window). Only ``schedule`` is timed.

``--profile`` runs the same cases under pyinstrument and writes where the time of
``schedule`` goes (self time per function, summed over the calls). ``--out`` writes a
markdown report, ``--json`` the numbers.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections import Counter

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from simulation import workload as W
from scheduler_core.profile_files import load_profile, profile_path
from scheduler_core.request import QueuedRequest
from scheduler_core.scheduler import Scheduler

PROFILE_DIR = os.path.join(REPO_ROOT, "model_repository", "emulated_explicit", "profiles")
BENCH_DIR = os.path.join(REPO_ROOT, "results", "bench")
DEFAULT_OUT = os.path.join(BENCH_DIR, "decision_microbench.md")
# The pyinstrument text of the first run, on the implementation before the optimisation
# (kept as it was measured; this script never rewrites it).
BEFORE_PROFILE = os.path.join(BENCH_DIR, "decision_profile_before.txt")
BEFORE_JSON = os.path.join(BENCH_DIR, "decision_microbench_before.json")
TARGET_US = 200.0
MODES = ("default", "explicit", "emergency")
# Sidecar utilisation that puts the zone detector in each mode (with a deep queue).
MODE_UTILIZATION = {"default": 0.30, "explicit": 0.66, "emergency": 1.00}
LENGTHS = W.LogNormalLengths(median=64.0, sigma=0.8, lo=16, hi=512)
SLAS = W.SlaMix((50.0, 100.0, 200.0))
MACHINE_NOTE = ("2 shared CPU cores (a VM; other work runs beside it), so single calls are "
                "noisy: compare medians, and read p99 as an upper bound.")


class Workload:
    """An endless, seeded stream of (seq_len, sla_ms)."""

    def __init__(self, seed: int, block: int = 65536):
        self._rng = np.random.default_rng(seed)
        self._block = block
        self._lengths: list[int] = []
        self._slas: list[float] = []
        self._i = 0

    def next(self) -> tuple[int, float]:
        if self._i >= len(self._lengths):
            self._lengths = LENGTHS.draw(self._rng, self._block).tolist()
            self._slas = SLAS.draw(self._rng, self._block).tolist()
            self._i = 0
        i = self._i
        self._i += 1
        return self._lengths[i], self._slas[i]


class Case:
    """One scheduler with its queue held at ``depth``."""

    def __init__(self, profile_name: str, mode: str, depth: int, step_ms: float, seed: int,
                 fresh_every: int = 0):
        self.profile = load_profile(profile_path(PROFILE_DIR, profile_name))
        self.mode = mode
        self.depth = depth
        self.step_s = step_ms / 1000.0
        self.util = MODE_UTILIZATION[mode]
        self.sched = Scheduler.from_profile(self.profile)
        self.work = Workload(seed)
        self.next_id = 0
        self.now = 100.0  # any origin: the scheduler only sees differences
        self.fresh_every = fresh_every
        self.calls = 0
        self.reasons: Counter = Counter()
        self.modes: Counter = Counter()
        self.rejected = 0
        self.dispatched = 0
        # The initial queue arrived over the last 20 ms.
        self._refill(self.now - 0.020, self.now)

    def _refill(self, since: float, now: float) -> None:
        s = self.sched
        missing = self.depth - s.queue_depth
        for k in range(missing):
            arrival = since + (now - since) * (k + 1) / missing
            n, sla = self.work.next()
            s.submit(QueuedRequest(self.next_id, n, arrival, sla), arrival)
            self.next_id += 1

    def call(self, timer=time.perf_counter_ns) -> int:
        """One timed ``schedule`` call plus the untimed bookkeeping around it (ns)."""
        s, now = self.sched, self.now
        self.calls += 1
        if self.fresh_every and self.calls % self.fresh_every == 0:
            s.drain()  # a burst: only requests that arrived in the last 2 ms
            self._refill(now - 0.002, now)
        s.set_external_utilization(self.util, now, "bench")
        t0 = timer()
        d = s.schedule(now)
        elapsed = timer() - t0
        self.reasons[d.reason] += 1
        self.modes[d.mode] += 1
        self.rejected += len(d.rejected)
        if d.batch:
            # Fed back as a batch of the estimated length that finishes now (the clock
            # must not go back for the latency windows).
            self.dispatched += 1
            s.batch_started(d.batch, now)
            s.batch_finished(d.batch, now - d.estimated_ms / 1000.0, now)
        nxt = now + self.step_s
        if d.wake_at_s is not None and now < d.wake_at_s < nxt:
            nxt = d.wake_at_s
        self._refill(now, nxt)
        self.now = nxt
        return elapsed


def run_case(profile_name: str, mode: str, args, profiler=None) -> dict:
    case = Case(profile_name, mode, args.depth, args.step_ms, args.seed, args.fresh_every)
    for _ in range(args.warmup):
        case.call()
    case.reasons.clear()
    case.modes.clear()
    case.rejected = case.dispatched = 0
    gc.collect()
    if profiler is not None:
        profiler.start()
    times = [case.call() for _ in range(args.calls)]
    if profiler is not None:
        profiler.stop()
    us = sorted(t / 1000.0 for t in times)
    wrong = sum(v for m, v in case.modes.items() if m != mode)
    return {
        "profile": profile_name, "mode": mode, "calls": len(us), "depth": args.depth,
        "median_us": statistics.median(us), "p90_us": us[int(0.90 * (len(us) - 1))],
        "p99_us": us[int(0.99 * (len(us) - 1))], "min_us": us[0], "mean_us": statistics.fmean(us),
        "dispatch_share": case.dispatched / len(us),
        "rejected_per_call": case.rejected / len(us),
        "reasons": dict(sorted(case.reasons.items())), "wrong_mode_calls": wrong,
        "final_depth": case.sched.queue_depth,
    }


def run_all(args) -> list[dict]:
    rows = []
    for profile_name in args.profiles:
        for mode in args.modes:
            runs = [run_case(profile_name, mode, args) for _ in range(args.repeats)]
            # Several short runs, the one with the lowest median reported (the least
            # disturbed by the other work on the shared cores); all medians are kept.
            best = min(runs, key=lambda r: r["median_us"])
            best["run_medians_us"] = [round(r["median_us"], 1) for r in runs]
            rows.append(best)
            print(f"{profile_name:5s} {mode:9s} median {best['median_us']:7.1f} us  "
                  f"p90 {best['p90_us']:7.1f}  p99 {best['p99_us']:7.1f}  "
                  f"(run medians {best['run_medians_us']})  reasons {best['reasons']}  "
                  f"rejected/call {best['rejected_per_call']:.1f}", flush=True)
            if best["wrong_mode_calls"]:
                raise SystemExit(f"{profile_name}/{mode}: {best['wrong_mode_calls']} calls "
                                 "ran in another mode: the forcing no longer works")
    return rows


# -- pyinstrument -------------------------------------------------------------------------

def _schedule_frames(frame, found):
    if frame.function == "schedule" and (frame.file_path or "").endswith("scheduler.py"):
        found.append(frame)
        return
    for child in frame.children:
        _schedule_frames(child, found)


def _key(frame) -> tuple[str, str]:
    path = frame.file_path or "<built-in>"
    rel = os.path.relpath(path, REPO_ROOT) if path.startswith(REPO_ROOT) else os.path.basename(path)
    return frame.function, f"{rel}:{frame.line_no}" if frame.line_no else rel


def _self_times(frame, totals):
    if frame.is_synthetic:  # "[self]" leaves: already in their parent's total_self_time
        return
    key = _key(frame)
    totals[key] = totals.get(key, 0.0) + frame.total_self_time
    for child in frame.children:
        _self_times(child, totals)


def _inclusive(frame, totals, stack=()):
    if frame.is_synthetic:
        return
    key = _key(frame)
    if key not in stack:  # recursion: count a function once per stack
        totals[key] = totals.get(key, 0.0) + frame.time
    for child in frame.children:
        _inclusive(child, totals, stack + (key,))


def profile_text(args, top: int = 15) -> str:
    """pyinstrument over the same cases: where ``schedule``'s time goes."""
    from pyinstrument import Profiler

    sections = []
    short = argparse.Namespace(**{**vars(args), "calls": max(1, args.calls // 2)})
    for profile_name in args.profiles:
        for mode in args.modes:
            profiler = Profiler(interval=0.0002)
            row = run_case(profile_name, mode, short, profiler=profiler)
            root = profiler.last_session.root_frame()
            found: list = []
            if root is not None:
                _schedule_frames(root, found)
            total = sum(f.time for f in found)
            self_t: dict = {}
            incl: dict = {}
            for f in found:
                _self_times(f, self_t)
                _inclusive(f, incl)
            lines = [f"{profile_name} / {mode}: {row['calls']} calls, "
                     f"{total * 1000:.0f} ms sampled in schedule() "
                     f"(median {row['median_us']:.0f} us/call under the profiler)",
                     "  inclusive time, share of schedule():"]
            for (fn, where), t in sorted(incl.items(), key=lambda kv: -kv[1])[:top]:
                lines.append(f"    {100 * t / total:5.1f}%  {fn}  ({where})")
            lines.append("  self time, share of schedule():")
            for (fn, where), t in sorted(self_t.items(), key=lambda kv: -kv[1])[:top]:
                lines.append(f"    {100 * t / total:5.1f}%  {fn}  ({where})")
            sections.append("\n".join(lines))
    return "\n\n".join(sections) + "\n"


# -- report -------------------------------------------------------------------------------

def _table(rows: list[dict], before: dict | None) -> list[str]:
    head = ["profile", "mode", "median us", "p90 us", "p99 us", "min us"]
    if before:
        head += ["before: median / p90 us"]
    head += [f"median <= {TARGET_US:.0f} us", f"p90 <= {TARGET_US:.0f} us", "dispatching calls",
             "rejected / call", "decisions"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["profile"], r["mode"], f"{r['median_us']:.0f}", f"{r['p90_us']:.0f}",
                 f"{r['p99_us']:.0f}", f"{r['min_us']:.0f}"]
        if before:
            b = before.get((r["profile"], r["mode"]))
            cells.append(f"{b['median_us']:.0f} / {b['p90_us']:.0f}" if b else "-")
        cells += ["PASS" if r["median_us"] <= TARGET_US else "MISS",
                  "PASS" if r["p90_us"] <= TARGET_US else "MISS",
                  f"{r['dispatch_share']:.0%}", f"{r['rejected_per_call']:.1f}",
                  ", ".join(f"{k} {v}" for k, v in r["reasons"].items())]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def write_markdown(path: str, command: str, rows: list[dict], args, after_profile: str | None):
    before_rows, before_doc = None, None
    text = _read(BEFORE_JSON)
    if text:
        before_doc = json.loads(text)
        before_rows = {(r["profile"], r["mode"]): r for r in before_doc["results"]}
    lines = ["# Scheduling decision microbenchmark", "",
             f"Command: `{command}`", "",
             f"Machine: {MACHINE_NOTE} ({platform.python_implementation()} "
             f"{platform.python_version()}, {os.cpu_count()} CPUs visible).", "",
             f"`Scheduler.schedule(now_s)` at queue depth ~{args.depth} (refilled after every "
             f"call), {args.calls} timed calls after {args.warmup} warm-up calls per case, best of "
             f"{args.repeats} runs (by median). Target: {TARGET_US:.0f} us per call. How the "
             "queue and the clock move: the docstring of `scripts/bench_decision.py`.", ""]
    lines += _table(rows, before_rows)
    lines.append("")
    if before_doc:
        note = before_doc.get("note", "the implementation before the optimisation")
        lines += [f"`before`: {note} (`{os.path.relpath(BEFORE_JSON, REPO_ROOT)}`).", ""]
    lines += ["p99: `schedule` also runs the perception layer (every 200 ms of the bench clock, "
              "so 1 call in 200 here) and the decision layer (every 100 ms, 1 call in 100); "
              "those calls cost about a millisecond more, almost all of it in the latency "
              "windows of `scheduler_core/perception.py` (P99, coefficient of variation and "
              "compensation check over up to 4096 samples), not in forming the batch.", ""]
    if before_rows:
        same = all(b["reasons"] == r["reasons"] and b["rejected_per_call"] == r["rejected_per_call"]
                   for r in rows for b in [before_rows.get((r["profile"], r["mode"]))] if b)
        lines += ["The decisions of the two runs (reasons and rejections per case) are "
                  + ("identical." if same else "NOT identical: check the equivalence test."), ""]
    before_profile = _read(BEFORE_PROFILE)
    if before_profile:
        lines += ["## Where the time went BEFORE the optimisation (pyinstrument)", "",
                  "Measured on the original implementation by the first run of this script "
                  "(its first version, without the bursts of fresh arrivals; "
                  f"`{os.path.relpath(BEFORE_PROFILE, REPO_ROOT)}`), kept as it was:", "",
                  "```", before_profile.rstrip(), "```", ""]
    if after_profile:
        lines += ["## Where the time goes now (pyinstrument, this run)", "",
                  "```", after_profile.rstrip(), "```", ""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", nargs="+", default=["t4", "a100"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per run")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="runs per case (best median kept)")
    parser.add_argument("--step-ms", type=float, default=1.0,
                        help="clock advance after each call (ms)")
    parser.add_argument("--fresh-every", type=int, default=20,
                        help="every N-th call finds a freshly arrived queue (0: never)")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--profile", action="store_true",
                        help="also run under pyinstrument and report where the time goes")
    parser.add_argument("--profile-out", default=None,
                        help="write the pyinstrument text here too (e.g. the 'before' file)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="markdown report ('' for none)")
    parser.add_argument("--json", default=None, help="write the numbers as JSON here")
    args = parser.parse_args(argv)

    command = "python " + " ".join(shlex.quote(a) for a in
                                   [os.path.relpath(os.path.abspath(__file__), REPO_ROOT)]
                                   + (sys.argv[1:] if argv is None else list(argv)))
    started = time.perf_counter()
    rows = run_all(args)
    prof = None
    if args.profile:
        prof = profile_text(args)
        print(prof)
        if args.profile_out:
            os.makedirs(os.path.dirname(os.path.abspath(args.profile_out)), exist_ok=True)
            with open(args.profile_out, "w", encoding="utf-8") as fh:
                fh.write(prof)
    if args.out:
        write_markdown(args.out, command, rows, args, prof)
        print(f"wrote {args.out}")
    if args.json:
        doc = {"command": command, "machine": MACHINE_NOTE, "target_us": TARGET_US,
               "depth": args.depth, "calls": args.calls, "repeats": args.repeats,
               "results": [{**r, "pass": r["median_us"] <= TARGET_US} for r in rows]}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        print(f"wrote {args.json}")
    print(f"took {time.perf_counter() - started:.1f} s")
    return 0 if all(r["median_us"] <= TARGET_US for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
