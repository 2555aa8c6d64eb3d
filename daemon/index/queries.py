"""The index algorithms, written once over a few primitives each backend supplies.

Owns: ``IndexQueries``, the base of every index adapter (Edge and remote, reader and writer
sides): the exact ``(ts_start, chunk_id)`` order across page boundaries (``_ordered``),
``listing``, ``window_of_event``, ``neighbours``, ``thread_windows``, ``messages_by_id``,
``window_counts``, ``cursors``, ``room_aliases``, ``room_directory`` and meta reads; ``fuse_legs``
(one text's legs fused) and ``message_scores`` (which message of a window the dense leg matched);
and ``WriterQueries``, the writer's reads on top (``get_windows``, ``message_vectors``,
``windows_with_events``, ``windows_in_span``, ``rooms_with_data``, ``get_cursor``,
``get_meta_entry``). Each checks its input here, once, with ``schema``'s
checks, so every backend refuses the same input with the same error.

Must not: import an engine, write, or import a writer module (the read sides inherit it).

The primitives a backend supplies, over plain ``schema.Condition`` values; a record is anything
with ``.id`` and ``.payload`` (both engines' point records are):

- ``_scroll(must, should=None)``: every point matching all of ``must`` and (when given) one of
  ``should``, all pages, payloads included, in no particular order;
- ``_scroll_by_ts(must, descending, limit, field=ts_start)``: one page of up to ``limit`` matches
  ordered by ``field`` (``ts_start`` or ``ts_end``) alone (the engines cannot order by two keys;
  ``_ordered`` settles ties);
- ``_room_counts()`` (windows per room, empty layout windows included, exact),
  ``_retrieve(ids)`` and ``_retrieve_dense(ids)`` (the writer's: payloads with their vectors);
- optionally ``_present()`` (False while there is no index to read: a collection not yet
  created), ``_reading(operation, room_id)`` (the context a writer's read runs in: the remote
  writer turns faults into ``IndexWriteError`` there) and ``_newest_each(rooms)`` (one request
  for many rooms where the engine can batch).
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Iterable, Mapping, Protocol, Self, Sequence

from daemon.index import schema
from daemon.index.port import (
    IndexMeta,
    RoomCursor,
    RoomEntry,
    RoomSummary,
    SearchFilter,
    StoredWindow,
    WindowMessage,
)
from daemon.index.schema import HAS_MESSAGES, IS_META, IS_WINDOW, Condition, in_room, in_timeline, ts_start_in

# Event ids per "any" condition, so one request stays small.
_IDS_PER_QUERY = 512


class Record(Protocol):
    id: Any
    payload: dict[str, Any] | None


def _key(record: Record, field: str = schema.TS_START) -> tuple[int, str]:
    if field == schema.TS_START:
        return schema.listing_key(record.payload, record.id)
    payload = record.payload or {}
    return (int(payload.get(field) or 0), str(payload.get(schema.CHUNK_ID) or record.id))


def _window(record: Record) -> StoredWindow:
    return schema.stored_window(record.payload, record.id)


def fuse_legs(
    legs: Sequence[tuple[str, Sequence[tuple[str, float]]]], limit: int, weights: Mapping[str, float] | None = None
) -> list[tuple[str, float, tuple[str, ...]]]:
    """One text's legs fused: ``(leg name, [(point id, raw score), best first])`` per leg ->
    ``(point id, fused score, legs that found it)``, best first, at most ``limit``. Each leg's
    scores are min-max scaled over its own candidates and weighted by ``weights`` (the query text's,
    ``daemon.reader.search.leg_weights``; ``schema.LEG_WEIGHTS`` where none are given); a
    leg whose candidates all score alike gives each its full weight. Order: ``schema.fused_order``
    (on an exact tie the better lexical rank, then the id)."""
    fused: dict[str, float] = {}
    found_by: dict[str, list[str]] = {}
    lexical_rank: dict[str, int] = {}
    for name, hits in legs:
        if not hits:
            continue
        top, low = hits[0][1], hits[-1][1]
        span = top - low
        weight = (schema.LEG_WEIGHTS if weights is None else weights).get(name, 1.0)
        for rank, (pid, score) in enumerate(hits, start=1):
            if name in found_by.get(pid, ()):
                continue
            fused[pid] = fused.get(pid, 0.0) + weight * ((score - low) / span if span > 0 else 1.0)
            found_by.setdefault(pid, []).append(name)
            if name == schema.LEG_LEXICAL:
                lexical_rank[pid] = rank
    order = sorted(fused, key=lambda pid: schema.fused_order(fused[pid], lexical_rank.get(pid), pid))[:limit]
    return [(pid, fused[pid], tuple(found_by[pid])) for pid in order]


def raw_leg_scores(legs: Sequence[tuple[str, Sequence[tuple[str, float]]]]) -> dict[str, tuple[tuple[str, float], ...]]:
    """Per point id, the raw score each leg gave it (its best, where a leg lists it twice), in leg
    order: a fused hit's score components (``ScoredWindow.leg_scores``)."""
    raw: dict[str, dict[str, float]] = {}
    for name, hits in legs:
        for pid, score in hits:
            raw.setdefault(pid, {}).setdefault(name, score)
    return {pid: tuple(scores.items()) for pid, scores in raw.items()}


def message_scores(
    query: Sequence[float], stored: Any, n_messages: int, context_of: Sequence[int] = ()
) -> tuple[float, ...]:
    """The cosine of ``query`` with each message of a window: its own row's, or its context
    row's where that is higher (``schema.DENSE``: one row per message in message order, then one
    per message ``context_of`` lists). ``()`` when the stored rows are not that many (an older
    generation's single window vector, a missing vector): then no message is named, rather
    than a wrong one. The engine ranked the window by the largest of these."""
    n_rows = n_messages + len(context_of)
    if not isinstance(stored, (list, tuple)) or len(stored) != n_rows or n_messages == 0:
        return ()
    if not all(isinstance(row, (list, tuple)) and len(row) == len(query) for row in stored):
        return ()
    import numpy as np  # here, not at the top: only a search that found dense hits needs it

    # One matrix product rather than Python sums: a hit page is ~50 rows of 384 floats, and the
    # pure-Python loop cost the reader ~20 ms a query (more than the engine's own search).
    rows = np.asarray(stored, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1)
    norms[norms == 0] = 1.0
    cosines = rows @ q / (norms * (float(np.linalg.norm(q)) or 1.0))
    scores = cosines[:n_messages]
    if len(context_of):
        np.maximum.at(scores, np.asarray(context_of, dtype=np.int64), cosines[n_messages:])
    return tuple(scores.tolist())


class IndexQueries:
    """The read algorithms over the primitives (see the module docstring)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- primitives ----------------------------------------------------------------------------

    def _scroll(self, must: list[Condition], should: list[Condition] | None = None) -> list[Any]:
        raise NotImplementedError

    def _scroll_by_ts(
        self, must: list[Condition], descending: bool, limit: int, field: str = schema.TS_START
    ) -> list[Any]:
        raise NotImplementedError

    def _room_counts(self) -> dict[str, int]:
        raise NotImplementedError

    def _count(self, must: list[Condition]) -> int:
        raise NotImplementedError

    def _retrieve(self, ids: Sequence[str]) -> list[Any]:
        raise NotImplementedError

    def _retrieve_dense(self, ids: Sequence[str]) -> list[tuple[Any, dict[str, Any] | None, Any]]:
        """``(id, payload, stored schema.DENSE vector or None)`` of each point among ``ids``."""
        raise NotImplementedError

    def _scroll_fields(self, must: list[Condition], fields: Sequence[str]) -> list[Any]:
        """``_scroll(must)`` where only ``fields`` of each payload are needed; an engine that can
        leave the rest (message texts) unread overrides it."""
        return self._scroll(must)

    def _present(self) -> bool:
        return True

    def _reading(self, operation: str, room_id: str | None = None) -> ContextManager[None]:
        return contextlib.nullcontext()

    def _newest_each(self, rooms: Sequence[str]) -> list[Any | None]:
        """The newest window (by ts_start) of each room, None for a room without one."""
        return [next(iter(self._scroll_by_ts([IS_WINDOW, in_room(room)], True, 1)), None) for room in rooms]

    # -- algorithms ----------------------------------------------------------------------------

    def _ordered(
        self,
        must: list[Condition],
        bound: dict[str, int] | None,
        descending: bool,
        limit: int,
        field: str = schema.TS_START,
    ) -> list[Any]:
        """Up to ``limit`` points matching ``must`` and ``bound`` (on ``field``), exactly in
        ``(field, chunk_id)`` order (``schema.listing_key`` for ts_start). The engine orders by
        ``field`` alone, so when the page is full the run of its last value is read whole and the
        order settled here: a page boundary inside equal values neither repeats nor skips a
        window, and never picks one by chance."""
        if limit <= 0:
            return []
        page = self._scroll_by_ts([*must, ("range", field, bound)] if bound else must, descending, limit, field)
        if len(page) >= limit:
            starts = [_key(record, field)[0] for record in page]
            edge_ts = min(starts) if descending else max(starts)
            page = [record for record, start in zip(page, starts) if start != edge_ts]
            page += self._scroll([*must, ("range", field, {"gte": edge_ts, "lte": edge_ts})])
        page.sort(key=lambda record: _key(record, field), reverse=descending)
        return page[:limit]

    def _meta_value(self, key: str) -> Any | None:
        if not self._present():
            return None
        records = self._retrieve([schema.meta_point_id(key)])
        return schema.meta_value_of((record.payload for record in records), key)

    def _index_meta(self) -> IndexMeta | None:
        # An unreadable meta is no meta: the refresher rebuilds.
        return schema.index_meta_from_value(self._meta_value(schema.META_INDEX))

    def _meta_payloads(self) -> list[dict[str, Any]]:
        """The payloads of every meta point (cursors, purge records, index meta)."""
        return [record.payload or {} for record in self._scroll([IS_META])] if self._present() else []

    def listing(
        self, flt: SearchFilter, after: tuple[int, str] | None, limit: int, descending: bool = False
    ) -> list[StoredWindow]:
        """Eligible windows oldest first by ``(ts_start, chunk_id)``, or (``descending``) newest
        first by ``(ts_end, chunk_id)``: by each window's newest message, so a conversation that
        began long ago but was answered last comes first. Strictly after ``after`` (a key of that
        order) in that order."""
        must = schema.eligibility(flt)
        limit, after_key = schema.require_limit(limit), schema.after_key(after)
        if must is None or limit == 0:
            return []
        field = schema.TS_END if descending else schema.TS_START
        return [_window(record) for record in self._page_after(must, after_key, limit, descending, field)]

    def _page_after(
        self,
        must: list[Condition],
        after_key: tuple[int, str] | None,
        limit: int,
        descending: bool = False,
        field: str = schema.TS_START,
    ) -> list[Any]:
        """Up to ``limit`` points matching ``must`` in ``(field, chunk_id)`` order (``descending``:
        the reverse), strictly after ``after_key`` in that order."""
        if after_key is None:
            return self._ordered(must, None, descending, limit, field)
        tied = self._scroll([*must, ("range", field, {"gte": after_key[0], "lte": after_key[0]})])
        beyond = (lambda key: key < after_key) if descending else (lambda key: key > after_key)
        rows = sorted(
            (record for record in tied if beyond(_key(record, field))),
            key=lambda record: _key(record, field),
            reverse=descending,
        )[:limit]
        rest = {"lt": after_key[0]} if descending else {"gt": after_key[0]}
        return rows + self._ordered(must, rest, descending, limit - len(rows), field)

    def window_of_event(self, event_id: str) -> StoredWindow | None:
        """The window holding ``event_id`` as a live message (a redacted id has none)."""
        must = [IS_WINDOW, ("any", schema.EVENT_IDS, [schema.require_event_id(event_id)])]
        page = self._scroll_by_ts(must, False, 1)
        return _window(page[0]) if page else None

    def neighbours(
        self, room_id: str, ts: int, before: int, after: int, thread_root: str | None = None
    ) -> list[StoredWindow]:
        """Up to ``before`` windows of the room's timeline (the main one, or the thread of
        ``thread_root``) starting strictly before ``ts`` and up to ``after`` starting strictly
        after it, the nearest by (ts_start, chunk_id), oldest first. Empty windows are skipped,
        so N windows always cover N messages on that side."""
        must = [IS_WINDOW, HAS_MESSAGES, in_room(schema.require_room_id(room_id)), in_timeline(thread_root)]
        earlier = self._ordered(must, {"lt": int(ts)}, True, schema.require_limit(before, "before"))
        later = self._ordered(must, {"gt": int(ts)}, False, schema.require_limit(after, "after"))
        return [_window(record) for record in [*reversed(earlier), *later]]

    def thread_windows(
        self, thread_root: str, after: tuple[int, str] | None, limit: int, room_id: str | None = None
    ) -> list[StoredWindow]:
        """The windows of the thread rooted at ``thread_root`` (in ``room_id`` when given: a sender
        may name another room's event as a root), in ``(ts_start, chunk_id)`` order strictly after
        ``after``, empty ones skipped."""
        must = [IS_WINDOW, HAS_MESSAGES, in_timeline(schema.require_event_id(thread_root))]
        if room_id is not None:
            must.append(in_room(schema.require_room_id(room_id)))
        limit, after_key = schema.require_limit(limit), schema.after_key(after)
        if limit == 0:
            return []
        return [_window(record) for record in self._page_after(must, after_key, limit)]

    def messages_by_id(self, event_ids: Sequence[str], room_id: str | None = None) -> dict[str, WindowMessage]:
        """{event id: the live message} for those of ``event_ids`` the index holds (in ``room_id``
        when given; a redacted or never-stored id is absent), one request per ``_IDS_PER_QUERY``."""
        wanted = list(dict.fromkeys(schema.require_event_id(event_id) for event_id in event_ids))
        found: dict[str, WindowMessage] = {}
        where = [IS_WINDOW] if room_id is None else [IS_WINDOW, in_room(schema.require_room_id(room_id))]
        for start in range(0, len(wanted), _IDS_PER_QUERY):
            chunk = wanted[start : start + _IDS_PER_QUERY]
            for record in self._scroll([*where, ("any", schema.EVENT_IDS, chunk)]):
                for message in _window(record).messages:
                    if message.event_id in chunk:
                        found[message.event_id] = message
        return found

    def count_eligible(self, flt: SearchFilter) -> int:
        """Exact count of the windows ``flt`` makes searchable (the reader's audit line says how
        many eligibility excluded: this without a filter minus this with it)."""
        must = schema.eligibility(flt)
        if must is None or not self._present():
            return 0
        return int(self._count(must))

    def window_counts(self) -> dict[str, int]:
        """{room_id: windows stored} (empty layout windows included), exact."""
        return self._room_counts() if self._present() else {}

    def room_summaries(self) -> dict[str, RoomSummary]:
        """{room_id: its windows, messages and first and last message times}, for every room that
        holds a message (one scroll of four payload fields per window)."""
        if not self._present():
            return {}
        fields = [schema.ROOM_ID, schema.TS_START, schema.TS_END, schema.N_MESSAGES]
        found: dict[str, list[int]] = {}
        for record in self._scroll_fields([IS_WINDOW], fields):
            payload = record.payload or {}
            room = payload.get(schema.ROOM_ID)
            if not isinstance(room, str):
                continue
            sums = found.setdefault(room, [0, 0, 0, 0])  # windows, messages, first ts, last ts
            sums[0] += 1
            count = int(payload.get(schema.N_MESSAGES) or 0)
            if count:
                start, end = int(payload.get(schema.TS_START) or 0), int(payload.get(schema.TS_END) or 0)
                sums[2] = start if sums[1] == 0 else min(sums[2], start)
                sums[3] = max(sums[3], end)
                sums[1] += count
        return {
            room: RoomSummary(room, windows, messages, first if messages else None, last if messages else None)
            for room, (windows, messages, first, last) in found.items()
            if messages
        }

    def cursors(self) -> dict[str, RoomCursor]:
        """Every room cursor in the index."""
        return schema.cursors_from_meta(self._meta_payloads())

    def room_aliases(self) -> dict[str, str]:
        """{room_id: alias} for every stored room whose newest window carries an alias."""
        rooms = sorted(self.window_counts())
        aliases: dict[str, str] = {}
        for room, newest in zip(rooms, self._newest_each(rooms)):
            alias = (newest.payload or {}).get(schema.ROOM_ALIAS) if newest is not None else None
            if isinstance(alias, str) and alias:
                aliases[room] = alias
        return aliases

    def room_directory(self, room_ids: Sequence[str] | None = None) -> dict[str, RoomEntry]:
        """{room_id: directory entry} of the rooms among ``room_ids`` that have one (a point
        lookup each), or of every room when ``room_ids`` is None (a scroll of the meta points)."""
        if not self._present():
            return {}
        if room_ids is None:
            return schema.room_entries_from_meta(self._meta_payloads())
        rooms = list(dict.fromkeys(schema.require_room_id(room) for room in room_ids))
        if not rooms:
            return {}
        records = self._retrieve([schema.meta_point_id(schema.room_entry_key(room)) for room in rooms])
        return schema.room_entries_from_meta(record.payload or {} for record in records)


class WriterQueries(IndexQueries):
    """The refresher's reads, on top of the reader's."""

    def get_meta_entry(self, key: str) -> Any | None:
        schema.require_meta_key(key)
        with self._reading(f"get_meta_entry {key!r}"):
            return self._meta_value(key)

    def get_cursor(self, room_id: str) -> RoomCursor | None:
        schema.require_room_id(room_id)
        with self._reading("get_cursor", room_id):
            value = self._meta_value(schema.cursor_key(room_id))
        return schema.cursor_from_value(value, room_id)

    def get_windows(self, point_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The stored payloads of the window points among ``point_ids``, in that order."""
        ids = list(dict.fromkeys(schema.require_uuid(pid, f"point_ids[{i}]") for i, pid in enumerate(point_ids)))
        if not ids:
            return []
        with self._reading("get_windows"):
            records = self._retrieve(ids)
        by_id = {str(r.id): r.payload for r in records if (r.payload or {}).get(schema.KIND) == schema.KIND_WINDOW}
        return [by_id[pid] for pid in ids if pid in by_id]

    def message_vectors(self, point_ids: Sequence[str]) -> dict[str, list[float]]:
        """The stored dense vector of each row text (a message line ``<localpart>: <body>``, or a
        context row's two lines) of the windows among ``point_ids``: a rewritten window (the open
        one growing, an edit) reuses the vectors of its unchanged rows instead of embedding them
        again."""
        ids = list(dict.fromkeys(schema.require_uuid(pid, f"point_ids[{i}]") for i, pid in enumerate(point_ids)))
        if not ids:
            return {}
        with self._reading("message_vectors"):
            records = self._retrieve_dense(ids)
        found: dict[str, list[float]] = {}
        for _, payload, rows in records:
            lines = schema.row_texts(payload)
            if isinstance(rows, list) and len(rows) == len(lines) and all(isinstance(r, list) for r in rows):
                found.update(zip(lines, rows))
        return found

    def windows_with_events(self, room_id: str, event_ids: Iterable[str]) -> list[dict[str, Any]]:
        """The room's windows holding, or recording the redaction of, any of ``event_ids``, and the
        windows of any thread whose root is among them (the fold finds a thread's open window so)."""
        must = [IS_WINDOW, in_room(schema.require_room_id(room_id))]
        wanted = list(dict.fromkeys(event_ids))
        found: dict[str, Any] = {}
        with self._reading("windows_with_events", room_id):
            for start in range(0, len(wanted), _IDS_PER_QUERY):
                chunk = wanted[start : start + _IDS_PER_QUERY]
                should = [
                    ("any", schema.EVENT_IDS, chunk),
                    ("any", schema.REDACTED_IDS, chunk),
                    ("any", schema.TIMELINE, chunk),
                ]
                found.update((str(record.id), record) for record in self._scroll(must, should))
        return [record.payload for record in sorted(found.values(), key=_key)]

    def windows_in_span(self, room_id: str, ts_from: int, ts_to: int) -> list[dict[str, Any]]:
        """The room's windows overlapping [ts_from, ts_to] (inclusive, ms), in listing order."""
        schema.require_room_id(room_id)
        if ts_from > ts_to:
            raise ValueError(f"ts_from ({ts_from}) must not be after ts_to ({ts_to})")
        must = [
            IS_WINDOW,
            in_room(room_id),
            ts_start_in(lte=int(ts_to)),
            ("range", schema.TS_END, {"gte": int(ts_from)}),
        ]
        with self._reading("windows_in_span", room_id):
            records = self._scroll(must)
        return [record.payload for record in sorted(records, key=_key)]

    def rooms_with_data(self) -> set[str]:
        """Rooms holding a window, a cursor or a directory entry: everything ``purge_room`` would drop."""
        with self._reading("rooms_with_data"):
            rooms = set(self.window_counts())
            metas = self._meta_payloads()
        keys = [payload.get(schema.META_KEY) for payload in metas]
        meta_rooms = [schema.room_of_cursor_key(key) or schema.room_of_entry_key(key) for key in keys]
        return rooms | {room for room in meta_rooms if room is not None}
