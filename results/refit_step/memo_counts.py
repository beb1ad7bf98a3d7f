"""An experiment's script, kept with its page (not a tool): how often a tree's refit table
clears its memoised lookups, and how often a lookup finds one, on the shipped plugin's
execute() in process (``benchmarks.call_path``'s model on the fake
``triton_python_backend_utils``), h200_minilm at time scale 1 with the EMULATED device's
sleeps, its embeddings replaced by a constant, 600 calls of 40 requests of the bench mix
measured twice. From the repository root:

    .venv/bin/python results/refit_step/memo_counts.py TREE
"""
import collections
import os
import sys

tree = os.path.abspath(sys.argv[1])
sys.path.insert(0, tree)
os.chdir(tree)
import numpy as np  # noqa: E402

import benchmarks.call_path as cp  # noqa: E402
import scheduler_core.cost_table as ct  # noqa: E402
import triton_backend.executors as executors  # noqa: E402

counts = collections.Counter()
lookup, observe = ct.RefitTable.lookup_ms, ct.RefitTable.observe


def counted_lookup(self, batch_size, length):
    counts["lookups"] += 1
    counts["hits"] += (batch_size, length) in self._memo
    return lookup(self, batch_size, length)


def counted_observe(self, *args):
    before = len(self._memo)
    counts["refits"] += 1
    observe(self, *args)
    counts["cleared"] += len(self._memo) < before


ct.RefitTable.lookup_ms, ct.RefitTable.observe = counted_lookup, counted_observe
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm", "cost_mode": "padded",
             "time_scale": "1", "control.infeasible_policy": "serve_late",
             "control.refusal_late_share": "0.2"}
constant = np.ones(384, dtype=np.float32)
executors.deterministic_embedding = lambda ids: constant
model = cp.explicit_model()
cp.measure(model, cp.calls(100, 40, True), False)  # warm-up
counts.clear()
work = cp.calls(600, 40, True)
for _ in range(2):
    cp.measure(model, work, False)
model.finalize()
print(dict(counts), f"hit rate {counts['hits'] / counts['lookups']:.2f}")
