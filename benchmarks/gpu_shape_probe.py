"""How a real encoder's batch time depends on seeing a batch shape for the first time.

Serving runs batches of ever-changing shapes (batch size x longest length), while a cost
table is measured on a few shapes, each warmed up first. This times, in one plain process
on ``--device``:

1. a fixed shape (8 x 64), repeated;
2. ``--shapes`` random shapes (batch 1-64, lengths from the benchmark's long-tailed mix),
   each the first time it is seen;
3. the same shapes again, in the same order (now each seen once before).

With ``--shape-bucket-tokens N`` the encoder pads each batch to a bucket shape (warmed when
it loads on a GPU), so (2) should come down to (3).

If (2) is far above (3) and (1), new shapes are what a server pays for, not the batch.

    python3 scripts/gpu_shape_probe.py --model bert_large --out DIR   # on the GPU host

(``scripts/gpu_shape_probe.py`` is the entry point.)

Writes ``shape_probe_<model>.json`` in ``--out`` and prints one line per phase.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from benchmarks import bench_setup as BENCH
from benchmarks.gpu_plan import FAMILIES
from triton_backend.device_calibration import random_sequences


def timed(encoder, batches) -> list[float]:
    out = []
    for seqs in batches:
        start = time.perf_counter()
        encoder.run(seqs)
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def summary(ms: list[float]) -> dict:
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 3),
            "p90_ms": round(float(np.percentile(ms, 90)), 3), "max_ms": round(max(ms), 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(FAMILIES), default="bert_large")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--shapes", type=int, default=60)
    parser.add_argument("--bert-layers", type=int, default=24)
    parser.add_argument("--shape-bucket-tokens", type=int, default=0,
                        help="the encoder's shape_bucket_tokens (its buckets warmed first)")
    parser.add_argument("--out", default=".")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(7)
    encoder = FAMILIES[args.model].encoder(args.device, args.bert_layers,
                                           args.shape_bucket_tokens)
    shapes = list(zip(rng.integers(1, 65, size=args.shapes).tolist(),
                      BENCH.LENGTHS.draw(rng, args.shapes).tolist()))
    timed(encoder, [random_sequences(1, 16)] * 3)  # CUDA context, first kernels
    result = {"model": args.model, "device": args.device, "shapes": shapes,
              "shape_bucket_tokens": args.shape_bucket_tokens,
              "fixed_8x64": summary(timed(encoder, [random_sequences(8, 64)] * 30))}
    per_shape = [random_sequences(b, n) for b, n in shapes]
    result["first_seen"] = summary(first := timed(encoder, per_shape))
    result["seen_before"] = summary(again := timed(encoder, per_shape))
    result["first_vs_again_ms"] = [[b, n, round(f, 2), round(a, 2)]
                                   for (b, n), f, a in zip(shapes, first, again)]
    for key in ("fixed_8x64", "first_seen", "seen_before"):
        print(f"shape probe {args.model}: {key}: {result[key]}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    suffix = f"_b{args.shape_bucket_tokens}" if args.shape_bucket_tokens else ""
    with open(os.path.join(args.out, f"shape_probe_{args.model}{suffix}.json"), "w",
              encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    return 0
