"""Sums up per-call timelines (``EXPLICIT_BATCHING_TIMELINE_DIR``): for each file, the calls
by their first batch's former (``as_handed``: run as Triton handed them over, launched
first or taken whole; ``length_aware_emergency``: decided by the danger zone's emergency
policy), the host time inside a call (its span less its batches' run on the executor)
and, where ``zone_marks_experiment.py`` added them, the zones and pressures.

    python3 results/danger_zone_calls/timeline_formers.py DIR/*.timeline.jsonl
"""
import collections
import json
import statistics as st
import sys

for path in sys.argv[1:]:
    calls = [json.loads(line) for line in open(path)]
    ran = [c for c in calls if c["batches"]]
    formers = collections.Counter(c["batches"][0][5] for c in ran)
    host = collections.defaultdict(list)
    for c in ran:
        if c["requests"] >= 8:
            host[c["batches"][0][5]].append(
                1e6 * (c["return_s"] - c["start_s"] - sum(b[6] for b in c["batches"])))
    print(path.split("/")[-1], f"{len(ran)} calls:", dict(formers.most_common()))
    for former, values in sorted(host.items()):
        print(f"  {former}: calls of 8 or more {len(values)}, host us inside the call "
              f"median {st.median(values):.0f}")
    marked = [c["marks"]["z"] for c in ran if "z" in c.get("marks", {})]
    if marked:
        print("  zones (0 safe, 1 no-man's land, 2 danger):",
              dict(collections.Counter(z[0] for z in marked)))
        for i, name in enumerate(("utilisation", "queue depth", "P99 CV")):
            print(f"  {name} pressure median {st.median(z[2][i] for z in marked):.3f}")
        print(f"  utilisation median {st.median(z[3] for z in marked):.3f}, "
              f"score median {st.median(z[1] for z in marked):.3f}")
