"""An experiment's script, kept with its page (not a tool): where the wall time of each
live ``execute()`` call goes, for the shipped plugin (``x_new``, ``serve_late`` as
``make bench``'s closed loops run it) and native in one server on one EMULATED device:
the call's thread CPU, its time runnable but waiting for a core (``run_delay`` of
``/proc/thread-self/schedstat``), the emulated device's sleeps, and the rest: blocked
(a lock, the GIL, a message to the server). Every call is timed; schedstat is read
every 4th call. perf_analyzer, the bench mix, closed loop at concurrency 64 (RATE 0) or
Poisson at RATE req/s, ROUNDS rounds of MS, alternated. From the repository root:

    .venv/bin/python results/machine_split/blocked.py DEVICE MS ROUNDS RATE
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.getcwd())
from benchmarks.hold_speed import measure  # noqa: E402
from benchmarks.live_probe import wrapped_beside_native  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

# Appended to each model.py. Sums over the sampled calls (every 4th): calls, requests,
# wall, thread CPU, run delay, device sleep (ns); written every 100 sampled calls.
WRAP = r'''
import time as _t, json as _j
import triton_backend.executors as _ex
_SLEPT = [0]
_result = _ex.EmulatedFlight.result
def _timed_result(self):
    s = _t.perf_counter_ns()
    try:
        return _result(self)
    finally:
        _SLEPT[0] += _t.perf_counter_ns() - s
_ex.EmulatedFlight.result = _timed_result
def _delay():
    with open("/proc/thread-self/schedstat") as fh:
        return int(fh.read().split()[1])
_Model = TritonPythonModel
class TritonPythonModel(_Model):
    def initialize(self, args):
        self._path = FOLDER + "/" + args["model_name"] + ".blocked.json"
        self._n = [0, 0, 0, 0, 0, 0, 0]
        return _Model.initialize(self, args)
    def execute(self, requests):
        n = self._n
        n[6] += 1
        if n[6] % 4:
            return _Model.execute(self, requests)
        d0, c0, sl0, w0 = _delay(), _t.thread_time_ns(), _SLEPT[0], _t.perf_counter_ns()
        try:
            return _Model.execute(self, requests)
        finally:
            w1, c1, sl1, d1 = _t.perf_counter_ns(), _t.thread_time_ns(), _SLEPT[0], _delay()
            n[0] += 1; n[1] += len(requests); n[2] += w1 - w0; n[3] += c1 - c0
            n[4] += d1 - d0; n[5] += sl1 - sl0
            if n[0] % 100 == 0:
                with open(self._path, "w") as fh:
                    _j.dump(n[:6], fh)
'''
device, ms, rounds, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])


def read(folder: str, model: str) -> list[int]:
    try:
        with open(os.path.join(folder, model + ".blocked.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return [0] * 6


with tempfile.TemporaryDirectory() as tmp:
    repo, models, data = wrapped_beside_native(tmp, device, WRAP)
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for m in models:
            measure(server, m, data[m], 300, 0.0, 1500)
        for r in range(rounds):
            for m in (models if r % 2 == 0 else models[::-1]):
                before = read(tmp, m)
                row = measure(server, m, data[m], rate, None, ms,
                              concurrency=64 if rate == 0 else 0)
                calls, req, wall, cpu, delay, slept = (
                    a - b for a, b in zip(read(tmp, m), before))
                if not calls or row.throughput is None:
                    print(f"round {r + 1} {m}: failed: {row.error}", flush=True)
                    continue
                blocked = wall - cpu - delay - slept
                per = {k: v / calls / 1000 for k, v in (
                    ("wall", wall), ("cpu", cpu), ("run delay", delay),
                    ("device sleep", slept), ("blocked", blocked))}
                print(f"round {r + 1} {m}: {row.throughput:.0f} req/s, {req / calls:.1f}/call;"
                      " us a call: " + ", ".join(f"{k} {v:.1f}" for k, v in per.items()),
                      flush=True)
