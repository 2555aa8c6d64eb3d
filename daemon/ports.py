"""The ports: what the refresher and the reader need from the homeserver and the embedder.

Owns: the shapes that cross between ``daemon/refresher/`` / ``daemon/reader/`` and the Matrix
adapter (nio) and the embedder (fastembed). The index port is ``daemon/index/port.py``.

Must not: import an adapter, numpy, fastembed or qdrant. Adapters import this module, never the
other way round, so tests can plug in fakes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from daemon.errors import OperationalError
from daemon.index.port import SparseVector


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
    def sparse(self, texts: Sequence[str]) -> list[SparseVector]: ...
    def sparse_query(self, text: str) -> SparseVector: ...


class MatrixError(OperationalError, RuntimeError):
    """A homeserver call failed. ``status``/``errcode`` as the server said; never holds a token.
    ``retry_after_ms``: how long a 429 asked us to wait, when it said."""

    def __init__(
        self, what: str, status: int | None = None, errcode: str | None = None, retry_after_ms: int | None = None
    ):
        super().__init__(f"{what}: {status or ''} {errcode or ''}".strip())
        self.what = what
        self.status = status
        self.errcode = errcode
        self.retry_after_ms = retry_after_ms


@dataclass(frozen=True, slots=True)
class Page:
    """One /messages page read forwards. ``events`` are raw event dicts; ``end`` is None after the
    last page (keep the previous non-None end as the cursor). ``state``: the member state of the
    page's senders at its first event, where the server sends it (``lazy_load_members``)."""

    events: list[dict[str, Any]]
    end: str | None
    state: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RoomsOverview:
    """One /sync's view of every room at the start of a run. ``invites``: pending invites -> their
    stripped state. ``latest_event``: joined room -> the id of its newest timeline event, which
    tells a run that a room holds nothing new without asking ``/messages``."""

    invites: dict[str, list[dict[str, Any]]]
    latest_event: dict[str, str]
    next_batch: str | None = None  # where the stream stood: what a later ``changes_since`` starts from


@dataclass(frozen=True, slots=True)
class SyncChanges:
    """What one incremental /sync says happened since a stored ``next_batch``: joined rooms with
    new timeline or state events, rooms newly invited to, rooms left (or kicked, banned from)."""

    changed_rooms: list[str]
    invited_rooms: list[str]
    left_rooms: list[str]


class MatrixSource(Protocol):
    """The homeserver as the refresher sees it, through the service user's token."""

    async def whoami(self) -> str: ...
    async def joined_rooms(self) -> list[str]: ...
    async def invited_rooms(self) -> list[str]: ...
    async def invites(self) -> dict[str, list[dict[str, Any]]]: ...  # room id -> the invite's stripped state
    async def rooms_overview(self) -> RoomsOverview: ...  # invites and newest events, in one request
    async def changes_since(self, since: str) -> SyncChanges: ...  # one incremental /sync
    async def room_summary(self, room_id_or_alias: str) -> dict[str, Any] | None: ...  # None: not visible
    async def room_aliases(self, room_id: str) -> list[str]: ...  # the local directory's; [] if not visible
    async def membership(self, room_id: str) -> dict[str, Any] | None: ...  # {membership, sender}; None: never
    async def leave(self, room_id: str) -> None: ...
    async def resolve_alias(self, alias: str) -> str | None: ...
    async def join(self, room_id_or_alias: str) -> str: ...
    async def room_state(self, room_id: str) -> list[dict[str, Any]]: ...
    async def direct_rooms(self) -> dict[str, list[str]]: ...
    async def messages(self, room_id: str, start: str | None, limit: int) -> Page: ...
    async def event(self, room_id: str, event_id: str) -> dict[str, Any] | None: ...
    async def close(self) -> None: ...
