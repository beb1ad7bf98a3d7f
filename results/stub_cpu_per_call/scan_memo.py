"""An experiment's script, kept with its page (not a tool): the shipped plugin's calls in
process (``benchmarks.call_path``'s model on the fake ``triton_python_backend_utils``),
h200_minilm EMULATED at time scale TS (default 1), calls of PER_CALL requests of the bench
mix; after 100 calls to warm up, counts the measured table's lookups a call, those that
missed its memo (computed), and the call's thread CPU. It imports the plugin from the
working directory, so run from a worktree of another commit it measures that commit. From
the repository root:

    [TS=1] .venv/bin/python results/stub_cpu_per_call/scan_memo.py PER_CALL CALLS
"""
import os, sys, time
sys.path.insert(0, os.getcwd())
import benchmarks.call_path as cp
from scheduler_core import cost_table
per_call, rounds = int(sys.argv[1]), int(sys.argv[2])
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm", "time_scale": os.environ.get("TS", "1"),
             "control.infeasible_policy": "serve_late"}
m = cp.explicit_model()
work = cp.calls(rounds, per_call, True)
for b in work[:100]:
    m.execute(b)
table = m.runner.scheduler.estimator.table
cnt = [0, 0]
orig_b = cost_table._bilinear
def bil(*a):
    cnt[1] += 1; return orig_b(*a)
cost_table._bilinear = bil
orig_l = table.lookup_ms
def look(b, n):
    cnt[0] += 1; return orig_l(b, n)
table.lookup_ms = look
t = time.thread_time()
for b in work[100:]:
    m.execute(b)
dt = time.thread_time() - t
n = rounds - 100
print(per_call, os.environ.get("TS"), "lookups/call", cnt[0] / n, "misses/call", cnt[1] / n, "cpu us/call", dt / n * 1e6)
