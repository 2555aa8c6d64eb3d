"""The scrubber catalogue.

Owns: checking that docs/scrubber.md is what tools/scrub_catalogue.py renders from the rows and
the evidence they carry now (the rows' own checks: tests/unit/test_scrub_rules.py).
"""

from __future__ import annotations

from tools.scrub_catalogue import CATALOGUE, render


def test_catalogue_is_current() -> None:
    assert CATALOGUE.read_text(encoding="utf-8") == render(), "run: .venv/bin/python tools/scrub_catalogue.py"
