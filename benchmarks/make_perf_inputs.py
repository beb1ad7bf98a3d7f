"""Generate the perf_analyzer input files in perf_analyzer_configs/ (deterministic: same
seed, same bytes; ``tests/unit/operator_tools/test_perf_analyzer_configs.py`` checks that
the shipped files are exactly what this script writes).

mixed_sla.json      200 entries: INPUT_IDS of a long-tailed length in 16..512 (log-normal
                    around 64 tokens) and SLA_MS from the classes 50/100/200 ms (for the
                    *_explicit models)
mixed.json          the very same sequences without SLA_MS (for the *_native models, which
                    declare no SLA input)
bimodal_sla.json    200 entries of a bimodal mix: 80 % short (16..64 tokens), 20 % long
                    (256..512), SLA_MS 50/100/200 ms in equal shares
bimodal.json        the same sequences without SLA_MS
traces/poisson_60rps_20s.intervals   --request-intervals trace: Poisson, 60 req/s, 20 s
traces/bursty_60rps_20s.intervals    --request-intervals trace: on-off bursts (180 req/s
                    for ~0.25 s, 30 req/s for ~1 s between them; mean 60 req/s), 20 s

Intervals are integer microseconds, one per line, the first from the start
(``simulation.workload.write_request_intervals``). perf_analyzer pairs send k with
data entry k, cycling through the entries, so any trace replays with any data file.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from simulation import workload as W

SLA_CLASSES_MS = (50.0, 100.0, 200.0)
DEFAULT_OUT = os.path.join(REPO_ROOT, "perf_analyzer_configs")
BIMODAL = W.BimodalLengths(short_lo=16, short_hi=64, long_lo=256, long_hi=512,
                           long_fraction=0.2)
TRACE_RATE_RPS = 60.0
TRACE_DURATION_S = 20.0
TRACES = {
    "poisson_60rps_20s.intervals": W.Poisson(TRACE_RATE_RPS),
    # mean = (180 * 0.25 + 30 * 1.0) / 1.25 = 60 req/s
    "bursty_60rps_20s.intervals": W.Bursty(low_rps=TRACE_RATE_RPS / 2,
                                           high_rps=TRACE_RATE_RPS * 3,
                                           mean_low_s=1.0, mean_high_s=0.25),
}


def sequence_lengths(rng: np.random.Generator, n: int, lo: int = 16, hi: int = 512) -> np.ndarray:
    """Long-tailed lengths: log-normal around 64 tokens, clipped to [lo, hi]."""
    return np.clip(np.round(rng.lognormal(mean=np.log(64), sigma=0.8, size=n)), lo, hi).astype(int)


def token_ids(rng: np.random.Generator, length: int) -> list[int]:
    """[CLS] ... [SEP] with word-piece ids from the common part of the BERT vocabulary."""
    body = rng.integers(1000, 30000, size=length - 2).tolist()
    return [101, *body, 102]


def mixed(count: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(entries with SLA_MS, the same without): the long-tailed mix (one generator for
    lengths, tokens and SLAs, in that order per entry: the historic mixed*.json draw)."""
    rng = np.random.default_rng(seed)
    with_sla, without = [], []
    for length in sequence_lengths(rng, count):
        ids = {"content": token_ids(rng, int(length)), "shape": [int(length)]}
        sla = float(rng.choice(SLA_CLASSES_MS))
        with_sla.append({"INPUT_IDS": ids, "SLA_MS": {"content": [sla], "shape": [1]}})
        without.append({"INPUT_IDS": ids})
    return with_sla, without


def bimodal(count: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(entries with SLA_MS, the same without): the bimodal mix, drawn with the workload
    module's own classes (the simulator's mix)."""
    length_rng, sla_rng = (np.random.default_rng(s)
                           for s in np.random.SeedSequence(seed).spawn(2))
    lengths = BIMODAL.draw(length_rng, count).tolist()
    slas = W.SlaMix(SLA_CLASSES_MS).draw(sla_rng, count).tolist()
    arrivals = [W.Arrival(0.0, n, s) for n, s in zip(lengths, slas)]
    return (W.input_data(arrivals, seed, include_sla=True)["data"],
            W.input_data(arrivals, seed, include_sla=False)["data"])


def write_all(out: str, count: int = 200, seed: int = 7, trace_seed: int = 60) -> list[str]:
    """Write every generated file under ``out``; returns their paths relative to it."""
    written = []
    for stem, (with_sla, without) in (("mixed", mixed(count, seed)),
                                      ("bimodal", bimodal(count, seed))):
        for name, data in ((f"{stem}_sla.json", with_sla), (f"{stem}.json", without)):
            with open(os.path.join(out, name), "w") as fh:
                json.dump({"data": data}, fh, separators=(",", ":"))
            written.append(name)
    os.makedirs(os.path.join(out, "traces"), exist_ok=True)
    for name, process in TRACES.items():
        arrivals = W.generate(process, TRACE_DURATION_S, trace_seed)
        rel = os.path.join("traces", name)
        W.write_request_intervals(arrivals, os.path.join(out, rel))
        written.append(rel)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="entries per input-data file")
    parser.add_argument("--seed", type=int, default=7, help="seed of the input-data files")
    parser.add_argument("--trace-seed", type=int, default=60, help="seed of the traces")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for rel in write_all(args.out, args.count, args.seed, args.trace_seed):
        print(f"wrote {os.path.join(args.out, rel)}")


if __name__ == "__main__":
    main()
