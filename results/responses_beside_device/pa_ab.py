"""An experiment's script, kept with its page (not a tool): ``make bench``'s perf_analyzer
rows again (``benchmarks.bench_pa.pa_row``: Poisson, the mix as input data, in SLA by each
entry's SLA class), the shipped plugin beside the plugin as another checkout has it
(``x_base``: its stub imports from BASE first) and native, in one server on one EMULATED
device, at FRACTION of native's closed-loop peak, ROUNDS rounds, the models rotated. From
the repository root:

    BASE=PATH .venv/bin/python results/responses_beside_device/pa_ab.py DEVICE FRACTION ROUNDS
"""
import os
import sys
import tempfile

sys.path.insert(0, os.getcwd())
from benchmarks.bench_pa import pa_row, sla_by_ids  # noqa: E402
from benchmarks.hold_speed import (NATIVE, SHIPPED, add_checkout, measure,  # noqa: E402
                                   shipped_beside_native)

BASE = "x_base"
device, fraction, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])


def add_base(repo: str) -> str:
    return add_checkout(repo, os.environ["BASE"], BASE, device=device)


with tempfile.TemporaryDirectory() as tmp:
    with shipped_beside_native(tmp, device, also=add_base) as (server, _, data):
        peak = measure(server, NATIVE, data[NATIVE], 0, None, 4000, concurrency=64).throughput
        slas = sla_by_ids(data[SHIPPED])
        print("native peak", peak, flush=True)
        models = [SHIPPED, BASE, NATIVE]
        for r in range(rounds):
            for m in models[r % 3:] + models[:r % 3]:
                row = pa_row(server.grpc_url, m, data[m], fraction * peak, slas,
                             os.path.join(tmp, f"pa_{m}_{r}.json"))
                print(f"round {r} {m}: {row.get('in_sla')}/{row.get('sent')} in SLA, P50 "
                      f"{row.get('p50_ms')}, P99 {row.get('p99_ms')}, kept "
                      f"{row.get('kept_schedule')} {row.get('error') or ''}", flush=True)
