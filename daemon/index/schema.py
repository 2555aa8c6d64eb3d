"""The stored data model, shared by the Edge and the remote adapters.

Owns: vector names, payload field names (the only place that spells them), which payload fields
are indexed and how, the ids of meta points, the RRF constant and the names of the search legs;
a ``chunker.windows.Window`` as a payload and back (``window_payload``, ``window_from_payload``)
and a payload as the read side's ``StoredWindow`` (``stored_window``); and the rules every
adapter applies alike at the port boundary: which windows a ``SearchFilter`` lets through
(``eligibility``), the listing order (``listing_key``), and the checks on ids, limits, vectors,
window points and meta entries (all ``ValueError``/``TypeError``, naming the field).

Must not: do I/O or import qdrant_edge / qdrant_client (each adapter maps these plain values
onto its own library's types).
"""

from __future__ import annotations

import dataclasses
import json
import math
import uuid
from typing import Any, Iterable, Sequence

from chunker.context import context_rows, dense_row_texts
from chunker.windows import StoredMessage, Window, render_text
from daemon.index.port import (
    IndexMeta,
    RoomCursor,
    RoomEntry,
    SearchFilter,
    SparseVector,
    StoredWindow,
    WindowMessage,
    WindowPoint,
)

# The dense vector of a window is a multivector: one row per message (``<localpart>: <body>``
# embedded alone), in the order of the payload's ``messages``, then one context row for each
# message that ``context_of`` lists, in that order (the message embedded with the line it answers,
# ``chunker.context``), compared by MaxSim. With a single query vector MaxSim is the best row's
# cosine, so a window ranks by its best message, read alone or with its earlier line: what lifted
# paraphrases on the dev queries and the outside sets (docs/quality.md), with one point per window.
# The name stays "dense": a reader serving an older generation (one plain vector per window)
# until the rebuild is swapped in still answers the same single-vector query.
DENSE = "dense"
SPARSE = "bm25"

KIND = "kind"
KIND_WINDOW = "window"
KIND_META = "meta"
CORPUS = "corpus"
CORPUS_CHAT = "chat"

# Window payload fields (``window_payload``).
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
CLOSED = "closed"
TEXT = "text"
CHAT_VERSION = "chat_version"
# The index of the message each context row belongs to, in row order (``chunker.context``).
CONTEXT_OF = "context_of"
# The thread a window lays out (its root's event id), None for the main timeline; and the same as
# one keyword a filter can match either way: the root's id, or ``TIMELINE_MAIN`` (an event id
# starts with "$", so the two never meet).
THREAD_ROOT = "thread_root"
TIMELINE = "timeline"
TIMELINE_MAIN = "main"
# Fields of each entry of ``messages``.
EVENT_ID = "event_id"
SENDER = "sender"
TS = "ts"
BODY = "body"
REPLY_TO = "reply_to"  # the event id the message replies to, or None
DISPLAY_NAME = "display_name"  # optional: the sender's display name when it was sent

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
    TIMELINE: "keyword",
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

# How one text's dense and lexical legs are fused (the spec fixes only the RRF across texts):
# each leg's scores over its own candidates are min-max scaled to [0, 1] (the best candidate 1,
# the deepest 0) and summed with these weights (``daemon.index.queries.fuse_legs``). Calibrated
# on the dev queries of bench/queries (bench/tune.py, bench/results.md): rank-based RRF threw
# away how far ahead a leg's best hit was. With window vectors BM25 needed weight 2 (its sharp
# peaks on identifiers were the strongest evidence); with the dense leg over single messages
# equal weights were best on dev (r@5 0.90, paraphrase 0.70, against 0.87-0.88 for 1:2 and for
# a third leg of window vectors). These are the weights of a query that names none; the reader
# names them per text (``daemon.reader.search.leg_weights``).
LEG_WEIGHTS = {LEG_DENSE: 1.0, LEG_LEXICAL: 1.0}

# Each leg of a hybrid query ranks this many candidates (at least) before fusion.
_PREFETCH_FLOOR = 50

# The dense leg scans the 1-bit copies of the message vectors (``edge_writer.SegmentLayout.scan_copy``, a
# server's quantisation alike), keeps this many times its depth, and ranks those by the float32
# originals. 4: the smallest factor with margin at which the rescored top 10 equalled the exact
# float32 scan's on every dev query (3 did too, 2 missed one; bench/quantisation.py,
# bench/results.md).
RESCORE_OVERSAMPLING = 4


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


def room_entry_key(room_id: str) -> str:
    """The meta key of a room's directory entry (``RoomEntry``: its names and routing servers)."""
    return f"room:{room_id}"


def room_of_entry_key(key: Any) -> str | None:
    """The room id a ``room:<room_id>`` meta key names, or None for any other key."""
    prefix = room_entry_key("")
    if isinstance(key, str) and key.startswith(prefix) and len(key) > len(prefix):
        return key[len(prefix) :]
    return None


def room_meta_point_ids(room_id: str) -> list[str]:
    """The meta points ``purge_room`` drops with a room's windows: its cursor first (the spec's
    order: a crash after it re-reads the room from the start), then its directory entry. The
    purge record stays (it says which spans were applied)."""
    return [meta_point_id(cursor_key(room_id)), meta_point_id(room_entry_key(room_id))]


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


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(x for x in value if isinstance(x, str) and x) if isinstance(value, (list, tuple)) else ()


def room_entry_value(entry: RoomEntry) -> dict[str, Any]:
    """The stored form of a room's directory entry (the value of meta ``room:<room_id>``)."""
    return {
        "room_id": entry.room_id,
        "name": entry.name,
        "canonical_alias": entry.canonical_alias,
        "alt_aliases": list(entry.alt_aliases),
        "aliases": list(entry.aliases),
        "allowed_as": list(entry.allowed_as),
        "via": list(entry.via),
    }


def room_entry_from_value(value: Any, room_id: str | None = None) -> RoomEntry | None:
    """A stored directory entry back, or None when it is missing, unreadable or of another room."""
    if not isinstance(value, dict) or not isinstance(value.get("room_id"), str) or not value["room_id"]:
        return None
    if room_id is not None and value["room_id"] != room_id:
        return None

    def text(name: str) -> str | None:
        return value[name] if isinstance(value.get(name), str) and value[name] else None

    return RoomEntry(
        room_id=value["room_id"],
        name=text("name"),
        canonical_alias=text("canonical_alias"),
        alt_aliases=_strings(value.get("alt_aliases")),
        aliases=_strings(value.get("aliases")),
        allowed_as=_strings(value.get("allowed_as")),
        via=_strings(value.get("via")),
    )


def room_entries_from_meta(payloads: Any) -> dict[str, RoomEntry]:
    """{room_id: directory entry} from meta point payloads (others are skipped)."""
    entries: dict[str, RoomEntry] = {}
    for payload in payloads:
        room_id = room_of_entry_key((payload or {}).get(META_KEY))
        if room_id is not None:
            entry = room_entry_from_value(payload.get(META_VALUE), room_id)
            if entry is not None:
                entries[room_id] = entry
    return entries


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


def window_payload(window: Window, *, room_alias: str | None, chat_version: str) -> dict[str, Any]:
    """The payload of a ``kind="window"`` point (docs/design.md, "Index data model"). Derived
    fields (``text``, ``senders``, ``event_ids``, ``n_messages``, first/last ids and times) are
    recomputed here and ignored by ``window_from_payload``, its inverse."""
    return {
        KIND: KIND_WINDOW,
        CORPUS: CORPUS_CHAT,
        ROOM_ID: window.room_id,
        ROOM_ALIAS: room_alias,
        CHUNK_ID: window.point_id,
        ANCHOR_ID: window.anchor_id,
        FIRST_EVENT_ID: window.first_event_id,
        LAST_EVENT_ID: window.last_event_id,
        TS_START: window.ts_start,
        TS_END: window.ts_end,
        MESSAGES: [_message_payload(m) for m in window.messages],
        EVENT_IDS: [m.event_id for m in window.messages],
        SENDERS: sorted({m.sender for m in window.messages}),
        REDACTED_IDS: list(window.redacted_ids),
        CLOSED: window.closed,
        THREAD_ROOT: window.thread_root,
        TIMELINE: timeline_of(window.thread_root),
        N_MESSAGES: len(window.messages),
        CONTEXT_OF: [i for i, _ in context_rows(window.messages)],
        TEXT: render_text(window),
        CHAT_VERSION: chat_version,
    }


def timeline_of(thread_root: str | None) -> str:
    """The ``timeline`` keyword of a window of ``thread_root`` (None: the main timeline)."""
    return TIMELINE_MAIN if thread_root is None else thread_root


def _optional_id(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"window payload: {name} must be a non-empty string or null, got {type(value).__name__}")
    return value


def _message_payload(m: StoredMessage) -> dict[str, Any]:
    out: dict[str, Any] = {EVENT_ID: m.event_id, SENDER: m.sender, TS: m.ts, BODY: m.body, REPLY_TO: m.reply_to}
    if m.display_name is not None:
        out[DISPLAY_NAME] = m.display_name
    return out


def _display_name(raw: dict[str, Any]) -> str | None:
    name = raw.get(DISPLAY_NAME)
    return name if isinstance(name, str) and name else None


def _need(value: Any, kind: type, name: str) -> Any:
    # bool is an int subclass; a boolean timestamp is malformed, not 0 or 1.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"window payload: {name} must be {kind.__name__}, got {type(value).__name__}")
    return value


def window_from_payload(payload: dict[str, Any]) -> Window:
    """The window a stored payload describes. Raises ``ValueError`` naming the first bad field."""
    _need(payload, dict, "payload")
    if payload.get(KIND) != KIND_WINDOW:
        raise ValueError(f"window payload: kind must be 'window', got {payload.get(KIND)!r}")
    messages = []
    for i, raw in enumerate(_need(payload.get(MESSAGES), list, MESSAGES)):
        _need(raw, dict, f"messages[{i}]")
        messages.append(
            StoredMessage(
                event_id=_need(raw.get(EVENT_ID), str, f"messages[{i}].event_id"),
                sender=_need(raw.get(SENDER), str, f"messages[{i}].sender"),
                ts=_need(raw.get(TS), int, f"messages[{i}].ts"),
                body=_need(raw.get(BODY), str, f"messages[{i}].body"),
                reply_to=_optional_id(raw.get(REPLY_TO), f"messages[{i}].reply_to"),
                display_name=_display_name(raw),
            )
        )
    redacted = _need(payload.get(REDACTED_IDS), list, REDACTED_IDS)
    window = Window(
        room_id=_need(payload.get(ROOM_ID), str, ROOM_ID),
        anchor_id=_need(payload.get(ANCHOR_ID), str, ANCHOR_ID),
        messages=messages,
        redacted_ids=[_need(x, str, f"redacted_ids[{i}]") for i, x in enumerate(redacted)],
        closed=_need(payload.get(CLOSED), bool, CLOSED),
        thread_root=_optional_id(payload.get(THREAD_ROOT), THREAD_ROOT),
    )
    if CHUNK_ID in payload and payload[CHUNK_ID] != window.point_id:
        raise ValueError("window payload: chunk_id does not match room_id and anchor_id")
    return window


def _lenient_messages(payload: dict[str, Any] | None) -> list[StoredMessage]:
    out = []
    for m in (payload or {}).get(MESSAGES) or ():
        if isinstance(m, dict):
            ts = m.get(TS)
            out.append(
                StoredMessage(
                    str(m.get(EVENT_ID) or ""),
                    str(m.get(SENDER) or ""),
                    ts if isinstance(ts, int) and not isinstance(ts, bool) else 0,
                    str(m.get(BODY) or ""),
                    m.get(REPLY_TO) if isinstance(m.get(REPLY_TO), str) and m.get(REPLY_TO) else None,
                    _display_name(m),
                )
            )
    return out


def row_texts(payload: dict[str, Any] | None) -> list[str]:
    """What each dense row of a stored window was embedded from, in row order
    (``chunker.context.dense_row_texts``). A payload whose ``context_of`` does not list the
    context rows its messages make (one written before context rows) gets its message lines
    only, so no stored row is ever taken for another text."""
    messages = _lenient_messages(payload)
    texts, context = dense_row_texts(messages)
    if context_of(payload, len(messages)) != tuple(context):
        return texts[: len(messages)]
    return texts


def context_of(payload: dict[str, Any] | None, n_messages: int) -> tuple[int, ...]:
    """The message each context row of a stored window belongs to (``CONTEXT_OF``), or ``()``
    when the payload lists none or lists them wrongly (not ascending message indexes below
    ``n_messages``): then its rows are read as one per message, as before context rows."""
    raw = (payload or {}).get(CONTEXT_OF)
    if not isinstance(raw, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        return ()
    if any(not 0 < i < n_messages for i in raw) or any(a >= b for a, b in zip(raw, raw[1:])):
        return ()
    return tuple(raw)


def stored_window(payload: dict[str, Any] | None, point_id: Any = None) -> StoredWindow:
    """A stored window payload as the read side sees it; ``point_id`` stands in for a missing
    chunk id, as in ``listing_key``."""
    payload = payload or {}
    return StoredWindow(
        chunk_id=str(payload.get(CHUNK_ID) or point_id),
        room_id=str(payload.get(ROOM_ID) or ""),
        room_alias=payload.get(ROOM_ALIAS),
        first_event_id=payload.get(FIRST_EVENT_ID),
        last_event_id=payload.get(LAST_EVENT_ID),
        ts_start=int(payload.get(TS_START) or 0),
        ts_end=int(payload.get(TS_END) or 0),
        messages=tuple(
            WindowMessage(
                str(m.get(EVENT_ID) or ""),
                str(m.get(SENDER) or ""),
                int(m.get(TS) or 0),
                str(m.get(BODY) or ""),
                m.get(REPLY_TO) if isinstance(m.get(REPLY_TO), str) and m.get(REPLY_TO) else None,
                _display_name(m),
            )
            for m in payload.get(MESSAGES) or ()
            if isinstance(m, dict)
        ),
        thread_root=payload.get(THREAD_ROOT) if isinstance(payload.get(THREAD_ROOT), str) else None,
    )


def listing_key(payload: dict[str, Any] | None, point_id: Any) -> tuple[int, str]:
    """The total order of listings and neighbours: ``(ts_start, chunk_id)``, the point id
    standing in for a missing chunk id."""
    payload = payload or {}
    return (int(payload.get(TS_START) or 0), str(payload.get(CHUNK_ID) or point_id))


# One condition of a filter, in plain values each adapter maps onto its own library's types:
# ("match", field, value), ("any", field, values) or ("range", field, {"gte"|"lte"|...: int}).
Condition = tuple[str, str, Any]

IS_WINDOW: Condition = ("match", KIND, KIND_WINDOW)
IS_META: Condition = ("match", KIND, KIND_META)
HAS_MESSAGES: Condition = ("range", N_MESSAGES, {"gte": 1})


def in_room(room_id: str) -> Condition:
    return ("match", ROOM_ID, room_id)


def in_timeline(thread_root: str | None) -> Condition:
    """Windows of one thread (its root's id), or of the main timeline (None)."""
    return ("match", TIMELINE, timeline_of(thread_root))


def ts_start_in(**bounds: int) -> Condition:
    return ("range", TS_START, bounds)


def eligibility(flt: SearchFilter) -> list[Condition] | None:
    """The conditions a window must meet to be searched or listed under ``flt``, or None when
    ``flt`` matches nothing (``room_ids=()``: an unknown room resolves to nothing, never to
    everything). Always a window, never an empty layout record."""
    if not isinstance(flt, SearchFilter):
        raise TypeError("flt must be a daemon.index.port.SearchFilter")
    for name in ("room_ids", "senders"):
        if isinstance(getattr(flt, name), str):
            raise TypeError(f"SearchFilter.{name} must be a tuple of strings, not a single string")
    if flt.room_ids is not None and len(flt.room_ids) == 0:
        return None
    conditions: list[Condition] = [IS_WINDOW, HAS_MESSAGES]
    if flt.room_ids is not None:
        conditions.append(("any", ROOM_ID, tuple(flt.room_ids)))
    if flt.senders:  # senders=() is "no constraint", as port.SearchFilter says
        conditions.append(("any", SENDERS, tuple(flt.senders)))
    if flt.after_ms is not None:
        conditions.append(("range", TS_END, {"gte": int(flt.after_ms)}))
    if flt.before_ms is not None:
        conditions.append(ts_start_in(lte=int(flt.before_ms)))
    return conditions


# ---------------------------------------------------------------------------------------------
# Checks at the port boundary: every adapter refuses the same inputs with the same error.


def require_room_id(room_id: Any) -> str:
    if not isinstance(room_id, str) or not room_id:
        raise ValueError(f"room_id must be a non-empty string, got {room_id!r}")
    return room_id


def require_limit(limit: Any, name: str = "limit") -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {limit!r}")
    return limit


def require_event_id(event_id: Any) -> str:
    if not isinstance(event_id, str) or not event_id:
        raise ValueError(f"event_id must be a non-empty string, got {event_id!r}")
    return event_id


def require_uuid(value: Any, field: str) -> str:
    """``value`` as a canonical UUID string (the form both engines store point ids in)."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(f"{field} holds {value!r}, not a UUID string") from None


def after_key(after: Any) -> tuple[int, str] | None:
    """A listing's ``after`` as the ``(ts_start, chunk_id)`` key it continues from."""
    if after is None:
        return None
    try:
        ts, chunk_id = after
        return (int(ts), str(chunk_id))
    except (TypeError, ValueError):
        raise ValueError(f"after must be a (ts_start, chunk_id) pair, got {after!r}") from None


def dense_vector(values: Sequence[float], dim: int | None, where: str = "", name: str = "dense") -> list[float]:
    """A dense vector as floats, refused when its length is not ``dim`` (when the index's dim is
    known) or it holds a NaN or infinite value."""
    # map() rather than comprehensions: a backfill checks one 384-float row per message, and
    # these two loops in C are most of what the refresher's writes cost on its event loop.
    try:
        vector = list(map(float, values))
    except (TypeError, ValueError):
        raise ValueError(f"{where}{name} must be a sequence of numbers") from None
    if dim is not None and len(vector) != dim:
        raise ValueError(f"{where}{name} has {len(vector)} dimensions, the index has {dim}")
    if not all(map(math.isfinite, vector)):
        raise ValueError(f"{where}{name} holds a NaN or infinite value")
    return vector


def dense_rows(rows: Any, dim: int | None, n_messages: int, where: str = "", n_context: int = 0) -> list[list[float]]:
    """A window's dense multivector checked: one finite vector of ``dim`` per message, in
    message order (``n_messages`` rows), then one per context row (``n_context``), so a row's
    similarity names its message."""
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError(f"{where}dense must be a non-empty list of vectors, one per message")
    if not all(isinstance(row, Sequence) and not isinstance(row, (str, bytes)) for row in rows):
        raise ValueError(f"{where}dense must be a list of vectors (one per message), not one vector")
    if len(rows) != n_messages + n_context:
        context = f" and {n_context} context rows" if n_context else ""
        raise ValueError(f"{where}dense has {len(rows)} vectors for {n_messages} messages{context}")
    return [dense_vector(row, dim, where, f"dense[{i}]") for i, row in enumerate(rows)]


def sparse_vector(sparse: SparseVector | None, where: str = "") -> SparseVector | None:
    """A sparse vector checked (indices distinct and non-negative, one finite value each), or
    None when it has no terms (a text with no known term has no lexical vector)."""
    if sparse is None or not sparse.indices:
        return None
    if len(sparse.indices) != len(sparse.values):
        raise ValueError(f"{where}sparse has {len(sparse.indices)} indices but {len(sparse.values)} values")
    if len(set(sparse.indices)) != len(sparse.indices) or min(sparse.indices) < 0:
        raise ValueError(f"{where}sparse indices must be distinct and non-negative")
    values = tuple(float(v) for v in sparse.values)
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{where}sparse holds a NaN or infinite value")
    return SparseVector(tuple(int(i) for i in sparse.indices), values)


def checked_point(room_id: str, i: int, point: Any, dim: int | None) -> WindowPoint:
    """``upserts[i]`` of ``write_windows(room_id, ...)`` checked and normalised, for each writer to
    map onto its engine's type: a ``WindowPoint`` with a UUID id, a window payload of ``room_id``,
    one dense vector of the index's ``dim`` per payload message (or none: an empty window) and a
    sane sparse vector (kept only beside the dense ones)."""
    where = f"write_windows for {room_id}: upserts[{i}]."
    if not isinstance(point, WindowPoint):
        raise TypeError(f"{where[:-1]} must be a daemon.index.port.WindowPoint")
    point_id = require_uuid(point.point_id, f"{where}point_id")
    payload = dict(point.payload)
    if payload.get(ROOM_ID) != room_id:
        raise ValueError(f"{where}payload.room_id is {payload.get(ROOM_ID)!r}, expected {room_id!r}")
    if payload.setdefault(KIND, KIND_WINDOW) != KIND_WINDOW:
        raise ValueError(f"{where}payload.kind is {payload[KIND]!r}, expected {KIND_WINDOW!r}")
    payload.setdefault(CORPUS, CORPUS_CHAT)
    if point.dense is None:
        return WindowPoint(point_id, None, None, payload)
    messages = payload.get(MESSAGES)
    n_messages = len(messages) if isinstance(messages, list) else 0
    listed = payload.get(CONTEXT_OF, [])
    n_context = len(context_of(payload, n_messages))
    if listed and not n_context:
        raise ValueError(f"{where}payload.context_of must list ascending message indexes from 1 to {n_messages - 1}")
    rows = dense_rows(point.dense, dim, n_messages, where, n_context)
    return WindowPoint(point_id, rows, sparse_vector(point.sparse, where), payload)


def checked_deletes(room_id: str, delete_ids: Sequence[Any]) -> list[str]:
    return [require_uuid(pid, f"write_windows for {room_id}: delete_ids[{i}]") for i, pid in enumerate(delete_ids)]


def require_meta(meta: Any) -> IndexMeta:
    if not isinstance(meta, IndexMeta):
        raise TypeError("meta must be a daemon.index.port.IndexMeta")
    if isinstance(meta.dim, bool) or not isinstance(meta.dim, int) or meta.dim < 1:
        raise ValueError(f"IndexMeta.dim must be a positive integer, got {meta.dim!r}")
    return meta


def require_cursor(cursor: Any) -> RoomCursor:
    if not isinstance(cursor, RoomCursor):
        raise TypeError("cursor must be a daemon.index.port.RoomCursor")
    require_room_id(cursor.room_id)
    return cursor
