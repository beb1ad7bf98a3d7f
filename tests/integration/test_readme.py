"""The README's snippets, run as written against a real server: the tritonclient snippet,
the curl command and the export-model command (in a scratch repository)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from triton_backend.intake_config import parse
from triton_backend.model_settings import ModelSettings

pytestmark = pytest.mark.integration
README = os.path.join(REPO_ROOT, "README.md")


def _blocks(language: str) -> list[str]:
    with open(README) as fh:
        return re.findall(rf"```{language}\n(.*?)```", fh.read(), flags=re.S)


def _one(language: str, marker: str) -> str:
    found = [b for b in _blocks(language) if marker in b]
    assert len(found) == 1, f"README: expected one {language} block with {marker!r}"
    return found[0]


def test_the_tritonclient_snippet_returns_an_embedding(server):
    code = _one("python", "InferenceServerClient").replace("localhost:8000", server.http_url)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own README
    assert scope["embedding"].shape == (1, 384)
    assert np.isfinite(scope["embedding"]).all()


def test_the_curl_command_returns_an_embedding(server):
    command = _one("bash", "curl ").replace("localhost:8000", server.http_url)
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    outputs = {o["name"]: o for o in json.loads(out)["outputs"]}
    assert outputs["EMBEDDING"]["shape"] == [1, 384]
    assert len(outputs["EMBEDDING"]["data"]) == 384


def test_the_export_model_command_writes_a_folder_whose_parameters_load(tmp_path):
    command = _one("bash", "export-model")
    command = command.replace(".venv/bin/explicit-batching",
                              os.path.join(os.path.dirname(sys.executable), "explicit-batching"))
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, timeout=120,
                   capture_output=True, text=True)
    name = re.search(r"--name (\S+)", command).group(1)
    repo = tmp_path / re.search(r"--output-repository (\S+)", command).group(1)
    config = parse((repo / name / "config.pbtxt").read_text())
    params = {k: v.string_value for k, v in config.parameters.items()}
    settings = ModelSettings.from_parameters(name, params)  # every key known, every value valid
    assert settings.inner_model == "emulated_device"
    assert (repo / name / "1" / "model.py").is_file()
