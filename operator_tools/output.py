"""Machine-readable output of the report commands (``--json``): one JSON object on stdout,
the same figures as the text report, and nothing else on stdout (progress, notes and the
text go to stderr), so ``explicit-batching monitor ... --json | jq`` works.

Floats that are not numbers (a percentile of nothing, NaN) are written as ``null``: JSON
has no NaN, and a reader should not have to special-case it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Mapping

import click

from .report import Summary

json_option = click.option(
    "--json", "as_json", is_flag=True,
    help="Print one JSON object with the report's figures on stdout, nothing else there "
         "(the text and notes go to stderr).")


def echo_for(as_json: bool) -> Callable[..., None]:
    """``click.echo`` for the text report: stdout normally, stderr under ``--json``."""
    return lambda message="": click.echo(message, err=as_json)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types: dataclasses and mappings as objects (keys as
    strings), sequences as lists, non-finite floats as None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):  # a numpy scalar
        return jsonable(value.item())
    return str(value)


def _key(key: Any) -> str:
    return f"{key:g}" if isinstance(key, float) else str(key)


def summary_dict(summary: Summary) -> dict:
    """One policy's or model's row of the summary table, with the derived rates."""
    doc = jsonable(summary)
    doc["per_class"] = [{**jsonable(c), "attainment": jsonable(c.attainment)}
                        for _, c in sorted(summary.per_class.items())]
    doc.update(throughput_rps=jsonable(summary.throughput_rps),
               goodput_rps=jsonable(summary.goodput_rps),
               sla_attainment=jsonable(summary.sla_attainment))
    return doc


def emit_json(doc: Mapping[str, Any]) -> None:
    """The one JSON object on stdout."""
    click.echo(json.dumps(jsonable(doc), indent=2, allow_nan=False))
