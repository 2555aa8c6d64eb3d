"""The index port: what the refresher writes to and the reader reads from the index, and nothing more.

Owns: the shapes that cross between ``daemon/refresher/run.py`` / ``daemon/reader/`` and the index
adapters (``edge_*`` over Qdrant Edge, ``remote_*`` over qdrant-client): ``IndexWriter``,
``IndexReader`` and the values they take and give.

Must not: import an adapter, numpy, fastembed or qdrant, or anything outside the standard library
and ``daemon.errors``: the stdlib-only CLI client imports it (through ``daemon.reader.search``).

Write boundaries (the only places the refresher changes durable state), named so crash proofs
can target them:

1. ``IndexWriter.reset``           — start a new index with new meta, built beside the served one.
2. ``IndexWriter.write_windows``   — upsert window points and delete window points (one room).
3. ``IndexWriter.set_cursor``      — advance one room's cursor (after 2 was acknowledged).
4. ``IndexWriter.purge_room``      — drop a room's cursor, then its points (refusal, purge);
   ``drop_cursor`` / ``prune_room`` — a room rebuild: cursor first, old windows last.
5. ``IndexWriter.set_meta_entry``  — purge records (``chat-purge:<room>``): the spans already applied;
   room directory entries (``room:<room>``, a ``RoomEntry``): names and routing servers.
   (The run summary is not in the index: ``STATE_DIR/last_run.json``, see ``write_last_run``.)
6. ``IndexWriter.commit``          — flush; the Edge adapter publishes a generation here, and a
   finished full rebuild (``complete=True``) replaces the served index only here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from daemon.errors import OperationalError


class IndexWriteError(OperationalError, RuntimeError):
    """A write the index did not acknowledge. The caller must not advance any cursor."""


class IndexUnreadableError(OperationalError, RuntimeError):
    """The published generation (``generation``; None when ``CURRENT`` itself is what cannot be
    read) exists but cannot be read or loaded: corrupt, truncated, unreadable, or holding a link.
    Not "nothing published yet": the operator must look at it."""

    def __init__(self, generation: int | None, where: str, reason: str):
        self.generation = generation
        self.where = where
        self.reason = reason
        named = f"generation {generation}" if generation is not None else "the current generation"
        super().__init__(f"{named} ({where}) is unreadable: {reason}")


@dataclass(frozen=True, slots=True)
class SparseVector:
    indices: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class WindowPoint:
    """One window ready to store: deterministic id, its vectors, the payload from
    ``daemon.index.schema.window_payload``. ``dense`` holds one vector per message of the payload
    (``<localpart>: <body>`` embedded alone), in message order, then one per context row the
    payload's ``context_of`` lists: the index compares a query with each and a window scores by
    its best message (``schema.DENSE``). ``dense`` is None for an
    empty window (all messages redacted), which is kept as a layout record but never matched by a
    vector query. ``sparse`` is the BM25 vector of the whole window's text."""

    point_id: str  # a UUID string, chunker.windows.window_point_id(room_id, anchor_id)
    dense: Sequence[Sequence[float]] | None
    sparse: SparseVector | None
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class IndexMeta:
    """What the stored vectors and chunks were made with. Any difference forces a full rebuild."""

    model: str
    dim: int
    chat_version: str
    corpus: str = "chat"


@dataclass(frozen=True, slots=True)
class RoomCursor:
    """Where a room's ingest stands. Written only after the room's window writes were acknowledged."""

    room_id: str
    end_token: str  # the last non-None ``end`` of /messages
    last_event_id: str
    open_window_id: str | None  # point id of the room's open (last) window
    chat_version: str
    updated_ms: int = 0


class IndexWriter(Protocol):
    """The refresher's side of the index. Exactly one process holds a writer at a time.
    ``rebuilding`` is True while a full rebuild is written beside the served index."""

    rebuilding: bool

    def read_meta(self) -> IndexMeta | None: ...
    def reset(self, meta: IndexMeta) -> None: ...
    def write_windows(self, room_id: str, upserts: Sequence[WindowPoint], delete_ids: Sequence[str]) -> None: ...
    def get_windows(self, point_ids: Sequence[str]) -> list[dict[str, Any]]: ...
    def message_vectors(self, point_ids: Sequence[str]) -> dict[str, list[float]]: ...
    def windows_with_events(self, room_id: str, event_ids: Sequence[str]) -> list[dict[str, Any]]: ...
    def windows_in_span(self, room_id: str, ts_from: int, ts_to: int) -> list[dict[str, Any]]: ...
    def get_cursor(self, room_id: str) -> RoomCursor | None: ...
    def set_cursor(self, cursor: RoomCursor) -> None: ...
    def rooms_with_data(self) -> set[str]: ...
    def purge_room(self, room_id: str) -> int: ...
    def drop_cursor(self, room_id: str) -> None: ...
    def prune_room(self, room_id: str, keep_ids: Sequence[str]) -> int: ...
    def get_meta_entry(self, key: str) -> Any | None: ...
    def set_meta_entry(self, key: str, value: Any) -> None: ...
    def commit(self, *, complete: bool = True, compact: bool = False) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Eligibility, applied inside every query leg before ranking. ``senders`` None or ``()``: no
    sender constraint. ``room_ids=None``: no room filter, but ``room_ids=()`` matches nothing (an
    unknown alias resolves to nothing, never to everything)."""

    room_ids: tuple[str, ...] | None = None
    senders: tuple[str, ...] | None = None
    after_ms: int | None = None  # ts_end >= after_ms
    before_ms: int | None = None  # ts_start <= before_ms


@dataclass(frozen=True, slots=True)
class WindowMessage:
    """One message of a stored window, as the read side cites it."""

    event_id: str
    sender: str
    ts: int  # origin_server_ts, unix ms
    body: str
    reply_to: str | None = None  # the event id it replies to
    display_name: str | None = None  # the sender's display name when it was sent; None: not known


@dataclass(frozen=True, slots=True)
class RoomEntry:
    """A room's directory entry, written by the refresher on every run that admits the room and
    dropped with its windows: what the reader resolves room names with and cites the room by.
    ``aliases``: every alias the room answers to (canonical, alt, the local directory's, the
    ROOMS entry); ``allowed_as``: the ROOMS entries that selected it; ``via``: the servers its
    permalinks route through."""

    room_id: str
    name: str | None = None
    canonical_alias: str | None = None
    alt_aliases: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    allowed_as: tuple[str, ...] = ()
    via: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RoomSummary:
    """What the index holds of one room: its windows, its messages, and the times of its first
    and last message (unix ms; None while it holds none)."""

    room_id: str
    windows: int
    messages: int
    first_ts: int | None
    last_ts: int | None


@dataclass(frozen=True, slots=True)
class StoredWindow:
    """A stored window as the read side sees it (``daemon.index.schema.stored_window``)."""

    chunk_id: str
    room_id: str
    room_alias: str | None
    first_event_id: str | None
    last_event_id: str | None
    ts_start: int
    ts_end: int
    messages: tuple[WindowMessage, ...]
    thread_root: str | None = None  # the thread it lays out; None: the room's main timeline


@dataclass(frozen=True, slots=True)
class ScoredWindow:
    point_id: str
    score: float
    window: StoredWindow
    legs: tuple[str, ...] = field(default=())  # which legs matched: "dense", "lexical"
    # The dense similarity of each message to the query, in ``window.messages`` order, from the
    # stored message vectors; empty where the index could not say (attribution then marks none).
    message_scores: tuple[float, ...] = field(default=())
    # The raw score each leg that found the window gave it (``(leg name, score)``: cosine for
    # "dense", BM25 for "lexical"), before the legs were fused into ``score``: what the audit line
    # records as the window's score components. Empty where the index could not say.
    leg_scores: tuple[tuple[str, float], ...] = field(default=())


class IndexReader(Protocol):
    """The reader's side. Never writes; may be swapped for a newer generation at any time.

    ``current_generation`` names the published generation it reads (None where the index has no
    generations: a Qdrant server); ``newer_available()`` says when a newer one can be opened."""

    @property
    def current_generation(self) -> int | None: ...
    def newer_available(self) -> bool: ...
    def read_meta(self) -> IndexMeta | None: ...
    def hybrid(
        self,
        dense: Sequence[float],
        sparse: SparseVector,
        flt: SearchFilter,
        limit: int,
        weights: Mapping[str, float] | None = None,
    ) -> list[ScoredWindow]:
        """Dense and lexical legs for one text, fused by ``weights`` per leg name ("dense",
        "lexical"; None: ``schema.LEG_WEIGHTS``)."""
        ...

    def lexical(self, sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]: ...
    def listing(
        self, flt: SearchFilter, after: tuple[int, str] | None, limit: int, descending: bool = False
    ) -> list[StoredWindow]: ...
    def window_of_event(self, event_id: str) -> StoredWindow | None: ...
    def neighbours(
        self, room_id: str, ts: int, before: int, after: int, thread_root: str | None = None
    ) -> list[StoredWindow]: ...
    def thread_windows(
        self, thread_root: str, after: tuple[int, str] | None, limit: int, room_id: str | None = None
    ) -> list[StoredWindow]: ...
    def messages_by_id(self, event_ids: Sequence[str], room_id: str | None = None) -> dict[str, WindowMessage]: ...
    def room_aliases(self) -> dict[str, str]: ...
    def room_directory(self, room_ids: Sequence[str] | None = None) -> dict[str, RoomEntry]: ...
    def window_counts(self) -> dict[str, int]: ...
    def room_summaries(self) -> dict[str, RoomSummary]: ...
    def cursors(self) -> dict[str, RoomCursor]: ...
    def close(self) -> None: ...
