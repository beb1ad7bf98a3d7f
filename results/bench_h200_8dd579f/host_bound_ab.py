"""An experiment's script, kept with its page (not a tool): the host-bound closed loop
(h200_minilm EMULATED at time scale 0.01, perf_analyzer at concurrency 64, the SLA classes
at device speed, the plugin with control.infeasible_policy=serve_late as make bench runs
it) of this tree's plugin, another tree's (its stub imports that tree first) and native,
in one server, rounds alternated. Run from the repository root:

    .venv/bin/python results/bench_h200_8dd579f/host_bound_ab.py WORKTREE ROUNDS MS
"""
import os, sys, tempfile, statistics
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from benchmarks.hold_speed import build_repo, add_variant, measure, NATIVE
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data
from server_ops.launcher import TritonServer
tree = sys.argv[1]; rounds = int(sys.argv[2]); ms = int(sys.argv[3])
with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo"); os.makedirs(repo)
    build_repo(repo, [], device="host_bound")
    late = {"control.infeasible_policy": "serve_late"}
    add_variant(repo, late, "host_bound", name="x_new")
    d = add_variant(repo, late, "host_bound", name="x_base")
    mp = os.path.join(d, "1", "model.py")
    body = open(mp).read()
    open(mp, "w").write(f"import sys\nsys.path.insert(0, {tree!r})\n{body}")
    data = {"x": write_input_data(os.path.join(tmp, "sla.json"), mix_entries(SLA_CLASSES_MS, 2000)),
            "n": write_input_data(os.path.join(tmp, "mix.json"), mix_entries(None, 2000))}
    models = [("x_new", "x"), ("x_base", "x"), (NATIVE, "n")]
    res = {m: [] for m, _ in models}
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for m, k in models:
            measure(server, m, data[k], 200, 0.0, 1500)
        for r in range(rounds):
            for m, k in (models if r % 2 == 0 else models[::-1]):
                row = measure(server, m, data[k], 0, None, ms, concurrency=64)
                res[m].append(row.throughput or 0.0)
                print(r + 1, m, row.throughput, row.p50_ms, row.stub_us, row.per_call, row.error, flush=True)
    for m in res:
        print(m, [round(x) for x in res[m]], "median", round(statistics.median(res[m])))
    nat = statistics.median(res[NATIVE])
    print("ratios new/native", round(statistics.median(res["x_new"]) / nat, 3), "base/native", round(statistics.median(res["x_base"]) / nat, 3))
