"""The benchmarks' one model-repository builder: model folders copied from the shipped
repository (no bytecode caches), their ``config.pbtxt`` edited as Triton's protobuf
(``server_ops.intake_config``'s ``parse``/``render``), never as text, so a layout
change in a shipped config cannot silently leave a setting behind."""

from __future__ import annotations

import os
import shutil
from typing import Callable, Mapping

from tritonclient.grpc import model_config_pb2 as mc

from server_ops.intake_config import parse, render
from server_ops.launcher import DEFAULT_MODEL_REPOSITORY

Edit = Callable[[mc.ModelConfig], None]


def copy_model(src: str, repo: str, name: str | None = None, *,
               source: str = DEFAULT_MODEL_REPOSITORY, params: Mapping[str, str] | None = None,
               text_writer: Callable[[str], str] | None = None,
               edit: Edit | None = None) -> str:
    """Model ``src`` of ``source`` copied into ``repo`` as ``name`` (default: ``src``), its
    config named so, then ``text_writer`` (one of ``intake_config``'s writers) applied,
    ``edit`` run on the protobuf and ``params`` set (``parameters`` key -> string value).
    Returns the model's folder."""
    name = name or src
    folder = os.path.join(repo, name)
    shutil.copytree(os.path.join(source, src), folder,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    edit_model(folder, name=name, params=params, text_writer=text_writer, edit=edit)
    return folder


def edit_model(folder: str, *, name: str | None = None, params: Mapping[str, str] | None = None,
               text_writer: Callable[[str], str] | None = None, edit: Edit | None = None) -> None:
    """Edit the ``config.pbtxt`` of the model in ``folder`` in place (see ``copy_model``;
    ``name``: the model's new name); its leading comment lines are kept."""
    path = os.path.join(folder, "config.pbtxt")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if text_writer is not None:
        text = text_writer(text)
    model = parse(text)
    if name is not None:
        model.name = name
    if edit is not None:
        edit(model)
    for key, value in (params or {}).items():
        model.parameters[key].string_value = value
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render(model, text))


def set_max_batch_size(size: int) -> Edit:
    def edit(model: mc.ModelConfig) -> None:
        model.max_batch_size = size
    return edit
