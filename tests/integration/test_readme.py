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

from tritonclient.utils import InferenceServerException

from tests.conftest import REPO_ROOT
from tests.integration.refusals import refused_by_its_own_estimate
from server_ops.intake_config import parse
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


def _sla_ms(snippet: str) -> float:
    """The SLA the snippet asks for (SLA_MS's value, or the sla_ms parameter)."""
    found = re.search(r"np\.array\(\[\[([\d.]+)\]\], dtype=np\.float32\)|\"sla_ms\":\s*([\d.]+)",
                      snippet)
    assert found, "the snippet names no SLA"
    return float(found.group(1) or found.group(2))


def test_the_tritonclient_snippet_returns_an_embedding(server):
    """An embedding, or - the README's SLA is tight for MiniLM on a loaded CPU, whose cost
    correction the tests before this one may have raised - a refusal that gives the model's
    own numbers (estimated finish > SLA). Either way exactly the README's code ran."""
    snippet = _one("python", "InferenceServerClient")
    code = snippet.replace("localhost:8000", server.http_url)
    scope: dict = {}
    try:
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own README
    except InferenceServerException as exc:
        assert refused_by_its_own_estimate(str(exc), _sla_ms(snippet)), str(exc)
        return
    assert scope["embedding"].shape == (1, 384)
    assert np.isfinite(scope["embedding"]).all()


def test_the_curl_command_returns_an_embedding(server):
    """An embedding, or a refusal with the model's own numbers (as above)."""
    snippet = _one("bash", "curl ")
    command = snippet.replace("localhost:8000", server.http_url)
    out = json.loads(subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                                    timeout=60, check=True).stdout)
    if "error" in out:
        assert refused_by_its_own_estimate(out["error"], _sla_ms(snippet)), out
        return
    outputs = {o["name"]: o for o in out["outputs"]}
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
