"""An experiment's script, kept with its page (not a tool): the device idle while requests
wait (``timeline_figures.idle_while_waiting``), the shipped plugin beside the plugin as
another checkout has it (``x_base``: its stub imports from BASE first) and native, in one
server with the per-call timelines on, on one EMULATED device
(``benchmarks.hold_speed.DEVICES``). perf_analyzer, Poisson, the bench mix (with its SLA
classes for the plugins), each FRACTION of native's closed-loop peak, REPS rounds each,
the models rotated. Without BASE, ``x_base`` is the shipped plugin fed the mix without
SLA_MS (native's data): what the SLA input costs. From the repository root:

    [BASE=PATH] [REPS=2] .venv/bin/python results/responses_beside_device/idle_ab.py \
        DEVICE 0.5,0.8 MS
"""
import os
import sys
import tempfile
import time
from unittest import mock

sys.path.insert(0, os.getcwd())
from benchmarks.bench_idle import in_windows  # noqa: E402
from benchmarks.hold_speed import (NATIVE, SHIPPED, add_checkout, add_variant,  # noqa: E402
                                   measure, shipped_beside_native)
from benchmarks.timeline_figures import idle_while_waiting  # noqa: E402
from triton_backend.timeline import TIMELINE_ENV, read as read_timeline  # noqa: E402

BASE = "x_base"
device, ms = sys.argv[1], int(sys.argv[3])
fractions = [float(x) for x in sys.argv[2].split(",")]


def add_base(repo: str) -> str:
    if not os.environ.get("BASE"):  # the shipped plugin, fed the mix without SLA_MS
        add_variant(repo, {}, device, name=BASE)
        return BASE
    return add_checkout(repo, os.environ["BASE"], BASE, device=device)


with tempfile.TemporaryDirectory() as tmp:
    folder = os.path.join(tmp, "timelines")
    models = [SHIPPED, BASE, NATIVE]
    windows = {m: [] for m in models}
    with (mock.patch.dict(os.environ, {TIMELINE_ENV: folder}),
          shipped_beside_native(tmp, device, also=add_base) as (server, _, data)):
        if not os.environ.get("BASE"):
            data[BASE] = data[NATIVE]
        peak = measure(server, NATIVE, data[NATIVE], 0, None, ms, concurrency=64).throughput
        print("native peak", peak, flush=True)
        for k, f in enumerate(fractions):
            for rep in range(int(os.environ.get("REPS", "2"))):
                for m in (models if (k + rep) % 2 == 0 else models[::-1]):
                    t0 = time.monotonic()
                    r = measure(server, m, data[m], f * peak, f, ms)
                    windows[m].append((t0, time.monotonic()))
                    print(f"{f} {m}: {r.throughput} req/s P50 {r.p50_ms} stub {r.stub_us:.1f} "
                          f"{r.per_call:.1f}/call", flush=True)
    # the server has exited: every stub flushed its timeline at unload
    for m in models:
        records = in_windows(read_timeline(os.path.join(folder, f"{m}.timeline.jsonl")),
                             windows[m])
        figures = idle_while_waiting(records)
        print(m, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in figures.items()})
