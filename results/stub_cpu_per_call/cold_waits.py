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
import collections
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import numpy as np  # noqa: E402

import benchmarks.call_path as cp  # noqa: E402
import triton_backend.executors as executors  # noqa: E402

per_call, calls = int(sys.argv[1]), int(sys.argv[2])
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm",
             "time_scale": os.environ.get("TS", "1"), "control.infeasible_policy": "serve_late"}
evict = np.ones(16 * 2**20 // 8)
evicting_s = [0.0]  # this call's eviction CPU, taken off its count


def evict_caches() -> None:
    start = time.thread_time()
    evict.sum()
    evicting_s[0] += time.thread_time() - start


class ColdTime:
    """``time`` for the executors' module, whose sleeps first evict the caches."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        evict_caches()
        time.sleep(seconds)


executors.time = ColdTime()
model = cp.explicit_model()
work = cp.calls(calls, per_call, True)
for batch in work[:100]:
    model.execute(batch)
totals = model.driver.timeline.totals
by_batches = collections.defaultdict(list)  # batches a call ran -> (requests, CPU us)
for batch in work[100:]:
    batches = totals["batches"]
    evict_caches()
    evicting_s[0] = 0.0
    start = time.thread_time()
    model.execute(batch)
    cpu_s = time.thread_time() - start - evicting_s[0]
    by_batches[totals["batches"] - batches].append((len(batch), cpu_s * 1e6))
for ran, rows in sorted(by_batches.items()):
    requests = np.array([r[0] for r in rows], float)
    cpu_us = np.array([r[1] for r in rows])
    print(f"batches {ran}: {len(rows)} calls, {cpu_us.mean():.0f} us/call, "
          f"{cpu_us.sum() / requests.sum():.1f} us/req")
