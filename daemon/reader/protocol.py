"""The reader's wire protocol: one JSON object per line each way (NDJSON), version 1.

Owns: the request and reply shapes, the line size limit, turning a received line into a typed
request (or a ``ProtocolError`` that names the field at fault), and encoding replies. The full
description for humans is ``docs/protocol.md``; keep the two in step.

Must not: do I/O, or import anything outside the standard library and ``daemon.reader.search`` /
``daemon.index.port`` — the stdlib-only CLI client uses it to build requests and read replies.

Request:  ``{"v": 1, "id": <string|int, optional, echoed>, "op": "search"|"window"|"thread"|"status"|"rooms", ...}``
Reply:    ``{"v": 1, "id": <echoed>, "ok": true, "result": {...}}``
          ``{"v": 1, "id": <echoed>, "ok": false, "error": {"code", "field", "message"}}``
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Union

from daemon.errors import UsageError
from daemon.reader.search import (
    Query,
    QueryError,
    ThreadQuery,
    WindowQuery,
    make_query,
    make_thread_query,
    make_window_query,
)
from daemon.reader.times import TimeSpec, spec_text
from daemon.reader.wire import (  # noqa: F401  (the codes, named here for the reader's modules)
    BAD_CURSOR,
    BAD_JSON,
    BAD_REQUEST,
    BUSY,
    INTERNAL,
    LINE_TIMEOUT,
    LINE_TOO_LONG,
    NOT_FOUND,
    PROTOCOL_VERSION,
    STALE_CURSOR,
    UNAVAILABLE,
    UNKNOWN_OP,
    UNSUPPORTED_VERSION,
    USAGE_ERRORS,
)

# A maximal search (8 texts of 1,000 bytes, every character escaped as \\uXXXX) fits with room.
MAX_LINE_BYTES = 64 * 1024

OP_FIELDS: dict[str, frozenset[str]] = {
    "search": frozenset({"texts", "rooms", "senders", "after", "before", "top_k", "cursor", "sort"}),
    "window": frozenset({"event_id", "before", "after"}),
    "thread": frozenset({"event_id", "top_k", "cursor"}),
    "status": frozenset(),
    "rooms": frozenset(),
}
ENVELOPE_FIELDS = frozenset({"v", "id", "op"})


class ProtocolError(UsageError):
    """A request the reader refuses. The reply carries ``code``, ``field`` and ``message``."""

    def __init__(self, code: str, message: str, field: str | None = None, request_id: Any = None):
        super().__init__(f"{code}: {field + ': ' if field else ''}{message}")
        self.code = code
        self.message = message
        self.field = field
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class SearchRequest:
    id: Any
    query: Query


@dataclass(frozen=True, slots=True)
class WindowRequest:
    id: Any
    query: WindowQuery


@dataclass(frozen=True, slots=True)
class ThreadRequest:
    id: Any
    query: ThreadQuery


@dataclass(frozen=True, slots=True)
class StatusRequest:
    id: Any


@dataclass(frozen=True, slots=True)
class RoomsRequest:
    """The searchable rooms (``daemon.reader.room_list``)."""

    id: Any


Request = Union[SearchRequest, WindowRequest, ThreadRequest, StatusRequest, RoomsRequest]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_request(line: bytes | str) -> Request:
    """One received line (without its newline) to a validated request."""
    data = _json_object(line)
    request_id, op = _envelope(data)
    try:
        return _request_of(op, request_id, data)
    except QueryError as exc:
        raise ProtocolError(exc.code or BAD_REQUEST, exc.message, exc.field, request_id) from None


def _json_object(line: bytes | str) -> dict[str, Any]:
    """The line as the JSON object it must be: within the length limit, UTF-8, no NaN."""
    if isinstance(line, bytes):
        if len(line) > MAX_LINE_BYTES:
            raise ProtocolError(LINE_TOO_LONG, f"a request line is at most {MAX_LINE_BYTES} bytes")
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(BAD_JSON, "a request line must be UTF-8") from None
    try:
        data = json.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise ProtocolError(BAD_JSON, "a request line must be one JSON object") from None
    if not isinstance(data, dict):
        raise ProtocolError(BAD_JSON, "a request line must be one JSON object")
    return data


def _envelope(data: dict[str, Any]) -> tuple[Any, str]:
    """The request's id and op, once the id, the version, the op and the op's fields are checked."""
    request_id = data.get("id")
    if request_id is not None and (
        isinstance(request_id, bool) or not isinstance(request_id, (str, int)) or len(str(request_id)) > 128
    ):
        raise ProtocolError(BAD_REQUEST, "must be a string or an integer (at most 128 characters)", "id")

    version = data.get("v")
    if version is None:
        raise ProtocolError(BAD_REQUEST, f"is required (this reader speaks {PROTOCOL_VERSION})", "v", request_id)
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise ProtocolError(UNSUPPORTED_VERSION, f"this reader speaks version {PROTOCOL_VERSION}", "v", request_id)

    op = data.get("op")
    if not isinstance(op, str) or op not in OP_FIELDS:
        raise ProtocolError(UNKNOWN_OP, f"must be one of {', '.join(sorted(OP_FIELDS))}", "op", request_id)
    for key in data:
        if key not in ENVELOPE_FIELDS and key not in OP_FIELDS[op]:
            raise ProtocolError(BAD_REQUEST, f"is not a field of {op}", str(key)[:64], request_id)
    return request_id, op


def _request_of(op: str, request_id: Any, data: dict[str, Any]) -> Request:
    """The request of ``op``, its query validated (``QueryError`` names the field at fault)."""
    if op == "search":
        return SearchRequest(
            request_id,
            make_query(
                data.get("texts", []),
                rooms=data.get("rooms"),
                senders=data.get("senders"),
                after=data.get("after"),
                before=data.get("before"),
                top_k=data.get("top_k"),
                cursor=data.get("cursor"),
                sort=data.get("sort"),
            ),
        )
    if op == "window":
        return WindowRequest(request_id, make_window_query(data.get("event_id"), data.get("before"), data.get("after")))
    if op == "thread":
        return ThreadRequest(request_id, make_thread_query(data.get("event_id"), data.get("top_k"), data.get("cursor")))
    if op == "rooms":
        return RoomsRequest(request_id)
    return StatusRequest(request_id)


def search_request(query: Query, request_id: Any = None) -> dict[str, Any]:
    """The wire form of a validated query (what the client sends)."""
    body: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": "search", "texts": list(query.texts)}
    if request_id is not None:
        body["id"] = request_id
    # ``rooms`` / ``senders`` hold any ``from:`` / ``in:`` typed in a text too; the reader, which
    # parses the texts again, merges them into the same lists, so nothing counts twice.
    if query.rooms is not None:
        body["rooms"] = list(query.rooms)
    if query.senders is not None:
        body["senders"] = list(query.senders)
    # A relative time travels as written (normalised): the reader's clock resolves it.
    if query.after_spec is not None:
        body["after"] = wire_time(query.after_spec)
    if query.before_spec is not None:
        body["before"] = wire_time(query.before_spec)
    body["top_k"] = query.top_k
    if query.cursor is not None:
        body["cursor"] = query.cursor
    if query.sort_given:
        body["sort"] = query.sort
    return body


def wire_time(spec: TimeSpec) -> int | str:
    return spec.absolute_ms if spec.absolute_ms is not None else spec_text(spec)


def window_request(query: WindowQuery, request_id: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": PROTOCOL_VERSION,
        "op": "window",
        "event_id": query.event_id,
        "before": query.before,
        "after": query.after,
    }
    if request_id is not None:
        body["id"] = request_id
    return body


def thread_request(query: ThreadQuery, request_id: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": "thread", "event_id": query.event_id, "top_k": query.top_k}
    if query.cursor is not None:
        body["cursor"] = query.cursor
    if request_id is not None:
        body["id"] = request_id
    return body


def encode_line(obj: dict[str, Any]) -> bytes:
    """One line of UTF-8 JSON. A string holding a lone surrogate (an ``id`` or a field name a
    request sent as a ``\\udXXX`` escape, echoed back) has no UTF-8 form: the line is then
    written all-ASCII, the surrogate kept as the JSON escape it arrived as."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(obj, separators=(",", ":")).encode("ascii") + b"\n"


def ok_reply(request_id: Any, result: dict[str, Any]) -> bytes:
    return encode_line({"v": PROTOCOL_VERSION, "id": request_id, "ok": True, "result": result})


def error_reply(request_id: Any, code: str, message: str, field: str | None = None) -> bytes:
    return encode_line(
        {
            "v": PROTOCOL_VERSION,
            "id": request_id,
            "ok": False,
            "error": {"code": code, "field": field, "message": message},
        }
    )


def parse_reply(line: bytes | str) -> dict[str, Any]:
    """A reply line as the client reads it; raises ValueError if it is not a version-1 reply."""
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("v") != PROTOCOL_VERSION or not isinstance(data.get("ok"), bool):
        raise ValueError("not a version 1 reply")
    if data["ok"] and not isinstance(data.get("result"), dict):
        raise ValueError("reply without a result")
    if not data["ok"] and not isinstance(data.get("error"), dict):
        raise ValueError("reply without an error")
    return data
