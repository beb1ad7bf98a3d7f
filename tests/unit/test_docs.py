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
    for path in glob.glob(os.path.join(REPO_ROOT, "*", "*.py")):
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
