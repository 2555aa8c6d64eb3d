"""The docs match the tree: docs/design.md's module map names every package and module, each with
its job, and only ones that exist; every relative link in README.md and docs/*.md resolves (file
and heading); the paths the docs and docstrings cite exist; tests import helpers, never another
test."""

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


def map_rows() -> dict[str, str]:
    """The module map's rows: the path in the first cell -> what the row says it owns."""
    rows = {}
    for line in (REPO / "docs" / "design.md").read_text().splitlines():
        row = re.match(r"\| `([\w/.]+)` \|([^|]*)\|", line)
        if row:
            rows[row.group(1)] = row.group(2).strip()
    return rows


def tree_packages() -> set[str]:
    """Every package under the mapped folders, as ``folder/``."""
    return {
        f"{init.parent.relative_to(REPO).as_posix()}/"
        for folder in MAPPED
        for init in (REPO / folder).rglob("__init__.py")
    }


def test_the_module_map_names_every_module_in_the_tree() -> None:
    assert sorted(tree_modules() - design_modules()) == []


def test_every_module_the_map_names_exists() -> None:
    assert sorted(m for m in design_modules() if not (REPO / m).is_file()) == []


def test_the_module_map_names_every_package_with_its_job() -> None:
    rows = map_rows()
    assert sorted(tree_packages() - rows.keys()) == []
    assert sorted(p for p in rows if p.endswith("/") and not (REPO / p / "__init__.py").is_file()) == []


def test_every_row_of_the_module_map_says_what_it_owns() -> None:
    rows = map_rows()
    assert sorted(tree_modules() - rows.keys()) == []  # a module named only in prose is not mapped
    assert sorted(path for path, owns in rows.items() if owns in ("", "—", "-")) == []


MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped,
    spaces to hyphens (a repeated heading gets -1, -2: not used here)."""
    headings = re.findall(r"^#{1,6} +(.+?) *$", without_code_blocks(text), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def broken_links(source: Path, root: Path = REPO) -> list[str]:
    broken = []
    for target in MARKDOWN_LINK.findall(without_code_blocks(source.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: — not ours to check
            continue
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        if not resolved.exists():
            broken.append(f"{source.relative_to(root)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved.read_text()):
            broken.append(f"{source.relative_to(root)}: {target} (no such heading)")
    return broken


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    sources = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
    assert [b for source in sources if source.exists() for b in broken_links(source)] == []


def test_the_link_check_sees_a_broken_file_and_a_broken_heading(tmp_path: Path) -> None:
    (tmp_path / "design.md").write_text("# Design\n\n## Edge generations\n\n```sh\n# not a heading\n```\n")
    probe = tmp_path / "probe.md"
    probe.write_text(
        "[a](design.md#edge-generations) [b](nowhere.md) [c](design.md#not-a-heading) [d](https://x.org/y)\n"
        "```\n[e](ignored-in-code.md)\n```\n"
    )
    assert broken_links(probe, tmp_path) == [
        "probe.md: nowhere.md (no such file)",
        "probe.md: design.md#not-a-heading (no such heading)",
    ]


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
