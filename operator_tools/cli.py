"""``explicit-batching``: the operator's command line (the design's tuning road map and
fire-fighting manual).

    explicit-batching calibrate ...        cold-start, step, reset, table: the tuning road map
    explicit-batching monitor --check-metric-drift ...
    explicit-batching analyze --control-feedback-lag ...
    explicit-batching compare ...          explicit vs native, same load, one run
    explicit-batching simulate ...         the simulator on a workload spec (--tune: grid search)
    explicit-batching export-model ...     a self-contained model folder for another repository

Each command lives in its own module and registers itself here.
"""

from __future__ import annotations

import click

from . import analyze_cmd, calibrate, compare, export_cmd, monitor_cmd, simulate_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Explicit-control dynamic batching for Triton: operator tools."""


for module in (calibrate, monitor_cmd, analyze_cmd, compare, simulate_cmd,
               export_cmd):
    main.add_command(module.command)


if __name__ == "__main__":  # pragma: no cover
    main()
