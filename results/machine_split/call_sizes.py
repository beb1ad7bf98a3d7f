"""An experiment's script, kept with its page (not a tool): a per-call timeline file
(``EXPLICIT_BATCHING_TIMELINE_DIR``, ``triton_backend/timeline.py``; the benchmark's
native model writes one too) summarised per segment of load (a gap of over 0.5 s between
calls starts a new one): the rate, the stub's busy share (the calls' wall time over the
segment's), requests a call, and by call size the call's wall time, the executor's share
and how many calls were launched first. Run on the files a ``machine_split.py`` run left:

    EXPLICIT_BATCHING_TIMELINE_DIR=DIR \
        .venv/bin/python results/machine_split/machine_split.py host_bound 6000 2
    python3 results/machine_split/call_sizes.py DIR/x_new.timeline.jsonl \
        DIR/emulated_native.timeline.jsonl
"""
import json
import statistics as st
import sys
from collections import Counter, defaultdict


def segments(records: list[dict]) -> list[list[dict]]:
    out, cur = [], []
    for r in records:
        if cur and r["gap_s"] is not None and r["gap_s"] > 0.5:
            out.append(cur)
            cur = []
        cur.append(r)
    return out + [cur]


def summary(seg: list[dict]) -> list[str]:
    n = sum(r["requests"] for r in seg)
    span = seg[-1]["return_s"] - seg[0]["start_s"]
    busy = sum(r["return_s"] - r["start_s"] for r in seg)
    first = sum(r["launched_first"] for r in seg) / len(seg)
    batches = Counter(len(r["batches"]) for r in seg)
    gaps = [r["gap_s"] for r in seg[1:]]
    median = st.median(r["requests"] for r in seg)
    lines = [f"{len(seg)} calls, {n / span:.0f} req/s, stub busy {busy / span:.2f} of the "
             f"time, {n / len(seg):.1f} requests a call (median {median}), "
             f"launched first {first:.2f}, batches a call {dict(sorted(batches.items()))}",
             f"  call {1000 * busy / len(seg):.3f} ms mean; gap between calls "
             f"{1000 * st.mean(gaps):.3f} ms mean, {1000 * st.median(gaps):.3f} median"]
    by_size = defaultdict(list)
    for r in seg:
        by_size[min(r["requests"] // 8, 8)].append(r)
    for b, rs in sorted(by_size.items()):
        wall = st.mean(r["return_s"] - r["start_s"] for r in rs) * 1000
        executor = st.mean(sum(x[6] for x in r["batches"]) for r in rs) * 1000
        size = st.mean(r["requests"] for r in rs)
        lines.append(f"  calls of {8 * b}-{8 * b + 7 if b < 8 else ''}: {len(rs)} calls, "
                     f"{size:.1f} requests, wall {wall:.3f} ms, executor {executor:.3f} ms, "
                     f"launched first {sum(r['launched_first'] for r in rs) / len(rs):.2f}")
    return lines


for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    print(f"== {path.rsplit('/', 1)[-1]}")
    for seg in segments(records):
        if len(seg) >= 200:  # warm-ups are shorter
            print("\n".join(summary(seg)))
