"""An experiment's script, kept with its page (not a tool): the Python work of one
``execute()`` call, in process (``benchmarks.call_path``'s models on the fake
``triton_python_backend_utils``), h200_minilm padded at time scale 1 (the device's sleeps
are not CPU time; its deterministic embeddings are, for both), calls of PER_CALL requests
of the bench mix. MODEL ``explicit`` is the shipped default (intake hold; POLICY sets
``control.infeasible_policy``, default ``reject`` as shipped), ``native`` the same Python
model as Triton's batcher runs it. Prints the thread CPU per request (warm, then with 16 MB
read between calls so each starts with cold caches, the read not counted), the Python
function calls per call (cProfile's count: deterministic), and with ``--parts`` the thread
CPU per request of the plugin's parts (each part's own calls, warm, nested parts inside
their callers'). TS sets the time scale (default 1; at 0.01 the calls run back to back
and the CPU reads steadily). It imports the plugin from the working directory, so run
from a worktree of another commit it measures that commit's code. From the repository
root:

    [TS=0.01] .venv/bin/python results/stub_cpu_split/call_census.py MODEL PER_CALL CALLS [--parts]
"""
import cProfile
import os
import pstats
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.getcwd())
import numpy as np  # noqa: E402

import benchmarks.call_path as cp  # noqa: E402  (installs the fake pb_utils)

which, per_call, n_calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm",
             "time_scale": os.environ.get("TS", "1"),
             "control.refusal_late_share": "0.2",
             "control.infeasible_policy": os.environ.get("POLICY", "reject")}


PARTS = {  # module: the functions timed with --parts
    "triton_backend.hold_driver": ["read_launchable", "decode_call", "HoldDriver.execute"],
    "triton_backend.runner": ["Runner._decide", "Runner.submit", "Runner.take_planned",
                              "Runner.launch_first", "Runner._launch_executor",
                              "Runner._observe", "Runner._builders"],
    "triton_backend.answers": ["CallList.returned"],
    "scheduler_core.length_aware": ["LengthAwareFormer.form",
                                    "LengthAwareFormer._cheapest_prefix", "urgency_order"],
    "scheduler_core.scheduler": ["Scheduler.submit_all"],
    "scheduler_core.controller": ["Controller.tick"],
}
spent: dict[str, list] = defaultdict(lambda: [0.0, 0])


if "--parts" in sys.argv:
    import importlib
    for module_name, names in PARTS.items():
        module = importlib.import_module(module_name)
        for label in names:
            owner, _, name = label.rpartition(".")
            cp.thread_timed(getattr(module, owner) if owner else module, name, spent,
                            label)
model = cp.explicit_model() if which == "explicit" else cp.native_model()
with_sla = which == "explicit"
cp.measure(model, cp.calls(100, per_call, with_sla), False)  # warm-up
spent.clear()
work = cp.calls(n_calls, per_call, with_sla)
evict = np.ones(16 * 2**20 // 8)
for label, read in (("warm", False), ("cold", True)):
    cpu = 0.0
    for batch in work:
        if read:
            evict.sum()
        start = time.thread_time()
        model.execute(batch)
        cpu += time.thread_time() - start
    print(f"{which}, calls of {per_call}: {cpu * 1e6 / (n_calls * per_call):.1f} us of "
          f"thread CPU a request ({label})")
    if label == "warm" and spent:
        for part, (seconds, _) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
            print(f"  {part}: {seconds * 1e6 / (n_calls * per_call):.2f} us a request")
profiler = cProfile.Profile()
profiler.enable()
for batch in work:
    model.execute(batch)
profiler.disable()
print(f"{which}, calls of {per_call}: {pstats.Stats(profiler).total_calls / n_calls:.0f} "
      "Python function calls a call")
model.finalize()
