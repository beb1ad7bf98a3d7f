"""``calibrate table``: a measured cost table written into a profile, from one of three
sources: a table file (``--table-json``), the real MiniLM executor on this host
(``--measure``), or the user's own inner model through its Triton endpoint (``--url`` and
``--model``: ``remote_table``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import click

from scheduler_core.profile import ProfileError
from scheduler_core.profile_files import load_profile
from triton_backend.device_calibration import CalibrationError

from ..output import echo_for, emit_json
from .remote_table import InputSpecError, measure_remote_table

SOURCES = ("--table-json FILE", "--measure", "--url HOST:PORT with --model")


def parse_sizes(text: str | None, option: str) -> list[int] | None:
    """``"1,8,32"`` as ``[1, 8, 32]`` (positive integers); None for None."""
    if text is None:
        return None
    try:
        sizes = [int(x) for x in re.split(r"[,\s]+", text.strip()) if x]
    except ValueError:
        raise click.BadParameter(f"expected integers separated by commas, got {text!r}",
                                 param_hint=option) from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"expected positive integers, got {text!r}", param_hint=option)
    return sizes


def _server_error() -> tuple[type[BaseException], ...]:
    from tritonclient.utils import InferenceServerException  # noqa: PLC0415

    return (InferenceServerException,)


def write_table(opts: Mapping[str, Any]) -> None:
    """calibrate table: a measured cost table into ``--base-profile``, saved to ``--out``."""
    from ..cost_table_io import measure_minilm_table, read_table_json, write_table_profile

    given = [bool(opts["table_json"]), bool(opts["measure_table"]), bool(opts["table_url"])]
    if sum(given) != 1:
        raise click.UsageError(f"give exactly one of {', '.join(SOURCES)}")
    if opts["table_url"] and not opts["table_model"]:
        raise click.UsageError("--url needs --model: the inner model to measure")
    if not opts["base_profile"]:
        raise click.UsageError("calibrate table needs --base-profile")
    batch_sizes = parse_sizes(opts["batch_sizes"], "--batch-sizes")
    lengths = parse_sizes(opts["lengths"], "--lengths")
    try:
        if opts["table_json"]:
            rows, source = read_table_json(opts["table_json"])
        elif opts["measure_table"]:
            rows, source = measure_minilm_table(load_profile(opts["base_profile"]),
                                                opts["table_device"], opts["table_budget_s"])
        else:
            rows, source = measure_remote_table(
                load_profile(opts["base_profile"]), opts["table_url"], opts["table_model"],
                opts["protocol"], opts["table_budget_s"], opts["input_name"], batch_sizes,
                lengths)
        profile = write_table_profile(opts["base_profile"], opts["out_path"], rows, source)
    except InputSpecError as exc:
        raise click.UsageError(str(exc)) from None
    except (ProfileError, OSError, ValueError, CalibrationError, *_server_error()) as exc:
        raise click.ClickException(str(exc).strip() or type(exc).__name__) from exc
    say = echo_for(opts["as_json"])
    say(f"{opts['out_path']}: cost_model.table with {len(profile.cost_model.table)} cells "
        f"({profile.cost_model.table_source}); validated")
    if opts["as_json"]:
        emit_json({"kind": "cost_table", "profile": opts["out_path"],
                   "source": profile.cost_model.table_source,
                   "rows": [{"batch": b, "length": n, "ms": ms}
                            for b, n, ms in profile.cost_model.table]})
