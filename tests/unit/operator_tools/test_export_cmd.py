"""export-model writes a self-contained model folder; pyproject's extras and package data
stay consistent with what the exporter and the CLI look for."""

from __future__ import annotations

import glob
import os
import re
import tomllib

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from operator_tools import resources
from operator_tools.cli import main
from operator_tools.export_cmd import (MINILM_DISTRIBUTIONS, REQUIREMENTS_FILE,
                                       SERVER_DISTRIBUTIONS, VENDOR_DIR, VENDORED_PACKAGES,
                                       ExportError, export_model, parse_parameters,
                                       render_config, requirement_pins)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def pyproject() -> dict:
    with open(os.path.join(REPO_ROOT, "pyproject.toml"), "rb") as fh:
        return tomllib.load(fh)


def test_export_writes_config_profiles_model_and_vendored_code(tmp_path):
    out = export_model("enc", "enc_explicit", str(tmp_path), hardware_profile="a100",
                       parameters={"scheduler.max_batch_size": "16"})
    assert os.listdir(tmp_path) == ["enc_explicit"]
    config = (tmp_path / "enc_explicit" / "config.pbtxt").read_text()
    assert 'name: "enc_explicit"' in config and "emulated_explicit\"" not in config
    assert 'key: "inner_model" value: { string_value: "enc" }' in config
    assert config.count('key: "hardware_profile"') == 1 and '"a100"' in config
    assert 'key: "scheduler.max_batch_size" value: { string_value: "16" }' in config
    assert "profile_dir" not in config  # profiles/ beside config.pbtxt is the default
    assert (tmp_path / "enc_explicit" / "profiles" / "t4.yaml").is_file()
    model_py = (tmp_path / "enc_explicit" / "1" / "model.py").read_text()
    assert f'"{VENDOR_DIR}"' in model_py and "sys.path.insert(0, _VENDOR)" in model_py
    for package in VENDORED_PACKAGES:
        assert (tmp_path / "enc_explicit" / "1" / VENDOR_DIR / package / "__init__.py").is_file()
    assert not [d for d, subdirs, files in os.walk(out.path)
                if "__pycache__" in subdirs or any(f.endswith(".pyc") for f in files)]
    assert "1/model.py" in out.files and "config.pbtxt" in out.files
    # The sidecar's `python -m` entry is the operator CLI's (it imports operator_tools).
    assert not glob.glob(os.path.join(out.path, "**", "__main__.py"), recursive=True)
    requirements = (tmp_path / "enc_explicit" / REQUIREMENTS_FILE).read_text()
    assert REQUIREMENTS_FILE in out.files and "pip install -r requirements.txt" in requirements
    assert [ln for ln in requirements.splitlines() if not ln.startswith("#")] == \
        requirement_pins()


def test_template_profile_pin_is_dropped_so_nvml_chooses(tmp_path):
    export_model("enc", "e", str(tmp_path))
    config = (tmp_path / "e" / "config.pbtxt").read_text()
    assert "hardware_profile" not in config and 'string_value: "emulated" }' in config


def test_minilm_template_keeps_its_executor_and_default_profile(tmp_path):
    export_model("minilm", "m_explicit", str(tmp_path), template="minilm")
    config = (tmp_path / "m_explicit" / "config.pbtxt").read_text()
    assert 'string_value: "minilm" }' in config and "hardware_profile" not in config
    assert (tmp_path / "m_explicit" / "profiles" / "cpu.yaml").is_file()


def test_existing_folder_is_refused_unless_replaced(tmp_path):
    export_model("enc", "x", str(tmp_path))
    (tmp_path / "x" / "stale.txt").write_text("old")
    with pytest.raises(ExportError, match="exists"):
        export_model("enc", "x", str(tmp_path))
    export_model("enc", "x", str(tmp_path), replace=True)
    assert not (tmp_path / "x" / "stale.txt").exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"inner_model": "enc", "name": "../up"}, "--name"),
    ({"inner_model": "a b", "name": "x"}, "--inner-model"),
    ({"inner_model": "same", "name": "same"}, "inner model's own name"),
    ({"inner_model": "enc", "name": "x", "template": "gpu"}, "--template"),
    ({"inner_model": "enc", "name": "x", "hardware_profile": "v100"}, "has profiles"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, message):
    with pytest.raises(ExportError, match=message):
        export_model(output_repository=str(tmp_path), **kwargs)
    assert os.listdir(tmp_path) == []


def test_parameters_parse_and_bad_ones_are_quoted():
    assert parse_parameters(("a.b=1", "inner_model_check=off")) == {
        "a.b": "1", "inner_model_check": "off"}
    with pytest.raises(ExportError, match="'novalue'"):
        parse_parameters(("novalue",))
    with pytest.raises(ExportError, match="KEY=VALUE"):
        parse_parameters(('k="v"',))


def test_render_config_needs_the_template_name():
    with pytest.raises(ExportError, match="template config"):
        render_config('name: "other"\n', "emulated_explicit", "x", {"inner_model": "enc"})


def test_cli_command(tmp_path):
    result = CliRunner().invoke(main, ["export-model", "--inner-model", "enc", "--name", "e",
                                       "--output-repository", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and (tmp_path / "e" / "1" / "model.py").is_file()
    assert f"pip install -r {tmp_path / 'e' / REQUIREMENTS_FILE}" in result.output
    assert " ".join(requirement_pins()) in result.output
    result = CliRunner().invoke(main, ["export-model", "--inner-model", "enc", "--name", "e",
                                       "--output-repository", str(tmp_path)])
    assert result.exit_code != 0 and "exists" in result.output


def test_server_extra_is_the_base_dependencies_and_pins_numpy_below_2():
    project = pyproject()["project"]
    extras = project["optional-dependencies"]
    assert sorted(extras["server"]) == sorted(project["dependencies"])
    assert "numpy<2" in extras["server"]
    assert "explicit-batching[server]" in extras["cli"]
    assert project["scripts"]["explicit-batching"] == "operator_tools.cli:main"


def test_exported_requirements_are_the_extras_at_the_pinned_versions():
    """requirements.txt of an export names the server (and, for minilm, the minilm) extra,
    each at the version requirements.txt of this repository pins."""
    extras = pyproject()["project"]["optional-dependencies"]
    for extra, names in (("server", SERVER_DISTRIBUTIONS), ("minilm", MINILM_DISTRIBUTIONS)):
        assert sorted(canonicalize_name(Requirement(r).name) for r in extras[extra]) == \
            sorted(canonicalize_name(n) for n in names), extra
    with open(os.path.join(REPO_ROOT, "requirements.txt"), encoding="utf-8") as fh:
        pinned = {canonicalize_name(r.name): str(r.specifier) for r in
                  (Requirement(ln.split("#")[0].strip()) for ln in fh
                   if ln.split("#")[0].strip())}
    for pin in requirement_pins("minilm"):
        name, _, version = pin.partition("==")
        assert pinned.get(canonicalize_name(name)) == f"=={version}", pin


def test_deploy_doc_gives_the_pip_line_an_export_writes():
    with open(os.path.join(REPO_ROOT, "docs", "deploy.md"), encoding="utf-8") as fh:
        doc = fh.read()
    assert "pip install --no-cache-dir -r" in doc and REQUIREMENTS_FILE in doc
    line = re.search(r"^\s*pip install ((?:\S+==\S+ ?)+)$", doc, re.M)
    assert line and line.group(1).split() == requirement_pins()


@pytest.mark.parametrize("package, folder", [
    ("operator_tools.perf_analyzer_configs", "perf_analyzer_configs"),
    ("operator_tools.model_templates", "model_repository"),
])
def test_package_data_ships_every_data_file(package, folder):
    """A data file the CLI reads in a checkout must reach the wheel too."""
    tool = pyproject()["tool"]["setuptools"]
    assert tool["package-dir"][package] == folder
    root = os.path.join(REPO_ROOT, folder)
    shipped = {os.path.relpath(p, root) for pattern in tool["package-data"][package]
               for p in glob.glob(os.path.join(root, pattern))}
    on_disk = {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root)
               for f in files if "__pycache__" not in d}
    assert on_disk - shipped == set()


def test_data_dirs_fall_back_to_the_checkout():
    assert os.path.isfile(os.path.join(resources.configs_dir(), "mixed_sla.json"))
    assert os.path.isdir(os.path.join(resources.model_templates_dir(), "emulated_explicit",
                                      "profiles"))


def test_perf_analyzer_is_found_on_path_then_beside_python(tmp_path, monkeypatch):
    tool = tmp_path / "bin" / "perf_analyzer"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tool.parent))
    assert resources.find_perf_analyzer() == str(tool)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setattr(resources.sys, "executable", str(tool.parent / "python"))
    assert resources.find_perf_analyzer() == str(tool)
    monkeypatch.setattr(resources.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(resources.ToolNotFound, match=r"explicit-batching\[cli\]"):
        resources.find_perf_analyzer()


def test_perf_analyzer_env_puts_cudart_first(monkeypatch):
    monkeypatch.setattr(resources, "cuda_runtime_lib_dir", lambda: "/cudart/lib")
    env = resources.perf_analyzer_env({"LD_LIBRARY_PATH": "/old"})
    assert env["LD_LIBRARY_PATH"] == "/cudart/lib" + os.pathsep + "/old"
    monkeypatch.setattr(resources, "cuda_runtime_lib_dir", lambda: None)
    assert "LD_LIBRARY_PATH" not in resources.perf_analyzer_env({})


def test_the_wheel_lists_every_package_of_its_top_level_packages():
    """setuptools' explicit package list takes no subpackage by itself: each folder with an
    __init__.py under a listed top-level package must be listed too, or the installed CLI
    cannot import it."""
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    mapped = pyproject()["tool"]["setuptools"]["package-dir"]
    for top in [p for p in listed if "." not in p]:
        for folder, _, files in os.walk(os.path.join(REPO_ROOT, top)):
            if "__init__.py" in files and "__pycache__" not in folder:
                package = os.path.relpath(folder, REPO_ROOT).replace(os.sep, ".")
                assert package in listed or package in mapped, package
