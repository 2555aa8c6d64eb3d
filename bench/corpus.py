"""The eval corpus as the benchmarks see it: messages, their stable keys, the room and user names
they get on the homeserver, and the hash that keys every cache.

Owns: reading ``messages.jsonl`` (one ``{"room", "id", "sender", "ts", "body"}`` per line), the
IRC nick -> Matrix localpart map, the room -> alias localpart map, and ``corpus_hash``.

Must not: talk to a homeserver or an index (``bench/seed.py`` does), or change any text: a message
is sent exactly as the corpus has it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Corpus name (as the eval reports it and as bench/queries/<name>/ files it) -> folder under
# shared/eval/. irc1 is the corpus the team tuned on; irc2 is a second slice of the same source
# that no tuning saw.
CORPORA = {"irc1": "irc-disentanglement", "irc2": "irc-disentanglement-2"}
# Environment variable naming another copy of a corpus (HUGINN_EVAL_CORPUS predates the second).
CORPUS_ENV = {"irc1": "HUGINN_EVAL_CORPUS", "irc2": "HUGINN_EVAL_CORPUS_2"}


def corpus_dir(name: str) -> Path:
    """Where corpus ``name`` lives: the folder its variable names, else shared/ beside the checkout
    (CI lays it there), else one level further up (a git worktree sits one folder deeper). The
    first of those paths is returned when none exists, so a missing corpus names the usual place."""
    folder = CORPORA[name]
    override = os.environ.get(CORPUS_ENV[name])
    candidates = [
        Path(override) if override else None,
        REPO.parent / "shared" / "eval" / folder,
        REPO.parent.parent / "shared" / "eval" / folder,
    ]
    return next((c for c in candidates if c is not None and c.is_dir()), candidates[1])


DEFAULT_CORPUS = corpus_dir("irc1")

# Localparts the harness or the service already uses: a nick that maps onto one gets a suffix.
RESERVED = {"historian", "discordbot", "huginn-service", "seeder"}
_BAD = re.compile(r"[^a-z0-9._=-]")


@dataclass(frozen=True, slots=True)
class CorpusMessage:
    room: str  # "#ubuntu/2009-03-03_10"
    key: str  # "ubuntu/2009-03-03_10:321": the stable label a query names
    sender: str  # the IRC nick
    ts: int  # unix ms
    body: str


def load_messages(corpus_dir: Path = DEFAULT_CORPUS) -> list[CorpusMessage]:
    out = []
    with open(Path(corpus_dir) / "messages.jsonl", encoding="utf-8") as handle:
        for line in handle:
            raw = json.loads(line)
            out.append(CorpusMessage(raw["room"], raw["id"], raw["sender"], int(raw["ts"]), raw["body"]))
    return out


def corpus_hash(messages: list[CorpusMessage]) -> str:
    """sha256 over every field of every message, in order: the key of the seeded-homeserver cache."""
    digest = hashlib.sha256()
    for m in messages:
        digest.update(json.dumps([m.room, m.key, m.sender, m.ts, m.body], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def nick_localparts(nicks: list[str]) -> dict[str, str]:
    """IRC nick -> a Matrix localpart that reads like it. IRC nicks are case-insensitive, so they are
    lowercased; characters Matrix forbids become ``-``; a leading ``_`` (the puppet namespace) is
    dropped. Distinct nicks that land on one localpart get ``-2``, ``-3``... in sorted order."""
    out: dict[str, str] = {}
    taken: set[str] = set(RESERVED)
    by_base: dict[str, str] = {}
    for nick in sorted(set(nicks)):
        base = _BAD.sub("-", nick.lower()).lstrip("_") or "nick"
        if not base[0].isalnum():
            base = "n" + base
        if by_base.get(base) == nick.lower():  # same nick in another case: same person
            out[nick] = out[next(n for n in out if n.lower() == nick.lower())]
            continue
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        by_base.setdefault(base, nick.lower())
        out[nick] = name
    return out


def alias_localpart(room: str) -> str:
    """``#ubuntu/2009-03-03_10`` -> ``ubuntu-2009-03-03_10``."""
    return _BAD.sub("-", room.lstrip("#").lower())
