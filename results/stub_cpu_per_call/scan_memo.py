"""An experiment's script, kept with its page (not a tool): the shipped plugin's calls in
process (``benchmarks.call_path``'s model on the fake ``triton_python_backend_utils``),
h200_minilm EMULATED at time scale TS (default 1), calls of PER_CALL requests of the bench
mix; after 100 calls to warm up, counts a call's ``RefitTable.lookup_ms`` calls (the
memoised lookups), its ``_bilinear`` computations (the lookups that missed the memo and,
from 9fb6aa1 on, the split scan's unmemoised ones: at 87a5d80 ``scan_ms`` wrote the
step out and was counted in neither) and the call's thread CPU. It imports the plugin
from the working directory, so run from a worktree of another commit it measures that
commit. From the repository root:

    [TS=1] .venv/bin/python results/stub_cpu_per_call/scan_memo.py PER_CALL CALLS
"""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import benchmarks.call_path as cp  # noqa: E402
from scheduler_core import cost_table  # noqa: E402

per_call, calls = int(sys.argv[1]), int(sys.argv[2])
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm",
             "time_scale": os.environ.get("TS", "1"), "control.infeasible_policy": "serve_late"}
model = cp.explicit_model()
work = cp.calls(calls, per_call, True)
for batch in work[:100]:
    model.execute(batch)
table = model.runner.scheduler.estimator.table
counted = {"lookups": 0, "computed": 0}


def counting(name, function):
    def counted_call(*args):
        counted[name] += 1
        return function(*args)
    return counted_call


cost_table._bilinear = counting("computed", cost_table._bilinear)
table.lookup_ms = counting("lookups", table.lookup_ms)
start = time.thread_time()
for batch in work[100:]:
    model.execute(batch)
spent = time.thread_time() - start
n = calls - 100
print(per_call, os.environ.get("TS", "1"), "lookups/call", counted["lookups"] / n,
      "misses/call", counted["computed"] / n, "cpu us/call", spent / n * 1e6)
