"""The stored data model, shared by the Edge and the server adapters.

Owns: vector names, payload field names, which payload fields are indexed and how, the ids of
meta points, and the RRF constant. Both adapters import these names; neither invents its own.

Must not: do I/O or import qdrant_edge / qdrant_client (each adapter maps these plain values
onto its own library's types).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from daemon.ports import RoomCursor

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
    prefix = cursor_key("")
    cursors: dict[str, RoomCursor] = {}
    for payload in payloads:
        key = (payload or {}).get(META_KEY)
        if isinstance(key, str) and key.startswith(prefix) and len(key) > len(prefix):
            cursor = cursor_from_value(payload.get(META_VALUE), key[len(prefix):])
            if cursor is not None:
                cursors[cursor.room_id] = cursor
    return cursors
