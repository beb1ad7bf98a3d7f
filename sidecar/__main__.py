"""Run the perception sidecar as its own process, serving samples to model instances
through a file: ``python -m sidecar --metrics-url http://localhost:8002/metrics``.

Point the explicit models at it with the model-config parameter
``sidecar: "file:/dev/shm/explicit_batching_sidecar.json"``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .sampler import SampleFile, Sidecar

DEFAULT_PATH = "/dev/shm/explicit_batching_sidecar.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics-url", default=None,
                        help="Triton's metrics endpoint (default: NVML only)")
    parser.add_argument("--out", default=DEFAULT_PATH, help="sample file to (re)write")
    parser.add_argument("--period-ms", type=float, default=200.0)
    parser.add_argument("--timeout-ms", type=float, default=500.0,
                        help="deadline of one whole scrape (connect, headers and body)")
    parser.add_argument("--nvml-index", type=int, default=0,
                        help="NVML index of the GPU the models run on (default 0; with "
                             "CUDA_VISIBLE_DEVICES=2,3 CUDA device 0 is NVML device 2)")
    args = parser.parse_args(argv)
    if args.nvml_index < 0:
        parser.error(f"--nvml-index must be >= 0, got {args.nvml_index}")
    out = SampleFile(args.out)
    sidecar = Sidecar(args.metrics_url, args.period_ms / 1000.0, args.timeout_ms / 1000.0,
                      log=lambda msg: print(msg, file=sys.stderr, flush=True),
                      nvml_index=args.nvml_index)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    sidecar.start(sink=out.write)
    print(f"sidecar: writing samples to {args.out} every {args.period_ms:g} ms", flush=True)
    done.wait()
    sidecar.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
