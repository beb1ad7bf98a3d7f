"""An experiment's script, kept with its page (not a tool): what building the EMBEDDING
responses costs each live stub, per row (thread CPU): the plugin's own
``answers.embedding_responses``, and in both stubs a probe every 20th call that builds 40
responses from views of one float32 buffer (the plugin's way) and 40 from per-row
``astype`` copies (native's way). The shipped plugin (``x_new``, ``serve_late``) and native
in one server on one EMULATED device; perf_analyzer, the bench mix, Poisson at RATE req/s
(0: the closed loop at concurrency 64), ROUNDS rounds of MS, alternated. From the
repository root:

    .venv/bin/python results/host_path_checks/live_responses.py DEVICE MS ROUNDS RATE
"""
import os
import sys

sys.path.insert(0, os.getcwd())
from benchmarks.live_probe import alternated_sums  # noqa: E402

# Appended to each model.py: the functions of _SPECS wrapped to sum their own thread CPU,
# and execute()'s, written every 100 calls.
WRAP = r'''
import time as _t, json as _j, numpy as _np
import triton_python_backend_utils as _pb
_ST = {"er": [0, 0], "probe_view": [0, 0], "probe_astype": [0, 0]}
def _probe():
    buf = _np.empty((40, 384), _np.float32)
    T, R = _pb.Tensor, _pb.InferenceResponse
    s = _t.thread_time_ns()
    x = [R(output_tensors=[T("EMBEDDING", buf[i:i + 1])]) for i in range(40)]
    e = _t.thread_time_ns(); _ST["probe_view"][0] += e - s; _ST["probe_view"][1] += 40
    emb = _np.random.rand(40, 384).astype(_np.float32)
    s = _t.thread_time_ns()
    y = [R(output_tensors=[T("EMBEDDING", emb[i:i + 1].astype(_np.float32))])
         for i in range(40)]
    e = _t.thread_time_ns(); _ST["probe_astype"][0] += e - s; _ST["probe_astype"][1] += 40
    del x, y
try:
    import triton_backend.answers as _an
    _orig = _an.embedding_responses
    def _er(rows):
        s = _t.thread_time_ns()
        try:
            return _orig(rows)
        finally:
            _ST["er"][0] += _t.thread_time_ns() - s; _ST["er"][1] += len(rows)
    _an.embedding_responses = _er
except ImportError:
    pass
_Model = TritonPythonModel
class TritonPythonModel(_Model):
    def initialize(self, args):
        self._path = FOLDER + "/" + args["model_name"] + ".phases.json"
        self._n = [0, 0, 0]
        return _Model.initialize(self, args)
    def execute(self, requests):
        s = _t.thread_time_ns()
        try:
            return _Model.execute(self, requests)
        finally:
            n = self._n; n[0] += 1; n[1] += len(requests); n[2] += _t.thread_time_ns() - s
            if n[0] % 20 == 0:
                _probe()
            if n[0] % 100 == 0:
                with open(self._path, "w") as fh:
                    _j.dump({"calls": n[0], "requests": n[1], "exec_ns": n[2], "gc": _ST}, fh)
'''
device, ms, rounds, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for m, d, b, req in alternated_sums(device, WRAP, ms, rounds, rate, "gc"):
    for g, (ns, rows) in sorted(d["gc"].items()):
        ns0, rows0 = b.get("gc", {}).get(g, [0, 0])
        print(f"   {g}: {(ns - ns0) / max(rows - rows0, 1) / 1000:.2f} us a row, "
              f"rows {rows - rows0}")
