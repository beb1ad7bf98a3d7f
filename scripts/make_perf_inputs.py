"""Generate perf_analyzer --input-data files (deterministic: same seed, same files).

mixed_sla.json  one entry per request: INPUT_IDS of a long-tailed length in 16..512 and
                SLA_MS from the classes 50/100/200 ms (for the *_explicit models)
mixed.json      the very same sequences without SLA_MS (for the *_native models, which
                declare no SLA input)
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

SLA_CLASSES_MS = (50.0, 100.0, 200.0)


def sequence_lengths(rng: np.random.Generator, n: int, lo: int = 16, hi: int = 512) -> np.ndarray:
    """Long-tailed lengths: log-normal around 64 tokens, clipped to [lo, hi]."""
    return np.clip(np.round(rng.lognormal(mean=np.log(64), sigma=0.8, size=n)), lo, hi).astype(int)


def token_ids(rng: np.random.Generator, length: int) -> list[int]:
    """[CLS] ... [SEP] with word-piece ids from the common part of the BERT vocabulary."""
    body = rng.integers(1000, 30000, size=length - 2).tolist()
    return [101, *body, 102]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                      "perf_analyzer_configs"))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    with_sla, without = [], []
    for length in sequence_lengths(rng, args.count):
        ids = {"content": token_ids(rng, int(length)), "shape": [int(length)]}
        sla = float(rng.choice(SLA_CLASSES_MS))
        with_sla.append({"INPUT_IDS": ids, "SLA_MS": {"content": [sla], "shape": [1]}})
        without.append({"INPUT_IDS": ids})
    for name, data in (("mixed_sla.json", with_sla), ("mixed.json", without)):
        with open(os.path.join(args.out, name), "w") as fh:
            json.dump({"data": data}, fh, separators=(",", ":"))
        print(f"wrote {name}: {len(data)} requests")


if __name__ == "__main__":
    main()
