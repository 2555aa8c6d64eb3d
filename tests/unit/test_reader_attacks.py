"""Attacks on the reader from a client with socket access, performed against real reader processes
(``tests/reader_process.py``: the ``ReaderService`` over the fake index, its ranking work counted)
over their real Unix sockets, with the product's own journal on stderr:

- cursors a client forges, alters, or takes from another request or another reader are refused
  as ``bad_cursor`` naming ``cursor``, before the index ranks anything;
- a password-shaped filter value never reaches the audit journal, while the line carries each
  returned window's score components and the candidates each rule excluded.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from daemon.reader.search import make_query
from tests.reader_sockets import ask

REPO = Path(__file__).resolve().parents[2]
KEY_HEX = "6b" * 32


class Reader:
    """One ``tests.reader_process`` with its journal in a file."""

    def __init__(self, path: Path, journal: Path):
        self.path = path
        self.journal = journal
        self._stderr = journal.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reader_process", str(path), "--journal", "--audit-key-hex", KEY_HEX],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        assert json.loads(self.proc.stdout.readline()) == {"bound": True}  # type: ignore[union-attr]
        assert json.loads(self.proc.stdout.readline())["serving"] is True  # type: ignore[union-attr]

    def search(self, **fields: Any) -> dict[str, Any]:
        return ask(self.path, {"v": 1, "op": "search", **fields})

    def stop(self) -> dict[str, Any]:
        """Stop the reader: its ranking work (``ranking_calls``, ``candidates``)."""
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        self._stderr.close()
        assert self.proc.returncode == 0, self.journal.read_text()[-3000:]
        return json.loads(out.strip().splitlines()[-1])

    def audit(self) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.journal.read_text(encoding="utf-8").splitlines() if line]
        return [line for line in lines if line.get("event") == "request_answered"]


@pytest.fixture
def readers(sock_dir: Path) -> Iterator[Any]:
    started: list[Reader] = []

    def start(name: str) -> Reader:
        reader = Reader(sock_dir / f"{name}.sock", sock_dir / f"{name}.journal")
        started.append(reader)
        return reader

    yield start
    for reader in started:
        if reader.proc.poll() is None:
            reader.proc.kill()
            reader.proc.wait()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _flip(token: str, at: int) -> str:
    """``token`` with one base64 character changed (one to six bits of what it encodes)."""
    swapped = "B" if token[at] != "B" else "C"
    return token[:at] + swapped + token[at + 1 :]


def _refused_as_bad_cursor(reply: dict[str, Any]) -> bool:
    return reply["ok"] is False and reply["error"]["code"] == "bad_cursor" and reply["error"]["field"] == "cursor"


@pytest.mark.slow
def test_forged_altered_and_foreign_cursors_are_refused_before_any_ranking(readers: Any) -> None:
    attacked, other = readers("attacked"), readers("other")
    asked = {"texts": ["database migration"], "top_k": 1}
    first = attacked.search(**asked)["result"]
    foreign = other.search(**asked)["result"]["next"]
    token = first["next"]
    assert token and foreign
    digest = make_query(["database migration"]).digest()
    payload, _, mac = token.partition(".")
    # The attack as it was made: the first page's size raised to 10,000 and the offset to 9,950,
    # in the payload as the reader writes it, with the issued token's MAC and with none.
    deep = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    deep.update({"h": 10_000, "o": 9_950})
    forged_payload = _b64(json.dumps(deep, separators=(",", ":"), sort_keys=True).encode())
    attacks = {
        "forged, the issued MAC": f"{forged_payload}.{mac}",
        "forged, a made-up MAC": f"{forged_payload}.{_b64(bytes(32))}",
        "forged, unsealed": _b64(
            json.dumps({"k": "r", "o": 9_950, "h": 10_000, "g": "g1", "d": 0, "n": 0, "f": digest}).encode()
        ),
        "a bit flipped in the payload": _flip(token, 5),
        "a bit flipped in the MAC": _flip(token, len(token) - 3),
        "from another reader": foreign,
    }
    replies = {name: attacked.search(**asked, cursor=cursor) for name, cursor in attacks.items()}
    replies["from another request"] = attacked.search(texts=["geese"], top_k=1, cursor=token)
    refused = {name: reply for name, reply in replies.items() if _refused_as_bad_cursor(reply)}
    assert refused.keys() == replies.keys(), {n: r for n, r in replies.items() if n not in refused}

    attacked_work, other_work = attacked.stop(), other.stop()
    # Both readers answered the same first page and nothing else: a refused cursor ranked nothing.
    assert other_work["ranking_calls"] >= 1 and other_work["candidates"] >= 1
    assert attacked_work["ranking_calls"] == other_work["ranking_calls"]
    assert attacked_work["candidates"] == other_work["candidates"]
    lines = attacked.audit()
    assert [line["outcome"] for line in lines] == ["ok"] + ["bad_cursor"] * len(replies)
    assert all(line["field"] == "cursor" and "candidates" not in line for line in lines[1:])


@pytest.mark.slow
def test_the_issued_cursor_still_continues_and_a_restarted_reader_refuses_it(readers: Any) -> None:
    first_life = readers("first")
    asked = {"texts": ["database migration"], "top_k": 1}
    token = first_life.search(**asked)["result"]["next"]
    second = first_life.search(**asked, cursor=token)
    assert second["ok"] is True and len(second["result"]["hits"]) == 1
    first_life.stop()
    restarted = readers("first")
    assert _refused_as_bad_cursor(restarted.search(**asked, cursor=token))
    restarted.stop()


@pytest.mark.slow
def test_a_password_shaped_filter_never_reaches_the_audit_journal(readers: Any) -> None:
    reader = readers("r")
    requests = [
        {"texts": ["in:#hunter2xyz:x deploy"]},
        {"texts": ["deploy"], "rooms": ["#hunter2abc:x", "#dev:example.org"], "senders": ["@hunter2qq:x"]},
        {"rooms": ["!hunter2id"], "top_k": 1},  # a listing
        {"texts": ["deploy"], "rooms": ["#hunter2bad:x"], "top_k": 99},  # refused (top_k)
        {"texts": ["deploy"], "rooms": ["#hunter2cur:x"], "cursor": "x.y"},  # refused (cursor)
    ]
    replies = [reader.search(**fields) for fields in requests]
    refused = ask(reader.path, {"v": 1, "op": "search", "texts": ["deploy"], "hunter2field": 1})
    assert [r["ok"] for r in replies] == [True, True, True, False, False] and refused["ok"] is False
    reader.stop()
    journal = reader.journal.read_bytes()
    assert b"hunter2" not in journal
    lines = reader.audit()
    assert len(lines) == len(requests) + 1
    # What the index vouches for stays readable; the rest is a keyed digest an operator can check.
    assert lines[1]["filters"]["rooms"][1] == "#dev:example.org"
    assert lines[1]["filters"]["rooms"][0].startswith("[unresolved:")
    assert lines[1]["filters"]["senders"][0].startswith("[unresolved:")
    assert lines[-1]["field"] == "[other]"


@pytest.mark.slow
def test_the_audit_line_holds_score_components_and_exclusions_by_first_rule(readers: Any) -> None:
    reader = readers("r")
    # "migration" is held by a room A window and by the birds window, which the exclusion removes;
    # the dense leg ranks every window, so the two about lunch and deploy keys are candidates too,
    # which the floor leaves out (no word of the text, nothing near it in meaning).
    reply = reader.search(texts=["migration -birds"], top_k=1)
    phrase = reader.search(texts=['"rollback worked" migration'], top_k=5)
    assert reply["ok"] is True and phrase["ok"] is True
    reader.stop()
    line, phrase_line = reader.audit()
    assert line["candidates"] == 4
    assert line["excluded"] == {"eligibility": 0, "phrase": 0, "word": 1, "floor": 2, "depth": 0}
    assert phrase_line["excluded"] == {"eligibility": 0, "phrase": 3, "word": 0, "floor": 0, "depth": 0}
    (returned,) = line["returned"]
    hit = reply["result"]["hits"][0]
    assert returned["scores"]["fused"] == pytest.approx(hit["score"])
    text1 = returned["scores"]["texts"]["text1"]
    assert set(text1) == {"score", "dense", "lexical"} and text1["lexical"] > 0
    assert [m["event_id"] for m in returned["messages"]] == [m["event_id"] for m in hit["messages"]]
    for message in returned["messages"]:
        assert isinstance(message["dense"], float) and isinstance(message["lexical"], int)
        assert message["fused"] == pytest.approx(hit["score"])
