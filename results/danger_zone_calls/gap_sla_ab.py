"""The gap between execute() calls, and the host time inside them, for the shipped plugin
fed the mix with its SLA_MS input, the same plugin fed the mix without it, and native,
in one server (``benchmarks.hold_speed.shipped_beside_native``, EMULATED flat, time scale
1), each row ``--rate`` req/s under perf_analyzer (Poisson) for 8 s, the rows alternated
round by round. Every model writes its per-call timeline; the calls of 8-15 requests
inside each row are summed up: the median gap before a call that came within 2 ms of the
previous return, and the median host time inside a call (its span less its batches' run
on the executor). An experiment kept with its page (results/danger_zone_calls/README.md):

    .venv/bin/python results/danger_zone_calls/gap_sla_ab.py [RATE] [ROUNDS] [TIMELINE_DIR]
"""
import collections
import json
import os
import statistics as st
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
from benchmarks import hold_speed as hs  # noqa: E402
from triton_backend.timeline import TIMELINE_ENV  # noqa: E402

rate = float(sys.argv[1]) if len(sys.argv) > 1 else 1440.0
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
folder = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="gap_sla_ab_")
os.environ[TIMELINE_ENV] = folder
rows = []
with tempfile.TemporaryDirectory() as tmp:
    with hs.shipped_beside_native(tmp, "flat") as (server, models, data):
        plugin, native = models[0], models[-1]
        cases = [("explicit, SLA_MS", plugin, data[plugin]),
                 ("explicit, no SLA", plugin, data[native]), ("native", native, data[native])]
        for r in range(rounds):
            for name, model, entries in (cases if r % 2 == 0 else cases[::-1]):
                t0 = time.monotonic()
                row = hs.measure(server, model, entries, rate, 0.8, 8000)
                rows.append((name, model, t0, time.monotonic(), row.stub_us))
                print(r + 1, name, row, flush=True)
calls = {m: [json.loads(line) for line in open(os.path.join(folder, f"{m}.timeline.jsonl"))]
         for m in (plugin, native)}
gaps, hosts = collections.defaultdict(list), collections.defaultdict(list)
for name, model, t0, t1, _ in rows:
    for c in calls[model]:
        if t0 < c["start_s"] < t1 and c["batches"] and 8 <= c["requests"] < 16:
            hosts[name].append(1e6 * (c["return_s"] - c["start_s"]
                                      - sum(b[6] for b in c["batches"])))
            if c["gap_s"] is not None and c["gap_s"] < 0.002:
                gaps[name].append(1e6 * c["gap_s"])
print("| case | calls of 8-15 | gap before the call (us, median) | host time inside it "
      "(us, median) | stub CPU per round (us/req) |\n|---|---:|---:|---:|---|")
for name, *_ in cases:
    print(f"| {name} | {len(hosts[name])} | {st.median(gaps[name]):.0f} | "
          f"{st.median(hosts[name]):.0f} | "
          f"{', '.join(f'{r[4]:.0f}' for r in rows if r[0] == name)} |")
