"""Measured cost tables in and out of hardware profiles (``explicit-batching calibrate
table --table-json`` / ``calibrate table --measure``).

A table file is the JSON that ``scripts/gpu_bench.py``, ``calibrate table --measure`` and
``../shared/gpu/h200_minilm_costs.json`` write: ``{"rows": [{"batch", "length", "ms"}],
"device": ..., "date": ...}``. Writing it into a profile sets ``cost_model.table`` (the
scheduler's seed, refit online) and ``cost_model.table_source``; every other line of the
profile stays as it was, and the result is validated before it replaces anything.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from scheduler_core.profile import HardwareProfile, ProfileError
from scheduler_core.profile_limits import MAX_TABLE_SOURCE_CHARS

from .profile_editor import write_profile

Row = tuple[int, int, float]


def rows_from_document(doc: Any, where: str) -> list[Row]:
    """``[(batch, length, ms)]`` from a table document (``{"rows": [...]}`` or a bare list of
    ``{"batch", "length", "ms"}`` mappings / ``[b, L, ms]`` triples)."""
    rows = doc.get("rows") if isinstance(doc, Mapping) else doc
    if not isinstance(rows, list) or not rows:
        raise ProfileError(f"{where}: expected a non-empty 'rows' list of batch/length/ms cells")
    out = []
    for k, cell in enumerate(rows):
        if isinstance(cell, Mapping):
            cell = (cell.get("batch"), cell.get("length"), cell.get("ms"))
        if not isinstance(cell, (list, tuple)) or len(cell) != 3:
            raise ProfileError(f"{where}: rows[{k}] is not a batch/length/ms cell")
        out.append((cell[0], cell[1], cell[2]))
    return out


def read_table_json(path: str) -> tuple[list[Row], str]:
    """(rows, source note) from a table JSON file."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    rows = rows_from_document(doc, path)
    parts = [str(doc.get(k)) for k in ("device", "date") if isinstance(doc, Mapping) and doc.get(k)]
    source = "measured" + (" on " + ", ".join(parts) if parts else f" ({path})")
    return rows, source


def write_table_profile(base_path: str, out_path: str, rows: Sequence[Row], source: str,
                        comment: str | None = None) -> HardwareProfile:
    """``base_path`` with ``cost_model.table`` = ``rows`` written to ``out_path`` (validated;
    its name becomes the file's stem unless it is the base itself)."""
    table = [[int(b), int(n), round(float(ms), 4)] for b, n, ms in rows]
    return write_profile(base_path, out_path,
                         {"cost_model": {"table_source": source[:MAX_TABLE_SOURCE_CHARS],
                                        "table": table}},
                         comment=comment, rename=out_path != base_path)


def measure_minilm_table(profile: HardwareProfile, device: str, budget_s: float
                         ) -> tuple[list[Row], str]:
    """Time the real MiniLM executor on ``device`` over the profile's grid (the same
    measurement the model makes when it loads, with a longer budget)."""
    from triton_backend.executors import MiniLMEncoder
    from triton_backend.load_calibration import measure_profile_grid

    encoder = MiniLMEncoder(intra_op_threads=0, device=device)
    result, _, _ = measure_profile_grid(profile, encoder.run, budget_s)
    if not result.rows:
        raise ValueError(f"no cell of the grid fit the {budget_s:g} s budget")
    rows = [(r["batch"], r["length"], r["ms"]) for r in result.rows]
    note = "" if result.complete else f", {len(result.skipped)} cells cut by the budget"
    return rows, f"measured by explicit-batching calibrate on {device}{note}"
