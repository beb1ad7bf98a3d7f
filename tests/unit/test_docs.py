"""The documentation against the code: the configuration page lists exactly the settings
object's keys, what the code cites in docs/design.md is there, every relative link in the
README and docs/ resolves, and the README stays a front door."""

from __future__ import annotations

import glob
import os
import re

from tests.conftest import REPO_ROOT
from triton_backend.model_settings import BACKEND_KEYS, KNOWN_KEYS

DOCS = os.path.join(REPO_ROOT, "docs")
README = os.path.join(REPO_ROOT, "README.md")
README_MAX_LINES = 200


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def test_the_configuration_page_lists_every_parameter_and_no_other():
    rows = re.findall(r"^\| `([^`]+)` \|", _read(os.path.join(DOCS, "configuration.md")), re.M)
    documented = {key for key in rows if key != "<section>.<key>"}
    assert documented == set(KNOWN_KEYS) - set(BACKEND_KEYS)


def test_what_the_code_cites_in_the_design_page_is_there():
    design = _read(os.path.join(DOCS, "design.md"))
    sections = set(re.findall(r"^- \*\*(\d+\.\d+) ", design, re.M))
    cited = set()
    for path in glob.glob(os.path.join(REPO_ROOT, "*", "**", "*.py"), recursive=True):
        if os.sep + ".venv" + os.sep in path:
            continue
        cited |= set(re.findall(r"docs/design\.md,? section (\d+\.\d+)", _read(path)))
    assert cited, "no code cites docs/design.md"
    assert cited <= sections, f"cited but missing: {sorted(cited - sections)}"


def test_relative_links_in_the_readme_and_docs_resolve():
    for path in [README, *glob.glob(os.path.join(DOCS, "*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", _read(path)):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
            assert os.path.exists(resolved), f"{os.path.relpath(path, REPO_ROOT)}: {target}"


def test_the_readme_is_a_front_door():
    text = _read(README)
    assert len(text.splitlines()) <= README_MAX_LINES
    first_block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    assert first_block.startswith("make serve") and "\nmake test" in first_block


# The request walk in docs/code-layout.md: numbered stops, each "`path: Name.attr`".
WALK_STOP = re.compile(r"^\d+\. `([\w/]+\.py): ([\w.]+)`", re.M)
WALK_MAX_FILES = 8


def _defines(path: str, dotted: str) -> bool:
    """Whether the module at ``path`` defines ``dotted`` (a function, a class, or a
    class's method), read from its syntax tree (nothing is imported)."""
    import ast  # noqa: PLC0415

    scope = ast.parse(_read(path)).body
    for name in dotted.split("."):
        found = next((node for node in scope if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name),
            None)
        if found is None:
            return False
        scope = getattr(found, "body", [])
    return True


def test_the_code_layout_walk_names_what_exists_in_at_most_eight_files():
    """docs/code-layout.md walks one request under the default intake: every stop's file
    and function exists, and the walk visits at most WALK_MAX_FILES files."""
    stops = WALK_STOP.findall(_read(os.path.join(DOCS, "code-layout.md")))
    assert stops, "no walk in docs/code-layout.md"
    for path, name in stops:
        full = os.path.join(REPO_ROOT, path)
        assert os.path.isfile(full), f"the walk names {path}, which does not exist"
        assert _defines(full, name), f"the walk names {path}: {name}, which is not defined there"
    assert len({path for path, _ in stops}) <= WALK_MAX_FILES


def test_the_layout_page_names_exactly_the_modules_that_import_pb_utils():
    """docs/code-layout.md names the adapter modules that touch Triton's Python objects;
    the list must be the modules that import ``triton_python_backend_utils``."""
    text = " ".join(_read(os.path.join(DOCS, "code-layout.md")).split())
    sentence = re.search(
        r"Only ((?:`\w+\.py`(?:, | and )?)+) import `triton_python_backend_utils`", text)
    assert sentence, "docs/code-layout.md no longer says which modules import pb_utils"
    named = set(re.findall(r"`(\w+)\.py`", sentence.group(1)))
    importing = {os.path.basename(path)[:-3]
                 for path in glob.glob(os.path.join(REPO_ROOT, "triton_backend", "*.py"))
                 if re.search(r"^import triton_python_backend_utils", _read(path), re.M)}
    assert named == importing
