"""An experiment's script, kept with its page (not a tool): the cyclic garbage collector's
work in each live stub, by generation (``gc.callbacks``: collections, their time per
answered request). The shipped plugin (``x_new``, ``serve_late`` as ``make bench``'s closed
loops run it) and native in one server on one EMULATED device; perf_analyzer, the bench
mix, Poisson at RATE req/s (0: the closed loop at concurrency 64), ROUNDS rounds of MS,
alternated (``../stub_cpu_split/live_phases.py`` with another wrapper). GC_FREEZE=1 calls
``gc.freeze()`` after initialize. From the repository root:

    .venv/bin/python results/host_path_checks/live_gc.py DEVICE MS ROUNDS RATE
"""
import os
import sys

sys.path.insert(0, os.getcwd())
from benchmarks.live_probe import alternated_sums  # noqa: E402

# Appended to each model.py: the functions of _SPECS wrapped to sum their own thread CPU,
# and execute()'s, written every 100 calls.
WRAP = r'''
import time as _t, json as _j, gc as _gc, os as _os
_ST = {}
_T0 = [0.0]
def _cb(phase, info):
    if phase == "start":
        _T0[0] = _t.perf_counter()
    else:
        s = _ST.setdefault(str(info["generation"]), [0, 0.0, 0])
        s[0] += 1; s[1] += _t.perf_counter() - _T0[0]; s[2] += info["collected"]
_gc.callbacks.append(_cb)
_Model = TritonPythonModel
class TritonPythonModel(_Model):
    def initialize(self, args):
        self._path = FOLDER + "/" + args["model_name"] + ".phases.json"
        self._n = [0, 0, 0]
        r = _Model.initialize(self, args)
        if _os.environ.get("GC_FREEZE"):
            _gc.freeze()
        return r
    def execute(self, requests):
        s = _t.thread_time_ns()
        try:
            return _Model.execute(self, requests)
        finally:
            n = self._n; n[0] += 1; n[1] += len(requests); n[2] += _t.thread_time_ns() - s
            if n[0] % 100 == 0:
                with open(self._path, "w") as fh:
                    _j.dump({"calls": n[0], "requests": n[1], "exec_ns": n[2], "gc": _ST,
                             "counts": _gc.get_count()}, fh)
'''
device, ms, rounds, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for m, d, b, req in alternated_sums(device, WRAP, ms, rounds, rate, "gc"):
    for g, (c, s, col) in sorted(d["gc"].items()):
        c0, s0, col0 = b.get("gc", {}).get(g, [0, 0.0, 0])
        print(f"   gen{g}: {c - c0} collections, {(s - s0) * 1e6 / req:.2f} us/req, "
              f"{(s - s0) * 1e6 / max(c - c0, 1):.0f} us each, collected {col - col0}")
