"""An experiment's script, kept with its page (not a tool): this tree's plugin (``x_new``),
another tree's (``x_base``: its stub imports that tree first) and native, in one server on
the EMULATED h200_minilm device at TIME_SCALE, open loop (perf_analyzer, Poisson, the bench
mix with its SLA classes times the time scale for the plugins), at each rate of RATES
(req/s), the three models alternated round by round (the order rotates, so each model
takes each slot). Per row: req/s answered, P50 and P99 (ms), requests a call. From the
repository root of this tree:

    PYTHONPATH=. .venv/bin/python results/emergency_plan/open_loop_ab.py BASE_TREE TIME_SCALE ROUNDS MS RATE...
"""
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.getcwd())
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data  # noqa: E402
from benchmarks.hold_speed import NATIVE, add_variant, build_repo, measure  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

tree, scale, rounds, ms = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rates = [float(r) for r in sys.argv[5:]]
MODELS = ("x_new", "x_base", NATIVE)

with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    build_repo(repo, [], device="h200_minilm", time_scale=scale)
    add_variant(repo, {}, "h200_minilm", time_scale=scale, name="x_new")
    model_py = os.path.join(add_variant(repo, {}, "h200_minilm", time_scale=scale,
                                        name="x_base"), "1", "model.py")
    with open(model_py) as fh:
        body = fh.read()
    with open(model_py, "w") as fh:
        fh.write(f"import sys\nsys.path.insert(0, {tree!r})\n{body}")
    slas = tuple(scale * s for s in SLA_CLASSES_MS)
    data = {"x": write_input_data(os.path.join(tmp, "sla.json"), mix_entries(slas, 2000)),
            "n": write_input_data(os.path.join(tmp, "mix.json"), mix_entries(None, 2000))}
    p50 = {(m, rate): [] for m in MODELS for rate in rates}
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for r in range(rounds):
            order = MODELS[r % 3:] + MODELS[:r % 3]
            for rate in rates:
                for model in order:
                    row = measure(server, model, data["n" if model == NATIVE else "x"], rate,
                                  None, ms)
                    p50[(model, rate)].append(row.p50_ms or float("nan"))
                    print(f"round {r + 1} {rate:g} req/s {model}: {row.throughput} req/s, "
                          f"P50 {row.p50_ms} ms, P99 {row.p99_ms} ms, "
                          f"{row.per_call or 0:.1f} requests a call {row.error or ''}",
                          flush=True)
    for (model, rate), values in p50.items():
        print(f"{model} at {rate:g} req/s: P50 {[round(v) for v in values]} ms, "
              f"median {statistics.median(values):.0f}")
