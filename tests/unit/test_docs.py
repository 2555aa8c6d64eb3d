"""The docs match the tree: docs/design.md's module map names every module and only modules that
exist; the paths the docs and docstrings cite exist; tests import helpers, never another test."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAPPED = ("daemon", "scope", "chunker", "devtools")
CITED = re.compile(
    r"(?<![\w/.$-])((?:daemon|scope|chunker|devtools|tools|tests|docs|deploy|bench)/[\w./-]*\w\.(?:py|md|toml|example))"
)


def tree_modules() -> set[str]:
    """Every module under the mapped folders. An empty ``__init__.py`` only marks a package."""
    found = set()
    for folder in MAPPED:
        for path in (REPO / folder).rglob("*.py"):
            if path.name == "__init__.py" and not path.read_text().strip():
                continue
            found.add(path.relative_to(REPO).as_posix())
    return found


def design_modules() -> set[str]:
    text = (REPO / "docs" / "design.md").read_text()
    return set(re.findall(r"`((?:daemon|scope|chunker|devtools|tools)/[\w/]+\.py)`", text))


def test_the_module_map_names_every_module_in_the_tree() -> None:
    assert sorted(tree_modules() - design_modules()) == []


def test_every_module_the_map_names_exists() -> None:
    assert sorted(m for m in design_modules() if not (REPO / m).is_file()) == []


def test_paths_cited_in_docs_and_docstrings_exist() -> None:
    sources = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    for folder in (*MAPPED, "tools", "tests"):
        sources += (REPO / folder).rglob("*.py")
    missing = sorted(
        f"{source.relative_to(REPO)}: {cited}"
        for source in sources
        for cited in CITED.findall(source.read_text())
        if not (REPO / cited).exists()
    )
    assert missing == []


def test_tests_import_helper_modules_never_another_test_module() -> None:
    imports_a_test = re.compile(r"^\s*(?:from|import)\s+tests\.(?:\w+\.)*test_\w+", re.MULTILINE)
    offenders = sorted(
        path.relative_to(REPO).as_posix()
        for path in (REPO / "tests").rglob("*.py")
        if imports_a_test.search(path.read_text())
    )
    assert offenders == []
