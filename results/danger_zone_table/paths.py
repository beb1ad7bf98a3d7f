"""An experiment's script, kept with its page (not a tool): which path a live call takes.
The shipped plugin (``x_new``; ``control.infeasible_policy: reject`` as shipped) and, with
BASE=PATH, the plugin as the checkout at PATH has it (``x_base``), in one server on one
EMULATED device (``benchmarks.hold_speed.DEVICES``; it sleeps the profile's cost, not a
GPU); perf_analyzer, the bench mix with its SLAs, Poisson at RATE req/s (0: the closed
loop at concurrency 64, ``control.infeasible_policy: serve_late`` as ``make bench``'s
closed loops run it), ROUNDS rounds of MS each, the models alternating. Per round: the
batches each former formed (the plugin's ``formed_batches_total``: ``as_handed`` is a
call run whole without a decision, the others a decided call's batches), requests a
call, batches a call, and the stub's CPU per request (every thread, ``/proc``). From the
repository root:

    [BASE=PATH] .venv/bin/python results/danger_zone_table/paths.py DEVICE RATE MS ROUNDS
"""
import os
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.getcwd())
from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data  # noqa: E402
from benchmarks.hold_speed import add_checkout, add_variant, build_repo, measure  # noqa: E402
from server_ops.launcher import TritonServer  # noqa: E402

FORMED = "explicit_batching_formed_batches_total"
device, rate, ms, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
policy = {"control.infeasible_policy": "reject" if rate else "serve_late"}


def formed(server: TritonServer, model: str) -> dict[str, float]:
    """The model's ``formed_batches_total``, by former."""
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(FORMED) and f'model="{model}"' in line:
            labels, value = line.rsplit(" ", 1)
            former = labels.split('former="', 1)[1].split('"', 1)[0]
            out[former] = out.get(former, 0.0) + float(value)
    return out


with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    build_repo(repo, [], device=device)
    add_variant(repo, policy, device, name="x_new")
    models = ["x_new"]
    if os.environ.get("BASE"):
        models.append(add_checkout(repo, os.environ["BASE"], "x_base", policy, device))
    data = write_input_data(os.path.join(tmp, "sla.json"), mix_entries(SLA_CLASSES_MS, 2000))
    with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
        for model in models:  # warm-up
            measure(server, model, data, 300, 0.0, 1500)
        for r in range(rounds):
            for model in models[r % len(models):] + models[:r % len(models)]:
                before = formed(server, model)
                row = measure(server, model, data, rate, None, ms,
                              concurrency=0 if rate else 64)
                after = formed(server, model)
                counts = {k: after[k] - before.get(k, 0.0) for k in sorted(after)}
                total = sum(counts.values()) or 1.0
                shares = ", ".join(f"{k} {v:.0f} ({v / total:.1%})" for k, v in counts.items())
                calls = (row.answered or 0) / row.per_call if row.per_call else 0
                print(f"round {r + 1} {model}: {row.throughput or 0:.0f} req/s, "
                      f"{row.per_call or 0:.1f} requests a call, "
                      f"{total / calls if calls else 0:.2f} batches a call, stub "
                      f"{row.stub_us or 0:.1f} us a request; batches formed: {shares}",
                      flush=True)
