"""The ports: what the refresher and the reader need from the outside world, and nothing more.

Owns: the shapes that cross between ``daemon/refresher/run.py`` / ``daemon/reader/service.py`` and the
adapters (Matrix via nio, the index via Qdrant Edge or qdrant-client, the embedder via fastembed).

Must not: import an adapter, numpy, fastembed or qdrant. Adapters import this module, never the
other way round, so tests can plug in fakes and the CLI client stays light.

Write boundaries (the only places the refresher changes durable state), named so crash proofs
can target them:

1. ``IndexWriter.reset``           — wipe and recreate the index with new meta.
2. ``IndexWriter.write_windows``   — upsert window points and delete window points (one room).
3. ``IndexWriter.set_cursor``      — advance one room's cursor (after 2 was acknowledged).
4. ``IndexWriter.purge_room``      — drop a room's points and cursor (refusal, rebuild).
5. ``IndexWriter.set_meta_entry``  — purge records (``chat-purge:<room>``): the spans already applied.
   (The run summary is not in the index: ``STATE_DIR/last_run.json``, see ``write_last_run``.)
6. ``IndexWriter.commit``          — flush; the Edge adapter publishes a generation here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from daemon.errors import OperationalError


class IndexWriteError(OperationalError, RuntimeError):
    """A write the index did not acknowledge. The caller must not advance any cursor."""


@dataclass(frozen=True, slots=True)
class SparseVector:
    indices: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class WindowPoint:
    """One window ready to store: deterministic id, both vectors, the payload from
    ``chunker.windows.window_payload``. ``dense`` is None for an empty window (all messages
    redacted), which is kept as a layout record but never matched by a vector query."""

    point_id: str  # a UUID string, chunker.windows.window_point_id(room_id, anchor_id)
    dense: Sequence[float] | None
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
    """The refresher's side of the index. Exactly one process holds a writer at a time."""

    def read_meta(self) -> IndexMeta | None: ...
    def reset(self, meta: IndexMeta) -> None: ...
    def write_windows(self, room_id: str, upserts: Sequence[WindowPoint], delete_ids: Sequence[str]) -> None: ...
    def get_windows(self, point_ids: Sequence[str]) -> list[dict[str, Any]]: ...
    def windows_with_events(self, room_id: str, event_ids: Sequence[str]) -> list[dict[str, Any]]: ...
    def windows_in_span(self, room_id: str, ts_from: int, ts_to: int) -> list[dict[str, Any]]: ...
    def get_cursor(self, room_id: str) -> RoomCursor | None: ...
    def set_cursor(self, cursor: RoomCursor) -> None: ...
    def rooms_with_data(self) -> set[str]: ...
    def count_windows(self, room_id: str | None = None) -> int: ...
    def purge_room(self, room_id: str) -> int: ...
    def get_meta_entry(self, key: str) -> Any | None: ...
    def set_meta_entry(self, key: str, value: Any) -> None: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Eligibility, applied inside every query leg before ranking. ``None`` means no constraint;
    ``room_ids=()`` matches nothing (an unknown alias resolves to nothing, never to everything)."""

    room_ids: tuple[str, ...] | None = None
    senders: tuple[str, ...] | None = None
    after_ms: int | None = None  # ts_end >= after_ms
    before_ms: int | None = None  # ts_start <= before_ms


@dataclass(frozen=True, slots=True)
class ScoredWindow:
    point_id: str
    score: float
    payload: dict[str, Any]
    legs: tuple[str, ...] = field(default=())  # which legs matched: "dense", "lexical"


class IndexReader(Protocol):
    """The reader's side. Never writes; may be swapped for a newer generation at any time."""

    def read_meta(self) -> IndexMeta | None: ...
    def hybrid(self, dense: Sequence[float], sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]: ...
    def lexical(self, sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]: ...
    def listing(self, flt: SearchFilter, after: tuple[int, str] | None, limit: int) -> list[dict[str, Any]]: ...
    def window_of_event(self, event_id: str) -> dict[str, Any] | None: ...
    def neighbours(self, room_id: str, ts: int, before: int, after: int) -> list[dict[str, Any]]: ...
    def room_aliases(self) -> dict[str, str]: ...
    def close(self) -> None: ...


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
    def sparse(self, texts: Sequence[str]) -> list[SparseVector]: ...
    def sparse_query(self, text: str) -> SparseVector: ...


class MatrixError(OperationalError, RuntimeError):
    """A homeserver call failed. ``status``/``errcode`` as the server said; never holds a token."""

    def __init__(self, what: str, status: int | None = None, errcode: str | None = None):
        super().__init__(f"{what}: {status or ''} {errcode or ''}".strip())
        self.what = what
        self.status = status
        self.errcode = errcode


@dataclass(frozen=True, slots=True)
class Page:
    """One /messages page read forwards. ``events`` are raw event dicts; ``end`` is None after the
    last page (keep the previous non-None end as the cursor)."""

    events: list[dict[str, Any]]
    end: str | None


class MatrixSource(Protocol):
    """The homeserver as the refresher sees it, through the service user's token."""

    async def whoami(self) -> str: ...
    async def joined_rooms(self) -> list[str]: ...
    async def invited_rooms(self) -> list[str]: ...
    async def resolve_alias(self, alias: str) -> str | None: ...
    async def join(self, room_id_or_alias: str) -> str: ...
    async def room_state(self, room_id: str) -> list[dict[str, Any]]: ...
    async def direct_rooms(self) -> dict[str, list[str]]: ...
    async def messages(self, room_id: str, start: str | None, limit: int) -> Page: ...
    async def event(self, room_id: str, event_id: str) -> dict[str, Any] | None: ...
    async def close(self) -> None: ...
