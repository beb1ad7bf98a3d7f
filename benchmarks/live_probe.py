"""The live experiments' driver (the scripts kept with their pages under ``results/``):
the shipped plugin beside native in one server on one EMULATED device, each model's
``model.py`` with a wrapper appended that writes what it measured under the run's folder,
and rounds that alternate the models under perf_analyzer."""

from __future__ import annotations

import json
import os
import tempfile

from benchmarks.bench_setup import SLA_CLASSES_MS, mix_entries, write_input_data
from benchmarks.hold_speed import DATA_ENTRIES, NATIVE, add_variant, build_repo, measure
from server_ops.launcher import TritonServer


def wrapped_beside_native(tmp: str, device: str, wrapper: str,
                          model: str = "x_new") -> tuple[str, list[str], dict[str, str]]:
    """A live experiment's repository in ``tmp``: the shipped plugin as ``model``
    (``serve_late``, as ``make bench``'s closed loops run it) beside native on ``device``,
    ``wrapper`` appended to each one's ``model.py`` (its ``FOLDER`` replaced by ``tmp``: where
    it writes what it measured). Returns (the repository, the models, each one's
    perf_analyzer input data: the mix, with the SLA classes for the plugin)."""
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    build_repo(repo, [], device=device)
    add_variant(repo, {"control.infeasible_policy": "serve_late"}, device, name=model)
    models = [model, NATIVE]
    for m in models:
        with open(os.path.join(repo, m, "1", "model.py"), "a") as fh:
            fh.write(wrapper.replace("FOLDER", repr(tmp)))
    data = {m: write_input_data(os.path.join(tmp, m + ".data.json"),
                                mix_entries(None if m == NATIVE else SLA_CLASSES_MS,
                                            DATA_ENTRIES)) for m in models}
    return repo, models, data


def alternated_sums(device: str, wrapper: str, ms: int, rounds: int, rate: float,
                    extra: str) -> list[tuple[str, dict, dict, int]]:
    """``wrapped_beside_native`` served, warmed up, then ``rounds`` rounds of ``ms`` each
    (closed loop at concurrency 64 where ``rate`` is 0, else Poisson at ``rate``), the
    models alternated, one line a round. ``wrapper`` writes ``FOLDER/<model>.phases.json``:
    running sums of ``calls``, ``requests``, ``exec_ns`` and its own ``extra``. Prints each
    model's calls and ``execute()`` CPU over the rounds; returns (model, its sums at the
    end, at the end of the warm-up, requests over the rounds) for each."""
    empty = {"calls": 0, "requests": 0, "exec_ns": 0, extra: {}}
    with tempfile.TemporaryDirectory() as tmp:
        repo, models, data = wrapped_beside_native(tmp, device, wrapper)

        def sums(model: str) -> dict:
            try:
                with open(os.path.join(tmp, model + ".phases.json")) as fh:
                    return json.load(fh)
            except OSError:
                return empty

        with TritonServer(repo, log_path=os.path.join(tmp, "server.log")) as server:
            for m in models:
                measure(server, m, data[m], 300, 0.0, 1500)
            base = {m: sums(m) for m in models}  # the warm-up's, taken off the rounds'
            for r in range(rounds):
                for m in (models if r % 2 == 0 else models[::-1]):
                    row = measure(server, m, data[m], rate, 0.8, ms,
                                  concurrency=64 if rate == 0 else 0)
                    print(f"round {r} {m}: {row.throughput} req/s, {row.per_call:.1f}/call, "
                          f"stub {row.stub_us:.1f} us/req", flush=True)
        out = []
        for m in models:
            d, b = sums(m), base[m]
            req, calls = d["requests"] - b["requests"], d["calls"] - b["calls"]
            print(f"== {m}: {calls} calls {req} req ({req / calls:.1f}/call); execute "
                  f"{(d['exec_ns'] - b['exec_ns']) / req / 1000:.1f} us/req")
            out.append((m, d, b, req))
        return out
