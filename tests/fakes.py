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
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Mapping, Sequence

from daemon.index import schema
from daemon.index.port import (
    IndexMeta,
    IndexWriteError,
    RoomCursor,
    ScoredWindow,
    SearchFilter,
    SparseVector,
    WindowPoint,
)
from daemon.index.queries import WriterQueries, fuse_legs, message_scores
from daemon.ports import MatrixError, Page, RoomsOverview

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
        self.leave_calls: list[str] = []
        self.world_readable: set[str] = set()  # rooms whose state a non-member may read
        self.invite_states: dict[str, list[dict[str, Any]]] = {}  # stripped state per invite
        self.removed: dict[str, dict[str, Any]] = {}  # room -> {membership, sender} after a kick/ban
        self.refuse_join: set[str] = set()  # rooms whose join the server refuses (403)
        self.left: set[str] = set()  # rooms the user left: Synapse still shows their state (as it was)

    # -- seeding
    def add_room(
        self,
        room_id: str,
        *,
        alias: str | None = None,
        creator: str = "@alice:hs.test",
        members: Sequence[str] = ("@alice:hs.test", "@bob:hs.test"),
        name: str | None = "A room",
        join_rule: str = "public",
        extra_state: Sequence[dict[str, Any]] = (),
        joined: bool = True,
    ) -> FakeRoom:
        state = [
            {
                "type": "m.room.create",
                "state_key": "",
                "sender": creator,
                "content": {"room_version": "12"},
                "event_id": _eid(),
                "origin_server_ts": self.ts,
            },
            {
                "type": "m.room.join_rules",
                "state_key": "",
                "sender": creator,
                "content": {"join_rule": join_rule},
                "event_id": _eid(),
                "origin_server_ts": self.ts,
            },
        ]
        if name:
            state.append(
                {
                    "type": "m.room.name",
                    "state_key": "",
                    "sender": creator,
                    "content": {"name": name},
                    "event_id": _eid(),
                    "origin_server_ts": self.ts,
                }
            )
        if alias:
            state.append(
                {
                    "type": "m.room.canonical_alias",
                    "state_key": "",
                    "sender": creator,
                    "content": {"alias": alias},
                    "event_id": _eid(),
                    "origin_server_ts": self.ts,
                }
            )
            self.aliases[alias] = room_id
        for m in [*members, *([self.user_id] if joined else [])]:
            state.append(
                {
                    "type": "m.room.member",
                    "state_key": m,
                    "sender": m,
                    "content": {"membership": "join"},
                    "event_id": _eid(),
                    "origin_server_ts": self.ts,
                }
            )
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

    def send(self, room_id: str, sender: str, body: str, *, gap_ms: int = 0, relates_to: Any = None) -> str:
        """A text message; ``relates_to`` becomes its ``m.relates_to`` (a reply, a thread)."""
        self.ts += gap_ms
        content: dict[str, Any] = {"msgtype": "m.text", "body": body}
        if relates_to is not None:
            content["m.relates_to"] = relates_to
        return self._append(room_id, {"type": "m.room.message", "sender": sender, "content": content})

    def set_state(
        self, room_id: str, event_type: str, state_key: str, content: dict[str, Any], sender: str = "@alice:hs.test"
    ) -> str:
        """A state event as Synapse applies it: in the timeline, and replacing the current state."""
        event_id = self._append(
            room_id, {"type": event_type, "state_key": state_key, "sender": sender, "content": content}
        )
        room = self.rooms[room_id]
        room.state = [e for e in room.state if (e.get("type"), e.get("state_key")) != (event_type, state_key)]
        room.state.append(dict(room.timeline[-1]))
        return event_id

    def edit(self, room_id: str, sender: str, target: str, body: str) -> str:
        return self._append(
            room_id,
            {
                "type": "m.room.message",
                "sender": sender,
                "content": {
                    "msgtype": "m.text",
                    "body": "* " + body,
                    "m.new_content": {"msgtype": "m.text", "body": body},
                    "m.relates_to": {"rel_type": "m.replace", "event_id": target},
                },
            },
        )

    def react(self, room_id: str, sender: str, target: str) -> str:
        return self._append(
            room_id,
            {
                "type": "m.reaction",
                "sender": sender,
                "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": "+1"}},
            },
        )

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

    async def invites(self) -> dict[str, list[dict[str, Any]]]:
        return {room: [dict(e) for e in self.invite_states.get(room, [])] for room in sorted(self.invited)}

    async def rooms_overview(self) -> RoomsOverview:
        latest = {}
        for room_id in sorted(self.joined):
            timeline = self.rooms[room_id].timeline if room_id in self.rooms else []
            if timeline and isinstance(timeline[-1], dict) and isinstance(timeline[-1].get("event_id"), str):
                latest[room_id] = timeline[-1]["event_id"]
        return RoomsOverview(invites=await self.invites(), latest_event=latest)

    def _set_membership(self, room_id: str, membership: str, sender: str) -> None:
        """The service user's own m.room.member state event, as Synapse keeps it (state only: the
        timeline holds what the room's members said)."""
        room = self.rooms[room_id]
        room.state = [e for e in room.state if not (e["type"] == "m.room.member" and e["state_key"] == self.user_id)]
        room.state.append(
            {
                "type": "m.room.member",
                "state_key": self.user_id,
                "sender": sender,
                "content": {"membership": membership},
                "event_id": _eid(),
                "origin_server_ts": self.ts,
            }
        )

    def _visible(self, room_id: str) -> bool:
        return room_id in self.joined or room_id in self.world_readable

    def _state_visible(self, room_id: str) -> bool:
        return self._visible(room_id) or room_id in self.left or room_id in self.removed

    async def room_summary(self, room_id_or_alias: str) -> dict[str, Any] | None:
        room_id = self.aliases.get(room_id_or_alias, room_id_or_alias)
        room = self.rooms.get(room_id)
        if room is None:
            return None
        state = {(e["type"], e["state_key"]): e.get("content", {}) for e in room.state}
        join_rule = state.get(("m.room.join_rules", ""), {}).get("join_rule")
        if not (self._visible(room_id) or room_id in self.invited or join_rule == "public"):
            return None
        return {
            "room_id": room_id,
            "name": state.get(("m.room.name", ""), {}).get("name"),
            "canonical_alias": state.get(("m.room.canonical_alias", ""), {}).get("alias"),
            "join_rule": join_rule,
            "num_joined_members": sum(
                1 for (t, _), c in state.items() if t == "m.room.member" and c.get("membership") == "join"
            ),
            "world_readable": room_id in self.world_readable,
            "encryption": state.get(("m.room.encryption", ""), {}).get("algorithm"),
            "room_type": state.get(("m.room.create", ""), {}).get("type"),
        }

    async def room_aliases(self, room_id: str) -> list[str]:
        if not self._visible(room_id):
            return []
        return sorted(alias for alias, target in self.aliases.items() if target == room_id)

    async def membership(self, room_id: str) -> dict[str, Any] | None:
        if room_id in self.removed:
            return dict(self.removed[room_id])
        if room_id in self.joined:
            return {"membership": "join", "sender": self.user_id}
        if room_id in self.invited:
            return {"membership": "invite", "sender": "@alice:hs.test"}
        return None

    async def leave(self, room_id: str) -> None:
        self.leave_calls.append(room_id)
        self.joined.discard(room_id)
        self.left.add(room_id)
        self._set_membership(room_id, "leave", self.user_id)

    def kick(self, room_id: str, by: str = "@alice:hs.test", *, ban: bool = False) -> None:
        self.joined.discard(room_id)
        self.removed[room_id] = {"membership": "ban" if ban else "leave", "sender": by}
        self._set_membership(room_id, "ban" if ban else "leave", by)

    async def resolve_alias(self, alias: str) -> str | None:
        return self.aliases.get(alias)

    async def join(self, room_id_or_alias: str) -> str:
        self.join_calls.append(room_id_or_alias)
        room_id = self.aliases.get(room_id_or_alias, room_id_or_alias)
        if room_id not in self.rooms:
            raise MatrixError("join", 404, "M_NOT_FOUND")
        if room_id in self.refuse_join or self.removed.get(room_id, {}).get("membership") == "ban":
            raise MatrixError("join", 403, "M_FORBIDDEN")
        self.removed.pop(room_id, None)
        self.left.discard(room_id)
        self.joined.add(room_id)
        self.invited.discard(room_id)
        self._set_membership(room_id, "join", self.user_id)
        return room_id

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        if room_id not in self.rooms:
            raise MatrixError("state", 404, "M_NOT_FOUND")
        if not self._state_visible(room_id):
            raise MatrixError("state", 403, "M_FORBIDDEN")
        return [dict(e) for e in self.rooms[room_id].state]

    async def direct_rooms(self) -> dict[str, list[str]]:
        return self.direct

    async def messages(self, room_id: str, start: str | None, limit: int) -> Page:
        self.message_calls += 1
        room = self.rooms[room_id]
        if not self._visible(room_id):
            raise MatrixError("messages", 403, "M_FORBIDDEN")
        if room.fail_messages:
            raise MatrixError("messages", 500, "M_UNKNOWN")
        offset = int(start[1:]) if start else 0
        chunk = room.timeline[offset : offset + limit]
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


_RANGE_TESTS = {
    "gt": lambda value, bound: value > bound,
    "gte": lambda value, bound: value >= bound,
    "lt": lambda value, bound: value < bound,
    "lte": lambda value, bound: value <= bound,
}


def _holds(payload: dict[str, Any], condition: schema.Condition) -> bool:
    """One plain condition, with Qdrant's meaning: a list field matches when any element does."""
    kind, key, argument = condition
    value = payload.get(key)
    if kind == "range":
        return isinstance(value, int) and all(_RANGE_TESTS[op](value, bound) for op, bound in argument.items())
    values = value if isinstance(value, list) else [value]
    wanted = argument if kind == "any" else [argument]
    return any(v in wanted for v in values if v is not None)


class MemoryIndex(WriterQueries):
    """An in-memory index serving both ports (``IndexWriter`` and ``IndexReader``) through the same
    algorithms and checks as the real adapters (``daemon.index.queries``), over dict primitives.
    Hybrid search is MaxSim (the best message's cosine) + sparse dot product, fused by
    ``fuse_legs`` as the adapters fuse, and each hit carries its messages' cosines."""

    current_generation = None

    def __init__(self) -> None:
        self.points: dict[str, tuple[dict[str, Any], list[list[float]] | None, SparseVector | None]] = {}
        self._meta: IndexMeta | None = None

    # -- primitives
    def _records(self, must: list[schema.Condition], should: list[schema.Condition] | None = None) -> list[Any]:
        return [
            SimpleNamespace(id=pid, payload=payload)
            for pid, (payload, _, _) in self.points.items()
            if all(_holds(payload, c) for c in must) and (not should or any(_holds(payload, c) for c in should))
        ]

    def _scroll(self, must: list[schema.Condition], should: list[schema.Condition] | None = None) -> list[Any]:
        return self._records(must, should)

    def _scroll_by_ts(
        self, must: list[schema.Condition], descending: bool, limit: int, field: str = schema.TS_START
    ) -> list[Any]:
        rows = sorted(self._records(must), key=lambda r: r.payload.get(field) or 0, reverse=descending)
        return rows[:limit]

    def _room_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self._records([schema.IS_WINDOW]):
            counts[record.payload[schema.ROOM_ID]] = counts.get(record.payload[schema.ROOM_ID], 0) + 1
        return counts

    def _retrieve(self, ids: Sequence[str]) -> list[Any]:
        return [SimpleNamespace(id=pid, payload=self.points[pid][0]) for pid in ids if pid in self.points]

    def _count(self, must: list[schema.Condition]) -> int:
        return len(self._records(must))

    def _retrieve_dense(self, ids: Sequence[str]) -> list[tuple[Any, dict[str, Any] | None, Any]]:
        return [(pid, self.points[pid][0], self.points[pid][1]) for pid in ids if pid in self.points]

    # -- writer
    def read_meta(self) -> IndexMeta | None:
        return self._meta

    def newer_available(self) -> bool:
        return False

    def reset(self, meta: IndexMeta) -> None:
        self._meta = schema.require_meta(meta)
        self.points = {}
        self.set_meta(schema.META_INDEX, schema.index_meta_value(meta))

    def set_meta(self, key: str, value: Any) -> None:
        self.points[schema.meta_point_id(key)] = (schema.meta_payload(key, value), None, None)

    def set_meta_entry(self, key: str, value: Any) -> None:
        schema.require_meta_entry(key, value)
        self.set_meta(key, value)

    def set_cursor(self, cursor: RoomCursor) -> None:
        schema.require_cursor(cursor)
        self.set_meta(schema.cursor_key(cursor.room_id), schema.cursor_value(cursor))

    def write_windows(self, room_id: str, upserts: Sequence[WindowPoint], delete_ids: Sequence[str]) -> None:
        schema.require_room_id(room_id)
        if self._meta is None:
            raise IndexWriteError(f"write_windows for {room_id}: index has no meta, call reset(meta) first")
        points = [schema.checked_point(room_id, i, p, self._meta.dim) for i, p in enumerate(upserts)]
        for pid in schema.checked_deletes(room_id, delete_ids):
            payload = self.points.get(pid, ({}, None, None))[0]
            if _holds(payload, schema.IS_WINDOW) and _holds(payload, schema.in_room(room_id)):
                del self.points[pid]
        for p in points:
            self.points[p.point_id] = (p.payload, p.dense, p.sparse)

    def purge_room(self, room_id: str) -> int:
        doomed = [r.id for r in self._records([schema.IS_WINDOW, schema.in_room(schema.require_room_id(room_id))])]
        for pid in [*doomed, *schema.room_meta_point_ids(room_id)]:
            self.points.pop(pid, None)
        return len(doomed)

    rebuilding = False  # in memory there is nothing served to build beside

    def drop_cursor(self, room_id: str) -> None:
        self.points.pop(schema.meta_point_id(schema.cursor_key(schema.require_room_id(room_id))), None)

    def prune_room(self, room_id: str, keep_ids: Sequence[str]) -> int:
        keep = set(keep_ids)
        doomed = [
            r.id
            for r in self._records([schema.IS_WINDOW, schema.in_room(schema.require_room_id(room_id))])
            if r.id not in keep
        ]
        for pid in doomed:
            self.points.pop(pid, None)
        return len(doomed)

    def commit(self, *, complete: bool = True, compact: bool = False) -> None:
        pass

    def close(self) -> None:
        pass

    # -- reader
    def _ranked(self, must: list[schema.Condition], score: Any, limit: int) -> list[tuple[str, float]]:
        scored = [(r.id, score(*self.points[r.id][1:])) for r in self._records(must)]
        scored = [(pid, s) for pid, s in scored if s is not None]
        return sorted(scored, key=lambda t: (-t[1], t[0]))[:limit]

    def _window(self, pid: str) -> Any:
        return schema.stored_window(self.points[pid][0], pid)

    def hybrid(
        self,
        dense: Sequence[float],
        sparse: SparseVector,
        flt: SearchFilter,
        limit: int,
        weights: Mapping[str, float] | None = None,
    ) -> list[ScoredWindow]:
        must = schema.eligibility(flt)
        query = schema.dense_vector(dense, self._meta.dim if self._meta is not None else None)
        lexical = schema.sparse_vector(sparse)
        if must is None or schema.require_limit(limit) == 0:
            return []
        legs = [(schema.LEG_DENSE, self._ranked(must, lambda d, s: _max_sim(query, d), schema.prefetch_depth(limit)))]
        if lexical is not None:
            legs.append(
                (schema.LEG_LEXICAL, self._ranked(must, lambda d, s: _dot(lexical, s), schema.prefetch_depth(limit)))
            )
        fused = fuse_legs([(leg, list(ranked)) for leg, ranked in legs], limit, weights)
        hits = []
        for pid, score, found_by in fused:
            window = self._window(pid)
            context = schema.context_of(self.points[pid][0], len(window.messages))
            scores = message_scores(query, self.points[pid][1], len(window.messages), context)
            hits.append(ScoredWindow(pid, score, window, found_by, scores))
        return hits

    def lexical(self, sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]:
        must, lexical = schema.eligibility(flt), schema.sparse_vector(sparse)
        if must is None or lexical is None or schema.require_limit(limit) == 0:
            return []
        ranked = self._ranked(must, lambda d, s: _dot(lexical, s), limit)
        return [ScoredWindow(pid, score, self._window(pid), (schema.LEG_LEXICAL,)) for pid, score in ranked]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b)) / norm if norm else 0.0


def _max_sim(a: Sequence[float], rows: Sequence[Sequence[float]] | None) -> float | None:
    """MaxSim of one query vector: the best row's cosine (the engines' multivector comparator)."""
    return None if not rows else max(_cosine(a, row) for row in rows)


def _dot(query: SparseVector, stored: SparseVector | None) -> float | None:
    if stored is None:
        return None
    weights = dict(zip(stored.indices, stored.values))
    shared = [value * weights[index] for index, value in zip(query.indices, query.values) if index in weights]
    return sum(shared) if shared else None


def run_refresher(
    matrix: Any,
    index: Any,
    embedder: Any,
    rooms: Sequence[str],
    log: Any = None,
    bridges: Sequence[str] = (),
    **options: Any,
) -> Any:
    """One refresh run of ``rooms`` (the allowed list, no exclusions, ``bridges`` as the extra
    bridge sender patterns) with ``RefreshOptions(**options)``, its journal kept in ``log`` (a
    fresh ``ListLog`` by default); returns the summary."""
    import asyncio

    from daemon.refresher.run import Refresher, RefreshOptions
    from scope import Policy

    refresher = Refresher(
        matrix=matrix,
        index=index,
        embedder=embedder,
        policy=Policy.build(allowed=tuple(rooms), exclude=(), bridge_sender_patterns=tuple(bridges)),
        log=ListLog() if log is None else log,
        options=RefreshOptions(**options),
    )
    return asyncio.run(refresher.run())
