"""An experiment's script, kept with its page (not a tool): the closed loop (perf_analyzer
at concurrency 64, the bench mix, MS a row) of this tree's plugin (``x_new``) and another
tree's (``x_base``: its stub imports that tree first), alternated ROUNDS times in one
server on one EMULATED device, with the per-call timelines on (in TIMELINE_DIR); then,
per model and closed-loop row, from the timelines: req/s, calls, requests and batches a
call, and per call the time in the call, on the executor, inside the batches' spans but
off the executor (decisions, launches, answers), outside the batches, and the gap before
the next call; the device's idle share of the row. The plugins run with
``control.infeasible_policy=serve_late`` as ``make bench``'s closed loops do. From the
repository root of this tree:

    PYTHONPATH=. .venv/bin/python results/decide_ahead/closed_loop_timelines.py BASE_TREE DEVICE ROUNDS MS TIMELINE_DIR
"""
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.getcwd())
tree, device, rounds, ms, timeline_dir = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                          int(sys.argv[4]), sys.argv[5])
os.environ["EXPLICIT_BATCHING_TIMELINE_DIR"] = timeline_dir
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data  # noqa: E402
from benchmarks.hold_speed import add_variant, build_repo, measure  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

MODELS = ("x_new", "x_base")


def rows(path: str):
    """The timeline's closed-loop rows: runs of calls less than 0.2 s apart, 200 calls or
    more, the first 20 left out."""
    with open(path) as fh:
        records = [json.loads(line) for line in fh]
    runs = [[records[0]]]
    for a, b in zip(records, records[1:]):
        (runs[-1].append(b) if b["start_s"] - a["return_s"] < 0.2 else runs.append([b]))
    return [run[20:] for run in runs if len(run) >= 200]


def figures(run: list) -> str:
    n, requests = len(run), sum(r["requests"] for r in run)
    span_s = run[-1]["return_s"] - run[0]["start_s"]
    batches = [b for r in run for b in r["batches"] if b[0]]
    in_calls = sum(r["return_s"] - r["start_s"] for r in run)
    executor = sum(b[6] for b in batches)
    off_executor = sum(b[3] - b[2] - b[6] for b in batches)
    gaps = [b["start_s"] - a["return_s"] for a, b in zip(run, run[1:])]
    return (f"{requests / span_s:.0f} req/s, {requests / n:.1f} requests and "
            f"{len(batches) / n:.2f} batches a call; ms a call: in the call "
            f"{1e3 * in_calls / n:.2f}, executor {1e3 * executor / n:.2f}, in batches off "
            f"the executor {1e3 * off_executor / n:.3f}, outside batches "
            f"{1e3 * (in_calls - executor - off_executor) / n:.3f}, gap before the next "
            f"{1e3 * statistics.mean(gaps):.3f}; device idle {(span_s - executor) / span_s:.3f}")


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
    data = write_input_data(os.path.join(tmp, "sla.json"), mix_entries(SLA_CLASSES_MS, 2000))
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for model in MODELS:  # warm-up
            measure(server, model, data, 200, 0.0, 1500)
        for r in range(rounds):
            for model in MODELS if r % 2 == 0 else MODELS[::-1]:
                row = measure(server, model, data, 0, None, ms, concurrency=64)
                print(f"round {r + 1} {model}: {row.throughput} req/s, P50 {row.p50_ms} ms",
                      flush=True)
for model in MODELS:
    for k, run in enumerate(rows(os.path.join(timeline_dir, f"{model}.timeline.jsonl"))):
        print(f"{model} row {k + 1}: {figures(run)}")
