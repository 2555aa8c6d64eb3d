"""The scrubber catalogue (docs/scrubber.md), generated from the rows and their evidence.

Owns: running each row of ``chunker.scrub_rules.PATTERNS`` alone over the evidence (the
credential corpus in tests/data/scrub/ and the per-version tables of tests/unit/test_scrub.py),
counting per row the cases it removes and the cases only it removes, and rendering the
catalogue: kind, why, those two counts, and one example with the secret masked.

Must not: print or write any secret unmasked; change the rows.

Run: ``.venv/bin/python tools/scrub_catalogue.py`` rewrites docs/scrubber.md;
``--check`` exits 1 when the file is stale (tests/unit/test_scrub_catalogue.py runs the same).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chunker.scrub import scrub  # noqa: E402
from chunker.scrub_rules import PATTERNS, SecretPattern, secret_span  # noqa: E402

CATALOGUE = ROOT / "docs" / "scrubber.md"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass
class Evidence:
    removes: int = 0  # cases where this row redacts a piece of the secret
    own: int = 0  # of those, cases no other row redacts any of
    example: str | None = None  # the first case it alone removes (else the first it removes), masked
    cases: list[int] = field(default_factory=list)


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


def evidence_cases() -> list[tuple[str, tuple[str, ...]]]:
    """Each case as (text, the secrets in it): the corpus and the per-version tables."""
    from tests.scrub_corpus import credentials

    cases = [(c.text, c.secrets) for c in credentials()]
    try:
        from tests.unit import test_scrub
    except ImportError:  # pytest absent: the corpus alone
        return cases
    for table in ("V6_SECRETS", "V7_SECRETS"):
        cases += [(message, (secret,)) for message, secret, _kind in getattr(test_scrub, table, [])]
    cases += [(message, (secret,)) for message, secret in getattr(test_scrub, "REAL_CODE_SECRETS", [])]
    return cases


def _covers(spans: list[tuple[int, int]], text: str, secrets: tuple[str, ...]) -> bool:
    for secret in secrets:
        at = text.find(secret)
        if at >= 0 and any(start < at + len(secret) and end > at for start, end in spans):
            return True
    return False


def _masked(text: str, spans: list[tuple[int, int]], kind: str) -> str:
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + f"[{kind}]" + text[end:]
    text = " ".join(scrub(text).split())  # any other secret the case holds is masked too
    return text if len(text) <= 110 else text[:107] + "..."


def collect() -> list[Evidence]:
    found = [Evidence() for _ in PATTERNS]
    for number, (text, secrets) in enumerate(evidence_cases()):
        covering = []
        for order, row in enumerate(PATTERNS):
            spans = row_spans(row, text)
            if spans and _covers(spans, text, secrets):
                covering.append((order, spans))
        for order, spans in covering:
            evidence = found[order]
            evidence.removes += 1
            evidence.cases.append(number)
            alone = len(covering) == 1
            if alone:
                evidence.own += 1
            if evidence.example is None or (alone and evidence.own == 1):
                evidence.example = _masked(text, spans, PATTERNS[order].kind)
    return found


def render(found: list[Evidence] | None = None) -> str:
    found = collect() if found is None else found
    lines = [
        "# Scrubber catalogue",
        "",
        "Generated from `chunker/scrub_rules.py` by `.venv/bin/python tools/scrub_catalogue.py`; do not edit by hand",
        "(`tests/unit/test_scrub_catalogue.py` fails when it is stale). One line per row, in the order the engine",
        "runs them. *Removes*: cases of the evidence (the corpus in `tests/data/scrub/` and the tables of",
        "`tests/unit/test_scrub.py`) whose secret this row redacts; *own*: of those, the cases no other row redacts.",
        "The example is a case of the evidence with the row's span masked as `[kind]`.",
        "",
        f"Rows: {len(PATTERNS)}; kinds: {len({row.kind for row in PATTERNS})};"
        f" rows with evidence of their own: {sum(1 for e in found if e.own)};"
        f" rows no case of the evidence reaches: {sum(1 for e in found if not e.removes)}.",
        "",
        "| # | kind | why | removes | own | example |",
        "|---|---|---|---|---|---|",
    ]
    for order, (row, evidence) in enumerate(zip(PATTERNS, found, strict=True)):
        why = " ".join(row.why.split()).replace("|", "\\|")
        example = (evidence.example or "").replace("|", "\\|").replace("`", "'")
        lines.append(
            f"| {order} | `{row.kind}` | {why} | {evidence.removes} | {evidence.own} | {'`' + example + '`' if example else ''} |"
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
