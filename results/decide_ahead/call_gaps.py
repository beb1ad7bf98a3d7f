"""An experiment's script, kept with its page (not a tool): where the EMULATED device
idles inside intake hold's execute() calls, in process (``benchmarks.call_path``'s models
on the fake ``triton_python_backend_utils``), h200_minilm padded at time scale 1, calls of
PER_CALL requests of the bench mix, the device's embeddings replaced by a constant. Per
call: the time from the call's start to its first batch's launch, between one batch's end
(its flight's end) and the next batch's launch, and from the last batch's end to the
call's return. MODEL is ``explicit`` (the shipped default, intake hold) or ``native``
(the same Python model as Triton's batcher runs it). From the repository root of TREE:

    PYTHONPATH=TREE .venv/bin/python results/decide_ahead/call_gaps.py MODEL PER_CALL CALLS
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import numpy as np  # noqa: E402

import benchmarks.call_path as cp  # noqa: E402  (installs the fake pb_utils)
import triton_backend.executors as executors  # noqa: E402

which, per_call, n_calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm", "cost_mode": "padded",
             "time_scale": "1"}
constant = np.ones(384, dtype=np.float32)
executors.deterministic_embedding = lambda ids: constant
flights = []
launch = executors.EmulatedDevice.launch


def spied(self, sequences, timeout_s=0.0):
    flight = launch(self, sequences, timeout_s)
    flights.append((flight.started_s, flight.end_s))
    return flight


executors.EmulatedDevice.launch = spied
model = cp.native_model() if which == "native" else cp.explicit_model()
with_sla = which != "native"
cp.measure(model, cp.calls(100, per_call, with_sla), False)  # warm-up
before, between, after, batches = [], [], [], []
for call in cp.calls(n_calls, per_call, with_sla):
    flights.clear()
    start = time.perf_counter()
    model.execute(call)
    done = time.perf_counter()
    before.append(flights[0][0] - start)
    between += [b[0] - a[1] for a, b in zip(flights, flights[1:])]
    after.append(done - flights[-1][1])
    batches.append(len(flights))
model.finalize()


def ms(values):
    return 1e3 * statistics.mean(values) if values else 0.0


print(f"{which}: {n_calls} calls of {per_call}, {statistics.mean(batches):.2f} batches a call; "
      f"ms a call: before the first launch {ms(before):.3f}, between batches "
      f"{ms(between) * (statistics.mean(batches) - 1):.3f} ({ms(between):.3f} a gap), "
      f"after the last batch {ms(after):.3f}")
