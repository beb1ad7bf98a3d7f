"""An experiment's script, kept with its page (not a tool): CPU per request of the shipped
plugin's execute() in process (``benchmarks.call_path``'s model on the fake
``triton_python_backend_utils``), on h200_minilm at time scale 0.01, calls of PER_CALL
requests of the bench mix, with the EMULATED device's embeddings replaced by a constant
(the same for every tree: what is left is the plugin's own path). Each tree runs in a
process of its own (its modules imported from it), the trees alternated ROUNDS times;
each process measures the same 1,500 calls twice and prints both. From the repository
root:

    .venv/bin/python results/cost_table_lookups/in_process.py ROUNDS PER_CALL TREE...
"""
import os
import subprocess
import sys

if len(sys.argv) > 1 and sys.argv[1] == "--child":
    tree, per_call = sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, tree)
    os.chdir(tree)
    import numpy as np

    import benchmarks.call_path as cp
    import triton_backend.executors as executors
    cp.PARAMS = {"sidecar": "off", "hardware_profile": "h200_minilm", "cost_mode": "padded",
                 "time_scale": "0.01", "control.infeasible_policy": "serve_late",
                 "control.refusal_late_share": "0.2"}
    constant = np.ones(384, dtype=np.float32)
    executors.deterministic_embedding = lambda ids: constant
    model = cp.explicit_model()
    cp.measure(model, cp.calls(200, per_call, True), False)  # warm-up
    work = cp.calls(1500, per_call, True)
    print(" ".join(f"{cp.measure(model, work, False):.2f}" for _ in range(2)))
    model.finalize()
    sys.exit(0)

rounds, per_call, trees = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
for r in range(rounds):
    for tree in trees:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                              os.path.abspath(tree), per_call], capture_output=True,
                             text=True, check=True).stdout.strip().splitlines()[-1]
        print(f"round {r + 1} {tree}: {out} us of CPU a request", flush=True)
