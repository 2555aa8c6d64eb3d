"""The scrubber corpus (tests/data/scrub/*.jsonl) and what "a secret survived" means.

Shared by tests/unit/test_scrub_corpus.py (the targets) and bench/scrub_bench.py (the figures,
detect-secrets beside our rules). No I/O beyond reading the two data files.

A secret *leaks* when a piece of it survives: some run of 4 consecutive characters of the secret
value appears in the scrubbed text although that run did not occur in the text around the secret
(the original text with every listed secret cut out) nor in a ``[redacted:<kind>]`` marker. The
context rule is what makes 4 characters workable: "pass" in ``SMTP_PASS=<secret>`` or "ghp_" of
a prefix that the chat itself mentions is not a piece of the secret that survived.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DATA = Path(__file__).resolve().parent / "data" / "scrub"
PIECE = 4
_MARKERS = re.compile(r"\[redacted:[a-z0-9_]+\]")


@dataclass(frozen=True)
class Credential:
    kind: str
    text: str
    secrets: tuple[str, ...]


def _rows(name: str) -> list[dict]:
    with (DATA / name).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def credentials() -> list[Credential]:
    return [Credential(r["kind"], r["text"], tuple(r["secrets"])) for r in _rows("credentials.jsonl")]


def benign() -> list[tuple[str, str]]:
    return [(r["kind"], r["text"]) for r in _rows("benign.jsonl")]


def _pieces(text: str) -> set[str]:
    return {text[i : i + PIECE] for i in range(len(text) - PIECE + 1)}


def without_secrets(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with each of ``secrets`` (longest first) replaced by a NUL: what may stay."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "\x00")
    return text


def without_markers(scrubbed: str) -> str:
    """``scrubbed`` with each ``[redacted:kind]`` marker replaced by a NUL."""
    return _MARKERS.sub("\x00", scrubbed)


def leaked_pieces_of(secret: str, context: str, residue: str) -> list[str]:
    """The 4-character pieces of ``secret`` found in ``residue`` that ``context`` (the text
    without its secrets) does not hold itself, in sorted order."""
    allowed = _pieces(context)
    return [piece for piece in sorted(_pieces(secret)) if piece not in allowed and piece in residue]


def leaked_pieces(item: Credential, scrubbed: str) -> list[str]:
    """The 4-character pieces of item's secrets that survive in ``scrubbed`` (see module doc)."""
    context = without_secrets(item.text, item.secrets)
    residue = without_markers(scrubbed)
    return [piece for secret in item.secrets for piece in leaked_pieces_of(secret, context, residue)]


@dataclass
class Score:
    credentials: int
    removed: int
    benign: int
    intact: int
    leaks: list[tuple[str, str, list[str]]]  # kind, text, pieces
    eaten: list[tuple[str, str, str]]  # kind, text, scrubbed

    @property
    def removed_pct(self) -> float:
        return 100.0 * self.removed / self.credentials

    @property
    def intact_pct(self) -> float:
        return 100.0 * self.intact / self.benign


def score(scrub: Callable[[str], str]) -> Score:
    creds = credentials()
    leaks = []
    for item in creds:
        pieces = leaked_pieces(item, scrub(item.text))
        if pieces:
            leaks.append((item.kind, item.text, pieces))
    eaten = []
    messages = benign()
    for kind, text in messages:
        out = scrub(text)
        if out != text:
            eaten.append((kind, text, out))
    return Score(len(creds), len(creds) - len(leaks), len(messages), len(messages) - len(eaten), leaks, eaten)
