"""An exported model folder is Python 3.10 code (the stock NGC Triton 24.10 image runs its
Python backend on 3.10): every ``.py`` in it parses under a real 3.10 interpreter, it
imports nothing that 3.10's stdlib lacks, and what it imports beyond the stdlib is exactly
what its ``requirements.txt`` pins. tests/integration/test_export_model.py then serves the
folder on the 3.10 backend stub with only those requirements installed."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import subprocess

import pytest
from packaging.utils import canonicalize_name

from operator_tools.export_cmd import (MINILM_DISTRIBUTIONS, REQUIREMENTS_FILE,
                                       SERVER_DISTRIBUTIONS, VENDORED_PACKAGES, export_model)
from tests.python310 import python310

# Compiles each file in memory (compile(), not py_compile): the export keeps no bytecode.
COMPILE_ALL = """
import json, os, sys
bad, done = [], 0
for folder, _, files in os.walk(sys.argv[1]):
    for name in sorted(files):
        if name.endswith(".py"):
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                source = fh.read()
            try:
                compile(source, path, "exec", dont_inherit=True)
            except SyntaxError as exc:
                bad.append(f"{path}:{exc.lineno}: {exc.msg}")
            done += 1
print(json.dumps({"compiled": done, "errors": bad}))
"""
# 3.10's stdlib module names, and each `from M import N` asked whose M is one of them
# but lacks N.
STDLIB_NAMES = """
import importlib, json, sys
asked = json.load(sys.stdin)
missing = [f"from {m} import {n}" for m, n in asked
           if m.split(".")[0] in sys.stdlib_module_names and n != "*"
           and not hasattr(importlib.import_module(m), n)]
print(json.dumps({"stdlib": sorted(sys.stdlib_module_names), "missing": missing}))
"""
NOT_THIRD_PARTY = {"__future__", "triton_python_backend_utils", *VENDORED_PACKAGES}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> str:
    return export_model("enc", "enc_explicit", str(tmp_path_factory.mktemp("repo"))).path


def python_files(root: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root)
                  for f in files if f.endswith(".py"))


def imports(path: str) -> list[tuple[str, str | None, bool]]:
    """(module, name imported from it or None, at module level) for each absolute import;
    "module level" counts imports under if/try at the top, not those inside a def."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef))
              for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        top = id(node) not in nested
        if isinstance(node, ast.Import):
            found += [(a.name, None, top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.module, a.name, top) for a in node.names]
    return found


def test_every_exported_file_compiles_under_python_310(exported):
    run = subprocess.run([python310(), "-c", COMPILE_ALL, exported], capture_output=True,
                         text=True, timeout=120, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["errors"] == []
    assert result["compiled"] == len(python_files(exported)) > len(VENDORED_PACKAGES)
    assert not [d for d, subdirs, _ in os.walk(exported) if "__pycache__" in subdirs]


def test_exported_code_imports_the_310_stdlib_and_its_requirements_only(exported):
    found = [(path, *imp) for path in python_files(exported) for imp in imports(path)]
    run = subprocess.run([python310(), "-c", STDLIB_NAMES], capture_output=True, text=True,
                         timeout=120, env={"PYTHONDONTWRITEBYTECODE": "1"},
                         input=json.dumps(sorted({(m, n) for _, m, n, _ in found if n})))
    assert run.returncode == 0, run.stderr
    stdlib_310 = set(json.loads(run.stdout)["stdlib"])
    # Names taken from 3.10's stdlib modules exist there (typing.Self, enum.StrEnum and
    # datetime.UTC are 3.11's).
    assert json.loads(run.stdout)["missing"] == []

    server = {canonicalize_name(d) for d in SERVER_DISTRIBUTIONS}
    minilm = {canonicalize_name(d) for d in MINILM_DISTRIBUTIONS}
    owners = {root: {canonicalize_name(d) for d in dists}
              for root, dists in importlib.metadata.packages_distributions().items()}
    third_party: dict[str, set[bool]] = {}
    for path, module, _, top in found:
        root = module.split(".")[0]
        if root in stdlib_310 or root in NOT_THIRD_PARTY:
            continue
        assert root in owners, (f"{os.path.relpath(path, exported)} imports {module}: not in "
                                "Python 3.10's stdlib and no installed distribution has it")
        # A namespace ("google") shared by several distributions: the extras' one.
        for dist in (owners[root] & (server | minilm)) or owners[root]:
            third_party.setdefault(dist, set()).add(top)
    # The minilm extra only inside the executor that needs it, never at import time.
    assert {d for d, tops in third_party.items() if True in tops} <= server
    assert set(third_party) == server | minilm


@pytest.mark.parametrize("template, extras", [("emulated", ()),
                                              ("minilm", MINILM_DISTRIBUTIONS)])
def test_requirements_file_pins_exactly_the_imported_distributions(tmp_path, template,
                                                                   extras):
    out = export_model("enc", "e", str(tmp_path), template=template)
    with open(os.path.join(out.path, REQUIREMENTS_FILE), encoding="utf-8") as fh:
        lines = [ln for ln in fh.read().splitlines() if ln and not ln.startswith("#")]
    names = [canonicalize_name(ln.split("==")[0]) for ln in lines]
    assert names == [canonicalize_name(d) for d in (*SERVER_DISTRIBUTIONS, *extras)]
    for line in lines[:len(SERVER_DISTRIBUTIONS)]:
        dist, version = line.split("==")
        assert importlib.metadata.version(dist) == version
