"""``explicit-batching``: the operator's command line (the design's tuning road map and
fire-fighting manual, and the tools that run beside a server).

    explicit-batching calibrate ...        cold-start, step, reset, table: the tuning road map
    explicit-batching monitor --check-metric-drift ...
    explicit-batching analyze --control-feedback-lag ...
    explicit-batching compare ...          explicit vs native, same load, one run
    explicit-batching simulate ...         the simulator on a workload spec (--tune: grid search)
    explicit-batching export-model ...     a self-contained model folder for another repository
    explicit-batching benchmark-mode ...   serve_late on/off for perf_analyzer past the knee
    explicit-batching serve | supervise | sidecar ...   beside the server (server_cmds)

Each command lives in its own module and registers itself here. Exit codes are
``exit_codes``' (0 ok, 1 a finding, 2 usage, 3 cannot reach the server).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click

from . import (analyze_cmd, benchmark_mode, calibrate, compare, export_cmd, monitor_cmd,
               server_cmds, simulate_cmd)
from .exit_codes import EPILOG, ExitCodeGroup

DISTRIBUTION = "explicit-batching"
# The Triton release the project is built and tested against (the server binary of the
# nvidia-pytriton wheel; requirements.txt pins it and tritonclient alike).
TESTED_TRITON = "tritonserver 2.51 (NGC release 24.10), tritonclient 2.51.0"


def version_text() -> str:
    """The package version (from its installed metadata) and the Triton release tested."""
    try:
        ours = version(DISTRIBUTION)
    except PackageNotFoundError:
        ours = "unknown (not installed: pip install -e .)"
    return f"{DISTRIBUTION} {ours}; tested with {TESTED_TRITON}"


@click.group(cls=ExitCodeGroup, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(message=version_text(), package_name=DISTRIBUTION)
def main() -> None:
    """Explicit-control dynamic batching for Triton: operator tools."""


for module in (calibrate, monitor_cmd, analyze_cmd, compare, simulate_cmd,
               export_cmd, benchmark_mode):
    main.add_command(module.command)
for command in server_cmds.COMMANDS:
    main.add_command(command)


def _with_epilog(command: click.Command) -> None:
    """Every command's --help ends with the exit codes."""
    command.epilog = command.epilog or EPILOG
    for sub in getattr(command, "commands", {}).values():
        _with_epilog(sub)


_with_epilog(main)


if __name__ == "__main__":  # pragma: no cover
    main()
