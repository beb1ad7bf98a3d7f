"""An experiment's script, kept with its page (not a tool): where each live stub's
``execute()`` thread CPU goes, by function. The shipped plugin (``x_new``, as
``live_split.py`` runs it, ``serve_late``) and native in one server on one EMULATED device;
each model.py wraps a list of the plugin's and native's functions to sum their own thread
CPU (``time.thread_time_ns``, inclusive: a function's figure holds what it calls; the
wrappers add their own cost, about 0.5 us a wrapped call). perf_analyzer, the bench mix,
Poisson at RATE req/s (0: the closed loop at concurrency 64), ROUNDS rounds of MS,
alternated. From the repository root:

    .venv/bin/python results/stub_cpu_split/live_phases.py DEVICE MS ROUNDS RATE
"""
import os
import sys

sys.path.insert(0, os.getcwd())
from benchmarks.live_probe import alternated_sums  # noqa: E402

# Appended to each model.py: the functions of _SPECS wrapped to sum their own thread CPU,
# and execute()'s, written every 100 calls.
WRAP = r'''
import time as _t, json as _j, importlib as _il
_ACC = {}
def _wrap(owner, attr, label):
    f = getattr(owner, attr)
    def w(*a, **k):
        s = _t.thread_time_ns()
        try:
            return f(*a, **k)
        finally:
            x = _ACC.get(label)
            if x is None:
                x = _ACC[label] = [0, 0]
            x[0] += _t.thread_time_ns() - s; x[1] += 1
    setattr(owner, attr, w)
_SPECS = [
 ("triton_backend.hold_driver", "HoldDriver", "execute"),
 ("triton_backend.hold_driver", None, "read_launchable"),
 ("triton_backend.hold_driver", None, "decode_call"),
 ("triton_backend.hold_driver", "HoldDriver", "_end_at_once"),
 ("triton_backend.hold_driver", "HoldDriver", "_run"),
 ("triton_backend.launch_first", "LaunchFirst", "launch_first"),
 ("triton_backend.launch_first", "LaunchFirst", "run_launched"),
 ("triton_backend.launch_first", "LaunchFirst", "_answer_launched"),
 ("triton_backend.launch_first", "LaunchFirst", "_batch_over"),
 ("triton_backend.runner", "Runner", "take_planned"),
 ("triton_backend.runner", "Runner", "submit"),
 ("triton_backend.runner", "Runner", "flush_metrics_if_due"),
 ("triton_backend.deferred", "Deferred", "run_all"),
 ("triton_backend.answers", "CallList", "returned"),
 ("triton_backend.answers", "CallList", "__init__"),
 ("triton_backend.answers", "Ticket", "__init__"),
 ("triton_backend.launch_first", None, "embedding_responses"),
 ("triton_backend.timeline", "Timeline", "end"),
 ("triton_backend.timeline", "Timeline", "begin"),
 ("triton_backend.stats_log", "StatsLog", "maybe_stats"),
 ("triton_backend.intake", "HoldIntake", "admission_arrival"),
 ("triton_backend.intake", "HoldIntake", "call_returned"),
 ("triton_backend.executors", "EmulatedDevice", "launch"),
 ("triton_backend.executors", "EmulatedFlight", "result"),
 ("triton_backend.inner_model", "InnerModel", "execute"),
 ("triton_backend.inner_model", None, "decode_padded_batch"),
 ("triton_backend.inner_model", None, "input_array"),
 ("triton_backend.control_metrics", "ControlMetrics", "on_served"),
 ("triton_backend.control_metrics", "ControlMetrics", "on_batch"),
 ("triton_backend.control_metrics", "ControlMetrics", "flush"),
 ("scheduler_core.engine", "Engine", "observed"),
 ("scheduler_core.engine", "Engine", "took_launched"),
 ("scheduler_core.engine", "Engine", "ended"),
 ("triton_backend.runner", "Runner", "step"),
 ("triton_backend.runner", "Runner", "_decide"),
 ("triton_backend.runner", "Runner", "decide_ahead"),
 ("triton_backend.runner", "Runner", "_run"),
 ("triton_backend.runner", "Runner", "_run_batch"),
 ("triton_backend.runner", "Runner", "_builders"),
 ("triton_backend.runner", "Runner", "_drop_cancelled"),
 ("triton_backend.runner", "Runner", "_launch_executor"),
 ("triton_backend.runner", "Runner", "_start"),
 ("triton_backend.runner", "Runner", "_refuse_shed"),
 ("triton_backend.runner", "Runner", "submit_locked"),
 ("scheduler_core.engine", "Engine", "step"),
 ("scheduler_core.engine", "Engine", "submit"),
 ("scheduler_core.engine", "Engine", "take_planned"),
 ("scheduler_core.engine", "Engine", "started"),
 ("scheduler_core.scheduler", "Scheduler", "schedule"),
 ("scheduler_core.scheduler", "Scheduler", "submit_all"),
 ("scheduler_core.scheduler", "Scheduler", "_shed"),
 ("scheduler_core.scheduler", "Scheduler", "_dispatch_rule"),
 ("scheduler_core.length_aware", "LengthAwareFormer", "form"),
 ("scheduler_core.controller", "Controller", "tick"),
 ("triton_backend.hold_driver", "HoldDriver", "_send_early"),
 ("triton_backend.hold_driver", "HoldDriver", "_decide_ahead"),
 ("triton_backend.hold_driver", "HoldDriver", "_over_budget"),
 ("triton_backend.answers", None, "answer_all"),
 ("triton_backend.answers", None, "built"),
 ("triton_backend.watchdog", "Watchdog", "watch"),
]
_Model = TritonPythonModel
class TritonPythonModel(_Model):
    def initialize(self, args):
        import sys as _s
        for mod, cls, attr in _SPECS:
            m = _s.modules.get(mod) or _il.import_module(mod)
            owner = getattr(m, cls) if cls else m
            if hasattr(owner, attr):
                _wrap(owner, attr, (cls + "." if cls else "") + attr)
        self._path = FOLDER + "/" + args["model_name"] + ".phases.json"
        self._n = [0, 0, 0]
        return _Model.initialize(self, args)
    def execute(self, requests):
        s = _t.thread_time_ns()
        try:
            return _Model.execute(self, requests)
        finally:
            n = self._n; n[0] += 1; n[1] += len(requests); n[2] += _t.thread_time_ns() - s
            if n[0] % 100 == 0:
                with open(self._path, "w") as fh:
                    _j.dump({"calls": n[0], "requests": n[1], "exec_ns": n[2], "acc": _ACC}, fh)
'''
device, ms, rounds, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for m, d, b, req in alternated_sums(device, WRAP, ms, rounds, rate, "acc"):
    for k, (ns, n) in sorted(d["acc"].items(), key=lambda kv: -kv[1][0]):
        ns0, n0 = b["acc"].get(k, [0, 0])
        print(f"   {k:34s} {(ns - ns0) / req / 1000:7.2f} us/req  "
              f"{(ns - ns0) / max(n - n0, 1) / 1000:8.2f} us/call  n={n - n0}")
