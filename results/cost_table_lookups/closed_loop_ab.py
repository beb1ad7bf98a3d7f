"""An experiment's script, kept with its page (not a tool): the closed loop (perf_analyzer
at concurrency 64, the bench mix, ``--measurement-ms`` a row) of this tree's plugin
(``x_new``), another tree's (``x_base``: its stub imports that tree first) and native,
in one server on one EMULATED device (``benchmarks.hold_speed.DEVICES``), the three rows
alternated round by round. The plugins run with ``control.infeasible_policy=serve_late``,
as ``make bench``'s closed loops run them (perf_analyzer stops at its first refusal).
Per row: req/s, P50, requests per call, and the CPU per answered request of the stub
(schedstat, every thread), of the server process (its own threads, not the stubs) and of
perf_analyzer (this process's children). Run from the repository root:

    .venv/bin/python results/cost_table_lookups/closed_loop_ab.py WORKTREE DEVICE ROUNDS MS
"""
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.getcwd())
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data  # noqa: E402
from benchmarks.hold_speed import NATIVE, add_variant, build_repo, measure  # noqa: E402
from benchmarks.procinfo import children_cpu_s, cpu_s, find_stub  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

tree, device, rounds, ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    build_repo(repo, [], device=device)
    late = {"control.infeasible_policy": "serve_late"}
    add_variant(repo, late, device, name="x_new")
    model_py = os.path.join(add_variant(repo, late, device, name="x_base"), "1", "model.py")
    with open(model_py) as fh:
        body = fh.read()
    with open(model_py, "w") as fh:
        fh.write(f"import sys\nsys.path.insert(0, {tree!r})\n{body}")
    data = {"x": write_input_data(os.path.join(tmp, "sla.json"), mix_entries(SLA_CLASSES_MS, 2000)),
            "n": write_input_data(os.path.join(tmp, "mix.json"), mix_entries(None, 2000))}
    models = [("x_new", "x"), ("x_base", "x"), (NATIVE, "n")]
    runs = {m: {"req/s": [], "stub": [], "all": []} for m, _ in models}
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for model, key in models:  # warm-up
            measure(server, model, data[key], 200, 0.0, 1500)
        for r in range(rounds):
            for model, key in (models if r % 2 == 0 else models[::-1]):
                stub = find_stub(server.process.pid, model)
                before = cpu_s(server.process.pid), children_cpu_s(), cpu_s(stub)
                row = measure(server, model, data[key], 0, None, ms, concurrency=64)
                after = cpu_s(server.process.pid), children_cpu_s(), cpu_s(stub)
                server_us, pa_us, stub_us = ((a - b) / (row.answered or 1) * 1e6
                                             for a, b in zip(after, before))
                runs[model]["req/s"].append(row.throughput or 0.0)
                runs[model]["stub"].append(stub_us)
                runs[model]["all"].append(server_us + pa_us + stub_us)
                print(f"round {r + 1} {model}: {row.throughput} req/s, P50 {row.p50_ms} ms, "
                      f"{row.per_call or 0:.1f} requests a call, CPU us/request: server "
                      f"{server_us:.0f}, stub {stub_us:.0f}, perf_analyzer {pa_us:.0f} "
                      f"{row.error or ''}", flush=True)
    medians = {m: {k: statistics.median(v) for k, v in runs[m].items()} for m in runs}
    native = medians[NATIVE]
    for model, figures in runs.items():
        m = medians[model]
        print(f"{model}: req/s {[round(x) for x in figures['req/s']]}, median {m['req/s']:.0f} "
              f"({m['req/s'] / native['req/s']:.3f}x native's); stub us/request "
              f"{[round(x) for x in figures['stub']]}, median {m['stub']:.1f} "
              f"({m['stub'] / native['stub']:.2f}x native's); all three processes, median "
              f"{m['all']:.0f} us/request")
