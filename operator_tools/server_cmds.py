"""The tools that run beside a server, as subcommands of ``explicit-batching``:

    explicit-batching serve ...            tritonserver on a model repository (make serve)
    explicit-batching supervise ...        the stub supervisor for a running server
    explicit-batching sidecar ...          the perception sidecar as its own process

Each was a ``python -m`` tool of its own; those entry points stay (the Makefile and the
docs call them) and run these very commands through ``run_as_module``. The work itself
stays in ``server_ops.launcher``, ``server_ops.supervisor`` and ``sidecar``: these
commands only parse.
"""

from __future__ import annotations

import os
from typing import Sequence

import click

from server_ops.launcher import LOCAL_ADDRESS
from sidecar.__main__ import DEFAULT_PATH as SIDECAR_FILE

from . import resources
from .exit_codes import UNREACHABLE, endpoint_named, is_unreachable, unreachable


def run_as_module(command: click.Command, argv: Sequence[str] | None, prog_name: str) -> int:
    """Run ``command`` on ``argv`` as ``python -m`` does and return its exit status: click's
    own for usage errors (2) and ``--help`` (0), 1 for an error it explains, 3 when the
    server cannot be reached, else what the command exits with."""
    try:
        status = command.main(args=list(argv) if argv is not None else None,
                              prog_name=prog_name, standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    except Exception as exc:
        if not is_unreachable(exc):
            raise
        unreachable(endpoint_named(list(argv or [])), exc).show()
        return UNREACHABLE
    return status if isinstance(status, int) else 0


def _exit(ctx: click.Context, status: int) -> None:
    """Exit with ``status`` under the console script and under ``run_as_module`` alike."""
    if status:
        ctx.exit(status)


@click.command(name="serve", context_settings={"ignore_unknown_options": True,
                                               "allow_extra_args": True})
@click.option("--model-repository", type=click.Path(file_okay=False), default=None,
              show_default="the shipped model_repository/",
              help="The model repository tritonserver serves.")
@click.option("--http-port", type=int, default=lambda: int(os.environ.get("HTTP_PORT", 8000)),
              show_default="$HTTP_PORT, else 8000")
@click.option("--grpc-port", type=int, default=None, show_default="HTTP port + 1")
@click.option("--metrics-port", type=int, default=None, show_default="HTTP port + 2")
@click.option("--address", default=LOCAL_ADDRESS, show_default=f"{LOCAL_ADDRESS}, this machine only",
              help="The address HTTP, gRPC and metrics bind (0.0.0.0: every interface).")
@click.option("--no-supervise", is_flag=True,
              help="Do not reload a model whose Python stub died.")
@click.argument("tritonserver_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def serve_command(ctx: click.Context, model_repository: str | None, http_port: int,
                  grpc_port: int | None, metrics_port: int | None, address: str,
                  no_supervise: bool, tritonserver_args: tuple[str, ...]) -> None:
    """Start tritonserver (the nvidia-pytriton wheel's, or $TRITONSERVER) on a model
    repository and wait for Ctrl-C. Any other argument goes to tritonserver as it is, e.g.
    --model-control-mode=explicit --load-model=* (the default with the supervisor)."""
    from server_ops import launcher  # noqa: PLC0415

    _exit(ctx, launcher.serve(model_repository or resources.model_templates_dir(),
                              http_port, grpc_port, metrics_port, address, not no_supervise,
                              list(tritonserver_args)))


@click.command(name="supervise")
@click.option("--server-pid", type=int, required=True, help="The tritonserver process.")
@click.option("--url", default="localhost:8000", show_default=True,
              help="The server's HTTP host:port.")
@click.option("--period-s", type=click.FloatRange(0.05, 60), default=0.5, show_default=True)
@click.argument("models", nargs=-1, required=True)
@click.pass_context
def supervise_command(ctx: click.Context, server_pid: int, url: str, period_s: float,
                      models: tuple[str, ...]) -> None:
    """Reload any of MODELS whose Python-backend stub died (same host: reads /proc), until
    the server process is gone."""
    from server_ops.supervisor import supervise  # noqa: PLC0415

    _exit(ctx, supervise(server_pid, url, models, period_s))


@click.command(name="sidecar")
@click.option("--metrics-url", default=None, show_default="none: NVML only",
              help="Triton's metrics endpoint.")
@click.option("--out", "out_path", default=SIDECAR_FILE,
              show_default=True, help="The sample file to (re)write.")
@click.option("--period-ms", type=click.FloatRange(min=1.0), default=200.0, show_default=True)
@click.option("--timeout-ms", type=click.FloatRange(min=1.0), default=500.0, show_default=True,
              help="Deadline of one whole scrape (connect, headers and body).")
@click.option("--nvml-index", type=click.IntRange(min=0), default=0, show_default=True,
              help="NVML index of the GPU the models run on (with CUDA_VISIBLE_DEVICES=2,3 "
                   "CUDA device 0 is NVML device 2).")
@click.pass_context
def sidecar_command(ctx: click.Context, metrics_url: str | None, out_path: str,
                    period_ms: float, timeout_ms: float, nvml_index: int) -> None:
    """Run the perception sidecar as its own process, writing samples to a file the
    models read (model-config parameter sidecar: "file:PATH")."""
    from sidecar.__main__ import run  # noqa: PLC0415

    _exit(ctx, run(metrics_url, out_path, period_ms, timeout_ms, nvml_index))


COMMANDS = (serve_command, supervise_command, sidecar_command)
