"""Test doubles for the ports that are not the point of a test.

The homeserver is never faked in integration tests (they run a real Synapse); these fakes serve
unit tests of the refresher's control flow (checkpoints, faults, rebuilds) where a homeserver
would only add minutes. Events they serve have the shapes Synapse really sends (room v12:
``redacts`` inside content; redacted events with ``content: {}``). ``ListLog`` is a journal that
keeps its events in a list. The read side's fakes are in ``tests/reader_fakes.py``.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Sequence

from daemon.ports import IndexWriteError, MatrixError, Page, SparseVector

_seq = itertools.count(1)


def _eid() -> str:
    return f"$ev{next(_seq):06d}"


@dataclass
class FakeRoom:
    room_id: str
    state: list[dict[str, Any]]
    timeline: list[dict[str, Any]] = field(default_factory=list)
    fail_messages: bool = False


class FakeMatrix:
    """An in-memory homeserver read through the MatrixSource port, tokens are timeline offsets."""

    def __init__(self, user_id: str = "@reader:hs.test") -> None:
        self.user_id = user_id
        self.rooms: dict[str, FakeRoom] = {}
        self.joined: set[str] = set()
        self.invited: set[str] = set()
        self.aliases: dict[str, str] = {}
        self.direct: dict[str, list[str]] = {}
        self.ts = 1_700_000_000_000
        self.message_calls = 0
        self.join_calls: list[str] = []

    # -- seeding
    def add_room(self, room_id: str, *, alias: str | None = None, creator: str = "@alice:hs.test",
                 members: Sequence[str] = ("@alice:hs.test", "@bob:hs.test"), name: str | None = "A room",
                 join_rule: str = "public", extra_state: Sequence[dict[str, Any]] = (), joined: bool = True) -> FakeRoom:
        state = [
            {"type": "m.room.create", "state_key": "", "sender": creator, "content": {"room_version": "12"},
             "event_id": _eid(), "origin_server_ts": self.ts},
            {"type": "m.room.join_rules", "state_key": "", "sender": creator, "content": {"join_rule": join_rule},
             "event_id": _eid(), "origin_server_ts": self.ts},
        ]
        if name:
            state.append({"type": "m.room.name", "state_key": "", "sender": creator, "content": {"name": name},
                          "event_id": _eid(), "origin_server_ts": self.ts})
        if alias:
            state.append({"type": "m.room.canonical_alias", "state_key": "", "sender": creator,
                          "content": {"alias": alias}, "event_id": _eid(), "origin_server_ts": self.ts})
            self.aliases[alias] = room_id
        for m in [*members, *( [self.user_id] if joined else [])]:
            state.append({"type": "m.room.member", "state_key": m, "sender": m, "content": {"membership": "join"},
                          "event_id": _eid(), "origin_server_ts": self.ts})
        state.extend(extra_state)
        room = FakeRoom(room_id, state)
        room.timeline.extend(state)
        self.rooms[room_id] = room
        if joined:
            self.joined.add(room_id)
        return room

    def _append(self, room_id: str, event: dict[str, Any]) -> str:
        self.ts += 1000
        event.setdefault("event_id", _eid())
        event.setdefault("origin_server_ts", self.ts)
        event.setdefault("room_id", room_id)
        self.rooms[room_id].timeline.append(event)
        return event["event_id"]

    def send(self, room_id: str, sender: str, body: str, *, gap_ms: int = 0) -> str:
        self.ts += gap_ms
        return self._append(room_id, {"type": "m.room.message", "sender": sender,
                                      "content": {"msgtype": "m.text", "body": body}})

    def edit(self, room_id: str, sender: str, target: str, body: str) -> str:
        return self._append(room_id, {"type": "m.room.message", "sender": sender, "content": {
            "msgtype": "m.text", "body": "* " + body,
            "m.new_content": {"msgtype": "m.text", "body": body},
            "m.relates_to": {"rel_type": "m.replace", "event_id": target}}})

    def react(self, room_id: str, sender: str, target: str) -> str:
        return self._append(room_id, {"type": "m.reaction", "sender": sender, "content": {
            "m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": "+1"}}})

    def redact(self, room_id: str, sender: str, target: str) -> str:
        """As Synapse does it: the target is pruned in place, the redaction is appended."""
        for ev in self.rooms[room_id].timeline:
            if ev.get("event_id") == target:
                ev["content"] = {}
                ev.setdefault("unsigned", {})["redacted_because"] = {"type": "m.room.redaction"}
        return self._append(room_id, {"type": "m.room.redaction", "sender": sender, "content": {"redacts": target}})

    # -- the port
    async def whoami(self) -> str:
        return self.user_id

    async def joined_rooms(self) -> list[str]:
        return sorted(self.joined)

    async def invited_rooms(self) -> list[str]:
        return sorted(self.invited)

    async def resolve_alias(self, alias: str) -> str | None:
        return self.aliases.get(alias)

    async def join(self, room_id_or_alias: str) -> str:
        self.join_calls.append(room_id_or_alias)
        room_id = self.aliases.get(room_id_or_alias, room_id_or_alias)
        if room_id not in self.rooms:
            raise MatrixError("join", 404, "M_NOT_FOUND")
        self.joined.add(room_id)
        self.invited.discard(room_id)
        return room_id

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        if room_id not in self.rooms:
            raise MatrixError("state", 404, "M_NOT_FOUND")
        return [dict(e) for e in self.rooms[room_id].state]

    async def direct_rooms(self) -> dict[str, list[str]]:
        return self.direct

    async def messages(self, room_id: str, start: str | None, limit: int) -> Page:
        self.message_calls += 1
        room = self.rooms[room_id]
        if room.fail_messages:
            raise MatrixError("messages", 500, "M_UNKNOWN")
        offset = int(start[1:]) if start else 0
        chunk = room.timeline[offset: offset + limit]
        if not chunk:
            return Page(events=[], end=None)
        return Page(events=[dict(e) for e in chunk], end=f"t{offset + len(chunk)}")

    async def event(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        for ev in self.rooms[room_id].timeline:
            if ev.get("event_id") == event_id:
                return dict(ev)
        return None

    async def close(self) -> None:
        return None


class FakeEmbedder:
    """Deterministic bag-of-words vectors: cheap, and similar texts really are similar."""

    model_id = "fake/bag-of-words"
    dim = 16

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        for word in text.lower().split():
            h = int(hashlib.sha1(word.encode()).hexdigest(), 16)
            v[h % self.dim] += 1.0
        norm = sum(x * x for x in v) ** 0.5 or 1.0
        return [x / norm for x in v]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded.extend(texts)
        return [self._vec(t) for t in texts]

    def _sparse(self, text: str) -> SparseVector:
        counts: dict[int, float] = {}
        for word in text.lower().split():
            idx = int(hashlib.sha1(word.encode()).hexdigest(), 16) % 100_000
            counts[idx] = counts.get(idx, 0.0) + 1.0
        items = sorted(counts.items())
        return SparseVector(indices=tuple(i for i, _ in items), values=tuple(v for _, v in items))

    def sparse(self, texts: Sequence[str]) -> list[SparseVector]:
        return [self._sparse(t) for t in texts]

    def sparse_query(self, text: str) -> SparseVector:
        return self._sparse(text)


class FailingWrites:
    """Wraps an IndexWriter; the next ``failures`` calls of ``write_windows`` raise before writing."""

    def __init__(self, inner: Any, failures: int = 1) -> None:
        self._inner = inner
        self.failures = failures

    def write_windows(self, room_id, upserts, delete_ids):
        if self.failures > 0:
            self.failures -= 1
            raise IndexWriteError(f"injected failure writing room {room_id}")
        return self._inner.write_windows(room_id, upserts, delete_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ListLog:
    def __init__(self, records: list[dict[str, Any]] | None = None, **bound: Any) -> None:
        self.records = records if records is not None else []
        self.bound = bound

    def bind(self, **kw: Any) -> "ListLog":
        return ListLog(self.records, **{**self.bound, **kw})

    def _add(self, level: str, event: str, **kw: Any) -> None:
        self.records.append({"event": event, "level": level, **self.bound, **kw})

    def info(self, event: str, **kw: Any) -> None:
        self._add("info", event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._add("warning", event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        self._add("error", event, **kw)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] == name]
