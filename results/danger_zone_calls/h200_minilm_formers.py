"""The shipped plugin and native on the EMULATED h200_minilm profile (time scale 1) in one
server, one row each at RATE req/s under perf_analyzer (Poisson, the mix, 8 s), with
per-call timelines written to TIMELINE_DIR; ``timeline_formers.py`` then counts the calls
by former. An experiment kept with its page (results/danger_zone_calls/README.md):

    .venv/bin/python results/danger_zone_calls/h200_minilm_formers.py 1825 DIR
    python3 results/danger_zone_calls/timeline_formers.py DIR/*.timeline.jsonl
"""
import os
import sys
import tempfile

sys.path.insert(0, os.getcwd())
os.environ["EXPLICIT_BATCHING_TIMELINE_DIR"] = sys.argv[2]
from benchmarks import hold_speed as hs  # noqa: E402

rate = float(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    with hs.shipped_beside_native(tmp, "h200_minilm") as (server, models, data):
        for model in (models[0], models[-1]):
            print(model, hs.measure(server, model, data[model], rate, 0.8, 8000), flush=True)
