"""Run the perception sidecar as its own process, serving samples to model instances
through a file: ``explicit-batching sidecar --metrics-url http://localhost:8002/metrics``
(or ``python -m sidecar`` with the same arguments).

Point the explicit models at it with the model-config parameter
``sidecar: "file:/dev/shm/explicit_batching_sidecar.json"``.
"""

from __future__ import annotations

import signal
import sys
import threading

from .sampler import SampleFile, Sidecar

DEFAULT_PATH = "/dev/shm/explicit_batching_sidecar.json"


def main(argv: list[str] | None = None) -> int:
    """``python -m sidecar``: ``explicit-batching sidecar``."""
    from operator_tools.server_cmds import run_as_module, sidecar_command  # noqa: PLC0415

    return run_as_module(sidecar_command, argv, "python -m sidecar")


def run(metrics_url: str | None, out_path: str, period_ms: float, timeout_ms: float,
        nvml_index: int) -> int:
    """Sample until SIGINT or SIGTERM, rewriting ``out_path`` every ``period_ms``."""
    out = SampleFile(out_path)
    sidecar = Sidecar(metrics_url, period_ms / 1000.0, timeout_ms / 1000.0,
                      log=lambda msg: print(msg, file=sys.stderr, flush=True),
                      nvml_index=nvml_index)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    sidecar.start(sink=out.write)
    print(f"sidecar: writing samples to {out_path} every {period_ms:g} ms", flush=True)
    done.wait()
    sidecar.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
