"""The scrubber catalogue (docs/scrubber.md), generated from the rows and their own evidence.

Owns: running each row of ``chunker.scrub_rules.PATTERNS`` alone over the evidence the rows carry
(every row's ``examples``), counting per row its examples, its lookalikes and the examples that it
alone removes, and rendering the catalogue: family, kind, why, those counts, and one example with
the secret masked.

Must not: print or write any secret unmasked; change the rows.

Run: ``.venv/bin/python tools/scrub_catalogue.py`` rewrites docs/scrubber.md;
``--check`` exits 1 when the file is stale (tests/unit/test_scrub_catalogue.py runs the same).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chunker.scrub import scrub  # noqa: E402
from chunker.scrub_rules import FAMILIES, PATTERNS, SecretPattern, secret_span  # noqa: E402

CATALOGUE = ROOT / "docs" / "scrubber.md"
FAMILY_OF = [family.__name__.rsplit(".", 1)[1] for family in FAMILIES for _row in family.ROWS]
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass
class Evidence:
    examples: int = 0  # the row's own examples
    lookalikes: int = 0  # the row's own lookalikes
    own: int = 0  # the row's examples that it removes and no other row does
    example: str | None = None  # the first example it alone removes (else its first example), masked


def row_spans(row: SecretPattern, text: str) -> list[tuple[int, int]]:
    """The spans ``row`` alone redacts in ``text`` (as the engine would, without merging)."""
    lowered = text.lower()
    if row.triggers and not any(trigger in lowered for trigger in row.triggers):
        return []
    searched = text.translate(_ASCII_LOWER) if row.folded else text
    spans = []
    for match in row.pattern.finditer(searched):
        if row.not_after and match.start() and text[match.start() - 1] in row.not_after:
            continue
        span = secret_span(match) if row.refine is None else row.refine(match, text)
        if span is not None and span[0] < span[1]:
            spans.append(span)
    return spans


def rows_removing(
    text: str, span: str, rows: tuple[SecretPattern, ...] = PATTERNS
) -> list[tuple[int, list[tuple[int, int]]]]:
    """The rows that redact a piece of ``span`` in ``text``, alone, with what each redacts."""
    at = text.find(span)
    found = []
    for order, row in enumerate(rows):
        spans = row_spans(row, text)
        if any(start < at + len(span) and end > at for start, end in spans):
            found.append((order, spans))
    return found


def _masked(text: str, spans: list[tuple[int, int]], kind: str) -> str:
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + f"[{kind}]" + text[end:]
    text = " ".join(scrub(text).split())  # any other secret the case holds is masked too
    return text if len(text) <= 110 else text[:107] + "..."


def collect(rows: tuple[SecretPattern, ...] = PATTERNS) -> list[Evidence]:
    """Each row's evidence: what it carries, and how many of its own examples only it removes."""
    found = [Evidence(examples=len(row.examples), lookalikes=len(row.lookalikes)) for row in rows]
    for owner, row in enumerate(rows):
        evidence = found[owner]
        for text, span in row.examples:
            removing = rows_removing(text, span, rows)
            spans = next((spans for order, spans in removing if order == owner), [])
            alone = [order for order, _ in removing] == [owner]
            if alone:
                evidence.own += 1
            if spans and (evidence.example is None or (alone and evidence.own == 1)):
                evidence.example = _masked(text, spans, row.kind)
    return found


def render(found: list[Evidence] | None = None) -> str:
    found = collect() if found is None else found
    lines = [
        "# Scrubber catalogue",
        "",
        "Generated from the rows of `chunker/scrub_rules/` by `.venv/bin/python tools/scrub_catalogue.py`; do not",
        "edit by hand (`tests/unit/test_scrub_catalogue.py` fails when it is stale). One line per row, in the order",
        "the engine runs them. *Examples* and *lookalikes*: the evidence the row carries (texts it must remove, each",
        "with its exact span, and texts it must leave; `tests/unit/test_scrub_rules.py` checks them row by row);",
        "*own*: the row's examples that it removes and no other row does. The example is one of them (else one of",
        "its examples) with the row's span masked as `[kind]`.",
        "",
        f"Rows: {len(PATTERNS)}; kinds: {len({row.kind for row in PATTERNS})};"
        f" examples: {sum(e.examples for e in found)}; lookalikes: {sum(e.lookalikes for e in found)};"
        f" rows with an example of their own: {sum(1 for e in found if e.own)}.",
        "",
        "| # | family | kind | why | examples | lookalikes | own | example |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for order, (row, evidence) in enumerate(zip(PATTERNS, found, strict=True)):
        why = " ".join(row.why.split()).replace("|", "\\|")
        example = (evidence.example or "").replace("|", "\\|").replace("`", "'")
        lines.append(
            f"| {order} | {FAMILY_OF[order]} | `{row.kind}` | {why} | {evidence.examples} | {evidence.lookalikes}"
            f" | {evidence.own} | {'`' + example + '`' if example else ''} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/scrubber.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = CATALOGUE.read_text(encoding="utf-8") if CATALOGUE.exists() else ""
        if current != text:
            print(
                f"{CATALOGUE.relative_to(ROOT)}: stale; run .venv/bin/python tools/scrub_catalogue.py", file=sys.stderr
            )
            return 1
        return 0
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=CATALOGUE.parent, delete=False) as handle:
        handle.write(text)
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, CATALOGUE)
    print(f"wrote {CATALOGUE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
