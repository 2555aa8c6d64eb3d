"""Writing the reader's audit line: one journal line for every request.

Owns: the line each request leaves (search, listing, window, thread, rooms, ``status``, which
carries no query, and refused), the keyed digest of a query that stands for its text, the key
file it is keyed with, and ``AuditUnwritable`` when a line cannot be written.

Must not: put a query text in the line (only its HMAC digest, or nothing without a key), decide
what a client-sent value may appear as (``daemon.reader.audit`` does), or answer a request: a
request whose line cannot be written is refused by ``daemon.reader.requests``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import time
from pathlib import Path
from typing import Any

from daemon.config import refuse_unprotected_secret
from daemon.errors import OperationalError
from daemon.reader.audit import audited_field, audited_filters, bounded
from daemon.reader.protocol import Request, RoomsRequest, SearchRequest, ThreadRequest, WindowRequest
from daemon.reader.search import WindowQuery, canonical_query


class AuditUnwritable(OperationalError):
    """The audit line of a request could not be written: the request is not answered."""


def read_audit_key(path: str | os.PathLike[str] | None) -> bytes | None:
    """The HMAC key for query digests, from a credential file. No file, no key, no digest. A
    key file others may read is refused (``ConfigError``, exit 2): digests keyed with a secret
    anyone holds hide nothing."""
    if not path:
        return None
    with open(path, "rb") as handle:
        refuse_unprotected_secret(os.fstat(handle.fileno()), "audit_key_file", Path(path))
        key = handle.read().strip()
    return key or None


def query_digest(key: bytes | None, canonical: bytes) -> str | None:
    if key is None:
        return None
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()


def operation(request: Any) -> str:
    """The ``op`` an audit line names a parsed request by."""
    if isinstance(request, SearchRequest):
        return "search" if request.query.terms else "list"
    if isinstance(request, WindowRequest):
        return "window"
    if isinstance(request, ThreadRequest):
        return "thread"
    if isinstance(request, RoomsRequest):
        return "rooms"
    return "status"


class AuditLog:
    """The audit lines of one reader, written to ``log`` and keyed with ``key`` (None: no digests)."""

    def __init__(self, log: Any, key: bytes | None):
        self._log = log
        self.key = key

    def request(
        self,
        request: Request,
        started: float,
        *,
        result: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        error: str | None = None,
        field: str | None = None,
    ) -> None:
        """One line per request: the keyed digest of the query (never its text), the filters,
        what was returned (window ids, their message event ids, ranks per text leg, legs), and
        how many windows eligibility excluded. Raises ``AuditUnwritable`` if it cannot be written."""
        fields: dict[str, Any] = {"op": operation(request), "outcome": error or "ok"}
        if isinstance(request, SearchRequest):
            fields.update(self._search_fields(request, result, extra or {}))
        elif isinstance(request, (WindowRequest, ThreadRequest)):
            fields.update(self._window_fields(request, result, extra or {}))
        else:
            fields["query_digest"] = None
            fields["filters"] = None
        if field is not None:
            fields["field"] = audited_field(field)
        fields["duration_ms"] = round((time.monotonic() - started) * 1000, 2)
        self._write(bounded(fields))

    def _search_fields(
        self, request: SearchRequest, result: dict[str, Any] | None, extra: dict[str, Any]
    ) -> dict[str, Any]:
        query = request.query
        fields: dict[str, Any] = {
            "query_digest": query_digest(self.key, canonical_query(query)) if query.texts else None,
            "n_texts": len(query.texts),
            "top_k": query.top_k,
            # A request refused before the index was asked records no filter value in the clear.
            "filters": extra.get("filters") or audited_filters(query.filters(), {}, (), self.key),
            "sort": query.sort,
            "continued": query.cursor is not None,
        }
        if result is not None:
            fields["window_ids"] = [hit.get("chunk_id") for hit in result.get("hits", [])]
            fields["returned"] = extra.get("returned", [])
            fields["excluded"] = extra.get("excluded")
            fields["candidates"] = extra.get("candidates")
            fields["degraded"] = result.get("degraded")
        return fields

    def _window_fields(
        self, request: WindowRequest | ThreadRequest, result: dict[str, Any] | None, extra: dict[str, Any]
    ) -> dict[str, Any]:
        window = request.query
        canonical = json.dumps({"event_id": window.event_id}, separators=(",", ":")).encode("utf-8")
        fields: dict[str, Any] = {"query_digest": query_digest(self.key, canonical), "filters": None}
        if isinstance(window, WindowQuery):
            fields["before"] = window.before
            fields["after"] = window.after
        else:
            fields["top_k"] = window.top_k
            fields["continued"] = window.cursor is not None
        if result is not None:
            fields["window_ids"] = list(result.get("chunk_ids", []))
            fields["returned"] = extra.get("returned", [])
            fields["event_ids"] = extra.get("event_ids", [])
            fields["excluded"] = None  # a window has no eligibility filter
        return fields

    def refusal(self, code: str, field: str | None, started: float) -> None:
        """The line of a request refused before it parsed (or a line refused on the wire)."""
        self._write(
            {
                "op": None,
                "outcome": code,
                "field": audited_field(field),
                "query_digest": None,
                "filters": None,
                "duration_ms": round((time.monotonic() - started) * 1000, 2),
            }
        )

    def _write(self, fields: dict[str, Any]) -> None:
        try:
            self._log.info("request_answered", **fields)
        except Exception as exc:  # a full disk, a closed journal stream, anything
            with contextlib.suppress(Exception):
                self._log.error("audit_unwritable", error=type(exc).__name__)
            raise AuditUnwritable(type(exc).__name__) from exc
