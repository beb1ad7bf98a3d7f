"""An experiment's script, kept with its page (not a tool): the shipped plugin's calls in
process (``benchmarks.call_path``'s model on the fake ``triton_python_backend_utils``),
h200_minilm EMULATED at time scale TS (default 1), calls of PER_CALL requests of the bench
mix, with the device's waits made cold: before each call and in each of the device's
sleeps it reads 16 MB (as the server and the load generator would run meanwhile), that
read's CPU not counted. Prints the calls' thread CPU by the batches each ran. It imports
the plugin from the working directory, so run from a worktree of another commit it
measures that commit. From the repository root:

    [TS=1] .venv/bin/python results/stub_cpu_per_call/cold_waits.py PER_CALL CALLS
"""
import os, sys, time, collections
sys.path.insert(0, os.getcwd())
import numpy as np
import benchmarks.call_path as cp
per_call, rounds = int(sys.argv[1]), int(sys.argv[2])
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm",
             "time_scale": os.environ.get("TS", "1"), "control.infeasible_policy": "serve_late"}
import triton_backend.executors as ex
evict = np.ones(16 * 2**20 // 8)
spent = [0.0]
real_sleep = time.sleep
class T:
    def __getattr__(self, k): return getattr(time, k)
    @staticmethod
    def sleep(s):
        t = time.thread_time(); evict.sum(); spent[0] += time.thread_time() - t
        real_sleep(s)
ex.time = T()
m = cp.explicit_model()
work = cp.calls(rounds, per_call, True)
for b in work[:100]:
    m.execute(b)
tl = m.driver.timeline
rows = collections.defaultdict(list)
for b in work[100:]:
    n0 = tl.totals["batches"]
    spent[0] = 0.0
    evict.sum()
    s = time.thread_time(); m.execute(b); cpu = time.thread_time() - s - spent[0]
    nb = tl.totals["batches"] - n0
    rows[nb].append((len(b), cpu * 1e6))
for k, r in sorted(rows.items()):
    n = np.array([x[0] for x in r], float); c = np.array([x[1] for x in r])
    print(f"batches {k}: {len(r)} calls, {c.mean():.0f} us/call, {c.sum()/n.sum():.1f} us/req")
