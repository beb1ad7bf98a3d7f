"""An experiment's script, kept with its page (not a tool): the stub's CPU per answered
request, live, split into its main thread inside ``execute()``, its main thread outside
it (python_backend's own C++ loop: reading requests, sending responses) and its other
threads. One server, the shipped plugin (``x_new``; ``control.infeasible_policy`` from
POLICY, default ``serve_late`` as ``make bench``'s closed loops run it) and native, both
with ``execute()`` wrapped to sum its own thread CPU (``time.thread_time``), on one
EMULATED device (``benchmarks.hold_speed.DEVICES``); perf_analyzer, the bench mix, the
closed loop at concurrency 64 (RATE unset) or Poisson at RATE req/s; the models
rotated round by round; each round's line ends with perf_analyzer's P50 and P99.
VARIANT=KEY=VALUE adds the plugin with that parameter too
(``x_variant``; with NO_FLUSH=1 its control metrics are never published); BASE=PATH
adds the plugin as the checkout at PATH has it (``x_base``: its stub imports from PATH
first). FREEZE=1 makes ``x_variant`` call ``gc.freeze()`` at the end of ``initialize``;
NOSLA=1 feeds ``x_variant`` the mix without ``SLA_MS`` (either adds ``x_variant`` where
VARIANT does not). Each round's line also gives the stub's garbage collections
(``gc.callbacks``: time a request, collections per generation). From the repository root:

    [RATE=1840] [POLICY=reject] [VARIANT=K=V] [NO_FLUSH=1] [FREEZE=1] [NOSLA=1] \
        [BASE=PATH] .venv/bin/python results/stub_cpu_split/live_split.py DEVICE MS ROUNDS
"""
import os
import sys
import tempfile

sys.path.insert(0, os.getcwd())
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data  # noqa: E402
from benchmarks.hold_speed import (NATIVE, add_checkout, add_variant, build_repo,  # noqa: E402
                                   measure)
from benchmarks.procinfo import find_stub, thread_cpu_s  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

# Appended to each model.py: execute()'s own thread CPU and the stub's garbage collections,
# summed, written every 50 calls.
WRAPPER = '''
FREEZE = {freeze}
import time as _time
_Model = TritonPythonModel
class TritonPythonModel(_Model):
    def initialize(self, args):
        import gc as _gc
        # calls, requests, execute()'s thread CPU (s), collections' time (s), collections
        # of generation 0, 1, 2, objects collected
        self._spent = [0, 0, 0.0, 0.0, 0, 0, 0, 0]
        _t = [0.0]
        def _cb(phase, info, _t=_t, spent=self._spent):
            if phase == "start":
                _t[0] = _time.perf_counter()
            else:
                spent[3] += _time.perf_counter() - _t[0]
                spent[4 + info["generation"]] += 1
                spent[7] += info["collected"]
        _gc.callbacks.append(_cb)
        self._spent_path = {folder!r} + "/" + args["model_name"] + ".txt"
        return _Model.initialize(self, args)
    def execute(self, requests):
        start = _time.thread_time()
        try:
            return _Model.execute(self, requests)
        finally:
            spent = self._spent
            spent[0] += 1; spent[1] += len(requests); spent[2] += _time.thread_time() - start
            if spent[0] % 50 == 0:
                with open(self._spent_path, "w") as fh:
                    fh.write(" ".join(map(str, spent)))
'''
PLUGIN, VARIANT, BASE = "x_new", "x_variant", "x_base"
device, ms, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rate = float(os.environ.get("RATE", "0"))


def spent(folder: str, model: str) -> list[float]:
    try:
        with open(os.path.join(folder, model + ".txt")) as fh:
            return [float(v) for v in fh.read().split()]
    except OSError:
        return [0.0] * 8


with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    build_repo(repo, [], device=device)
    policy = {"control.infeasible_policy": os.environ.get("POLICY", "serve_late")}
    add_variant(repo, policy, device, name=PLUGIN)
    models = [PLUGIN, NATIVE]
    if any(os.environ.get(k) for k in ("VARIANT", "FREEZE", "NOSLA")):
        key, _, value = os.environ.get("VARIANT", "").partition("=")
        add_variant(repo, {**policy, key: value} if key else policy, device, name=VARIANT)
        models.insert(1, VARIANT)
    if os.environ.get("BASE"):  # the plugin as another checkout has it, in its own stub
        add_checkout(repo, os.environ["BASE"], BASE, policy, device)
        models.insert(1, BASE)
    for model in models:
        with open(os.path.join(repo, model, "1", "model.py"), "a") as fh:
            fh.write(WRAPPER.format(folder=tmp,
                                    freeze=model == VARIANT and bool(os.environ.get("FREEZE"))))
            if model == VARIANT and os.environ.get("NO_FLUSH"):  # the metrics never sent
                fh.write("\nimport triton_backend.control_metrics as _cm\n"
                         "_cm.ControlMetrics.flush = lambda self, *a, **k: None\n")
    sla = write_input_data(os.path.join(tmp, "sla.json"), mix_entries(SLA_CLASSES_MS, 2000))
    data = {PLUGIN: sla, VARIANT: sla, BASE: sla,
            NATIVE: write_input_data(os.path.join(tmp, "mix.json"), mix_entries(None, 2000))}
    if os.environ.get("NOSLA"):
        data[VARIANT] = data[NATIVE]
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for model in models:  # warm-up
            measure(server, model, data[model], 200, 0.0, 1500)
        for r in range(rounds):
            for model in models[r % len(models):] + models[:r % len(models)]:
                stub = find_stub(server.process.pid, model)
                before, inside_before = thread_cpu_s(stub), spent(tmp, model)
                row = measure(server, model, data[model], rate, None, ms,
                              concurrency=0 if rate else 64)
                if row.throughput is None:  # perf_analyzer stopped (a refusal, under reject)
                    print(f"round {r + 1} {model}: failed: {row.error}", flush=True)
                    continue
                after, inside_after = thread_cpu_s(stub), spent(tmp, model)
                n = row.answered or 1
                main = (after[str(stub)] - before[str(stub)]) * 1e6 / n
                others = sum(v - before.get(t, 0.0) for t, v in after.items()
                             if t != str(stub)) * 1e6 / n
                calls, requests, cpu, gcs, g0, g1, g2, coll = (
                    a - b for a, b in zip(inside_after, inside_before))
                inside = cpu * 1e6 / max(requests, 1)
                print(f"round {r + 1} {model}: {row.throughput:.0f} req/s, "
                      f"{row.per_call or 0:.1f} requests a call; CPU us a request: main "
                      f"thread {main:.1f} (inside execute() {inside:.1f}, outside "
                      f"{main - inside:.1f}), other threads {others:.1f}; execute() CPU "
                      f"{cpu * 1e3 / max(calls, 1):.2f} ms a call; P50 {row.p50_ms:.1f} ms, "
                      f"P99 {row.p99_ms:.1f} ms; GC {gcs * 1e6 / max(requests, 1):.1f} us/req "
                      f"(gen0 {g0:.0f}, gen1 {g1:.0f}, gen2 {g2:.0f}, collected {coll:.0f})",
                      flush=True)
