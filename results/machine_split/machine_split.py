"""An experiment's script, kept with its page (not a tool): the whole machine's CPU per
answered request at the host-bound closed loop, split by process: tritonserver (its front
ends, its batcher, its Python backend's side of the shared memory), each model's stub,
perf_analyzer, and idle. One server on one EMULATED device
(``benchmarks.hold_speed.DEVICES``): the shipped plugin (``x_new``, ``serve_late`` as
``make bench``'s closed loops run it), native (Triton's batching delay DELAY_US, default
0), XDELAYS_US copies of the plugin with those delays on its hand-over, and PAD_US copies
of native whose ``execute()`` spins that many us of CPU a call first. perf_analyzer at
concurrency 64, the bench mix; the models rotated round by round. A sampler thread reads
every process's ``/proc/<pid>/stat`` and ``/proc/stat`` every 0.2 s; each row's figures
are the steady part of perf_analyzer's run (its first second and last half second left
out), per request at Triton's own count of the model's answers over that part (read
every 0.2 s too), so a run where perf_analyzer finds no stable measurement still counts.
From the repository root:

    [DELAY_US=1000] [XDELAYS_US=500,1000] [PAD_US=75,150] \
        .venv/bin/python results/machine_split/machine_split.py DEVICE MS ROUNDS
"""
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.getcwd())
from benchmarks.hold_speed import (NATIVE, add_variant, find_stub, measure,  # noqa: E402
                                   triton_stats)
from benchmarks.live_probe import wrapped_beside_native  # noqa: E402
from benchmarks.repository import copy_model, edit_model  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
PERIOD_S = 0.2
TRIM_S = (1.0, 0.5)  # left out after perf_analyzer starts, before it exits
PLUGIN = "x_new"
# Appended to a copy of native's model.py (PAD_US): each execute() spins its own thread's
# CPU for that long first, as a fixed per-call cost.
PAD = '''
import time as _time
_Model = TritonPythonModel
class TritonPythonModel(_Model):
    def execute(self, requests):
        end = _time.thread_time() + {seconds!r}
        while _time.thread_time() < end:
            pass
        return _Model.execute(self, requests)
'''
device, ms, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def read_all() -> dict[int, tuple[str, int]]:
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rpartition(")")[2].split()
        out[int(name)] = (comm, int(fields[11]) + int(fields[12]))
    return out


def machine_ticks() -> tuple[int, int]:
    with open("/proc/stat") as fh:
        vals = [int(v) for v in fh.readline().split()[1:]]
    return sum(vals), vals[3] + vals[4]  # all, idle + iowait


class Sampler(threading.Thread):
    """Every process's CPU ticks and the machine's idle ticks, every ``PERIOD_S``: a list
    of (time, {pid: (comm, ticks)}, (all ticks, idle ticks))."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server = server
        self.model: str | None = None  # the model under load: its Triton statistics too
        self.samples: list = []
        self.go = True

    def run(self):
        while self.go:
            model = self.model
            stats = triton_stats(self.server, model) if model else (0, 0, 0.0)
            self.samples.append((time.monotonic(), read_all(), machine_ticks(), stats))
            time.sleep(PERIOD_S)


def group(pid: int, comm: str, stubs: dict[int, str], server_pid: int) -> str:
    if pid in stubs:
        return "stub " + stubs[pid]
    if pid == server_pid:
        return "tritonserver"
    if comm.startswith("perf_analyzer"):
        return "perf_analyzer"
    if pid == os.getpid():
        return "this script"
    return "other"


def steady(samples: list, stubs: dict[int, str], server_pid: int) -> str:
    """Triton's rate and calls, CPU us per request by process group, and idle, over the
    samples while perf_analyzer ran (``TRIM_S`` trimmed off each end)."""
    pa = [t for t, procs, _, _ in samples
          if any(c.startswith("perf_analyzer") for c, _ in procs.values())]
    if len(pa) < 2:
        return "no steady samples"
    lo, hi = pa[0] + TRIM_S[0], pa[-1] - TRIM_S[1]
    kept = [s for s in samples if lo <= s[0] <= hi]
    if len(kept) < 2:
        return "no steady samples"
    (t0, before, (all0, idle0), (n0, c0, _)), (t1, after, (all1, idle1), (n1, c1, _)) = (
        kept[0], kept[-1])
    rate = (n1 - n0) / (t1 - t0)
    if not rate:
        return "nothing answered"
    parts: dict[str, float] = {}
    for pid, (comm, ticks) in after.items():
        if pid in before:
            spent = ticks - before[pid][1]
            if spent:
                key = group(pid, comm, stubs, server_pid)
                parts[key] = parts.get(key, 0.0) + spent / TICK / (t1 - t0)
    cores = (all1 - all0) / TICK / (t1 - t0)
    idle = (idle1 - idle0) / TICK / (t1 - t0)
    shown = ", ".join(f"{k} {v * 1e6 / rate:.1f}" for k, v in sorted(parts.items())
                      if v * 1e6 / rate >= 0.5)
    return (f"steady {t1 - t0:.1f} s: {rate:.0f} req/s, {(n1 - n0) / max(c1 - c0, 1):.1f}/call;"
            f" CPU us a request: {shown}; idle {idle * 1e6 / rate:.1f}"
            f" ({100 * idle / cores:.1f} % of {cores:.2f} cores)")


def with_delay(delay_us: int):
    """A config edit: Triton's batching delay at ``delay_us``."""
    def edit(model) -> None:
        model.dynamic_batching.max_queue_delay_microseconds = delay_us
    return edit


with tempfile.TemporaryDirectory() as tmp:
    repo, models, data = wrapped_beside_native(tmp, device, "", model=PLUGIN)
    delays = {NATIVE: os.environ.get("DELAY_US")}
    for delay in [v for v in os.environ.get("XDELAYS_US", "").split(",") if v]:
        name = f"x_delay{delay}"  # the plugin with Triton's batching delay on its hand-over
        add_variant(repo, {"control.infeasible_policy": "serve_late"}, device, name=name)
        models.append(name)
        data[name], delays[name] = data[PLUGIN], delay
    for model, delay in delays.items():
        if delay:
            edit_model(os.path.join(repo, model), edit=with_delay(int(delay)))
    for pad in [int(v) for v in os.environ.get("PAD_US", "").split(",") if v]:
        name = f"native_pad{pad}"  # native, its execute() made PAD us of CPU dearer a call
        folder = copy_model(NATIVE, repo, name, source=repo)
        with open(os.path.join(folder, "1", "model.py"), "a") as fh:
            fh.write(PAD.format(seconds=pad / 1e6))
        models.append(name)
        data[name] = data[NATIVE]
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        sampler = Sampler(server)
        sampler.start()
        for model in models:
            measure(server, model, data[model], 200, 0.0, 1500)
        stubs = {find_stub(server.process.pid, m): m for m in models}
        for r in range(rounds):
            for model in models[r % len(models):] + models[:r % len(models)]:
                sampler.model, first = model, len(sampler.samples)
                row = measure(server, model, data[model], 0.0, None, ms, concurrency=64)
                sampler.model = None
                pa = (f"perf_analyzer {row.throughput:.0f} req/s, P50 {row.p50_ms:.1f} ms"
                      if row.throughput else "perf_analyzer found no stable measurement")
                print(f"round {r + 1} {model}: {pa}; "
                      + steady(sampler.samples[first:], stubs, server.process.pid), flush=True)
        sampler.go = False
