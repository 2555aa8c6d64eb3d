"""The stored data model, shared by the Edge and the server adapters.

Owns: vector names, payload field names, which payload fields are indexed and how, the ids of
meta points, the RRF constant and the names of the search legs; and the rules both adapters must
apply alike: which windows a ``SearchFilter`` lets through (``eligibility``), the listing order
(``listing_key``), the checks on a window payload and a meta entry before they are written, and
reading meta payloads back (``meta_value_of``, ``index_meta_from_value``, cursors). Both adapters
import these; neither invents its own.

Must not: do I/O or import qdrant_edge / qdrant_client (each adapter maps these plain values
onto its own library's types).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any, Iterable

from daemon.ports import IndexMeta, RoomCursor, SearchFilter

DENSE = "dense"
SPARSE = "bm25"

KIND = "kind"
KIND_WINDOW = "window"
KIND_META = "meta"
CORPUS = "corpus"
CORPUS_CHAT = "chat"

# Window payload fields (see chunker.windows.window_payload).
ROOM_ID = "room_id"
ROOM_ALIAS = "room_alias"
CHUNK_ID = "chunk_id"
ANCHOR_ID = "anchor_id"
FIRST_EVENT_ID = "first_event_id"
LAST_EVENT_ID = "last_event_id"
TS_START = "ts_start"
TS_END = "ts_end"
MESSAGES = "messages"
EVENT_IDS = "event_ids"
SENDERS = "senders"
REDACTED_IDS = "redacted_ids"
N_MESSAGES = "n_messages"
CHAT_VERSION = "chat_version"

# Meta point fields.
META_KEY = "key"
META_VALUE = "value"

# Payload indexes: field -> "keyword" | "integer".
PAYLOAD_INDEXES: dict[str, str] = {
    KIND: "keyword",
    CORPUS: "keyword",
    ROOM_ID: "keyword",
    EVENT_IDS: "keyword",
    REDACTED_IDS: "keyword",
    SENDERS: "keyword",
    TS_START: "integer",
    TS_END: "integer",
    N_MESSAGES: "integer",
}

# Reciprocal rank fusion as the spec writes it: score = sum 1/(k + rank), rank 1-based, k = 60.
# Qdrant's RRF uses 0-based ranks, so the same formula is k = 61 there.
RRF_K_SPEC = 60
RRF_K_QDRANT = RRF_K_SPEC + 1

# The legs of a hybrid query, as a ScoredWindow's ``legs`` names them.
LEG_DENSE = "dense"
LEG_LEXICAL = "lexical"
# Each leg of a hybrid query ranks this many candidates (at least) before fusion.
_PREFETCH_FLOOR = 50


def prefetch_depth(limit: int) -> int:
    """How deep each leg of a hybrid query ranks before fusion cuts to ``limit``."""
    return max(limit * 4, _PREFETCH_FLOOR)


def fused_order(score: float, lexical_rank: int | None, point_id: str) -> tuple[float, float, str]:
    """Sort key of a fused hit: higher RRF score first; on an exact tie the better lexical rank
    wins (an exact identifier must beat a window that is merely about the same thing), then the
    point id, so the order never depends on chance."""
    return (-score, float("inf") if lexical_rank is None else float(lexical_rank), point_id)


_META_NAMESPACE = uuid.UUID("0d9c3b52-6f0e-4d57-9a55-3c1f0b1e7a11")

META_INDEX = "index"
META_LAST_RUN = "last_run"


def cursor_key(room_id: str) -> str:
    return f"cursor:{room_id}"


def room_of_cursor_key(key: Any) -> str | None:
    """The room id a ``cursor:<room_id>`` meta key names, or None for any other key."""
    prefix = cursor_key("")
    if isinstance(key, str) and key.startswith(prefix) and len(key) > len(prefix):
        return key[len(prefix) :]
    return None


def purge_key(room_id: str) -> str:
    return f"chat-purge:{room_id}"


def meta_point_id(key: str) -> str:
    """Deterministic point id of a meta entry, so rewriting a key overwrites it."""
    return str(uuid.uuid5(_META_NAMESPACE, "meta\x00" + key))


def cursor_value(cursor: RoomCursor) -> dict[str, Any]:
    """The stored form of a room cursor (the value of meta ``cursor:<room_id>``)."""
    return dataclasses.asdict(cursor)


def cursor_from_value(value: Any, room_id: str | None = None) -> RoomCursor | None:
    """A stored cursor back, or None when it is missing, unreadable or of another room: the room
    is then read again from the start, which the fold's replay rules make harmless."""
    if not isinstance(value, dict) or (room_id is not None and value.get("room_id") != room_id):
        return None
    names = {f.name for f in dataclasses.fields(RoomCursor)}
    try:
        return RoomCursor(**{k: v for k, v in value.items() if k in names})
    except TypeError:
        return None


def cursors_from_meta(payloads: Any) -> dict[str, RoomCursor]:
    """{room_id: cursor} from meta point payloads (others are skipped)."""
    cursors: dict[str, RoomCursor] = {}
    for payload in payloads:
        room_id = room_of_cursor_key((payload or {}).get(META_KEY))
        if room_id is not None:
            cursor = cursor_from_value(payload.get(META_VALUE), room_id)
            if cursor is not None:
                cursors[cursor.room_id] = cursor
    return cursors


# ---------------------------------------------------------------------------------------------
# Meta entries


def meta_payload(key: str, value: Any) -> dict[str, Any]:
    """The payload of the meta point ``meta_point_id(key)``."""
    return {KIND: KIND_META, META_KEY: key, META_VALUE: value}


def meta_value_of(payloads: Iterable[dict[str, Any] | None], key: str) -> Any | None:
    """The value of meta entry ``key`` among retrieved point payloads, or None."""
    for payload in payloads:
        payload = payload or {}
        if payload.get(KIND) == KIND_META and payload.get(META_KEY) == key:
            return payload.get(META_VALUE)
    return None


def require_meta_entry(key: Any, value: Any) -> None:
    """Refuse a meta entry no adapter may write through ``set_meta_entry``: an empty key, the
    ``index`` key (``reset`` alone writes it) or a value JSON cannot hold."""
    require_meta_key(key)
    if key == META_INDEX:
        raise ValueError("meta key 'index' is written only by reset()")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"meta entry {key!r}: value is not JSON-serialisable: {exc}") from None


def require_meta_key(key: Any) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"meta key must be a non-empty string, got {key!r}")


def index_meta_value(meta: IndexMeta) -> dict[str, Any]:
    """The stored form of the index meta (the value of meta ``index``)."""
    return dataclasses.asdict(meta)


def index_meta_from_value(value: Any) -> IndexMeta | None:
    """The stored index meta back, or None when it is missing or unreadable (the refresher then
    rebuilds the index)."""
    if not isinstance(value, dict):
        return None
    try:
        return IndexMeta(
            model=str(value["model"]),
            dim=int(value["dim"]),
            chat_version=str(value["chat_version"]),
            corpus=str(value.get("corpus", CORPUS_CHAT)),
        )
    except (KeyError, TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Windows


def window_payload_to_write(room_id: str, payload: dict[str, Any], where: str) -> dict[str, Any]:
    """A copy of a window point's payload, checked to be a window of ``room_id``, with ``kind``
    and ``corpus`` filled in when absent. ``where`` prefixes the error message."""
    checked = dict(payload)
    if checked.get(ROOM_ID) != room_id:
        raise ValueError(f"{where}payload.room_id is {checked.get(ROOM_ID)!r}, expected {room_id!r}")
    if checked.setdefault(KIND, KIND_WINDOW) != KIND_WINDOW:
        raise ValueError(f"{where}payload.kind is {checked[KIND]!r}, expected {KIND_WINDOW!r}")
    checked.setdefault(CORPUS, CORPUS_CHAT)
    return checked


def listing_key(payload: dict[str, Any] | None, point_id: Any) -> tuple[int, str]:
    """The total order of listings and neighbours: ``(ts_start, chunk_id)``, the point id
    standing in for a missing chunk id."""
    payload = payload or {}
    return (int(payload.get(TS_START) or 0), str(payload.get(CHUNK_ID) or point_id))


# One condition of a filter, in plain values each adapter maps onto its own library's types:
# ("match", field, value), ("any", field, values) or ("range", field, {"gte"|"lte"|...: int}).
Condition = tuple[str, str, Any]


def eligibility(flt: SearchFilter) -> list[Condition] | None:
    """The conditions a window must meet to be searched or listed under ``flt``, or None when
    ``flt`` matches nothing (``room_ids=()``: an unknown room resolves to nothing, never to
    everything). Always a window, never an empty layout record."""
    if not isinstance(flt, SearchFilter):
        raise TypeError("flt must be a daemon.ports.SearchFilter")
    for name in ("room_ids", "senders"):
        if isinstance(getattr(flt, name), str):
            raise TypeError(f"SearchFilter.{name} must be a tuple of strings, not a single string")
    if flt.room_ids is not None and len(flt.room_ids) == 0:
        return None
    conditions: list[Condition] = [("match", KIND, KIND_WINDOW), ("range", N_MESSAGES, {"gte": 1})]
    if flt.room_ids is not None:
        conditions.append(("any", ROOM_ID, tuple(flt.room_ids)))
    if flt.senders:  # senders=() is "no constraint", as ports.SearchFilter says
        conditions.append(("any", SENDERS, tuple(flt.senders)))
    if flt.after_ms is not None:
        conditions.append(("range", TS_END, {"gte": int(flt.after_ms)}))
    if flt.before_ms is not None:
        conditions.append(("range", TS_START, {"lte": int(flt.before_ms)}))
    return conditions
